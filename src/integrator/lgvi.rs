//! The rotation update of the Lie group variational integrator (MODEL §12; seed 002, the
//! Hamiltonian form of eqs. 60–64 solved in the Cayley form (98)) for a rigid body with a full
//! inertia tensor, and the body-frame quantities around it.
//!
//! One step of a body with body-frame inertia `J`, attitude `R_k`, body angular momentum
//! `Π_k = J R_kᵀ Ω_k` and body moment `M_k = R_kᵀ RM_k`:
//! `h S(Π_k + (h/2) M_k) = F J_d − J_d Fᵀ`, `J_d = ½ tr(J) I − J`, solved for `F ∈ SO(3)`;
//! `R_{k+1} = R_k F`, `Π_{k+1} = Fᵀ(Π_k + (h/2) M_k) + (h/2) M_{k+1}`. With `F = cay(f)` the
//! equation is `G(f) = g + g × f + (g·f) f − 2 J f = 0`, `g = h(Π_k + (h/2) M_k)`, whose Newton
//! iteration has the Jacobian `S(g) + (g·f) I + f gᵀ − 2J`. The attitude is a unit quaternion and
//! `cay(f)` is the quaternion `(1, f)/√(1 + |f|²)` (a turn by `2 atan|f|` about `f`): no
//! trigonometry, as in the RRP maps, whose increment `Δα` is `2f` seen in space.
//!
//! For `J = jI` the root is `f = g / (j + √(j² − |g|²))` (along `g`), which is `rrp-exact`'s
//! increment `Δα = 2h Ω_h/(1 + √(1 − h²|Ω_h|²))` in the body frame: there the map is map (23),
//! and the engine takes that closed form (`rotate_scalar`) instead of the Newton solve.

use glam::{DMat3, DQuat, DVec3};

/// Relative tolerance of the Newton iteration (MODEL §12): the last correction, over `|f|`.
pub const TOLERANCE: f64 = 1e-15;

/// Most Newton iterations of one rotation update (MODEL §12); 2 to 4 are usual.
pub const MAX_ITERATIONS: u32 = 20;

/// A correction this small relative to `|f|`, times `J`'s condition number, is rounding: 16 units
/// of 2⁻⁵³. The residual `G(f)` cannot be formed to better than a few roundings of `|g|` and
/// `|2 J f|`, which the Jacobian (about `−2J`) turns into a correction of a few roundings of `|f|`
/// times the condition number of `J`; where that is above `TOLERANCE` (a slender dumbbell's
/// tensor has a condition number of hundreds) and the corrections stop halving, the iterate is as
/// good as it gets.
const ROUNDING_FLOOR: f64 = 16.0 * f64::EPSILON / 2.0;

/// A Newton solve that did not converge: iterations made and the last correction over `|f|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NoRoot {
    pub iterations: u32,
    pub correction: f64,
}

/// The Cayley residual `G(f) = g + g × f + (g·f) f − 2 J f`.
#[inline]
pub fn cayley_residual(g: DVec3, j: &DMat3, f: DVec3) -> DVec3 {
    g + g.cross(f) + g.dot(f) * f - 2.0 * (*j * f)
}

/// The root `f` of `G(f) = 0` (and the iterations it took) by Newton from the linearised root
/// `½ J⁻¹ g`; `Err` when it does not reach `TOLERANCE` (or the rounding floor) within
/// `MAX_ITERATIONS`, or leaves the finite numbers (for `J = jI` there is no root once
/// `|g| > j`, i.e. `h|Ω_h| > 1`).
pub fn cayley_root(g: DVec3, j: &DMat3, j_inv: &DMat3) -> Result<(DVec3, u32), NoRoot> {
    if g == DVec3::ZERO {
        return Ok((DVec3::ZERO, 0));
    }
    let mut f = 0.5 * (*j_inv * g);
    let mut previous = f64::INFINITY;
    let norm = |m: &DMat3| m.to_cols_array().iter().map(|x| x * x).sum::<f64>().sqrt();
    let floor = ROUNDING_FLOOR * norm(j) * norm(j_inv);
    for it in 1..=MAX_ITERATIONS {
        let r = cayley_residual(g, j, f);
        let jac = skew(g) + DMat3::from_diagonal(DVec3::splat(g.dot(f))) + outer(f, g) - 2.0 * *j;
        let det = jac.determinant();
        if !(det.is_finite() && det != 0.0) {
            return Err(NoRoot { iterations: it, correction: f64::INFINITY });
        }
        let df = jac.inverse() * r;
        f -= df;
        if df == DVec3::ZERO {
            // No correction at all: the root to the last bit (also where `g` is so small that
            // `f` underflows to 0, as for a sphere whose spin is 1e-300).
            return Ok((f, it));
        }
        let rel = df.length() / f.length();
        if !rel.is_finite() {
            return Err(NoRoot { iterations: it, correction: rel });
        }
        if rel <= TOLERANCE || (rel <= floor && rel > 0.5 * previous) {
            return Ok((f, it));
        }
        previous = rel;
    }
    Err(NoRoot { iterations: MAX_ITERATIONS, correction: previous })
}

