//! VALIDATION V16: the energy–momentum schemes of MODEL §13 (seed 004) on the CPU engine. `em`
//! conserves energy to the solver's tolerance (4-mass system, torus ring with rotations frozen,
//! truss, a ball bouncing under gravity), `em` and `sm` conserve `P` and `L` to rounding and are
//! second order; the truss in relative equilibrium gives the seed's Table 2 EM row; bonds with
//! explicit rest lengths; what the schemes refuse, and the solve's limit as an error.

use glam::DVec3;
use rrpdem::diagnostics::Diagnostics;
use rrpdem::engine::cpu::{IMPLICIT_TOLERANCE, ImplicitSolver};
use rrpdem::engine::{self, CpuEngine, Engine, Precision};
use rrpdem::error::EngineError;
use rrpdem::integrator::discrete::{Scheme, along, xi};
use rrpdem::integrator::{Integrator, Kinematics};
use rrpdem::interactions::axial;
use rrpdem::model::Model;
use rrpdem::scenario::{Backend, Scenario};
use std::path::{Path, PathBuf};

fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name)
}

fn load(name: &str) -> (Scenario, Model) {
    let s = Scenario::load(&shipped(name)).unwrap_or_else(|e| panic!("{e}"));
    let m = s.build_model().unwrap_or_else(|e| panic!("{e}"));
    (s, m)
}

/// A scenario from JSON text (errors as text, for the refusal tests).
fn from_json(text: &str) -> Result<(Scenario, Model), String> {
    let s = Scenario::from_json(text, Path::new("test.json")).map_err(|e| e.to_string())?;
    let m = s.build_model().map_err(|e| e.to_string())?;
    Ok((s, m))
}

/// A run's diagnostics at every step and its final state.
fn run(model: &Model, integ: Integrator, dt: f64, steps: u64) -> (Vec<Diagnostics>, Vec<Kinematics>) {
    let mut e = CpuEngine::new(model, integ, dt).unwrap_or_else(|e| panic!("{e}"));
    let mut d = vec![e.diagnostics().unwrap()];
    for _ in 0..steps {
        e.advance(1).unwrap_or_else(|err| panic!("{integ} dt {dt}: {err}"));
        d.push(e.diagnostics().unwrap());
    }
    (d, e.snapshot().unwrap())
}

/// Largest `|E_k − E_0| / |E_0|`.
fn energy_error(d: &[Diagnostics]) -> f64 {
    let e0 = d[0].total();
    d.iter().map(|x| (x.total() - e0).abs()).fold(0.0, f64::max) / e0.abs()
}

/// Largest drifts of `P` and `L` over a run, relative to `Σ m|v|` and `Σ m|x||v|` at t = 0.
fn momentum_drifts(d: &[Diagnostics], model: &Model) -> (f64, f64) {
    let p = &model.particles;
    let ps: f64 = (0..p.len()).map(|i| p.mass[i] * p.v[i].length()).sum();
    let ls: f64 = (0..p.len()).map(|i| p.mass[i] * p.x[i].length() * p.v[i].length()).sum();
    let (p0, l0) = (d[0].p, d[0].l);
    let dp = d.iter().map(|x| (x.p - p0).length()).fold(0.0, f64::max);
    let dl = d.iter().map(|x| (x.l - l0).length()).fold(0.0, f64::max);
    (dp / ps, dl / ls)
}

