//! The 3-D pendulum (`scenarios/pendulum.json`) on the GPU: a single body, no bonds or contacts,
//! only the pendulum field; f64 against the CPU engine for all three integrators.

mod common;

use common::gpu::*;
use rrpdem::engine::Precision;
use rrpdem::integrator::Integrator;

#[test]
fn pendulum_f64_matches_cpu() {
    let (s, m) = scenario_model("pendulum.json");
    for integ in Integrator::ALL {
        let mut g = gpu(&m, integ, s.dt, Precision::F64);
        let mut c = cpu(&m, integ, s.dt);
        let (dx, dm, de) = compare(&mut g, &mut c, 100);
        eprintln!("pendulum {integ}, 100 steps: max |Δq, Ω| = {dm:.2e}, max |ΔE| = {de:.2e}");
        // One body, ~50 flops per step at 1e-16 each, 100 steps of a regular (non-chaotic)
        // motion: ~1e-13 against E0 ≈ 0.75.
        assert!(dx == 0.0 && dm <= 1e-12 && de <= 1e-12, "{integ}: Δ = {dm:e}, ΔE = {de:e}");
    }
}
