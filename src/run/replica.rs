//! One replica in the run driver's step loop: its outputs (series, breaks, frames), its watch
//! (energy guard and impact measures) and budget, what it does after each advance, its
//! checkpoints, and how it finishes (final state, summary.json).

use super::{FINAL_STATE_CSV_MAX, Job, RunError, RunOptions, Start, Summary, write_checkpoint};
use crate::checkpoint::{self, RunProgress};
use crate::diagnostics::{Conserved, Diagnostics};
use crate::engine::{BatchEngine, Reordered, Watch};
use crate::error::EngineError;
use crate::fragments::{self, Counts};
use crate::guard::{Budget, EnergyAt, EnergyWatch};
use crate::impact::WallAt;
use crate::interactions::BreakEvent;
use crate::model::Model;
use crate::order::Resort;
use crate::output::{self, OutputDir, OutputError, SeriesWriter};
use crate::scenario::Scenario;
use crate::stability::StabilityEstimate;
use crate::vtk::{Frame, VtkError, VtkWriter};

/// Why the step loop stopped early.
pub(super) enum Failure {
    Engine(EngineError),
    /// A VTK frame could not be written; the engine's state is good.
    Vtk(VtkError),
    /// A log could not be written; the engine's state is good.
    Output(OutputError),
}

/// The VTK side of a replica: the writer thread.
pub(super) struct Frames<'scope> {
    pub(super) writer: VtkWriter<'scope>,
}

impl Frames<'_> {
    /// Reads the state back from the engine (the only part that waits for a GPU) and queues it
    /// with the bonds `broken` so far.
    pub(super) fn submit(
        &mut self,
        engine: &mut dyn BatchEngine,
        r: usize,
        step: u64,
        t: f64,
        broken: &[bool],
    ) -> Result<(), Failure> {
        let state = engine.snapshot(r).map_err(Failure::Engine)?;
        let tangential = engine.tangential_displacement(r).map_err(Failure::Engine)?;
        self.writer.submit(Frame { step, t, state, broken: broken.to_vec(), tangential }).map_err(Failure::Vtk)
    }
}

/// A replica in the step loop: its outputs, its energy budget and how it stands.
pub(super) struct Replica<'scope> {
    /// The scenario as summary.json and checkpoints record it (with the frames asked for).
    pub(super) scenario: Scenario,
    pub(super) model: &'scope Model,
    pub(super) dir: &'scope OutputDir,
    /// Steps between checks of the engine's particle order (`crate::order`), where it has them:
    /// decided at the run's start, off after a failed renumbering; kept in checkpoints.
    pub(super) order_check: Option<u64>,
    /// Why the checks were turned off, when a renumbering failed (kept in checkpoints).
    pub(super) order_warning: Option<String>,
    /// The re-sorts so far (from t = 0), for summary.json.
    pub(super) resorts: Vec<Resort>,
    pub(super) total: u64,
    pub(super) record_every: u64,
    pub(super) series: SeriesWriter,
    pub(super) breaks: Option<SeriesWriter>,
    /// `clumps.csv` (MODEL §12), where the model has clumps.
    pub(super) clumps: Option<SeriesWriter>,
    /// The clumps' states at the stop of `pending`, written with it.
    pending_clumps: Option<Vec<crate::engine::ClumpState>>,
    pub(super) budget: Budget,
    pub(super) stability: StabilityEstimate,
    pub(super) wall_before: f64,
    pub(super) last: Diagnostics,
    /// The run's watch (energy guard, impact measures) as of `last`.
    pub(super) watch: Watch,
    /// The engine watches this replica's every step (`BatchEngine::set_watch`); otherwise the
    /// watch is taken at the driver's stops.
    pub(super) engine_watches: bool,
    /// Steps between the samples of its budget (and of its watch where the engine does not
    /// watch every step): its engine's guard interval alone, whatever the batch.
    pub(super) guard: u64,
    pub(super) frames: Option<Frames<'scope>>,
    pub(super) failure: Option<Failure>,
    pub(super) warnings: Vec<String>,
    /// Started from t = 0 (not resumed from a checkpoint).
    pub(super) fresh: bool,
    /// Which bonds (user numbering) are broken as of the breaks logged so far.
    pub(super) broken: Vec<bool>,
    /// The fragments of `broken`, kept until a bond breaks (`None`: to be labelled).
    fragments: Option<Counts>,
    /// The model's bonds as index pairs, made at the first labelling: a labelling streams 9
    /// bytes a bond through memory instead of a `Bond`'s 104.
    pairs: Option<Vec<(u32, u32)>>,
    /// The `series.csv` row of the last stop (its diagnostics and the guard's scale), written by
    /// `write_record` once the breaks up to that stop are logged.
    pending: Option<(Diagnostics, f64)>,
}

