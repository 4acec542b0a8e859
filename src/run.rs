//! Runs a scenario to its end: steps an engine, records diagnostics, shows progress and writes
//! the outputs. On an engine error everything recorded so far is still written.

use crate::checkpoint::{self, Checkpoint, CheckpointError, RunProgress};
use crate::diagnostics::{Conserved, Diagnostics};
use crate::engine::{Engine, EngineInfo};
use crate::error::EngineError;
use crate::impact::ImpactTracker;
use crate::model::Model;
use crate::output::{self, OutputDir, OutputError, SeriesWriter};
use crate::scenario::Scenario;
use crate::stability::StabilityEstimate;
use crate::vtk::{Frame, VtkError, VtkSettings, VtkWriter};
use glam::DVec3;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
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
    #[error("interrupted at step {step} (t = {t}); continue with `rrpdem resume {}`", out_dir.display())]
    Interrupted { step: u64, t: f64, out_dir: PathBuf },
    #[error(transparent)]
    Scenario(#[from] crate::error::ScenarioError),
    #[error("the checkpoint is at step {step} (t = {t}); an end time of {t_end} ends before it")]
    EndsBeforeCheckpoint { step: u64, t: f64, t_end: f64 },
    #[error("{path}: unknown engine kind `{kind}` in the checkpoint")]
    UnknownEngineKind { path: PathBuf, kind: String },
    #[error("cannot start the engine: {0}")]
    EngineStart(#[source] EngineError),
    #[error(transparent)]
    VtkStart(#[from] VtkError),
    #[error("{error}\n(the run stopped at step {step}; the other outputs up to it are in {})", out_dir.display())]
    Vtk { error: VtkError, step: u64, out_dir: PathBuf },
}

/// Running record of the energy budget and of the momenta's drift, updated at every step the
/// guard checks (every step on the CPU, every `guard_interval` steps on the GPU, and the last),
/// whatever the record cadence.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Budget {
    pub e0: f64,
    /// `max |E − E0| / |E0|` over the checked steps.
    pub max_rel_energy_deviation: f64,
    pub final_rel_energy_deviation: f64,
    /// `max_t |Q(t) − Q(0)|` per component for P, S and L.
    pub drift_p: [f64; 3],
    pub drift_s: [f64; 3],
    pub drift_l: [f64; 3],
    /// Directions along which the model conserves P, S, L exactly, and the largest drift along
    /// them (each direction's drift is `|(Q(t) − Q(0))·e|`).
    pub conserved: Conserved,
    pub conserved_drift_p: f64,
    pub conserved_drift_s: f64,
    pub conserved_drift_l: f64,
    /// Diagnostics at step 0 (kept in checkpoints; summary.json has them as the first row of
    /// series.csv).
    #[serde(skip_serializing, default)]
    first: Diagnostics,
}

impl Budget {
    pub fn new(first: &Diagnostics, conserved: Conserved) -> Budget {
        Budget {
            e0: first.budget_total(),
            max_rel_energy_deviation: 0.0,
            final_rel_energy_deviation: 0.0,
            drift_p: [0.0; 3],
            drift_s: [0.0; 3],
            drift_l: [0.0; 3],
            conserved,
            conserved_drift_p: 0.0,
            conserved_drift_s: 0.0,
            conserved_drift_l: 0.0,
            first: *first,
        }
    }

    /// `|E + E_released − E0| / |E0|` at `d` (relative to 1 when `E0 = 0`).
    pub fn deviation(&self, d: &Diagnostics) -> f64 {
        let scale = if self.e0 != 0.0 { self.e0.abs() } else { 1.0 };
        (d.budget_total() - self.e0).abs() / scale
    }

    pub fn update(&mut self, d: &Diagnostics) {
        let dev = self.deviation(d);
        self.max_rel_energy_deviation = self.max_rel_energy_deviation.max(dev);
        self.final_rel_energy_deviation = dev;
        let f = self.first;
        for (drift, now, then) in
            [(&mut self.drift_p, d.p, f.p), (&mut self.drift_s, d.s, f.s), (&mut self.drift_l, d.l, f.l)]
        {
            let diff = (now - then).abs().to_array();
            for k in 0..3 {
                drift[k] = drift[k].max(diff[k]);
            }
        }
        let along = |basis: &[DVec3], now: DVec3, then: DVec3| {
            basis.iter().map(|e| (now - then).dot(*e).abs()).fold(0.0, f64::max)
        };
        self.conserved_drift_p = self.conserved_drift_p.max(along(&self.conserved.p, d.p, f.p));
        self.conserved_drift_s = self.conserved_drift_s.max(along(&self.conserved.s, d.s, f.s));
        self.conserved_drift_l = self.conserved_drift_l.max(along(&self.conserved.l, d.l, f.l));
    }
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
    /// What the engine wants the user to know that is not an error (`Engine::warnings`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Impact measures (MODEL §9) where the scenario has walls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impact: Option<crate::impact::Impact>,
}

/// Above this many particles the final state is written only in binary (`checkpoint.bin`):
/// a 10⁶-particle `final_state.csv` is already about 300 MB of text.
pub const FINAL_STATE_CSV_MAX: usize = 1_000_000;

/// Set by the SIGINT/SIGTERM handler; the run driver stops after the current chunk of steps.
pub static INTERRUPT: AtomicBool = AtomicBool::new(false);

/// How a run is driven (beyond the scenario).
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Show a progress bar on stderr.
    pub progress: bool,
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

/// Why the step loop stopped early.
enum Failure {
    Engine(EngineError),
    /// A VTK frame could not be written; the engine's state is good.
    Vtk(VtkError),
}

/// Where a run starts: at t = 0, or from a checkpoint.
// Made once per run: the size of the checkpoint's progress does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Start {
    Fresh { stability: StabilityEstimate },
    Resume { progress: Box<RunProgress> },
}

