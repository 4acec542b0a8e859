//! Estimate of the largest stable time step (explicit central-difference limit `h < 2/ω_max`).
//!
//! `ω_max` is bounded per particle by Gershgorin's theorem on the mass-scaled stiffness of its
//! bonds (axial: `K^a/L0²` per bond; bending/torsion: `K^m` per bond over J), by the Hertz
//! contact stiffness at the overlap an impact at the scenario's largest speed would reach, and
//! by the pendulum field. Shear is quartic (no small-strain stiffness) and is not counted.
//! For the paper's torus this gives ω ≈ 240 (axial) and ≈ 450 (wall impact at v0 = 1),
//! i.e. `h_max ≈ 4.4e-3` (MODEL §5).
//!
//! MODEL §10's loads tighten it where they are on (`damped`): a mode of frequency ω with a
//! dashpot of rate λ (damping per mass) integrated with the velocity the step knows is stable
//! for `h < 2/(λ/2 + sqrt(ω² + λ²/4))` (λ = 2ζω: the central-difference limit
//! `(2/ω)(sqrt(1 + ζ²) − ζ)`; ω = 0: `h < 2/λ`, a pure dashpot). The Hertz dashpot has the
//! damping ratio `ζ = β sqrt(5/6)` at every overlap (η_n over 2 sqrt(m* · 1.5 k_H s^{1/2})); the
//! tangential spring adds a mode of stiffness κ times the normal one acting on the contact
//! point's mobility `1/m* + l_i²/J_i + l_j²/J_j`, with the dashpot √κ η_n; the binder's dashpots
//! add their rates, bounded per particle by Gershgorin as the springs are.

use crate::model::{Model, Params, Particles};
use rayon::prelude::*;
use serde::Serialize;

/// Largest stable step and the mode that limits it.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct StabilityEstimate {
    /// Infinite when nothing limits the step (JSON writes it as `null`).
    #[serde(deserialize_with = "null_is_infinite")]
    pub h_max: f64,
    pub omega_max: f64,
    pub limiting: String,
    /// What slows or endangers the run without limiting the step (`check_step` reports them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

