//! Binder bending and torsion, U^m (paper eqs. 44–50).

use super::MomentOut;
use crate::rrp;
use glam::DQuat;

/// Bending/torsion of a bond between `i` and `j`.
///
/// `dq_i`, `dq_j` are the rotations since the bond was made (`ΔR = R R_0ᵀ`). With
/// `Q_ij = ΔR_j ΔR_iᵀ` and `θ_ij` its rotation vector (`|θ_ij| ≤ π`):
/// `U^m = ½ K^m |θ_ij|²`, `RM_i = +K^m θ_ij`, `RM_j = −K^m θ_ij`, no force.
/// Returns the energy and the moment on `i` (the moment on `j` is its negative).
#[inline(always)]
pub fn bending(dq_i: DQuat, dq_j: DQuat, k_bend: f64) -> MomentOut {
    let theta = rrp::rotation_vector(dq_j * dq_i.conjugate());
    MomentOut { energy: 0.5 * k_bend * theta.length_squared(), moment: k_bend * theta }
}