/// The energy identity of a step holds to `|G|` times the correction the solve leaves (≤ 1e-13
/// of the positions, ~1 here; the solve polishes it to the rounding of the step's displacement,
/// `engine::cpu::implicit`) plus the rounding of the energy sums (a few 1e-17 of E per step), so
/// over 480 steps `em` stays well inside 1e-13 of E — the bound V16 sets. `sm` conserves a shadow energy only: its error is O(h²) and bounded, 1.7e-4
/// here, so the same check sets the schemes apart. The run exchanges energy (the kinetic energy
/// ranges over a factor 17), so a gradient that is not the discrete one cannot pass.
#[test]
fn em_conserves_energy_on_the_four_mass_system_sm_does_not() {
    let (s, m) = load("four_mass.json");
    assert_eq!((s.dt, s.total_steps()), (0.0625, 480));
    let (d, _) = run(&m, Integrator::Em, s.dt, s.total_steps());
    let e = energy_error(&d);
    assert!(e <= 1e-13, "em: relative energy error {e:e}");
    let ke: Vec<f64> = d.iter().map(|x| x.e_trans).collect();
    let (lo, hi) = ke.iter().fold((f64::INFINITY, 0.0f64), |(a, b), &k| (a.min(k), b.max(k)));
    assert!(hi > 10.0 * lo, "the run must exchange kinetic and elastic energy: {lo} .. {hi}");
    // The seed's coarsest step, where the solve is hardest (Picard would not contract).
    let (d, _) = run(&m, Integrator::Em, 1.0, 30);
    assert!(energy_error(&d) <= 1e-13, "em at dt = 1: {:e}", energy_error(&d));
    let (d, _) = run(&m, Integrator::Sm, s.dt, s.total_steps());
    let e = energy_error(&d);
    assert!(e > 1e-6 && e < 1e-2, "sm: bounded, not exact: {e:e}");
}

/// `P` and `L` of an isolated system change only by rounding: per step a few ulps of the sums
/// (4 particles, 6 pairs), growing at most linearly over 480 steps: 480 · 16 · 1.1e-16 ≈ 1e-12
/// relative to `Σ m|v|`, `Σ m|x||v|` in the worst case (measured ~1e-14). A scheme whose pair
/// forces are not equal and opposite along `d_m` drifts by O(h²) ~ 1e-3.
#[test]
fn em_and_sm_conserve_linear_and_angular_momentum() {
    for name in ["four_mass.json", "truss.json"] {
        let (s, m) = load(name);
        for integ in [Integrator::Em, Integrator::Sm] {
            let (d, _) = run(&m, integ, s.dt, s.total_steps());
            let (dp, dl) = momentum_drifts(&d, &m);
            assert!(dp <= 1e-12 && dl <= 1e-12, "{name} {integ}: P drift {dp:e}, L drift {dl:e}");
        }
    }
}

/// Second order: the position error at t = 10 against the same scheme at dt/64, for dt = 0.25,
/// 0.125, 0.0625; the observed orders between successive steps within 0.1 of 2 (the errors are
/// 1e-3 .. 1e-4, the reference's own ~1e-7 of them, and the next term O(h⁴) changes the ratio
/// by ~h² ≈ 6e-2 at the coarsest step).
#[test]
fn em_and_sm_are_second_order() {
    let (_, m) = load("four_mass.json");
    let t = 10.0;
    for integ in [Integrator::Em, Integrator::Sm] {
        let fine = 0.0625 / 64.0;
        let (_, reference) = run(&m, integ, fine, (t / fine) as u64);
        let errors: Vec<f64> = [0.25, 0.125, 0.0625]
            .iter()
            .map(|&dt| {
                let (_, x) = run(&m, integ, dt, (t / dt) as u64);
                x.iter().zip(&reference).map(|(a, b)| (a.x - b.x).length_squared()).sum::<f64>().sqrt()
            })
            .collect();
        for w in errors.windows(2) {
            let order = (w[0] / w[1]).log2();
            assert!((order - 2.0).abs() < 0.1, "{integ}: errors {errors:?}, order {order}");
        }
    }
}

