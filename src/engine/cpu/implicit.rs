//! The implicit step of `em` and `sm` on the CPU engine (MODEL §13, seed 004 (3.8) with `𝒢 = 0`,
//! `𝓜 = M` lumped): translation only, rotations frozen.
//!
//! `p_{k+1} = p_k + h G`, `x_{k+1} = x_k + h M⁻¹ ½(p_k + p_{k+1})`, where `G` holds the discrete
//! gradient forces between `x_k` and `x_{k+1}` (`integrator::discrete`: bonds' axial law,
//! particle–particle and wall contact, gravity). The unknown is the step's displacement
//! `u = x_{k+1} − x_k`, the fixed point of `P(u) = h v_k + ½h² M⁻¹ G(x_k, x_k + u)`, solved to
//! `‖P(u) − u‖∞ ≤ TOLERANCE · ‖x_k + u‖∞`. Solving for `u` rather than for `x_{k+1}` lets the
//! correction fall to the rounding of `u` (~1e-19 of the positions on the torus ring) instead
//! of that of the positions (~1e-16): the pairs see `d1 = d0 + (u_i − u_j)`, not a difference of
//! two rounded positions.
//! - **Newton** (up to `NEWTON_MAX_UNKNOWNS` unknowns): the Jacobian of `y − P(y)` by forward
//!   differences, solved densely. It converges at the step sizes of the seed's examples
//!   (Δt = 1 on the 4-mass system, 0.25 on the truss), where the fixed point map does not
//!   contract.
//! - **Picard** (larger systems): `y ← P(y)`, which contracts while `(hω/2)² < 1` for the
//!   highest frequency ω, i.e. at the steps the explicit maps are stable at.
//!
//! Both iterate beyond the tolerance while that still gains (keeping the best iterate),
//! and end the same way: with `G` at the accepted `y`, `v_{k+1} = v_k + h M⁻¹ G` and
//! `x_{k+1} = x_k + h ½(v_k + v_{k+1})`. A solve that does not converge within its iteration
//! limit is an error naming the step (`EngineError::ImplicitSolve`), taken before anything of the
//! step is stored. The contact neighbour list is that of `x_k` throughout the step.

use super::CpuEngine;
use super::integrate::KinSums;
use crate::error::EngineError;
use crate::integrator::Integrator;
use crate::integrator::discrete::{Scheme, along, slope, xi};
use crate::interactions::{axial, contact, wall};
use crate::model::Model;
use glam::DVec3;

/// Relative tolerance of the step's solve (MODEL §13): the correction the fixed-point map would
/// still make, over the largest coordinate of the positions.
pub const TOLERANCE: f64 = 1e-13;

/// Most Picard iterations of one step. A contraction factor of 0.85 reaches the tolerance from
/// a correction of the order of the positions in 185 iterations; a slower one is better served
/// by a smaller step.
pub const PICARD_MAX_ITERATIONS: u32 = 200;

/// Most Newton iterations of one step (it takes 3 to 6 on the seed's examples).
pub const NEWTON_MAX_ITERATIONS: u32 = 40;

/// Most iterations after the tolerance is met (see `implicit_step`).
const POLISH: u32 = 3;

/// A correction this small relative to the displacement `u` is rounding: 8 units of 2⁻⁵³ of
/// `‖u‖∞` (the solve stops there).
const ROUNDING: f64 = 8.0 * f64::EPSILON / 2.0;

/// Largest number of unknowns (3 per free particle) `ImplicitSolver::Auto` solves by Newton: its
/// dense Jacobian costs one force evaluation per unknown and `n³/3` for the factorisation, under
/// a millisecond at 96 unknowns.
pub const NEWTON_MAX_UNKNOWNS: usize = 96;

/// How the implicit step solves for `x_{k+1}` (`CpuEngine::set_implicit_solver`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ImplicitSolver {
    /// Newton up to `NEWTON_MAX_UNKNOWNS` unknowns, Picard beyond.
    #[default]
    Auto,
    Picard,
    Newton,
}

impl ImplicitSolver {
    fn name(self) -> &'static str {
        match self {
            ImplicitSolver::Picard => "Picard (fixed-point)",
            _ => "Newton",
        }
    }
}

