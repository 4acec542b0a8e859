//! Throughput of the GPU engine (particle-steps per second), run on demand:
//! `cargo test --release --test gpu_throughput -- --ignored --nocapture`. Ignored by default
//! because it measures rather than checks; it still asserts that every run completes.

#[path = "gpu_common.rs"]
mod gpu_common;

use gpu_common::*;
use rrpdem::engine::{Engine, Precision};
use rrpdem::integrator::Integrator;
use std::time::Instant;

fn measure(name: &str, m: &rrpdem::model::Model, dt: f64, steps: u64) {
    for p in [Precision::F32, Precision::F64] {
        let mut g = gpu(m, Integrator::RrpNewmark, dt, p);
        g.advance(10).unwrap(); // warm-up: first dispatches compile the kernels
        let t0 = Instant::now();
        g.advance(steps).unwrap();
        let s = t0.elapsed().as_secs_f64();
        let rate = m.particles.len() as f64 * steps as f64 / s;
        eprintln!(
            "{name} {p:?}: N = {}, {steps} steps in {s:.3} s: {rate:.3e} particle-steps/s ({})",
            m.particles.len(),
            g.info().device
        );
        assert_eq!(g.steps_done(), steps + 10);
    }
    let mut c = cpu(m, Integrator::RrpNewmark, dt);
    let t0 = Instant::now();
    c.advance(steps).unwrap();
    let s = t0.elapsed().as_secs_f64();
    eprintln!("{name} CPU: {:.3e} particle-steps/s", m.particles.len() as f64 * steps as f64 / s);
}

#[test]
#[ignore]
fn throughput() {
    let (s, m) = scenario_model("torus_impact.json");
    measure("torus", &m, s.dt, 2000);
    let (s, m) = model_from_json(
        r#"{ "name": "ring", "dt": 1e-3, "t_end": 1, "particle": { "mass": 1, "inertia": 1 },
             "stiffness": { "bending": 10, "axial": 200, "shear": 200, "contact": 2100 },
             "bodies": [ { "type": "torus_ring", "n": 100000, "particle_diameter": 1,
                           "center": [0, 0, 0], "velocity": [0.1, 0, 0] } ] }"#,
    );
    measure("ring 1e5", &m, s.dt, 50);
    let m = lattice_model(47, 47, 46, 0.97, true, 1);
    measure("lattice 1e5", &m, 2e-4, 20);
}
