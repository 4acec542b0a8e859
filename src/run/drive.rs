//! The run driver's step loop over a batch of replicas, in phases: advance to the next stop,
//! take each replica's stop (failure, watch, budget), log breaks, write the records (whose
//! fragment columns count the breaks up to them), write frames, check
//! the particle order, then checkpoint or finish the replicas that are due.

use super::replica::{Failure, Replica, take_breaks};
use super::{INTERRUPT, Job, RunError, RunOptions, Summary, progress_bar};
use crate::engine::{BatchEngine, Reordered};
use crate::error::EngineError;
use crate::order::Resort;
use indicatif::ProgressBar;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Told each replica's result as it finishes.
type Done<'d> = &'d (dyn Fn(usize, &Result<Summary, RunError>) + Sync);

/// The loop's state: the replicas still running (`None` once finished) and their results.
struct Loop<'scope, 'e, 'a, 'd> {
    engine: &'e mut Reordered<'a>,
    reps: Vec<Option<Replica<'scope>>>,
    results: Vec<Option<Result<Summary, RunError>>>,
    done: Done<'d>,
    opts: RunOptions,
    started: Instant,
}

/// Runs the replicas of `engine` (job `r` is replica `r`) to their ends: see `run_batch`.
pub(super) fn drive<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    jobs: Vec<Job<'scope>>,
    engine: &mut Reordered,
    opts: RunOptions,
    done: Done<'_>,
) -> Vec<Result<Summary, RunError>> {
    let count = jobs.len();
    let step0 = engine.steps_done();
    let mut lp = Loop {
        engine,
        reps: Vec::with_capacity(count),
        results: (0..count).map(|_| None).collect(),
        done,
        opts,
        started: Instant::now(),
    };
    if let Err(results) = lp.start(scope, jobs, step0) {
        return results;
    }
    let total = lp.reps.iter().flatten().map(|r| r.total).max().unwrap_or(step0);
    let bar = progress_bar(total, lp.opts.progress, lp.opts.bars.as_ref());
    bar.set_position(step0);
    let mut step = step0;
    let mut particle_steps = 0f64;
    while lp.reps.iter().any(Option::is_some) {
        let next = lp.reps.iter().flatten().map(|rep| rep.next_stop(step, &lp.opts)).min().expect("some replica");
        let running: usize = (0..count).filter(|&r| lp.reps[r].is_some()).map(|r| lp.engine.n_particles(r)).sum();
        if !lp.advance(next) {
            break;
        }
        particle_steps += (next - step) as f64 * running as f64;
        step = next;
        lp.log_breaks();
        lp.records();
        lp.frames(step);
        lp.orders(step);
        lp.progress(&bar, step, particle_steps);
        let interrupted = INTERRUPT.load(Ordering::Relaxed)
            || lp.opts.stop_at.is_some_and(|s| step >= s && lp.reps.iter().flatten().any(|r| step < r.total));
        lp.checkpoint_or_finish(step, interrupted);
        if interrupted {
            break;
        }
    }
    bar.finish_and_clear();
    if let Some(m) = &lp.opts.bars {
        m.remove(&bar);
    }
    lp.results.into_iter().map(|r| r.expect("every replica finished")).collect()
}