/// The refusal of a model the translation-only schemes cannot run: every interaction that
/// couples rotations, by the field that sets it, and spinning particles (their attitude would
/// stay frozen while their Ω says it turns). `Ok` for a model `em` and `sm` run.
pub fn check_translation_only(model: &Model, integrator: Integrator) -> Result<(), EngineError> {
    let p = &model.params;
    let refuse = |what: String| {
        Err(EngineError::Unsupported(format!(
            "integrator `{integrator}` moves translations only, with rotations frozen (MODEL §13): {what}; use an RRP \
             map (rrp-newmark) for this model"
        )))
    };
    let bonds = !model.bonds.is_empty();
    if bonds && p.k_bend != 0.0 {
        return refuse(format!("`stiffness.bending` = {} couples the bonds' rotations (set it to 0)", p.k_bend));
    }
    if bonds && p.k_shear != 0.0 {
        return refuse(format!("`stiffness.shear` = {} couples the bonds' rotations (set it to 0)", p.k_shear));
    }
    if p.pendulum.is_some() {
        return refuse("`pendulum` is a torque on the attitude".into());
    }
    if p.rupture.is_some() {
        return refuse("`rupture` breaks bonds within a step, which the implicit solve does not model".into());
    }
    if p.dissipation.is_some() {
        // (The scenario's checks refuse it first; an engine built from a model must too: its
        // watch takes no dissipated energy from the implicit step.)
        return refuse(
            "`damping` and `friction` (MODEL §10) are not among the discrete gradients of the implicit step".into(),
        );
    }
    if p.gravitation.is_some() {
        return refuse("`gravitation` (MODEL §12) is not among the discrete gradients of the implicit step".into());
    }
    if let Some(i) = model.particles.w.iter().position(|w| *w != DVec3::ZERO) {
        return refuse(format!(
            "particle {i} spins (Ω = {}), and its attitude would not turn (give it `omega` = 0)",
            model.particles.w[i]
        ));
    }
    Ok(())
}

impl CpuEngine {
    /// Sets how the implicit schemes solve each step (tests and tools; `Auto` by default).
    pub fn set_implicit_solver(&mut self, solver: ImplicitSolver) {
        self.solver = solver;
    }

    /// The discrete gradient forces `G(x0, y)` on every particle, into `g`: bonds in bond order,
    /// then per particle its contacts (the neighbour list of `x0`, in list order), walls and
    /// gravity. Each pair's two forces are the same numbers of opposite sign, so `Σ G = 0` to
    /// the rounding of the sums (P exact), and each lies along `d_m` (L exact).
    fn dg_forces(&self, scheme: Scheme, x0: &[DVec3], u: &[DVec3], g: &mut [DVec3]) {
        let prm = &self.params;
        g.fill(DVec3::ZERO);
        let sep = |i: usize, j: usize| {
            let d0 = x0[i] - x0[j];
            (d0, d0 + (u[i] - u[j]))
        };
        if prm.k_axial != 0.0 {
            for b in &self.bonds {
                let (i, j) = (b.i as usize, b.j as usize);
                let phi = |l: f64| along(|d| axial(d, b.l0, prm.k_axial), l);
                let (d0, d1) = sep(i, j);
                let f = -xi(scheme, phi, d0, d1) * (0.5 * (d0 + d1));
                g[i] += f;
                g[j] -= f;
            }
        }
        for i in 0..x0.len() {
            let ri = self.radius.get(i);
            let mut f = DVec3::ZERO;
            if prm.k_contact != 0.0 {
                for j in self.neighbours.contacts(i) {
                    let r_sum = ri + self.radius.get(j);
                    let phi = |l: f64| along(|d| contact(d, r_sum, prm.k_contact), l);
                    let (d0, d1) = sep(i, j);
                    f -= xi(scheme, phi, d0, d1) * (0.5 * (d0 + d1));
                }
            }
            for w in &prm.walls {
                let phi = |s: f64| along(|x| wall(x, ri, DVec3::ZERO, DVec3::X, prm.k_wall), s);
                let s0 = (x0[i] - w.point).dot(w.normal);
                let s1 = s0 + u[i].dot(w.normal);
                f -= slope(scheme, phi, s0, s1, ri) * w.normal;
            }
            f += self.mass.get(i) * prm.gravity;
            g[i] += f;
        }
    }

    /// `P(u) = h v0 + ½h² M⁻¹ G(x0, x0 + u)` into `out` (fixed particles stay: 0), with `G`
    /// left in `g`.
    fn fixed_point_map(&self, scheme: Scheme, x0: &[DVec3], u: &[DVec3], g: &mut [DVec3], out: &mut [DVec3]) {
        self.dg_forces(scheme, x0, u, g);
        let h = self.dt;
        for (i, o) in out.iter_mut().enumerate() {
            let inv_m = self.inv_mass.get(i);
            *o = if inv_m == 0.0 { DVec3::ZERO } else { h * self.kin[i].v + (0.5 * h * h * inv_m) * g[i] };
        }
    }

