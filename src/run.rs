//! Runs a scenario to its end: steps an engine, records diagnostics, shows progress and writes
//! the outputs. On an engine error everything recorded so far is still written.

use crate::checkpoint::{self, Checkpoint, CheckpointError, RunProgress};
use crate::diagnostics::{Conserved, Diagnostics};
use crate::engine::{BatchEngine, Engine, EngineInfo, Single};
use crate::error::EngineError;
use crate::impact::ImpactTracker;
use crate::interactions::BreakEvent;
use crate::model::Model;
use crate::order::{Order, Reordered, Resort};
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
/// whatever the record cadence. The guard itself also checks every other stop of the run.
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

/// Why the step loop stopped early.
enum Failure {
    Engine(EngineError),
    /// A VTK frame could not be written; the engine's state is good.
    Vtk(VtkError),
    /// A log could not be written; the engine's state is good.
    Output(OutputError),
}

/// Where a run starts: at t = 0, or from a checkpoint.
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
    std::thread::scope(|scope| drive(scope, jobs, engine, opts, done))
}

/// The VTK side of a replica: the writer thread and the broken flags its frames show.
struct Frames<'scope> {
    writer: VtkWriter<'scope>,
    broken: Vec<bool>,
}

impl Frames<'_> {
    /// Reads the state back from the engine (the only part that waits for a GPU) and queues it.
    fn submit(&mut self, engine: &mut dyn BatchEngine, r: usize, step: u64, t: f64) -> Result<(), Failure> {
        let state = engine.snapshot(r).map_err(Failure::Engine)?;
        self.writer.submit(Frame { step, t, state, broken: self.broken.clone() }).map_err(Failure::Vtk)
    }
}

/// A replica in the step loop: its outputs, its energy budget and how it stands.
struct Replica<'scope> {
    /// The scenario as summary.json and checkpoints record it (with the frames asked for).
    scenario: Scenario,
    model: &'scope Model,
    dir: &'scope OutputDir,
    /// Steps between checks of the engine's particle order (`crate::order`), where it has them:
    /// decided at the run's start, off after a failed renumbering; kept in checkpoints.
    order_check: Option<u64>,
    /// Why the checks were turned off, when a renumbering failed (kept in checkpoints).
    order_warning: Option<String>,
    /// The re-sorts so far (from t = 0), for summary.json.
    resorts: Vec<Resort>,
    total: u64,
    record_every: u64,
    series: SeriesWriter,
    breaks: Option<SeriesWriter>,
    budget: Budget,
    stability: StabilityEstimate,
    wall_before: f64,
    last: Diagnostics,
    impact: ImpactTracker,
    frames: Option<Frames<'scope>>,
    failure: Option<Failure>,
    warnings: Vec<String>,
    /// Started from t = 0 (not resumed from a checkpoint).
    fresh: bool,
}

