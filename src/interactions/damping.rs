//! Dissipative loads of MODEL §10: the coefficients (`Dissipation`), the normal contact dashpot
//! with the tangential spring–slider (`contact_dissipation`, pairs and walls) and the viscous
//! binder (`binder_damping`). They enter the step as right-endpoint forcing (discrete
//! Lagrange–d'Alembert): evaluated with the conservative loads at node k+1, from the positions
//! at k+1 and the velocities the step already knows.

use glam::DVec3;
use serde::Serialize;

/// The coefficients of MODEL §10 as the engines use them (all zero: the conservative model).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Dissipation {
    /// β of the pair restitution (`restitution_beta`); 0 for e = 1.
    pub beta: f64,
    /// β of the wall restitution.
    pub beta_wall: f64,
    /// Coulomb coefficient between particles (0: no pair friction).
    pub mu: f64,
    /// Coulomb coefficient against the walls (0: no wall friction).
    pub mu_wall: f64,
    /// Tangential to normal stiffness ratio κ.
    pub stiffness_ratio: f64,
    /// Binder damping γ_a (axial), γ_s (shear), γ_b (bending), γ_t (twist).
    pub binder: [f64; 4],
}

impl Dissipation {
    /// Whether particle–particle contacts dissipate.
    pub fn pairs(&self) -> bool {
        self.beta > 0.0 || self.mu > 0.0
    }

    /// Whether particle–wall contacts dissipate.
    pub fn walls(&self) -> bool {
        self.beta_wall > 0.0 || self.mu_wall > 0.0
    }

    /// Whether the binder dissipates.
    pub fn binder(&self) -> bool {
        self.binder.iter().any(|&g| g > 0.0)
    }

    /// Whether some contact keeps a tangential history.
    pub fn friction(&self) -> bool {
        self.mu > 0.0 || self.mu_wall > 0.0
    }

    /// Whether anything dissipates.
    pub fn any(&self) -> bool {
        self.pairs() || self.walls() || self.binder()
    }
}

/// `β = −ln e / sqrt(π² + ln² e)` of a coefficient of restitution `e ∈ (0, 1]` (0 for e = 1).
/// With the dashpot of `contact_dissipation` the restitution of an isolated head-on Hertz
/// impact is `e` at every speed (MODEL §10).
pub fn restitution_beta(e: f64) -> f64 {
    if e >= 1.0 {
        return 0.0;
    }
    let l = e.ln();
    -l / (std::f64::consts::PI * std::f64::consts::PI + l * l).sqrt()
}

/// Hertz constant `k_H = K R^{−5/2}` of the contact law `U = (2/5) K [1 − L/R]^{5/2}` with `R` the
/// radius sum (a wall: the particle's radius), so that the elastic normal force is `k_H s^{3/2}`
/// at overlap `s = R − L` (force per length^{3/2}).
#[inline]
pub fn hertz_constant(k: f64, r_sum: f64) -> f64 {
    k / (r_sum * r_sum * r_sum.sqrt())
}

/// The dissipative loads of one contact: force on `i` (the force on `j` is `−f_i`), spatial
/// moments on `i` and `j`, and the contact's new tangential displacement ξ.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ContactLoad {
    pub f_i: DVec3,
    pub m_i: DVec3,
    pub m_j: DVec3,
    pub xi: DVec3,
}

