//! The energy guard: the deviation of the energy budget `E + E_released + E_dissipated` from its value at
//! t = 0, relative to an energy scale that does not depend on where the model sits, watched at
//! every step (`EnergyWatch`), and the run's budget (`Budget`: that deviation and the drift of
//! the conserved momenta), kept in checkpoints and reported in `summary.json`.
//!
//! Why this scale: `E` holds gravity's potential `−M g·x`, which depends on the origin, and any
//! potential may be shifted by a constant. Dividing by `|E0|` made the guard's limit a function
//! of where the model was placed: a sphere that lost 62 % of its kinetic energy at an elastic
//! wall passed once both were raised by 10⁴, and a model placed so that `E0 ≈ 0` tripped on
//! noise. The scale here is the largest *mechanical* energy the run has had so far,
//! `E_trans + E_rot + U_bend + U_axial + U_shear + U_contact + U_wall` (each term ≥ 0, zero at
//! rest in the reference configuration without overlaps), maximised over every step: the
//! energy that is actually moving about, whatever the origin or the potentials' zeros.

use crate::diagnostics::{Conserved, Diagnostics};
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// The guard's energy scale at one state: kinetic energy plus the stored elastic energies.
pub fn mechanical_energy(d: &Diagnostics) -> f64 {
    d.e_trans + d.e_rot + d.u_bend + d.u_axial + d.u_shear + d.u_contact + d.u_wall
}

/// `|e − e0| / scale`: 0 where the two are equal (also when the scale is 0: nothing has moved),
/// infinite where they differ at a zero scale, NaN where either energy is NaN.
pub fn relative_deviation(e: f64, e0: f64, scale: f64) -> f64 {
    let diff = (e - e0).abs();
    if diff == 0.0 { 0.0 } else { diff / scale }
}

/// What the guard reads of one step: the budget `E + E_released + E_dissipated` and the mechanical energy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EnergyAt {
    pub step: u64,
    pub budget: f64,
    pub mechanical: f64,
}

impl EnergyAt {
    pub fn of(d: &Diagnostics) -> EnergyAt {
        EnergyAt { step: d.step, budget: d.budget_total(), mechanical: mechanical_energy(d) }
    }
}

/// The energy guard, step by step: the scale so far and the largest deviation so far. An
/// engine that watches its own steps (`Engine::set_watch`) updates it at every step; the run
/// driver does so at its stops for one that does not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EnergyWatch {
    /// `E + E_released + E_dissipated` at step 0.
    pub e0: f64,
    /// The largest relative deviation a step may have (`max_energy_error`).
    pub limit: f64,
    /// The largest mechanical energy of the steps observed so far (`mechanical_energy`).
    pub scale: f64,
    /// The largest relative deviation observed so far, and its step.
    pub max_deviation: f64,
    pub max_step: u64,
    /// Steps observed (step 0 included): every step, or the driver's stops where the engine
    /// does not watch its own steps.
    pub observed: u64,
}

impl EnergyWatch {
    /// The watch of a run starting at `first` (step 0), tripping above `limit`.
    pub fn new(first: &Diagnostics, limit: f64) -> EnergyWatch {
        let at = EnergyAt::of(first);
        EnergyWatch { e0: at.budget, limit, scale: at.mechanical, max_deviation: 0.0, max_step: at.step, observed: 1 }
    }

    /// The deviation of `at` against the scale it would make.
    pub fn deviation(&self, at: &EnergyAt) -> f64 {
        relative_deviation(at.budget, self.e0, self.scale.max(at.mechanical))
    }

    /// Checks one step against the limit without taking it: `Err(deviation)` above it or NaN.
    pub fn check(&self, at: &EnergyAt) -> Result<f64, f64> {
        let dev = self.deviation(at);
        if dev <= self.limit { Ok(dev) } else { Err(dev) }
    }

