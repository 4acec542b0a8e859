//! V9: binder rupture. Two-particle bonds loaded in one channel break at the step the motion
//! predicts, in that channel's mode; `sum` breaks before `any` when two channels are loaded;
//! a rupturing torus keeps `E + E_released` bounded and its momenta exact; CPU and GPU break
//! the same bonds at the same steps (f64), or a close set (f32); Weibull factors do not depend
//! on the bond order. The predicted-step tests run on the CPU and on the GPU in f64 and f32.

mod common;

use glam::DVec3;
use rrpdem::engine::{CpuEngine, Engine, Precision};
use rrpdem::gpu::{AdapterChoice, GpuEngine};
use rrpdem::integrator::Integrator;
use rrpdem::interactions::rupture::{CHANNELS, weibull_scale};
use rrpdem::interactions::{BreakEvent, Rupture, RuptureRule};
use rrpdem::model::Model;
use rrpdem::scenario::Scenario;
use std::path::Path;

const H: f64 = 1e-3;

/// Particle 0 at the origin and particle 1 at (1, 0, 0) (diameter 1, touching), bonded, with
/// the given velocities, spins, stiffnesses and rupture block.
fn pair(v: [DVec3; 2], w: [DVec3; 2], k_axial: f64, rupture: &str) -> Model {
    let text = format!(
        r#"{{"name": "pair", "dt": {H}, "t_end": 1, "shear": "objective",
            "particle": {{"mass": 1, "inertia": 0.1, "diameter": 1}},
            "stiffness": {{"axial": {k_axial}}},
            "rupture": {rupture},
            "bodies": [{{"type": "particles", "bonds": [[0, 1]], "particles": [
                {{"x": [0,0,0], "v": {:?}, "omega": {:?}}},
                {{"x": [1,0,0], "v": {:?}, "omega": {:?}}}]}}]}}"#,
        v[0].to_array(),
        w[0].to_array(),
        v[1].to_array(),
        w[1].to_array()
    );
    Scenario::from_json(&text, Path::new("pair.json")).unwrap().build_model().unwrap()
}

/// The CPU engine and the GPU engine in f64 and in f32, by name. The pair tests' breaks are far
/// from rounding ties (the deciding ratio is 8e-4 or more from 1 on either side of the break,
/// f32 round-off ~1e-6), so f32 breaks at the same step too. A missing adapter fails the test (never skips it).
fn every_engine(m: &Model) -> Vec<(&'static str, Box<dyn Engine>)> {
    let gpu = |p| -> Box<dyn Engine> {
        Box::new(GpuEngine::new(m, Integrator::RrpNewmark, H, p, AdapterChoice::Any).unwrap_or_else(|e| panic!("{e}")))
    };
    vec![
        ("cpu", Box::new(CpuEngine::new(m, Integrator::RrpNewmark, H).unwrap())),
        ("gpu-f64", gpu(Precision::F64)),
        ("gpu-f32", gpu(Precision::F32)),
    ]
}

/// Steps the engine one step at a time until the bond breaks (at most `max` steps); returns
/// the break event and the snapshots of every step up to it (index = step).
fn step_until_break(engine: &mut dyn Engine, max: u64) -> (BreakEvent, Vec<Vec<rrpdem::integrator::Kinematics>>) {
    let mut states = vec![engine.snapshot().unwrap()];
    assert!(engine.take_breaks().is_empty(), "intact at t = 0");
    for _ in 0..max {
        engine.advance(1).unwrap();
        states.push(engine.snapshot().unwrap());
        let breaks = engine.take_breaks();
        if let Some(e) = breaks.first() {
            assert_eq!(breaks.len(), 1);
            return (*e, states);
        }
    }
    panic!("no break within {max} steps");
}

/// First step at which `f(step)` holds.
fn first_step(n: usize, f: impl Fn(usize) -> bool) -> u64 {
    (0..n).find(|&k| f(k)).expect("reached") as u64
}

