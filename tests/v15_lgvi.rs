//! V15 (MODEL §12): rigid clumps and the Lie group variational integrator on the CPU engine —
//! `lgvi` on spheres is `rrp-exact`; the free rigid body's flip with `L` exact and the energy
//! bounded; the 3-D pendulum with a full tensor second order; the full body problem (two
//! dumbbells under mutual gravitation) with its momenta exact, energy bounded and trajectories
//! converging; a clump's loads the gradient of its energy; clumps' state saved and resumed bit for
//! bit; bad input refused by field.

mod common;

use glam::{DQuat, DVec3};
use rrpdem::engine::{CpuEngine, Engine, Precision};
use rrpdem::gpu::{AdapterChoice, GpuEngine};
use rrpdem::integrator::Integrator;
use rrpdem::model::Model;
use rrpdem::scenario::Scenario;
use std::path::Path;

fn scenario_with(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name);
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    Scenario::from_json(&v.to_string(), &path).unwrap_or_else(|e| panic!("{e}"))
}

fn max_abs_diff(a: &[rrpdem::integrator::Kinematics], b: &[rrpdem::integrator::Kinematics]) -> f64 {
    let qd = |p: DQuat, q: DQuat| (p - q * p.dot(q).signum()).length();
    a.iter()
        .zip(b)
        .map(|(x, y)| (x.x - y.x).length().max((x.v - y.v).length()).max(qd(x.q, y.q)).max((x.w - y.w).length()))
        .fold(0.0, f64::max)
}

/// `lgvi` on spheres takes `rrp-exact`'s steps (MODEL §12: for `J = jI` its root is map (23)'s
/// increment), to round-off: the pendulum and the paper's torus impact, whose contacts and
/// bonds act on every sphere.
#[test]
fn lgvi_on_spheres_is_rrp_exact() {
    for (name, steps, tol) in [
        // 100 smooth steps: each step's rounding (~1e-16) adds up, ~1e-14 at most.
        ("pendulum.json", 100u64, 1e-13),
        // 1000 steps of the impact (t = 1): the two roundings part by ~1e-16 per step, ~1e-13
        // over the run, and differences grow about as e^{5t} (MODEL §5), ×150 by t = 1: ~2e-11
        // (measured 1.8e-11).
        ("torus_impact.json", 1000, 1e-10),
    ] {
        let s = common::scenario(name);
        let model = s.build_model().unwrap();
        let mut a = CpuEngine::new(&model, Integrator::Lgvi, s.dt).unwrap();
        let mut b = CpuEngine::new(&model, Integrator::RrpExact, s.dt).unwrap();
        a.advance(steps).unwrap();
        b.advance(steps).unwrap();
        let d = max_abs_diff(&a.snapshot().unwrap(), &b.snapshot().unwrap());
        assert!(d > 0.0 || name == "pendulum.json", "{name}: the same bits: is lgvi running rrp-exact's code?");
        assert!(d < tol, "{name}: lgvi and rrp-exact differ by {d:e} after {steps} steps");
        let (ea, eb) = (a.diagnostics().unwrap().total(), b.diagnostics().unwrap().total());
        assert!((ea - eb).abs() < tol * ea.abs().max(1.0), "{name}: E {ea} vs {eb}");
    }
}

/// The body-frame angular velocity `Rᵀ Ω` of clump 0.
fn body_omega(e: &mut CpuEngine) -> DVec3 {
    let c = e.clumps().unwrap()[0];
    c.q.conjugate() * c.w
}

