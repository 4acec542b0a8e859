//! Failures on the GPU are reported like the CPU engine reports them: the rrp-exact condition
//! names the lowest failing particle and the step (V2), at the first step of a batch and later,
//! whatever the order in which workgroups run; non-finite attitudes are caught as on the CPU.

mod common;

use common::gpu::*;
use glam::DVec3;
use rrpdem::engine::{Engine, Precision};
use rrpdem::error::EngineError;
use rrpdem::integrator::Integrator;

/// Three free spheres far apart; particles 1 and 2 spin too fast for h = 1e-3 (h|Ω| ≥ 1).
const SPINNERS: &str = r#"{
  "name": "spinners", "dt": 1e-3, "t_end": 1, "integrator": "rrp-exact",
  "particle": { "mass": 1, "inertia": 1, "diameter": 1 },
  "bodies": [ { "type": "particles", "particles": [
    { "x": [0, 0, 0], "omega": [0, 0, 10] },
    { "x": [5, 0, 0], "omega": [1500, 0, 0] },
    { "x": [10, 0, 0], "omega": [0, 2000, 0] }
  ] } ]
}"#;

/// A pendulum in a huge field: its swing reaches h|Ω| ≥ 1 after a few steps.
const FAST_PENDULUM: &str = r#"{
  "name": "fast_pendulum", "dt": 1e-3, "t_end": 1, "integrator": "rrp-exact",
  "particle": { "mass": 1, "inertia": 1, "diameter": 1 },
  "pendulum": { "g": 400000 },
  "bodies": [ { "type": "pendulum", "alpha": [0, 4.82842712474619, 0] } ]
}"#;

fn exact_error(e: EngineError) -> (usize, u64, f64) {
    match e {
        EngineError::RrpExactCondition { particle, step, value, .. } => (particle, step, value),
        other => panic!("expected the rrp-exact condition, got: {other}"),
    }
}

#[test]
fn rrp_exact_reports_lowest_particle_at_first_step() {
    let (s, m) = model_from_json(SPINNERS);
    for p in [Precision::F64, Precision::F32] {
        let mut g = gpu(&m, Integrator::RrpExact, s.dt, p);
        let (particle, step, value) = exact_error(g.advance(10).unwrap_err());
        assert_eq!((particle, step), (1, 0), "{p:?}");
        // h²|Ω|² = (1e-3 · 1500)² = 2.25.
        assert!((value - 2.25).abs() < 1e-6, "{p:?}: value {value}");
        assert_eq!(g.steps_done(), 0);
    }
    let mut c = cpu(&m, Integrator::RrpExact, s.dt);
    assert_eq!(exact_error(c.advance(10).unwrap_err()).0, 1);
}

#[test]
fn rrp_exact_reports_the_same_step_as_the_cpu_later_in_a_run() {
    let (s, m) = model_from_json(FAST_PENDULUM);
    let mut c = cpu(&m, Integrator::RrpExact, s.dt);
    let (cp, cs, _) = exact_error(c.advance(100).unwrap_err());
    eprintln!("fast pendulum: CPU reports particle {cp} at step {cs}");
    assert!(cs >= 3, "the failure should come after a few steps, at step {cs}");
    // Split the run so that the failure falls inside the second batch, not at its first step.
    let mut g = gpu(&m, Integrator::RrpExact, s.dt, Precision::F64);
    g.advance(1).unwrap();
    let (gp, gs, value) = exact_error(g.advance(100).unwrap_err());
    assert_eq!((gp, gs), (cp, cs));
    assert!(value >= 1.0, "reported h²|Ω_h|² = {value}");
    let msg = EngineError::RrpExactCondition { particle: gp, step: gs, t: 0.0, value }.to_string();
    assert!(msg.contains("particle 0") && msg.contains(&format!("step {gs}")), "{msg}");
}

/// `data` of a saved f64 GPU state with component `c` of particle `i`'s vector in array `a`
/// (0 pos, 1 vel, 2 quat, 3 omega) set to `value`. Layout: origin (3 f64), then the four arrays
/// of n vec4<f64>.
fn poke(data: &mut [u8], n: usize, a: usize, i: usize, c: usize, value: f64) {
    let at = 24 + a * 32 * n + 32 * i + 8 * c;
    data[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

#[test]
fn failure_report_named_a_higher_particle_on_some_runs() {
    // 4096 particles: 64 workgroups per particle dispatch, so workgroups run in an order the
    // driver chooses. Particles 100 (workgroup 1) and 2048 (workgroup 32) both fail; a kernel
    // that stopped once another workgroup had reported could name 2048 (seen 2 in 60 runs).
    // Every run must name 100, for the rrp-exact check and for the non-finite check.
    let m = lattice_model(16, 16, 16, 1.05, false, 13);
    let n = m.particles.len();
    assert_eq!(n, 4096);
    assert!(!m.particles.fixed[100] && !m.particles.fixed[2048]);
    let dt = 2e-4;
    let mut g = gpu(&m, Integrator::RrpExact, dt, Precision::F64);
    let good = g.save_state().unwrap();
    // h|Ω| = 2e-4 · 6000 = 1.2 ≥ 1 at both.
    let mut spin = good.clone();
    for i in [100, 2048] {
        poke(&mut spin.data, n, 3, i, 0, 6000.0);
    }
    let mut nan = good.clone();
    for i in [100, 2048] {
        poke(&mut nan.data, n, 1, i, 1, f64::NAN);
    }
    for run in 0..24 {
        g.load_state(&spin).unwrap();
        let (particle, step, _) = exact_error(g.advance(5).unwrap_err());
        assert_eq!((particle, step), (100, 0), "run {run}: rrp-exact");
        match g.load_state(&nan).unwrap_err() {
            EngineError::NonFinite { particle, step, .. } => assert_eq!((particle, step), (100, 0), "run {run}: NaN"),
            other => panic!("run {run}: expected a non-finite report, got {other}"),
        }
    }
}

#[test]
fn non_finite_attitude_went_unreported() {
    // Unbonded spheres spinning so fast that one drift step overflows the RRP increment: the
    // attitude becomes NaN while x, v, Ω and F stay finite (no bonds read q). The CPU reports
    // it; the GPU checked only x, v, Ω, F, M and ran on.
    // |Ω| h = 1e297 in f64 (1e27 in f32): |Δα|² overflows to inf in the engine's precision.
    // A scenario refuses a spin whose kinetic energy overflows (`Scenario::check_motion`), so
    // the spins are set on the built model, as a caller of the library could.
    for (p, w) in [(Precision::F64, 1e300), (Precision::F32, 1e30)] {
        let mut m = common::free_spheres(&[DVec3::ZERO; 3]);
        (m.particles.w[1], m.particles.w[2]) = (DVec3::new(w, 0.0, 0.0), DVec3::new(0.0, 0.0, w));
        let mut g = gpu(&m, Integrator::RrpNewmark, 1e-3, p);
        let ge = g.advance(1).unwrap_err();
        assert!(matches!(ge, EngineError::NonFinite { particle: 1, step: 1, .. }), "{p:?}: {ge}");
        assert!(g.snapshot().unwrap()[1].q.is_nan(), "{p:?}");
        if p == Precision::F64 {
            // The f64 CPU overflows alike and reports the same particle and step.
            let mut c = cpu(&m, Integrator::RrpNewmark, 1e-3);
            let ce = c.advance(1).unwrap_err();
            assert!(matches!(ce, EngineError::NonFinite { particle: 1, step: 1, .. }), "CPU: {ce}");
        }
    }
}
