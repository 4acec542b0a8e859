//! The batch interface: several independent replicas (variants of a study, or one scenario as
//! the one-replica case) stepped together in lockstep, as the run driver sees them.
//!
//! All replicas share the integrator, the time step and the step counter; everything else
//! (model, parameters, walls, rupture thresholds) is their own. A replica's results must not
//! depend on the batch it is in: the same model run alone or at any position in any batch gives
//! the same trajectory and the same diagnostics, bit for bit on the same device.
//!
//! Replica failures are local: a replica whose state goes wrong (non-finite, `rrp-exact`
//! condition, grid range) is frozen at its last good state and reported by `take_failure`
//! while the others go on. Only failures of the whole batch (a lost device) are errors of
//! `advance`.

use super::{Engine, EngineInfo, EngineState, Watch};
use crate::diagnostics::Diagnostics;
use crate::error::EngineError;
use crate::integrator::Kinematics;
use crate::interactions::BreakEvent;
use crate::model::Model;
use crate::order::Order;

/// Replicas stepped together. Replica indices are `0..replicas()`; particle and bond indices in
/// every method are the replica's own (as in its model), never offsets into the batch.
pub trait BatchEngine {
    fn info(&self) -> EngineInfo;
    fn replicas(&self) -> usize;
    fn n_particles(&self, r: usize) -> usize;
    /// Steps taken so far by the running replicas (a frozen replica stays at its own step).
    fn steps_done(&self) -> u64;
    /// Advances every running replica `steps` steps. A replica that fails is rolled back to the
    /// state at the start of this call, frozen, and its error kept for `take_failure`.
    fn advance(&mut self, steps: u64) -> Result<(), EngineError>;
    /// The failure of replica `r` found by an earlier `advance`, once.
    fn take_failure(&mut self, r: usize) -> Option<EngineError>;
    /// Diagnostics of every replica at its current state (a frozen replica's at its frozen step).
    fn diagnostics(&mut self) -> Result<Vec<Diagnostics>, EngineError>;
    /// Full particle state of replica `r`, in f64.
    fn snapshot(&mut self, r: usize) -> Result<Vec<Kinematics>, EngineError>;
    /// See `Engine::clumps`, for replica `r`.
    fn clumps(&mut self, r: usize) -> Result<Vec<super::ClumpState>, EngineError> {
        let _ = r;
        Ok(Vec::new())
    }
    /// See `Engine::tangential_displacement`, for replica `r`.
    fn tangential_displacement(&mut self, r: usize) -> Result<Option<Vec<f64>>, EngineError> {
        let _ = r;
        Ok(None)
    }
    /// See `Engine::state_kind`: a replica's saved state loads into a one-replica engine of the
    /// same kind built from the replica's model.
    fn state_kind(&self) -> String;
    /// Replica `r`'s state, in the format of a one-replica engine of the same kind.
    fn save_state(&mut self, r: usize) -> Result<EngineState, EngineError>;
    /// Replica `r` takes `states[r]` (a state `save_state` wrote, of a replica built from the
    /// same model), every one at the same step: the batch then continues as the replicas would
    /// alone from their states (`Engine::load_state`). Forgets the rollback point.
    fn load_states(&mut self, states: &[EngineState]) -> Result<(), EngineError>;
    /// Returns replica `r` to the state at the start of the last `advance`.
    fn rollback(&mut self, r: usize) -> Result<(), EngineError>;
    /// Stops stepping replica `r` (its state stays as it is); the others go on.
    fn freeze(&mut self, r: usize);
    /// See `Engine::largest_force`, for replica `r`.
    fn largest_force(&mut self, r: usize) -> Result<Option<(usize, f64)>, EngineError>;
    /// Bonds broken since the last call, as (replica, event), by replica, then step, then bond.
    fn take_breaks(&mut self) -> Vec<(usize, BreakEvent)>;
    /// See `Engine::guard_interval`: the batch's, where it stops when nothing else asks.
    fn guard_interval(&self) -> u64;
    /// Replica `r`'s own guard interval (its engine's alone): where its budget samples the
    /// momenta, so that what it reports does not depend on the batch it ran in.
    fn replica_guard_interval(&self, r: usize) -> u64 {
        let _ = r;
        self.guard_interval()
    }
    /// See `Engine::set_watch`, for replica `r`.
    fn set_watch(&mut self, r: usize, watch: Watch) -> bool {
        let _ = (r, watch);
        false
    }
    /// See `Engine::watch`, for replica `r`.
    fn watch(&self, r: usize) -> Option<Watch> {
        let _ = r;
        None
    }
    /// See `Engine::warnings`, for the whole batch.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
    /// Each replica's contact-list rebuilds so far (empty where the engines keep no lists).
    fn rebuilds_per_replica(&mut self) -> Vec<u64> {
        Vec::new()
    }
    /// See `Engine::order_check_interval`, for replica `r` (`None` where a batch cannot
    /// renumber one replica alone).
    fn order_check_interval(&self, r: usize) -> Option<u64> {
        let _ = r;
        None
    }
    /// See `Engine::renumber`, for replica `r`.
    fn renumber(&mut self, r: usize, model: &Model, perm: &Order) -> Result<(), EngineError> {
        let _ = (r, model, perm);
        Err(EngineError::Unsupported("this batch cannot renumber a replica's particles".into()))
    }
}

