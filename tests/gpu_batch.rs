//! The GPU ensemble engine: many replicas (variants of the paper torus, overlapping in space) in
//! one GPU state. Each replica's trajectory, diagnostics and breaks are bit for bit those of its
//! model run alone, in f32 and f64, at any position in the batch; a failing replica is frozen
//! and reported with its own particle index while the others go on; a replica's saved state
//! continues in a one-replica engine; `split_batches` respects the binding limit and budget.

mod common;

use common::gpu::{bits, scenario_model, small_solid_torus, state_bits};
use rrpdem::engine::{BatchEngine, Engine, Precision};
use rrpdem::error::EngineError;
use rrpdem::gpu::batch::{BatchTotals, binding_sizes, chunked_sizes};
use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions, batch_bytes, split_batches};
use rrpdem::integrator::Integrator;
use rrpdem::interactions::BreakEvent;
use rrpdem::model::Model;
use rrpdem::scenario::Scenario;

const DT: f64 = 1e-3;

fn torus() -> Scenario {
    scenario_model("torus_impact.json").0
}

fn build(s: &Scenario) -> Model {
    s.build_model().unwrap_or_else(|e| panic!("{e}"))
}

/// Distinct variants of the paper torus, all starting in the same place: contact stiffness,
/// speed and gravity, objective shear with different walls, tension rupture (bonds break during the
/// impact), and a small solid torus with rupture (other sizes: a multi-level reduction).
fn variants() -> Vec<Model> {
    let mut out = vec![build(&torus())];
    let mut s = torus();
    s.stiffness.contact = 4000.0;
    s.gravity = glam::DVec3::new(-0.5, -2.0, 0.0);
    s.bodies[0] = serde_json::from_str(
        r#"{ "type": "torus_ring", "n": 80, "torus_diameter": 3, "gap": 0, "velocity": [-1.5, 0.2, 0] }"#,
    )
    .unwrap();
    out.push(build(&s));
    let mut s = torus();
    s.shear = serde_json::from_str(r#""objective""#).unwrap();
    s.stiffness.wall = Some(3000.0);
    s.walls = serde_json::from_str(
        r#"[ { "point": [0, 0, 0], "normal": [1, 0, 0] }, { "point": [0, -1.6, 0], "normal": [0, 1, 0] } ]"#,
    )
    .unwrap();
    out.push(build(&s));
    let mut s = torus();
    s.rupture = Some(serde_json::from_str(r#"{"tension": 0.002}"#).unwrap());
    out.push(build(&s));
    let s = small_solid_torus();
    out.push(build(&s));
    out
}

fn batch(models: &[&Model], integrator: Integrator, p: Precision) -> GpuEngine {
    batch_with(models, integrator, p, GpuOptions::default())
}

fn batch_with(models: &[&Model], integrator: Integrator, p: Precision, options: GpuOptions) -> GpuEngine {
    GpuEngine::new_batch(models, integrator, DT, p, AdapterChoice::Any, options)
        .unwrap_or_else(|e| panic!("GPU batch unavailable: {e}"))
}

fn alone(m: &Model, integrator: Integrator, p: Precision) -> GpuEngine {
    GpuEngine::new(m, integrator, DT, p, AdapterChoice::Any).unwrap_or_else(|e| panic!("{e}"))
}

fn replica_bits(b: &mut dyn BatchEngine, r: usize) -> Vec<u64> {
    let d = b.diagnostics().unwrap()[r];
    state_bits(&b.snapshot(r).unwrap(), &d)
}

fn event_bits(events: &[BreakEvent]) -> Vec<u64> {
    events
        .iter()
        .flat_map(|e| {
            [e.step, e.t.to_bits(), e.bond as u64, e.i as u64, e.j as u64, e.mode as u64, e.energy.to_bits()]
                .into_iter()
                .chain(e.x.to_array().map(f64::to_bits))
        })
        .collect()
}

/// Advances of the runs compared (records in between).
const PLAN: [u64; 3] = [40, 160, 100];

/// Bits of every record of a model run alone along PLAN, and its breaks.
fn alone_run(m: &Model, p: Precision) -> (Vec<Vec<u64>>, Vec<BreakEvent>) {
    alone_run_with(m, p, GpuOptions::default())
}

/// `alone_run` with `options`.
fn alone_run_with(m: &Model, p: Precision, options: GpuOptions) -> (Vec<Vec<u64>>, Vec<BreakEvent>) {
    let mut e = GpuEngine::with_options(m, Integrator::RrpNewmark, DT, p, AdapterChoice::Any, options)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut records = vec![bits(&mut e)];
    for steps in PLAN {
        Engine::advance(&mut e, steps).unwrap();
        records.push(bits(&mut e));
    }
    (records, Engine::take_breaks(&mut e))
}

/// Runs the batch of `order` (indices into `models`) along PLAN and checks every replica's
/// records and breaks against its model alone.
fn check_batch(
    models: &[Model],
    order: &[usize],
    want: &[(Vec<Vec<u64>>, Vec<BreakEvent>)],
    p: Precision,
    options: GpuOptions,
) -> u64 {
    let refs: Vec<&Model> = order.iter().map(|&k| &models[k]).collect();
    let mut g = batch_with(&refs, Integrator::RrpNewmark, p, options);
    let b: &mut dyn BatchEngine = &mut g;
    assert_eq!(b.replicas(), order.len());
    let check = |b: &mut dyn BatchEngine, rec: usize| {
        for (r, &k) in order.iter().enumerate() {
            assert!(replica_bits(b, r) == want[k].0[rec], "{p:?}: replica {r} (variant {k}) differs at record {rec}");
        }
    };
    check(b, 0);
    for (rec, steps) in PLAN.into_iter().enumerate() {
        b.advance(steps).unwrap();
        check(b, rec + 1);
    }
    let breaks = b.take_breaks();
    assert!(breaks.windows(2).all(|w| (w[0].0, w[0].1.step, w[0].1.bond) <= (w[1].0, w[1].1.step, w[1].1.bond)));
    for (r, &k) in order.iter().enumerate() {
        assert!(b.take_failure(r).is_none());
        let mine: Vec<BreakEvent> = breaks.iter().filter(|(q, _)| *q == r).map(|(_, e)| *e).collect();
        assert!(event_bits(&mine) == event_bits(&want[k].1), "{p:?}: replica {r} (variant {k}) breaks differ");
    }
    g.fallback_steps()
}

#[test]
fn every_replica_equals_its_model_alone_bit_for_bit_f32_and_f64() {
    let models = variants();
    for p in [Precision::F32, Precision::F64] {
        let want: Vec<_> = models.iter().map(|m| alone_run(m, p)).collect();
        for k in [3, 4] {
            assert!(!want[k].1.is_empty(), "{p:?}: variant {k} should break bonds within the run");
        }
        // In order, and reversed with the first repeated (other positions, a duplicate).
        let plain = GpuOptions::default();
        check_batch(&models, &[0, 1, 2, 3, 4], &want, p, plain);
        check_batch(&models, &[4, 3, 2, 1, 0, 0], &want, p, plain);
        // Lists of capacity 1 that cannot grow: the batch falls back to the grid throughout
        // (rebuilt every step), yet every replica still equals its model alone.
        let order = [2, 4, 0];
        let refs: Vec<&Model> = order.iter().map(|&k| &models[k]).collect();
        let budget = Some(batch_bytes(&refs, p, 1));
        // (Bonded pairs listed: left out, the lists of a resting torus are empty and fit. Listed,
        // their contacts are visited from both ends, not with the bonds: another summation
        // order, so each replica is compared with its model alone and listed.)
        let tiny = GpuOptions { nbr_capacity: Some(1), memory_budget: budget, list_bonded_pairs: true, ..plain };
        let listed = GpuOptions { list_bonded_pairs: true, ..plain };
        let want_listed: Vec<_> = models.iter().map(|m| alone_run_with(m, p, listed)).collect();
        assert_eq!(check_batch(&models, &order, &want_listed, p, tiny), PLAN.iter().sum::<u64>());
    }
}

/// A pendulum whose spin breaks rrp-exact's condition after a few steps (as in gpu_errors.rs).
fn fast_pendulum() -> Model {
    common::gpu::model_from_json(
        r#"{ "name": "fast_pendulum", "dt": 1e-3, "t_end": 1, "integrator": "rrp-exact",
             "particle": { "mass": 1, "inertia": 1, "diameter": 1 }, "pendulum": { "g": 400000 },
             "bodies": [ { "type": "pendulum", "alpha": [0, 4.82842712474619, 0] } ] }"#,
    )
    .1
}

#[test]
fn a_failing_replica_is_frozen_and_reported_while_the_others_go_on() {
    let models = variants();
    let mut wild = torus();
    wild.bodies[0] = serde_json::from_str(
        r#"{ "type": "torus_ring", "n": 80, "torus_diameter": 3, "gap": 0, "velocity": [1e30, 0, 0] }"#,
    )
    .unwrap();
    let wild = build(&wild);
    let pendulum = fast_pendulum();
    let order: Vec<&Model> = vec![&models[0], &pendulum, &models[3], &wild, &models[2]];
    for p in [Precision::F32, Precision::F64] {
        let i = Integrator::RrpExact;
        // Alone: the two failing models fail at some step of the first advance of 50.
        let mut expected: Vec<Option<String>> = Vec::new();
        let mut good = Vec::new();
        for m in &order {
            let mut e = alone(m, i, p);
            let start = bits(&mut e);
            let mut runs = vec![];
            let mut failure = None;
            for steps in [50, 50] {
                match Engine::advance(&mut e, steps) {
                    Ok(()) => runs.push(bits(&mut e)),
                    Err(err) => {
                        failure = Some(err.to_string());
                        break;
                    }
                }
            }
            expected.push(failure);
            good.push((start, runs));
        }
        assert!(expected[1].is_some() && expected[3].is_some(), "{p:?}: {expected:?}");
        let mut g = batch(&order, i, p);
        let b: &mut dyn BatchEngine = &mut g;
        let mut seen = 0;
        for steps in [50, 50] {
            b.advance(steps).unwrap();
            for r in [1, 3] {
                if let Some(e) = b.take_failure(r) {
                    seen += 1;
                    assert_eq!(Some(e.to_string()), expected[r], "{p:?}: replica {r}");
                    match r {
                        1 => assert!(matches!(e, EngineError::RrpExactCondition { particle: 0, .. }), "{e}"),
                        _ => assert!(matches!(e, EngineError::OutOfRange { .. }), "{e}"),
                    }
                }
            }
        }
        assert_eq!(seen, 2, "{p:?}: both failures reported once");
        // The failed replicas are back at their start (the start of the advance that failed)
        // and frozen there; the others equal their runs alone.
        for r in [1, 3] {
            assert!(replica_bits(b, r) == good[r].0, "{p:?}: failed replica {r} not rolled back to its start");
            assert!(b.take_failure(r).is_none());
        }
        for r in [0, 2, 4] {
            assert!(replica_bits(b, r) == good[r].1[1], "{p:?}: replica {r} differs from its run alone");
        }
        assert_eq!(b.steps_done(), 100);
        // Frozen replicas stay; the others still go on.
        b.freeze(4);
        let frozen = replica_bits(b, 4);
        b.advance(10).unwrap();
        assert!(replica_bits(b, 4) == frozen && replica_bits(b, 1) == good[1].0);
        assert!(b.largest_force(3).unwrap().is_some());
    }
}

#[test]
fn a_replicas_saved_state_continues_in_a_one_replica_engine() {
    let models = variants();
    for p in [Precision::F32, Precision::F64] {
        let refs: Vec<&Model> = models.iter().collect();
        let mut g = batch(&refs, Integrator::RrpNewmark, p);
        BatchEngine::advance(&mut g, 120).unwrap();
        for r in [1, 3, 4] {
            let saved = BatchEngine::save_state(&mut g, r).unwrap();
            // Exactly what the model alone writes at that step.
            let mut a = alone(&models[r], Integrator::RrpNewmark, p);
            Engine::advance(&mut a, 120).unwrap();
            assert!(Engine::save_state(&mut a).unwrap() == saved, "{p:?}: replica {r}'s state differs from alone");
            let mut resumed = alone(&models[r], Integrator::RrpNewmark, p);
            resumed.load_state(&saved).unwrap();
            Engine::advance(&mut a, 60).unwrap();
            Engine::advance(&mut resumed, 60).unwrap();
            assert!(bits(&mut a) == bits(&mut resumed), "{p:?}: replica {r} resumed alone differs");
        }
        // A batch's rollback of one replica: back to the start of the last advance, the others
        // untouched.
        let before: Vec<Vec<u64>> = (0..5).map(|r| replica_bits(&mut g, r)).collect();
        BatchEngine::advance(&mut g, 30).unwrap();
        let after: Vec<Vec<u64>> = (0..5).map(|r| replica_bits(&mut g, r)).collect();
        BatchEngine::rollback(&mut g, 2).unwrap();
        BatchEngine::freeze(&mut g, 2);
        assert!(replica_bits(&mut g, 2) == before[2]);
        for r in [0, 1, 3, 4] {
            assert!(replica_bits(&mut g, r) == after[r], "{p:?}: rollback of replica 2 touched replica {r}");
        }
        // The one-model interface refuses a batch of several; a batch needs a model.
        assert!(matches!(Engine::snapshot(&mut g), Err(EngineError::Unsupported(_))));
        let none = GpuEngine::new_batch(&[], Integrator::RrpNewmark, DT, p, AdapterChoice::Any, GpuOptions::default());
        assert!(matches!(none, Err(rrpdem::gpu::GpuError::EmptyBatch)));
    }
}

/// What `split_batches` keeps within one binding: the arrays bound whole and, for a study's
/// batches, those that could be bound in parts too (the lists at their initial capacity).
fn all_sizes(t: &BatchTotals, p: Precision) -> Vec<(&'static str, u64)> {
    binding_sizes(t, p).into_iter().chain(chunked_sizes(t, p, t.initial_nbr_capacity())).collect()
}

/// `batch_bytes` of `models` with their lists at their initial capacity.
fn initial_bytes(models: &[&Model], p: Precision) -> u64 {
    batch_bytes(models, p, BatchTotals::of(models).initial_nbr_capacity())
}

#[test]
fn split_batches_respects_the_binding_limit_and_the_budget() {
    let models = variants();
    let refs: Vec<&Model> = [0, 1, 4, 2, 3, 4, 0].iter().map(|&k| &models[k]).collect();
    let p = Precision::F32;
    // No limits to speak of: one batch.
    assert_eq!(split_batches(&refs, p, (u64::MAX, None)), vec![0..refs.len()]);
    // A binding limit that two tori fit but not three (nor a torus with the solid one).
    let two = BatchTotals::of(&refs[..2]);
    let limit = all_sizes(&two, p).iter().map(|s| s.1).max().unwrap();
    let ranges = split_batches(&refs, p, (limit, None));
    let mut next = 0;
    for r in &ranges {
        assert_eq!(r.start, next);
        next = r.end;
        assert!(!r.is_empty());
        let sizes = all_sizes(&BatchTotals::of(&refs[r.clone()]), p);
        assert!(r.len() == 1 || sizes.iter().all(|s| s.1 <= limit), "{r:?}: {sizes:?}");
        // Greedy: the next replica would not have fitted.
        if r.end < refs.len() {
            let more = all_sizes(&BatchTotals::of(&refs[r.start..r.end + 1]), p);
            assert!(more.iter().any(|s| s.1 > limit), "{r:?} could have taken one more");
        }
    }
    assert_eq!(next, refs.len());
    assert!(ranges.len() >= 3, "{ranges:?}");
    // A memory budget: each batch's bytes within it.
    let budget = initial_bytes(&refs[..3], p);
    let ranges = split_batches(&refs, p, (u64::MAX, Some(budget)));
    assert!(ranges.iter().all(|r| r.len() == 1 || initial_bytes(&refs[r.clone()], p) <= budget), "{ranges:?}");
    assert_eq!(ranges.first(), Some(&(0..3)));
    // The device's own limits, as new_batch applies them.
    let options = GpuOptions { max_binding_size: Some(limit), memory_budget: Some(budget), ..Default::default() };
    let limits = GpuEngine::batch_limits(AdapterChoice::Any, p, options).unwrap();
    assert_eq!(limits, (limit, Some(budget)));
    let (device_binding, _) = GpuEngine::batch_limits(AdapterChoice::Any, p, GpuOptions::default()).unwrap();
    assert!(device_binding >= 1 << 27, "lavapipe binds 128 MiB: {device_binding}");
    // The estimate is what the engine allocates.
    for p in [Precision::F32, Precision::F64] {
        let g = batch(&refs, Integrator::RrpNewmark, p);
        assert_eq!(g.device_bytes(), batch_bytes(&refs, p, g.neighbour_capacity()), "{p:?}");
        let one = alone(&models[4], Integrator::RrpNewmark, p);
        assert_eq!(one.device_bytes(), batch_bytes(&refs[2..3], p, one.neighbour_capacity()), "{p:?}");
    }
}

/// Issue 10's arithmetic from the buffer plan itself (`planned_sizes`, which equals what the
/// engine allocates for unpaged arrays, tested above; pages add their padding and the overlap
/// of the incidence and lists, a few kB each, and the halo comes at planning): 10⁸ particles of the FCC solid torus with 6 bonds per
/// particle (the lattice's interior, 12 neighbours; the surface has fewer: 5.71 at 10⁵, 5.94 at
/// 10⁷) fit an H100 "80 GB" (81 559 MiB) in f32, with the neighbour lists at their initial
/// capacity (4 slots: the lists leave the 12 bonded neighbours out, and the sorted bonded
/// partners take 8 B per bond beside the incidence) and 2 GiB to spare for the driver, with
/// rupture too; and the bond results, beyond the H100's 4 GiB buffers, go into pages.
#[test]
fn a_solid_torus_of_1e8_particles_fits_an_h100_in_f32() {
    use rrpdem::gpu::batch::{BatchTotals, planned_sizes};
    use rrpdem::gpu::chunks::Pages;
    let m = rrpdem::bench::solid_torus(100_000).unwrap();
    let per = m.bonds.len() as f64 / m.particles.len() as f64;
    assert!((5.5..6.0).contains(&per), "{per} bonds per particle");
    let mut one = BatchTotals::of(&[&m]);
    assert!(!one.bond_attitudes && !one.bond_refs, "a fresh model's references come from its particles");
    let n = 100_000_000u64;
    let nb = 6 * n;
    // The reduction levels of one replica: ⌈max(N, B)/WG⌉ records, then ⌈·/WG⌉ … down to one.
    let wg = rrpdem::gpu::shader::WG as u64;
    let mut levels = vec![n.max(nb).div_ceil(wg)];
    while *levels.last().unwrap() > 1 {
        levels.push(levels.last().unwrap().div_ceil(wg));
    }
    (one.n, one.nb, one.level_records, one.unlisted_bonds) = (n, nb, levels, nb);
    let cap = one.initial_nbr_capacity();
    assert_eq!(cap, 4);
    let bytes: u64 = planned_sizes(&one, Precision::F32, cap).iter().sum();
    let h100 = 81_559u64 << 20;
    eprintln!(
        "10^8 particles, {nb} bonds: {:.1} GB ({:.1} GiB) of {:.1} GiB",
        bytes as f64 / 1e9,
        bytes as f64 / (1u64 << 30) as f64,
        h100 as f64 / (1u64 << 30) as f64
    );
    assert!(bytes + (2u64 << 30) < h100, "{bytes} B do not leave 2 GiB of an H100's {h100}");
    // Per particle: 389 B with 72 B per bond at 6 bonds per particle (4 list slots; 393 B at
    // docs/BENCHMARKS.md's 5.94, 5 slots; 437 B and 64 B while the lists held the bonded
    // neighbours in 16 slots).
    let per_particle = (bytes - 72 * nb) as f64 / n as f64;
    assert!((382.0..397.0).contains(&per_particle), "{per_particle} B per particle");
    // With rupture (no Weibull scatter): 2 bits of flags per bond and 2²² break records.
    one.rupture = true;
    one.broken_words = nb.div_ceil(32);
    let with_rupture: u64 = planned_sizes(&one, Precision::F32, cap).iter().sum();
    eprintln!(
        "  with rupture: {:.1} GB ({:.1} GiB)",
        with_rupture as f64 / 1e9,
        with_rupture as f64 / (1u64 << 30) as f64
    );
    assert!(with_rupture + (2u64 << 30) < h100, "with rupture {with_rupture} B do not leave 2 GiB of {h100}");
    assert!(with_rupture - bytes < 400 << 20, "rupture costs {} B", with_rupture - bytes);
    let buffer = 4094u64 << 20;
    let pages = Pages::new(nb, 48, buffer, 0).unwrap();
    assert_eq!(pages.count(), (48 * nb).div_ceil(pages.step * 48) as usize);
    assert!(pages.count() >= 7, "the bond results take {} pages", pages.count());
}