fn null_is_infinite<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(<Option<f64> as serde::Deserialize>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// Fraction of `h_max` above which a run warns.
pub const WARN_FRACTION: f64 = 0.5;

pub fn estimate(model: &Model) -> StabilityEstimate {
    estimate_parts(&model.particles, &model.params, model.bonds.iter().map(|b| (b.i, b.j, b.l0)), &model.clumps)
}

/// The estimate from particles and bonds given as `(i, j, L0)` (so a geometry can be assessed
/// before its bonds take their reference data; `L0 = |x_i − x_j|` at t = 0 gives the same
/// result as `estimate` on the model).
pub fn estimate_parts(
    p: &Particles,
    prm: &Params,
    bonds: impl Iterator<Item = (u32, u32, f64)>,
    clumps: &[crate::model::Clump],
) -> StabilityEstimate {
    let n = p.len();
    // Each particle's clump (MODEL §12), `u32::MAX` for none: a clump's own spheres never touch,
    // and a clump turns with its tensor, whose smallest principal moment is at least
    // `1/‖J⁻¹‖_F` (the pendulum mode's moment of inertia).
    let mut clump_of = vec![u32::MAX; if clumps.is_empty() { 0 } else { n }];
    let mut smallest_moment = Vec::with_capacity(clumps.len());
    for (c, cl) in clumps.iter().enumerate() {
        clump_of[cl.members.start as usize..cl.members.end as usize].fill(c as u32);
        let inv = cl.inertia.inverse().to_cols_array();
        smallest_moment.push(1.0 / inv.iter().map(|x| x * x).sum::<f64>().sqrt());
    }
    let clump = |i: usize| clump_of.get(i).copied().unwrap_or(u32::MAX);
    // The mode's description is formatted only when it becomes the limiting one.
    let mut best = (0.0f64, String::from("nothing"));
    let mut consider = |omega2: f64, what: &dyn Fn() -> String| {
        if omega2.is_finite() && omega2 > best.0 {
            best = (omega2, what());
        }
    };
    // Gershgorin rows of M^{-1/2} K M^{-1/2} for the axial and bending springs, and of
    // M^{-1/2} C M^{-1/2} for the binder's dashpots (MODEL §10).
    let loss = prm.dissipation.unwrap_or_default();
    let g = loss.binder;
    let mut ax = vec![0.0f64; n];
    let mut bend = vec![0.0f64; n];
    let (mut ax_rate, mut bend_rate) = (vec![0.0f64; n], vec![0.0f64; n]);
    for (i, j, l0) in bonds {
        let (i, j) = (i as usize, j as usize);
        let k = prm.k_axial / (l0 * l0);
        let off = k / (p.mass[i] * p.mass[j]).sqrt();
        ax[i] += k / p.mass[i] + off;
        ax[j] += k / p.mass[j] + off;
        let offr = prm.k_bend / (p.inertia[i] * p.inertia[j]).sqrt();
        bend[i] += prm.k_bend / p.inertia[i] + offr;
        bend[j] += prm.k_bend / p.inertia[j] + offr;
        if loss.binder() {
            // Translation: the axial or shear dashpot; rotation: bending or twist, and the
            // shear dashpot's couple ½ d × F (arm L0/2 at each end).
            let c = g[0].max(g[1]);
            let off = c / (p.mass[i] * p.mass[j]).sqrt();
            ax_rate[i] += c / p.mass[i] + off;
            ax_rate[j] += c / p.mass[j] + off;
            let c = g[2].max(g[3]) + 0.25 * g[1] * l0 * l0;
            let offr = c / (p.inertia[i] * p.inertia[j]).sqrt();
            bend_rate[i] += c / p.inertia[i] + offr;
            bend_rate[j] += c / p.inertia[j] + offr;
        }
    }
    for i in (0..n).filter(|&i| !p.fixed[i]) {
        consider(damped(ax[i], ax_rate[i]), &|| format!("binder axial mode at particle {i}"));
        consider(damped(bend[i], bend_rate[i]), &|| format!("binder bending mode at particle {i}"));
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
                let mobility = 1.0 + r * r * m / p.inertia[i];
                let omega2 = 1.5 * prm.k_wall * delta.sqrt() / (r * r * m);
                consider(contact_mode(omega2, loss.beta_wall, loss.mu_wall, loss.stiffness_ratio, mobility), &|| {
                    format!("wall impact at speed {} (particle {i})", readable(v_imp))
                });
            }
            if prm.k_contact > 0.0 && n > 1 {
                // Head-on impact with an equal particle: reduced mass m/2, relative speed 2v.
                let mu = 0.5 * m;
                let rs = 2.0 * r;
                let delta = (2.5 * m * v_imp * v_imp / prm.k_contact).powf(0.4);
                let mobility = 1.0 + r * r * m / p.inertia[i];
                let omega2 = 1.5 * prm.k_contact * delta.sqrt() / (rs * rs * mu);
                consider(contact_mode(omega2, loss.beta, loss.mu, loss.stiffness_ratio, mobility), &|| {
                    format!("particle impact at speed {} (particle {i})", readable(v_imp))
                });
            }
        }
    }
    overlaps_at_start(p, prm, v_imp, &clump, &mut consider);
    if let Some(pd) = prm.pendulum {
        for i in (0..n).filter(|&i| !p.fixed[i]) {
            let j = match clump(i) {
                u32::MAX => p.inertia[i],
                c => smallest_moment[c as usize],
            };
            consider((p.mass[i] * pd.g * pd.rho0.length() / j).abs(), &|| "pendulum".into());
        }
    }
    if let Some(g) = prm.gravitation.filter(|_| n > 1) {
        let rows = gravitation_rows(p, g, &clump);
        for i in (0..n).filter(|&i| !p.fixed[i]) {
            // A row that overflows (G near f64's largest) is a mode no step resolves, not none.
            consider(rows[i].min(f64::MAX), &|| format!("mutual gravitation at particle {i} (G = {g:e})"));
        }
    }
    let omega = best.0.sqrt();
    StabilityEstimate {
        h_max: if omega > 0.0 { 2.0 / omega } else { f64::INFINITY },
        omega_max: omega,
        limiting: best.1,
        warnings: size_spread(p).into_iter().collect(),
    }
}

/// Mutual gravitation (MODEL §12): each particle's Gershgorin row of M^{-1/2} H M^{-1/2} for the
/// pair potentials −G m_p m_q / r, whose Hessian's largest eigenvalue is 2 G m_p m_q / r³, at the
/// starting distances (a closer pass later is the energy guard's to catch). Sphere masses, not
/// clump masses (`clump`: each particle's clump, `u32::MAX` for none; a clump's larger mass only
/// lowers its translational frequency). All pairs, as the force pass (≤ 10⁴ spheres).
fn gravitation_rows(p: &Particles, g: f64, clump: &(dyn Fn(usize) -> u32 + Sync)) -> Vec<f64> {
    let n = p.len();
    let row = |i: usize| -> f64 {
        let mut s = 0.0;
        for j in (0..n).filter(|&j| j != i && (clump(i) == u32::MAX || clump(i) != clump(j))) {
            let r = (p.x[i] - p.x[j]).length();
            s += 2.0 * g * (p.mass[j] + (p.mass[i] * p.mass[j]).sqrt()) / (r * r * r);
        }
        s
    };
    (0..n).into_par_iter().with_min_len(64).map(row).collect()
}