/// Normal dashpot and tangential spring–slider of an active contact (MODEL §10).
///
/// `n`: unit normal from j to i (wall: its normal); `s > 0`: overlap (length); `f_el`: the
/// elastic normal force `k_H s^{3/2}`; `k_h`: Hertz constant; `m_star`: reduced mass (wall:
/// the particle's); `l_i`, `l_j`: distances from the centres to the contact point (wall: `l_j`
/// = 0); `dv = v_i − v_j`; `w_i`, `w_j`: spatial angular velocities (wall: `w_j` = 0); `xi`: the
/// contact's tangential displacement before this step (0 for a new contact); `h`: the step.
///
/// Dashpot: `η_n = √5 β sqrt(m* k_H) s^{1/4}`, `F_i = −η_n (dv·n) n`.
/// Slider (only for `mu > 0`): `u = dv − (l_i Ω_i + l_j Ω_j) × n`, `v_t = u − (u·n) n`; ξ is
/// turned into the tangent plane keeping its length, then `ξ += h v_t`; `k_t = κ (3/2) k_H s^{1/2}`,
/// `η_t = √κ η_n`, `F* = −k_t ξ − η_t v_t`; with `F_n = max(0, f_el − η_n dv·n)`, where
/// `|F*| > μ F_n` the contact slips: `F_t = μ F_n F*/|F*|`, `ξ = −(F_t + η_t v_t)/k_t`; else
/// `F_t = F*`. Loads: `F_i += F_t`, `RM_i = −l_i n × F_t`, `RM_j = −l_j n × F_t`.
///
/// Odd under the exchange of i and j (n, dv, ξ negated; l, Ω swapped), bit for bit: every sum
/// of two terms is commutative in IEEE arithmetic and negation is exact, so either end computes
/// the other's loads exactly.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn contact_dissipation(
    n: DVec3,
    s: f64,
    f_el: f64,
    k_h: f64,
    m_star: f64,
    l_i: f64,
    l_j: f64,
    dv: DVec3,
    w_i: DVec3,
    w_j: DVec3,
    xi: DVec3,
    h: f64,
    beta: f64,
    mu: f64,
    kappa: f64,
) -> ContactLoad {
    let c = DashpotConsts { k_h, eta0: dashpot_eta0(beta, m_star, k_h) };
    contact_dissipation_with(n, s, &c, || (f_el, l_i, l_j), dv, w_i, w_j, xi, h, mu, kappa)
}

/// The part of the normal dashpot's `η_n` that depends on the pair alone: `√5 β sqrt(m* k_H)`
/// (`η_n` is this times `s^{1/4}`, multiplied in that order).
#[inline(always)]
pub fn dashpot_eta0(beta: f64, m_star: f64, k_h: f64) -> f64 {
    5f64.sqrt() * beta * (m_star * k_h).sqrt()
}

/// What `contact_dissipation` needs of a pair besides its geometry and velocities: the Hertz
/// constant and `dashpot_eta0`. The same for every pair of equal radius sum and reduced mass,
/// so a particle's pass forms them once for a run of such partners.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DashpotConsts {
    pub k_h: f64,
    pub eta0: f64,
}

/// `contact_dissipation` with the pair's constants formed beforehand, and the elastic normal
/// force and the lever arms `(f_el, l_i, l_j)` asked for only where the slider needs them
/// (`mu > 0`): the same operations in the same order, so the same bits.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn contact_dissipation_with(
    n: DVec3,
    s: f64,
    c: &DashpotConsts,
    slider: impl FnOnce() -> (f64, f64, f64),
    dv: DVec3,
    w_i: DVec3,
    w_j: DVec3,
    xi: DVec3,
    h: f64,
    mu: f64,
    kappa: f64,
) -> ContactLoad {
    let k_h = c.k_h;
    let v_n = dv.dot(n);
    let eta_n = c.eta0 * s.sqrt().sqrt();
    let mut f_i = n * (-eta_n * v_n);
    if mu <= 0.0 {
        return ContactLoad { f_i, ..Default::default() };
    }
    let (f_el, l_i, l_j) = slider();
    let u = dv - (w_i * l_i + w_j * l_j).cross(n);
    let v_t = u - n * u.dot(n);
    // ξ turned into the current tangent plane, keeping its length.
    let len = xi.length();
    let flat = xi - n * xi.dot(n);
    let flat_len = flat.length();
    let mut xi = if flat_len > 0.0 { flat * (len / flat_len) } else { DVec3::ZERO };
    xi += v_t * h;
    let k_t = kappa * 1.5 * k_h * s.sqrt();
    let eta_t = kappa.sqrt() * eta_n;
    let trial = -(xi * k_t) - v_t * eta_t;
    let f_n = (f_el - eta_n * v_n).max(0.0);
    let limit = mu * f_n;
    let size = trial.length();
    let f_t = if size > limit {
        let f_t = trial * (limit / size);
        xi = -(f_t + v_t * eta_t) / k_t;
        f_t
    } else {
        trial
    };
    f_i += f_t;
    let arm = n.cross(f_t);
    ContactLoad { f_i, m_i: arm * -l_i, m_j: arm * -l_j, xi }
}

