//! `Reordered`: a batch engine whose replicas run in their own particle orders
//! (`crate::order`), seen by the run driver in the users' numbering: states, breaks, failures
//! and the largest force are mapped back, and a replica whose order has scattered is renumbered.

use super::{BatchEngine, EngineInfo, EngineState, Watch};
use crate::diagnostics::Diagnostics;
use crate::error::EngineError;
use crate::integrator::Kinematics;
use crate::interactions::BreakEvent;
use crate::model::Model;
use crate::order::{Order, error_to_user};
use glam::DVec3;
use rayon::prelude::*;
use std::borrow::Cow;

/// A batch whose replicas run in their own orders (`None`: the user's), seen in the users'
/// numbering: states, breaks, failures and the largest force are mapped back; saved states
/// stay in the engine's order (the checkpoint stores the order beside them).
pub struct Reordered<'a> {
    inner: &'a mut dyn BatchEngine,
    /// Each replica's order: the caller's until a re-sort replaces it (`resort`).
    orders: Vec<Option<Cow<'a, Order>>>,
}

impl<'a> Reordered<'a> {
    pub fn new(inner: &'a mut dyn BatchEngine, orders: Vec<Option<&'a Order>>) -> Reordered<'a> {
        assert_eq!(orders.len(), inner.replicas(), "one order per replica");
        Reordered { inner, orders: orders.into_iter().map(|o| o.map(Cow::Borrowed)).collect() }
    }

    /// The order replica `r` runs in now (`None`: its user's).
    pub fn order(&self, r: usize) -> Option<&Order> {
        self.orders[r].as_deref()
    }

    /// The check of replica `r`'s order during a run (`Order::resort` at its current
    /// positions): where it has scattered, the engine is renumbered along the Morton curve of
    /// the current positions, as a resume from a checkpoint written now would build it. `model`
    /// is the replica's in the user's numbering. Returns the scatter measured and whether the
    /// replica was re-sorted. Take the breaks first (`Engine::renumber` drops those not taken).
    pub fn resort(&mut self, r: usize, model: &Model) -> Result<(f64, bool), EngineError> {
        let state = self.snapshot(r)?;
        let x: Vec<DVec3> = state.par_iter().map(|k| k.x).collect();
        let (new, scatter) = Order::resort(model, &x, self.order(r));
        drop(x);
        let Some(new) = new else { return Ok((scatter, false)) };
        let perm = Order::relative(self.order(r), &new);
        let engine_model = new.apply(&model.at_state(&state));
        drop(state);
        // The engine reports in its new numbering from here on: the order changes with it.
        self.inner.renumber(r, &engine_model, &perm).map_err(|e| error_to_user(Some(&new), e))?;
        self.orders[r] = Some(Cow::Owned(new));
        Ok((scatter, true))
    }
}