/// The free rigid body spun near its intermediate axis (scenarios/free_rigid_body.json): it
/// flips every ~19.6 time units; `L = R Π` is exact, `|q| = 1` (so `RᵀR = I`) to round-off over
/// 10⁶ steps, and so is the energy (the discrete free rigid body of seed 002 keeps
/// `½ Π·J⁻¹Π` as well as `|Π|`: measured ~1e-14 at every step size); the trajectory is second
/// order.
#[test]
fn free_rigid_body_flips_with_l_exact_over_a_million_steps() {
    let s = common::scenario("free_rigid_body.json");
    let model = s.build_model().unwrap();
    let mut e = CpuEngine::new(&model, Integrator::Lgvi, s.dt).unwrap();
    let d0 = e.diagnostics().unwrap();
    let (mut flips, mut sign) = (0, body_omega(&mut e).y.signum());
    let (mut max_l, mut max_q, mut err_first, mut err_last) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let chunks = 10_000u64; // 10⁶ steps of 0.01: t = 10⁴, ~500 flips
    for k in 0..chunks {
        e.advance(100).unwrap();
        let d = e.diagnostics().unwrap();
        max_l = max_l.max((d.l - d0.l).length() / d0.l.length());
        let q = e.clumps().unwrap()[0].q;
        max_q = max_q.max((q.length() - 1.0).abs());
        let err = (d.total() - d0.total()).abs() / d0.total();
        if k < chunks / 10 {
            err_first = err_first.max(err);
        } else if k >= chunks - chunks / 10 {
            err_last = err_last.max(err);
        }
        let sg = body_omega(&mut e).y.signum();
        if sg != sign {
            flips += 1;
            sign = sg;
        }
    }
    // A flip reverses Ω_y every ~19.6 time units (scenario run: at t = 11.0, 30.5, 50.1, …): about
    // 10⁴ / 19.6 ≈ 510 over the run.
    assert!((480..=540).contains(&flips), "{flips} sign changes of the intermediate axis' rate");
    // L exact: the rounding of 10⁶ updates of a unit vector, ~1e-16 each, random-walks to ~1e-13.
    assert!(max_l < 1e-12, "L drifted by {max_l:e} of |L|");
    assert!(max_q < 1e-15, "|q| − 1 reached {max_q:e}");
    eprintln!("free body: L {max_l:e}, |q|-1 {max_q:e}, energy first {err_first:e} last {err_last:e}");
    // Exact to rounding: ~1e-16 per step, a random walk to ~1e-13 over 10⁶ steps.
    assert!(err_first.max(err_last) < 1e-12, "energy error {err_first:e} at first, {err_last:e} at the end");
    // Second order: the body's angular velocity at t = 10 (one flip done) against h/16.
    let run = |h: f64| {
        let mut e = CpuEngine::new(&model, Integrator::Lgvi, h).unwrap();
        e.advance((10.0 / h).round() as u64).unwrap();
        body_omega(&mut e)
    };
    let reference = run(0.04 / 16.0);
    let errs: Vec<f64> = [0.04, 0.02, 0.01].iter().map(|&h| (run(h) - reference).length()).collect();
    for w in errs.windows(2) {
        let r = w[0] / w[1];
        // Second order, the reference's own error (1/256 of the coarsest) aside.
        assert!((3.3..4.8).contains(&r), "errors of Ω at t = 10: {errs:?}: ratio {r}");
    }
}

/// The 3-D pendulum with `J = diag(1, 2, 3)` (scenarios/pendulum_rigid.json): the energy error is
/// second order, and at h = 0.05 over T = 100 it is the seed report's figure, about 1.9e-3.
#[test]
fn pendulum_with_a_full_tensor_is_second_order() {
    let s = common::scenario("pendulum_rigid.json");
    let model = s.build_model().unwrap();
    let e0 = 0.7471067811865475;
    let errs: Vec<f64> = [0.05, 0.025, 0.0125]
        .iter()
        .map(|&h| {
            let mut e = CpuEngine::new(&model, Integrator::Lgvi, h).unwrap();
            assert!((e.diagnostics().unwrap().total() - e0).abs() < 1e-15, "E0 is the paper pendulum's");
            let mut m = 0.0f64;
            for _ in 0..(100.0 / h).round() as u64 {
                e.advance(1).unwrap();
                m = m.max((e.diagnostics().unwrap().total() - e0).abs());
            }
            m
        })
        .collect();
    assert!((1.7e-3..2.1e-3).contains(&errs[0]), "max |E − E0| at h = 0.05: {:e} (seed: about 1.9e-3)", errs[0]);
    for w in errs.windows(2) {
        let r = w[0] / w[1];
        assert!((3.5..4.6).contains(&r), "energy errors {errs:?}: ratio {r}");
    }
}

