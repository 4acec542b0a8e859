//! V2: a free-spinning sphere — the per-step rotation angle of each map, a million-step spin
//! through |θ| = π every turn, and rrp-exact's step condition.

mod common;
use common::{engines, free_spheres};
use glam::{DQuat, DVec3};
use rrpdem::engine::{CpuEngine, Engine};
use rrpdem::error::EngineError;
use rrpdem::integrator::Integrator;
use rrpdem::rrp;

/// The closed-form angle per step of each map for a free sphere spinning at `w` (MODEL §2).
fn step_angle(integ: Integrator, h: f64, w: f64) -> f64 {
    match integ {
        Integrator::RrpExact => (h * w).asin(),
        _ => 2.0 * (h * w / 2.0).atan(),
    }
}

#[test]
fn per_step_angle_matches_each_map() {
    let h = 1e-2;
    let axis = DVec3::new(1.0, -2.0, 0.5).normalize();
    for integ in Integrator::ALL {
        for w in [0.1, 10.0, 50.0, 99.0] {
            let model = free_spheres(&[axis * w]);
            for (name, mut e) in engines(&model, integ, h) {
                e.advance(1).unwrap();
                let q = e.snapshot().unwrap()[0].q;
                let expected = step_angle(integ, h, w);
                // One product of unit quaternions: angle error a few ε.
                assert!((rrp::angle(q) - expected).abs() < 1e-14, "{name} {integ} |Ω| = {w}");
                let axis_out = DVec3::new(q.x, q.y, q.z).normalize();
                assert!((axis_out - axis).length() < 1e-14, "{name} {integ}: rotation axis");
            }
        }
    }
}

#[test]
fn million_steps_through_half_turns_stay_on_the_closed_form() {
    let (h, w, n) = (1e-3, 10.0, 1_000_000u64);
    let axis = DVec3::new(0.0, 0.6, 0.8);
    for integ in [Integrator::RrpNewmark, Integrator::RrpExact] {
        let model = free_spheres(&[axis * w]);
        let mut e = CpuEngine::new(&model, integ, h).unwrap();
        let chunk = 100_000;
        for k in 1..=(n / chunk) {
            e.advance(chunk).unwrap();
            let q = e.snapshot().unwrap()[0].q;
            // Renormalised every step: |q| − 1 stays at round-off.
            assert!((q.length() - 1.0).abs() <= 1e-12);
            let total = (k * chunk) as f64 * step_angle(integ, h, w);
            let expected = DQuat::from_axis_angle(axis, total);
            // Each step adds O(ε) to the angle: after 1e6 steps ≤ 1e6 · 4ε ≈ 1e-9 rad.
            assert!(
                rrp::distance(q, expected) < 1e-9,
                "{integ} after {} steps: {}",
                k * chunk,
                rrp::distance(q, expected)
            );
        }
        // 1e6 · h|Ω| / 2π ≈ 1590 turns: the attitude passed |θ| = π that many times.
    }
}

#[test]
fn rrp_exact_refuses_a_step_with_h_omega_at_least_one() {
    // Particle 1 spins at |Ω| = 1500 with h = 1e-3: h²|Ω|² = 2.25 ≥ 1.
    let model = free_spheres(&[DVec3::new(0.0, 0.0, 1.0), DVec3::new(1500.0, 0.0, 0.0)]);
    for (name, mut e) in engines(&model, Integrator::RrpExact, 1e-3) {
        let before = e.snapshot().unwrap();
        match e.advance(3) {
            Err(EngineError::RrpExactCondition { particle, step, value, .. }) => {
                assert_eq!((particle, step), (1, 0), "{name}");
                assert!((value - 2.25).abs() < 1e-12, "{name}: {value}");
                let msg = EngineError::RrpExactCondition { particle, step, t: 0.0, value }.to_string();
                assert!(msg.contains("particle 1") && msg.contains("step 0"), "{msg}");
            }
            other => panic!("{name}: expected the rrp-exact error, got {other:?}"),
        }
        // Nothing moved: the condition is checked before the update.
        assert_eq!(e.snapshot().unwrap(), before, "{name}");
    }
}