impl BatchEngine for Reordered<'_> {
    fn info(&self) -> EngineInfo {
        self.inner.info()
    }
    fn replicas(&self) -> usize {
        self.inner.replicas()
    }
    fn n_particles(&self, r: usize) -> usize {
        self.inner.n_particles(r)
    }
    fn steps_done(&self) -> u64 {
        self.inner.steps_done()
    }
    fn advance(&mut self, steps: u64) -> Result<(), EngineError> {
        // An error of the whole batch names a particle of its one replica, if it has one; with
        // several, replicas report their own failures through `take_failure`.
        self.inner.advance(steps).map_err(|e| match &self.orders[..] {
            [order] => error_to_user(order.as_deref(), e),
            _ => e,
        })
    }
    fn take_failure(&mut self, r: usize) -> Option<EngineError> {
        let e = self.inner.take_failure(r)?;
        Some(error_to_user(self.order(r), e))
    }
    fn diagnostics(&mut self) -> Result<Vec<Diagnostics>, EngineError> {
        self.inner.diagnostics()
    }
    fn clumps(&mut self, r: usize) -> Result<Vec<super::ClumpState>, EngineError> {
        // A model with clumps is never renumbered (`Order::choose`); clumps have no particle index.
        self.inner.clumps(r)
    }
    fn snapshot(&mut self, r: usize) -> Result<Vec<Kinematics>, EngineError> {
        let s = self.inner.snapshot(r)?;
        Ok(match self.order(r) {
            Some(o) => o.to_user(s),
            None => s,
        })
    }
    fn tangential_displacement(&mut self, r: usize) -> Result<Option<Vec<f64>>, EngineError> {
        let s = self.inner.tangential_displacement(r)?;
        Ok(match (s, self.order(r)) {
            (Some(s), Some(o)) => Some(o.to_user(s)),
            (s, _) => s,
        })
    }
    fn state_kind(&self) -> String {
        self.inner.state_kind()
    }
    fn save_state(&mut self, r: usize) -> Result<EngineState, EngineError> {
        self.inner.save_state(r)
    }
    /// Saved states are in the engine's order (as `save_state` writes them).
    fn load_states(&mut self, states: &[EngineState]) -> Result<(), EngineError> {
        self.inner.load_states(states)
    }
    fn rollback(&mut self, r: usize) -> Result<(), EngineError> {
        self.inner.rollback(r)
    }
    fn freeze(&mut self, r: usize) {
        self.inner.freeze(r)
    }
    fn largest_force(&mut self, r: usize) -> Result<Option<(usize, f64)>, EngineError> {
        let l = self.inner.largest_force(r)?;
        Ok(match self.order(r) {
            Some(o) => l.map(|(k, f)| (o.user_particle(k), f)),
            None => l,
        })
    }
    fn take_breaks(&mut self) -> Vec<(usize, BreakEvent)> {
        let mut events = self.inner.take_breaks();
        if self.orders.iter().all(Option::is_none) {
            return events;
        }
        for (r, e) in &mut events {
            if let Some(o) = self.order(*r) {
                *e = o.break_to_user(*e);
            }
        }
        // By replica, step and then bond, as `BatchEngine::take_breaks` promises, in user bonds.
        events.sort_by_key(|(r, e)| (*r, e.step, e.bond));
        events
    }
    fn guard_interval(&self) -> u64 {
        self.inner.guard_interval()
    }
    fn replica_guard_interval(&self, r: usize) -> u64 {
        self.inner.replica_guard_interval(r)
    }
    fn set_watch(&mut self, r: usize, watch: Watch) -> bool {
        self.inner.set_watch(r, watch)
    }
    fn watch(&self, r: usize) -> Option<Watch> {
        self.inner.watch(r)
    }
    fn warnings(&self) -> Vec<String> {
        self.inner.warnings()
    }
    fn order_check_interval(&self, r: usize) -> Option<u64> {
        self.inner.order_check_interval(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::tests::grid;

    /// An engine whose step fails on particle `bad` and that cannot return either.
    struct Failing {
        bad: usize,
    }

    impl crate::engine::Engine for Failing {
        fn info(&self) -> EngineInfo {
            EngineInfo { backend: "test".into(), device: "none".into(), precision: crate::engine::Precision::F64 }
        }
        fn n_particles(&self) -> usize {
            216
        }
        fn steps_done(&self) -> u64 {
            0
        }
        fn advance(&mut self, _steps: u64) -> Result<(), EngineError> {
            Err(EngineError::NonFinite { particle: self.bad, step: 1, t: 0.1, what: "F = NaN".into() })
        }
        fn diagnostics(&mut self) -> Result<Diagnostics, EngineError> {
            unreachable!()
        }
        fn snapshot(&mut self) -> Result<Vec<Kinematics>, EngineError> {
            unreachable!()
        }
        fn state_kind(&self) -> String {
            "test".into()
        }
        fn save_state(&mut self) -> Result<EngineState, EngineError> {
            unreachable!()
        }
        fn load_state(&mut self, _state: &EngineState) -> Result<(), EngineError> {
            unreachable!()
        }
        fn rollback(&mut self) -> Result<(), EngineError> {
            Err(EngineError::OutOfRange { particle: self.bad, step: 0, position: "far".into() })
        }
        fn largest_force(&mut self) -> Result<Option<(usize, f64)>, EngineError> {
            unreachable!()
        }
        fn take_breaks(&mut self) -> Vec<BreakEvent> {
            Vec::new()
        }
        fn guard_interval(&self) -> u64 {
            1
        }
    }

    #[test]
    fn a_failure_without_return_names_the_users_particle() {
        // A single run whose engine fails and cannot go back: the batch's own error (not a
        // replica's failure) reaches the driver, and it too is in the user's numbering.
        let model = grid(6);
        let o = Order::spatial(&model);
        let k = (0..model.particles.len()).find(|&k| o.user_particle(k) != k).expect("the order moves some particle");
        let mut engine = Failing { bad: k };
        let mut single = crate::engine::Single::new(&mut engine);
        let mut batch = Reordered::new(&mut single, vec![Some(&o)]);
        let err = batch.advance(1).expect_err("the step fails");
        let EngineError::NoRollback { error, rollback } = err else { panic!("{err}") };
        assert!(matches!(*error, EngineError::NonFinite { particle, .. } if particle == o.user_particle(k)), "{error}");
        assert!(matches!(*rollback, EngineError::OutOfRange { particle, .. } if particle == o.user_particle(k)));
    }
}