/// The full body problem (scenarios/full_body.json): P and L exact, the energy bounded over 10⁵
/// steps (three orbits and more), second order, and the trajectories converge to a fine-step
/// reference at second order.
#[test]
fn full_body_problem_keeps_its_momenta_and_converges() {
    let s = common::scenario("full_body.json");
    let model = s.build_model().unwrap();
    assert_eq!(model.clumps.len(), 2);
    let mut e = CpuEngine::new(&model, Integrator::Lgvi, s.dt).unwrap();
    let d0 = e.diagnostics().unwrap();
    assert!(d0.p.length() < 1e-15, "total momentum zero: {}", d0.p);
    let (mut max_p, mut max_l, mut errs) = (0.0f64, 0.0f64, Vec::new());
    for _ in 0..100 {
        e.advance(1000).unwrap();
        let d = e.diagnostics().unwrap();
        max_p = max_p.max(d.p.length());
        max_l = max_l.max((d.l - d0.l).length() / d0.l.length());
        errs.push((d.total() - d0.total()).abs() / d0.total().abs());
    }
    // Sums of four momenta of ~0.5: rounding ~1e-16 per step, a walk to ~1e-14 over 10⁵ steps.
    assert!(max_p < 1e-13, "P drifted to {max_p:e}");
    assert!(max_l < 1e-12, "L drifted by {max_l:e} of |L|");
    let first = errs[..10].iter().copied().fold(0.0, f64::max);
    let last = errs[90..].iter().copied().fold(0.0, f64::max);
    assert!(last < 2.0 * first + 1e-12, "energy error {first:e} in the first tenth, {last:e} in the last");
    assert!(first < 1e-5, "energy error {first:e} at h = 0.01");
    // Convergence at t = 10: positions of the four spheres against h/16.
    let run = |h: f64| {
        let mut e = CpuEngine::new(&model, Integrator::Lgvi, h).unwrap();
        e.advance((10.0 / h).round() as u64).unwrap();
        e.snapshot().unwrap()
    };
    let reference = run(0.04 / 16.0);
    let err: Vec<f64> = [0.04, 0.02, 0.01].iter().map(|&h| max_abs_diff(&run(h), &reference)).collect();
    for w in err.windows(2) {
        let r = w[0] / w[1];
        // Second order, the reference's own error (1/16² of the coarsest) aside.
        assert!((3.3..4.8).contains(&r), "trajectory errors {err:?}: ratio {r}");
    }
}

/// The potential energy of `model` with its clump 0 moved to `(x, q)` (its spheres placed).
fn clump_energy(model: &Model, x: DVec3, q: DQuat) -> f64 {
    let mut m = model.clone();
    let c = &mut m.clumps[0];
    (c.x, c.q) = (x, q);
    for (k, (px, pq)) in model.clumps[0].place(x, q).enumerate() {
        let i = model.clumps[0].members.start as usize + k;
        (m.particles.x[i], m.particles.q[i]) = (px, pq);
    }
    let mut e = CpuEngine::new(&m, Integrator::Lgvi, 1e-3).unwrap();
    let d = e.diagnostics().unwrap();
    d.total() - d.e_trans - d.e_rot
}

