//! V1: RRP algebra — R(α) against the matrix exponential, orthogonality for huge |α|,
//! the composition rule (5), and the homogeneous (quaternion) form.

mod common;
use common::Rng;
use glam::{DMat3, DVec3};
use rrpdem::rrp::*;

/// Matrix exponential of S(θ) by Rodrigues' formula (independent of the RRP code path).
fn expm_skew(theta: DVec3) -> DMat3 {
    let a = theta.length();
    let k = skew(theta / a);
    DMat3::IDENTITY + k * a.sin() + k * k * (1.0 - a.cos())
}

fn max_abs(m: DMat3) -> f64 {
    m.to_cols_array().iter().fold(0.0f64, |a, b| a.max(b.abs()))
}

#[test]
fn rrp_matrix_equals_exponential_of_rotation_vector() {
    let mut rng = Rng(1);
    for _ in 0..1000 {
        // |α| from 1e-3 to 1e3, i.e. angles from ~0 to just under π.
        let alpha = rng.unit() * 10f64.powf(rng.range(-3.0, 3.0));
        let angle = 2.0 * (alpha.length() / 2.0).atan();
        let theta = alpha.normalize() * angle;
        // Both sides are O(1) entries computed with O(10) roundings: 1e-13 is ~500 ε.
        assert!(max_abs(rrp_matrix(alpha) - expm_skew(theta)) < 1e-13, "alpha = {alpha}");
        // And the inverse map from a rotation vector.
        assert!((rrp_from_rotation_vector(theta) - alpha).length() <= 1e-11 * alpha.length().max(1.0));
    }
}

#[test]
fn rrp_matrix_is_a_rotation_for_huge_alpha() {
    let mut rng = Rng(2);
    for _ in 0..1000 {
        let alpha = rng.unit() * 10f64.powf(rng.range(-3.0, 6.0));
        let r = rrp_matrix(alpha);
        // R Rᵀ = I and det R = 1 to a few ε, even at |α| = 1e6 where 4/(4+|α|²) ~ 4e-12:
        // S(α)² ~ |α|² cancels that factor, with relative rounding ~ ε per entry.
        assert!(max_abs(r * r.transpose() - DMat3::IDENTITY) < 1e-14 * 50.0, "alpha = {alpha}");
        assert!((r.determinant() - 1.0).abs() < 1e-13, "alpha = {alpha}");
    }
}

#[test]
fn composition_applies_first_then_second() {
    let mut rng = Rng(3);
    for _ in 0..1000 {
        let a1 = rng.unit() * rng.range(0.0, 3.0);
        let a2 = rng.unit() * rng.range(0.0, 3.0);
        if (4.0 - a1.dot(a2)).abs() < 0.1 {
            continue; // near a half turn, (5) itself is ill-conditioned
        }
        let c = compose(a1, a2);
        assert!(max_abs(rrp_matrix(c) - rrp_matrix(a2) * rrp_matrix(a1)) < 1e-13);
        // (−α) ⊕ α = 0 exactly: α + (−α) − ½(−α × α) = 0 term by term.
        assert_eq!(compose(-a1, a1), DVec3::ZERO);
        // The homogeneous form gives the same rotation as (5) where (5) is finite:
        // q(a1 ⊕ a2) = ±q(a2) ⊗ q(a1).
        let qc = quat_from_rrp(c);
        let qh = quat_from_rrp(a2) * quat_from_rrp(a1);
        assert!(qc.dot(qh).abs() > 1.0 - 1e-14, "a1 = {a1}, a2 = {a2}");
        // And the RRP read back from the product is (5)'s value.
        assert!((rrp_from_quat(qh) - c).length() < 1e-12 * c.length().max(1.0));
    }
}

#[test]
fn quaternion_form_matches_matrix_and_survives_half_turns() {
    let mut rng = Rng(4);
    for _ in 0..1000 {
        let alpha = rng.unit() * 10f64.powf(rng.range(-3.0, 6.0));
        let q = quat_from_rrp(alpha);
        assert!(max_abs(DMat3::from_quat(q) - rrp_matrix(alpha)) < 1e-13);
    }
    // Composing two quarter turns about z gives a half turn: α = ∞, but q = (0, ẑ) is fine.
    let quarter = rrp_from_rotation_vector(DVec3::Z * std::f64::consts::FRAC_PI_2);
    let half = apply_increment(quat_from_rrp(quarter), quarter);
    assert!(half.w.abs() < 1e-15 && (half.z.abs() - 1.0).abs() < 1e-15);
    assert!((angle(half) - std::f64::consts::PI).abs() < 1e-14);
}

#[test]
fn rotation_vector_round_trips() {
    let mut rng = Rng(5);
    for _ in 0..1000 {
        let theta = rng.unit() * rng.range(0.0, 3.1);
        let back = rotation_vector(quat_from_rotation_vector(theta));
        assert!((back - theta).length() < 1e-13, "theta = {theta}");
    }
    // Near the identity the series branch is used: θ = 1e-9 ẑ comes back to ~ε relative.
    let tiny = DVec3::new(0.0, 0.0, 1e-9);
    assert!((rotation_vector(quat_from_rotation_vector(tiny)) - tiny).length() < 1e-24);
}
