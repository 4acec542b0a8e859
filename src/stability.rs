//! Estimate of the largest stable time step (explicit central-difference limit `h < 2/ω_max`).
//!
//! `ω_max` is bounded per particle by Gershgorin's theorem on the mass-scaled stiffness of its
//! bonds (axial: `K^a/L0²` per bond; bending/torsion: `K^m` per bond over J), by the Hertz
//! contact stiffness at the overlap an impact at the scenario's largest speed would reach, and
//! by the pendulum field. Shear is quartic (no small-strain stiffness) and is not counted.
//! For the paper's torus this gives ω ≈ 240 (axial) and ≈ 450 (wall impact at v0 = 1),
//! i.e. `h_max ≈ 4.4e-3` (MODEL §5).

use crate::model::Model;
use serde::Serialize;

/// Largest stable step and the mode that limits it.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct StabilityEstimate {
    /// Infinite when nothing limits the step (JSON writes it as `null`).
    #[serde(deserialize_with = "null_is_infinite")]
    pub h_max: f64,
    pub omega_max: f64,
    pub limiting: String,
}

fn null_is_infinite<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(<Option<f64> as serde::Deserialize>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// Fraction of `h_max` above which a run warns.
pub const WARN_FRACTION: f64 = 0.5;

pub fn estimate(model: &Model) -> StabilityEstimate {
    let p = &model.particles;
    let prm = &model.params;
    let n = p.len();
    let mut best = (0.0f64, String::from("nothing"));
    let mut consider = |omega2: f64, what: String| {
        if omega2.is_finite() && omega2 > best.0 {
            best = (omega2, what);
        }
    };
    // Gershgorin rows of M^{-1/2} K M^{-1/2} for the axial and bending springs.
    let mut ax = vec![0.0f64; n];
    let mut bend = vec![0.0f64; n];
    for b in &model.bonds {
        let (i, j) = (b.i as usize, b.j as usize);
        let k = prm.k_axial / (b.l0 * b.l0);
        let off = k / (p.mass[i] * p.mass[j]).sqrt();
        ax[i] += k / p.mass[i] + off;
        ax[j] += k / p.mass[j] + off;
        let offr = prm.k_bend / (p.inertia[i] * p.inertia[j]).sqrt();
        bend[i] += prm.k_bend / p.inertia[i] + offr;
        bend[j] += prm.k_bend / p.inertia[j] + offr;
    }
    for i in (0..n).filter(|&i| !p.fixed[i]) {
        consider(ax[i], format!("binder axial mode at particle {i}"));
        consider(bend[i], format!("binder bending mode at particle {i}"));
    }
    // Impact speed: the fastest particle's speed (translation plus spin at its surface),
    // plus the speed gravity can add over the extent of the scenario.
    let (lo, hi) =
        p.x.iter().fold((glam::DVec3::INFINITY, glam::DVec3::NEG_INFINITY), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    let extent = if n > 0 { (hi - lo).length() + 2.0 * model.max_radius() } else { 0.0 };
    let v_fast = (0..n).map(|i| p.v[i].length() + p.w[i].length() * p.radius[i]).fold(0.0, f64::max);
    let v_imp = v_fast + (2.0 * prm.gravity.length() * extent).sqrt();
    if v_imp > 0.0 {
        for i in (0..n).filter(|&i| !p.fixed[i]) {
            let (m, r) = (p.mass[i], p.radius[i]);
            if !prm.walls.is_empty() && prm.k_wall > 0.0 {
                // ½ m v² = (2/5) K δ^{5/2}; dF/d(gap) = 1.5 K δ^{1/2} / r².
                let delta = (1.25 * m * v_imp * v_imp / prm.k_wall).powf(0.4);
                consider(
                    1.5 * prm.k_wall * delta.sqrt() / (r * r * m),
                    format!("wall impact at speed {v_imp:.3} (particle {i})"),
                );
            }
            if prm.k_contact > 0.0 && n > 1 {
                // Head-on impact with an equal particle: reduced mass m/2, relative speed 2v.
                let mu = 0.5 * m;
                let rs = 2.0 * r;
                let delta = (2.5 * m * v_imp * v_imp / prm.k_contact).powf(0.4);
                consider(
                    1.5 * prm.k_contact * delta.sqrt() / (rs * rs * mu),
                    format!("particle impact at speed {v_imp:.3} (particle {i})"),
                );
            }
        }
    }
    overlaps_at_start(model, v_imp, &mut consider);
    if let Some(pd) = prm.pendulum {
        for i in (0..n).filter(|&i| !p.fixed[i]) {
            consider((p.mass[i] * pd.g * pd.rho0.length() / p.inertia[i]).abs(), "pendulum".into());
        }
    }
    let omega = best.0.sqrt();
    StabilityEstimate {
        h_max: if omega > 0.0 { 2.0 / omega } else { f64::INFINITY },
        omega_max: omega,
        limiting: best.1,
    }
}

/// Contacts already compressed at t = 0 (particle–particle and particle–wall): their stiffness
/// at the initial overlap δ0 deepened by an impact at `v_imp` (`δ0 + δ_imp` bounds the deepest
/// overlap from above, since `(a + b)^{5/2} ≥ a^{5/2} + b^{5/2}`). Without this, two spheres
/// that start 10 % overlapped with a stiff contact look harmless to the estimate and blow up.
fn overlaps_at_start(model: &Model, v_imp: f64, consider: &mut impl FnMut(f64, String)) {
    let p = &model.particles;
    let prm = &model.params;
    let n = p.len();
    // Overlap a Hertz contact of stiffness k reaches when a reduced mass mu meets it at speed v.
    let impact = |mu: f64, v: f64, k: f64| (1.25 * mu * v * v / k).powf(0.4);
    if prm.k_wall > 0.0 {
        for i in (0..n).filter(|&i| !p.fixed[i]) {
            let (m, r) = (p.mass[i], p.radius[i]);
            for w in &prm.walls {
                let d0 = 1.0 - (p.x[i] - w.point).dot(w.normal) / r;
                if d0 > 0.0 {
                    let delta = d0 + impact(m, v_imp, prm.k_wall);
                    consider(
                        1.5 * prm.k_wall * delta.sqrt() / (r * r * m),
                        format!("wall contact at particle {i}, overlapping {:.3}% of its radius at t = 0", 100.0 * d0),
                    );
                }
            }
        }
    }
    if prm.k_contact <= 0.0 || n < 2 {
        return;
    }
    let mut grid = crate::grid::CellGrid::new(n, 2.0 * model.max_radius());
    if grid.build(|i| p.x[i]).is_err() {
        return; // a position the grid cannot place is reported by the engines
    }
    for i in 0..n {
        grid.for_each_neighbour(i, |j| {
            if j <= i || (p.fixed[i] && p.fixed[j]) {
                return;
            }
            let rs = p.radius[i] + p.radius[j];
            let d0 = 1.0 - (p.x[i] - p.x[j]).length() / rs;
            if d0 <= 0.0 {
                return;
            }
            let mu = match (p.fixed[i], p.fixed[j]) {
                (true, _) => p.mass[j],
                (_, true) => p.mass[i],
                _ => p.mass[i] * p.mass[j] / (p.mass[i] + p.mass[j]),
            };
            let delta = d0 + impact(mu, 2.0 * v_imp, prm.k_contact);
            consider(
                1.5 * prm.k_contact * delta.sqrt() / (rs * rs * mu),
                format!("contact of particles {i} and {j}, overlapping {:.3}% at t = 0", 100.0 * d0),
            );
        });
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
