//! The energy guard's budget: the energy deviation and the drift of the conserved momenta over
//! a run, kept in checkpoints and reported in `summary.json`.

use crate::diagnostics::{Conserved, Diagnostics};
use glam::DVec3;
use serde::{Deserialize, Serialize};

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
    pub(crate) first: Diagnostics,
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