/// ω² of the undamped mode whose stable step equals that of a mode of frequency² `omega2` with a
/// dashpot of rate `lambda` (module note); `omega2` itself without one.
fn damped(omega2: f64, lambda: f64) -> f64 {
    if lambda <= 0.0 {
        return omega2;
    }
    let w = 0.5 * lambda + (omega2 + 0.25 * lambda * lambda).sqrt();
    w * w
}

/// The stiffest mode of a Hertz contact of normal frequency² `omega2` with MODEL §10's loads:
/// its normal dashpot (`β`), and with friction (`μ` > 0) the tangential spring (κ times the
/// normal stiffness) and its dashpot (√κ η_n) on the contact point's `mobility` (its inverse
/// mass over that of the normal mode, ≥ 1). `omega2` itself without dissipation.
fn contact_mode(omega2: f64, beta: f64, mu: f64, kappa: f64, mobility: f64) -> f64 {
    if beta <= 0.0 && mu <= 0.0 {
        return omega2;
    }
    let zeta = beta * (5.0f64 / 6.0).sqrt();
    let omega = omega2.sqrt();
    let normal = damped(omega2, 2.0 * zeta * omega);
    if mu <= 0.0 {
        return normal;
    }
    let tangential = damped(kappa * omega2 * mobility, 2.0 * kappa.sqrt() * zeta * omega * mobility);
    normal.max(tangential)
}

/// Largest over median radius above which a run is warned that it will be slow.
pub const SIZE_SPREAD_WARN: f64 = 3.0;

/// Particles sampled for the median radius (evenly spaced; all of them below this many).
const RADIUS_SAMPLE: usize = 1 << 16;

/// A warning when the largest sphere is much larger than most: both engines' contact search
/// uses cells of the largest diameter (plus a skin), so every cell then holds about
/// `(r_max/r_median)³` times as many spheres as for equal ones, and each looks at all of them.
fn size_spread(p: &Particles) -> Option<String> {
    let n = p.len();
    if n < 2 {
        return None;
    }
    let (big, r_max) = p.radius.iter().enumerate().fold((0, 0.0f64), |a, (i, &r)| if r > a.1 { (i, r) } else { a });
    let mut sample: Vec<f64> = p.radius.iter().step_by(n.div_ceil(RADIUS_SAMPLE)).copied().collect();
    let mid = sample.len() / 2;
    let (_, &mut median, _) = sample.select_nth_unstable_by(mid, f64::total_cmp);
    let ratio = r_max / median;
    (ratio > SIZE_SPREAD_WARN).then(|| {
        format!(
            "particle {big} has radius {r_max:.3e}, {ratio:.3e} times the median {median:.3e}: the contact search's \
             cells are sized by the largest sphere, so each holds up to {:.1e} times as many spheres as for equal ones \
             and the run may be many times slower; split very different sizes into separate runs or use walls for \
             the large bodies",
            ratio.powi(3)
        )
    })
}

