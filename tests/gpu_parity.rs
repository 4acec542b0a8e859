//! V7 with every stiffness different from every other (K^m, K^a, K^s, K^pp, K^pw), so that a
//! parameter routed to the wrong term on the GPU (k_axial read as k_shear, k_contact as k_wall,
//! ...) shows as a difference from the CPU: the scenarios of the other parity tests use
//! K^a = K^s and K^pp = K^pw, where such a swap changes nothing. Every term is active: bonds are
//! bent, twisted, sheared and stretched, unbonded neighbours overlap, the bottom layer presses
//! into the floor, and gravity acts; both shear laws; f64 and f32 against the f64 CPU. The
//! impact measures of MODEL §9 (total wall force, centre of mass and its velocity) are compared
//! too.

mod common;

use common::gpu::*;
use glam::DVec3;
use rrpdem::engine::{Engine, Precision};
use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
use rrpdem::integrator::Integrator;
use rrpdem::interactions::{ShearVariant, Wall};
use rrpdem::model::{Model, Params};

/// Stiffnesses pairwise distinct (and not in simple ratios), a floor and gravity.
fn distinct(shear: ShearVariant) -> Params {
    Params {
        k_bend: 13.0,
        k_axial: 290.0,
        k_shear: 70.0,
        k_contact: 2100.0,
        k_wall: 900.0,
        shear,
        walls: vec![Wall { point: DVec3::ZERO, normal: DVec3::Z }],
        gravity: DVec3::new(0.0, 0.0, -1.0),
        pendulum: None,
        rupture: None,
        dissipation: None,
        gravitation: None,
        skin: rrpdem::grid::SKIN_FACTOR,
    }
}

/// 216 spheres of diameter 1 at spacing 0.97, chains bonded along x: neighbours across chains
/// overlap by 3 % (contacts), the bottom layer (centres at z ≈ 0.485) overlaps the floor.
fn model(shear: ShearVariant) -> Model {
    let p = distinct(shear);
    let ks = [p.k_bend, p.k_axial, p.k_shear, p.k_contact, p.k_wall];
    for (a, x) in ks.iter().enumerate() {
        for y in &ks[a + 1..] {
            assert_ne!(x, y, "the stiffnesses must differ pairwise");
        }
    }
    lattice_model_with(6, 6, 6, 0.97, true, 17, p)
}

