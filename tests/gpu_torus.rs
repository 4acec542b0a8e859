//! V7 on the paper's torus impact (`scenarios/torus_impact.json`): the GPU engine in f64 and
//! f32 against the f64 CPU reference, for every integrator, and bit-for-bit repeatability.

mod common;

use common::gpu::*;
use rrpdem::engine::{Engine, Precision};
use rrpdem::integrator::Integrator;

/// Torus diameter and initial energy of the scenario (MODEL §5).
const TORUS_SIZE: f64 = 3.0;
const E0: f64 = 40.0;

#[test]
fn torus_f64_matches_cpu_after_1000_steps() {
    let (s, m) = scenario_model("torus_impact.json");
    let mut g = gpu(&m, Integrator::RrpNewmark, s.dt, Precision::F64);
    let mut c = cpu(&m, Integrator::RrpNewmark, s.dt);
    let (dx, dm, de) = compare(&mut g, &mut c, 1000);
    eprintln!(
        "torus f64 rrp-newmark, 1000 steps: max |Δx| = {dx:.2e}, max |Δv,Ω,q| = {dm:.2e}, max |ΔE,P,S,L| = {de:.2e}"
    );
    // Both engines do the same f64 operations; only contraction/summation order differ
    // (~1e-16 per step), amplified by at most e^{5t} ≈ 150 at t = 1: ~1e-12 ≪ 1e-10.
    assert!(dx <= 1e-10 * TORUS_SIZE, "positions differ by {dx:e}");
    assert!(de <= 1e-10 * E0, "energies/momenta differ by {de:e}");
    assert!(dm <= 1e-9, "velocities/attitudes differ by {dm:e}");
}

#[test]
fn torus_f64_matches_cpu_for_rrp_exact_and_campello() {
    let (s, m) = scenario_model("torus_impact.json");
    for integ in [Integrator::RrpExact, Integrator::Campello] {
        let mut g = gpu(&m, integ, s.dt, Precision::F64);
        let mut c = cpu(&m, integ, s.dt);
        let (dx, _, de) = compare(&mut g, &mut c, 500);
        eprintln!("torus f64 {integ}, 500 steps: max |Δx| = {dx:.2e}, max |ΔE| = {de:.2e}");
        // Same estimate as for rrp-newmark.
        assert!(dx <= 1e-10 * TORUS_SIZE && de <= 1e-10 * E0, "{integ}: Δx = {dx:e}, ΔE = {de:e}");
    }
}

#[test]
fn torus_f32_matches_cpu_after_200_steps() {
    let (s, m) = scenario_model("torus_impact.json");
    let diameter = 2.0 * m.max_radius();
    let mut g = gpu(&m, Integrator::RrpNewmark, s.dt, Precision::F32);
    let mut c = cpu(&m, Integrator::RrpNewmark, s.dt);
    let (dx, dm, de) = compare(&mut g, &mut c, 200);
    eprintln!("torus f32, 200 steps: max |Δx| = {dx:.2e}, max |Δv,Ω,q| = {dm:.2e}, max |ΔE,P,S,L| = {de:.2e}");
    // f32 drift round-off ≈ ulp(1.5)/2 = 6e-8 per step (positions relative to the box centre):
    // a random walk over 200 steps gives ~1e-6, a systematic worst case 1.2e-5 = 1e-4 · D_p
    // (measured ~3e-6). Energies: each term ~10 carries ~1e-6 relative f32 error, 80 terms
    // → ~1e-3 at worst against 1e-4 · E0 = 4e-3 (measured ~3e-4).
    assert!(dx <= 1e-4 * diameter, "positions differ by {dx:e} (D_p = {diameter})");
    assert!(de <= 1e-4 * E0, "energies differ by {de:e}");
}

#[test]
fn torus_f32_energy_stays_bounded_over_a_long_run() {
    let (s, m) = scenario_model("torus_impact.json");
    let mut g = gpu(&m, Integrator::RrpNewmark, s.dt, Precision::F32);
    let e0 = g.diagnostics().unwrap().total();
    let mut worst: f64 = 0.0;
    for _ in 0..20 {
        g.advance(250).unwrap();
        worst = worst.max((g.diagnostics().unwrap().total() - e0).abs());
    }
    eprintln!("torus f32, t = 5: max |E − E0| = {worst:.2e}");
    // The CPU bound of V6 (5e-3 · E0), which f32 round-off (~1e-6 relative) does not change.
    assert!(worst <= 5e-3 * E0, "energy error {worst:e}");
}