/// A replica's logs and watch as opened at its start.
struct Opened {
    series: SeriesWriter,
    breaks: Option<SeriesWriter>,
    clumps: Option<SeriesWriter>,
    budget: Budget,
    stability: StabilityEstimate,
    wall_before: f64,
    last: Diagnostics,
    watch: Watch,
    resorts: Vec<Resort>,
    /// The order checks a resumed run keeps (its checkpoint's interval and warning).
    kept_check: Option<(Option<u64>, Option<String>)>,
    pending: Option<(Diagnostics, f64)>,
}

impl Opened {
    /// New logs for a run from t = 0 whose starting state has diagnostics `first`.
    fn fresh(
        dir: &OutputDir,
        model: &Model,
        scenario: &Scenario,
        first: Diagnostics,
        stability: StabilityEstimate,
    ) -> Result<Opened, RunError> {
        let series = SeriesWriter::create(&dir.join("series.csv"))?;
        let breaks = match model.params.rupture {
            Some(_) => Some(SeriesWriter::with_header(&dir.join("breaks.csv"), output::BREAKS_HEADER)?),
            None => None,
        };
        let clumps = match model.clumps.is_empty() {
            false => Some(SeriesWriter::with_header(&dir.join("clumps.csv"), output::CLUMPS_HEADER)?),
            true => None,
        };
        let watch = Watch::new(&first, scenario.max_energy_error, &model.params.walls);
        let budget = Budget::new(&first, Conserved::for_model(model));
        let pending = Some((first, watch.energy.scale));
        Ok(Opened {
            series,
            breaks,
            clumps,
            budget,
            stability,
            wall_before: 0.0,
            last: first,
            watch,
            resorts: Vec::new(),
            kept_check: None,
            pending,
        })
    }

    /// The logs of the run in `dir`, cut back to its checkpoint at `step0` (`progress`).
    fn resumed(
        dir: &OutputDir,
        model: &Model,
        scenario: &Scenario,
        progress: RunProgress,
        step0: u64,
    ) -> Result<Opened, RunError> {
        let watch = resumed_watch(&progress, &progress.budget, scenario);
        let mut budget = progress.budget;
        budget.first = progress.first;
        let breaks = match model.params.rupture {
            Some(_) => Some(SeriesWriter::resume_with_header(&dir.join("breaks.csv"), output::BREAKS_HEADER, step0)?),
            None => None,
        };
        let series = SeriesWriter::resume(&dir.join("series.csv"), step0)?;
        let clumps = match model.clumps.is_empty() {
            false => Some(SeriesWriter::resume_with_header(&dir.join("clumps.csv"), output::CLUMPS_HEADER, step0)?),
            true => None,
        };
        Ok(Opened {
            series,
            breaks,
            clumps,
            budget,
            stability: progress.stability,
            wall_before: progress.wall_time_s,
            last: progress.last,
            watch,
            resorts: progress.resorts,
            // The order checks a resumed run makes are those its start decided: kept in the
            // checkpoint, so that resuming never changes them, whatever engine resumes it.
            kept_check: Some((progress.order_check, progress.order_warning)),
            pending: None,
        })
    }
}