/// Loads of a viscous binder bond: force on `i` (`−f_i` on j) and spatial moments on i and j.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BondDamping {
    pub f_i: DVec3,
    pub m_i: DVec3,
    pub m_j: DVec3,
}

/// Viscous binder (MODEL §10) of a bond with `d = x_i − x_j`, `dv = v_i − v_j`, spatial angular
/// velocities `w_i`, `w_j` and `gamma = [γ_a, γ_s, γ_b, γ_t]`:
/// `w = dv − ½ (Ω_i + Ω_j) × d` (zero in any rigid motion), `F_i = −γ_a (w·d̂) d̂ − γ_s w_⊥`,
/// shear couple `RM_i = RM_j = −½ d × F^(s)`, and with `ω = Ω_i − Ω_j`:
/// `RM_i = −γ_b ω_⊥ − γ_t (ω·d̂) d̂ = −RM_j` on top. Its power is
/// `−γ_a (w·d̂)² − γ_s |w_⊥|² − γ_b |ω_⊥|² − γ_t (ω·d̂)² ≤ 0`.
#[inline]
pub fn binder_damping(d: DVec3, dv: DVec3, w_i: DVec3, w_j: DVec3, gamma: [f64; 4]) -> BondDamping {
    let len = d.length();
    if len <= 0.0 {
        return BondDamping::default();
    }
    let dh = d / len;
    let w = dv - ((w_i + w_j) * 0.5).cross(d);
    let w_a = w.dot(dh);
    let f_s = (w - dh * w_a) * -gamma[1];
    let f_i = dh * (-gamma[0] * w_a) + f_s;
    let couple = d.cross(f_s) * -0.5;
    let om = w_i - w_j;
    let om_a = om.dot(dh);
    let rot = (om - dh * om_a) * -gamma[2] - dh * (gamma[3] * om_a);
    BondDamping { f_i, m_i: couple + rot, m_j: couple - rot }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: f64, y: f64, z: f64) -> DVec3 {
        DVec3::new(x, y, z)
    }

    /// Power of the loads on the two ends.
    fn power(f_i: DVec3, m_i: DVec3, m_j: DVec3, dv: DVec3, w_i: DVec3, w_j: DVec3) -> f64 {
        f_i.dot(dv) + m_i.dot(w_i) + m_j.dot(w_j)
    }

    #[test]
    fn beta_of_restitution() {
        assert_eq!(restitution_beta(1.0), 0.0);
        // e = exp(−π) gives β = π/sqrt(2π²) = 1/√2.
        assert!((restitution_beta((-std::f64::consts::PI).exp()) - 0.5f64.sqrt()).abs() < 1e-15);
    }

    #[test]
    fn binder_damping_is_silent_in_rigid_motion_and_dissipates_otherwise() {
        let (d, om) = (v(0.3, -0.2, 0.9), v(0.4, 1.1, -0.7));
        // Rigid motion: v = V + Ω × x, both ends turning with Ω.
        let g = [1.3, 0.7, 0.4, 0.9];
        let b = binder_damping(d, om.cross(d), om, om, g);
        assert!(b.f_i.length() < 1e-15 && b.m_i.length() < 1e-15 && b.m_j.length() < 1e-15, "{b:?}");
        // Every channel alone: the power is −γ (rate)², and the total moment about the origin
        // of the loads vanishes (x_i × F_i + x_j × F_j + RM_i + RM_j with d = x_i − x_j).
        let (dv, w_i, w_j) = (v(0.2, 0.5, -0.3), v(-0.6, 0.1, 0.8), v(0.3, -0.9, 0.2));
        let dh = d.normalize();
        let w = dv - ((w_i + w_j) * 0.5).cross(d);
        let om = w_i - w_j;
        let rates = [
            w.dot(dh).powi(2),
            (w - dh * w.dot(dh)).length_squared(),
            (om - dh * om.dot(dh)).length_squared(),
            om.dot(dh).powi(2),
        ];
        for c in 0..4 {
            let mut g = [0.0; 4];
            g[c] = [1.3, 0.7, 0.4, 0.9][c];
            let b = binder_damping(d, dv, w_i, w_j, g);
            let p = power(b.f_i, b.m_i, b.m_j, dv, w_i, w_j);
            assert!((p + g[c] * rates[c]).abs() < 1e-14, "channel {c}: power {p}, expected {}", -g[c] * rates[c]);
            let torque = d.cross(b.f_i) + b.m_i + b.m_j;
            assert!(torque.length() < 1e-15, "channel {c}: net torque {torque}");
        }
    }

    #[test]
    fn contact_dissipation_is_odd_under_exchange_bit_for_bit() {
        let n = v(0.36, -0.48, 0.8);
        let (dv, w_i, w_j, xi) = (v(0.2, 0.5, -0.3), v(-0.6, 0.1, 0.8), v(0.3, -0.9, 0.2), v(1e-4, 2e-4, 0.5e-4));
        for mu in [0.0, 0.05, 10.0] {
            let a = contact_dissipation(n, 1e-3, 0.7, 2e5, 0.4, 0.31, 0.52, dv, w_i, w_j, xi, 1e-4, 0.3, mu, 2.0 / 7.0);
            let b =
                contact_dissipation(-n, 1e-3, 0.7, 2e5, 0.4, 0.52, 0.31, -dv, w_j, w_i, -xi, 1e-4, 0.3, mu, 2.0 / 7.0);
            assert_eq!((a.f_i, a.m_i, a.m_j, a.xi), (-b.f_i, b.m_j, b.m_i, -b.xi), "mu = {mu}");
            // Zero net torque about the origin (lever arms summing to the distance): up to a few
            // roundings of size ε |d| |F| in the cross products and the lever arms' sum.
            let d = n * (0.31 + 0.52);
            let torque = d.cross(a.f_i) + a.m_i + a.m_j;
            assert!(torque.length() < 2e-15 * (1.0 + a.f_i.length()), "mu = {mu}: {torque}");
        }
    }

    #[test]
    fn coulomb_limit_and_stick() {
        let n = DVec3::Z;
        let (k_h, s, kappa): (f64, f64, f64) = (1e6, 1e-4, 2.0 / 7.0);
        let f_el = k_h * s.powf(1.5);
        let k_t = kappa * 1.5 * k_h * s.sqrt();
        // Slow slip, no dashpot: a spring until ξ k_t reaches μ F_n.
        let dv = DVec3::X * 1e-3;
        let h = 1e-3;
        // A sphere on a wall (no dashpot, μ = 0.5) sliding at `dv` with history `xi`.
        let slide = |dv: DVec3, xi: DVec3| {
            contact_dissipation(n, s, f_el, k_h, 1.0, 0.01, 0.0, dv, DVec3::ZERO, DVec3::ZERO, xi, h, 0.0, 0.5, kappa)
        };
        let stick = slide(dv, DVec3::ZERO);
        assert!((stick.xi - DVec3::X * 1e-6).length() < 1e-21, "{stick:?}");
        assert!((stick.f_i + DVec3::X * (k_t * 1e-6)).length() < 1e-12 * k_t * 1e-6);
        // A displacement far beyond the limit: |F_t| = μ F_n exactly, and ξ is the spring
        // length that force corresponds to.
        let big = slide(dv, DVec3::X);
        assert!((big.f_i.length() - 0.5 * f_el).abs() < 1e-12 * f_el, "{big:?}");
        assert!((big.xi.length() * k_t - 0.5 * f_el).abs() < 1e-12 * f_el);
        // ξ out of the tangent plane is turned into it keeping its length.
        let tilted = slide(DVec3::ZERO, v(3e-7, 0.0, 4e-7));
        assert!((tilted.xi - DVec3::X * 5e-7).length() < 1e-21, "{tilted:?}");
    }
}
