//! Discrete gradients of two-point and one-point potentials for the implicit schemes of MODEL §13
//! (seed 004 §6): the factor `ξ` of a pair and the slope of a wall's potential between two
//! configurations. They read each potential through the function of `crate::interactions` that
//! defines it (its energy and force along a line), so no formula is written twice.

use crate::interactions::ForceOut;
use glam::DVec3;

/// Below `|l1 − l0| < DEGENERATE · l_m` the energy–momentum quotient `[φ(l1) − φ(l0)] / (½(l1² −
/// l0²))` loses digits (the difference of two nearly equal energies over a small denominator),
/// and `φ'(l_m)/l_m` replaces it (MODEL §13). Their difference is `O(φ''' Δl²)` relative to `φ'`,
/// about 1e-14 of it at the threshold, and the energy identity then holds to
/// `O(φ''' Δl³) ≈ 1e-21 φ'' l²` per pair and step: far below the solver's tolerance.
pub const DEGENERATE: f64 = 1e-7;

/// Which discrete gradient: energy–momentum (`em`, seed 004 (6.2)) or the midpoint gradient of
/// the symplectic–momentum scheme (`sm`, seed 004 (6.1)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Em,
    Sm,
}

/// A pair or wall potential as a function of one coordinate `s` (a distance or a height above a
/// wall): its energy and `dφ/ds`, read from the interaction's energy and force with the second
/// body at the origin and the first on the x axis (the force on the first is `−φ'(s) x̂`).
#[inline]
pub fn along(f: impl Fn(DVec3) -> ForceOut, s: f64) -> (f64, f64) {
    let o = f(DVec3::new(s, 0.0, 0.0));
    (o.energy, -o.force.x)
}

/// The factor `ξ` of a pair potential `φ(l)` between `d0 = x_i − x_j` at step k and `d1` at
/// step k+1: the force on `i` is `−ξ d_m` and on `j` `+ξ d_m`, with `d_m = ½(d0 + d1)`
/// (seed 004 (3.8): `p^i += h ξ_ij r^{ij}_{k+½}`, `r^{ij} = r^j − r^i = −d`).
///
/// * `Em`: `ξ = [φ(l1) − φ(l0)] / (d_m·(d1 − d0))`, the denominator being `½(l1² − l0²)` written
///   as the work the pair's forces do over the step (so `ξ d_m·Δd = Δφ` to rounding); `φ'(l_m)/l_m`
///   when `|l1 − l0| < DEGENERATE · l_m`.
/// * `Sm`: `ξ = φ'(|d_m|)/|d_m|`.
///
/// `phi(l)` returns `(φ(l), φ'(l))` (see `along`).
#[inline]
pub fn xi(scheme: Scheme, phi: impl Fn(f64) -> (f64, f64), d0: DVec3, d1: DVec3) -> f64 {
    let dm = 0.5 * (d0 + d1);
    match scheme {
        Scheme::Sm => {
            let l = dm.length();
            phi(l).1 / l
        }
        Scheme::Em => {
            let (l0, l1) = (d0.length(), d1.length());
            let lm = 0.5 * (l0 + l1);
            if (l1 - l0).abs() < DEGENERATE * lm {
                return phi(lm).1 / lm;
            }
            (phi(l1).0 - phi(l0).0) / dm.dot(d1 - d0)
        }
    }
}

/// The discrete slope `g` of a one-point potential `φ(s)` along a unit normal `n` between heights
/// `s0` (step k) and `s1` (step k+1): the force is `−g n` (the 1-D discrete gradient, MODEL §13).
///
/// * `Em`: `g = [φ(s1) − φ(s0)] / (s1 − s0)`; `φ'(s_m)` when `|s1 − s0| < DEGENERATE · scale`
///   (`scale`: the length the potential varies over, a wall's particle radius).
/// * `Sm`: `g = φ'(s_m)`, `s_m = ½(s0 + s1)` (the height of the midpoint position).
#[inline]
pub fn slope(scheme: Scheme, phi: impl Fn(f64) -> (f64, f64), s0: f64, s1: f64, scale: f64) -> f64 {
    let sm = 0.5 * (s0 + s1);
    match scheme {
        Scheme::Em if (s1 - s0).abs() >= DEGENERATE * scale => (phi(s1).0 - phi(s0).0) / (s1 - s0),
        _ => phi(sm).1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interactions::{axial, contact, wall};

    /// The defining property of the energy–momentum gradient, `φ(l1) − φ(l0) = ξ·½(l1² − l0²)`,
    /// for the axial and Hertz contact laws over changes from 1e-3 to 0.3 of the length (the
    /// quotient branch), to a few ulps of the energies; and the midpoint branch agrees with the
    /// quotient it replaces to the bound of `DEGENERATE`'s note.
    #[test]
    fn em_gradient_gives_the_energy_difference() {
        type Law = Box<dyn Fn(f64) -> (f64, f64)>;
        let laws: [(&str, Law); 2] = [
            ("axial", Box::new(|l| along(|d| axial(d, 0.9, 7.0), l))),
            ("contact", Box::new(|l| along(|d| contact(d, 1.3, 50.0), l))),
        ];
        let d0 = DVec3::new(0.7, -0.4, 0.5);
        for (name, phi) in &laws {
            for step in [1e-3, 1e-2, 0.1, 0.3] {
                let d1 = d0 * (1.0 - step) + DVec3::new(0.0, step, -0.5 * step);
                let x = xi(Scheme::Em, phi, d0, d1);
                let half = 0.5 * (d1.length_squared() - d0.length_squared());
                let want = phi(d1.length()).0 - phi(d0.length()).0;
                let scale = phi(d1.length()).0.abs().max(phi(d0.length()).0.abs());
                assert!(want.abs() > 1e-6 * scale, "{name}: the test needs a real energy change");
                assert!((x * half - want).abs() <= 1e-14 * scale, "{name} {step}: {} vs {want}", x * half);
            }
            // Just above the threshold the quotient holds; the midpoint value is within
            // O(Δl²) of it.
            let l0 = d0.length();
            let d1 = d0 * (1.0 + 2.0 * DEGENERATE);
            let q = xi(Scheme::Em, phi, d0, d1);
            let lm = 0.5 * (l0 + d1.length());
            let mid = phi(lm).1 / lm;
            assert!((q - mid).abs() <= 1e-6 * mid.abs(), "{name}: {q} vs {mid}");
        }
    }

    /// The wall's slope times the height change is the energy change (Em), and is the
    /// midpoint derivative (Sm); a pair that does not touch has ξ = 0.
    #[test]
    fn wall_slope_and_separated_pairs() {
        let phi = |s: f64| along(|x| wall(x, 0.5, DVec3::ZERO, DVec3::X, 30.0), s);
        let (s0, s1) = (0.45, 0.31);
        let g = slope(Scheme::Em, phi, s0, s1, 0.5);
        assert!((g * (s1 - s0) - (phi(s1).0 - phi(s0).0)).abs() < 1e-15);
        assert_eq!(slope(Scheme::Sm, phi, s0, s1, 0.5), phi(0.5 * (s0 + s1)).1);
        let apart = |l: f64| along(|d| contact(d, 1.0, 50.0), l);
        assert_eq!(xi(Scheme::Em, apart, DVec3::X * 1.2, DVec3::X * 1.1), 0.0);
    }
}
