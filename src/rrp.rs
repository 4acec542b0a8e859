//! Rescaled Rodrigues parameters (RRP, MODEL §1): rotation matrix, composition, and the
//! homogeneous (unit-quaternion) form the solver stores attitudes in.
//!
//! An RRP vector is `α = (tan(|θ|/2) / (|θ|/2)) θ` for the rotation vector `θ`. It is infinite at
//! `|θ| = π`, so attitudes are stored as unit quaternions `q = (w, u)` with `α = 2u/w`, and an
//! increment `Δα` is applied as `q ← q(Δα) ⊗ q` with `q(Δα) = (2, Δα)/sqrt(4 + |Δα|²)`, which is
//! the composition rule (5) multiplied through by `w1 w2`: no trigonometry in the update.

use glam::{DMat3, DQuat, DVec3};

/// Skew matrix `S(a)` with `S(a) b = a × b`.
pub fn skew(a: DVec3) -> DMat3 {
    DMat3::from_cols(DVec3::new(0.0, a.z, -a.y), DVec3::new(-a.z, 0.0, a.x), DVec3::new(a.y, -a.x, 0.0))
}

/// Rotation matrix of an RRP vector, eq. (4): `R(α) = I + 4/(4+|α|²) [S(α) + ½ S(α)²]`.
pub fn rrp_matrix(alpha: DVec3) -> DMat3 {
    let s = skew(alpha);
    let c = 4.0 / (4.0 + alpha.length_squared());
    DMat3::IDENTITY + (s + s * s * 0.5) * c
}

/// Composition, eq. (5): `α1 ⊕ α2 = 4/(4 − α1·α2) [α1 + α2 − ½ α1 × α2]`, the rotation `α1`
/// first, then `α2`, so `R(α1 ⊕ α2) = R(α2) R(α1)`. Infinite when the result is a half turn.
pub fn compose(a1: DVec3, a2: DVec3) -> DVec3 {
    (a1 + a2 - 0.5 * a1.cross(a2)) * (4.0 / (4.0 - a1.dot(a2)))
}

/// Homogeneous form of an RRP vector: `q(α) = (2, α)/sqrt(4 + |α|²)` (unit quaternion, w > 0).
#[inline(always)]
pub fn quat_from_rrp(alpha: DVec3) -> DQuat {
    quat_from_rrp_inv(alpha, 1.0 / rrp_norm2(alpha).sqrt())
}

/// `4 + |α|²`, the squared norm of `(2, α)`. `quat_from_rrp` is split in two so that an
/// engine can take the square roots and reciprocals of many particles in one tight loop
/// (independent, pipelined) with the same operations.
#[inline(always)]
pub fn rrp_norm2(alpha: DVec3) -> f64 {
    4.0 + alpha.length_squared()
}

/// `q(α)` given `inv = 1/sqrt(rrp_norm2(α))`.
#[inline(always)]
pub fn quat_from_rrp_inv(alpha: DVec3, inv: f64) -> DQuat {
    DQuat::from_xyzw(alpha.x * inv, alpha.y * inv, alpha.z * inv, 2.0 * inv)
}

/// RRP vector `α = 2u/w` of a unit quaternion (infinite for a half turn, where `w = 0`).
pub fn rrp_from_quat(q: DQuat) -> DVec3 {
    DVec3::new(q.x, q.y, q.z) * (2.0 / q.w)
}

/// The quaternion with `w ≥ 0` representing the same rotation (output convention).
#[inline(always)]
pub fn canonical(q: DQuat) -> DQuat {
    if q.w < 0.0 { -q } else { q }
}

/// Applies a spatial RRP increment on the left, `q ← q(Δα) ⊗ q`, and renormalises (which only
/// removes round-off: the product of unit quaternions is a unit quaternion).
#[inline(always)]
pub fn apply_increment(q: DQuat, dalpha: DVec3) -> DQuat {
    let p = quat_from_rrp(dalpha) * q;
    p * (1.0 / p.length())
}

/// Rotation vector `θ` (|θ| ≤ π) of a unit quaternion: the logarithm on SO(3).
#[inline(always)]
pub fn rotation_vector(q: DQuat) -> DVec3 {
    let q = canonical(q);
    let u = DVec3::new(q.x, q.y, q.z);
    let s = u.length();
    u * log_factor(s, q.w)
}

/// `2 atan2(s, w) / s` for `s = |u| ≥ 0`, `w ≥ 0`, with its series where `s/w` is small so that
/// the rotation vector is accurate (and finite) near the identity.
#[inline(always)]
pub fn log_factor(s: f64, w: f64) -> f64 {
    if s < 1e-4 * w {
        let t = s / w;
        2.0 / w * (1.0 - t * t / 3.0)
    } else {
        2.0 * s.atan2(w) / s
    }
}

/// Rotation angle in `[0, π]` of a unit quaternion.
pub fn angle(q: DQuat) -> f64 {
    let u = DVec3::new(q.x, q.y, q.z).length();
    2.0 * u.atan2(q.w.abs())
}

/// Geodesic angle between two attitudes (angle of `q_a q_b⁻¹`).
pub fn distance(qa: DQuat, qb: DQuat) -> f64 {
    angle(qa * qb.conjugate())
}

/// Quaternion of a rotation vector (exponential map), used to set initial attitudes and tests.
pub fn quat_from_rotation_vector(theta: DVec3) -> DQuat {
    let a = theta.length();
    if a < 1e-12 {
        return DQuat::from_xyzw(0.5 * theta.x, 0.5 * theta.y, 0.5 * theta.z, 1.0).normalize();
    }
    DQuat::from_axis_angle(theta / a, a)
}

/// RRP vector of a rotation vector: `α = (tan(|θ|/2)/(|θ|/2)) θ`.
pub fn rrp_from_rotation_vector(theta: DVec3) -> DVec3 {
    let half = 0.5 * theta.length();
    if half < 1e-8 {
        return theta * (1.0 + half * half / 3.0);
    }
    theta * (half.tan() / half)
}
