//! Runs a scenario to its end: steps an engine, records diagnostics, shows progress and writes
//! the outputs. On an engine error everything recorded so far is still written.
//!
//! Rooms: this file holds the entry points (`run`, `run_scenario`, `resume`, `run_batch`,
//! `prepare`) and what they return; `drive` the step loop over a batch's replicas; `replica`
//! one replica's outputs, watch and budget.

mod drive;
mod replica;

use crate::checkpoint::{self, Checkpoint, CheckpointError, RunProgress};
use crate::diagnostics::Diagnostics;
use crate::engine::Reordered;
use crate::engine::{BatchEngine, Engine, EngineInfo, Single};
use crate::error::EngineError;
use crate::guard::Budget;
use crate::model::Model;
use crate::order::{Order, Resort};
use crate::output::{OutputDir, OutputError};
use crate::scenario::Scenario;
use crate::stability::StabilityEstimate;
use crate::vtk::{VtkError, VtkSettings};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Instant;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error(transparent)]
    OutputDir(#[from] crate::output::OutputDirError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("{error}\n(the outputs up to the last good step, {step}, are in {})", out_dir.display())]
    Engine {
        error: EngineError,
        /// The last good step: what `final_state.csv` and `summary.json` describe.
        step: u64,
        out_dir: PathBuf,
    },
    #[error(
        "interrupted at step {step} (t = {}); continue with `rrpdem resume {}`",
        crate::error::display_time(*t),
        out_dir.display()
    )]
    Interrupted { step: u64, t: f64, out_dir: PathBuf },
    #[error(transparent)]
    Scenario(#[from] crate::error::ScenarioError),
    #[error(
        "the checkpoint is at step {step} (t = {}); an end time of {t_end} ends before it",
        crate::error::display_time(*t)
    )]
    EndsBeforeCheckpoint { step: u64, t: f64, t_end: f64 },
    #[error("the end time given (--t-end) is {}: it must be a finite number > 0", crate::scenario::num(*t_end))]
    BadEndTime { t_end: f64 },
    #[error(
        "{}: the run in this folder already completed to step {step} (t = {t}); resuming it to t = {t_end} would \
         replace it with a shorter run (give a later --t-end to extend it, or run it anew into another folder)",
        dir.display()
    )]
    AlreadyCompleted { dir: PathBuf, step: u64, t: f64, t_end: f64 },
    #[error("{path}: unknown engine kind `{kind}` in the checkpoint")]
    UnknownEngineKind { path: PathBuf, kind: String },
    #[error("cannot start the engine: {0}")]
    EngineStart(#[source] EngineError),
    #[error(transparent)]
    VtkStart(#[from] VtkError),
    #[error("{error}\n(the run stopped at step {step}; the other outputs up to it are in {})", out_dir.display())]
    Vtk { error: VtkError, step: u64, out_dir: PathBuf },
}

/// Contents of `summary.json`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// `completed`, `interrupted`, or the error that stopped the run.
    pub status: String,
    pub scenario: Scenario,
    /// Identifies the scenario (all but `t_end`) for `resume`'s checks.
    pub scenario_hash: String,
    pub engine: EngineInfo,
    pub particles: usize,
    pub bonds: usize,
    /// Steps taken from t = 0 to the state in `final_state.csv` (the last good step after a
    /// failure).
    pub steps: u64,
    pub t_final: f64,
    pub wall_time_s: f64,
    pub particle_steps_per_s: f64,
    pub stability: StabilityEstimate,
    pub energy_and_momenta: Budget,
    pub final_diagnostics: Diagnostics,
    /// The file holding the state of `steps`: `final_state.csv`, or above
    /// `FINAL_STATE_CSV_MAX` particles the binary `checkpoint.bin`; none if it could not be read.
    pub final_state: Option<String>,
    /// Replicas of the batch this run was stepped in (1 for `rrpdem run`); `wall_time_s` is the
    /// batch's.
    pub batch_replicas: usize,
    /// What the engine wants the user to know that is not an error (`Engine::warnings`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Impact measures (MODEL §9) where the scenario has walls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impact: Option<crate::impact::Impact>,
    /// Steps at which the engine's particle order was renewed during the run (`crate::order`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resorts: Vec<Resort>,
    /// Which rrpdem made this, run how, when and where.
    pub provenance: crate::provenance::Provenance,
    /// The fragments of the final state (MODEL §11; `fragments.csv` lists those of more than
    /// one particle); none if the state could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fragments: Option<crate::fragments::Summary>,
    /// Every rigid clump's final state (MODEL §12), in the scenario's order (`clumps.csv` has
    /// them at every record).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clumps: Vec<FinalClump>,
}