/// Contacts already compressed at t = 0 (particle–particle and particle–wall): their stiffness
/// at the initial overlap δ0 deepened by an impact at `v_imp` (`δ0 + δ_imp` bounds the deepest
/// overlap from above, since `(a + b)^{5/2} ≥ a^{5/2} + b^{5/2}`). Without this, two spheres
/// that start 10 % overlapped with a stiff contact look harmless to the estimate and blow up.
fn overlaps_at_start(
    p: &Particles,
    prm: &Params,
    v_imp: f64,
    clump: &(impl Fn(usize) -> u32 + Sync),
    consider: &mut impl FnMut(f64, &dyn Fn() -> String),
) {
    let n = p.len();
    let loss = prm.dissipation.unwrap_or_default();
    // Overlap a Hertz contact of stiffness k reaches when a reduced mass mu meets it at speed v.
    let impact = |mu: f64, v: f64, k: f64| (1.25 * mu * v * v / k).powf(0.4);
    if prm.k_wall > 0.0 {
        for i in (0..n).filter(|&i| !p.fixed[i]) {
            let (m, r) = (p.mass[i], p.radius[i]);
            for w in &prm.walls {
                let d0 = 1.0 - (p.x[i] - w.point).dot(w.normal) / r;
                if d0 > 0.0 {
                    let delta = d0 + impact(m, v_imp, prm.k_wall);
                    let omega2 = 1.5 * prm.k_wall * delta.sqrt() / (r * r * m);
                    let mobility = 1.0 + r * r * m / p.inertia[i];
                    consider(
                        contact_mode(omega2, loss.beta_wall, loss.mu_wall, loss.stiffness_ratio, mobility),
                        &|| {
                            format!(
                                "wall contact at particle {i}, overlapping {:.3}% of its radius at t = 0",
                                100.0 * d0
                            )
                        },
                    );
                }
            }
        }
    }
    if prm.k_contact <= 0.0 || n < 2 {
        return;
    }
    let r_max = p.radius.iter().copied().fold(0.0, f64::max);
    let mut grid = crate::grid::CellGrid::new(n, 2.0 * r_max);
    if grid.build(|i| p.x[i]).is_err() {
        return; // a position the grid cannot place is reported by the engines
    }
    // Each particle's stiffest initially compressed contact (in parallel: a solid of 10⁷
    // touching spheres has as many candidate pairs), then the stiffest of all.
    let stiffest = |i: usize| {
        let mut best: Option<(f64, usize, f64)> = None;
        grid.for_each_neighbour(i, |j| {
            if j <= i || (p.fixed[i] && p.fixed[j]) || (clump(i) != u32::MAX && clump(i) == clump(j)) {
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
            // The contact point's mobility over 1/m*: arms of about the radii.
            let arm = |k: usize| if p.fixed[k] { 0.0 } else { p.radius[k] * p.radius[k] / p.inertia[k] };
            let mobility = 1.0 + mu * (arm(i) + arm(j));
            let omega2 = contact_mode(
                1.5 * prm.k_contact * delta.sqrt() / (rs * rs * mu),
                loss.beta,
                loss.mu,
                loss.stiffness_ratio,
                mobility,
            );
            if best.is_none_or(|b| omega2 > b.0) {
                best = Some((omega2, j, d0));
            }
        });
        best.map(|(o, j, d0)| (o, i, j, d0))
    };
    // Largest ω², lowest i on ties: the same answer for any thread count.
    let top = (0..n)
        .into_par_iter()
        .with_min_len(4096)
        .filter_map(stiffest)
        .reduce_with(|a, b| if b.0 > a.0 || (b.0 == a.0 && b.1 < a.1) { b } else { a });
    if let Some((omega2, i, j, d0)) = top {
        consider(omega2, &|| format!("contact of particles {i} and {j}, overlapping {:.3}% at t = 0", 100.0 * d0));
    }
}

/// `dt` as a percentage of `h_max`, as messages show it: whole percent, or scientific notation
/// far above the estimate.
pub fn percent_of(dt: f64, h_max: f64) -> String {
    match 100.0 * dt / h_max {
        pct if pct < 1e6 => format!("{pct:.0}"),
        pct => format!("{pct:.3e}"),
    }
}

/// A speed as the estimate's reasons show it: three decimals in an everyday range, else
/// scientific notation (a speed of 1e150 printed in full is 150 digits).
fn readable(v: f64) -> String {
    if (1e-3..1e6).contains(&v.abs()) { format!("{v:.3}") } else { format!("{v:.3e}") }
}

/// Checks a time step against the estimate: an error above `h_max` unless `force`, a warning
/// (returned as text) above `WARN_FRACTION · h_max`; the estimate's other `warnings` follow it
/// (one per line, each after the first prefixed `warning: `, as the callers print the first).
pub fn check_step(dt: f64, force: bool, est: &StabilityEstimate) -> Result<Option<String>, crate::error::EngineError> {
    if dt > est.h_max && !force {
        return Err(crate::error::EngineError::Unstable { dt, h_max: est.h_max, reason: est.limiting.clone() });
    }
    let mut all: Vec<String> = Vec::new();
    if dt > WARN_FRACTION * est.h_max {
        all.push(format!(
            "dt = {} is {}% of the stability estimate {:.3e} ({}); results may be inaccurate or blow up",
            crate::scenario::num(dt),
            percent_of(dt, est.h_max),
            est.h_max,
            est.limiting
        ));
    }
    all.extend(est.warnings.iter().cloned());
    Ok((!all.is_empty()).then(|| all.join("\nwarning: ")))
}
