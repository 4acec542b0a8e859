//! V7 beyond the torus: particles that meet only through the contact search (two bonded rings
//! colliding; an unbonded, overlapping cloud), and a system large enough that every kernel runs
//! many workgroups per dispatch (multi-level scan and reduction), all against the CPU engine.

mod common;

use common::Rng;
use common::gpu::*;
use rrpdem::engine::{Engine, Precision};
use rrpdem::integrator::Integrator;

#[test]
fn two_rings_collide_through_the_grid_f64_and_f32() {
    let (s, m) = scenario_model("two_rings.json");
    // E0 = ½ · 80 · 0.5² = 10; rings of diameter 1.5.
    let e0 = 10.0;
    let diameter = 2.0 * m.max_radius();
    // The rings meet at t ≈ 0.2: 800 steps cover the impact.
    let mut g = gpu(&m, Integrator::RrpNewmark, s.dt, Precision::F64);
    let mut c = cpu(&m, Integrator::RrpNewmark, s.dt);
    let (dx, _, de) = compare(&mut g, &mut c, 800);
    let u = c.diagnostics().unwrap().u_contact;
    eprintln!("two rings f64, 800 steps: max |Δx| = {dx:.2e}, max |ΔE| = {de:.2e} (U_contact = {u:.3e})");
    assert!(u > 0.0, "the rings must be in contact for this test to mean anything");
    // Same f64 operations on both engines; round-off differences (~1e-16/step) grow slowly
    // over 800 steps: ~1e-13 ≪ 1e-10.
    assert!(dx <= 1e-10 * 1.5 && de <= 1e-10 * e0, "Δx = {dx:e}, ΔE = {de:e}");

    let mut g = gpu(&m, Integrator::RrpNewmark, s.dt, Precision::F32);
    let mut c = cpu(&m, Integrator::RrpNewmark, s.dt);
    let (dx, _, de) = compare(&mut g, &mut c, 200);
    eprintln!("two rings f32, 200 steps: max |Δx| = {dx:.2e}, max |ΔE| = {de:.2e}");
    // As for the torus (f32 round-off ≈ 6e-8 of |x| ≤ 1.5 per step, 200 steps).
    assert!(dx <= 1e-4 * diameter && de <= 1e-4 * e0, "Δx = {dx:e}, ΔE = {de:e}");
}

#[test]
fn unbonded_overlapping_cloud_matches_cpu() {
    // 6·6·6 unit spheres at spacing 0.95: every neighbour pair overlaps by 5 %, plus a floor
    // and gravity; random spins and velocities. Energies are O(10²).
    let m = lattice_model(6, 6, 6, 0.95, false, 7);
    let dt = 2e-4;
    let mut g = gpu(&m, Integrator::RrpNewmark, dt, Precision::F64);
    let mut c = cpu(&m, Integrator::RrpNewmark, dt);
    let e0 = c.diagnostics().unwrap().total().abs();
    let (dx, dm, de) = compare(&mut g, &mut c, 300);
    eprintln!("cloud f64, 300 steps: max |Δx| = {dx:.2e}, max |Δv| = {dm:.2e}, max |ΔE| = {de:.2e} (E0 = {e0:.3e})");
    // f64 round-off, ~1e-16 per operation, over 300 steps in a contact-dominated system.
    assert!(dx <= 1e-10 * 6.0 && de <= 1e-10 * e0, "Δx = {dx:e}, ΔE = {de:e}");
}

#[test]
fn large_system_uses_many_workgroups_and_matches_cpu() {
    // 20 736 particles (324 workgroups of 64 per-particle dispatch, 2^16 buckets → two scan
    // levels, three reduction levels) with 19 872 bonds, contacts, a wall and gravity.
    let m = lattice_model(24, 24, 36, 0.97, true, 11);
    assert!(m.particles.len() > 20_000);
    let dt = 2e-4;
    let mut c = cpu(&m, Integrator::RrpNewmark, dt);
    let e0 = c.diagnostics().unwrap().total().abs();
    c.advance(20).unwrap();
    let (sc, dc) = (c.snapshot().unwrap(), c.diagnostics().unwrap());
    for p in [Precision::F64, Precision::F32] {
        let t0 = std::time::Instant::now();
        let mut g = gpu(&m, Integrator::RrpNewmark, dt, p);
        g.advance(20).unwrap();
        let (sg, dg) = (g.snapshot().unwrap(), g.diagnostics().unwrap());
        let (dx, de) = (max_position_diff(&sg, &sc), max_energy_diff(&dg, &dc));
        eprintln!(
            "large {p:?} (N = {}), 20 steps: max |Δx| = {dx:.2e}, max |ΔE| = {de:.2e} (E0 = {e0:.3e}, {:?})",
            m.particles.len(),
            t0.elapsed()
        );
        let (tol_x, tol_e) = match p {
            // f64 round-off over 20 steps; sums of 2e4 terms in other orders: ~2e4 · 1e-16 · E0.
            Precision::F64 => (1e-10 * 36.0, 1e-10 * e0),
            // f32: ~1e-7 relative per operation, 20 steps; energy sums of 2e4 terms ~1e-7 · E0 ·
            // sqrt(2e4) ≈ 1e-5 · E0.
            Precision::F32 => (1e-4, 1e-4 * e0),
        };
        assert!(dx <= tol_x && de <= tol_e, "{p:?}: Δx = {dx:e}, ΔE = {de:e}");
    }
}