/// A clump's state in `summary.json`: centre, velocity, attitude `[w, x, y, z]` with `w ≥ 0`,
/// spatial angular velocity.
#[derive(Clone, Debug, Serialize)]
pub struct FinalClump {
    pub x: glam::DVec3,
    pub v: glam::DVec3,
    pub q: [f64; 4],
    pub omega: glam::DVec3,
}

impl FinalClump {
    pub fn of(c: &crate::engine::ClumpState) -> FinalClump {
        let q = crate::rrp::canonical(c.q);
        FinalClump { x: c.x, v: c.v, q: [q.w, q.x, q.y, q.z], omega: c.w }
    }
}

/// Above this many particles the final state is written only in binary (`checkpoint.bin`):
/// a 10⁶-particle `final_state.csv` is already about 300 MB of text.
pub const FINAL_STATE_CSV_MAX: usize = 1_000_000;

/// Set by the SIGINT/SIGTERM handler; the run driver stops after the current chunk of steps.
pub static INTERRUPT: AtomicBool = AtomicBool::new(false);

/// How a run is driven (beyond the scenario).
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Show a progress bar on stderr.
    pub progress: bool,
    /// Draw that bar among others (a study's bar over its variants) instead of alone.
    pub bars: Option<indicatif::MultiProgress>,
    /// Write `checkpoint.bin` every this many steps (counted from t = 0).
    pub checkpoint_every: Option<u64>,
    /// Stop as an interrupt would once this step is reached (deterministic interrupts for tests).
    pub stop_at: Option<u64>,
    pub vtk: VtkOptions,
}

/// VTK frames asked for by the caller (command line, study), over the scenario's `output` block.
#[derive(Clone, Copy, Debug, Default)]
pub struct VtkOptions {
    /// A frame every this many steps; `None`: the scenario's `output.vtk_every` (neither: no
    /// frames).
    pub every: Option<u64>,
    /// The `replica` point array (a study's variant index; 0 for a single run).
    pub replica: i32,
}

impl VtkOptions {
    /// What a run of `scenario` writes as VTK, if anything.
    pub fn settings(&self, scenario: &Scenario) -> Option<VtkSettings> {
        let spec = scenario.output.unwrap_or_default();
        self.every.or(spec.vtk_every).map(|every| VtkSettings {
            every,
            precision: spec.vtk_precision,
            replica: self.replica,
        })
    }
}
// Made once per run: the size of the checkpoint's progress does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Start {
    Fresh { stability: StabilityEstimate },
    Resume { progress: Box<RunProgress> },
}

/// Runs `scenario` (resolved into `model`) on `engine` from its current step to the scenario's
/// last, writing into `dir`: the one-replica case of `run_batch`.
///
/// Every `guard_interval` steps (and at each record and the end) the energy error and momenta
/// are checked; an error above `scenario.max_energy_error`, a non-finite state or any engine
/// failure stops the run, returns the engine to the last checked state and writes everything
/// up to it. An interrupt (`INTERRUPT`) stops after the current chunk and writes a checkpoint.
/// With VTK output, frames go to a writer thread while stepping continues; a frame that cannot
/// be written stops the run like a failure (the other outputs are written up to that step).
pub fn run(
    scenario: &Scenario,
    model: &Model,
    engine: &mut dyn Engine,
    start: Start,
    dir: &OutputDir,
    opts: RunOptions,
) -> Result<Summary, RunError> {
    let job = Job { scenario, model, order: None, start, dir, vtk: opts.vtk, warnings: Vec::new() };
    run_single(job, engine, opts)
}