/// The closed form `ξ_em = [φ(l1) − φ(l0)] / (½(l1² − l0²))` of the seed's spring
/// `φ = ½k(l − 1)²`: `k (1 − 2/(l0 + l1))`, against `xi` on the axial law with L0 = 1
/// (`½K(l/L0 − 1)²`, the same spring), and the discrete gradient property itself.
#[test]
fn em_gradient_of_the_spring_in_closed_form() {
    let k = 1.7;
    let phi = |l: f64| along(|d| axial(d, 1.0, k), l);
    let d0 = DVec3::new(0.3, 0.9, -0.2);
    for d1 in [DVec3::new(0.5, 1.1, 0.1), DVec3::new(0.1, 0.4, -0.3), d0 * 1.001] {
        let (l0, l1) = (d0.length(), d1.length());
        let want = k * (1.0 - 2.0 / (l0 + l1));
        let got = xi(Scheme::Em, phi, d0, d1);
        assert!((got - want).abs() <= 1e-12 * want.abs().max(1.0), "{got} vs {want}");
        let dphi = phi(l1).0 - phi(l0).0;
        assert!((got * 0.5 * (l1 * l1 - l0 * l0) - dphi).abs() <= 1e-15, "property: {dphi}");
    }
}

/// A torus ring of 80 spheres with axial bonds only (rotations frozen: `bending` and `shear`
/// 0) hitting a wall: axial bonds, particle–particle and wall Hertz contacts through the
/// discrete gradient, the Picard solve (240 unknowns). The impact is real (the wall's energy
/// peaks at 5 % of E) and the spheres touch throughout.
///
/// V16's bound, 1e-13 of E over the whole run (1500 steps, through the impact). Why it holds:
/// the solve ends at the rounding of the displacement (`engine::cpu::implicit`), so its residual
/// no longer drifts E (it used to: 8e-16 E per step, 1.2e-12 over this run). What is left is
/// rounding, in two parts:
/// - each measured E sees positions rounded to half an ulp: `Σ|F_i| ulp(x_i)/2 ≈ 80 · 40 ·
///   2.2e-16 ≈ 7e-13` absolute, 1.8e-14 of E (E = 40) at worst; it does not add up (measured
///   largest one-step change 1.8e-14);
/// - the rounding a step leaves in the stored positions and velocities does add up, as a random
///   walk: measured per-step rms 8.5e-16 E and mean 4e-17 E (within its own noise, 2.2e-17), so
///   over N = 1500 steps `σ√N ≈ 3.3e-14` E, and 1e-13 is three of those.
///
/// Measured: 7.1e-14 over the run, 8.7e-14 over 3000 steps. `sm` and `rrp-newmark` on the same
/// ring: 2e-3 and 1.5e-3.
#[test]
fn em_conserves_energy_on_the_torus_ring_with_rotations_frozen() {
    let text = std::fs::read_to_string(shipped("torus_impact.json")).unwrap();
    let text = text
        .replace("\"rrp-newmark\"", "\"em\"")
        .replace("\"bending\": 10", "\"bending\": 0")
        .replace("\"shear\": 200", "\"shear\": 0");
    let (s, m) = from_json(&text).unwrap();
    let (d, _) = run(&m, Integrator::Em, s.dt, 1500);
    let e0 = d[0].total();
    let peak = d.iter().map(|x| x.u_wall).fold(0.0, f64::max);
    assert!(peak > 0.02 * e0, "the ring must hit the wall: U_wall peaks at {peak}");
    assert!(d.iter().all(|x| x.u_contact > 0.0), "the ring's spheres touch throughout");
    let per_step = d.windows(2).map(|w| (w[1].total() - w[0].total()).abs()).fold(0.0, f64::max) / e0;
    assert!(per_step <= 1e-13, "em ring, one step: {per_step:e}");
    let impact = energy_error(&d[..301]);
    assert!(impact <= 1e-13, "em ring over the impact: {impact:e}");
    let long = energy_error(&d);
    assert!(long <= 1e-13, "em ring over 1500 steps: {long:e}");
    let (d, _) = run(&m, Integrator::Sm, s.dt, 300);
    assert!(energy_error(&d) > 1e-5, "sm is not exact: {:e}", energy_error(&d));
    // The same ring with bending is refused, naming the field.
    let bent = text.replace("\"bending\": 0", "\"bending\": 10");
    let (_, m) = from_json(&bent).unwrap();
    let err = CpuEngine::new(&m, Integrator::Em, s.dt).err().expect("refused").to_string();
    assert!(err.contains("stiffness.bending") && err.contains("rotations frozen"), "{err}");
}

