//! V7 on the paper's torus impact: GPU f64 and f32 against the CPU reference, and
//! bit-for-bit repeatability of the GPU engine.

#[path = "gpu_common.rs"]
mod gpu_common;

use gpu_common::*;
use rrpdem::engine::{Engine, Precision};
use rrpdem::integrator::Integrator;

#[test]
fn torus_f64_matches_cpu() {
    let (s, m) = scenario_model("torus_impact.json");
    let mut g = gpu(&m, Integrator::RrpNewmark, s.dt, Precision::F64);
    let mut c = cpu(&m, Integrator::RrpNewmark, s.dt);
    let t0 = std::time::Instant::now();
    let (dx, dm, de) = compare(&mut g, &mut c, 1000);
    eprintln!(
        "torus f64, 1000 steps: max |Δx| = {dx:e}, max |Δv,Ω,q| = {dm:e}, max |ΔE| = {de:e} ({:?})",
        t0.elapsed()
    );
    let d = c.diagnostics().unwrap();
    eprintln!("{:?}", d);
}