/// The step of the saved states a batch of `replicas` loads (`BatchEngine::load_states`): one
/// per replica, all at one step, since replicas step together.
pub fn common_step(states: &[EngineState], replicas: usize) -> Result<u64, EngineError> {
    if states.len() != replicas {
        return Err(EngineError::Unsupported(format!(
            "{} saved states for a batch of {replicas} replicas",
            states.len()
        )));
    }
    let step = states.first().map_or(0, |s| s.step);
    match states.iter().enumerate().find(|(_, s)| s.step != step) {
        Some((r, s)) => Err(EngineError::Unsupported(format!(
            "replicas step together: replica {r}'s saved state is at step {}, replica 0's at {step}",
            s.step
        ))),
        None => Ok(step),
    }
}

/// One engine as a one-replica batch: how a single scenario runs through the batch driver.
pub struct Single<'a> {
    pub engine: &'a mut dyn Engine,
    failure: Option<EngineError>,
    frozen: bool,
}

impl<'a> Single<'a> {
    pub fn new(engine: &'a mut dyn Engine) -> Single<'a> {
        Single { engine, failure: None, frozen: false }
    }
}

impl BatchEngine for Single<'_> {
    fn info(&self) -> EngineInfo {
        self.engine.info()
    }
    fn replicas(&self) -> usize {
        1
    }
    fn n_particles(&self, _r: usize) -> usize {
        self.engine.n_particles()
    }
    fn steps_done(&self) -> u64 {
        self.engine.steps_done()
    }
    fn advance(&mut self, steps: u64) -> Result<(), EngineError> {
        if self.frozen {
            return Ok(());
        }
        match self.engine.advance(steps) {
            Ok(()) => Ok(()),
            Err(e @ EngineError::Gpu(_)) => Err(e),
            Err(e) => {
                // Back to the last state the driver checked, as a batch does with a replica.
                if let Err(r) = self.engine.rollback() {
                    return Err(EngineError::NoRollback { error: Box::new(e), rollback: Box::new(r) });
                }
                self.failure = Some(e);
                self.frozen = true;
                Ok(())
            }
        }
    }
    fn take_failure(&mut self, _r: usize) -> Option<EngineError> {
        self.failure.take()
    }
    fn diagnostics(&mut self) -> Result<Vec<Diagnostics>, EngineError> {
        Ok(vec![self.engine.diagnostics()?])
    }
    fn snapshot(&mut self, _r: usize) -> Result<Vec<Kinematics>, EngineError> {
        self.engine.snapshot()
    }
    fn clumps(&mut self, _r: usize) -> Result<Vec<super::ClumpState>, EngineError> {
        self.engine.clumps()
    }
    fn tangential_displacement(&mut self, _r: usize) -> Result<Option<Vec<f64>>, EngineError> {
        self.engine.tangential_displacement()
    }
    fn state_kind(&self) -> String {
        self.engine.state_kind()
    }
    fn save_state(&mut self, _r: usize) -> Result<EngineState, EngineError> {
        self.engine.save_state()
    }
    fn load_states(&mut self, states: &[EngineState]) -> Result<(), EngineError> {
        match states {
            [one] => {
                self.engine.load_state(one)?;
                (self.failure, self.frozen) = (None, false);
                Ok(())
            }
            _ => Err(EngineError::Unsupported(format!("{} saved states for one engine", states.len()))),
        }
    }
    fn rollback(&mut self, _r: usize) -> Result<(), EngineError> {
        self.engine.rollback()
    }
    fn freeze(&mut self, _r: usize) {
        self.frozen = true;
    }
    fn largest_force(&mut self, _r: usize) -> Result<Option<(usize, f64)>, EngineError> {
        self.engine.largest_force()
    }
    fn take_breaks(&mut self) -> Vec<(usize, BreakEvent)> {
        self.engine.take_breaks().into_iter().map(|e| (0, e)).collect()
    }
    fn guard_interval(&self) -> u64 {
        self.engine.guard_interval()
    }
    fn set_watch(&mut self, _r: usize, watch: Watch) -> bool {
        self.engine.set_watch(watch)
    }
    fn watch(&self, _r: usize) -> Option<Watch> {
        self.engine.watch().cloned()
    }
    fn warnings(&self) -> Vec<String> {
        self.engine.warnings()
    }
    fn order_check_interval(&self, _r: usize) -> Option<u64> {
        self.engine.order_check_interval()
    }
    fn renumber(&mut self, _r: usize, model: &Model, perm: &Order) -> Result<(), EngineError> {
        self.engine.renumber(model, perm)
    }
}