/// Gravity (linear potential, exact in any discrete gradient) and a wall: a ball bouncing
/// three times keeps E (kinetic + wall + gravity) to 1e-13 under `em`.
#[test]
fn em_conserves_energy_of_a_ball_bouncing_under_gravity() {
    let (s, m) = from_json(
        r#"{ "name": "ball", "integrator": "em", "dt": 2e-3, "t_end": 6, "backend": "cpu",
             "particle": { "mass": 1, "inertia": 1, "diameter": 1 },
             "stiffness": { "contact": 0, "wall": 1e4 }, "gravity": [0, 0, -9.81],
             "walls": [ { "point": [0, 0, 0], "normal": [0, 0, 1] } ],
             "bodies": [ { "type": "particles", "particles": [ { "x": [0, 0, 1.5], "v": [0.3, 0, 0] } ] } ] }"#,
    )
    .unwrap();
    let (d, _) = run(&m, Integrator::Em, s.dt, s.total_steps());
    let bounces = d.windows(2).filter(|w| w[0].u_wall == 0.0 && w[1].u_wall > 0.0).count();
    assert!(bounces >= 3, "{bounces} bounces");
    assert!(energy_error(&d) <= 1e-13, "{:e}", energy_error(&d));
}

/// The truss of seed 004 §7.2 in relative equilibrium at Δt = 0.25: EM turns the structure by
/// `θ = 2 atan(ω0Δt/2)` a step, so at t it lags the exact rotation by `(1 − λ_r) ω0 t`,
/// `λ_r = atan(ω0Δt/2)/(ω0Δt/2)`: the seed's Table 2 EM row (0.0155, 0.031, 0.0464 at t = 3,
/// 6, 9), whichever mass matrix and strain measure, since only the balance of the relative
/// equilibrium enters. Measured from node 1's angle about the centre node, to 1e-12 of the
/// closed form (the solve's tolerance times the 36 steps' lever); translation exact; bars keep
/// their lengths; `sm` lags more (its ξ is taken at the shorter midpoint chord), so the row
/// tells the schemes apart. Energy to 1e-13 on this path and on one off it (speeds × 1.05).
#[test]
fn truss_gives_the_em_row_of_table_2() {
    let (s, m) = load("truss.json");
    assert_eq!(s.dt, 0.25);
    let (w0, h) = (1.0f64, s.dt);
    let x = w0 * h / 2.0;
    let lambda = x.atan() / x;
    let printed = [(3.0, 0.0155, 5e-5), (6.0, 0.031, 5e-4), (9.0, 0.0464, 5e-5)];
    let lag = |snap: &[Kinematics], t: f64| {
        let r = snap[1].x - snap[0].x;
        let exact = std::f64::consts::FRAC_PI_2 - w0 * t;
        let mut e = r.y.atan2(r.x) - exact;
        while e > std::f64::consts::PI {
            e -= std::f64::consts::TAU;
        }
        while e < -std::f64::consts::PI {
            e += std::f64::consts::TAU;
        }
        e
    };
    let a = m.particles.x[1].y;
    for &(t, table, half_digit) in &printed {
        let steps = (t / h) as u64;
        let (d, snap) = run(&m, Integrator::Em, h, steps);
        let closed = (1.0 - lambda) * w0 * t;
        let got = lag(&snap, t);
        assert!((got - closed).abs() < 1e-12, "t = {t}: lag {got} vs closed form {closed}");
        assert!((got - table).abs() <= half_digit, "t = {t}: {got} is not the seed's {table}");
        assert!((snap[0].x - DVec3::new(0.0, 0.0, 0.75 * t)).length() < 1e-13, "translation at t = {t}");
        assert!(((snap[1].x - snap[0].x).length() - a).abs() < 1e-12, "spoke length at t = {t}");
        assert!(energy_error(&d) <= 1e-13, "t = {t}: {:e}", energy_error(&d));
        let (_, snap) = run(&m, Integrator::Sm, h, steps);
        assert!(lag(&snap, t) > got + 1e-3, "sm must lag more: {} vs {got}", lag(&snap, t));
    }
    let mut off = m.clone();
    off.particles.v.iter_mut().for_each(|v| *v *= 1.05);
    let (d, _) = run(&off, Integrator::Em, h, 36);
    let spread = d.iter().map(|x| x.u_axial).fold(0.0, f64::max) - d.iter().map(|x| x.u_axial).fold(1e9, f64::min);
    assert!(spread > 1e-3 * d[0].total(), "off equilibrium the bars vibrate: {spread}");
    assert!(energy_error(&d) <= 1e-13, "off equilibrium: {:e}", energy_error(&d));
}