/// Runs `scenario` (resolved into `model`) on `engine` from its current step to the scenario's
/// last, writing into `dir`.
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
    // Frames asked for by the caller go into the scenario that summary.json and the
    // checkpoints record, so that a resume continues them without being asked again.
    let recorded;
    let scenario = match opts.vtk.every {
        Some(every) => {
            let output = crate::scenario::OutputSpec { vtk_every: Some(every), ..scenario.output.unwrap_or_default() };
            recorded = Scenario { output: Some(output), ..scenario.clone() };
            &recorded
        }
        None => scenario,
    };
    // The VTK writer thread borrows the model; the scope guarantees it has ended (every
    // queued frame written) before the run returns, whichever way it returns.
    std::thread::scope(|scope| drive(scope, scenario, model, engine, start, dir, opts))
}

/// The VTK side of a run: the writer thread and the broken flags its frames show.
struct Frames<'scope> {
    writer: VtkWriter<'scope>,
    broken: Vec<bool>,
}

impl Frames<'_> {
    /// Reads the state back from the engine (the only part that waits for a GPU) and queues it.
    fn submit(&mut self, engine: &mut dyn Engine, step: u64, t: f64) -> Result<(), Failure> {
        let state = engine.snapshot().map_err(Failure::Engine)?;
        self.writer.submit(Frame { step, t, state, broken: self.broken.clone() }).map_err(Failure::Vtk)
    }
}

/// Writes the engine's new break events into `breaks.csv` and marks them for the frames.
fn log_breaks(
    engine: &mut dyn Engine,
    log: &mut Option<SeriesWriter>,
    frames: &mut Option<Frames>,
) -> Result<(), OutputError> {
    for e in engine.take_breaks() {
        if let Some(b) = log.as_mut() {
            b.write_break(&e)?;
        }
        if let Some(f) = frames.as_mut() {
            f.broken[e.bond as usize] = true;
        }
    }
    Ok(())
}