/// A clump pressed into a wall and into a bonded pair of free spheres: its load is the exact
/// gradient of the energy in its position and attitude (V4 style): `F = −∂U/∂x`,
/// `RM = −∂U/∂θ` for `R → exp(S(δθ)) R`, which the moments `(R ρ_p) × F_p` make.
#[test]
fn a_clumps_loads_are_the_gradient_of_its_energy() {
    let s = scenario_with("clump_impact.json", |v| {
        // Into the wall (x = 0) and turned, and a bonded pair of free spheres pressing on it.
        v["bodies"][0]["velocity"] = serde_json::json!([0, 0, 0]);
        v["bodies"][0]["angular_velocity"] = serde_json::json!([0, 0, 0]);
        for sph in v["bodies"][0]["spheres"].as_array_mut().unwrap() {
            sph["x"][0] = serde_json::json!(sph["x"][0].as_f64().unwrap() - 0.75);
        }
        v["stiffness"] = serde_json::json!({"contact": 2100, "wall": 900, "axial": 200, "bending": 10, "shear": 50});
        v["bodies"].as_array_mut().unwrap().push(serde_json::json!({"type": "particles",
            "particles": [{"x": [0.9, 0.7, 0.1], "mass": 0.3}, {"x": [1.3, 1.3, 0.3], "mass": 0.4}], "bonds": [[0, 1]]}));
    });
    let model = s.build_model().unwrap();
    let c = &model.clumps[0];
    // Turned out of its reference, so that R ρ_p is not ρ_p.
    let q0 = DQuat::from_xyzw(0.1, -0.2, 0.15, 1.0).normalize();
    let x0 = c.x;
    let mut m = model.clone();
    m.clumps[0].q = q0;
    for (k, (px, pq)) in c.place(x0, q0).enumerate() {
        (m.particles.x[k], m.particles.q[k]) = (px, pq);
    }
    let e = CpuEngine::new(&m, Integrator::Lgvi, 1e-3).unwrap();
    let (f, rm) = e.body_loads()[0];
    assert!(f.length() > 1.0 && rm.length() > 0.1, "the clump is loaded: F = {f}, RM = {rm}");
    let eps = 1e-6;
    for a in 0..3 {
        let mut d = DVec3::ZERO;
        d[a] = eps;
        let fd_f = -(clump_energy(&m, x0 + d, q0) - clump_energy(&m, x0 - d, q0)) / (2.0 * eps);
        let turn = |s: f64| rrpdem::rrp::quat_from_rrp(d * s) * q0;
        // A turn by θ about d is the RRP α = 2 tan(θ/2) d̂: to second order α = θ.
        let fd_m = -(clump_energy(&m, x0, turn(1.0)) - clump_energy(&m, x0, turn(-1.0))) / (2.0 * eps);
        // Central differences: truncation ~ eps² U''' (~1e-9 here), rounding ~ 1e-16 U / eps.
        let scale = f.length().max(rm.length());
        assert!((fd_f - f[a]).abs() < 1e-6 * scale, "F[{a}] = {} vs −∂U/∂x = {fd_f}", f[a]);
        assert!((fd_m - rm[a]).abs() < 1e-6 * scale, "RM[{a}] = {} vs −∂U/∂θ = {fd_m}", rm[a]);
    }
}

/// The spheres of one clump overlap without a contact between them; the clump bounces off the
/// wall with `P` changed only along the normal and the energy within the guard.
#[test]
fn a_clumps_own_spheres_never_touch() {
    let s = common::scenario("clump_impact.json");
    let model = s.build_model().unwrap();
    let r = model.particles.radius[0];
    assert!((model.particles.x[0] - model.particles.x[1]).length() < 2.0 * r, "the scenario's spheres overlap");
    let mut e = CpuEngine::new(&model, Integrator::Lgvi, s.dt).unwrap();
    assert_eq!(e.diagnostics().unwrap().u_contact, 0.0);
    e.advance(s.total_steps()).unwrap();
    let d = e.diagnostics().unwrap();
    assert_eq!(d.u_contact, 0.0);
    let c = e.clumps().unwrap()[0];
    assert!(c.v.x > 0.5, "the clump bounced: v = {}", c.v);
    // The wall pushes along x only: P_y, P_z stay at 0 to round-off.
    assert!(d.p.y.abs() < 1e-14 && d.p.z.abs() < 1e-14, "P = {}", d.p);
}

/// A saved `lgvi` state (bodies included) loads into a fresh engine that goes on bit for bit;
/// a rollback returns to the advance's start.
#[test]
fn lgvi_state_saves_resumes_and_rolls_back_bit_for_bit() {
    let s = common::scenario("full_body.json");
    let model = s.build_model().unwrap();
    let mut a = CpuEngine::new(&model, Integrator::Lgvi, s.dt).unwrap();
    a.advance(300).unwrap();
    let saved = a.save_state().unwrap();
    a.advance(300).unwrap();
    let mut b = CpuEngine::new(&model, Integrator::Lgvi, s.dt).unwrap();
    b.load_state(&saved).unwrap();
    b.advance(300).unwrap();
    let bits = |e: &mut CpuEngine| e.save_state().unwrap().data;
    assert_eq!(bits(&mut a), bits(&mut b), "resumed run differs");
    assert_eq!(a.clumps().unwrap(), b.clumps().unwrap());
    let before = bits(&mut a);
    a.advance(50).unwrap();
    a.rollback().unwrap();
    assert_eq!(bits(&mut a), before, "rollback");
    // A state without the bodies is refused with a message.
    let mut short = saved.clone();
    short.data.truncate(short.data.len() - 8);
    let err = b.load_state(&short).unwrap_err().to_string();
    assert!(err.contains("body states"), "{err}");
}

