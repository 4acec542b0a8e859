//! Particle–wall contact, U^pw: contact with a plane, as with a mirror-image particle.

use super::ForceOut;
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// A rigid planar wall through `point` with unit `normal` pointing into the domain.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wall {
    pub point: DVec3,
    pub normal: DVec3,
}

/// Contact of a sphere (centre `x`, radius `r`) with a wall: `δ = 1 − (x − p)·n / r`,
/// `U^pw = (2/5) K^pw [δ]_+^{5/2}`, `F = (K^pw/r) [δ]_+^{3/2} n`, no moment.
#[inline(always)]
pub fn wall(x: DVec3, r: f64, point: DVec3, normal: DVec3, k_wall: f64) -> ForceOut {
    let delta = 1.0 - (x - point).dot(normal) / r;
    if delta <= 0.0 {
        return ForceOut::default();
    }
    let s = delta.sqrt();
    ForceOut { energy: 0.4 * k_wall * delta * delta * s, force: normal * (k_wall / r * delta * s) }
}