/// Runs one job on one engine: the one-replica case of `run_batch`.
fn run_single(job: Job<'_>, engine: &mut dyn Engine, opts: RunOptions) -> Result<Summary, RunError> {
    let mut batch = Single::new(engine);
    let mut results = run_batch(vec![job], &mut batch, opts, &|_, _| {});
    results.pop().expect("one result per job")
}

/// One replica of a batch run: what it runs, where it starts and where its outputs go.
pub struct Job<'a> {
    pub scenario: &'a Scenario,
    /// The model in the user's numbering (what the outputs show).
    pub model: &'a Model,
    /// The order the engine runs the model in (`crate::order`): the engine's replica was built
    /// from `order.apply(model)`. `None`: from `model` itself.
    pub order: Option<&'a Order>,
    pub start: Start,
    pub dir: &'a OutputDir,
    /// VTK frames asked for over the scenario's `output` block (`opts.vtk` is not used).
    pub vtk: VtkOptions,
    /// Warnings found while preparing the run (`Prepared::warnings`), for `summary.json`.
    pub warnings: Vec<String>,
}

/// Runs the replicas of `engine` (job `r` is replica `r`) in lockstep, each exactly as `run`
/// would run it alone: the same outputs in each job's folder, the same checks. A replica that
/// fails, trips the energy guard, reaches its own last step or cannot write its outputs is
/// frozen and finished (its folder complete) while the others go on; `done` is told each
/// replica's result as it finishes. An interrupt stops them all after the current chunk, each
/// with a checkpoint. Returns one result per job, in job order.
pub fn run_batch(
    jobs: Vec<Job<'_>>,
    engine: &mut dyn BatchEngine,
    opts: RunOptions,
    done: &(dyn Fn(usize, &Result<Summary, RunError>) + Sync),
) -> Vec<Result<Summary, RunError>> {
    assert_eq!(jobs.len(), engine.replicas(), "one job per replica");
    // The driver sees every replica in its user's numbering (whatever order the engine runs it
    // in, now or after a re-sort).
    let mut engine = Reordered::new(engine, jobs.iter().map(|j| j.order).collect());
    let engine = &mut engine;
    // The VTK writer threads borrow the models; the scope guarantees they have ended (every
    // queued frame written) before the run returns, whichever way it returns.
    std::thread::scope(|scope| drive::drive(scope, jobs, engine, opts, done))
}
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineChoice {
    pub backend: Option<crate::scenario::Backend>,
    pub precision: Option<crate::engine::Precision>,
    /// Bytes of device memory one GPU batch of a study may take (`GpuOptions::memory_budget`):
    /// larger batches are split; `None`: as many replicas as the adapter's buffers allow.
    pub gpu_memory: Option<u64>,
}

impl EngineChoice {
    /// The backend and precision a scenario runs with. `auto` resolves to the CPU when no
    /// hardware GPU is present.
    pub fn resolve(&self, s: &Scenario) -> (crate::scenario::Backend, Option<crate::engine::Precision>) {
        use crate::scenario::Backend;
        let backend = match self.backend.unwrap_or(s.backend) {
            // `em` and `sm` (MODEL §13), `lgvi` and clumps (§12: a scenario with clumps or
            // gravitation needs `lgvi`), damping and friction (§10) run on the CPU engine only.
            Backend::Auto
                if !s.integrator.cpu_only()
                    && s.dissipation().is_none()
                    && s.gravitation.is_none()
                    && crate::gpu::hardware_adapter_available() =>
            {
                Backend::Gpu
            }
            Backend::Auto => Backend::Cpu,
            b => b,
        };
        (backend, self.precision.or(s.precision))
    }
}