/// A sphere spinning at h|Ω| > 1 has no root: an error naming the particle and the step.
#[test]
fn a_rotation_without_a_root_is_an_error_naming_the_body() {
    let s = scenario_with("pendulum.json", |v| {
        v["integrator"] = serde_json::json!("lgvi");
        v["bodies"][0]["omega"] = serde_json::json!([20.0, 0, 0]);
        v["pendulum"]["g"] = serde_json::json!(0.0);
    });
    let model = s.build_model().unwrap();
    let mut e = CpuEngine::new(&model, Integrator::Lgvi, 0.1).unwrap();
    let err = e.advance(5).unwrap_err().to_string();
    assert!(err.contains("particle 0") && err.contains("step 0") && err.contains("reduce the time step"), "{err}");
}

/// The GPU engine refuses `lgvi`, clumps and gravitation with a message naming the CPU engine.
#[test]
fn the_gpu_engine_refuses_clumps_and_lgvi_by_name() {
    let s = common::scenario("full_body.json");
    let model = s.build_model().unwrap();
    for integ in [Integrator::Lgvi, Integrator::RrpNewmark] {
        let err = GpuEngine::new(&model, integ, s.dt, Precision::F64, AdapterChoice::Any).err().expect("refused");
        let msg = err.to_string();
        assert!(msg.contains("CPU engine") && msg.contains("MODEL §12"), "{msg}");
    }
}

/// Bad input: each field of MODEL §12 refused with its name.
#[test]
fn bad_rigid_body_input_names_the_field() {
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "full_body.json",
            Box::new(|v| v["bodies"][1]["inertia"] = serde_json::json!([[1, 0, 0], [0, 2, 0], [0, 0, -3]])),
            "bodies[1].inertia",
        ),
        (
            "full_body.json",
            Box::new(|v| v["bodies"][0]["inertia"] = serde_json::json!([[1, 0.5, 0], [0, 2, 0], [0, 0, 3]])),
            "bodies[0].inertia",
        ),
        ("full_body.json", Box::new(|v| v["integrator"] = serde_json::json!("rrp-newmark")), "integrator"),
        ("full_body.json", Box::new(|v| v["gravitation"]["G"] = serde_json::json!(-1.0)), "gravitation.G"),
        ("full_body.json", Box::new(|v| v["bodies"][0]["mass"] = serde_json::json!(0.0)), "bodies[0].mass"),
        (
            "full_body.json",
            Box::new(|v| v["bodies"][1]["spheres"][1]["diameter"] = serde_json::json!(-0.2)),
            "bodies[1].spheres[1].diameter",
        ),
        ("full_body.json", Box::new(|v| v["bodies"][0]["spheres"] = serde_json::json!([])), "bodies[0].spheres"),
        (
            "pendulum_rigid.json",
            Box::new(|v| v["bodies"][0]["inertia"] = serde_json::json!([[1, 0, 0], [0, 0, 0], [0, 0, 3]])),
            "bodies[0].inertia",
        ),
        ("clump_impact.json", Box::new(|v| v["damping"] = serde_json::json!({"restitution": 0.5})), "integrator"),
        // A centre or mass other than the spheres' needs the whole body (mass and inertia).
        (
            "clump_impact.json",
            Box::new(|v| v["bodies"][0]["center"] = serde_json::json!([1.0, 0.1, 0])),
            "bodies[0].center",
        ),
        ("clump_impact.json", Box::new(|v| v["bodies"][0]["mass"] = serde_json::json!(2.0)), "bodies[0].mass"),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    for (file, edit, field) in cases {
        let path = dir.join(file);
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut v);
        let err = Scenario::from_json(&v.to_string(), &path).and_then(|s| s.build_model().map(|_| ()));
        let msg = err.expect_err("refused").to_string();
        assert!(msg.contains(field), "expected the field {field}: {msg}");
        assert!(!msg.contains("  "), "stray spaces: {msg}");
    }
    // Mutual gravitation over too many particles.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("free_rigid_body.json")).unwrap()).unwrap();
    v["gravitation"] = serde_json::json!({"G": 1});
    v["bodies"] = serde_json::json!([{"type": "torus_ring", "n": rrpdem::scenario::MAX_GRAVITATION_PARTICLES + 1,
        "torus_diameter": 3000.0, "bonded": false}]);
    v["integrator"] = serde_json::json!("rrp-newmark");
    let msg = Scenario::from_json(&v.to_string(), &dir.join("x.json"))
        .and_then(|s| s.build_model().map(|_| ()))
        .expect_err("refused")
        .to_string();
    assert!(msg.contains("gravitation") && msg.contains("every pair"), "{msg}");
    // The implicit schemes take no gravitation: refused, not dropped.
    let s = scenario_with("four_mass.json", |v| v["gravitation"] = serde_json::json!({"G": 1}));
    let err = CpuEngine::new(&s.build_model().unwrap(), Integrator::Em, s.dt).err().expect("refused").to_string();
    assert!(err.contains("gravitation"), "{err}");
    // The whole body given, a centre elsewhere is taken.
    let s = scenario_with("clump_impact.json", |v| {
        v["bodies"][0]["center"] = serde_json::json!([1.2, 0.1, 0]);
        v["bodies"][0]["mass"] = serde_json::json!(1.5);
        v["bodies"][0]["inertia"] = serde_json::json!([[0.3, 0, 0], [0, 0.3, 0], [0, 0, 0.2]]);
    });
    let m = s.build_model().unwrap();
    assert_eq!((m.clumps[0].x, m.clumps[0].mass), (DVec3::new(1.2, 0.1, 0.0), 1.5));
}