fn drive<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    scenario: &Scenario,
    model: &'scope Model,
    engine: &mut dyn Engine,
    start: Start,
    dir: &OutputDir,
    opts: RunOptions,
) -> Result<Summary, RunError> {
    let total = scenario.total_steps();
    let n = engine.n_particles();
    let step0 = engine.steps_done();
    let engine_err = |error, step| RunError::Engine { error, step, out_dir: dir.path.clone() };
    let series_path = dir.join("series.csv");
    let breaks_path = dir.join("breaks.csv");
    let walls = &model.params.walls;
    let fresh = matches!(start, Start::Fresh { .. });
    let (mut series, mut breaks, mut budget, stability, wall_before, mut last, mut impact) = match start {
        Start::Fresh { stability } => {
            let mut series = SeriesWriter::create(&series_path)?;
            let breaks = match model.params.rupture {
                Some(_) => Some(SeriesWriter::with_header(&breaks_path, output::BREAKS_HEADER)?),
                None => None,
            };
            let first = engine.diagnostics().map_err(|e| engine_err(e, step0))?;
            series.write(&first)?;
            let mut impact = ImpactTracker::default();
            impact.record(&first, walls);
            (series, breaks, Budget::new(&first, Conserved::for_model(model)), stability, 0.0, first, impact)
        }
        Start::Resume { progress } => {
            let progress = *progress;
            let mut budget = progress.budget;
            budget.first = progress.first;
            let breaks = match model.params.rupture {
                Some(_) => Some(SeriesWriter::resume_with_header(&breaks_path, output::BREAKS_HEADER, step0)?),
                None => None,
            };
            let series = SeriesWriter::resume(&series_path, step0)?;
            (series, breaks, budget, progress.stability, progress.wall_time_s, progress.last, progress.impact)
        }
    };
    let mut frames = match opts.vtk.settings(scenario) {
        Some(settings) => {
            // A resumed run starts with what broke before the checkpoint (breaks.csv was just
            // cut back to it).
            let broken = match &breaks {
                Some(_) if !fresh => output::broken_bonds(&breaks_path, model.bonds.len())?,
                _ => vec![false; model.bonds.len()],
            };
            let writer = VtkWriter::start(scope, &dir.path, model, settings, (!fresh).then_some(last.t))?;
            Some(Frames { writer, broken })
        }
        None => None,
    };
    // Bonds that broke in the evaluation of the starting state (a fresh start only: on a
    // resume they were written before the checkpoint).
    log_breaks(engine, &mut breaks, &mut frames)?;
    let mut failure = None;
    if let Some(f) = frames.as_mut() {
        // The starting state's frame, unless a resumed run's collection already has it.
        if (step0.is_multiple_of(f.writer.every()) || step0 == total) && !f.writer.has_frame_at(last.t) {
            failure = f.submit(engine, step0, last.t).err();
        }
    }
    let bar = progress_bar(total, opts.progress);
    bar.set_position(step0);
    let guard = engine.guard_interval().max(1);
    let limit = scenario.max_energy_error;
    let start = Instant::now();
    let mut interrupted = false;
    let next_multiple = |s: u64, every: u64| (s / every + 1) * every;
    let checkpoint_path = dir.join(checkpoint::FILE_NAME);
    let mut step = step0;
    while step < total && failure.is_none() {
        let record_every = scenario.record_interval();
        let mut next = total.min(next_multiple(step, guard)).min(next_multiple(step, record_every));
        if let Some(c) = opts.checkpoint_every {
            next = next.min(next_multiple(step, c));
        }
        if let Some(f) = &frames {
            next = next.min(next_multiple(step, f.writer.every()));
        }
        if let Some(s) = opts.stop_at.filter(|&s| s > step) {
            next = next.min(s);
        }
        if let Err(e) = engine.advance(next - step) {
            failure = Some(Failure::Engine(e));
            break;
        }
        let d = match engine.diagnostics() {
            Ok(d) => d,
            Err(e) => {
                failure = Some(Failure::Engine(e));
                break;
            }
        };
        if next % guard == 0 || next == total {
            let dev = budget.deviation(&d);
            // A NaN energy trips the guard too.
            if dev.is_nan() || dev > limit {
                // The particle under the largest force at the last good state is where the
                // trouble starts (after a blow-up the culprits may already have flown apart).
                let largest = engine.rollback().and_then(|()| engine.largest_force()).ok().flatten();
                failure = Some(Failure::Engine(EngineError::EnergyGuard {
                    step: next,
                    t: d.t,
                    error: dev,
                    limit,
                    particle: largest.map(|l| l.0),
                    force: largest.map_or(f64::NAN, |l| l.1),
                }));
                break;
            }
            budget.update(&d);
        }
        log_breaks(engine, &mut breaks, &mut frames)?;
        if next.is_multiple_of(record_every) || next == total {
            series.write(&d)?;
            impact.record(&d, walls);
        }
        last = d;
        step = next;
        if let Some(f) = frames.as_mut().filter(|f| f.writer.due(step, total))
            && let Err(e) = f.submit(engine, step, last.t)
        {
            failure = Some(e);
            break;
        }
        bar.set_position(step);
        let secs = start.elapsed().as_secs_f64();
        if secs > 0.0 {
            let rate = (step - step0) as f64 * n as f64 / secs;
            bar.set_message(format!(
                "{rate:.3e} particle-steps/s  E/E0-1 = {:+.2e}",
                budget.final_rel_energy_deviation
            ));
        }
        interrupted = INTERRUPT.load(Ordering::Relaxed) || opts.stop_at.is_some_and(|s| step >= s && step < total);
        let checkpoint_due = opts.checkpoint_every.is_some_and(|c| step.is_multiple_of(c)) && step < total;
        if interrupted || checkpoint_due {
            series.flush()?;
            if let Some(b) = breaks.as_mut() {
                b.flush()?;
            }
            // A checkpoint never gets ahead of the frames on disk: a resume from it finds every
            // frame up to its step.
            if let Some(Err(e)) = frames.as_mut().map(|f| f.writer.sync()) {
                failure = Some(Failure::Vtk(e));
                break;
            }
            let progress = RunProgress {
                budget: budget.clone(),
                first: budget.first,
                last,
                stability: stability.clone(),
                wall_time_s: wall_before + start.elapsed().as_secs_f64(),
                impact: impact.clone(),
            };
            write_checkpoint(scenario, model, engine, progress, &checkpoint_path).map_err(|e| match e {
                RunError::Engine { error, .. } => engine_err(error, step),
                other => other,
            })?;
        }
        if interrupted {
            break;
        }
    }
    bar.finish_and_clear();
    if let Some(Err(e)) = frames.map(|f| f.writer.finish()) {
        match failure {
            None => failure = Some(Failure::Vtk(e)),
            // The run's own failure is what it reports; the writer's is not lost either.
            Some(_) => eprintln!("warning: {e}"),
        }
    }
    series.flush()?;
    if let Some(b) = breaks.as_mut() {
        b.flush()?;
    }
    if matches!(failure, Some(Failure::Engine(_))) && engine.steps_done() != step {
        // Back to the last checked state: that is what final_state.csv and summary.json describe.
        match engine.rollback().and_then(|()| engine.diagnostics()) {
            Ok(d) => last = d,
            Err(e) => {
                eprintln!("warning: could not return to the last good state ({e}); final_state.csv is not written")
            }
        }
    }
    let wall = wall_before + start.elapsed().as_secs_f64();
    let steps_now = last.step;
    let snapshot = if failure.is_some() && engine.steps_done() != last.step { None } else { engine.snapshot().ok() };
    let final_state = match &snapshot {
        Some(state) if n <= FINAL_STATE_CSV_MAX => {
            output::write_final_state(&dir.join("final_state.csv"), state, &model.particles)?;
            Some("final_state.csv".to_string())
        }
        Some(_) => {
            // Text would cost ~300 bytes and microseconds of formatting per particle: large
            // models keep their final state in the binary checkpoint.
            let progress = RunProgress {
                budget: budget.clone(),
                first: budget.first,
                last,
                stability: stability.clone(),
                wall_time_s: wall_before + start.elapsed().as_secs_f64(),
                impact: impact.clone(),
            };
            write_checkpoint(scenario, model, engine, progress, &checkpoint_path)?;
            Some(checkpoint::FILE_NAME.to_string())
        }
        None => None,
    };
    let summary = Summary {
        status: match (&failure, interrupted) {
            (Some(Failure::Engine(e)), _) => format!("error: {e}"),
            (Some(Failure::Vtk(e)), _) => format!("error: {e}"),
            (None, true) => "interrupted".into(),
            (None, false) => "completed".into(),
        },
        scenario: scenario.clone(),
        scenario_hash: format!("{:016x}", checkpoint::scenario_hash(scenario)),
        engine: engine.info(),
        particles: n,
        bonds: model.bonds.len(),
        steps: steps_now,
        t_final: last.t,
        wall_time_s: wall,
        particle_steps_per_s: if wall > 0.0 { steps_now as f64 * n as f64 / wall } else { 0.0 },
        stability,
        impact: (!walls.is_empty()).then(|| impact.finish(budget.e0, &last, model.bonds.len())),
        energy_and_momenta: budget,
        final_diagnostics: last,
        final_state,
        warnings: engine.warnings(),
    };
    output::write_json(&dir.join("summary.json"), &summary)?;
    match failure {
        Some(Failure::Engine(e)) => Err(engine_err(e, steps_now)),
        Some(Failure::Vtk(error)) => Err(RunError::Vtk { error, step: steps_now, out_dir: dir.path.clone() }),
        None if interrupted => Err(RunError::Interrupted { step: steps_now, t: last.t, out_dir: dir.path.clone() }),
        None if snapshot.is_none() => Err(engine_err(
            EngineError::Unsupported("the final state could not be read from the engine".into()),
            steps_now,
        )),
        None => Ok(summary),
    }
}