    /// Takes one step. Above the limit (or NaN) the step is refused: `Err(deviation)`, and the
    /// watch is left as it was (the run ends at the step before, whose deviation passed).
    pub fn observe(&mut self, at: &EnergyAt) -> Result<(), f64> {
        let dev = self.check(at)?;
        self.scale = self.scale.max(at.mechanical);
        if dev > self.max_deviation {
            self.max_deviation = dev;
            self.max_step = at.step;
        }
        self.observed += 1;
        Ok(())
    }
}

/// The run's budget: the energy guard's figures and the drift of the momenta. The deviation
/// comes from the energy watch (every step where the engine watches its steps); the momenta's
/// drift is measured at the run driver's stops (records and checks): they are conserved to
/// round-off where the model conserves them, so a sample of steps shows their drift.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Budget {
    /// `E + E_released + E_dissipated` at step 0.
    pub e0: f64,
    /// The guard's energy scale at the end: the largest `E_trans + E_rot + U_bend + U_axial +
    /// U_shear + U_contact + U_wall` of the run (see the module note).
    #[serde(default)]
    pub energy_scale: f64,
    /// `max |E + E_released + E_dissipated − E0| / energy scale` over the observed steps, and its step.
    pub max_rel_energy_deviation: f64,
    #[serde(default)]
    pub max_rel_energy_deviation_step: u64,
    pub final_rel_energy_deviation: f64,
    /// Whether the deviation was observed at every step (else at the run driver's stops), and
    /// how many steps were observed.
    #[serde(default)]
    pub every_step: bool,
    #[serde(default)]
    pub steps_observed: u64,
    /// `max_t |Q(t) − Q(0)|` per component for P, S and L.
    pub drift_p: [f64; 3],
    pub drift_s: [f64; 3],
    pub drift_l: [f64; 3],
    /// Directions along which the model conserves P, S, L exactly, and the largest drift along
    /// them (each direction's drift is `|(Q(t) − Q(0))·e|`); `None` (null in summary.json) where
    /// it conserves the quantity along no direction: no figure, rather than a perfect 0.
    pub conserved: Conserved,
    pub conserved_drift_p: Option<f64>,
    pub conserved_drift_s: Option<f64>,
    pub conserved_drift_l: Option<f64>,
    /// Diagnostics at step 0 (kept in checkpoints; summary.json has them as the first row of
    /// series.csv).
    #[serde(skip_serializing, default)]
    pub(crate) first: Diagnostics,
}

impl Budget {
    pub fn new(first: &Diagnostics, conserved: Conserved) -> Budget {
        Budget {
            e0: first.budget_total(),
            energy_scale: mechanical_energy(first),
            max_rel_energy_deviation: 0.0,
            max_rel_energy_deviation_step: first.step,
            final_rel_energy_deviation: 0.0,
            every_step: false,
            steps_observed: 1,
            drift_p: [0.0; 3],
            drift_s: [0.0; 3],
            drift_l: [0.0; 3],
            conserved_drift_p: (!conserved.p.is_empty()).then_some(0.0),
            conserved_drift_s: (!conserved.s.is_empty()).then_some(0.0),
            conserved_drift_l: (!conserved.l.is_empty()).then_some(0.0),
            conserved,
            first: *first,
        }
    }

    /// The guard's deviation at `d` against the scale so far (for progress and the summary).
    pub fn deviation(&self, d: &Diagnostics) -> f64 {
        relative_deviation(d.budget_total(), self.e0, self.energy_scale.max(mechanical_energy(d)))
    }

    /// Takes the energy watch's figures (`every_step`: it saw every step).
    pub fn take_watch(&mut self, w: &EnergyWatch, every_step: bool) {
        self.energy_scale = w.scale;
        self.max_rel_energy_deviation = w.max_deviation;
        self.max_rel_energy_deviation_step = w.max_step;
        self.steps_observed = w.observed;
        self.every_step = every_step;
    }