/// Runs `steps` steps on both engines and checks the bounds; asserts every energy term is live.
fn parity(shear: ShearVariant, p: Precision, steps: u64) {
    let m = model(shear);
    let dt = 2e-4;
    let mut g = gpu(&m, Integrator::RrpNewmark, dt, p);
    let mut c = cpu(&m, Integrator::RrpNewmark, dt);
    let e0 = c.diagnostics().unwrap().total().abs();
    let (dx, dm, de) = compare(&mut g, &mut c, steps);
    let d = c.diagnostics().unwrap();
    let dg = g.diagnostics().unwrap();
    // MODEL §9's impact measures: total wall force, centre of mass and its velocity.
    let d_fwall = (dg.f_wall - d.f_wall).abs().max_element();
    let d_xcm = (dg.x_cm - d.x_cm).abs().max_element();
    let d_vcm = (dg.v_cm - d.v_cm).abs().max_element();
    eprintln!(
        "  F_wall {} (Δ {d_fwall:.2e}), x_cm {} (Δ {d_xcm:.2e}), v_cm {} (Δ {d_vcm:.2e})",
        d.f_wall, d.x_cm, d.v_cm
    );
    eprintln!(
        "{shear:?} {p:?}, {steps} steps: max |Δx| = {dx:.2e}, |Δv,Ω,q| = {dm:.2e}, |ΔE,P,S,L| = {de:.2e} (E0 = {e0:.3e}; \
         U_bend {:.2e}, U_axial {:.2e}, U_shear {:.2e}, U_contact {:.2e}, U_wall {:.2e})",
        d.u_bend, d.u_axial, d.u_shear, d.u_contact, d.u_wall
    );
    for (name, u) in
        [("bend", d.u_bend), ("axial", d.u_axial), ("shear", d.u_shear), ("contact", d.u_contact), ("wall", d.u_wall)]
    {
        assert!(u > 1e-6 * e0, "U_{name} = {u:e}: the term is not exercised");
    }
    let (tol_x, tol_e) = match p {
        // V7 f64: 1e-10 of the block size (6 spacings) and of E0. Both engines do the same f64
        // operations up to summation order (~1e-16 per step), amplified by the contact dynamics
        // over 500 steps to ~1e-13: far inside.
        Precision::F64 => (1e-10 * 6.0, 1e-10 * e0),
        // V7 f32: 1e-4 of the particle diameter (1) and of E0 after 200 steps. Round-off ≈ 6e-8
        // of |x| ≤ 6 per step, 200 steps: ≤ 1e-5 systematically; energies of 216 particles and
        // 180 bonds at ~1e-7 relative each: ~1e-5 · E0.
        Precision::F32 => (1e-4, 1e-4 * e0),
    };
    assert!(dx <= tol_x, "{shear:?} {p:?}: positions differ by {dx:e}");
    assert!(de <= tol_e, "{shear:?} {p:?}: energies/momenta differ by {de:e}");
    // x_cm and v_cm are mass-weighted means of positions and velocities, so they differ by
    // about as much as those do (plus the sums' round-off): the position bound, and the
    // velocity bound of V7 (1e-10 in f64; in f32 1e-4, ~200× the measured 5e-7). In f32 the host adds the position origin back
    // (the block's centre, ~(2.5, 2.5, 2.9)): a slip there would show by whole units.
    // F_wall (the bottom layer on the floor, ~500) to the relative bounds of the energies.
    let tol_v = if p == Precision::F64 { 1e-10 } else { 1e-4 };
    let tol_f = if p == Precision::F64 { 1e-10 } else { 1e-4 } * d.f_wall.length();
    assert!(d.f_wall.z > 100.0, "the floor carries the block: F_wall = {}", d.f_wall);
    assert!(d_xcm <= tol_x, "{shear:?} {p:?}: x_cm differs by {d_xcm:e}");
    assert!(d_vcm <= tol_v, "{shear:?} {p:?}: v_cm differs by {d_vcm:e}");
    assert!(d_fwall <= tol_f, "{shear:?} {p:?}: F_wall differs by {d_fwall:e}");
}

#[test]
fn distinct_stiffnesses_paper_shear_f64_match_cpu() {
    parity(ShearVariant::Paper, Precision::F64, 500);
}

#[test]
fn distinct_stiffnesses_objective_shear_f64_match_cpu() {
    parity(ShearVariant::Objective, Precision::F64, 500);
}

#[test]
fn distinct_stiffnesses_paper_shear_f32_match_cpu() {
    parity(ShearVariant::Paper, Precision::F32, 200);
}

#[test]
fn distinct_stiffnesses_objective_shear_f32_match_cpu() {
    parity(ShearVariant::Objective, Precision::F32, 200);
}