/// The unit quaternion of `cay(f) = (I + S(f))(I − S(f))⁻¹`: `(1, f)/√(1 + |f|²)`.
#[inline]
pub fn cayley_quat(f: DVec3) -> DQuat {
    DQuat::from_xyzw(f.x, f.y, f.z, 1.0) * (1.0 / (1.0 + f.length_squared()).sqrt())
}

/// `S(a)`, the skew matrix with `S(a) b = a × b`.
#[inline]
pub fn skew(a: DVec3) -> DMat3 {
    DMat3::from_cols(DVec3::new(0.0, a.z, -a.y), DVec3::new(-a.z, 0.0, a.x), DVec3::new(a.y, -a.x, 0.0))
}

/// `a bᵀ`.
#[inline]
fn outer(a: DVec3, b: DVec3) -> DMat3 {
    DMat3::from_cols(a * b.x, a * b.y, a * b.z)
}

/// A body's spatial vector `v` in its body frame: `Rᵀ v`.
#[inline]
pub fn to_body(q: DQuat, v: DVec3) -> DVec3 {
    q.conjugate() * v
}

/// The spatial angular velocity `Ω = R J⁻¹ Π` of body angular momentum `Π`.
#[inline]
pub fn spatial_omega(q: DQuat, j_inv: &DMat3, pi: DVec3) -> DVec3 {
    q * (*j_inv * pi)
}

/// One opening update of the attitude: from `R_k` (`q`) and `Π_k + (h/2) M_k` (`p`, body frame),
/// `R_{k+1} = R_k cay(f)` and `Fᵀ p`, the body momentum before the closing half kick; with the
/// Newton iterations taken.
pub fn rotate(q: DQuat, p: DVec3, h: f64, j: &DMat3, j_inv: &DMat3) -> Result<(DQuat, DVec3, u32), NoRoot> {
    let (f, it) = cayley_root(h * p, j, j_inv)?;
    let qf = cayley_quat(f);
    Ok(((q * qf).normalize(), qf.conjugate() * p, it))
}

/// `rotate` for a scalar tensor `J = jI` (a sphere): the root in closed form,
/// `f = g / (j(1 + √(1 − |g|²/j²)))` along `g` (map (23)'s increment in the body frame), no
/// Newton solve; `Err(|g|²/j²)`, which is `h²|Ω_h|²`, when there is no root (`≥ 1`).
pub fn rotate_scalar(q: DQuat, p: DVec3, h: f64, j: f64) -> Result<(DQuat, DVec3), f64> {
    let g = h * p;
    let s = g.length_squared() / (j * j);
    if s.is_nan() || s >= 1.0 {
        return Err(s);
    }
    let qf = cayley_quat(g / (j * (1.0 + (1.0 - s).sqrt())));
    Ok(((q * qf).normalize(), qf.conjugate() * p))
}