#[test]
fn repeat_runs_are_bit_identical_and_batching_does_not_matter() {
    let (s, m) = scenario_model("torus_impact.json");
    for p in [Precision::F64, Precision::F32] {
        let mut a = gpu(&m, Integrator::RrpNewmark, s.dt, p);
        let mut b = gpu(&m, Integrator::RrpNewmark, s.dt, p);
        a.advance(400).unwrap();
        for _ in 0..8 {
            b.advance(50).unwrap();
        }
        assert_eq!(a.steps_done(), b.steps_done());
        // Splitting a batch replaces a fused kick by the same two half kicks: identical bits.
        assert!(bits(&mut a) == bits(&mut b), "{p:?}: runs differ");
        let mut c = gpu(&m, Integrator::RrpNewmark, s.dt, p);
        c.advance(400).unwrap();
        assert!(bits(&mut a) == bits(&mut c), "{p:?}: repeat run differs");
    }
}

#[test]
fn timing_the_stages_of_a_step_changes_no_result() {
    // `rrpdem bench --stages`: each stage of a timed step is its own compute pass with
    // timestamps; the steps are real steps and must give the bits of untimed ones.
    let (s, m) = scenario_model("torus_impact.json");
    for p in [Precision::F64, Precision::F32] {
        let mut a = gpu(&m, Integrator::RrpNewmark, s.dt, p);
        let mut b = gpu(&m, Integrator::RrpNewmark, s.dt, p);
        a.advance(300).unwrap();
        b.advance(100).unwrap();
        let t = b.time_stages(200).unwrap().unwrap_or_else(|| {
            panic!("{}: no timestamp queries (lavapipe and desktop Vulkan drivers offer them)", b.info().device)
        });
        assert_eq!(b.steps_done(), 300);
        assert!(bits(&mut a) == bits(&mut b), "{p:?}: timed steps differ from untimed ones");
        let names: Vec<&str> = t.iter().map(|x| x.0).collect();
        assert_eq!(names, ["integrate", "grid", "bonds", "particle", "watch"]);
        // Every stage dispatches work each step: some device time, and not absurdly much
        // (a tick period misread by 10⁶ would give seconds per step for 80 particles).
        assert!(t.iter().all(|x| x.1 > 0.0 && x.1 < 0.1), "{p:?}: {t:?}");
        // Each dispatch its own timed pass (`--stages`' kernel figures): the same bits again.
        let mut c = gpu(&m, Integrator::RrpNewmark, s.dt, p);
        c.advance(250).unwrap();
        let k = c.time_kernels(50).unwrap().expect("timestamp queries, as above");
        assert_eq!(c.steps_done(), 300);
        assert!(bits(&mut a) == bits(&mut c), "{p:?}: steps timed by kernel differ from untimed ones");
        // Every kernel once, in its stage, in the step's order; those that work in every step
        // took some time.
        let names: Vec<&str> = k.iter().map(|x| x.1).collect();
        for (stage, kernel) in
            [("integrate", "integrate"), ("grid", "nbr_build"), ("bonds", "bonds"), ("particle", "particle")]
        {
            let at = k.iter().find(|x| x.1 == kernel).unwrap_or_else(|| panic!("{p:?}: no {kernel} in {names:?}"));
            assert_eq!(at.0, stage, "{p:?}: {kernel}");
        }
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{p:?}: a kernel twice in {names:?}");
        for kernel in ["integrate", "bonds", "particle"] {
            let t = k.iter().find(|x| x.1 == kernel).expect("found above").2;
            assert!(t > 0.0 && t < 0.1, "{p:?}: {kernel} {t}");
        }
    }
}

#[test]
fn info_names_the_gpu_backend() {
    let (s, m) = scenario_model("torus_impact.json");
    let g = gpu(&m, Integrator::RrpNewmark, s.dt, Precision::F32);
    let info = g.info();
    assert_eq!(info.backend, "gpu");
    assert_eq!(info.precision, Precision::F32);
    assert!(!info.device.is_empty());
    assert_eq!(g.n_particles(), 80);
}

#[test]
fn batching_does_not_matter_for_rrp_exact_and_campello() {
    let (s, m) = scenario_model("torus_impact.json");
    for integ in [Integrator::RrpExact, Integrator::Campello] {
        let mut a = gpu(&m, integ, s.dt, Precision::F64);
        let mut b = gpu(&m, integ, s.dt, Precision::F64);
        a.advance(300).unwrap();
        for k in [1, 99, 200] {
            b.advance(k).unwrap();
        }
        assert!(bits(&mut a) == bits(&mut b), "{integ}: batched runs differ");
    }
}
