//! `study --resume` of interrupted variants: each continued from its checkpoint as a replica of a
//! batch, as a fresh study's variants run (those on one engine kind, integrator and time step,
//! stopped at the same step, step together), so that a study interrupted as one GPU batch
//! continues as one, not variant by variant.

use super::engines::{StartError, batch_engine};
use super::{MAX_BATCH_PARTICLES, Study, VariantError, list, max_replicas_per_batch, variant_dir};
use crate::engine::{BatchEngine, EngineState, Precision};
use crate::error::EngineError;
use crate::output::OutputDir;
use crate::run::{Resumable, Summary, VtkOptions};
use crate::scenario::Backend;
use std::path::Path;
use std::sync::atomic::Ordering;

/// A variant ready to continue: its folder (locked) and its checked checkpoint.
struct Ready {
    k: usize,
    dir: OutputDir,
    run: Resumable,
}

/// What variants must share to continue together in one batch engine: a batch steps its
/// replicas in lockstep from one step.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Key {
    backend: Backend,
    precision: Option<Precision>,
    integrator: crate::integrator::Integrator,
    dt: u64,
    step: u64,
}

impl Key {
    fn of(r: &Resumable) -> Key {
        Key {
            backend: r.backend,
            precision: r.precision,
            integrator: r.scenario.integrator,
            dt: r.scenario.dt.to_bits(),
            step: r.checkpoint.engine.step,
        }
    }
}

/// One variant's result.
type Ran = (usize, Result<Summary, VariantError>);

/// Continues the variants `which` of `study` in `out` from their checkpoints, each on an engine
/// of the kind that wrote it, once its checkpoint is found to be the variant's (its whole
/// scenario, `t_end` included); their outputs then equal those of the variants run without
/// interruption. Variants that can step together continue as one batch (`Key`; on the GPU one
/// state, split where the device needs it, as `run_variants` splits); a batch the device has
/// no memory for is halved, and one whose engine cannot start otherwise or cannot load its
/// states is taken variant by variant, so that one bad checkpoint stops only its variant. `announce` is told each batch as it starts; `tick` each variant as
/// it finishes. After an interrupt no further batch starts.
#[allow(clippy::too_many_arguments)]
pub fn resume_variants(
    study: &Study,
    path: &Path,
    out: &Path,
    which: &[usize],
    gpu_memory: Option<u64>,
    vtk: VtkOptions,
    bars: Option<&indicatif::MultiProgress>,
    announce: &dyn Fn(String),
    tick: &(dyn Fn(usize, &Result<Summary, VariantError>) + Sync),
) -> Vec<Ran> {
    let env = Env { gpu_memory, vtk, bars, announce, tick };
    let mut ran = Vec::new();
    let mut groups: Vec<(Key, Vec<Ready>, usize)> = Vec::new();
    let max_replicas = max_replicas_per_batch();
    for &k in which {
        if crate::run::INTERRUPT.load(Ordering::SeqCst) {
            break;
        }
        let ready = match open(study, path, out, k) {
            Ok(r) => r,
            Err(e) => {
                tick(k, &Err(e.clone()));
                ran.push((k, Err(e)));
                continue;
            }
        };
        let key = Key::of(&ready.run);
        let particles = ready.run.checkpoint.model.particles.len();
        let g = match groups.iter().position(|g| g.0 == key) {
            Some(g) => g,
            None => {
                groups.push((key, Vec::new(), 0));
                groups.len() - 1
            }
        };
        groups[g].1.push(ready);
        groups[g].2 += particles;
        // Variants wait (their checkpoints in memory, their folders locked) only while their
        // batches fill: past the limits of one batch, counted over all that wait, the largest
        // runs now.
        let held: usize = groups.iter().map(|g| g.1.len()).sum();
        let held_particles: usize = groups.iter().map(|g| g.2).sum();
        if held >= max_replicas || held_particles >= MAX_BATCH_PARTICLES {
            let largest = (0..groups.len()).max_by_key(|&g| (groups[g].2, groups[g].1.len())).unwrap_or(g);
            let (key, batch, _) = groups.remove(largest);
            ran.extend(env.run_split(key, batch));
        }
    }
    for (key, batch, _) in groups {
        ran.extend(env.run_split(key, batch));
    }
    ran.sort_by_key(|r| r.0);
    ran
}

/// Variant `k`'s folder, locked, and its checkpoint, checked against the study's scenario
/// (`Resumable::open`: its whole scenario but `t_end` and `output`, and the files it read;
/// `plan_resume` compared the scenarios field by field already, and named a difference).
fn open(study: &Study, path: &Path, out: &Path, k: usize) -> Result<Ready, VariantError> {
    let fail = |message: String| VariantError { interrupted: false, message };
    let expected = study.scenario(k, path).map_err(|e| fail(e.to_string()))?;
    let dir = OutputDir::reopen(&variant_dir(out, k)).map_err(|e| fail(e.to_string()))?;
    let run = Resumable::open(&dir, None, Some(&expected)).map_err(VariantError::from)?;
    Ok(Ready { k, dir, run })
}

/// What every batch of a resume shares.
struct Env<'a> {
    gpu_memory: Option<u64>,
    vtk: VtkOptions,
    bars: Option<&'a indicatif::MultiProgress>,
    announce: &'a dyn Fn(String),
    tick: &'a (dyn Fn(usize, &Result<Summary, VariantError>) + Sync),
}