/// Independent engines as the replicas of a batch: the CPU engine's batches (replicas stepped
/// in parallel with rayon, each engine's sums in its own fixed order, so a replica's results
/// are those of its run alone whatever the thread count), and any engine kind that has no
/// shared-state batch.
pub struct Separate<E> {
    engines: Vec<E>,
    failures: Vec<Option<EngineError>>,
    frozen: Vec<bool>,
    /// Step the running replicas are at (a frozen one stays at its own).
    step: u64,
    parallel: bool,
}

impl<E: Engine + Send> Separate<E> {
    /// `parallel`: advance the replicas on rayon's threads (engines that compute on the host);
    /// otherwise one after another (engines that wait on a device).
    pub fn new(engines: Vec<E>, parallel: bool) -> Separate<E> {
        let n = engines.len();
        let step = engines.first().map_or(0, |e| e.steps_done());
        Separate { engines, failures: (0..n).map(|_| None).collect(), frozen: vec![false; n], step, parallel }
    }
}

impl<E: Engine + Send> BatchEngine for Separate<E> {
    fn info(&self) -> EngineInfo {
        match self.engines.first() {
            Some(e) => e.info(),
            None => EngineInfo { backend: "none".into(), device: "none".into(), precision: Default::default() },
        }
    }
    fn replicas(&self) -> usize {
        self.engines.len()
    }
    fn rebuilds_per_replica(&mut self) -> Vec<u64> {
        self.engines.iter_mut().map(|e| e.list_figures().map_or(0, |f| f.0)).collect()
    }
    fn n_particles(&self, r: usize) -> usize {
        self.engines[r].n_particles()
    }
    fn steps_done(&self) -> u64 {
        self.step
    }
    fn advance(&mut self, steps: u64) -> Result<(), EngineError> {
        use rayon::prelude::*;
        let one = |(e, frozen): (&mut E, &mut bool)| -> Option<EngineError> {
            if *frozen {
                return None;
            }
            let err = e.advance(steps).err()?;
            *frozen = true;
            // Back to the state the driver last checked; an engine that cannot return there
            // reports that instead.
            Some(match e.rollback() {
                Ok(()) => err,
                Err(r) => EngineError::NoRollback { error: Box::new(err), rollback: Box::new(r) },
            })
        };
        let found: Vec<Option<EngineError>> = if self.parallel {
            self.engines.par_iter_mut().zip(self.frozen.par_iter_mut()).map(one).collect()
        } else {
            self.engines.iter_mut().zip(self.frozen.iter_mut()).map(one).collect()
        };
        for (slot, f) in self.failures.iter_mut().zip(found) {
            if f.is_some() {
                *slot = f;
            }
        }
        self.step += steps;
        Ok(())
    }
    fn take_failure(&mut self, r: usize) -> Option<EngineError> {
        self.failures[r].take()
    }
    fn diagnostics(&mut self) -> Result<Vec<Diagnostics>, EngineError> {
        use rayon::prelude::*;
        if self.parallel {
            self.engines.par_iter_mut().map(|e| e.diagnostics()).collect()
        } else {
            self.engines.iter_mut().map(|e| e.diagnostics()).collect()
        }
    }
    fn snapshot(&mut self, r: usize) -> Result<Vec<Kinematics>, EngineError> {
        self.engines[r].snapshot()
    }
    fn clumps(&mut self, r: usize) -> Result<Vec<super::ClumpState>, EngineError> {
        self.engines[r].clumps()
    }
    fn tangential_displacement(&mut self, r: usize) -> Result<Option<Vec<f64>>, EngineError> {
        self.engines[r].tangential_displacement()
    }
    fn state_kind(&self) -> String {
        self.engines.first().map_or_else(String::new, |e| e.state_kind())
    }
    fn save_state(&mut self, r: usize) -> Result<EngineState, EngineError> {
        self.engines[r].save_state()
    }
    fn load_states(&mut self, states: &[EngineState]) -> Result<(), EngineError> {
        let step = common_step(states, self.engines.len())?;
        for (r, (e, s)) in self.engines.iter_mut().zip(states).enumerate() {
            e.load_state(s).map_err(|e| match e {
                EngineError::Unsupported(m) => EngineError::Unsupported(format!("replica {r}: {m}")),
                other => other,
            })?;
        }
        self.step = step;
        self.frozen.iter_mut().for_each(|f| *f = false);
        self.failures.iter_mut().for_each(|f| *f = None);
        Ok(())
    }
    fn rollback(&mut self, r: usize) -> Result<(), EngineError> {
        self.engines[r].rollback()
    }
    fn freeze(&mut self, r: usize) {
        self.frozen[r] = true;
    }
    fn largest_force(&mut self, r: usize) -> Result<Option<(usize, f64)>, EngineError> {
        self.engines[r].largest_force()
    }
    fn take_breaks(&mut self) -> Vec<(usize, BreakEvent)> {
        let mut out = Vec::new();
        for (r, e) in self.engines.iter_mut().enumerate() {
            out.extend(e.take_breaks().into_iter().map(|b| (r, b)));
        }
        out
    }
    fn guard_interval(&self) -> u64 {
        self.engines.iter().map(|e| e.guard_interval()).max().unwrap_or(1)
    }
    fn replica_guard_interval(&self, r: usize) -> u64 {
        self.engines[r].guard_interval()
    }
    fn set_watch(&mut self, r: usize, watch: Watch) -> bool {
        self.engines[r].set_watch(watch)
    }
    fn watch(&self, r: usize) -> Option<Watch> {
        self.engines[r].watch().cloned()
    }
    fn warnings(&self) -> Vec<String> {
        let mut all: Vec<String> = self.engines.iter().flat_map(|e| e.warnings()).collect();
        all.dedup();
        all
    }
    fn order_check_interval(&self, r: usize) -> Option<u64> {
        self.engines[r].order_check_interval()
    }
    fn renumber(&mut self, r: usize, model: &Model, perm: &Order) -> Result<(), EngineError> {
        self.engines[r].renumber(model, perm)
    }
}