/// The solve's limit is an error naming the step, with nothing of the step taken: Picard at
/// Δt = 2 on the 4-mass system does not contract ((ωΔt/2)² ≈ 4); Newton solves it. At a small
/// step both solvers give the same trajectory to the tolerance.
#[test]
fn a_solve_that_does_not_converge_is_an_error_naming_the_step() {
    let (_, m) = load("four_mass.json");
    let mut e = CpuEngine::new(&m, Integrator::Em, 2.0).unwrap();
    e.set_implicit_solver(ImplicitSolver::Picard);
    let before = e.snapshot().unwrap();
    let err = e.advance(3).unwrap_err();
    assert!(matches!(err, EngineError::ImplicitSolve { step: 0, .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("step 0") && msg.contains("did not converge") && msg.contains("Picard"), "{msg}");
    assert_eq!(e.snapshot().unwrap(), before, "nothing of the failed step is kept");
    assert_eq!(e.steps_done(), 0);
    let mut newton = CpuEngine::new(&m, Integrator::Em, 2.0).unwrap();
    newton.set_implicit_solver(ImplicitSolver::Newton);
    newton.advance(3).unwrap();
    let snaps: Vec<Vec<Kinematics>> = [ImplicitSolver::Picard, ImplicitSolver::Newton]
        .iter()
        .map(|&solver| {
            let mut e = CpuEngine::new(&m, Integrator::Em, 0.0625).unwrap();
            e.set_implicit_solver(solver);
            e.advance(160).unwrap();
            e.snapshot().unwrap()
        })
        .collect();
    let diff = snaps[0].iter().zip(&snaps[1]).map(|(a, b)| (a.x - b.x).length()).fold(0.0, f64::max);
    assert!(diff < 100.0 * IMPLICIT_TOLERANCE, "Picard and Newton differ by {diff:e}");
}

/// What the translation-only schemes refuse, each by the field that sets it, and the GPU
/// engine's refusal (before it opens a device); `auto` picks the CPU engine for them.
#[test]
fn rotation_coupling_and_the_gpu_are_refused() {
    let base = std::fs::read_to_string(shipped("four_mass.json")).unwrap();
    let cases = [
        ("\"axial\": 1 }", "\"axial\": 1, \"shear\": 5 }", "stiffness.shear"),
        ("\"axial\": 1 }", "\"axial\": 1, \"bending\": 5 }", "stiffness.bending"),
        ("\"backend\"", "\"rupture\": { \"tension\": 0.5 }, \"backend\"", "rupture"),
        ("\"backend\"", "\"pendulum\": { \"g\": 1 }, \"backend\"", "pendulum"),
        ("\"v\": [0.04095, -0.01483, 0.04325]", "\"v\": [0.04095, -0.01483, 0.04325], \"omega\": [0, 0, 1]", "omega"),
    ];
    for (from, to, field) in cases {
        let text = base.replacen(from, to, 1);
        assert_ne!(text, base, "{field}: the edit must apply");
        let (_, m) = from_json(&text).unwrap();
        for integ in [Integrator::Em, Integrator::Sm] {
            let err = CpuEngine::new(&m, integ, 0.1).err().unwrap_or_else(|| panic!("{field} not refused"));
            assert!(err.to_string().contains(field), "{err}");
        }
        // The RRP maps run these models.
        CpuEngine::new(&m, Integrator::RrpNewmark, 0.01).unwrap();
    }
    let (_, m) = load("four_mass.json");
    let err = rrpdem::gpu::GpuEngine::new(&m, Integrator::Em, 0.1, Precision::F64, rrpdem::gpu::AdapterChoice::Any)
        .err()
        .expect("the GPU engine refuses em")
        .to_string();
    assert!(err.contains("CPU engine") && err.contains("`em`"), "{err}");
    let e = engine::create(&m, Integrator::Sm, 0.1, Backend::Auto, None).unwrap();
    assert_eq!(e.info().backend, "cpu");
}

/// Rest lengths: `[i, j, L0]` sets the axial law's `L0` while the reference direction stays the
/// initial one; the same from a bonds CSV's `rest_length` column; bad values are errors naming
/// the bond (JSON) or the line (CSV). Without them nothing changes: `[i, j]` rests at the
/// initial distance.
#[test]
fn bonds_take_explicit_rest_lengths() {
    let (_, m) = load("four_mass.json");
    for b in &m.bonds {
        let d0 = m.particles.x[b.i as usize] - m.particles.x[b.j as usize];
        assert_eq!(b.l0, 1.0);
        assert!((d0.length() - 1.0).abs() > 1e-3, "the seed's springs are not at rest at t = 0");
        assert_eq!(b.dhat0, d0 / d0.length());
    }
    // The initial force is the stretched springs' (K = 1, L0 = 1): F_i = −Σ (l/L0 − 1) d̂.
    let e = CpuEngine::new(&m, Integrator::RrpNewmark, 0.01).unwrap();
    let f0 = e.forces()[0].0;
    let x = &m.particles.x;
    let want: DVec3 = (1..4).map(|j| (x[j] - x[0]) / (x[j] - x[0]).length() * ((x[j] - x[0]).length() - 1.0)).sum();
    assert!((f0 - want).length() < 1e-15, "{f0} vs {want}");
    let base = std::fs::read_to_string(shipped("four_mass.json")).unwrap();
    let plain = base.replace(", 1]", "]");
    let (_, mp) = from_json(&plain).unwrap();
    for b in &mp.bonds {
        assert_eq!(b.l0, (mp.particles.x[b.i as usize] - mp.particles.x[b.j as usize]).length());
    }
    for (bad, what) in [("[1, 2, 0]", "L0 = 0"), ("[1, 2, -1.5]", "L0 = -1.5")] {
        let err = from_json(&base.replace("[1, 2, 1]", bad)).unwrap_err();
        assert!(err.contains("bodies[0].bonds[3]") && err.contains(what) && err.contains("> 0"), "{err}");
    }
    // The same model from CSV files.
    let tmp = tempfile::tempdir().unwrap();
    let mut particles = String::from("x,y,z,vx,vy,vz\n");
    for i in 0..4 {
        let (x, v) = (m.particles.x[i], m.particles.v[i]);
        particles.push_str(&format!("{},{},{},{},{},{}\n", x.x, x.y, x.z, v.x, v.y, v.z));
    }
    std::fs::write(tmp.path().join("p.csv"), particles).unwrap();
    let scenario = |bonds: &str| {
        std::fs::write(tmp.path().join("b.csv"), bonds).unwrap();
        let text = base.replace(
            &base[base.find("{\n      \"type\": \"particles\"").unwrap()..base.rfind("]\n}").unwrap()],
            "{ \"type\": \"csv\", \"particles\": \"p.csv\", \"bonds\": \"b.csv\" }\n  ",
        );
        let path = tmp.path().join("s.json");
        std::fs::write(&path, text).unwrap();
        Scenario::load(&path).and_then(|s| s.build_model()).map_err(|e| e.to_string())
    };
    let rows = "i,j,rest_length\n0,1,1\n0,2,1\n0,3,1\n1,2,1\n1,3,1\n2,3,1\n";
    let mc = scenario(rows).unwrap();
    assert_eq!(mc.bonds, m.bonds);
    let err = scenario("i,j,rest_length\n0,1,1\n0,2,0\n").unwrap_err();
    assert!(err.contains("b.csv:3:") && err.contains("rest_length") && err.contains("> 0"), "{err}");
    let err = scenario("i,j,L0\n0,1,1\n").unwrap_err();
    assert!(err.contains("i,j,rest_length"), "{err}");
}

/// A run with rest lengths stopped and resumed from its checkpoint (whose model is checked
/// against the scenario's, rest lengths included) ends on the bits of the uninterrupted run.
#[test]
fn a_run_with_rest_lengths_resumes_from_its_checkpoint() {
    use rrpdem::output::OutputDir;
    use rrpdem::run::{self, RunOptions, Start};
    let (mut s, m) = load("four_mass.json");
    s.t_end = 5.0;
    let tmp = tempfile::tempdir().unwrap();
    let go = |dir: &Path, stop: Option<u64>| {
        let out = OutputDir::create(dir, false).unwrap();
        let mut e = engine::create(&m, s.integrator, s.dt, Backend::Cpu, None).unwrap();
        let opts = RunOptions { stop_at: stop, ..Default::default() };
        let est = rrpdem::stability::estimate(&m);
        run::run(&s, &m, e.as_mut(), Start::Fresh { stability: est }, &out, opts)
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    go(&a, None).unwrap();
    assert!(matches!(go(&b, Some(30)), Err(run::RunError::Interrupted { .. })));
    let out = OutputDir::reopen(&b).unwrap();
    run::resume(&out, None, None, RunOptions::default(), |_| {}).unwrap_or_else(|e| panic!("{e}"));
    let fa = std::fs::read(a.join("final_state.csv")).unwrap();
    let fb = std::fs::read(b.join("final_state.csv")).unwrap();
    assert_eq!(fa, fb);
}

/// `converge` sets `em` and `sm` beside the RRP maps on the 4-mass system: second order for
/// all (trajectory norm), `em`'s largest energy error at rounding while the others' fall as h².
#[test]
fn converge_compares_em_sm_and_the_rrp_maps() {
    let (_, m) = load("four_mass.json");
    let integ = [Integrator::RrpNewmark, Integrator::Em, Integrator::Sm];
    let rows = rrpdem::converge::converge(&m, &integ, &[0.25, 0.125, 0.0625], 10.0, 16).unwrap();
    assert_eq!(rows.len(), 9);
    for r in &rows {
        if let Some(o) = r.traj_order_norm {
            assert!((o - 2.0).abs() < 0.1, "{} dt {}: order {o}", r.integrator, r.dt);
        }
        match r.integrator {
            Integrator::Em => assert!(r.e_max <= 1e-13, "em: {:e}", r.e_max),
            _ => assert!(r.e_max > 1e-5, "{}: {:e}", r.integrator, r.e_max),
        }
    }
    assert!(rows[3].csv_row().split(',').count() == rrpdem::converge::CONVERGE_HEADER.split(',').count());
}

/// `rrpdem compare SCENARIO --integrator em --against sm`: the largest position and velocity
/// differences it prints are the ones of the two runs made here through the library (the same
/// CPU engine, the same steps: equal to the printed 4 digits), and each scheme's energy error
/// is printed.
#[test]
fn compare_against_prints_the_differences_of_the_two_runs() {
    let steps = 100u64;
    let (s, m) = load("four_mass.json");
    let (_, em) = run(&m, Integrator::Em, s.dt, steps);
    let (_, sm) = run(&m, Integrator::Sm, s.dt, steps);
    let dx = em.iter().zip(&sm).map(|(a, b)| (a.x - b.x).length()).fold(0.0, f64::max);
    let dv = em.iter().zip(&sm).map(|(a, b)| (a.v - b.v).length()).fold(0.0, f64::max);
    assert!(dx > 1e-8, "the schemes differ: {dx:e}");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rrpdem"))
        .args(["compare", shipped("four_mass.json").to_str().unwrap(), "--integrator", "em", "--against", "sm"])
        .args(["--steps", &steps.to_string()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}");
    let printed = |name: &str| -> f64 {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no `{name}` line: {out}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    for (name, want) in [("position", dx), ("velocity", dv)] {
        let got = printed(name);
        assert!((got - want).abs() <= 1e-3 * want, "{name}: printed {got:e}, runs {want:e}\n{out}");
    }
    assert!(out.lines().any(|l| l.starts_with("em") && l.contains("energy error")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("sm") && l.contains("energy error")), "{out}");
}

/// `compare_tracked` (what `rrpdem compare --against` runs: each integrator stepped once, one
/// step at a time) gives the differences of `compare` (fresh engines, one batch each) to the
/// bit, and the energy errors of step-by-step runs: a CPU engine's state after n single steps
/// is that of one batch of n (the RRP maps close each step at the end of an `advance`; the
/// ring checks that path with contacts and rotations).
#[test]
fn compare_tracked_steps_each_integrator_once_with_the_same_outputs() {
    use rrpdem::compare::{compare, compare_tracked};
    let ring = std::fs::read_to_string(shipped("torus_impact.json")).unwrap();
    let (_, ring) = from_json(&ring).unwrap();
    let (s4, four) = load("four_mass.json");
    let cases = [
        (&four, s4.dt, Integrator::Em, Integrator::Sm, 100),
        (&four, s4.dt, Integrator::RrpNewmark, Integrator::Em, 100),
        (&ring, 1e-3, Integrator::RrpNewmark, Integrator::RrpExact, 50),
        (&ring, 1e-3, Integrator::Campello, Integrator::RrpNewmark, 50),
    ];
    for (m, dt, a, b, steps) in cases {
        let fresh = |i| CpuEngine::new(m, i, dt).unwrap();
        let (mut ea, mut eb) = (fresh(a), fresh(b));
        let batch = compare(&mut ea, &mut eb, steps).unwrap();
        let (mut ea, mut eb) = (fresh(a), fresh(b));
        let (diffs, tracked) = compare_tracked(&mut ea, &mut eb, steps).unwrap();
        assert_eq!(diffs.len(), batch.len());
        for (x, y) in diffs.iter().zip(&batch) {
            let same = (&x.quantity, x.max_abs.to_bits(), x.scale.to_bits(), &x.at)
                == (&y.quantity, y.max_abs.to_bits(), y.scale.to_bits(), &y.at);
            assert!(same, "{a} vs {b}: {x:?} vs {y:?}");
        }
        for (integ, t) in [a, b].into_iter().zip(tracked) {
            let (d, _) = run(m, integ, dt, steps);
            let want = d.iter().map(|x| (x.total() - d[0].total()).abs()).fold(0.0, f64::max) / d[0].total().abs();
            assert_eq!(t.energy_error.to_bits(), want.to_bits(), "{integ}: {} vs {want}", t.energy_error);
            assert!(t.seconds_per_step > 0.0);
        }
        assert!(batch[0].max_abs > 0.0, "{a} and {b} differ");
    }
}