/// The stability estimate knows that a clump's own spheres never touch: their overlap does not
/// set the step (clump_impact's spheres overlap by 15 % of their diameter; with a contact ten
/// times stiffer that overlap would be the stiffest mode of free spheres).
#[test]
fn a_clumps_own_overlaps_do_not_limit_the_step() {
    let s = scenario_with("clump_impact.json", |v| v["stiffness"]["contact"] = serde_json::json!(21000));
    let model = s.build_model().unwrap();
    let est = rrpdem::stability::estimate(&model);
    assert!(!est.limiting.contains("contact of particles"), "{}", est.limiting);
    // The same spheres as free particles: their overlap is the stiffest mode.
    let mut loose = model.clone();
    loose.clumps.clear();
    let free = rrpdem::stability::estimate(&loose);
    assert!(free.limiting.contains("contact of particles 0 and"), "{}", free.limiting);
    assert!(free.h_max < est.h_max);
}

fn rrpdem(args: &[&str]) -> std::process::Output {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rrpdem"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(o.status.success(), "rrpdem {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

/// Through the CLI: a clump run resumed from its checkpoint writes the uninterrupted run's
/// `series.csv`, `clumps.csv` and `final_state.csv` byte for byte; `converge` studies `lgvi` on a
/// model with clumps and `compare --against` sets `lgvi` beside `rrp-exact`.
#[test]
fn clump_runs_resume_bit_for_bit_and_converge_and_compare_take_lgvi() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    rrpdem(&["run", "scenarios/full_body.json", "--t-end", "20", "--out", a]);
    rrpdem(&["run", "scenarios/full_body.json", "--t-end", "10", "--checkpoint-every", "500", "--out", b]);
    rrpdem(&["resume", b, "--t-end", "20"]);
    for f in ["series.csv", "clumps.csv", "final_state.csv", "fragments.csv"] {
        let read = |d: &str| std::fs::read(std::path::Path::new(d).join(f)).unwrap();
        assert!(read(a) == read(b), "{f} differs between the resumed and the uninterrupted run");
    }
    let clumps = std::fs::read_to_string(std::path::Path::new(a).join("clumps.csv")).unwrap();
    // summary.json's final clumps are the last rows of clumps.csv.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(std::path::Path::new(a).join("summary.json")).unwrap()).unwrap();
    let last: Vec<&str> = clumps.lines().last().unwrap().split(',').collect();
    let final_x = summary["clumps"][1]["x"][0].as_f64().unwrap();
    assert_eq!(final_x, last[3].parse::<f64>().unwrap(), "summary.json's clump 1 vs clumps.csv's last row");
    assert_eq!(summary["clumps"].as_array().unwrap().len(), 2);
    // Two clumps, rows at t = 0, 0.1, …, 20.
    assert_eq!(clumps.lines().count(), 1 + 2 * 201, "{}", &clumps[..200]);
    let plots = dir.path().join("plots");
    rrpdem(&["plot", a, "--out", plots.to_str().unwrap()]);
    assert!(plots.join("clumps.png").is_file());

    let conv = dir.path().join("conv");
    let o = rrpdem(&[
        "converge",
        "scenarios/free_rigid_body.json",
        "--levels",
        "3",
        "--t-end",
        "5",
        "--ref-factor",
        "16",
        "--out",
        conv.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(conv.join("converge.csv")).unwrap();
    assert!(text.lines().skip(1).all(|l| l.contains("lgvi")), "{text}");
    assert_eq!(text.lines().count(), 4, "{text}\n{}", String::from_utf8_lossy(&o.stdout));
    let o = rrpdem(&["compare", "scenarios/pendulum.json", "--integrator", "lgvi", "--against", "rrp-exact"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("lgvi") && out.contains("rrp-exact"), "{out}");
}

#[test]
fn a_clumps_spheres_may_share_a_place_and_are_named_as_spheres() {
    // A clump's own spheres never touch, so two at one place are a valid clump (before: refused
    // as coincident particles, and named `bodies[0].particles[0]`, a field a clump has not).
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/clump_impact.json")).unwrap();
    let with = |second: &str| {
        let t = text.replacen("[1.5, -0.3, -0.3]", second, 1);
        assert_ne!(t, text);
        Scenario::from_json(&t, Path::new("clump.json")).unwrap()
    };
    let model = with("[1.5, 0.3, 0.3]").build_model().expect("a clump with two spheres at one place");
    assert_eq!(model.particles.x[0], model.particles.x[1]);
    // A clump sphere behind the wall is named in the clump's own terms.
    let e = with("[-0.9, 0.3, 0.3]").build_model().unwrap_err().to_string();
    assert!(e.contains("field `bodies[0].spheres[1]`") && e.contains("overlaps walls[0]"), "{e}");
    // Free particles at one place are still refused.
    let json = r#"{"name": "two", "dt": 1e-3, "t_end": 1, "particle": {"mass": 1, "inertia": 1, "diameter": 1},
        "bodies": [{"type": "particles", "particles": [{"x": [0, 0, 0]}, {"x": [0, 0, 0]}]}]}"#;
    let e = Scenario::from_json(json, Path::new("two.json")).unwrap().build_model().unwrap_err().to_string();
    assert!(e.contains("bodies[0].particles[0]") && e.contains("same position"), "{e}");
}

#[test]
fn mutual_gravitation_bounds_the_stable_step() {
    // Two free spheres (m 1 and 3, 2 apart) under G = 0.5, nothing else stiff: the estimate's
    // gravitational row at the lighter one, 2 G (m_q + sqrt(m_p m_q)) / r³, is the limit. Before,
    // gravitation had no mode: G = 1e308 started a run that failed at its first step with "spin
    // too fast"; now it is refused before it starts, naming the mode.
    let json = |g: &str| {
        format!(
            r#"{{"name": "g", "integrator": "rrp-newmark", "dt": 1e-3, "t_end": 1, "particle": {{"mass": 1, "inertia": 1, "diameter": 0.5}},
            "gravitation": {{"G": {g}}},
            "bodies": [{{"type": "particles", "particles": [{{"x": [0, 0, 0]}}, {{"x": [2, 0, 0], "mass": 3}}]}}]}}"#
        )
    };
    let model = Scenario::from_json(&json("0.5"), Path::new("g.json")).unwrap().build_model().unwrap();
    let e = rrpdem::stability::estimate(&model);
    let omega2 = 2.0 * 0.5 * (3.0 + 3f64.sqrt()) / 8.0;
    assert!((e.h_max - 2.0 / omega2.sqrt()).abs() <= 1e-12 * e.h_max, "{} vs {}", e.h_max, 2.0 / omega2.sqrt());
    assert!(e.limiting.contains("mutual gravitation at particle 0"), "{}", e.limiting);
    let model = Scenario::from_json(&json("1e308"), Path::new("g.json")).unwrap().build_model().unwrap();
    let e = rrpdem::stability::estimate(&model);
    assert!(e.h_max < 1e-100 && e.limiting.contains("gravitation"), "{e:?}");
}