// Replicas are addressed by index in `reps`, `results` and the engine alike.
#[allow(clippy::needless_range_loop)]
impl<'scope> Loop<'scope, '_, '_, '_> {
    fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn finish(&mut self, r: usize, res: Result<Summary, RunError>) {
        (self.done)(r, &res);
        self.results[r] = Some(res);
    }

    /// Freezes replica `r` and writes everything it owes.
    fn end(&mut self, r: usize, interrupted: bool) {
        self.engine.freeze(r);
        let rep = self.reps[r].take().expect("a running replica");
        let res = rep.finish(self.engine, r, interrupted, self.elapsed());
        self.finish(r, res);
    }

    /// Opens every replica's outputs at its starting state; replicas already at their end
    /// finish. `Err`: every replica's result, when the batch's starting state cannot be read.
    #[allow(clippy::result_large_err)]
    fn start(
        &mut self,
        scope: &'scope std::thread::Scope<'scope, '_>,
        jobs: Vec<Job<'scope>>,
        step0: u64,
    ) -> Result<(), Vec<Result<Summary, RunError>>> {
        // Starting diagnostics of every replica (a resumed replica brings its own).
        let firsts = match self.engine.diagnostics() {
            Ok(d) => d,
            Err(e) => {
                let mut original = Some(e);
                return Err(jobs
                    .iter()
                    .map(|j| {
                        let error = original.take().unwrap_or_else(|| {
                            EngineError::Unsupported("the batch's starting state could not be read".into())
                        });
                        Err(RunError::Engine { error, step: step0, out_dir: j.dir.path.clone() })
                    })
                    .collect());
            }
        };
        for (r, (job, first)) in jobs.into_iter().zip(firsts).enumerate() {
            // A replica whose starting state is already invalid (the engine froze it while
            // building the batch) fails as that model's engine fails to start alone.
            if let Some(e) = self.engine.take_failure(r) {
                self.engine.freeze(r);
                self.finish(r, Err(RunError::EngineStart(e)));
                self.reps.push(None);
                continue;
            }
            match Replica::start(scope, job, Some(first), self.engine, r) {
                Ok(rep) => self.reps.push(Some(rep)),
                Err(e) => {
                    self.engine.freeze(r);
                    self.finish(r, Err(e));
                    self.reps.push(None);
                }
            }
        }
        // Bonds that broke in the evaluation of the starting state: a fresh start logs them. A
        // resumed replica drops them: its engine was built from the checkpoint's model, whose
        // bonds are all intact, so the bonds broken before the checkpoint (already in
        // breaks.csv) break again in that first evaluation before `load_state` restores their
        // flags.
        for (r, e) in take_breaks(self.engine, &mut self.reps, true) {
            self.engine.freeze(r);
            if let Some(rep) = self.reps[r].as_mut() {
                rep.failure = Some(Failure::Output(e));
            }
        }
        self.records();
        // Replicas already at their end (or whose first frame failed) finish before any step.
        for r in 0..self.reps.len() {
            if self.reps[r].as_ref().is_some_and(|rep| rep.total <= step0 || rep.failure.is_some()) {
                self.end(r, false);
            }
        }
        Ok(())
    }

    /// Advances every running replica to step `next` and takes each one's stop. `false` when
    /// the whole batch failed (a lost device): every replica has then finished at its last
    /// checked state, if the engine could still return there.
    fn advance(&mut self, next: u64) -> bool {
        let step = self.engine.steps_done();
        let diags = self.engine.advance(next - step).and_then(|()| self.engine.diagnostics());
        let diags = match diags {
            Ok(d) => d,
            Err(e) => {
                let text = e.to_string();
                let mut original = Some(e);
                for r in 0..self.reps.len() {
                    let Some(rep) = self.reps[r].as_mut() else { continue };
                    let error = original.take().unwrap_or_else(|| EngineError::Unsupported(text.clone()));
                    rep.failure = Some(Failure::Engine(error));
                    if self.engine.rollback(r).is_ok() {
                        self.end(r, false);
                    } else {
                        let rep = self.reps[r].take().expect("present");
                        let (out_dir, step) = (rep.dir.path.clone(), rep.last.step);
                        let _ = rep.finish(self.engine, r, false, self.elapsed());
                        let error = EngineError::Unsupported(text.clone());
                        self.finish(r, Err(RunError::Engine { error, step, out_dir }));
                    }
                }
                return false;
            }
        };
        for r in 0..self.reps.len() {
            if let Some(rep) = self.reps[r].as_mut() {
                rep.take_stop(self.engine, r, next, diags[r]);
            }
        }
        true
    }

    /// Writes each replica's new break events.
    fn log_breaks(&mut self) {
        for (r, e) in take_breaks(self.engine, &mut self.reps, false) {
            self.engine.freeze(r);
            if let Some(rep) = self.reps[r].as_mut() {
                rep.failure = Some(Failure::Output(e));
            }
        }
    }

    /// Writes the `series.csv` rows of the stop just taken, now that its breaks are logged (the
    /// fragment columns count them).
    fn records(&mut self) {
        for r in 0..self.reps.len() {
            let Some(rep) = self.reps[r].as_mut() else { continue };
            if let Err(e) = rep.write_record() {
                match rep.failure {
                    None => {
                        self.engine.freeze(r);
                        rep.failure = Some(Failure::Output(e));
                    }
                    // The run's own failure is what it reports.
                    Some(_) => eprintln!("warning: {e}"),
                }
            }
        }
    }

    /// Queues the frames due at `step`.
    fn frames(&mut self, step: u64) {
        for r in 0..self.reps.len() {
            let Some(rep) = self.reps[r].as_mut() else { continue };
            if rep.failure.is_none()
                && let Some(f) = rep.frames.as_mut().filter(|f| f.writer.due(step, rep.total))
                && let Err(e) = f.submit(self.engine, r, step, rep.last.t, &rep.broken)
            {
                self.engine.freeze(r);
                rep.failure = Some(e);
            }
        }
    }

    /// The particle order, where a replica checks it at `step`: before any checkpoint of the
    /// step, so that a resume from it continues in the order this run goes on in.
    fn orders(&mut self, step: u64) {
        for r in 0..self.reps.len() {
            let Some(rep) = self.reps[r].as_mut() else { continue };
            let Some(every) = rep.order_check else { continue };
            // Also at the run's last step: a run extended from there (`resume --t-end`) then
            // goes on in the order a run straight to the later end would have.
            if rep.failure.is_some() || step > rep.total || !step.is_multiple_of(every) {
                continue;
            }
            match self.engine.resort(r, rep.model) {
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
    }

    fn progress(&self, bar: &ProgressBar, step: u64, particle_steps: f64) {
        bar.set_position(step);
        let secs = self.elapsed();
        if secs > 0.0 {
            // The watch's largest deviation so far (taken at every stop; the budget's last value
            // moves at the guard's multiples only, which left the bar at 0 for hundreds of steps).
            let worst = self.reps.iter().flatten().map(|r| r.budget.max_rel_energy_deviation).fold(0.0, f64::max);
            bar.set_message(format!("{:.3e} particle-steps/s  max |ΔE|/E_scale = {worst:.2e}", particle_steps / secs));
        }
    }

    /// Writes the checkpoints due at `step` (every replica's, on an interrupt), and finishes the
    /// replicas that failed, reached their end or were interrupted.
    fn checkpoint_or_finish(&mut self, step: u64, interrupted: bool) {
        for r in 0..self.reps.len() {
            let elapsed = self.elapsed();
            let Some(rep) = self.reps[r].as_mut() else { continue };
            let at_end = step >= rep.total;
            // With checkpoints asked for, also one at the end, so that `resume --t-end` continues
            // a finished run from there instead of the last multiple: where the end is a step
            // that a longer run records and stops at anyway (its series row and VTK frame there
            // are not the end's own, which a run straight to a later end would not write).
            let on_grid = step.is_multiple_of(rep.record_every)
                && rep.frames.as_ref().is_none_or(|f| step.is_multiple_of(f.writer.every()));
            let checkpoint_due =
                self.opts.checkpoint_every.is_some_and(|c| step.is_multiple_of(c) || (at_end && on_grid))
                    && rep.failure.is_none();
            let wants_checkpoint = (interrupted && !at_end && rep.failure.is_none()) || checkpoint_due;
            if wants_checkpoint && let Err(e) = rep.checkpoint(self.engine, r, elapsed) {
                self.engine.freeze(r);
                self.reps[r] = None;
                self.finish(r, Err(e));
                continue;
            }
            if rep.failure.is_some() || at_end || interrupted {
                self.end(r, interrupted && !at_end);
            }
        }
    }
}
