//! Binder rupture (MODEL §6): a bond's four measures, the one pure rule that decides whether it
//! breaks, and the per-bond Weibull scale of its thresholds.
//!
//! `rupture_measures` and `rupture` have WGSL twins of the same names and argument order in
//! `shaders/`; both engines evaluate them in their per-bond pass at the force evaluation of
//! `(x_k, R_k)`.

use super::ShearVariant;
use crate::rng::splitmix64;
use crate::rrp;
use glam::{DQuat, DVec3};
use serde::{Deserialize, Serialize};

/// The channels, in the order of every `[f64; 4]` below and of `breaks.csv`'s `mode` names.
pub const CHANNELS: [&str; 4] = ["tension", "shear", "bending", "twist"];

/// How the channel ratios combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RuptureRule {
    /// Breaks when the largest ratio reaches 1.
    #[default]
    Any,
    /// Breaks when the sum of the ratios reaches 1 (the linear envelope of LAMMPS'
    /// `bpm/rotational`, in strain form).
    Sum,
}

/// Resolved rupture parameters of a model.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Rupture {
    /// `1/t_c` per channel (tension strain, shear, bending, twist angles in radians); 0 for a
    /// channel without a threshold, which then never breaks a bond.
    pub inv_thresholds: [f64; 4],
    pub rule: RuptureRule,
    /// Weibull modulus and seed of the per-bond threshold scale, if any.
    pub weibull: Option<(f64, u64)>,
}

/// The four measures of a bond (MODEL §6), all objective, in `CHANNELS` order:
///
/// * tension `ε = L/L0 − 1`, only `ε > 0` counted (compression never breaks a bond);
/// * shear angle `φ`: between `n_e = ΔR_e d̂0` and `d̂`, largest over the two ends (`objective`),
///   or between `ΔR_i d̂0` and `ΔR_j d̂` (`paper`);
/// * bending angle `θ_b = |θ_ij − (θ_ij·d̂) d̂|` and twist angle `θ_t = |θ_ij·d̂|`, with `θ_ij` the
///   rotation vector of `Q_ij = ΔR_j ΔR_iᵀ` (that of the bending term).
///
/// Angles are `atan2(|a × b|, a·b)`, never `acos` (accurate near 0 and π).
#[inline]
pub fn rupture_measures(variant: ShearVariant, d: DVec3, l0: f64, dhat0: DVec3, dq_i: DQuat, dq_j: DQuat) -> [f64; 4] {
    let l = d.length();
    let dhat = d / l;
    let tension = (l / l0 - 1.0).max(0.0);
    let angle = |a: DVec3, b: DVec3| a.cross(b).length().atan2(a.dot(b));
    let n_i = dq_i * dhat0;
    let shear = match variant {
        ShearVariant::Paper => angle(n_i, dq_j * dhat),
        ShearVariant::Objective => angle(n_i, dhat).max(angle(dq_j * dhat0, dhat)),
    };
    let theta = rrp::rotation_vector(dq_j * dq_i.conjugate());
    let along = theta.dot(dhat);
    [tension, shear, (theta - along * dhat).length(), along.abs()]
}

/// The rupture rule: ratios `r_c = measure_c · inv_threshold_c / scale`; the bond breaks when
/// `max_c r_c ≥ 1` (`sum = false`) or `Σ_c r_c ≥ 1` (`sum = true`). Returns the channel with the
/// largest ratio (lowest index on ties) when it breaks.
#[inline]
pub fn rupture(measures: [f64; 4], inv_thresholds: [f64; 4], scale: f64, sum: bool) -> Option<usize> {
    let mut total = 0.0;
    let mut best = 0;
    let mut best_r = -1.0;
    for c in 0..4 {
        let r = measures[c] * inv_thresholds[c] / scale;
        total += r;
        if r > best_r {
            best_r = r;
            best = c;
        }
    }
    let reached = if sum { total >= 1.0 } else { best_r >= 1.0 };
    reached.then_some(best)
}

/// The Weibull scale `s_b` of the thresholds of the bond between particles `i` and `j`:
/// `s_b = (−ln(1 − u))^{1/m} / Γ(1 + 1/m)` (unit mean), with `u ∈ (0, 1)` drawn from
/// SplitMix64 of `(seed, min(i, j), max(i, j))`, so it depends on neither the bond order nor
/// the engine.
pub fn weibull_scale(modulus: f64, seed: u64, i: u32, j: u32) -> f64 {
    let key = ((i.min(j) as u64) << 32) | i.max(j) as u64;
    let bits = splitmix64(seed ^ splitmix64(key));
    // 53 random bits, centred in their interval: u is never 0 nor 1.
    let u = ((bits >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    (-(-u).ln_1p()).powf(1.0 / modulus) / libm::tgamma(1.0 + 1.0 / modulus)
}

impl Rupture {
    /// Scale of each bond's thresholds (all 1 without Weibull).
    pub fn scales(&self, pairs: impl Iterator<Item = (u32, u32)>) -> Vec<f64> {
        pairs.map(|(i, j)| self.scale(i, j)).collect()
    }

    /// Scale of the thresholds of the bond between particles i and j (1 without Weibull).
    pub fn scale(&self, i: u32, j: u32) -> f64 {
        match self.weibull {
            None => 1.0,
            Some((m, seed)) => weibull_scale(m, seed, i, j),
        }
    }
}

/// One broken bond (a row of `breaks.csv`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BreakEvent {
    pub step: u64,
    pub t: f64,
    pub bond: u32,
    pub i: u32,
    pub j: u32,
    /// Index into `CHANNELS` of the largest ratio.
    pub mode: u8,
    /// Midpoint of the two particles at the break.
    pub x: DVec3,
    /// Bond energy `U^m + U^a + U^s` at the break, booked into `E_released`.
    pub energy: f64,
}