/// A scenario made ready to run from t = 0: its model built, its time step checked, its output
/// folder taken and its engine kind chosen.
pub struct Prepared {
    /// The model in the user's numbering.
    pub model: Model,
    /// The order the engine runs it in (`Order::choose` on the scenario's `particle_order`);
    /// `None`: the user's. Build the engine from `engine_model()`.
    pub order: Option<Order>,
    pub stability: StabilityEstimate,
    pub dir: OutputDir,
    pub backend: crate::scenario::Backend,
    pub precision: Option<crate::engine::Precision>,
    /// What the user should know about this run that is not an error (also announced);
    /// `summary.json` lists them.
    pub warnings: Vec<String>,
}

/// The steps before a run from t = 0, shared by `rrpdem run` and every study variant: builds
/// the model, checks the time step against the stability estimate, takes the folder `out`
/// (refusing an earlier run's files unless `overwrite`) and resolves the engine. `announce` is
/// told what a user should know (a slow build, a time-step warning, a precision fallback).
pub fn prepare(
    scenario: &Scenario,
    out: &std::path::Path,
    overwrite: bool,
    choice: &EngineChoice,
    announce: &dyn Fn(&str),
) -> Result<Prepared, RunError> {
    let started = Instant::now();
    let model = scenario.build_model()?;
    let est = crate::stability::estimate(&model);
    if model.particles.len() >= 100_000 {
        // Large models take seconds to build: say so rather than sit silent.
        announce(&format!(
            "built {} particles and {} bonds in {:.1} s",
            model.particles.len(),
            model.bonds.len(),
            started.elapsed().as_secs_f64()
        ));
    }
    if let Some(warning) =
        crate::stability::check_step(scenario.dt, scenario.force_dt, &est).map_err(RunError::EngineStart)?
    {
        announce(&format!("warning: {warning}"));
    }
    let dir = OutputDir::create(out, overwrite)?;
    let (backend, mut precision) = choice.resolve(scenario);
    let asked = choice.backend.unwrap_or(scenario.backend);
    if backend == crate::scenario::Backend::Cpu
        && asked == crate::scenario::Backend::Auto
        && precision == Some(crate::engine::Precision::F32)
    {
        announce("note: precision f32 asked for, but no hardware GPU was found: running the CPU engine in f64");
        precision = None;
    }
    let (order, scatter) = Order::choose(&model, scenario.particle_order);
    if let (Some(_), Some(scatter)) = (&order, scatter) {
        announce(&format!(
            "note: the particles' numbering scatters neighbours through memory (scatter {scatter:.2}); running them \
             in a spatial order (outputs keep the input's numbering; particle_order \"input\" keeps it)"
        ));
    }
    Ok(Prepared { model, order, stability: est, dir, backend, precision, warnings: Vec::new() })
}

impl Prepared {
    /// The model the engine is built from: `model` in `order`.
    pub fn engine_model(&self) -> std::borrow::Cow<'_, Model> {
        match &self.order {
            Some(o) => std::borrow::Cow::Owned(o.apply(&self.model)),
            None => std::borrow::Cow::Borrowed(&self.model),
        }
    }
}

/// Runs a scenario from t = 0 into the folder `out` as `rrpdem run` does: `prepare`, then the
/// engine, then `run`. `announce` is told what is about to run.
pub fn run_scenario(
    scenario: &Scenario,
    out: &std::path::Path,
    overwrite: bool,
    choice: &EngineChoice,
    opts: RunOptions,
    announce: &dyn Fn(&str),
) -> Result<Summary, RunError> {
    let prepared = prepare(scenario, out, overwrite, choice, announce)?;
    let mut engine = crate::engine::create(
        &prepared.engine_model(),
        scenario.integrator,
        scenario.dt,
        prepared.backend,
        prepared.precision,
    )
    .map_err(|e| RunError::EngineStart(crate::order::error_to_user(prepared.order.as_ref(), e)))?;
    let Prepared { model, order, stability, dir, warnings, .. } = prepared;
    announce(&format!(
        "{} — {} particles, {} bonds, {} steps of {} with {} on {}",
        scenario.name,
        model.particles.len(),
        model.bonds.len(),
        scenario.total_steps(),
        scenario.dt,
        scenario.integrator,
        engine.info().device
    ));
    let job = Job {
        scenario,
        model: &model,
        order: order.as_ref(),
        start: Start::Fresh { stability },
        dir: &dir,
        vtk: opts.vtk,
        warnings,
    };
    run_single(job, engine.as_mut(), opts)
}