/// Engine settings given on the command line, over the scenario's.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineChoice {
    pub backend: Option<crate::scenario::Backend>,
    pub precision: Option<crate::engine::Precision>,
}

impl EngineChoice {
    /// The backend and precision a scenario runs with. `auto` resolves to the CPU when no
    /// hardware GPU is present.
    pub fn resolve(&self, s: &Scenario) -> (crate::scenario::Backend, Option<crate::engine::Precision>) {
        use crate::scenario::Backend;
        let backend = match self.backend.unwrap_or(s.backend) {
            Backend::Auto if crate::gpu::hardware_adapter_available() => Backend::Gpu,
            Backend::Auto => Backend::Cpu,
            b => b,
        };
        (backend, self.precision.or(s.precision))
    }
}

/// Runs a scenario from t = 0 into the folder `out` as `rrpdem run` does: builds the model,
/// checks the time step against the stability estimate, takes the folder (refusing an earlier
/// run's files unless `overwrite`), creates the engine and runs. `announce` is told what is
/// about to run.
pub fn run_scenario(
    scenario: &Scenario,
    out: &std::path::Path,
    overwrite: bool,
    choice: &EngineChoice,
    opts: RunOptions,
    announce: &dyn Fn(&str),
) -> Result<Summary, RunError> {
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
    let mut engine = crate::engine::create(&model, scenario.integrator, scenario.dt, backend, precision)
        .map_err(RunError::EngineStart)?;
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
    run(scenario, &model, engine.as_mut(), Start::Fresh { stability: est }, &dir, opts)
}