impl<'scope> Replica<'scope> {
    /// Opens (or, on a resume, reopens) the replica's outputs and records its starting state.
    fn start(
        scope: &'scope std::thread::Scope<'scope, '_>,
        job: Job<'scope>,
        first: Option<Diagnostics>,
        engine: &mut dyn BatchEngine,
        r: usize,
    ) -> Result<Replica<'scope>, RunError> {
        let Job { scenario, model, order: _, start, dir, vtk, warnings } = job;
        // Frames asked for by the caller go into the scenario that summary.json and the
        // checkpoints record, so that a resume continues them without being asked again.
        let scenario = match vtk.every {
            Some(every) => {
                let output =
                    crate::scenario::OutputSpec { vtk_every: Some(every), ..scenario.output.unwrap_or_default() };
                Scenario { output: Some(output), ..scenario.clone() }
            }
            None => scenario.clone(),
        };
        let step0 = engine.steps_done();
        let engine_err = |error, step| RunError::Engine { error, step, out_dir: dir.path.clone() };
        let series_path = dir.join("series.csv");
        let breaks_path = dir.join("breaks.csv");
        let fresh = matches!(start, Start::Fresh { .. });
        // The order checks a resumed run makes are those its start decided (`None` here): kept
        // in the checkpoint, so that resuming never changes them, whatever engine resumes it.
        let (series, breaks, budget, stability, wall_before, last, impact, resorts, kept_check) = match start {
            Start::Fresh { stability } => {
                let mut series = SeriesWriter::create(&series_path)?;
                let breaks = match model.params.rupture {
                    Some(_) => Some(SeriesWriter::with_header(&breaks_path, output::BREAKS_HEADER)?),
                    None => None,
                };
                let first = first.ok_or_else(|| {
                    engine_err(EngineError::Unsupported("no diagnostics for the starting state".into()), step0)
                })?;
                series.write(&first)?;
                let mut impact = ImpactTracker::default();
                impact.record(&first, &model.params.walls);
                let budget = Budget::new(&first, Conserved::for_model(model));
                (series, breaks, budget, stability, 0.0, first, impact, Vec::new(), None)
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
                (
                    series,
                    breaks,
                    budget,
                    progress.stability,
                    progress.wall_time_s,
                    progress.last,
                    progress.impact,
                    progress.resorts,
                    Some((progress.order_check, progress.order_warning)),
                )
            }
        };
        let frames = match vtk.settings(&scenario) {
            Some(settings) => {
                // A resumed run starts with what broke before the checkpoint (breaks.csv was
                // just cut back to it).
                let broken = match &breaks {
                    Some(_) if !fresh => output::broken_bonds(&breaks_path, model.bonds.len())?,
                    _ => vec![false; model.bonds.len()],
                };
                let writer = VtkWriter::start(scope, &dir.path, model, settings, (!fresh).then_some(last.t))?;
                Some(Frames { writer, broken })
            }
            None => None,
        };
        let total = scenario.total_steps();
        let record_every = scenario.record_interval();
        let mut warnings = warnings;
        let (order_check, order_warning) = match kept_check {
            Some((every, warning)) => {
                warnings.extend(warning.clone());
                match every.filter(|_| engine.order_check_interval(r).is_none()) {
                    // (An engine of the same kind as the one that wrote the checkpoint can.)
                    Some(every) => {
                        warnings.push(format!(
                            "the run checked its particle order every {every} steps; this engine cannot renumber its \
                             particles, so the resumed run keeps its order"
                        ));
                        (None, warning)
                    }
                    None => (every, warning),
                }
            }
            None => (
                match scenario.particle_order.checks_during_run(model.particles.len()) {
                    // The scenario's interval where it gives one, but only for engines that renumber.
                    true => engine
                        .order_check_interval(r)
                        .map(|c| scenario.order_check_every.unwrap_or(c))
                        .filter(|&c| c > 0),
                    false => None,
                },
                None,
            ),
        };
        if let Some(every) = scenario.order_check_every.filter(|_| order_check.is_none() && fresh) {
            warnings.push(format!(
                "order_check_every = {every} was not applied: {}",
                match engine.order_check_interval(r) {
                    None => "this engine cannot renumber a replica alone (GPU study batches keep each replica's \
                             order)"
                        .to_string(),
                    Some(_) => match scenario.particle_order {
                        crate::order::OrderChoice::Input => "particle_order \"input\" never re-sorts".to_string(),
                        _ => format!(
                            "particle_order \"auto\" checks models of at least {} particles; this one has {}",
                            crate::order::AUTO_MIN_PARTICLES,
                            model.particles.len()
                        ),
                    },
                }
            ));
        }
        let mut rep = Replica {
            scenario,
            model,
            dir,
            order_check,
            order_warning,
            resorts,
            total,
            record_every,
            series,
            breaks,
            budget,
            stability,
            wall_before,
            last,
            impact,
            frames,
            failure: None,
            warnings,
            fresh,
        };
        if let Some(f) = rep.frames.as_mut() {
            // The starting state's frame, unless a resumed run's collection already has it.
            if (step0.is_multiple_of(f.writer.every()) || step0 == total) && !f.writer.has_frame_at(rep.last.t) {
                rep.failure = f.submit(engine, r, step0, rep.last.t).err();
            }
        }
        Ok(rep)
    }

    /// The next step at which this replica must stop: its end, a guard check, a record, a
    /// checkpoint, a frame or the deterministic interrupt.
    fn next_stop(&self, step: u64, guard: u64, opts: &RunOptions) -> u64 {
        let next_multiple = |s: u64, every: u64| (s / every + 1) * every;
        let mut next = self.total.min(next_multiple(step, guard)).min(next_multiple(step, self.record_every));
        if let Some(c) = opts.checkpoint_every {
            next = next.min(next_multiple(step, c));
        }
        if let Some(f) = &self.frames {
            next = next.min(next_multiple(step, f.writer.every()));
        }
        if let Some(s) = opts.stop_at.filter(|&s| s > step) {
            next = next.min(s);
        }
        if let Some(c) = self.order_check {
            next = next.min(next_multiple(step, c));
        }
        next
    }

    /// Writes the replica's break events and marks them for its frames.
    fn log_breaks(&mut self, events: &[BreakEvent]) -> Result<(), OutputError> {
        for e in events {
            if let Some(b) = self.breaks.as_mut() {
                b.write_break(e)?;
            }
            if let Some(f) = self.frames.as_mut() {
                f.broken[e.bond as usize] = true;
            }
        }
        Ok(())
    }

    fn progress(&self, elapsed: f64) -> RunProgress {
        RunProgress {
            budget: self.budget.clone(),
            first: self.budget.first,
            last: self.last,
            stability: self.stability.clone(),
            wall_time_s: self.wall_before + elapsed,
            impact: self.impact.clone(),
            resorts: self.resorts.clone(),
            order_check: self.order_check,
            order_warning: self.order_warning.clone(),
        }
    }

    /// Flushes the logs and frames and writes a checkpoint of the current state.
    fn checkpoint(&mut self, engine: &mut Reordered, r: usize, elapsed: f64) -> Result<(), RunError> {
        self.series.flush()?;
        if let Some(b) = self.breaks.as_mut() {
            b.flush()?;
        }
        // A checkpoint never gets ahead of the frames on disk: a resume from it finds every
        // frame up to its step.
        if let Some(Err(e)) = self.frames.as_mut().map(|f| f.writer.sync()) {
            return Err(RunError::Vtk { error: e, step: self.last.step, out_dir: self.dir.path.clone() });
        }
        let path = self.dir.join(checkpoint::FILE_NAME);
        write_checkpoint(&self.scenario, self.model, engine, r, self.progress(elapsed), &path)
    }

    /// Writes everything the replica owes (frames, logs, final state, summary.json) for the
    /// state of `self.last`, which is where the engine holds it, and says how it ended.
    fn finish(
        mut self,
        engine: &mut Reordered,
        r: usize,
        interrupted: bool,
        elapsed: f64,
    ) -> Result<Summary, RunError> {
        let out_dir = self.dir.path.clone();
        let engine_err = |error, step| RunError::Engine { error, step, out_dir: out_dir.clone() };
        if let Some(Err(e)) = self.frames.take().map(|f| f.writer.finish()) {
            match self.failure {
                None => self.failure = Some(Failure::Vtk(e)),
                // The run's own failure is what it reports; the writer's is not lost either.
                Some(_) => eprintln!("warning: {e}"),
            }
        }
        self.series.flush()?;
        if let Some(b) = self.breaks.as_mut() {
            b.flush()?;
        }
        let n = engine.n_particles(r);
        let wall = self.wall_before + elapsed;
        let steps_now = self.last.step;
        let snapshot = engine.snapshot(r).ok();
        let final_state = match &snapshot {
            Some(state) if n <= FINAL_STATE_CSV_MAX => {
                output::write_final_state(&self.dir.join("final_state.csv"), state, &self.model.particles)?;
                Some("final_state.csv".to_string())
            }
            Some(_) => {
                // Text would cost ~300 bytes and microseconds of formatting per particle: large
                // models keep their final state in the binary checkpoint.
                let path = self.dir.join(checkpoint::FILE_NAME);
                write_checkpoint(&self.scenario, self.model, engine, r, self.progress(elapsed), &path)?;
                Some(checkpoint::FILE_NAME.to_string())
            }
            None => None,
        };
        let walls = &self.model.params.walls;
        let summary = Summary {
            status: match (&self.failure, interrupted) {
                (Some(Failure::Engine(e)), _) => format!("error: {e}"),
                (Some(Failure::Vtk(e)), _) => format!("error: {e}"),
                (Some(Failure::Output(e)), _) => format!("error: {e}"),
                (None, true) => "interrupted".into(),
                (None, false) => "completed".into(),
            },
            scenario: self.scenario.clone(),
            scenario_hash: format!("{:016x}", checkpoint::scenario_hash(&self.scenario)),
            engine: engine.info(),
            particles: n,
            bonds: self.model.bonds.len(),
            batch_replicas: engine.replicas(),
            steps: steps_now,
            t_final: self.last.t,
            wall_time_s: wall,
            particle_steps_per_s: if wall > 0.0 { steps_now as f64 * n as f64 / wall } else { 0.0 },
            stability: self.stability.clone(),
            impact: (!walls.is_empty()).then(|| self.impact.finish(self.budget.e0, &self.last, self.model.bonds.len())),
            energy_and_momenta: self.budget.clone(),
            final_diagnostics: self.last,
            final_state,
            warnings: self.warnings.iter().cloned().chain(engine.warnings()).collect(),
            resorts: self.resorts.clone(),
        };
        output::write_json(&self.dir.join("summary.json"), &summary)?;
        match self.failure {
            Some(Failure::Engine(e)) => Err(engine_err(e, steps_now)),
            Some(Failure::Vtk(error)) => Err(RunError::Vtk { error, step: steps_now, out_dir: self.dir.path.clone() }),
            Some(Failure::Output(e)) => Err(e.into()),
            None if interrupted => {
                Err(RunError::Interrupted { step: steps_now, t: self.last.t, out_dir: self.dir.path.clone() })
            }
            None if snapshot.is_none() => Err(engine_err(
                EngineError::Unsupported("the final state could not be read from the engine".into()),
                steps_now,
            )),
            None => Ok(summary),
        }
    }
}

