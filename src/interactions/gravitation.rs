//! Mutual gravitation of two spheres (MODEL §12, the full body problem of seed 002): point masses
//! at the spheres' centres, between spheres of different clumps.

use super::ForceOut;
use glam::DVec3;

/// Pair `d = x_i − x_j` of masses `m_i`, `m_j`: `U = −G m_i m_j / |d|`, force on i
/// `F_i = −∂U/∂x_i = −G m_i m_j d / |d|³` (on j the exact negative: `d` negated has the same
/// length bit for bit). No moment: the load acts at the centres.
#[inline]
pub fn gravitation(d: DVec3, m_i: f64, m_j: f64, g: f64) -> ForceOut {
    let r2 = d.length_squared();
    let r = r2.sqrt();
    // `m_i * m_j` first: the product is the same bits from either end.
    let gm = g * (m_i * m_j);
    ForceOut { energy: -gm / r, force: d * (-gm / (r2 * r)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_force_is_minus_the_gradient_of_the_energy() {
        let (d, mi, mj, g) = (DVec3::new(0.7, -1.3, 2.1), 1.5, 2.5, 0.8);
        let out = gravitation(d, mi, mj, g);
        let e = 1e-6;
        for k in 0..3 {
            let mut dp = d;
            let mut dm = d;
            dp[k] += e;
            dm[k] -= e;
            let fd = -(gravitation(dp, mi, mj, g).energy - gravitation(dm, mi, mj, g).energy) / (2.0 * e);
            // Central differences: error ~ e² |U'''| ≈ 1e-12 here, rounding ~ 1e-16 |U| / e.
            assert!((fd - out.force[k]).abs() < 1e-9 * out.force.length(), "component {k}: {fd} vs {}", out.force[k]);
        }
        assert_eq!(gravitation(-d, mj, mi, g).force, -out.force);
        assert_eq!(out.energy, -g * (mi * mj) / d.length());
    }
}