/// Steps between checks of replica `r`'s particle order and why they are off where they were
/// turned off: as a resumed run's checkpoint kept them (`kept`), else as the scenario and the
/// engine decide. What the user should know goes into `warnings`.
fn order_checks(
    scenario: &Scenario,
    model: &Model,
    engine: &dyn BatchEngine,
    r: usize,
    kept: Option<(Option<u64>, Option<String>)>,
    fresh: bool,
    warnings: &mut Vec<String>,
) -> (Option<u64>, Option<String>) {
    let checks = match kept {
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
                true => {
                    engine.order_check_interval(r).map(|c| scenario.order_check_every.unwrap_or(c)).filter(|&c| c > 0)
                }
                false => None,
            },
            None,
        ),
    };
    if let Some(every) = scenario.order_check_every.filter(|_| checks.0.is_none() && fresh) {
        warnings.push(format!(
            "order_check_every = {every} was not applied: {}",
            match engine.order_check_interval(r) {
                None if !model.clumps.is_empty() => {
                    "rigid clumps keep the scenario's order (each clump is a range of particles)".to_string()
                }
                None => "this engine does not re-sort during a run (GPU study batches keep each replica's order)"
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
    checks
}

impl<'scope> Replica<'scope> {
    /// Opens (or, on a resume, reopens) the replica's outputs and records its starting state
    /// (its `series.csv` row waits for the breaks of the starting evaluation: `write_record`).
    pub(super) fn start(
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
        let fresh = matches!(start, Start::Fresh { .. });
        let o = match start {
            Start::Fresh { stability } => {
                let first = first.ok_or_else(|| RunError::Engine {
                    error: EngineError::Unsupported("no diagnostics for the starting state".into()),
                    step: step0,
                    out_dir: dir.path.clone(),
                })?;
                Opened::fresh(dir, model, &scenario, first, stability)?
            }
            Start::Resume { progress } => Opened::resumed(dir, model, &scenario, *progress, step0)?,
        };
        // A resumed run starts with what broke before the checkpoint (breaks.csv was just cut
        // back to it): its fragments and frames go on from there.
        let broken = match &o.breaks {
            Some(_) if !fresh => output::broken_bonds(&dir.join("breaks.csv"), model.bonds.len())?,
            _ => vec![false; model.bonds.len()],
        };
        let frames = match vtk.settings(&scenario) {
            Some(settings) => {
                let writer = VtkWriter::start(scope, &dir.path, model, settings, (!fresh).then_some(o.last.t))?;
                Some(Frames { writer })
            }
            None => None,
        };
        let mut warnings = warnings;
        let (order_check, order_warning) =
            order_checks(&scenario, model, engine, r, o.kept_check, fresh, &mut warnings);
        let mut rep = Replica {
            total: scenario.total_steps(),
            record_every: scenario.record_interval(),
            scenario,
            model,
            dir,
            order_check,
            order_warning,
            resorts: o.resorts,
            series: o.series,
            breaks: o.breaks,
            clumps: o.clumps,
            pending_clumps: None,
            budget: o.budget,
            stability: o.stability,
            wall_before: o.wall_before,
            last: o.last,
            watch: o.watch,
            engine_watches: false,
            guard: engine.replica_guard_interval(r).max(1),
            frames,
            failure: None,
            warnings,
            fresh,
            broken,
            fragments: None,
            pairs: None,
            pending: o.pending,
        };
        rep.engine_watches = engine.set_watch(r, rep.watch.clone());
        if let Some(f) = rep.frames.as_mut() {
            // The starting state's frame, unless a resumed run's collection already has it.
            if (step0.is_multiple_of(f.writer.every()) || step0 == rep.total) && !f.writer.has_frame_at(rep.last.t) {
                rep.failure = f.submit(engine, r, step0, rep.last.t, &rep.broken).err();
            }
        }
        if rep.clumps.is_some() && rep.pending.is_some() {
            rep.pending_clumps = Some(engine.clumps(r).map_err(|error| RunError::Engine {
                error,
                step: step0,
                out_dir: dir.path.clone(),
            })?);
        }
        Ok(rep)
    }

    /// The next step at which this replica must stop: its end, a guard check, a record, a
    /// checkpoint, a frame or the deterministic interrupt.
    pub(super) fn next_stop(&self, step: u64, opts: &RunOptions) -> u64 {
        let guard = self.guard;
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

    /// Writes the replica's break events and marks them broken (for its fragments and frames).
    pub(super) fn log_breaks(&mut self, events: &[BreakEvent]) -> Result<(), OutputError> {
        for e in events {
            if let Some(b) = self.breaks.as_mut() {
                b.write_break(e)?;
            }
            self.broken[e.bond as usize] = true;
            self.fragments = None;
        }
        Ok(())
    }

    /// The fragment label of every particle as of the bonds broken so far.
    fn fragment_labels(&mut self) -> Vec<u32> {
        let m = self.model;
        let pairs = self.pairs.get_or_insert_with(|| m.bonds.iter().map(|b| (b.i, b.j)).collect());
        let intact = pairs.iter().zip(&self.broken).filter(|(_, x)| !**x).map(|(p, _)| *p);
        fragments::label_pairs(m.particles.len(), intact.chain(fragments::clump_links(&m.clumps)))
    }

    /// The fragments of the bonds broken so far (labelled anew only after a break).
    pub(super) fn fragment_counts(&mut self) -> Counts {
        if let Some(c) = self.fragments {
            return c;
        }
        let c = fragments::counts(&self.fragment_labels(), &self.model.particles.mass);
        self.fragments = Some(c);
        c
    }

    /// Writes the `series.csv` row waiting for the breaks of its stop, with its fragments.
    pub(super) fn write_record(&mut self) -> Result<(), OutputError> {
        let Some((d, scale)) = self.pending.take() else { return Ok(()) };
        if let (Some(w), Some(c)) = (self.clumps.as_mut(), self.pending_clumps.take()) {
            w.write_clumps(d.step, d.t, &c)?;
        }
        let counts = match self.series.columns() {
            output::SeriesColumns::Fragments | output::SeriesColumns::Dissipated => self.fragment_counts(),
            _ => Counts::default(),
        };
        self.series.write(&d, scale, &counts)
    }

    /// Takes the state the engine stands at after an advance towards step `next`, `d` its
    /// diagnostics: the failure the engine found (it then stands at its last good state, which
    /// ends the run), else the watch (the engine's, or taken here at the driver's stops), the
    /// budget and the series row.
    pub(super) fn take_stop(&mut self, engine: &mut Reordered, r: usize, next: u64, d: Diagnostics) {
        if self.engine_watches
            && let Some(w) = engine.watch(r)
        {
            self.watch = w;
        }
        if let Some(e) = engine.take_failure(r) {
            let e = with_largest_force(engine, r, e);
            engine.freeze(r);
            self.failure = Some(Failure::Engine(e));
            // The last good state ends the run's series, whether or not a record was due.
            if d.step > self.last.step {
                self.budget.take_watch(&self.watch.energy, self.engine_watches);
                self.budget.update(&d);
                self.pending = Some((d, self.watch.energy.scale));
                self.pending_clumps = self.clumps_now(engine, r);
                self.last = d;
            }
            return;
        }
        if !self.engine_watches {
            // Every stop is checked, so that no row holds a state the guard refuses; the watch's
            // maxima move at the guard's multiples and the end only, so that they depend neither
            // on the record cadence nor on the other replicas of a batch.
            let at = EnergyAt::of(&d);
            // The run's end is taken into its summary only (`finish`), not into the samples a
            // checkpoint keeps: a run extended from there samples as one run straight on does.
            let sample = next.is_multiple_of(self.guard);
            let checked =
                if sample { self.watch.energy.observe(&at) } else { self.watch.energy.check(&at).map(|_| ()) };
            if let Err(error) = checked {
                let limit = self.watch.energy.limit;
                let e = EngineError::EnergyGuard { step: next, t: d.t, error, limit, particle: None, force: f64::NAN };
                // Back to the last stop the guard passed.
                let e = match engine.rollback(r) {
                    Ok(()) => with_largest_force(engine, r, e),
                    Err(back) => EngineError::NoRollback { error: Box::new(e), rollback: Box::new(back) },
                };
                engine.freeze(r);
                self.failure = Some(Failure::Engine(e));
                return;
            }
            if sample {
                self.watch.impact.observe(&WallAt::of(&d), &self.model.params.walls);
            }
        }
        self.budget.take_watch(&self.watch.energy, self.engine_watches);
        if next.is_multiple_of(self.guard) {
            // The momenta's drift is sampled at the replica's own guard interval: where a model
            // conserves them they drift by round-off only, and neither the record cadence nor
            // the batch moves the samples. The end, when off that interval, is the summary's
            // alone (`finish`).
            self.budget.update(&d);
        }
        if next.is_multiple_of(self.record_every) || next == self.total {
            // Written once this stop's breaks are logged (`write_record`).
            self.pending = Some((d, self.watch.energy.scale));
            self.pending_clumps = self.clumps_now(engine, r);
        }
        self.last = d;
    }

    /// The clumps' states for `clumps.csv` where the run writes it; an engine that cannot read
    /// them fails the run (the rows are never dropped silently).
    fn clumps_now(&mut self, engine: &mut Reordered, r: usize) -> Option<Vec<crate::engine::ClumpState>> {
        self.clumps.as_ref()?;
        match engine.clumps(r) {
            Ok(c) => Some(c),
            Err(e) => {
                self.failure.get_or_insert(Failure::Engine(e));
                None
            }
        }
    }

    fn progress(&self, elapsed: f64) -> RunProgress {
        RunProgress {
            budget: self.budget.clone(),
            first: self.budget.first,
            last: self.last,
            stability: self.stability.clone(),
            wall_time_s: self.wall_before + elapsed,
            impact: self.watch.impact.clone(),
            energy_watch: Some(self.watch.energy),
            resorts: self.resorts.clone(),
            order_check: self.order_check,
            order_warning: self.order_warning.clone(),
        }
    }

    /// Flushes the logs and frames and writes a checkpoint of the current state.
    pub(super) fn checkpoint(&mut self, engine: &mut Reordered, r: usize, elapsed: f64) -> Result<(), RunError> {
        self.series.flush()?;
        if let Some(c) = self.clumps.as_mut() {
            c.flush()?;
        }
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

    /// Whether the state the run ended or stopped at is off the guard's sampling interval: its
    /// figures are then the summary's alone (`end_budget`, `end_impact`), not samples a
    /// checkpoint keeps, so that a run continued or extended from there samples as one run
    /// straight on does.
    fn end_unsampled(&self) -> bool {
        self.failure.is_none() && !self.last.step.is_multiple_of(self.guard)
    }

    /// The summary's energy error and momenta drift: the samples, and the end's state.
    fn end_budget(&self) -> Budget {
        let mut b = self.budget.clone();
        if self.end_unsampled() {
            if !self.engine_watches {
                let mut w = self.watch.energy;
                // Checked at this stop already (`take_stop`): within the limit.
                let _ = w.observe(&EnergyAt::of(&self.last));
                b.take_watch(&w, false);
            }
            b.update(&self.last);
        }
        b
    }

    /// The summary's impact measures (with walls): where the driver watches, the end's state too.
    fn end_impact(&self) -> Option<crate::impact::Impact> {
        let walls = &self.model.params.walls;
        if walls.is_empty() {
            return None;
        }
        let mut w = self.watch.impact.clone();
        if !self.engine_watches && self.end_unsampled() {
            w.observe(&WallAt::of(&self.last), walls);
        }
        // Gravity accelerates the centre of mass by g times the free particles' share of the
        // mass (fixed ones stay where they are).
        let p = &self.model.particles;
        let (free, all) = (0..p.len())
            .map(|i| (if p.fixed[i] { 0.0 } else { p.mass[i] }, p.mass[i]))
            .fold((0.0, 0.0), |(f, a), (m_f, m)| (f + m_f, a + m));
        let g = if all > 0.0 { self.model.params.gravity * (free / all) } else { self.model.params.gravity };
        let scale = self.budget.energy_scale;
        Some(w.finish(self.scenario.dt, scale, &self.last, self.model.bonds.len(), g))
    }

    /// Writes everything the replica owes (frames, logs, final state, summary.json) for the
    /// state of `self.last`, which is where the engine holds it, and says how it ended.
    pub(super) fn finish(
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
        if let Err(e) = self.write_record() {
            match self.failure {
                None => self.failure = Some(Failure::Output(e)),
                Some(_) => eprintln!("warning: {e}"),
            }
        }
        let n = engine.n_particles(r);
        let wall = self.wall_before + elapsed;
        let steps_now = self.last.step;
        let snapshot = engine.snapshot(r).ok();
        // A log or the final state that cannot be written is the run's error, and summary.json
        // says so: it must not keep describing an earlier end (a resumed run's) as completed.
        let (final_state, fragments, write_error) = match self.write_outputs(engine, r, elapsed, snapshot.as_deref()) {
            Ok((state, fragments)) => (state, fragments, None),
            Err(e) => (None, None, Some(e)),
        };
        let summary = Summary {
            status: match (&self.failure, &write_error, interrupted) {
                (Some(Failure::Engine(e)), _, _) => format!("error: {e}"),
                (Some(Failure::Vtk(e)), _, _) => format!("error: {e}"),
                (Some(Failure::Output(e)), _, _) => format!("error: {e}"),
                (None, Some(e), _) => format!("error: {e}"),
                (None, None, true) => "interrupted".into(),
                (None, None, false) => "completed".into(),
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
            impact: self.end_impact(),
            provenance: crate::provenance::Provenance::now(),
            energy_and_momenta: self.end_budget(),
            final_diagnostics: self.last,
            final_state,
            warnings: self.warnings.iter().cloned().chain(engine.warnings()).collect(),
            resorts: self.resorts.clone(),
            fragments,
            clumps: match self.clumps.is_some() {
                true => engine.clumps(r).map(|c| c.iter().map(super::FinalClump::of).collect()).unwrap_or_default(),
                false => Vec::new(),
            },
        };
        output::write_json(&self.dir.join("summary.json"), &summary)?;
        if let Some(e) = write_error {
            match self.failure {
                None => return Err(e),
                // The run's own failure is what it reports; the write's is not lost either.
                Some(_) => eprintln!("warning: {e}"),
            }
        }
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

impl Replica<'_> {
    /// Flushes the logs and writes the final state (`final_state.csv`, or the checkpoint for a
    /// large model) and `fragments.csv` from `snapshot`; returns what summary.json says of them.
    fn write_outputs(
        &mut self,
        engine: &mut Reordered,
        r: usize,
        elapsed: f64,
        snapshot: Option<&[crate::integrator::Kinematics]>,
    ) -> Result<(Option<String>, Option<fragments::Summary>), RunError> {
        self.series.flush()?;
        if let Some(b) = self.breaks.as_mut() {
            b.flush()?;
        }
        if let Some(c) = self.clumps.as_mut() {
            c.flush()?;
        }
        let Some(state) = snapshot else { return Ok((None, None)) };
        let labels = self.fragment_labels();
        let final_state = if state.len() <= FINAL_STATE_CSV_MAX {
            output::write_final_state(&self.dir.join("final_state.csv"), state, &self.model.particles, &labels)?;
            "final_state.csv"
        } else {
            // Text would cost ~300 bytes and microseconds of formatting per particle: large
            // models keep their final state in the binary checkpoint.
            let path = self.dir.join(checkpoint::FILE_NAME);
            write_checkpoint(&self.scenario, self.model, engine, r, self.progress(elapsed), &path)?;
            checkpoint::FILE_NAME
        };
        Ok((Some(final_state.to_string()), Some(self.write_fragments(&labels, state)?)))
    }

    /// Writes `fragments.csv` for the final `state` labelled `labels`; returns what
    /// `summary.json` says of its fragments.
    fn write_fragments(
        &self,
        labels: &[u32],
        state: &[crate::integrator::Kinematics],
    ) -> Result<fragments::Summary, OutputError> {
        let m = self.model;
        let initial = fragments::label_model(m, &vec![false; m.bonds.len()]);
        let initial = fragments::counts(&initial, &m.particles.mass).n_fragments;
        let outcome = fragments::outcome(labels, &m.particles, state, &m.bonds, &self.broken, initial);
        output::write_fragments(&self.dir.join("fragments.csv"), &outcome.pieces)?;
        Ok(outcome.summary)
    }
}

/// Writes each replica's new break events; returns the replicas whose log failed. `initial`:
/// the events of the starting state's evaluation, which a resumed replica drops (see `drive`).
pub(super) fn take_breaks(
    engine: &mut Reordered,
    reps: &mut [Option<Replica>],
    initial: bool,
) -> Vec<(usize, OutputError)> {
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

/// An energy-guard error with the particle under the largest force at the state the engine
/// stands at (the last good one), where the trouble starts: after a blow-up the culprits may
/// already have flown apart.
fn with_largest_force(engine: &mut Reordered, r: usize, e: EngineError) -> EngineError {
    match e {
        EngineError::EnergyGuard { step, t, error, limit, particle: None, .. } => {
            let largest = engine.largest_force(r).ok().flatten();
            EngineError::EnergyGuard {
                step,
                t,
                error,
                limit,
                particle: largest.map(|l| l.0),
                force: largest.map_or(f64::NAN, |l| l.1),
            }
        }
        other => other,
    }
}

/// The watch of a run resumed from `progress`: as the checkpoint kept it, or for a checkpoint
/// written before the guard watched every step, rebuilt from its budget (the scale from the
/// first and last states it knows) and its impact tracker's times.
fn resumed_watch(progress: &RunProgress, budget: &Budget, scenario: &Scenario) -> Watch {
    let mut impact = progress.impact.clone();
    impact.upgrade(scenario.dt);
    let energy = match progress.energy_watch {
        Some(mut w) => {
            // `resume --max-energy-error` may set another limit.
            w.limit = scenario.max_energy_error;
            w
        }
        None => {
            let mut w = EnergyWatch::new(&progress.first, scenario.max_energy_error);
            w.scale = w.scale.max(crate::guard::mechanical_energy(&progress.last));
            w.max_deviation = budget.max_rel_energy_deviation;
            w
        }
    };
    Watch { energy, impact }
}