/// Writes each replica's new break events; returns the replicas whose log failed. `initial`:
/// the events of the starting state's evaluation, which a resumed replica drops (see `drive`).
fn take_breaks(engine: &mut Reordered, reps: &mut [Option<Replica>], initial: bool) -> Vec<(usize, OutputError)> {
    let mut errors = Vec::new();
    let events = engine.take_breaks();
    for chunk in events.chunk_by(|a, b| a.0 == b.0) {
        let r = chunk[0].0;
        let mine: Vec<BreakEvent> = chunk.iter().map(|e| e.1).collect();
        if let Some(Some(rep)) = reps.get_mut(r)
            && rep.failure.is_none()
            && (rep.fresh || !initial)
            && let Err(e) = rep.log_breaks(&mine)
        {
            errors.push((r, e));
        }
    }
    errors
}

// Replicas are addressed by index in `reps`, `results` and the engine alike.
#[allow(clippy::needless_range_loop)]
fn drive<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    jobs: Vec<Job<'scope>>,
    engine: &mut Reordered,
    opts: RunOptions,
    done: &(dyn Fn(usize, &Result<Summary, RunError>) + Sync),
) -> Vec<Result<Summary, RunError>> {
    let count = jobs.len();
    let step0 = engine.steps_done();
    let mut results: Vec<Option<Result<Summary, RunError>>> = (0..count).map(|_| None).collect();
    let finish = |results: &mut Vec<Option<Result<Summary, RunError>>>, r: usize, res: Result<Summary, RunError>| {
        done(r, &res);
        results[r] = Some(res);
    };
    // Starting diagnostics of every replica (a resumed replica brings its own).
    let firsts = match engine.diagnostics() {
        Ok(d) => d.into_iter().map(Some).collect(),
        Err(e) => {
            let mut original = Some(e);
            return jobs
                .iter()
                .map(|j| {
                    let error = original.take().unwrap_or_else(|| {
                        EngineError::Unsupported("the batch's starting state could not be read".into())
                    });
                    Err(RunError::Engine { error, step: step0, out_dir: j.dir.path.clone() })
                })
                .collect();
        }
    };
    let firsts: Vec<Option<Diagnostics>> = firsts;
    let mut reps: Vec<Option<Replica<'scope>>> = Vec::with_capacity(count);
    for (r, (job, first)) in jobs.into_iter().zip(firsts).enumerate() {
        // A replica whose starting state is already invalid (the engine froze it while
        // building the batch) fails as that model's engine fails to start alone.
        if let Some(e) = engine.take_failure(r) {
            engine.freeze(r);
            finish(&mut results, r, Err(RunError::EngineStart(e)));
            reps.push(None);
            continue;
        }
        match Replica::start(scope, job, first, engine, r) {
            Ok(rep) => reps.push(Some(rep)),
            Err(e) => {
                engine.freeze(r);
                finish(&mut results, r, Err(e));
                reps.push(None);
            }
        }
    }
    let elapsed_at = Instant::now();
    let elapsed = || elapsed_at.elapsed().as_secs_f64();
    // Bonds that broke in the evaluation of the starting state: a fresh start logs them. A
    // resumed replica drops them: its engine was built from the checkpoint's model, whose bonds
    // are all intact, so the bonds broken before the checkpoint (already in breaks.csv) break
    // again in that first evaluation before `load_state` restores their flags.
    for (r, e) in take_breaks(engine, &mut reps, true) {
        engine.freeze(r);
        if let Some(rep) = reps[r].as_mut() {
            rep.failure = Some(Failure::Output(e));
        }
    }
    // Replicas already at their end (or whose first frame failed) finish before any step.
    for r in 0..count {
        if reps[r].as_ref().is_some_and(|rep| rep.total <= step0 || rep.failure.is_some()) {
            let rep = reps[r].take().expect("checked");
            engine.freeze(r);
            let res = rep.finish(engine, r, false, elapsed());
            finish(&mut results, r, res);
        }
    }
    let total = reps.iter().flatten().map(|r| r.total).max().unwrap_or(step0);
    let bar = progress_bar(total, opts.progress, opts.bars.as_ref());
    bar.set_position(step0);
    let guard = engine.guard_interval().max(1);
    let mut step = step0;
    let mut particle_steps = 0f64;
    while reps.iter().any(Option::is_some) {
        let next = reps.iter().flatten().map(|rep| rep.next_stop(step, guard, &opts)).min().expect("some replica");
        let running: usize = (0..count).filter(|&r| reps[r].is_some()).map(|r| engine.n_particles(r)).sum();
        let diags = engine.advance(next - step).and_then(|()| engine.diagnostics());
        let diags = match diags {
            Ok(d) => d,
            Err(e) => {
                // A failure of the whole batch (a lost device): every replica stops at its
                // last checked state, if the engine can still return there.
                let text = e.to_string();
                let mut original = Some(e);
                for r in 0..count {
                    if let Some(mut rep) = reps[r].take() {
                        let error = original.take().unwrap_or_else(|| EngineError::Unsupported(text.clone()));
                        rep.failure = Some(Failure::Engine(error));
                        let res = match engine.rollback(r) {
                            Ok(()) => rep.finish(engine, r, false, elapsed()),
                            Err(_) => {
                                let out_dir = rep.dir.path.clone();
                                let step = rep.last.step;
                                let _ = rep.finish(engine, r, false, elapsed());
                                Err(RunError::Engine { error: EngineError::Unsupported(text.clone()), step, out_dir })
                            }
                        };
                        finish(&mut results, r, res);
                    }
                }
                break;
            }
        };
        particle_steps += (next - step) as f64 * running as f64;
        let limit_of = |rep: &Replica| rep.scenario.max_energy_error;
        for r in 0..count {
            let Some(rep) = reps[r].as_mut() else { continue };
            if let Some(e) = engine.take_failure(r) {
                // The engine has returned it to the state of `last` and frozen it.
                rep.failure = Some(Failure::Engine(e));
                continue;
            }
            let d = diags[r];
            // Every stop is checked, not only the guard's multiples: a record written between
            // checks could otherwise hold a blown-up state, and `rollback` returns to the
            // previous stop, which must be one the guard passed. The budget's running maxima
            // are updated at the guard's multiples and the end only, so that they depend
            // neither on the record cadence nor on the other replicas of a batch.
            let dev = rep.budget.deviation(&d);
            let limit = limit_of(rep);
            // A NaN energy trips the guard too.
            if dev.is_nan() || dev > limit {
                // The particle under the largest force at the last good state is where the
                // trouble starts (after a blow-up the culprits may already have flown apart).
                let largest = engine.rollback(r).and_then(|()| engine.largest_force(r)).ok().flatten();
                engine.freeze(r);
                rep.failure = Some(Failure::Engine(EngineError::EnergyGuard {
                    step: next,
                    t: d.t,
                    error: dev,
                    limit,
                    particle: largest.map(|l| l.0),
                    force: largest.map_or(f64::NAN, |l| l.1),
                }));
                continue;
            }
            if next.is_multiple_of(guard) || next == rep.total {
                rep.budget.update(&d);
            }
            if next.is_multiple_of(rep.record_every) || next == rep.total {
                if let Err(e) = rep.series.write(&d) {
                    engine.freeze(r);
                    rep.failure = Some(Failure::Output(e));
                    continue;
                }
                rep.impact.record(&d, &rep.model.params.walls);
            }
            rep.last = d;
        }
        for (r, e) in take_breaks(engine, &mut reps, false) {
            engine.freeze(r);
            if let Some(rep) = reps[r].as_mut() {
                rep.failure = Some(Failure::Output(e));
            }
        }
        step = next;
        for r in 0..count {
            let Some(rep) = reps[r].as_mut() else { continue };
            if rep.failure.is_none()
                && let Some(f) = rep.frames.as_mut().filter(|f| f.writer.due(step, rep.total))
                && let Err(e) = f.submit(engine, r, step, rep.last.t)
            {
                engine.freeze(r);
                rep.failure = Some(e);
            }
        }
        // The particle order, where the replica checks it at this step: before any checkpoint
        // of the step, so that a resume from it continues in the order this run goes on in.
        for r in 0..count {
            let Some(rep) = reps[r].as_mut() else { continue };
            let Some(every) = rep.order_check else { continue };
            // Also at the run's last step: a run extended from there (`resume --t-end`) then
            // goes on in the order a run straight to the later end would have.
            if rep.failure.is_some() || step > rep.total || !step.is_multiple_of(every) {
                continue;
            }
            match engine.resort(r, rep.model) {
                Ok((scatter, true)) => rep.resorts.push(Resort { step, t: rep.last.t, scatter }),
                Ok((_, false)) => {}
                Err(e) => {
                    // The engine is as it was: the run goes on in its order (and so does a run
                    // resumed from its checkpoints), and says so.
                    let warning = format!(
                        "the particle order could not be renewed at step {step} ({e}); the run went on in its order"
                    );
                    rep.order_check = None;
                    rep.warnings.push(warning.clone());
                    rep.order_warning = Some(warning);
                }
            }
        }
        bar.set_position(step);
        let secs = elapsed();
        if secs > 0.0 {
            let worst = reps.iter().flatten().map(|r| r.budget.final_rel_energy_deviation).fold(0.0, f64::max);
            bar.set_message(format!("{:.3e} particle-steps/s  E/E0-1 = {worst:+.2e}", particle_steps / secs));
        }
        let interrupted = INTERRUPT.load(Ordering::Relaxed)
            || opts.stop_at.is_some_and(|s| step >= s && reps.iter().flatten().any(|r| step < r.total));
        for r in 0..count {
            let Some(rep) = reps[r].as_mut() else { continue };
            let at_end = step >= rep.total;
            let checkpoint_due =
                opts.checkpoint_every.is_some_and(|c| step.is_multiple_of(c)) && !at_end && rep.failure.is_none();
            let wants_checkpoint = (interrupted && !at_end && rep.failure.is_none()) || checkpoint_due;
            if wants_checkpoint && let Err(e) = rep.checkpoint(engine, r, elapsed()) {
                engine.freeze(r);
                reps[r] = None;
                finish(&mut results, r, Err(e));
                continue;
            }
            if rep.failure.is_some() || at_end || interrupted {
                engine.freeze(r);
                let rep = reps[r].take().expect("present");
                let res = rep.finish(engine, r, interrupted && !at_end, elapsed());
                finish(&mut results, r, res);
            }
        }
        if interrupted {
            break;
        }
    }
    bar.finish_and_clear();
    if let Some(m) = &opts.bars {
        m.remove(&bar);
    }
    results.into_iter().map(|r| r.expect("every replica finished")).collect()
}

