//! V4: every force and spatial moment equals minus the central finite difference of the total
//! energy, for random configurations with large rotations, overlaps and walls, both shear laws.

mod common;
use common::{Rng, scenario_from};
use glam::DVec3;
use rrpdem::engine::{CpuEngine, Engine};
use rrpdem::integrator::Integrator;
use rrpdem::model::Model;
use rrpdem::rrp;

const N: usize = 6;
const R: f64 = 0.5;

fn base_model(shear: &str) -> Model {
    // A chain with one extra bond, spaced 0.9 (overlapping neighbours) at t = 0.
    let particles: Vec<String> = (0..N).map(|i| format!(r#"{{"x": [{}, 0, 0]}}"#, 0.9 * i as f64)).collect();
    let json = format!(
        r#"{{"name": "fd", "dt": 1e-3, "t_end": 1, "shear": "{shear}",
            "particle": {{"mass": 1.3, "inertia": 0.7, "diameter": {d}}},
            "stiffness": {{"bending": 10, "axial": 200, "shear": 300, "contact": 2100, "wall": 1500}},
            "walls": [{{"point": [-0.35, 0, 0], "normal": [1, 0, 0]}}, {{"point": [0, -0.3, 0], "normal": [0.3, 1, 0.2]}}],
            "gravity": [0.5, 0, -9.81],
            "pendulum": {{"g": 2, "rho0": [0.1, 0.2, 0.3], "up": [0, 0.6, 0.8]}},
            "bodies": [{{"type": "particles", "particles": [{}], "bonds": [[0,1],[1,2],[2,3],[3,4],[4,5],[0,2]]}}]}}"#,
        particles.join(","),
        d = 2.0 * R
    );
    scenario_from(&json).build_model().unwrap()
}

/// Moves the particles and turns them by up to 170° from their bonding attitude, keeping every
/// contact clearly open or closed (|δ| > 1e-3) so the energy is smooth within the FD stencil.
fn perturb(model: &mut Model, rng: &mut Rng) {
    let base = model.particles.clone();
    loop {
        for i in 0..N {
            model.particles.x[i] = base.x[i] + rng.unit() * rng.range(0.0, 0.15);
            model.particles.q[i] = rng.rotation(170f64.to_radians()) * base.q[i];
        }
        let x = &model.particles.x;
        let mut ok = true;
        for i in 0..N {
            for j in i + 1..N {
                ok &= (1.0 - (x[i] - x[j]).length() / (2.0 * R)).abs() > 1e-3;
            }
            for w in &model.params.walls {
                ok &= (1.0 - (x[i] - w.point).dot(w.normal) / R).abs() > 1e-3;
            }
        }
        let overlaps = (0..N - 1).filter(|&i| (x[i] - x[i + 1]).length() < 2.0 * R).count();
        let on_wall =
            (0..N).filter(|&i| (x[i] - model.params.walls[0].point).dot(model.params.walls[0].normal) < R).count();
        if ok && overlaps > 0 && on_wall > 0 {
            return;
        }
    }
}

fn potential(model: &Model) -> f64 {
    // Velocities are zero, so the total energy is the potential.
    CpuEngine::new(model, Integrator::RrpNewmark, 1e-3).unwrap().diagnostics().unwrap().total()
}

fn check_gradients(shear: &str, seed: u64) {
    let mut model = base_model(shear);
    let mut rng = Rng(seed);
    for _ in 0..8 {
        perturb(&mut model, &mut rng);
        let exact = CpuEngine::new(&model, Integrator::RrpNewmark, 1e-3).unwrap().forces();
        let scale = exact.iter().map(|(f, m)| f.length().max(m.length())).fold(0.0, f64::max);
        // ε = 1e-6: truncation O(ε² U''') ~ 1e-12 relative; rounding ~ ε_mach·U/ε ~ 1e-8 absolute
        // for U ~ 100. Bound: 1e-6 relative to the vector, plus 1e-8 of the largest load.
        let eps = 1e-6;
        for (i, &(f, m)) in exact.iter().enumerate() {
            let mut fd_f = DVec3::ZERO;
            let mut fd_m = DVec3::ZERO;
            for c in 0..3 {
                let e = DVec3::AXES[c] * eps;
                let mut plus = model.clone();
                let mut minus = model.clone();
                plus.particles.x[i] += e;
                minus.particles.x[i] -= e;
                fd_f[c] = -(potential(&plus) - potential(&minus)) / (2.0 * eps);
                let mut plus = model.clone();
                let mut minus = model.clone();
                plus.particles.q[i] = rrp::quat_from_rrp(e) * model.particles.q[i];
                minus.particles.q[i] = rrp::quat_from_rrp(-e) * model.particles.q[i];
                fd_m[c] = -(potential(&plus) - potential(&minus)) / (2.0 * eps);
            }
            for (what, a, b) in [("force", f, fd_f), ("moment", m, fd_m)] {
                let err = (a - b).length();
                assert!(
                    err <= 1e-6 * a.length() + 1e-8 * scale,
                    "{shear} shear, particle {i} {what}: exact {a}, FD {b}, error {err:e}"
                );
            }
        }
    }
}

#[test]
fn gradients_match_finite_differences_paper_shear() {
    check_gradients("paper", 11);
}

#[test]
fn gradients_match_finite_differences_objective_shear() {
    check_gradients("objective", 12);
}
