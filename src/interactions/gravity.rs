//! Uniform gravity.

use super::ForceOut;
use glam::DVec3;

/// Uniform field `g` on a particle of mass `m` at `x`: `U = −m g·x`, `F = m g`.
#[inline]
pub fn gravity(x: DVec3, m: f64, g: DVec3) -> ForceOut {
    ForceOut { energy: -m * g.dot(x), force: m * g }
}