/// Engine settings given on the command line, over the scenario's.
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
            Backend::Auto if crate::gpu::hardware_adapter_available() => Backend::Gpu,
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

/// Continues the run in `dir` from its `checkpoint.bin` on an engine of the kind that wrote it,
/// to the scenario's end time or `t_end`. Refuses a checkpoint that is not the folder's run, or
/// whose model is not the one its scenario builds (`checkpoint`'s documentation); with `check`,
/// also one of another scenario (or whose scenario's files have changed). Nothing in the folder
/// is touched before these checks pass. `announce` is told what is about to run (the CLI
/// prints it).
pub fn resume(
    dir: &OutputDir,
    t_end: Option<f64>,
    check: Option<&Scenario>,
    opts: RunOptions,
    announce: impl FnOnce(&str),
) -> Result<Summary, RunError> {
    let cp_path = dir.join(checkpoint::FILE_NAME);
    let cp = Checkpoint::read(&cp_path)?;
    cp.check_folder(&dir.path, &cp_path)?;
    if let Some(s) = check {
        cp.check_scenario(s, &cp_path, &format!("scenario {}", s.source.display()))?;
    }
    cp.check_model(&cp_path)?;
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
    // The engine runs the model in the order the checkpoint's engine state was written in.
    let engine_model = cp.order.as_ref().map(|o| o.apply(&cp.model));
    let mut engine = crate::engine::create(
        engine_model.as_ref().unwrap_or(&cp.model),
        scenario.integrator,
        scenario.dt,
        backend,
        precision,
    )
    .map_err(|e| RunError::EngineStart(crate::order::error_to_user(cp.order.as_ref(), e)))?;
    drop(engine_model);
    engine
        .load_state(&cp.engine)
        .map_err(|e| RunError::EngineStart(crate::order::error_to_user(cp.order.as_ref(), e)))?;
    announce(&format!(
        "resuming {} at step {} (t = {}) to step {} on {}",
        scenario.name,
        cp.engine.step,
        cp.progress.last.t,
        scenario.total_steps(),
        engine.info().device
    ));
    let job = Job {
        scenario: &scenario,
        model: &cp.model,
        order: cp.order.as_ref(),
        start: Start::Resume { progress: Box::new(cp.progress.clone()) },
        dir,
        vtk: opts.vtk,
        warnings: Vec::new(),
    };
    run_single(job, engine.as_mut(), opts)
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
        model: checkpoint::model_at(model, &state),
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