/// A run's folder checked and ready to continue from its `checkpoint.bin` (`Resumable::open`):
/// what `resume` runs alone and a study's `--resume` runs as one replica of a batch.
pub struct Resumable {
    pub checkpoint: Checkpoint,
    /// The checkpoint's scenario, to its end or the `t_end` asked for.
    pub scenario: crate::scenario::Scenario,
    /// The engine kind that wrote the checkpoint.
    pub backend: crate::scenario::Backend,
    pub precision: Option<crate::engine::Precision>,
    /// Step of the completed run the folder already holds at the scenario's end, if any (it is
    /// computed again).
    pub again: Option<u64>,
}

impl Resumable {
    /// Checks the run in `dir` for a resume to the scenario's end time or `t_end`: refuses a
    /// checkpoint that is not the folder's run, or whose model is not the one its scenario builds
    /// (`checkpoint`'s documentation); with `check`, also one of another scenario (or whose
    /// scenario's files have changed); an end before the checkpoint or before the folder's
    /// completed run. Touches nothing.
    pub fn open(dir: &OutputDir, t_end: Option<f64>, check: Option<&Scenario>) -> Result<Resumable, RunError> {
        let cp_path = dir.join(checkpoint::FILE_NAME);
        let mut cp = Checkpoint::read(&cp_path)?;
        cp.check_folder(&dir.path, &cp_path)?;
        if let Some(s) = check {
            cp.check_scenario(s, &cp_path, &format!("scenario {}", s.source.display()))?;
        }
        cp.model.clumps = cp.check_model(&cp_path)?;
        let mut scenario = cp.scenario.clone();
        if let Some(t) = t_end {
            // Said as the option it came from, not as a field of the run's scenario file.
            if !(t.is_finite() && t > 0.0) {
                return Err(RunError::BadEndTime { t_end: t });
            }
            scenario.t_end = t;
            scenario.validate()?;
        }
        if scenario.total_steps() < cp.engine.step {
            return Err(RunError::EndsBeforeCheckpoint {
                step: cp.engine.step,
                t: cp.progress.last.t,
                t_end: scenario.t_end,
            });
        }
        // A run that completed past the checkpoint (resumed to a later end without checkpoints
        // there, or finished after an interrupt): resuming it to an earlier end would replace it
        // with a shorter run; to its own end, compute the same again (said when it starts).
        let completed = completed_run(dir).filter(|&(step, _)| step > cp.engine.step);
        if let Some((step, t)) = completed
            && scenario.total_steps() < step
        {
            return Err(RunError::AlreadyCompleted { dir: dir.path.clone(), step, t, t_end: scenario.t_end });
        }
        use crate::engine::Precision;
        use crate::scenario::Backend;
        let (backend, precision) = match cp.engine.kind.as_str() {
            "cpu-f64" => (Backend::Cpu, None),
            "gpu-f32" => (Backend::Gpu, Some(Precision::F32)),
            "gpu-f64" => (Backend::Gpu, Some(Precision::F64)),
            other => return Err(RunError::UnknownEngineKind { path: cp_path, kind: other.into() }),
        };
        let again = completed.map(|c| c.0).filter(|&step| step == scenario.total_steps());
        Ok(Resumable { checkpoint: cp, scenario, backend, precision, again })
    }

