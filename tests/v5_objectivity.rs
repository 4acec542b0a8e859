//! V5: objectivity of the binder with `objective` shear (forces rotate with the body, energies
//! do not change, bond torques sum to zero) and exact conservation of P and L on a free torus;
//! with `paper` shear, P and S = Σ J Ω are exact and L is not.

mod common;
use common::{Rng, engines, scenario_from};
use glam::{DQuat, DVec3};
use rrpdem::engine::{CpuEngine, Engine};
use rrpdem::integrator::Integrator;
use rrpdem::model::Model;

/// The paper's ring (80 spheres, D_t = 3) without walls, bonded at rest, then given random
/// displacements, attitudes, velocities and spins: a tumbling, vibrating free torus.
fn free_torus(shear: &str, seed: u64) -> Model {
    let json = format!(
        r#"{{"name": "free", "dt": 1e-3, "t_end": 1, "shear": "{shear}",
            "particle": {{"mass": 1, "inertia": 1}},
            "stiffness": {{"bending": 10, "axial": 200, "shear": 200, "contact": 2100}},
            "bodies": [{{"type": "torus_ring", "n": 80, "torus_diameter": 3}}]}}"#
    );
    let mut model = scenario_from(&json).build_model().unwrap();
    let mut rng = Rng(seed);
    let p = &mut model.particles;
    for i in 0..p.len() {
        p.x[i] += rng.unit() * 0.01;
        p.q[i] = rng.rotation(0.3) * p.q[i];
        p.v[i] = rng.unit() * rng.range(0.0, 0.5);
        p.w[i] = rng.unit() * rng.range(0.0, 2.0);
    }
    model
}

#[test]
fn objective_binder_rotates_with_the_body() {
    let model = free_torus("objective", 1);
    let base = CpuEngine::new(&model, Integrator::RrpNewmark, 1e-3).unwrap();
    let (d0, f0) = (base.clone_diagnostics(), base.forces());
    let mut rng = Rng(2);
    for _ in 0..5 {
        let rot: DQuat = rng.rotation(std::f64::consts::PI);
        let mut turned = model.clone();
        let p = &mut turned.particles;
        for i in 0..p.len() {
            // Rotate the current state about the origin; the bonds keep their reference data.
            p.x[i] = rot * p.x[i];
            p.v[i] = rot * p.v[i];
            p.w[i] = rot * p.w[i];
            p.q[i] = rot * p.q[i];
        }
        let e = CpuEngine::new(&turned, Integrator::RrpNewmark, 1e-3).unwrap();
        let d = e.clone_diagnostics();
        // Energies are sums of O(1) terms computed from rotated data: equal to ~100 ε.
        for (a, b) in d0.components().iter().zip(d.components()) {
            assert!((a - b).abs() <= 1e-13 * (1.0 + a.abs()), "energy changed: {a} → {b}");
        }
        let scale = f0.iter().map(|(f, m)| f.length().max(m.length())).fold(0.0, f64::max);
        for ((f, m), (fr, mr)) in f0.iter().zip(e.forces()) {
            // Forces ~ 10 with relative rounding ~ 1e-15 per operation, ~100 operations.
            assert!((rot * *f - fr).length() <= 1e-12 * scale, "force does not rotate with the body");
            assert!((rot * *m - mr).length() <= 1e-12 * scale, "moment does not rotate with the body");
        }
    }
}

#[test]
fn objective_bond_torques_sum_to_zero_and_paper_ones_do_not() {
    for (shear, zero) in [("objective", true), ("paper", false)] {
        let model = free_torus(shear, 3);
        let e = CpuEngine::new(&model, Integrator::RrpNewmark, 1e-3).unwrap();
        let forces = e.forces();
        let torque: DVec3 = forces.iter().zip(&model.particles.x).map(|((f, m), x)| x.cross(*f) + *m).sum();
        let force: DVec3 = forces.iter().map(|(f, _)| *f).sum();
        let scale: f64 =
            forces.iter().zip(&model.particles.x).map(|((f, m), x)| x.cross(*f).length() + m.length()).sum();
        // 80 particles × O(1) terms: a sum of pairwise-cancelling terms leaves ~1e-15 of the scale.
        assert!(force.length() <= 1e-14 * scale, "{shear}: net force {force}");
        if zero {
            assert!(torque.length() <= 1e-14 * scale, "{shear}: net torque {torque} (scale {scale})");
        } else {
            assert!(torque.length() > 1e-6 * scale, "{shear}: net torque {torque} should not vanish");
        }
    }
}

/// Runs 10⁴ steps and returns the largest drift of P, S and L and the momentum scale.
fn drifts(model: &Model, e: &mut dyn Engine) -> (f64, f64, f64, f64) {
    let d0 = e.diagnostics().unwrap();
    let (mut dp, mut ds, mut dl) = (0.0f64, 0.0f64, 0.0f64);
    for _ in 0..100 {
        e.advance(100).unwrap();
        let d = e.diagnostics().unwrap();
        dp = dp.max((d.p - d0.p).length());
        ds = ds.max((d.s - d0.s).length());
        dl = dl.max((d.l - d0.l).length());
    }
    let p = &model.particles;
    let scale: f64 = (0..p.len())
        .map(|i| p.mass[i] * p.v[i].length() * (1.0 + p.x[i].length()) + p.inertia[i] * p.w[i].length())
        .sum();
    (dp, ds, dl, scale)
}

#[test]
fn free_torus_conserves_p_and_l_with_objective_shear() {
    let model = free_torus("objective", 4);
    for (name, mut e) in engines(&model, Integrator::RrpNewmark, 1e-3) {
        let (dp, _, dl, scale) = drifts(&model, e.as_mut());
        // Each step adds ≤ ~80 roundings of size ε·scale/80 to P and L: after 1e4 steps the
        // linear worst case is 1e4 · 2.2e-16 · scale ≈ 2e-12 · scale.
        assert!(dp <= 2e-12 * scale && dl <= 2e-12 * scale, "{name}: P drift {dp:e}, L drift {dl:e}, scale {scale}");
    }
}

#[test]
fn free_torus_conserves_p_and_s_but_not_l_with_paper_shear() {
    let model = free_torus("paper", 5);
    for (name, mut e) in engines(&model, Integrator::RrpNewmark, 1e-3) {
        let (dp, ds, dl, scale) = drifts(&model, e.as_mut());
        assert!(dp <= 2e-12 * scale && ds <= 2e-12 * scale, "{name}: P drift {dp:e}, S drift {ds:e}");
        assert!(dl > 1e-6 * scale, "{name}: L drift {dl:e} — the paper's shear should not conserve L");
    }
}