/// Continues the run in `dir` from its `checkpoint.bin` on an engine of the kind that wrote it,
/// to the scenario's end time or `t_end`. With `check`, refuses a checkpoint of another
/// scenario. `announce` is told what is about to run (the CLI prints it).
pub fn resume(
    dir: &OutputDir,
    t_end: Option<f64>,
    check: Option<&Scenario>,
    opts: RunOptions,
    announce: impl FnOnce(&str),
) -> Result<Summary, RunError> {
    let cp_path = dir.join(checkpoint::FILE_NAME);
    let cp = Checkpoint::read(&cp_path)?;
    if let Some(s) = check {
        cp.check_scenario(s, &cp_path, &format!("scenario {}", s.source.display()))?;
    }
    let mut scenario = cp.scenario.clone();
    if let Some(t) = t_end {
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
    use crate::engine::Precision;
    use crate::scenario::Backend;
    let (backend, precision) = match cp.engine.kind.as_str() {
        "cpu-f64" => (Backend::Cpu, None),
        "gpu-f32" => (Backend::Gpu, Some(Precision::F32)),
        "gpu-f64" => (Backend::Gpu, Some(Precision::F64)),
        other => return Err(RunError::UnknownEngineKind { path: cp_path, kind: other.into() }),
    };
    let mut engine = crate::engine::create(&cp.model, scenario.integrator, scenario.dt, backend, precision)
        .map_err(RunError::EngineStart)?;
    engine.load_state(&cp.engine).map_err(RunError::EngineStart)?;
    announce(&format!(
        "resuming {} at step {} (t = {}) to step {} on {}",
        scenario.name,
        cp.engine.step,
        cp.progress.last.t,
        scenario.total_steps(),
        engine.info().device
    ));
    run(&scenario, &cp.model, engine.as_mut(), Start::Resume { progress: Box::new(cp.progress.clone()) }, dir, opts)
}

/// Writes `checkpoint.bin` for the engine's current state.
fn write_checkpoint(
    scenario: &Scenario,
    model: &Model,
    engine: &mut dyn Engine,
    progress: RunProgress,
    path: &std::path::Path,
) -> Result<(), RunError> {
    let step = engine.steps_done();
    let err = |error| RunError::Engine { error, step, out_dir: path.parent().unwrap_or(path).to_owned() };
    let state = engine.snapshot().map_err(err)?;
    let engine_state = engine.save_state().map_err(err)?;
    let cp = Checkpoint {
        scenario: scenario.clone(),
        model: checkpoint::model_at(model, &state),
        engine: engine_state,
        progress,
    };
    cp.write(path)?;
    Ok(())
}

fn progress_bar(total: u64, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} steps, ETA {eta}  {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