    /// The model the engine is built from: the checkpoint's, in the order its engine state was
    /// written in.
    pub fn engine_model(&self) -> std::borrow::Cow<'_, Model> {
        match &self.checkpoint.order {
            Some(o) => std::borrow::Cow::Owned(o.apply(&self.checkpoint.model)),
            None => std::borrow::Cow::Borrowed(&self.checkpoint.model),
        }
    }

    /// What a resume announces (`device`: the engine's).
    pub fn announcement(&self, device: &str) -> String {
        let again = match self.again {
            Some(step) => {
                format!(" (the folder's run already completed to step {step}: computing it again from the checkpoint)")
            }
            None => String::new(),
        };
        format!(
            "resuming {} at step {} (t = {}) to step {} on {device}{again}",
            self.scenario.name,
            self.checkpoint.engine.step,
            crate::error::display_time(self.checkpoint.progress.last.t),
            self.scenario.total_steps(),
        )
    }

    /// The job of this run into `dir` (its folder), for an engine that has loaded the
    /// checkpoint's state.
    pub fn job<'a>(&'a self, dir: &'a OutputDir, vtk: VtkOptions) -> Job<'a> {
        Job {
            scenario: &self.scenario,
            model: &self.checkpoint.model,
            order: self.checkpoint.order.as_ref(),
            start: Start::Resume { progress: Box::new(self.checkpoint.progress.clone()) },
            dir,
            vtk,
            warnings: Vec::new(),
        }
    }
}

/// Continues the run in `dir` from its `checkpoint.bin` on an engine of the kind that wrote it,
/// to the scenario's end time or `t_end`, once `Resumable::open` has checked it (nothing in the
/// folder is touched before). `announce` is told what is about to run (the CLI prints it).
pub fn resume(
    dir: &OutputDir,
    t_end: Option<f64>,
    check: Option<&Scenario>,
    opts: RunOptions,
    announce: impl FnOnce(&str),
) -> Result<Summary, RunError> {
    let r = Resumable::open(dir, t_end, check)?;
    let order = r.checkpoint.order.as_ref();
    let engine_model = r.engine_model();
    let mut engine = crate::engine::create(&engine_model, r.scenario.integrator, r.scenario.dt, r.backend, r.precision)
        .map_err(|e| RunError::EngineStart(crate::order::error_to_user(order, e)))?;
    drop(engine_model);
    engine
        .load_state(&r.checkpoint.engine)
        .map_err(|e| RunError::EngineStart(crate::order::error_to_user(order, e)))?;
    announce(&r.announcement(&engine.info().device));
    run_single(r.job(dir, opts.vtk), engine.as_mut(), opts)
}

/// The last step and time of the run in `dir` where its `summary.json` says it completed.
fn completed_run(dir: &OutputDir) -> Option<(u64, f64)> {
    let text = std::fs::read_to_string(dir.join("summary.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    (v.get("status")?.as_str()? == "completed").then_some(())?;
    Some((v.get("steps")?.as_u64()?, v.get("t_final")?.as_f64()?))
}

/// Writes `checkpoint.bin` for replica `r`'s current state.
fn write_checkpoint(
    scenario: &Scenario,
    model: &Model,
    engine: &mut Reordered,
    r: usize,
    progress: RunProgress,
    path: &std::path::Path,
) -> Result<(), RunError> {
    let step = progress.last.step;
    let err = |error| RunError::Engine { error, step, out_dir: path.parent().unwrap_or(path).to_owned() };
    let state = engine.snapshot(r).map_err(err)?;
    let engine_state = engine.save_state(r).map_err(err)?;
    let cp = Checkpoint {
        scenario: scenario.clone(),
        model: model.at_state(&state),
        engine: engine_state,
        order: engine.order(r).cloned(),
        progress,
    };
    cp.write(path)?;
    Ok(())
}

fn progress_bar(total: u64, show: bool, bars: Option<&indicatif::MultiProgress>) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = match bars {
        Some(m) => m.add(ProgressBar::new(total)),
        None => ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr()),
    };
    if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} steps, ETA {eta}  {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
