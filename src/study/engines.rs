//! The engine of one batch of a study's variants and its run through the driver: shared by the
//! variants run from t = 0 (`run_variants`) and those continued from checkpoints
//! (`resume_variants`).

use super::VariantError;
use crate::engine::{BatchEngine, CpuEngine, Precision, Separate};
use crate::error::EngineError;
use crate::model::Model;
use crate::run::{Job, RunError, RunOptions, Summary};
use crate::scenario::Backend;

/// Why a batch's engine did not start: the GPU's error, or replica r's engine's (in the
/// engine's particle order; the caller maps it to the user's).
pub(super) enum StartError {
    Gpu(crate::gpu::GpuError),
    Engine(usize, EngineError),
}

/// The engine of a batch of `models` (each in the order its engine runs it): on the GPU one
/// state holding every replica (`precision`, f32 when not given), on the CPU one engine per
/// replica, stepped in parallel.
pub(super) fn batch_engine(
    backend: Backend,
    precision: Option<Precision>,
    integrator: crate::integrator::Integrator,
    dt: f64,
    models: &[&Model],
    gpu: crate::gpu::GpuOptions,
) -> Result<Box<dyn BatchEngine>, StartError> {
    if backend == Backend::Gpu {
        let precision = precision.unwrap_or(Precision::F32);
        let made =
            crate::gpu::GpuEngine::new_batch(models, integrator, dt, precision, crate::gpu::AdapterChoice::Any, gpu);
        return Ok(Box::new(made.map_err(StartError::Gpu)?));
    }
    use rayon::prelude::*;
    let made: Result<Vec<CpuEngine>, StartError> = models
        .par_iter()
        .enumerate()
        .map(|(r, m)| CpuEngine::new(m, integrator, dt).map_err(|e| StartError::Engine(r, e)))
        .collect();
    Ok(Box::new(Separate::new(made?, true)))
}

/// Runs `jobs` (job r is variant `ks[r]`, replica r of `engine`) through the run driver, telling
/// `tick` each variant's result as it finishes; returns them in job order.
pub(super) fn drive(
    jobs: Vec<Job<'_>>,
    ks: &[usize],
    engine: &mut dyn BatchEngine,
    bars: Option<&indicatif::MultiProgress>,
    tick: &(dyn Fn(usize, &Result<Summary, VariantError>) + Sync),
) -> Vec<(usize, Result<Summary, VariantError>)> {
    let done = |r: usize, res: &Result<Summary, RunError>| {
        let shown = match res {
            Ok(s) => Ok(s.clone()),
            Err(e) => Err(VariantError::of(e)),
        };
        tick(ks[r], &shown);
    };
    let opts = RunOptions { progress: bars.is_some(), bars: bars.cloned(), ..Default::default() };
    let results = crate::run::run_batch(jobs, engine, opts, &done);
    ks.iter().zip(results).map(|(&k, r)| (k, r.map_err(VariantError::from))).collect()
}