/// The bonds' reference attitudes, stored per particle (`q_ref`) where the bonds agree on each
/// particle's and per bond (`bond_q0`, FLAG_BOND_Q0) where not, against the CPU (which makes the
/// same choice, by `Model::reference_attitudes`). Three models of one lattice: (a) built from
/// the current state; (b) its particles turned since (as in a checkpoint: the bonds keep their
/// t = 0 attitudes, now unlike the particles'), so bending and shear start loaded; (c) as (b) with
/// one bond's reference at one end changed, so the bonds disagree there and all go per bond.
/// A GPU that took the current attitudes as references would start (b) and (c) unloaded: the
/// test asserts the three differ, so that such a mistake shows as a difference from the CPU.
#[test]
fn reference_attitudes_per_particle_and_per_bond_match_cpu() {
    let a = model(ShearVariant::Objective);
    let mut b = a.clone();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for q in &mut b.particles.q {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let angle = 0.02 + 0.08 * ((rng >> 11) as f64 / (1u64 << 53) as f64);
        let axis = DVec3::new(1.0, (rng >> 40) as f64 / (1u64 << 24) as f64, 0.5).normalize();
        *q = (glam::DQuat::from_axis_angle(axis, angle) * *q).normalize();
    }
    let mut c = b.clone();
    c.bonds[7].q_j0 = glam::DQuat::from_rotation_x(0.05) * c.bonds[7].q_j0;
    assert!(matches!(a.reference_attitudes(), Some(std::borrow::Cow::Borrowed(_))));
    let kept = b.reference_attitudes().expect("(b): the bonds agree on every particle");
    let bonded = |i: usize| b.bonds.iter().any(|x| x.i as usize == i || x.j as usize == i);
    for (i, q) in kept.iter().enumerate().filter(|(i, _)| bonded(*i)) {
        assert_eq!(*q, a.particles.q[i], "(b): particle {i}'s reference is its t = 0 attitude");
    }
    assert!(c.reference_attitudes().is_none(), "(c): bond 7 disagrees at its j end");

    let dt = 2e-4;
    let steps = 300;
    let mut u_bend = Vec::new();
    for (name, m) in [("a", &a), ("b", &b), ("c", &c)] {
        let mut g = gpu(m, Integrator::RrpNewmark, dt, Precision::F64);
        let mut k = cpu(m, Integrator::RrpNewmark, dt);
        let per_bond = g.buffer_parts().iter().find(|p| p.0 == "bond_q0").map_or(0, |p| p.1);
        // Per bond: two attitudes of four f64 per bond; otherwise a placeholder.
        let expect_per_bond = name == "c";
        assert_eq!(per_bond >= 64 * m.bonds.len() as u64, expect_per_bond, "({name}): bond_q0 holds {per_bond} B");
        u_bend.push(k.diagnostics().unwrap().u_bend);
        let e0 = k.diagnostics().unwrap().total().abs();
        let (dx, dm, de) = compare(&mut g, &mut k, steps);
        eprintln!("({name}) {steps} steps: |Δx| {dx:.2e}, |Δv,Ω,q| {dm:.2e}, |ΔE,P,S,L| {de:.2e}");
        // As V7 f64 in `parity`: the same f64 operations up to summation order.
        assert!(dx <= 1e-10 * 6.0, "({name}): positions differ by {dx:e}");
        assert!(dm <= 1e-10, "({name}): motions differ by {dm:e}");
        assert!(de <= 1e-10 * e0, "({name}): energies/momenta differ by {de:e}");
    }
    assert!(u_bend[1] > 10.0 * u_bend[0].max(1e-12), "(b) starts bent: U_bend {:?}", u_bend);
    assert!((u_bend[2] - u_bend[1]).abs() > 1e-6 * u_bend[1], "(c)'s changed reference shows: {:?}", u_bend);
}

