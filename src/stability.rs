//! Estimate of the largest stable time step (explicit central-difference limit `h < 2/ω_max`).
//!
//! `ω_max` is bounded per particle by Gershgorin's theorem on the mass-scaled stiffness of its
//! bonds (axial: `K^a/L0²` per bond; bending/torsion: `K^m` per bond over J), by the Hertz
//! contact stiffness at the overlap an impact at the scenario's largest speed would reach, and
//! by the pendulum field. Shear is quartic (no small-strain stiffness) and is not counted.
//! For the paper's torus this gives ω ≈ 240 (axial) and ≈ 450 (wall impact at v0 = 1),
//! i.e. `h_max ≈ 4.4e-3` (MODEL §5).

use crate::model::{Model, Params, Particles};
use serde::Serialize;

/// Largest stable step and the mode that limits it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StabilityEstimate {
    pub h_max: f64,
    pub omega_max: f64,
    pub limiting: String,
}

/// Fraction of `h_max` above which a run warns.
pub const WARN_FRACTION: f64 = 0.5;

pub fn estimate(model: &Model) -> StabilityEstimate {
    estimate_parts(&model.particles, &model.params, model.bonds.iter().map(|b| (b.i, b.j, b.l0)))
}

/// The estimate from particles and bonds given as `(i, j, L0)` (so a geometry can be assessed
/// before its bonds take their reference data; `L0 = |x_i − x_j|` at t = 0 gives the same
/// result as `estimate` on the model).
pub fn estimate_parts(p: &Particles, prm: &Params, bonds: impl Iterator<Item = (u32, u32, f64)>) -> StabilityEstimate {
    let n = p.len();
    // The mode's description is formatted only when it becomes the limiting one.
    let mut best = (0.0f64, String::from("nothing"));
    let mut consider = |omega2: f64, what: &dyn Fn() -> String| {
        if omega2.is_finite() && omega2 > best.0 {
            best = (omega2, what());
        }
    };
    // Gershgorin rows of M^{-1/2} K M^{-1/2} for the axial and bending springs.
    let mut ax = vec![0.0f64; n];
    let mut bend = vec![0.0f64; n];
    for (i, j, l0) in bonds {
        let (i, j) = (i as usize, j as usize);
        let k = prm.k_axial / (l0 * l0);
        let off = k / (p.mass[i] * p.mass[j]).sqrt();
        ax[i] += k / p.mass[i] + off;
        ax[j] += k / p.mass[j] + off;
        let offr = prm.k_bend / (p.inertia[i] * p.inertia[j]).sqrt();
        bend[i] += prm.k_bend / p.inertia[i] + offr;
        bend[j] += prm.k_bend / p.inertia[j] + offr;
    }
    for i in (0..n).filter(|&i| !p.fixed[i]) {
        consider(ax[i], &|| format!("binder axial mode at particle {i}"));
        consider(bend[i], &|| format!("binder bending mode at particle {i}"));
    }
    // Impact speed: the fastest particle's speed (translation plus spin at its surface),
    // plus the speed gravity can add over the extent of the scenario.
    let (lo, hi) =
        p.x.iter().fold((glam::DVec3::INFINITY, glam::DVec3::NEG_INFINITY), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    let r_max = p.radius.iter().copied().fold(0.0, f64::max);
    let extent = if n > 0 { (hi - lo).length() + 2.0 * r_max } else { 0.0 };
    let v_fast = (0..n).map(|i| p.v[i].length() + p.w[i].length() * p.radius[i]).fold(0.0, f64::max);
    let v_imp = v_fast + (2.0 * prm.gravity.length() * extent).sqrt();
    if v_imp > 0.0 {
        for i in (0..n).filter(|&i| !p.fixed[i]) {
            let (m, r) = (p.mass[i], p.radius[i]);
            if !prm.walls.is_empty() && prm.k_wall > 0.0 {
                // ½ m v² = (2/5) K δ^{5/2}; dF/d(gap) = 1.5 K δ^{1/2} / r².
                let delta = (1.25 * m * v_imp * v_imp / prm.k_wall).powf(0.4);
                consider(1.5 * prm.k_wall * delta.sqrt() / (r * r * m), &|| {
                    format!("wall impact at speed {v_imp:.3} (particle {i})")
                });
            }
            if prm.k_contact > 0.0 && n > 1 {
                // Head-on impact with an equal particle: reduced mass m/2, relative speed 2v.
                let mu = 0.5 * m;
                let rs = 2.0 * r;
                let delta = (2.5 * m * v_imp * v_imp / prm.k_contact).powf(0.4);
                consider(1.5 * prm.k_contact * delta.sqrt() / (rs * rs * mu), &|| {
                    format!("particle impact at speed {v_imp:.3} (particle {i})")
                });
            }
        }
    }
    if let Some(pd) = prm.pendulum {
        for i in (0..n).filter(|&i| !p.fixed[i]) {
            consider((p.mass[i] * pd.g * pd.rho0.length() / p.inertia[i]).abs(), &|| "pendulum".into());
        }
    }
    let omega = best.0.sqrt();
    StabilityEstimate {
        h_max: if omega > 0.0 { 2.0 / omega } else { f64::INFINITY },
        omega_max: omega,
        limiting: best.1,
    }
}

/// Checks a time step against the estimate: an error above `h_max` unless `force`, a warning
/// (returned as text) above `WARN_FRACTION · h_max`.
pub fn check_step(dt: f64, force: bool, est: &StabilityEstimate) -> Result<Option<String>, crate::error::EngineError> {
    if dt > est.h_max && !force {
        return Err(crate::error::EngineError::Unstable { dt, h_max: est.h_max, reason: est.limiting.clone() });
    }
    if dt > WARN_FRACTION * est.h_max {
        return Ok(Some(format!(
            "dt = {dt} is {:.0}% of the stability estimate {:.3e} ({}); results may be inaccurate or blow up",
            100.0 * dt / est.h_max,
            est.h_max,
            est.limiting
        )));
    }
    Ok(None)
}
