//! Particle–particle Hertz-like contact, U^pp (paper eqs. 56–57, prefactor 2/5 per MODEL §3).

use super::ForceOut;
use glam::DVec3;

/// Contact between two spheres with `d = x_i − x_j`, `L = |d|`, radii summing to `r_sum`:
/// `δ = 1 − L/r_sum`, `U^pp = (2/5) K^pp [δ]_+^{5/2}`, `F_i = (K^pp/r_sum) [δ]_+^{3/2} d̂ = −F_j`.
/// Returns zero when the spheres do not overlap.
#[inline(always)]
pub fn contact(d: DVec3, r_sum: f64, k_contact: f64) -> ForceOut {
    let l2 = d.length_squared();
    if l2 >= r_sum * r_sum {
        return ForceOut::default();
    }
    let l = l2.sqrt();
    let delta = 1.0 - l / r_sum;
    // Spheres just touching: l2 < r_sum² yet l/r_sum ≥ 1 where sqrt or the division round up,
    // as on GPUs whose sqrt and division are not correctly rounded (NVIDIA's Vulkan driver in
    // f32: FCC solids stopped at step 0 with F = NaN). Never taken with IEEE rounding (the
    // CPU, lavapipe), where l2 < fl(r_sum²) implies l ≤ r_sum.
    if delta < 0.0 {
        return ForceOut::default();
    }
    let s = delta.sqrt();
    ForceOut { energy: 0.4 * k_contact * delta * delta * s, force: d * (k_contact / r_sum * delta * s / l) }
}