/// `j` when `J = jI` exactly (every off-diagonal entry 0, the diagonal's equal): the tensors for
/// which `rotate_scalar` applies.
pub fn scalar_of(j: &DMat3) -> Option<f64> {
    let d = j.x_axis.x;
    let isotropic = *j == DMat3::from_diagonal(DVec3::splat(d));
    isotropic.then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::integrator::{Integrator, rotation_increment};

    fn diag(a: f64, b: f64, c: f64) -> DMat3 {
        DMat3::from_diagonal(DVec3::new(a, b, c))
    }

    #[test]
    fn the_root_solves_the_cayley_equation_and_the_matrix_equation() {
        let j = diag(1.0, 2.0, 3.0);
        // A rotated, non-diagonal tensor too.
        let r = DMat3::from_quat(DQuat::from_xyzw(0.3, -0.2, 0.5, 0.8).normalize());
        let jr = r * j * r.transpose();
        for jm in [j, jr] {
            for g in [DVec3::new(0.3, -0.7, 0.2), DVec3::new(1e-9, 2e-9, -3e-9), DVec3::new(0.5, 0.1, 0.6)] {
                let (f, it) = cayley_root(g, &jm, &jm.inverse()).expect("converges");
                assert!(it <= 8, "{it} iterations");
                let res = cayley_residual(g, &jm, f).length() / g.length();
                assert!(res < 1e-15, "residual {res:e}");
                // h S(Π + h/2 M) = F J_d − J_d Fᵀ with F = cay(f): the seed's eq. (93).
                let big_f = DMat3::from_quat(cayley_quat(f));
                let jd = DMat3::from_diagonal(DVec3::splat(0.5 * (jm.x_axis.x + jm.y_axis.y + jm.z_axis.z))) - jm;
                let lhs = skew(g);
                let rhs = big_f * jd - jd * big_f.transpose();
                let err = (lhs - rhs).to_cols_array().iter().fold(0.0f64, |a, x| a.max(x.abs()));
                // The right side is a difference of products of entries O(|J|) (F is near I for a
                // small g), so its rounding is a few ulps of |J|, not of |g|.
                let jmax = jm.to_cols_array().iter().fold(0.0f64, |a, x| a.max(x.abs()));
                assert!(err <= 16.0 * f64::EPSILON * (g.length() + jmax), "eq. (93) off by {err:e}");
            }
        }
    }

    #[test]
    fn for_a_scalar_inertia_the_update_is_rrp_exact() {
        let j = 2.5;
        let jm = diag(j, j, j);
        let q = DQuat::from_xyzw(0.1, 0.7, -0.3, 0.6).normalize();
        let h = 0.05;
        for w_h in [DVec3::new(1.0, -2.0, 0.5), DVec3::new(0.01, 0.0, -0.02), DVec3::new(8.0, 12.0, -9.0)] {
            let p = to_body(q, j * w_h);
            let (q1, p1, _) = rotate(q, p, h, &jm, &jm.inverse()).expect("converges");
            let d = rotation_increment(Integrator::RrpExact, h, w_h).expect("h|Ω| < 1");
            let q_rrp = crate::rrp::apply_increment(q, d);
            let dq = (q1 - q_rrp * q_rrp.dot(q1).signum()).length();
            assert!(dq < 4e-16, "attitudes differ by {dq:e}");
            // Fᵀ p seen in space is j Ω_h: the momentum does not turn for a scalar inertia.
            let w1 = q1 * p1 / j;
            assert!((w1 - w_h).length() <= 4e-16 * w_h.length(), "{w1} vs {w_h}");
            // The closed form the engine takes for J = jI is Newton's root to rounding.
            let (q2, p2) = rotate_scalar(q, p, h, j).expect("h|Ω| < 1");
            assert!((q2 - q1 * q1.dot(q2).signum()).length() < 4e-16 && (p2 - p1).length() <= 4e-16 * p1.length());
            assert_eq!(scalar_of(&jm), Some(j));
        }
    }

    #[test]
    fn no_root_beyond_h_omega_one_is_an_error() {
        let jm = diag(1.0, 1.0, 1.0);
        let e = cayley_root(DVec3::new(1.2, 0.0, 0.0), &jm, &jm).expect_err("no real root for |g| > j");
        assert!(e.iterations >= 1);
        let s = rotate_scalar(DQuat::IDENTITY, DVec3::new(12.0, 0.0, 0.0), 0.1, 1.0).expect_err("h|Ω| = 1.2");
        assert!((s - 1.44).abs() < 1e-15, "{s}");
        assert_eq!(scalar_of(&DMat3::from_diagonal(DVec3::new(1.0, 1.0, 1.0 + 1e-15))), None);
        assert_eq!(cayley_root(DVec3::ZERO, &jm, &jm), Ok((DVec3::ZERO, 0)));
        // A spin so small that the root underflows (a ring's sphere far from any load).
        for g in [DVec3::new(1e-310, 0.0, 0.0), DVec3::new(3e-300, -1e-305, 0.0)] {
            let (f, _) = cayley_root(g, &jm, &jm).expect("an underflowing root is a root");
            assert!(f.is_finite() && f.length() <= g.length(), "{f}");
        }
    }
}
