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
#[inline(always)]
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

/// Slack of `rupture_bounds` in f64 (the CPU engine, GPU f64): relative, and absolute in
/// radians. It must exceed the rounding by which a computed measure can exceed its computed
/// bound: a few units of 2⁻⁵² (atan2 and the division within one ulp each, `θ` formed from `u`
/// with three roundings), and the f64 device atan2's 2 ulp (tests/gpu_probes.rs). 1e-9 is 10⁶
/// times that and still lets every bond whose largest ratio is below 1 − 2·10⁻⁹ skip atan2.
/// (Measured: the tests below find bounds below their measures with no slack, and none with
/// 1e-13, on a large rotation about an axis near d̂ where θ_b is a sliver of |θ|.)
pub const BOUND_SLACK_F64: f64 = 1e-9;
/// The same in f32 (GPU): f32 rounding is 2⁻²⁴ ≈ 6e-8 a step, lavapipe's atan2 is within 3.3e-6
/// of the correctly rounded value (tests/gpu_probes.rs) and WGSL promises no tighter than a few
/// thousand ulps (≈ 2e-4); 1e-3 covers all of these, and only costs the bonds within 0.2 % of
/// breaking the exact test.
pub const BOUND_SLACK_F32: f64 = 1e-3;

/// Upper bounds of the four measures `rupture_measures` computes, componentwise, formed from
/// the same intermediate values but without atan2: where `x = a·b > 0`,
/// `atan2(y, x) ≤ min(y/x, π/2)` (`atan z ≤ z`), else `≤ π`; and the rotation vector
/// `θ = f u` of the canonical `Q_ij = (u, w)` has `f = 2 atan2(|u|, w)/|u| ≤ min(2/w, π/|u|)`, so
/// `θ_b ≤ f_max |u − (u·d̂) d̂|` and `θ_t ≤ f_max |u·d̂|`. Each bound is widened by `slack`
/// (relative, and absolute in radians, times `|u|` for θ) to cover rounding: with the computed
/// measures `m_c` and bounds `b_c`, `m_c ≤ b_c` holds componentwise, and since `rupture` is
/// monotone in every measure, `rupture(b_c) = None` implies `rupture(m_c) = None`. So
/// `bond_breaks` decides exactly as `rupture(rupture_measures(..))` (tested), at the cost of a
/// few divisions for the bonds far from breaking, which in the force loops are nearly all.
#[inline(always)]
pub fn rupture_bounds(
    variant: ShearVariant,
    d: DVec3,
    l0: f64,
    dhat0: DVec3,
    dq_i: DQuat,
    dq_j: DQuat,
    slack: f64,
) -> [f64; 4] {
    let l = d.length();
    let dhat = d / l;
    let tension = (l / l0 - 1.0).max(0.0);
    use std::f64::consts::{FRAC_PI_2, PI};
    let widen = |b: f64| b * (1.0 + slack) + slack;
    // Either branch is a bound; the tests only keep the divisions finite.
    let angle_max = |a: DVec3, b: DVec3| {
        let (y, x) = (a.cross(b).length(), a.dot(b));
        widen(if x <= 0.0 {
            PI
        } else if y < FRAC_PI_2 * x {
            y / x
        } else {
            FRAC_PI_2
        })
    };
    let n_i = dq_i * dhat0;
    let shear = match variant {
        ShearVariant::Paper => angle_max(n_i, dq_j * dhat),
        ShearVariant::Objective => angle_max(n_i, dhat).max(angle_max(dq_j * dhat0, dhat)),
    };
    let q = rrp::canonical(dq_j * dq_i.conjugate());
    let u = DVec3::new(q.x, q.y, q.z);
    let s = u.length();
    let f_max = (if 2.0 * s <= PI * q.w { 2.0 / q.w } else { PI / s }) * (1.0 + slack);
    let along = u.dot(dhat);
    let bend = f_max * ((u - along * dhat).length() + slack * s);
    let twist = f_max * (along.abs() + slack * s);
    [tension * (1.0 + slack) + slack, shear, bend, twist]
}

/// Whether (and in which channel) a bond breaks: `rupture(rupture_measures(..))`, decided
/// first on `rupture_bounds` so that the bonds far from breaking skip the measures' atan2s.
/// `slack`: `BOUND_SLACK_F64` here and on GPU f64, `BOUND_SLACK_F32` on GPU f32.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn bond_breaks(
    variant: ShearVariant,
    d: DVec3,
    l0: f64,
    dhat0: DVec3,
    dq_i: DQuat,
    dq_j: DQuat,
    inv_thresholds: [f64; 4],
    scale: f64,
    sum: bool,
    slack: f64,
) -> Option<usize> {
    let bounds = rupture_bounds(variant, d, l0, dhat0, dq_i, dq_j, slack);
    // A bound that is not finite (a degenerate bond) proves nothing: measure it.
    if bounds.iter().all(|b| b.is_finite()) {
        rupture(bounds, inv_thresholds, scale, sum)?;
    }
    rupture(rupture_measures(variant, d, l0, dhat0, dq_i, dq_j), inv_thresholds, scale, sum)
}