#[test]
fn dispatches_folded_into_2d_give_identical_bits() {
    // 1728 particles: 27 workgroups per particle dispatch and 8 scan blocks; capping a dimension
    // at 4 workgroups folds every dispatch into 2-D, which must not change a single bit.
    use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
    let m = lattice_model(12, 12, 12, 0.97, true, 5);
    let dt = 2e-4;
    let mut plain = gpu(&m, Integrator::RrpNewmark, dt, Precision::F64);
    let options = GpuOptions { max_workgroups_per_dimension: Some(4), ..Default::default() };
    let mut folded =
        GpuEngine::with_options(&m, Integrator::RrpNewmark, dt, Precision::F64, AdapterChoice::Any, options)
            .unwrap_or_else(|e| panic!("{e}"));
    plain.advance(30).unwrap();
    folded.advance(30).unwrap();
    let (a, b) = (plain.snapshot().unwrap(), folded.snapshot().unwrap());
    assert_eq!(max_position_diff(&a, &b), 0.0);
    assert_eq!(max_motion_diff(&a, &b), 0.0);
    assert_eq!(plain.diagnostics().unwrap(), folded.diagnostics().unwrap());
}

#[test]
fn polydisperse_cloud_with_crowded_cells_matches_cpu() {
    // 3000 spheres of radius 0.05–0.5 at random in a 12³ box: cells are 1.0 wide (2 r_max), so
    // many small spheres share a cell and buckets hold several particles, which exercises the
    // in-bucket ordering of the grid. No bonds, no walls, no gravity: P and L are conserved.
    use glam::DVec3;
    use rrpdem::model::{Model, Params, Particles};
    let mut rng = Rng(21);
    let mut p = Particles::default();
    for _ in 0..3000 {
        let x = DVec3::new(rng.uniform(), rng.uniform(), rng.uniform()) * 12.0;
        let r = 0.05 + 0.45 * rng.uniform();
        let m = r * r * r * 8.0;
        p.push(x, rng.cube(0.2), glam::DQuat::IDENTITY, DVec3::ZERO, m, 0.4 * m * r * r, r, false);
    }
    let m = Model::new(p, &[], Params { k_contact: 50.0, ..Default::default() });
    let dt = 1e-3;
    let mut g = gpu(&m, Integrator::RrpNewmark, dt, Precision::F64);
    let mut c = cpu(&m, Integrator::RrpNewmark, dt);
    let e0 = c.diagnostics().unwrap().total();
    let (dx, dm, de) = compare(&mut g, &mut c, 200);
    let u = c.diagnostics().unwrap().u_contact;
    eprintln!(
        "polydisperse f64, 200 steps: max |Δx| = {dx:.2e}, max |Δv| = {dm:.2e}, max |ΔE| = {de:.2e} (E0 = {e0:.3e}, U_contact = {u:.2e})"
    );
    assert!(u > 0.0, "the cloud must have contacts");
    // f64 round-off over 200 steps of a contact-dominated gas: ~1e-14 ≪ 1e-10.
    assert!(dx <= 1e-10 * 12.0 && de <= 1e-10 * e0, "Δx = {dx:e}, ΔE = {de:e}");

    // Neighbour lists of capacity 1 overflow at once. With room to grow, each list is given
    // room for its own count (`plan_nbr_offsets`), even where one capacity for all would not
    // fit (binding capped at 100 kB: the particle arrays need 96 kB); with a memory budget of the
    // engine's bytes at capacity 1 they cannot grow and every step falls back to the grid. All
    // must give the same bits as the default engine.
    use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
    let sref = g.snapshot().unwrap();
    let dref = g.diagnostics().unwrap();
    let n = m.particles.len() as u64;
    let open = |options: GpuOptions| {
        GpuEngine::with_options(&m, Integrator::RrpNewmark, dt, Precision::F64, AdapterChoice::Any, options)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let tiny = GpuOptions { nbr_capacity: Some(1), ..Default::default() };
    let fresh = open(tiny);
    let stuck_budget = fresh.device_bytes() - 4 * (fresh.neighbour_entries() - n);
    drop(fresh);
    let cases = [
        (GpuOptions { max_binding_size: None, ..tiny }, true),
        (GpuOptions { max_binding_size: Some(100_000), ..tiny }, true),
        (GpuOptions { memory_budget: Some(stuck_budget), ..tiny }, false),
    ];
    for (options, grows) in cases {
        let mut t = open(options);
        t.advance(120).unwrap();
        let fell_back = t.fallback_steps();
        t.advance(80).unwrap();
        let (cap, entries) = (t.neighbour_capacity(), t.neighbour_entries());
        let (binding, budget) = (options.max_binding_size, options.memory_budget);
        eprintln!(
            "capacity 1, binding {binding:?}, budget {budget:?}: longest list {cap}, {entries} slots for {n} lists, \
             {fell_back} then {} steps in fallback batches",
            t.fallback_steps()
        );
        assert_eq!(cap > 1, grows, "{options:?}");
        if grows {
            // Per particle: fewer slots than the longest list for every particle, and past the
            // first overflow (during `new`) no more fallback.
            assert!(entries < cap as u64 * n, "{options:?}: {entries} slots, capacity {cap}");
            assert_eq!(t.fallback_steps(), fell_back, "{options:?}: fell back again after growing");
        }
        if options.max_binding_size == Some(100_000) {
            assert!(4 * cap as u64 * n > 100_000, "one capacity for all would not have fitted");
        }
        let s = t.snapshot().unwrap();
        assert_eq!(max_position_diff(&s, &sref), 0.0);
        assert_eq!(max_motion_diff(&s, &sref), 0.0);
        assert_eq!(t.diagnostics().unwrap(), dref);
    }
}