    /// Takes one `em`/`sm` step: solves for `x_{k+1}`, then stores positions and velocities (the
    /// attitudes and Ω stay). On an error nothing is stored.
    pub(super) fn implicit_step(&mut self) -> Result<(), EngineError> {
        let scheme = if self.integrator == Integrator::Em { Scheme::Em } else { Scheme::Sm };
        let n = self.kin.len();
        let h = self.dt;
        let x0: Vec<DVec3> = self.kin.iter().map(|k| k.x).collect();
        // Predictor: the explicit step with the force at x_k (`acc`, from the last evaluation).
        let mut u: Vec<DVec3> =
            (0..n).map(|i| h * self.kin[i].v + (0.5 * h * h * self.inv_mass.get(i)) * self.acc[i].force).collect();
        let free: Vec<usize> = (0..n).filter(|&i| self.inv_mass.get(i) != 0.0).collect();
        let solver = match self.solver {
            ImplicitSolver::Auto if 3 * free.len() <= NEWTON_MAX_UNKNOWNS => ImplicitSolver::Newton,
            ImplicitSolver::Auto => ImplicitSolver::Picard,
            s => s,
        };
        let limit = if solver == ImplicitSolver::Newton { NEWTON_MAX_ITERATIONS } else { PICARD_MAX_ITERATIONS };
        let mut g = vec![DVec3::ZERO; n];
        let mut p = vec![DVec3::ZERO; n];
        let mut correction = f64::NAN;
        // Once within the tolerance the iteration goes on while each iterate at least halves the
        // correction (at most `POLISH` more, and not below the rounding of `u`), and the best
        // iterate is taken. Why: storing `x_k + P(u)` for the iterate `u` changes E by about
        // `(G − F(x_{k+1}))·(P(u) − u)`, and that residual has a sign the dynamics set, so it
        // adds up instead of averaging out. Stopping at 8 ulps of the *positions* (as this solve
        // once did) left the torus ring of tests/v16 a drift of 8e-16 E per step, 1.2e-12 over
        // 1500 steps; at the rounding of `u` the mean per step is 4e-17 E and what is left is the
        // unbiased rounding of the stored positions (7e-14 over 1500 steps), for ~10 evaluations
        // a step against ~8 at the bare tolerance.
        let mut best: Option<(f64, Vec<DVec3>)> = None;
        let mut polished = 0;
        for _ in 0..limit + POLISH {
            self.fixed_point_map(scheme, &x0, &u, &mut g, &mut p);
            let scale = u
                .iter()
                .zip(&x0)
                .map(|(v, x)| (*x + *v).abs().max_element())
                .fold(0.0, f64::max)
                .max(f64::MIN_POSITIVE);
            // A non-finite force or iterate counts as an infinite change (`max` would drop a NaN).
            let change = u.iter().zip(&p).fold(0.0, |c: f64, (a, b)| {
                let d = *a - *b;
                if d.is_finite() { c.max(d.abs().max_element()) } else { f64::INFINITY }
            });
            correction = change / scale;
            let size_u = u.iter().map(|v| v.abs().max_element()).fold(0.0, f64::max);
            let at_rounding = change <= ROUNDING * size_u;
            if let Some((c, g_best)) = &best {
                if change < 0.5 * c && !at_rounding && polished < POLISH {
                    best = Some((change, g.clone()));
                    polished += 1;
                } else {
                    self.accept(if change < *c { &g } else { g_best });
                    return Ok(());
                }
            } else if correction <= TOLERANCE {
                if at_rounding {
                    self.accept(&g);
                    return Ok(());
                }
                best = Some((change, g.clone()));
            }
            if !correction.is_finite() {
                break;
            }
            match solver {
                ImplicitSolver::Newton => {
                    if !self.newton_update(scheme, &x0, &mut u, &p, &free) {
                        break;
                    }
                }
                _ => std::mem::swap(&mut u, &mut p),
            }
        }
        Err(EngineError::ImplicitSolve {
            integrator: self.integrator,
            solver: solver.name(),
            step: self.step,
            t: self.time(),
            iterations: limit + POLISH,
            correction,
            tolerance: TOLERANCE,
        })
    }

    /// Stores the step with the forces `g` at the accepted `x_{k+1}`.
    fn accept(&mut self, g: &[DVec3]) {
        let h = self.dt;
        for (i, k) in self.kin.iter_mut().enumerate() {
            let inv_m = self.inv_mass.get(i);
            if inv_m == 0.0 {
                continue;
            }
            let v1 = k.v + (h * inv_m) * g[i];
            k.x += h * (0.5 * (k.v + v1));
            k.v = v1;
        }
    }

