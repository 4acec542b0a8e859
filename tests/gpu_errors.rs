//! Failures on the GPU are reported like the CPU engine reports them: the rrp-exact condition
//! names the lowest failing particle and the step (V2), at the first step of a batch and later.

mod common;

use common::gpu::*;
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