    /// Takes the diagnostics of a stop: the final deviation and the momenta's drift.
    pub fn update(&mut self, d: &Diagnostics) {
        self.final_rel_energy_deviation = self.deviation(d);
        let f = self.first;
        for (drift, now, then) in
            [(&mut self.drift_p, d.p, f.p), (&mut self.drift_s, d.s, f.s), (&mut self.drift_l, d.l, f.l)]
        {
            let diff = (now - then).abs().to_array();
            for k in 0..3 {
                drift[k] = drift[k].max(diff[k]);
            }
        }
        // (A budget of an older checkpoint may hold 0 for a quantity conserved along nothing.)
        let along = |so_far: Option<f64>, basis: &[DVec3], now: DVec3, then: DVec3| {
            (!basis.is_empty())
                .then(|| basis.iter().map(|e| (now - then).dot(*e).abs()).fold(so_far.unwrap_or(0.0), f64::max))
        };
        self.conserved_drift_p = along(self.conserved_drift_p, &self.conserved.p, d.p, f.p);
        self.conserved_drift_s = along(self.conserved_drift_s, &self.conserved.s, d.s, f.s);
        self.conserved_drift_l = along(self.conserved_drift_l, &self.conserved.l, d.l, f.l);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(step: u64, e_trans: f64, u_gravity: f64, u_wall: f64) -> Diagnostics {
        Diagnostics { step, e_trans, u_gravity, u_wall, ..Default::default() }
    }

    #[test]
    fn the_deviation_does_not_depend_on_the_origin() {
        // One sphere falling onto a wall, the same states seen from two origins: gravity's
        // potential differs by a constant (M g·Δ), the deviations must not.
        for shift in [0.0, 1e4 * 10.0, -3.7e6] {
            let first = state(0, 200.0, -shift, 0.0);
            let mut w = EnergyWatch::new(&first, 0.05);
            // Step 1: 2 % of the kinetic energy lost.
            let at = EnergyAt::of(&state(1, 196.0, -shift, 0.0));
            assert!((w.deviation(&at) - 0.02).abs() < 1e-12, "shift {shift}: {}", w.deviation(&at));
            w.observe(&at).expect("within the limit");
            // Step 2: 10 % lost in total: refused whatever the origin.
            let at = EnergyAt::of(&state(2, 180.0, -shift, 0.0));
            assert!(w.observe(&at).is_err(), "shift {shift}");
            assert!((w.max_deviation - 0.02).abs() < 1e-12, "a refused step leaves the watch as it was");
            assert_eq!(w.max_step, 1);
        }
    }

    #[test]
    fn the_scale_is_the_largest_mechanical_energy_so_far() {
        // Dropped from rest: no mechanical energy at step 0, 100 at step 1, then stored in the
        // wall; the scale keeps the largest.
        let mut w = EnergyWatch::new(&state(0, 0.0, 0.0, 0.0), 0.5);
        assert_eq!(w.scale, 0.0);
        w.observe(&EnergyAt::of(&state(1, 100.0, -100.0, 0.0))).unwrap();
        assert_eq!(w.scale, 100.0);
        w.observe(&EnergyAt::of(&state(2, 10.0, -100.0, 89.0))).unwrap();
        assert_eq!(w.scale, 100.0);
        // A loss of 1 against the scale 100, not against |E0| = 0.
        assert!((w.max_deviation - 0.01).abs() < 1e-15);
        assert_eq!(w.observed, 3);
    }

    #[test]
    fn nan_and_a_zero_scale() {
        assert_eq!(relative_deviation(5.0, 5.0, 0.0), 0.0, "nothing moved");
        assert_eq!(relative_deviation(5.0, 4.0, 0.0), f64::INFINITY);
        let mut w = EnergyWatch::new(&state(0, 1.0, 0.0, 0.0), 1e9);
        assert!(w.observe(&EnergyAt::of(&state(1, f64::NAN, 0.0, 0.0))).unwrap_err().is_nan());
    }
}