impl Env<'_> {
    fn gpu_options(&self) -> crate::gpu::GpuOptions {
        crate::gpu::GpuOptions { memory_budget: self.gpu_memory, ..Default::default() }
    }

    /// A GPU batch split into parts that each fit the device (as `split_for_device` splits a
    /// fresh study's), each run; other batches run whole.
    fn run_split(&self, key: Key, batch: Vec<Ready>) -> Vec<Ran> {
        use crate::gpu::{AdapterChoice, GpuEngine};
        if crate::run::INTERRUPT.load(Ordering::SeqCst) {
            return Vec::new();
        }
        let precision = key.precision.unwrap_or(Precision::F32);
        // Only a GPU batch of several asks the device (without one, building the engine says why).
        let limits = (key.backend == Backend::Gpu && batch.len() > 1)
            .then(|| GpuEngine::batch_limits(AdapterChoice::Any, precision, self.gpu_options()).ok())
            .flatten();
        let ranges = match limits {
            Some(limits) => {
                let owned: Vec<_> = batch.iter().map(|b| b.run.engine_model()).collect();
                let models: Vec<&crate::model::Model> = owned.iter().map(|m| m.as_ref()).collect();
                crate::gpu::split_batches(&models, precision, limits)
            }
            None => std::iter::once(0..batch.len()).collect(),
        };
        let mut rest = batch.into_iter();
        let mut ran = Vec::new();
        for r in ranges {
            ran.extend(self.run_batch(key, rest.by_ref().take(r.len()).collect()));
        }
        ran
    }

    /// Runs one batch from its checkpoints; a batch of several is halved where the device has
    /// no memory for it, and run variant by variant where its engine cannot start otherwise or
    /// cannot load the states.
    fn run_batch(&self, key: Key, batch: Vec<Ready>) -> Vec<Ran> {
        if batch.is_empty() || crate::run::INTERRUPT.load(Ordering::SeqCst) {
            return Vec::new();
        }
        let mut batch = batch;
        let mut engine = match self.engine(key, &mut batch) {
            Ok(e) => e,
            // A batch the device has no memory for is halved until it fits (as a fresh
            // study's); any other failure is taken variant by variant, so that it stops only
            // the variants it belongs to.
            Err(StartError::Gpu(crate::gpu::GpuError::OutOfMemory { .. })) if batch.len() > 1 => {
                let second = batch.split_off(batch.len() / 2);
                let mut ran = self.run_batch(key, batch);
                ran.extend(self.run_batch(key, second));
                return ran;
            }
            Err(_) if batch.len() > 1 => return batch.into_iter().flat_map(|b| self.run_batch(key, vec![b])).collect(),
            Err(e) => {
                let k = batch[0].k;
                let e = match e {
                    StartError::Engine(r, e) => crate::order::error_to_user(batch[r].run.checkpoint.order.as_ref(), e),
                    StartError::Gpu(e) => EngineError::Gpu(e),
                };
                let r = Err(VariantError { interrupted: false, message: format!("cannot start the engine: {e}") });
                (self.tick)(k, &r);
                return vec![(k, r)];
            }
        };
        let ks: Vec<usize> = batch.iter().map(|b| b.k).collect();
        let at = &batch[0].run.checkpoint;
        (self.announce)(format!(
            "rrpdem study: continuing {} {} from step {} (t = {}) on {} ({}, the engine that wrote their \
             checkpoints){}",
            if ks.len() == 1 { "variant" } else { "variants" },
            list(&ks),
            at.engine.step,
            crate::error::display_time(at.progress.last.t),
            engine.info().device,
            at.engine.kind,
            if ks.len() > 1 { ", as one batch" } else { "" }
        ));
        let jobs = batch
            .iter()
            .map(|b| b.run.job(&b.dir, VtkOptions { replica: i32::try_from(b.k).unwrap_or(i32::MAX), ..self.vtk }))
            .collect();
        super::engines::drive(jobs, &ks, engine.as_mut(), self.bars, self.tick)
    }

    /// The batch's engine, built from the checkpoints' models in their engines' order, with
    /// every replica's saved state loaded (moved out of the checkpoints, which need them no
    /// more; back where they cannot be loaded, for the variant-by-variant retry).
    fn engine(&self, key: Key, batch: &mut [Ready]) -> Result<Box<dyn BatchEngine>, StartError> {
        let owned: Vec<_> = batch.iter().map(|b| b.run.engine_model()).collect();
        let models: Vec<&crate::model::Model> = owned.iter().map(|m| m.as_ref()).collect();
        let (integrator, dt) = (key.integrator, f64::from_bits(key.dt));
        let made = batch_engine(key.backend, key.precision, integrator, dt, &models, self.gpu_options());
        drop(models);
        drop(owned);
        let mut engine = made?;
        let take = |b: &mut Ready| {
            let e = &mut b.run.checkpoint.engine;
            EngineState { kind: e.kind.clone(), step: e.step, data: std::mem::take(&mut e.data) }
        };
        let mut states: Vec<EngineState> = batch.iter_mut().map(take).collect();
        if let Err(e) = engine.load_states(&states) {
            for (b, s) in batch.iter_mut().zip(&mut states) {
                b.run.checkpoint.engine.data = std::mem::take(&mut s.data);
            }
            // (Which replica is in the message; only a batch of one reports it, as its own.)
            return Err(StartError::Engine(0, e));
        }
        Ok(engine)
    }
}
