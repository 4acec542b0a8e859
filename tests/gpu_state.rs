//! Saved states, rollback and the largest-force report of the GPU engine (issue 6): a state
//! saved after K steps and loaded into a fresh engine continues bit-identically to one run of
//! K + M steps, in f32 and f64, with contacts active; `rollback` returns to the start of the last
//! `advance`, also after a failure; saved states of another kind or size are refused. With
//! rupture, the broken flags, `E_released` and `n_broken` are part of the state: a resumed
//! rupturing torus breaks the same bonds with the same bits, and `rollback` forgets the breaks
//! after the step it returns to.

mod common;

use common::gpu::*;
use rrpdem::engine::{Engine, EngineState, Precision};
use rrpdem::error::EngineError;
use rrpdem::integrator::Integrator;
use rrpdem::interactions::BreakEvent;
use rrpdem::model::Model;

/// Every bit of a list of break events.
fn event_bits(events: &[BreakEvent]) -> Vec<u64> {
    events
        .iter()
        .flat_map(|e| {
            [e.step, e.bond as u64, e.i as u64, e.j as u64, e.mode as u64]
                .into_iter()
                .chain([e.t, e.x.x, e.x.y, e.x.z, e.energy].map(f64::to_bits))
        })
        .collect()
}

/// The paper torus with bending rupture at 0.3 rad (V9): the first bonds break at t ≈ 1.74–1.76
/// (f32, f64), more after t = 3.3 (f32) or 5.1 (f64).
fn rupturing_torus() -> (rrpdem::scenario::Scenario, Model) {
    let mut s = common::scenario("torus_impact.json");
    s.rupture = Some(serde_json::from_str(r#"{"bending": 0.3}"#).unwrap());
    let m = s.build_model().unwrap_or_else(|e| panic!("{e}"));
    (s, m)
}

/// Runs K + M steps three ways: straight through; K, save, and M more in a fresh engine that
/// loaded the state; and checks that both give the same bits. Returns the diagnostics at K.
fn save_load_continues(m: &Model, integrator: Integrator, dt: f64, p: Precision, k: u64, steps: u64) {
    let mut straight = gpu(m, integrator, dt, p);
    straight.advance(k + steps).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    let mut first = gpu(m, integrator, dt, p);
    first.advance(k).unwrap();
    let saved = first.save_state().unwrap();
    assert_eq!((saved.kind.as_str(), saved.step), (if p == Precision::F32 { "gpu-f32" } else { "gpu-f64" }, k));
    let at_save = bits(&mut first);
    let mut resumed = gpu(m, integrator, dt, p);
    resumed.load_state(&saved).unwrap();
    assert_eq!(resumed.steps_done(), k);
    // The reloaded engine re-evaluates forces and diagnostics from the raw state: same bits.
    assert!(bits(&mut resumed) == at_save, "{p:?}: state right after load_state differs");
    resumed.advance(steps).unwrap();
    assert_eq!(resumed.steps_done(), straight.steps_done());
    assert!(bits(&mut resumed) == bits(&mut straight), "{p:?}: resumed run differs from the straight run");
}

#[test]
fn torus_resumed_from_a_saved_state_is_bit_identical_f32_and_f64() {
    // The ring touches the wall from t = 0 and its particles press into each other as it
    // flattens: at K = 1500 (t = 1.5) wall and particle contacts are both active, so the
    // resumed engine's neighbour lists (rebuilt at load) differ from the straight run's.
    let (s, m) = scenario_model("torus_impact.json");
    let mut c = cpu(&m, Integrator::RrpNewmark, s.dt);
    c.advance(1500).unwrap();
    let d = c.diagnostics().unwrap();
    eprintln!("torus at K = 1500: U_wall = {:.3e}, U_contact = {:.3e}", d.u_wall, d.u_contact);
    assert!(d.u_wall > 0.0 || d.u_contact > 0.0, "no contact at the save point: the test would prove little");
    for p in [Precision::F64, Precision::F32] {
        save_load_continues(&m, Integrator::RrpNewmark, s.dt, p, 1500, 1500);
    }
}

/// `lattice_model` without bonds, its particles numbered in random order and squeezed by six
/// walls, so that every particle keeps several overlapping neighbours while it jiggles across
/// cell boundaries. Numbered along the lattice, the grid's neighbour order (cells by offset,
/// then index) would coincide with index order, and an unsorted list would go unnoticed.
fn boxed_cloud(side: usize, spacing: f64, seed: u64) -> Model {
    use glam::DVec3;
    use rrpdem::interactions::Wall;
    use rrpdem::model::Particles;
    let m = lattice_model(side, side, side, spacing, false, seed);
    let n = m.particles.len();
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = common::Rng(seed ^ 0x5eed);
    for i in (1..n).rev() {
        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let src = &m.particles;
    let mut p = Particles::default();
    for &k in &order {
        p.push(src.x[k], src.v[k], src.q[k], src.w[k], src.mass[k], src.inertia[k], src.radius[k], src.fixed[k]);
    }
    // Lattice sites run from 0 to (side − 1)·spacing in x and y, and from spacing/2 up in z;
    // the walls sit 0.45 beyond the outer sites, overlapping the outer spheres (radius 0.5).
    let hi = (side as f64 - 1.0) * spacing + 0.45;
    let mut params = m.params.clone();
    params.walls = vec![
        Wall { point: DVec3::ZERO, normal: DVec3::Z },
        Wall { point: DVec3::new(0.0, 0.0, hi + 0.5 * spacing), normal: -DVec3::Z },
        Wall { point: DVec3::new(-0.45, 0.0, 0.0), normal: DVec3::X },
        Wall { point: DVec3::new(hi, 0.0, 0.0), normal: -DVec3::X },
        Wall { point: DVec3::new(0.0, -0.45, 0.0), normal: DVec3::Y },
        Wall { point: DVec3::new(0.0, hi, 0.0), normal: -DVec3::Y },
    ];
    Model::new(p, &[], params)
}

#[test]
fn unbonded_cloud_resumed_from_a_saved_state_is_bit_identical_f32_and_f64() {
    // Squeezed unbonded spheres, numbered at random: every force between particles comes through
    // the contact search, with several overlaps per particle throughout, and particles move far
    // enough (v ~ 0.5, skin/2 = 0.15) for the straight run to rebuild its lists at other steps,
    // with other cell assignments, than the resumed one.
    let m = boxed_cloud(6, 0.95, 7);
    let dt = 2e-4;
    let mut c = cpu(&m, Integrator::RrpNewmark, dt);
    c.advance(700).unwrap();
    let d = c.diagnostics().unwrap();
    let rebuilds = c.neighbour_rebuilds();
    eprintln!(
        "boxed cloud at K = 700: U_contact = {:.3e}, U_wall = {:.3e}, {rebuilds} CPU list rebuilds",
        d.u_contact, d.u_wall
    );
    assert!(d.u_contact > 0.0 && d.u_wall > 0.0 && rebuilds > 1);
    for (p, integ) in [
        (Precision::F64, Integrator::RrpNewmark),
        (Precision::F32, Integrator::RrpNewmark),
        (Precision::F64, Integrator::RrpExact),
        (Precision::F64, Integrator::Campello),
    ] {
        save_load_continues(&m, integ, dt, p, 700, 700);
    }
}

#[test]
fn state_of_another_kind_or_size_is_refused() {
    let (s, m) = scenario_model("torus_impact.json");
    let mut g32 = gpu(&m, Integrator::RrpNewmark, s.dt, Precision::F32);
    let mut g64 = gpu(&m, Integrator::RrpNewmark, s.dt, Precision::F64);
    let saved32 = g32.save_state().unwrap();
    // Origin (3 f64), four vec4 arrays of 80 particles in f32 and their blocks (vec4<i32>).
    assert_eq!(saved32.data.len(), 24 + 4 * 16 * 80 + 16 * 80);
    let e = g64.load_state(&saved32).unwrap_err();
    assert!(e.to_string().contains("gpu-f32") && e.to_string().contains("gpu-f64"), "{e}");
    let cpu_state = cpu(&m, Integrator::RrpNewmark, s.dt).save_state().unwrap();
    assert!(g64.load_state(&cpu_state).is_err());
    let truncated = EngineState { data: saved32.data[..saved32.data.len() - 4].to_vec(), ..saved32.clone() };
    let e = g32.load_state(&truncated).unwrap_err();
    assert!(matches!(e, EngineError::Unsupported(_)) && e.to_string().contains("bytes"), "{e}");
    assert!(!e.to_string().contains("no blocks"), "{e}");
    // A state of the layout before f32 positions had blocks (16 bytes per particle fewer).
    let older = EngineState { data: saved32.data[..saved32.data.len() - 16 * 80].to_vec(), ..saved32.clone() };
    let e = g32.load_state(&older).unwrap_err();
    assert!(e.to_string().contains("f32 positions had no blocks"), "{e}");
}

#[test]
fn rollback_returns_to_the_start_of_the_last_advance() {
    let (s, m) = scenario_model("torus_impact.json");
    for p in [Precision::F64, Precision::F32] {
        let mut g = gpu(&m, Integrator::RrpNewmark, s.dt, p);
        // Nothing to return to yet: a no-op.
        let initial = bits(&mut g);
        g.rollback().unwrap();
        assert!(bits(&mut g) == initial);
        g.advance(300).unwrap();
        let at_300 = bits(&mut g);
        g.advance(200).unwrap();
        let at_500 = bits(&mut g);
        g.rollback().unwrap();
        assert_eq!(g.steps_done(), 300, "{p:?}");
        assert!(bits(&mut g) == at_300, "{p:?}: rollback did not restore step 300");
        // Stepping on from the restored state repeats the same steps exactly.
        g.advance(200).unwrap();
        assert!(bits(&mut g) == at_500, "{p:?}: the repeated steps differ");
        // advance(0) moves the rollback point too.
        g.advance(0).unwrap();
        g.rollback().unwrap();
        assert!(bits(&mut g) == at_500, "{p:?}");
    }
}

#[test]
fn rollback_after_a_failure_restores_the_last_good_state() {
    // The fast pendulum of gpu_errors.rs breaks rrp-exact's condition after a few steps.
    let (s, m) = model_from_json(
        r#"{ "name": "fast_pendulum", "dt": 1e-3, "t_end": 1, "integrator": "rrp-exact",
             "particle": { "mass": 1, "inertia": 1, "diameter": 1 }, "pendulum": { "g": 400000 },
             "bodies": [ { "type": "pendulum", "alpha": [0, 4.82842712474619, 0] } ] }"#,
    );
    let mut g = gpu(&m, Integrator::RrpExact, s.dt, Precision::F64);
    g.advance(1).unwrap();
    let good = bits(&mut g);
    let e = g.advance(100).unwrap_err();
    assert!(matches!(e, EngineError::RrpExactCondition { .. }), "{e}");
    assert!(g.steps_done() > 1);
    g.rollback().unwrap();
    assert_eq!(g.steps_done(), 1);
    assert!(bits(&mut g) == good, "rollback after the failure did not restore step 1");
}

#[test]
fn largest_force_names_the_cpus_particle() {
    // The cloud's forces are all distinct (random jitter), so the index is unambiguous.
    let m = lattice_model(6, 6, 6, 0.95, true, 3);
    let dt = 2e-4;
    let mut c = cpu(&m, Integrator::RrpNewmark, dt);
    let mut g = gpu(&m, Integrator::RrpNewmark, dt, Precision::F64);
    for steps in [0, 50] {
        c.advance(steps).unwrap();
        g.advance(steps).unwrap();
        let (ci, cf) = c.largest_force().unwrap().unwrap();
        let (gi, gf) = g.largest_force().unwrap().unwrap();
        eprintln!("after {steps} steps: CPU particle {ci} |F| = {cf:e}, GPU particle {gi} |F| = {gf:e}");
        assert_eq!(gi, ci);
        // f64 on both, the same operations up to summation order over a few dozen terms.
        assert!((gf - cf).abs() <= 1e-12 * cf, "|F| {gf:e} vs {cf:e}");
    }
    // 216 particles: the driver stops every 1000 steps (the device watches every step; below
    // 2·10⁵ particles the stops are capped at 1000 steps, above 2·10⁶ they come every 100).
    assert_eq!(g.guard_interval(), 1000);
}

#[test]
fn rupturing_torus_resumed_from_a_saved_state_is_bit_identical_f32_and_f64() {
    // Saved at K = 2000, after the first breaks, and continued to t = 6, through later ones:
    // the broken flags, E_released and n_broken travel with the state, and the resumed engine
    // neither breaks a bond again nor misses one.
    let (s, m) = rupturing_torus();
    let (k, more) = (2000, 4000);
    for p in [Precision::F64, Precision::F32] {
        let mut straight = gpu(&m, s.integrator, s.dt, p);
        straight.advance(k + more).unwrap();
        let all = straight.take_breaks();
        let mut first = gpu(&m, s.integrator, s.dt, p);
        first.advance(k).unwrap();
        let mut events = first.take_breaks();
        let saved = first.save_state().unwrap();
        // f32 positions carry their blocks (16 bytes per particle).
        let (rs, blocks) = if p == Precision::F32 { (4, 16) } else { (8, 0) };
        assert_eq!(
            saved.data.len(),
            24 + (16 * rs + blocks) * 80 + 16 + 4 * 80,
            "{p:?}: origin, arrays, totals, flags"
        );
        let mut resumed = gpu(&m, s.integrator, s.dt, p);
        resumed.load_state(&saved).unwrap();
        assert!(bits(&mut resumed) == bits(&mut first), "{p:?}: state right after load_state differs");
        resumed.advance(more).unwrap();
        events.extend(resumed.take_breaks());
        let before = all.iter().filter(|e| e.step <= k).count();
        eprintln!("{p:?}: {} breaks, {before} before the save", all.len());
        assert!(before > 0 && all.len() > before, "{p:?}: breaks before and after the save point");
        assert!(event_bits(&events) == event_bits(&all), "{p:?}: the resumed run's breaks differ");
        assert!(bits(&mut resumed) == bits(&mut straight), "{p:?}: resumed run differs from the straight run");
        // A state without rupture does not fit an engine with rupture (and says why).
        let plain = gpu(&scenario_model("torus_impact.json").1, s.integrator, s.dt, p).save_state().unwrap();
        let e = resumed.load_state(&plain).unwrap_err();
        assert!(e.to_string().contains("with rupture"), "{e}");
    }
}

#[test]
fn rollback_forgets_the_breaks_after_the_step_it_returns_to() {
    let (s, m) = rupturing_torus();
    for p in [Precision::F64, Precision::F32] {
        let mut g = gpu(&m, s.integrator, s.dt, p);
        g.advance(1700).unwrap();
        assert!(g.take_breaks().is_empty(), "{p:?}: no break before t = 1.7");
        let at_1700 = bits(&mut g);
        g.advance(300).unwrap();
        let at_2000 = bits(&mut g);
        assert!(g.diagnostics().unwrap().n_broken > 0, "{p:?}: bonds break by t = 2");
        // Breaks not yet taken are dropped with the steps they belong to; the flags and the
        // totals return to step 1700.
        g.rollback().unwrap();
        assert!(bits(&mut g) == at_1700, "{p:?}: rollback did not restore step 1700");
        assert!(g.take_breaks().is_empty(), "{p:?}: breaks after the rollback step remain");
        g.advance(300).unwrap();
        assert!(bits(&mut g) == at_2000, "{p:?}: the repeated steps differ");
        let again = g.take_breaks();
        assert_eq!(again.len() as u64, g.diagnostics().unwrap().n_broken, "{p:?}: each break once");
    }
}