    /// One Newton update of `u` for `R(u) = u − P(u) = 0` (`p` = `P(u)`): the Jacobian
    /// `I − ∂P/∂u` over the free particles' coordinates by forward differences, solved by
    /// Gaussian elimination with partial pivoting. `false` when the Jacobian is singular.
    fn newton_update(&self, scheme: Scheme, x0: &[DVec3], u: &mut [DVec3], p: &[DVec3], free: &[usize]) -> bool {
        let m = 3 * free.len();
        let n = u.len();
        // Difference step: 1e-7 of the configuration's size (the positions' scale, at least the
        // largest radius): the Jacobian to about 1e-7, which Newton turns into a contraction
        // factor of about 1e-7 per iteration.
        let size = u.iter().zip(x0).map(|(v, x)| (*x + *v).abs().max_element()).fold(0.0, f64::max);
        let eps = 1e-7 * size.max(self.radius_max).max(f64::MIN_POSITIVE);
        let mut jac = vec![0.0; m * m];
        let mut up = u.to_vec();
        let (mut g, mut pp) = (vec![DVec3::ZERO; n], vec![DVec3::ZERO; n]);
        let unknowns: Vec<(usize, usize)> = free.iter().flat_map(|&i| [(i, 0), (i, 1), (i, 2)]).collect();
        for (c, &(fi, axis)) in unknowns.iter().enumerate() {
            up[fi][axis] += eps;
            self.fixed_point_map(scheme, x0, &up, &mut g, &mut pp);
            up[fi][axis] = u[fi][axis];
            for (r, &i) in free.iter().enumerate() {
                for a in 0..3 {
                    let dp = (pp[i][a] - p[i][a]) / eps;
                    jac[(3 * r + a) * m + c] = if (i, a) == (fi, axis) { 1.0 - dp } else { -dp };
                }
            }
        }
        let mut rhs: Vec<f64> = Vec::with_capacity(m);
        for &i in free {
            rhs.extend((0..3).map(|a| p[i][a] - u[i][a]));
        }
        if !solve_dense(&mut jac, &mut rhs, m) {
            return false;
        }
        for (r, &i) in free.iter().enumerate() {
            for a in 0..3 {
                u[i][a] += rhs[3 * r + a];
            }
        }
        true
    }

    /// Kinetic sums of the current state, for the watch (particle order).
    pub(super) fn kin_sums(&self) -> KinSums {
        let mut ks = KinSums::default();
        for (i, k) in self.kin.iter().enumerate() {
            let (m, j) = (self.mass.get(i), self.inertia.get(i));
            ks.e_trans += 0.5 * m * k.v.length_squared();
            ks.e_rot += 0.5 * j * k.w.length_squared();
            ks.p += m * k.v;
        }
        ks
    }
}

/// Solves `a x = b` in place (`a` row-major `n × n`, `b` becomes `x`) by Gaussian elimination
/// with partial pivoting; `false` when a pivot is zero or not finite.
fn solve_dense(a: &mut [f64], b: &mut [f64], n: usize) -> bool {
    for col in 0..n {
        let Some(piv) = (col..n).max_by(|&r, &s| a[r * n + col].abs().total_cmp(&a[s * n + col].abs())) else {
            return false;
        };
        let pv = a[piv * n + col];
        if pv == 0.0 || !pv.is_finite() {
            return false;
        }
        if piv != col {
            for k in 0..n {
                a.swap(piv * n + k, col * n + k);
            }
            b.swap(piv, col);
        }
        for r in col + 1..n {
            let f = a[r * n + col] / pv;
            if f != 0.0 {
                for k in col..n {
                    a[r * n + k] -= f * a[col * n + k];
                }
                b[r] -= f * b[col];
            }
        }
    }
    for col in (0..n).rev() {
        let mut s = b[col];
        for k in col + 1..n {
            s -= a[col * n + k] * b[k];
        }
        b[col] = s / a[col * n + col];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::solve_dense;

    /// A 3×3 system that needs a row swap, against its known solution.
    #[test]
    fn dense_solve_with_pivoting() {
        let mut a = vec![0.0, 2.0, 1.0, 1.0, 1.0, 0.0, 3.0, 0.0, 1.0];
        let x = [1.0, -2.0, 3.0];
        let mut b: Vec<f64> = (0..3).map(|r| (0..3).map(|c| a[r * 3 + c] * x[c]).sum()).collect();
        assert!(solve_dense(&mut a, &mut b, 3));
        for (u, v) in b.iter().zip(x) {
            assert!((u - v).abs() < 1e-14, "{b:?}");
        }
        let mut singular = vec![1.0, 2.0, 2.0, 4.0];
        assert!(!solve_dense(&mut singular, &mut [1.0, 2.0], 2));
    }
}