/// The bonds' reference directions and lengths, formed on the GPU from the particles' reference
/// positions (`ref_pos`, `ref_cell`) where the model's particles are where its bonds were made,
/// and stored per bond (`bond_ref`, FLAG_BOND_REF) where not (a model whose particles moved on,
/// as a checkpoint's). Both against the CPU, in f64 and f32; and in f64 bit for bit against
/// each other from the same state: the GPU forms d0, L0 and d̂0 with the operations and order
/// of `Model::new`, so a run from the positions equals a run from the stored values.
#[test]
fn reference_positions_and_per_bond_references_agree() {
    let a = model(ShearVariant::Objective);
    assert!(a.reference_positions().is_some());
    let mut moved = a.clone();
    for (k, x) in moved.particles.x.iter_mut().enumerate() {
        *x += DVec3::new(0.01 * ((k % 7) as f64 - 3.0), 0.004 * ((k % 5) as f64 - 2.0), 0.0);
    }
    assert!(moved.reference_positions().is_none(), "moved particles: the bonds keep their own references");
    let dt = 2e-4;
    for (name, m) in [("formed", &a), ("stored", &moved)] {
        for p in [Precision::F64, Precision::F32] {
            let mut g = gpu(m, Integrator::RrpNewmark, dt, p);
            let stored = g.buffer_parts().iter().find(|x| x.0 == "bond_ref").map_or(0, |x| x.1);
            let rs = if p == Precision::F64 { 8 } else { 4 };
            assert_eq!(stored >= 4 * rs * m.bonds.len() as u64, name == "stored", "{name} {p:?}: bond_ref {stored} B");
            let mut c = cpu(m, Integrator::RrpNewmark, dt);
            let e0 = c.diagnostics().unwrap().total().abs();
            let (dx, _, de) = compare(&mut g, &mut c, 300);
            eprintln!("{name} {p:?}: |Δx| {dx:.2e}, |ΔE| {de:.2e} (E0 {e0:.3e})");
            // As in `parity` (V7 bounds).
            let (tol_x, tol_e) = if p == Precision::F64 { (1e-10 * 6.0, 1e-10 * e0) } else { (1e-4, 1e-4 * e0) };
            assert!(dx <= tol_x && de <= tol_e, "{name} {p:?}: |Δx| {dx:e}, |ΔE| {de:e}");
        }
    }
    // From the same state: the stored model's engine takes the formed one's initial state. Bit
    // for bit where the device computes f64 as IEEE 754 does (lavapipe); a device that fuses
    // a·b + c (NVIDIA) rounds the dot product of L0 differently, and there the runs must agree
    // to the V7 bound only.
    let ieee = rrpdem::gpu::arithmetic_on_device(Precision::F64).unwrap().ieee();
    let mut formed = gpu(&a, Integrator::RrpNewmark, dt, Precision::F64);
    let mut stored = gpu(&moved, Integrator::RrpNewmark, dt, Precision::F64);
    stored.load_state(&formed.save_state().unwrap()).unwrap();
    formed.advance(300).unwrap();
    stored.advance(300).unwrap();
    if ieee {
        assert!(bits(&mut formed) == bits(&mut stored), "formed and stored references differ in f64");
    } else {
        let (sf, ss) = (formed.snapshot().unwrap(), stored.snapshot().unwrap());
        let dx = max_position_diff(&sf, &ss);
        eprintln!("non-IEEE device: formed and stored references differ by {dx:.2e} in position after 300 steps");
        assert!(dx <= 1e-10 * 6.0, "formed and stored references differ by {dx:e}");
    }
}

/// `GpuOptions::per_bond_references` (bench `+bond-refs`): the references the particles give
/// stored per bond anyway, the bond kernel reading them in bond order. The same values: in f64
/// the same bits on a device that rounds as IEEE 754 does; in f32 within the V7 bound of the
/// default engine.
#[test]
fn references_stored_per_bond_on_request_give_the_same_run() {
    let m = model(ShearVariant::Paper);
    assert!(m.reference_positions().is_some() && m.reference_attitudes().is_some());
    let dt = 2e-4;
    let ieee = rrpdem::gpu::arithmetic_on_device(Precision::F64).unwrap().ieee();
    for p in [Precision::F64, Precision::F32] {
        let options = GpuOptions { per_bond_references: true, ..Default::default() };
        let mut per_bond = GpuEngine::with_options(&m, Integrator::RrpNewmark, dt, p, AdapterChoice::Any, options)
            .unwrap_or_else(|e| panic!("{e}"));
        let parts = per_bond.buffer_parts();
        for name in ["bond_ref", "bond_q0"] {
            let bytes = parts.iter().find(|x| x.0 == name).map_or(0, |x| x.1);
            assert!(bytes >= 16 * m.bonds.len() as u64, "{p:?}: {name} holds {bytes} B");
        }
        let mut formed = gpu(&m, Integrator::RrpNewmark, dt, p);
        per_bond.advance(300).unwrap();
        formed.advance(300).unwrap();
        if p == Precision::F64 && ieee {
            assert!(bits(&mut formed) == bits(&mut per_bond), "per-bond references change the f64 run");
        } else {
            let dx = max_position_diff(&formed.snapshot().unwrap(), &per_bond.snapshot().unwrap());
            let tol = if p == Precision::F64 { 1e-10 * 6.0 } else { 1e-4 };
            assert!(dx <= tol, "{p:?}: per-bond references move positions by {dx:e}");
        }
    }
}