#[test]
fn tension_breaks_at_the_predicted_step() {
    // Free flight (K = 0): the gap grows by h·v per step, ε_k = k h v / L0 with v = 0.37, so
    // ε reaches 0.01 between k = 27 (9.99e-3) and k = 28: the break is at step 28, far from a
    // rounding tie (the ratio is 1.0009 there, 0.9990 a step before).
    let v = 0.37;
    let m = pair(
        [DVec3::new(-v / 2.0, 0.0, 0.0), DVec3::new(v / 2.0, 0.0, 0.0)],
        [DVec3::ZERO; 2],
        0.0,
        r#"{"tension": 0.01}"#,
    );
    for (name, mut e) in every_engine(&m) {
        let (ev, _) = step_until_break(e.as_mut(), 1000);
        assert_eq!((ev.step, ev.bond, ev.i, ev.j, CHANNELS[ev.mode as usize]), (28, 0, 0, 1, "tension"), "{name}");
        assert_eq!(ev.t, 28.0 * H);
        // Midpoint of the pair, which moves symmetrically about (0.5, 0, 0).
        assert!((ev.x - DVec3::new(0.5, 0.0, 0.0)).length() < 1e-6, "{name}: {}", ev.x);
    }
}

#[test]
fn tension_with_stiffness_breaks_where_the_observed_strain_crosses_and_books_its_energy() {
    // K^a = 50 decelerates the pair, so the step is predicted from the observed motion: the
    // first state whose strain |x_0 − x_1| − 1 reaches 0.02. Its energy ½ K^a ε² is released.
    let k = 50.0;
    let m = pair([DVec3::new(-1.0, 0.0, 0.0), DVec3::new(1.0, 0.0, 0.0)], [DVec3::ZERO; 2], k, r#"{"tension": 0.02}"#);
    for (name, mut e) in every_engine(&m) {
        let (ev, states) = step_until_break(e.as_mut(), 1000);
        let strain = |s: &Vec<rrpdem::integrator::Kinematics>| (s[0].x - s[1].x).length() - 1.0;
        let predicted = first_step(states.len(), |k| strain(&states[k]) >= 0.02);
        assert_eq!(ev.step, predicted, "{name}");
        let st = &states[predicted as usize];
        let eps = strain(st);
        // Booked: ½ K^a ε² plus half a step of the bond's work, ½ h F_0·(v_0 − v_1) with
        // F_0 = −K^a ε d̂ (MODEL §10 ledger, docs/PHYSICS.md "Rupture"), at the velocities the
        // evaluation saw: the closing half kick of the break step adds nothing (no other load),
        // so the recorded v_k is v_{k−½}. The correction is ~10 % of ½ K^a ε² here (h K^a ε v
        // against ½ K^a ε²), so booking the potential alone fails this test.
        let dhat = (st[0].x - st[1].x).normalize();
        let power = (dhat * (-k * eps)).dot(st[0].v - st[1].v);
        // f64: the strain from the same positions, a few roundings apart; f32: ε ≈ 0.02 carries
        // ~1e-7 absolute round-off, 5e-6 relative, twice that in ε².
        let tol = if name == "gpu-f32" { 1e-4 } else { 1e-14 };
        let want = 0.5 * k * eps * eps + 0.5 * H * power;
        assert!((ev.energy - want).abs() <= tol * ev.energy, "{name}: {} vs {want}", ev.energy);
        let d = e.diagnostics().unwrap();
        assert_eq!((d.n_broken, d.e_released, d.u_axial), (1, ev.energy, 0.0), "{name}");
        // Broken from F_k on: no force any more, the velocities stay what the last half kick left.
        let v_then = e.snapshot().unwrap()[1].v;
        e.advance(5).unwrap();
        assert_eq!(e.snapshot().unwrap()[1].v, v_then, "{name}");
        assert!(e.take_breaks().is_empty(), "{name}: breaking is irreversible and happens once");
    }
}

#[test]
fn bending_twist_and_shear_break_at_the_predicted_step() {
    // K = 0: particle 0 spins at |Ω| = 3, turning by 2 atan(h|Ω|/2) per step (V2), so its
    // angle reaches 0.2 at k = ⌈0.2 / 2.99999775e-3⌉ = 67 (66.67). About an axis across the
    // bond that is bending, along it twist.
    let a = 2.0 * (H * 3.0 / 2.0f64).atan();
    let predicted = (0.2 / a).ceil() as u64;
    assert_eq!(predicted, 67);
    for (axis, threshold, mode) in [(DVec3::Z, "bending", "bending"), (DVec3::X, "twist", "twist")] {
        let spec = format!(r#"{{"{threshold}": 0.2, "{}": 0.2}}"#, if mode == "twist" { "bending" } else { "twist" });
        let m = pair([DVec3::ZERO; 2], [3.0 * axis, DVec3::ZERO], 0.0, &spec);
        for (name, mut e) in every_engine(&m) {
            let (ev, _) = step_until_break(e.as_mut(), 1000);
            assert_eq!((ev.step, CHANNELS[ev.mode as usize]), (predicted, mode), "{name}: {mode}");
        }
    }
    // Shear: particle 1 slides across the bond at 0.5; the shear angle is atan(k h v / L0),
    // which reaches 0.05 at k h v = tan 0.05 = 0.050042, i.e. k = 100.08 → 101.
    let m = pair([DVec3::ZERO, DVec3::new(0.0, 0.5, 0.0)], [DVec3::ZERO; 2], 0.0, r#"{"shear": 0.05}"#);
    for (name, mut e) in every_engine(&m) {
        let (ev, _) = step_until_break(e.as_mut(), 1000);
        assert_eq!((ev.step, CHANNELS[ev.mode as usize]), (101, "shear"), "{name}");
    }
}

#[test]
fn sum_breaks_earlier_than_any_as_the_ratios_predict() {
    // Particle 1 moves along and across the bond: tension ε_k = √((1 + k h u)² + (k h w)²) − 1
    // and shear φ_k = atan2(k h w, 1 + k h u). With t_tension = 0.03, t_shear = 0.1:
    // `any` breaks when either ratio reaches 1, `sum` when their sum does — both predicted here
    // from the kinematics (free flight, K = 0), and `sum` strictly earlier.
    let (u, w) = (0.2, 0.3);
    let ratios = |k: usize| {
        let (x, y) = (1.0 + k as f64 * H * u, k as f64 * H * w);
        (((x * x + y * y).sqrt() - 1.0) / 0.03, y.atan2(x) / 0.1)
    };
    let any = first_step(10_000, |k| ratios(k).0.max(ratios(k).1) >= 1.0);
    let sum = first_step(10_000, |k| ratios(k).0 + ratios(k).1 >= 1.0);
    assert!(sum < any, "{sum} {any}");
    for (rule, expected) in [("any", any), ("sum", sum)] {
        let spec = format!(r#"{{"tension": 0.03, "shear": 0.1, "rule": "{rule}"}}"#);
        let m = pair([DVec3::ZERO, DVec3::new(u, w, 0.0)], [DVec3::ZERO; 2], 0.0, &spec);
        let (rt, rs) = ratios(expected as usize);
        let mode = if rt >= rs { "tension" } else { "shear" };
        for (name, mut e) in every_engine(&m) {
            let (ev, _) = step_until_break(e.as_mut(), 10_000);
            assert_eq!(ev.step, expected, "{name}: {rule}");
            assert_eq!(CHANNELS[ev.mode as usize], mode, "{name}: {rule}: the channel with the largest ratio");
        }
    }
}

#[test]
fn weibull_factors_do_not_depend_on_bond_order_and_have_unit_mean() {
    let r = Rupture { inv_thresholds: [1.0, 0.0, 0.0, 0.0], rule: RuptureRule::Any, weibull: Some((3.0, 42)) };
    let mut rng = common::Rng(7);
    let pairs: Vec<(u32, u32)> =
        (0..100_000).map(|_| (rng.next_u64() as u32 >> 8, rng.next_u64() as u32 >> 8)).collect();
    let a = r.scales(pairs.iter().copied());
    // Reversed list, and each pair's ends swapped: the same factor per pair.
    let b = r.scales(pairs.iter().rev().map(|&(i, j)| (j, i)));
    for (k, s) in a.iter().enumerate() {
        assert_eq!(*s, b[pairs.len() - 1 - k]);
        assert_eq!(*s, weibull_scale(3.0, 42, pairs[k].0, pairs[k].1));
    }
    // Unit mean: for m = 3 the factors' coefficient of variation is 0.363, so the mean of 1e5
    // has a standard error of 1.15e-3; 5e-3 is over four of them.
    let mean = a.iter().sum::<f64>() / a.len() as f64;
    assert!((mean - 1.0).abs() < 5e-3, "{mean}");
    let other_seed = r.scales(pairs.iter().copied().take(10));
    let r2 = Rupture { weibull: Some((3.0, 43)), ..r };
    assert_ne!(other_seed, r2.scales(pairs.iter().copied().take(10)), "the seed matters");
}

/// The paper torus with bending rupture at 0.3 rad: 7 of 80 bonds break by t = 10.
fn rupturing_torus(t_end: f64) -> Scenario {
    let mut s = common::scenario("torus_impact.json");
    s.t_end = t_end;
    s.rupture = Some(serde_json::from_str(r#"{"bending": 0.3}"#).unwrap());
    s
}

#[test]
fn rupturing_torus_keeps_e_plus_released_bounded_and_momenta_exact() {
    let s = rupturing_torus(10.0);
    let m = s.build_model().unwrap();
    let mut e = CpuEngine::new(&m, s.integrator, s.dt).unwrap();
    let d0 = e.diagnostics().unwrap();
    let (mut worst, mut broken, mut released, mut events) = (0.0f64, 0, 0.0, Vec::new());
    for _ in 0..s.total_steps() / 10 {
        e.advance(10).unwrap();
        let d = e.diagnostics().unwrap();
        worst = worst.max((d.budget_total() - d0.total()).abs() / d0.total());
        assert!(d.n_broken >= broken, "n_broken never decreases");
        broken = d.n_broken;
        // P_y, P_z and S exact (no wall along them; paper shear conserves S): round-off of
        // 1e4 steps × 80 particles × ε·|P0| ≈ 1e-10 at most; typical 1e-13.
        assert!(d.p.y.abs() < 1e-11 && d.p.z.abs() < 1e-11, "{}", d.p);
        assert!((d.s - d0.s).length() < 1e-11, "{}", d.s);
        released = d.e_released;
        events.extend(e.take_breaks());
    }
    assert!(broken > 0 && broken < 80, "some but not all bonds break: {broken}");
    assert_eq!(events.len() as u64, broken);
    assert!(events.windows(2).all(|w| (w[0].step, w[0].bond) < (w[1].step, w[1].bond)), "step, then bond order");
    let booked: f64 = events.iter().map(|e| e.energy).sum();
    assert!((booked - released).abs() <= 1e-12 * released);
    // The bound of V6 without rupture. Each break adds an O(h·F·v) jump (the bond's force is
    // gone from the closing half kick: docs/PHYSICS.md), so this holds for moderate breakage.
    assert!(worst <= 5e-3, "max |E + E_released − E0|/E0 = {worst}");
}

#[test]
fn cpu_and_gpu_f64_break_the_same_bonds_at_the_same_steps() {
    // Up to t = 4 the GPU (f64) trajectory agrees with the CPU to ~1e-12 (V7), so which bonds
    // break, and when, must be identical.
    let s = rupturing_torus(4.0);
    let m = s.build_model().unwrap();
    let mut all = Vec::new();
    for (name, mut e) in common::engines(&m, s.integrator, s.dt) {
        let (events, d) = run_breaks(e.as_mut(), s.total_steps());
        assert_eq!(d.n_broken, events.len() as u64, "{name}");
        all.push((name, events, d.e_released));
    }
    let key = |v: &[BreakEvent]| v.iter().map(|e| (e.step, e.t, e.bond, e.i, e.j, e.mode)).collect::<Vec<_>>();
    assert!(!all[0].1.is_empty(), "bonds break by t = 4");
    assert_eq!(key(&all[0].1), key(&all[1].1), "{} vs {}", all[0].0, all[1].0);
    // Midpoints and energies to the V7 f64 bound: same operations up to summation order, which
    // holds where the device rounds division, square root and a·b + c as IEEE 754 (lavapipe).
    // Elsewhere (NVIDIA's Vulkan driver fuses a·b + c; its f64 division and sqrt are IEEE)
    // many operations differ, the impact amplifies it (measured on an H100: 3e-9 in the
    // midpoint at step 1760, against 5e-12 on lavapipe) and only the discrete outcome above is
    // device-independent.
    let ops = rrpdem::gpu::arithmetic_on_device(rrpdem::engine::Precision::F64).unwrap();
    if ops.ieee() {
        for (a, b) in all[0].1.iter().zip(&all[1].1) {
            assert!((a.x - b.x).length() <= 1e-10 && (a.energy - b.energy).abs() <= 1e-10 * a.energy, "{a:?} vs {b:?}");
        }
        assert!((all[0].2 - all[1].2).abs() <= 1e-10 * all[0].2);
    } else {
        eprintln!("the device's f64 arithmetic is not IEEE 754 ({ops:?}): midpoints and energies not compared");
    }
}

#[test]
fn weibull_scatter_breaks_the_same_bonds_on_cpu_and_gpu_f64() {
    // Tension thresholds scattered per bond (Weibull, modulus 3): the GPU reads the scales only
    // with FLAG_WEIBULL. Up to t = 1.5 the f64 trajectories agree to ~1e-12 (V7), so the same
    // bonds break at the same steps; and the scatter must matter: without it other bonds, or
    // the same ones at other steps, break.
    let mut s = rupturing_torus(1.5);
    s.rupture = Some(serde_json::from_str(r#"{"tension": 0.03, "weibull": {"modulus": 3, "seed": 5}}"#).unwrap());
    let m = s.build_model().unwrap();
    let key = |v: &[BreakEvent]| v.iter().map(|e| (e.step, e.bond, e.mode)).collect::<Vec<_>>();
    let mut all = Vec::new();
    for (name, mut e) in common::engines(&m, s.integrator, s.dt) {
        all.push((name, key(&run_breaks(e.as_mut(), s.total_steps()).0)));
    }
    assert!(!all[0].1.is_empty(), "bonds break by t = 1.5");
    assert_eq!(all[0].1, all[1].1, "{} vs {}", all[0].0, all[1].0);
    let mut plain = m.clone();
    plain.params.rupture.as_mut().unwrap().weibull = None;
    let mut e = CpuEngine::new(&plain, s.integrator, s.dt).unwrap();
    assert_ne!(key(&run_breaks(&mut e, s.total_steps()).0), all[0].1, "the scatter changes which bonds break");
}

/// Every break of a run up to the end of the scenario, taken every 100 steps, with the final
/// diagnostics.
fn run_breaks(e: &mut dyn Engine, steps: u64) -> (Vec<BreakEvent>, rrpdem::diagnostics::Diagnostics) {
    let mut events = e.take_breaks();
    for _ in 0..steps / 100 {
        e.advance(100).unwrap();
        events.extend(e.take_breaks());
    }
    (events, e.diagnostics().unwrap())
}

#[test]
fn gpu_f32_breaks_a_close_set() {
    // f32 round-off (~1e-7 relative) grows through the impact about as e^{5t} (docs/PHYSICS.md,
    // Chaos): ~1e-3 of the motion by the first breaks (t ≈ 1.76) and O(1) soon after, so f32
    // cannot break the same bonds at the same steps; a documented close set is what it gives:
    // - the first breaks (the bonds the impact loads most, before the chaos takes over) are the
    //   CPU's: each of the CPU's breaks before t = 2 is an f32 break of the same bond, in the
    //   same mode, within 50 steps (a 1e-3 change of a loading that takes ~1.7 time units moves
    //   the crossing by a few steps per 1e-3; 15–20 measured);
    // - by t = 4 the f32 count is one the system itself gives under perturbations of f32's size:
    //   the count of the chaotic phase is not a property of the model but of its last digits, so
    //   the reference is the range of counts of 96 CPU runs whose initial velocities are
    //   perturbed by 1e-7 relative (measured: 2 breaks in 9 runs, 3 in 21, 4 in 40, 5 in 24, 6
    //   in 3; the unperturbed run gives 2, f32 gives 4–6 depending on its rounding, e.g. with
    //   the grid cell that sets its position blocks), and at least half the CPU's breaks are
    //   matched as above;
    // - E_released books each f32 event's energy (sum of the events, n_broken their count).
    let s = rupturing_torus(4.0);
    let m = s.build_model().unwrap();
    let mut c = CpuEngine::new(&m, s.integrator, s.dt).unwrap();
    let mut g =
        GpuEngine::new(&m, s.integrator, s.dt, Precision::F32, AdapterChoice::Any).unwrap_or_else(|e| panic!("{e}"));
    let (cpu, _) = run_breaks(&mut c, s.total_steps());
    let (f32_events, d) = run_breaks(&mut g, s.total_steps());
    let show = |v: &[BreakEvent]| v.iter().map(|e| (e.step, e.bond, e.mode)).collect::<Vec<_>>();
    eprintln!("CPU breaks {:?}\nf32 breaks {:?}", show(&cpu), show(&f32_events));
    let matched = |e: &BreakEvent| {
        f32_events.iter().any(|f| f.bond == e.bond && f.mode == e.mode && f.step.abs_diff(e.step) <= 50)
    };
    let early: Vec<&BreakEvent> = cpu.iter().filter(|e| e.t < 2.0).collect();
    assert!(!early.is_empty(), "the CPU breaks bonds before t = 2");
    assert!(early.iter().all(|e| matched(e)), "every early CPU break is an f32 break");
    let mut counts: Vec<usize> = {
        use rayon::prelude::*;
        (0..96u64)
            .into_par_iter()
            .map(|k| {
                let mut rng = common::Rng(0x5eed_0f32 + k);
                let mut p = m.clone();
                for v in &mut p.particles.v {
                    *v *= DVec3::new(1.0 + 1e-7 * rng.range(-1.0, 1.0), 1.0 + 1e-7 * rng.range(-1.0, 1.0), 1.0);
                }
                let mut e = CpuEngine::new(&p, s.integrator, s.dt).unwrap();
                run_breaks(&mut e, s.total_steps()).0.len()
            })
            .collect()
    };
    counts.push(cpu.len());
    let (lo, hi) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
    eprintln!("CPU counts under 1e-7 perturbations: {counts:?}; f32: {}", f32_events.len());
    assert!(
        (lo..=hi).contains(&f32_events.len()),
        "f32 breaks {} bonds, perturbed CPU runs {lo}..{hi}",
        f32_events.len()
    );
    assert!(2 * cpu.iter().filter(|e| matched(e)).count() >= cpu.len());
    assert!(f32_events.windows(2).all(|w| (w[0].step, w[0].bond) < (w[1].step, w[1].bond)), "step, then bond order");
    let booked: f64 = f32_events.iter().map(|e| e.energy).sum();
    assert_eq!((d.n_broken, d.e_released), (f32_events.len() as u64, booked));
}

#[test]
fn shuffled_bond_list_breaks_the_same_pairs() {
    // Weibull scatter over a torus: the factor belongs to the pair (i, j), not to the bond's
    // position in the list. Reversing the list changes only the summation order (round-off),
    // so up to t = 1 the same pairs break at the same steps.
    let mut s = rupturing_torus(1.0);
    s.rupture = Some(serde_json::from_str(r#"{"tension": 0.03, "weibull": {"modulus": 3, "seed": 5}}"#).unwrap());
    let m = s.build_model().unwrap();
    let mut reversed = m.clone();
    reversed.bonds.reverse();
    let mut runs = Vec::new();
    for model in [&m, &reversed] {
        let mut e = CpuEngine::new(model, s.integrator, s.dt).unwrap();
        e.advance(s.total_steps()).unwrap();
        let mut ev: Vec<(u64, u32, u32)> =
            e.take_breaks().iter().map(|e| (e.step, e.i.min(e.j), e.i.max(e.j))).collect();
        ev.sort();
        runs.push(ev);
    }
    assert!(!runs[0].is_empty(), "bonds break");
    assert_eq!(runs[0], runs[1]);
}
