//! Binder axial stretch, U^a (paper eqs. 51–52).

use super::ForceOut;
use glam::DVec3;

/// Axial term of a bond with `d = x_i − x_j`, `L = |d|`, rest length `L0`:
/// `U^a = ½ K^a (L/L0 − 1)²`, `F_i = −(K^a/L0)(L/L0 − 1) d̂ = −F_j`. Returns the force on `i`.
#[inline(always)]
pub fn axial(d: DVec3, l0: f64, k_axial: f64) -> ForceOut {
    let l = d.length();
    let strain = l / l0 - 1.0;
    ForceOut { energy: 0.5 * k_axial * strain * strain, force: d * (-(k_axial / l0) * strain / l) }
}
