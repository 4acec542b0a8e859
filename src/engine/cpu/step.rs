//! One step of the CPU engine, in order: rrp-exact's condition, the integration pass (closing the
//! previous step and opening this one), the watch's look at the closed step, the evaluation,
//! and, at the end of an `advance` (or at every step for rrp-exact), the closing half kick;
//! then the check that every particle's state and force is finite. `em` and `sm` take their
//! implicit step (`implicit.rs`) in place of the passes, then the same evaluation and watch.

use super::CpuEngine;
use super::integrate::KinSums;
use super::pass::first_index;
use crate::error::EngineError;
use crate::guard::EnergyAt;
use crate::impact::WallAt;
use crate::integrator::{self, Integrator};

impl CpuEngine {
    /// First particle that violates `rrp-exact`'s condition at the coming half step, if any.
    fn check_exact_condition(&self) -> Option<(usize, f64)> {
        let h = self.dt;
        let value = |i: usize| {
            let wh = self.kin[i].w + self.acc[i].moment * (0.5 * h * self.inv_inertia.get(i));
            integrator::rotation_increment(Integrator::RrpExact, h, wh).err()
        };
        let i = first_index(self.kin.len(), |i| !self.fixed.get(i) && value(i).is_some())?;
        value(i).map(|v| (i, v))
    }

    /// Takes the step the last integration pass closed into the watch (its kinetic sums, the
    /// last evaluation's energies and wall force); `Err` when the energy guard refuses it.
    fn observe(&mut self, kin: Option<KinSums>) -> Result<(), EngineError> {
        let (Some(k), Some(w)) = (kin, self.watch.as_mut()) else { return Ok(()) };
        let s = &self.sums;
        // The ledger at the closed step (the pass may have made the next step's opening kick).
        let e_dissipated = k.e_dissipated;
        let mechanical = k.e_trans + k.e_rot + s.u_bend + s.u_axial + s.u_shear + s.u_contact + s.u_wall;
        let at =
            EnergyAt { step: self.step, budget: mechanical + s.u_gravity + self.e_released + e_dissipated, mechanical };
        w.energy.observe(&at).map_err(|error| EngineError::EnergyGuard {
            step: self.step,
            t: self.step as f64 * self.dt,
            error,
            limit: w.energy.limit,
            particle: None,
            force: f64::NAN,
        })?;
        let at = WallAt { step: self.step, f_wall: s.f_wall, v_cm: k.p / self.total_mass };
        w.impact.observe(&at, &self.params.walls);
        Ok(())
    }

    /// One step; `last`: the last of an `advance`, whose evaluation also sums the energies.
    /// `post_pending`: the previous step's closing half kick is still to be made (it is made
    /// in this step's first pass). Returns whether this step leaves its own pending. With a
    /// watch, every step's energies are summed and each closed step is observed.
    fn one_step(&mut self, post_pending: bool, last: bool) -> Result<bool, EngineError> {
        let integ = self.integrator;
        if self.rigid.is_some() {
            // lgvi (MODEL §12): bodies open and close within the step, nothing pending.
            let kin = self.rigid_step(last || self.watch.is_some())?;
            self.observe(kin)?;
            return Ok(false);
        }
        if integ.is_implicit() {
            // One solve per step: positions and velocities at k+1 together, nothing pending.
            self.implicit_step()?;
            self.step += 1;
            self.evaluate(last || self.watch.is_some(), None)?;
            let kin = self.watch.is_some().then(|| self.kin_sums());
            self.observe(kin)?;
            return Ok(false);
        }
        if integ == Integrator::RrpExact
            && let Some((particle, value)) = self.check_exact_condition()
        {
            return Err(EngineError::RrpExactCondition { particle, step: self.step, t: self.time(), value });
        }
        let (moved, kin) = self.integrate(post_pending, true);
        // The pass closed the previous step (its forces and energies are still in `sums`).
        self.observe(kin)?;
        self.step += 1;
        self.evaluate(last || self.watch.is_some(), Some(moved))?;
        // rrp-exact checks its condition on the closed step, so it closes each step at once.
        if !last && integ != Integrator::RrpExact {
            return Ok(true);
        }
        let (_, kin) = self.integrate(true, false);
        self.observe(kin)?;
        Ok(false)
    }

    /// Steps `steps` steps from the current state (the caller saved it).
    pub(super) fn steps(&mut self, steps: u64) -> Result<(), EngineError> {
        let mut post_pending = false;
        let mut run = || {
            for s in 0..steps {
                let last = s + 1 == steps;
                if let Some(d) = &mut self.diss {
                    d.keep_v_eval = last;
                }
                post_pending = self.one_step(post_pending, last)?;
            }
            Ok(())
        };
        let done: Result<(), EngineError> = run();
        // Every other evaluation (a state set, a rollback) writes it.
        if let Some(d) = &mut self.diss {
            d.keep_v_eval = true;
        }
        done?;
        self.check_finite()
    }

    /// The first particle with a non-finite state or force, if any.
    fn check_finite(&self) -> Result<(), EngineError> {
        let bad = first_index(self.kin.len(), |i| {
            let (k, a) = (&self.kin[i], &self.acc[i]);
            !(k.x.is_finite()
                && k.v.is_finite()
                && k.q.is_finite()
                && k.w.is_finite()
                && a.force.is_finite()
                && a.moment.is_finite())
        });
        match bad {
            None => Ok(()),
            Some(i) => Err(EngineError::NonFinite {
                particle: i,
                step: self.step,
                t: self.time(),
                what: format!(
                    "x = {}, v = {}, Ω = {}, F = {}",
                    self.kin[i].x, self.kin[i].v, self.kin[i].w, self.acc[i].force
                ),
            }),
        }
    }
}