/// The rupture rule: ratios `r_c = measure_c · inv_threshold_c / scale`; the bond breaks when
/// `max_c r_c ≥ 1` (`sum = false`) or `Σ_c r_c ≥ 1` (`sum = true`). Returns the channel with the
/// largest ratio (lowest index on ties) when it breaks.
#[inline(always)]
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
    /// Energy booked into `E_released`: the bond energy `U^m + U^a + U^s` at the break plus half a
    /// step of its loads' work (`released_energy`, docs/PHYSICS.md "Rupture").
    pub energy: f64,
}

/// The energy a bond that breaks at an evaluation takes out of the budget: its potential `u`
/// (`U^m + U^a + U^s`) at this state plus `½ h P`, with `P = F_i·dv + RM_i·Ω_i + RM_j·Ω_j` the
/// power of its loads (`f_i`, `m_i`, `m_j`) at the velocities the step knows (`dv = v_i − v_j`,
/// `w_i`, `w_j`; `v_{k−½}` of the RRP maps): the closing half kick's share of the trapezoid
/// rule's work, which that kick no longer applies once the bond exerts nothing. `h` = 0 at the
/// initial evaluation (no kick is missing there). Booking `u` alone makes the ledger first order
/// in h (1.32e-2 at h = 5e-4, 6.62e-3 at 2.5e-4 on scenarios/solid_torus_impact.json to t = 1;
/// with this, 1.57e-4 and 3.78e-5). WGSL twin of the same name in shaders/interactions.wgsl.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn released_energy(u: f64, f_i: DVec3, m_i: DVec3, m_j: DVec3, dv: DVec3, w_i: DVec3, w_j: DVec3, h: f64) -> f64 {
    u + 0.5 * h * (f_i.dot(dv) + m_i.dot(w_i) + m_j.dot(w_j))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{splitmix64, unit};

    /// Uniform numbers in [0, 1) from a counter (reproducible, no dependency).
    struct Draw(u64);
    impl Draw {
        fn next(&mut self) -> f64 {
            self.0 += 1;
            unit(splitmix64(self.0))
        }
        fn vector(&mut self) -> DVec3 {
            DVec3::new(self.next() - 0.5, self.next() - 0.5, self.next() - 0.5).normalize()
        }
        /// A rotation of angle 10^[-7, 0.5) rad, or up to π.
        fn rotation(&mut self) -> DQuat {
            let angle = if self.next() < 0.8 {
                10f64.powf(-7.0 + 7.5 * self.next())
            } else {
                std::f64::consts::PI * self.next()
            };
            rrp::quat_from_rotation_vector(self.vector() * angle.min(std::f64::consts::PI))
        }
    }

    /// A bond in some state: strain of ±30 %, any attitudes.
    fn bond(r: &mut Draw) -> (DVec3, f64, DVec3, DQuat, DQuat) {
        let l0 = 0.5 + r.next();
        let dhat0 = r.vector();
        // Directions near d̂0 (small shear) and anywhere.
        let dir = if r.next() < 0.7 {
            (dhat0 + r.vector() * 10f64.powf(-6.0 + 6.0 * r.next())).normalize()
        } else {
            r.vector()
        };
        let d = dir * l0 * (0.7 + 0.6 * r.next());
        (d, l0, dhat0, r.rotation(), r.rotation())
    }

    #[test]
    fn bounds_are_above_the_measures_and_useful() {
        let mut r = Draw(1);
        let mut tight = 0;
        for _ in 0..200_000 {
            let (d, l0, dhat0, dq_i, dq_j) = bond(&mut r);
            for variant in [ShearVariant::Paper, ShearVariant::Objective] {
                let m = rupture_measures(variant, d, l0, dhat0, dq_i, dq_j);
                let b = rupture_bounds(variant, d, l0, dhat0, dq_i, dq_j, BOUND_SLACK_F64);
                // |θ_ij|: the bending and twist bounds are tight when the whole rotation is small.
                let theta = m[2].hypot(m[3]);
                for c in 0..4 {
                    assert!(m[c] <= b[c], "{variant:?} channel {c}: measure {} above bound {}", m[c], b[c]);
                    // Small angles are nearly their bounds (tan and the log's factor ≈ 1).
                    let small = if c == 1 { m[c] < 0.1 } else { theta < 0.1 };
                    if c > 0 && m[c] > 1e-6 && small {
                        assert!(b[c] < 1.01 * m[c] + 1e-8, "{variant:?} channel {c}: bound {} of {}", b[c], m[c]);
                        tight += 1;
                    }
                }
            }
        }
        assert!(tight > 100_000, "only {tight} small-angle cases");
    }

    /// Thresholds at which the bond sits at, just below or just above a channel's threshold:
    /// there a bound that is too low would decide wrongly.
    #[test]
    fn bond_breaks_decides_as_the_measures_do() {
        let mut r = Draw(7);
        let (mut skipped, mut broke, mut held_near) = (0, 0, 0);
        let offsets = [-1e-6, -1e-9, -1e-12, -1e-15, 0.0, 1e-15, 1e-12, 1e-9, 1e-6, -0.5, 0.5];
        for n in 0..200_000 {
            let (d, l0, dhat0, dq_i, dq_j) = bond(&mut r);
            let variant = if n % 2 == 0 { ShearVariant::Paper } else { ShearVariant::Objective };
            let sum = n % 3 == 0;
            let scale = 0.2 + 2.0 * r.next();
            let m = rupture_measures(variant, d, l0, dhat0, dq_i, dq_j);
            // One channel set near its threshold; the others far, or absent.
            let c = (r.next() * 4.0) as usize;
            let mut inv = [0.0; 4];
            for (k, v) in inv.iter_mut().enumerate() {
                if k != c && r.next() < 0.5 {
                    *v = 1.0 / (10.0 * (m[k] + 1e-3) * scale);
                }
            }
            if m[c] > 0.0 {
                let off = offsets[(r.next() * offsets.len() as f64) as usize];
                inv[c] = (1.0 + off) / (m[c] * scale);
            }
            let want = rupture(m, inv, scale, sum);
            let b = rupture_bounds(variant, d, l0, dhat0, dq_i, dq_j, BOUND_SLACK_F64);
            assert_eq!(bond_breaks(variant, d, l0, dhat0, dq_i, dq_j, inv, scale, sum, BOUND_SLACK_F64), want);
            match (rupture(b, inv, scale, sum), want) {
                (None, _) => skipped += 1,
                (Some(_), Some(_)) => broke += 1,
                (Some(_), None) => held_near += 1,
            }
        }
        // The test reaches every path: skipped on the bounds, broken, and held after measuring.
        assert!(skipped > 10_000 && broke > 10_000 && held_near > 2_000, "{skipped} {broke} {held_near}");
    }

    /// The hardest case for the bending bound: a large rotation (up to a half turn) about an
    /// axis within 10⁻⁹…10⁻² rad of d̂, so that θ_b is a tiny part of a large |θ|.
    #[test]
    fn bounds_hold_for_large_twists_with_little_bending() {
        let mut r = Draw(99);
        for _ in 0..100_000 {
            let (d, l0, dhat0, dq_i, _) = bond(&mut r);
            let dhat = d.normalize();
            let axis = (dhat + r.vector() * 10f64.powf(-9.0 + 7.0 * r.next())).normalize();
            let angle = std::f64::consts::PI * (1.0 - 10f64.powf(-12.0 * r.next()));
            let dq_j = rrp::quat_from_rotation_vector(axis * angle) * dq_i;
            for variant in [ShearVariant::Paper, ShearVariant::Objective] {
                let m = rupture_measures(variant, d, l0, dhat0, dq_i, dq_j);
                let b = rupture_bounds(variant, d, l0, dhat0, dq_i, dq_j, BOUND_SLACK_F64);
                for c in 0..4 {
                    assert!(m[c] <= b[c], "{variant:?} channel {c}: measure {} above bound {}", m[c], b[c]);
                }
            }
        }
    }

    #[test]
    fn degenerate_bonds_are_measured() {
        let q = DQuat::IDENTITY;
        // A zero-length bond: no finite bound, so the exact test decides (and holds here).
        let inv = [1.0, 1.0, 1.0, 1.0];
        let got =
            bond_breaks(ShearVariant::Objective, DVec3::ZERO, 1.0, DVec3::X, q, q, inv, 1.0, true, BOUND_SLACK_F64);
        assert_eq!(
            got,
            rupture(rupture_measures(ShearVariant::Objective, DVec3::ZERO, 1.0, DVec3::X, q, q), inv, 1.0, true)
        );
        // A half-turn (w = 0) about d̂: pure twist π.
        let half = DQuat::from_xyzw(1.0, 0.0, 0.0, 0.0);
        let b = rupture_bounds(ShearVariant::Objective, DVec3::X, 1.0, DVec3::X, q, half, BOUND_SLACK_F64);
        let m = rupture_measures(ShearVariant::Objective, DVec3::X, 1.0, DVec3::X, q, half);
        assert!(
            (m[3] - std::f64::consts::PI).abs() < 1e-15 && m[3] <= b[3] && b[3] < std::f64::consts::PI * (1.0 + 1e-8),
            "{m:?} {b:?}"
        );
    }
}
