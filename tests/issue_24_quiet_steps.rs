//! Issue 24: batches whose replicas rebuild rarely record the grid stage only at grid steps.
//!
//! A replica that rebuilt at most once per `EARLY_INTERVAL` steps in its last batch also
//! rebuilds at a grid step (absolute step a multiple of `GRID_PERIOD`) where it has moved
//! `EARLY_FRACTION` of half a skin, and a batch of such replicas records the grid stage only at
//! its first step and its grid steps: the other steps record none of its dispatches (docs/GPU.md,
//! "Quiet steps"). Should a replica need a rebuild between grid steps after all (an impact),
//! the device stops the batch at that step and the host finishes it from there with the grid
//! stage in every step. Rebuild times never change a force (the lists are in index order), so
//! every result must equal, bit for bit, that of an engine that records the grid stage in every
//! step and rebuilds only where the skin rule requires (`GpuOptions::grid_every_step`, the
//! behaviour before).

mod common;
use common::gpu::{bits, model_from_json};
use rrpdem::engine::{Engine, Precision, RecordedSteps, Watch};
use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
use rrpdem::integrator::Integrator;
use rrpdem::model::Model;

/// An fcc block of spheres (D = 0.1) with a breaking binder, its nearest face `gap` from a wall
/// at x = 0, flying at it at speed `v` with a spin `w` about z.
fn block_at_wall(v: f64, w: f64, gap: f64) -> String {
    block_at_wall_with(v, w, gap, "")
}

/// `block_at_wall` with more top-level fields (`extra`, each followed by a comma).
fn block_at_wall_with(v: f64, w: f64, gap: f64, extra: &str) -> String {
    format!(
        r#"{{"name": "quiet", "dt": 1e-3, "t_end": 1, {extra}
        "particle": {{"mass": 1, "inertia": 0.01}},
        "stiffness": {{"bending": 10, "axial": 200, "shear": 200, "contact": 2100, "wall": 2e5}},
        "shear": "objective",
        "rupture": {{"tension": 0.02, "shear": 0.2}},
        "walls": [{{"point": [0, 0, 0], "normal": [1, 0, 0]}}],
        "bodies": [{{"type": "block_solid", "size": [0.6, 0.5, 0.4], "particle_diameter": 0.1,
                     "lattice": "fcc", "gap": {gap}, "velocity": [{}, 0, 0],
                     "angular_velocity": [0, 0, {w}]}}]}}"#,
        -v
    )
}

fn engine(m: &Model, precision: Precision, every_step: bool) -> GpuEngine {
    engine_with(m, precision, Integrator::RrpNewmark, every_step)
}

fn engine_with(m: &Model, precision: Precision, integrator: Integrator, every_step: bool) -> GpuEngine {
    let options = GpuOptions { grid_every_step: every_step, ..Default::default() };
    GpuEngine::with_options(m, integrator, 1e-3, precision, AdapterChoice::Any, options).unwrap_or_else(
        |e| panic!("GPU engine unavailable: {e}\n(the GPU tests need an adapter: apt-get install mesa-vulkan-drivers libvulkan1)"),
    )
}

/// Watched as `run` watches it (the watch runs on the device at every step).
fn watched(e: &mut GpuEngine, m: &Model) {
    let d0 = e.diagnostics().unwrap();
    assert!(Engine::set_watch(e, Watch::new(&d0, f64::INFINITY, &m.params.walls)));
}

/// Steps `quiet` and `every` alike in advances of `stride` steps, `advances` times, and checks
/// after each that their states, watches and breaks are the same bit for bit. Returns what
/// `quiet` recorded and both engines' rebuilds.
fn step_alike(
    m: &Model,
    quiet: &mut GpuEngine,
    every: &mut GpuEngine,
    stride: u64,
    advances: usize,
) -> (RecordedSteps, u64, u64) {
    watched(quiet, m);
    watched(every, m);
    for k in 0..advances {
        Engine::advance(quiet, stride).unwrap();
        Engine::advance(every, stride).unwrap();
        assert_eq!(bits(quiet), bits(every), "advance {k}: the same state, bit for bit");
        assert_eq!(format!("{:?}", Engine::watch(quiet)), format!("{:?}", Engine::watch(every)), "advance {k}: watch");
        assert_eq!(format!("{:?}", quiet.take_breaks()), format!("{:?}", every.take_breaks()), "advance {k}: breaks");
    }
    (Engine::recorded_figures(quiet).unwrap(), quiet.neighbour_rebuilds(), every.neighbour_rebuilds())
}

#[test]
fn a_slowly_turning_block_records_the_grid_only_at_grid_steps_with_the_same_bits() {
    // Far from the wall, spinning at w = 0.4: its corners move 0.4 · 0.43 = 0.17 per unit time,
    // half a skin (0.015) relative to the anchor in about 40–90 steps: a rebuild every ~100
    // steps, rare (at most one per 64). After the first advance (every step, nothing known
    // yet), the batches record the grid stage at one step in GRID_PERIOD.
    let (_, m) = model_from_json(&block_at_wall(0.0, 0.4, 5.0));
    for p in [Precision::F64, Precision::F32] {
        let (mut quiet, mut every) = (engine(&m, p, false), engine(&m, p, true));
        // A full step's dispatches, and the grid stage's: `grid_args_set` and the indirect ones.
        let (full, grid) = {
            let (all, indirect, _) = every.step_costs();
            (all as u64, indirect as u64 + 1)
        };
        let (RecordedSteps { steps, dispatches, grid_steps, misses }, rebuilds, rebuilds_every) =
            step_alike(&m, &mut quiet, &mut every, 200, 5);
        eprintln!(
            "{p:?}: {grid_steps} grid steps of {steps}, {misses} misses, rebuilds {rebuilds} (every step: {rebuilds_every})"
        );
        assert_eq!(steps, 1000, "{p:?}");
        assert_eq!(misses, 0, "{p:?}: a steady spin never needs a rebuild between grid steps");
        // The first advance records the grid in all its 200 steps, the four others in their
        // first step and every eighth (25 or 26 of 200, depending on the phase).
        assert!((200 + 4 * 25..=200 + 4 * 26).contains(&grid_steps), "{p:?}: {grid_steps} grid steps");
        assert_eq!(dispatches, steps * (full - grid) + grid_steps * grid, "{p:?}: dispatches recorded");
        // It does rebuild, a little more often than the rule requires (early, at grid steps).
        assert!(rebuilds_every >= 6 && rebuilds >= rebuilds_every, "{p:?}: {rebuilds} vs {rebuilds_every}");
        assert!(rebuilds <= 2 * rebuilds_every, "{p:?}: {rebuilds} vs {rebuilds_every}");
        assert_eq!(
            Engine::recorded_figures(&every).unwrap().grid_steps,
            1000,
            "{p:?}: `grid_every_step` records every step"
        );
    }
}

#[test]
fn an_impact_between_grid_steps_finishes_its_batch_with_the_same_bits() {
    // Flying rigidly at v = 10 (its lists kept: no rebuild for the flight), the block reaches
    // the wall in its third advance: the front stops within a step while the rest flies on at
    // 0.01 per step, so half a skin (0.015) of relative motion takes 2 steps, and a grid step
    // (one in eight) rarely falls between the early and the full threshold. The batch recorded
    // without the grid stage must stop at the first step that has to rebuild and finish from
    // there; its bonds break at the wall, its watch sees the contact, all as when every step
    // records the grid stage.
    let (_, m) = model_from_json(&block_at_wall(10.0, 0.0, 0.25));
    for p in [Precision::F64, Precision::F32] {
        let (mut quiet, mut every) = (engine(&m, p, false), engine(&m, p, true));
        let (RecordedSteps { steps, misses, .. }, rebuilds, rebuilds_every) =
            step_alike(&m, &mut quiet, &mut every, 10, 6);
        eprintln!("{p:?}: {steps} steps recorded, {misses} misses, rebuilds {rebuilds} (every step: {rebuilds_every})");
        // A finished batch records its steps from the missed one again.
        assert!(steps > 60, "{p:?}: {steps} steps recorded");
        assert!(misses >= 1, "{p:?}: the impact must miss a rebuild between grid steps: {misses} misses");
        assert!(rebuilds_every > 2 && rebuilds >= rebuilds_every, "{p:?}: {rebuilds} vs {rebuilds_every}");
        let broken = quiet.diagnostics().unwrap().n_broken;
        assert!(broken > 0, "{p:?}: bonds break at the wall");
        let watch = Engine::watch(&quiet).unwrap();
        assert!(watch.impact.first_contact_step.is_some(), "{p:?}: the watch saw the contact");
    }
}

#[test]
fn an_impact_misses_alike_with_every_integrator_and_with_dissipation() {
    // The impact of the test above with contact and binder damping and friction (MODEL §10:
    // `dissipate` runs, the friction history is carried), under each of the three maps; the
    // rrp-exact check and the first step's opening kick run in the kernels a miss stops.
    let extra = r#""damping": {"restitution": 0.6, "binder": {"axial": 0.01, "shear": 0.01, "bending": 0.001, "twist": 0.001}},
        "friction": {"coefficient": 0.3},"#;
    let (_, m) = model_from_json(&block_at_wall_with(10.0, 0.0, 0.25, extra));
    for integrator in [Integrator::RrpNewmark, Integrator::RrpExact, Integrator::Campello] {
        let mut quiet = engine_with(&m, Precision::F64, integrator, false);
        let mut every = engine_with(&m, Precision::F64, integrator, true);
        let (RecordedSteps { misses, .. }, _, _) = step_alike(&m, &mut quiet, &mut every, 10, 6);
        assert!(misses >= 1, "{integrator:?}: {misses} misses");
        let d = quiet.diagnostics().unwrap();
        assert!(d.e_dissipated > 0.0 && d.n_broken > 0, "{integrator:?}: {d:?}");
    }
}

#[test]
fn a_miss_in_a_batch_leaves_each_replica_as_alone() {
    // A study of two: the block that hits the wall between grid steps and one turning slowly in
    // free space. Both rebuild rarely before the impact, so the batch leaves the grid stage out
    // of quiet steps until the impact's miss; each replica's rebuilds (early ones included) and
    // every bit of its state are what they are when it runs alone, quiet or not. (Lists with room
    // for the impact: an overflowing list makes every replica rebuild while it overflows.)
    use rrpdem::engine::BatchEngine;
    let options = GpuOptions { nbr_capacity: Some(40), ..Default::default() };
    let models = [block_at_wall(10.0, 0.0, 0.25), block_at_wall(0.0, 0.4, 5.0)].map(|t| model_from_json(&t).1);
    let (stride, advances) = (10u64, 30usize);
    let mut alone = Vec::new();
    for m in &models {
        let mut e =
            GpuEngine::with_options(m, Integrator::RrpNewmark, 1e-3, Precision::F64, AdapterChoice::Any, options)
                .unwrap_or_else(|e| panic!("GPU engine unavailable: {e}"));
        watched(&mut e, m);
        for _ in 0..advances {
            Engine::advance(&mut e, stride).unwrap();
        }
        alone.push((e.neighbour_rebuilds(), bits(&mut e), Engine::recorded_figures(&e).unwrap().misses));
    }
    assert!(alone[0].2 >= 1 && alone[1].2 == 0, "misses alone: {} and {}", alone[0].2, alone[1].2);
    assert!(alone[1].0 >= 3, "the turning block rebuilds (early) {} times", alone[1].0);
    let refs: Vec<&Model> = models.iter().collect();
    let mut b = GpuEngine::new_batch(&refs, Integrator::RrpNewmark, 1e-3, Precision::F64, AdapterChoice::Any, options)
        .unwrap_or_else(|e| panic!("GPU batch unavailable: {e}"));
    let d0 = BatchEngine::diagnostics(&mut b).unwrap();
    for (r, m) in models.iter().enumerate() {
        assert!(BatchEngine::set_watch(&mut b, r, Watch::new(&d0[r], f64::INFINITY, &m.params.walls)));
    }
    for _ in 0..advances {
        BatchEngine::advance(&mut b, stride).unwrap();
    }
    assert!(Engine::recorded_figures(&b).is_some_and(|f| f.misses >= 1), "the batch missed the impact's rebuild");
    assert_eq!(b.replica_rebuilds(), alone.iter().map(|a| a.0).collect::<Vec<_>>(), "rebuilds as alone");
    let diags = BatchEngine::diagnostics(&mut b).unwrap();
    for (r, a) in alone.iter().enumerate() {
        let snap = BatchEngine::snapshot(&mut b, r).unwrap();
        assert_eq!(common::gpu::state_bits(&snap, &diags[r]), a.1, "replica {r}: batch = alone, bit for bit");
    }
}

#[test]
fn the_bench_reports_what_quiet_steps_record() {
    // Rings flying onto a wall rebuild rarely: after the warm-up's batch of 40 steps (every step
    // recorded, nothing known yet) the timed batch of 400 leaves the grid stage out between grid
    // steps. `+every-step` records
    // it in every step: exactly the full step's dispatches per quiet step. Neither misses.
    use rrpdem::bench::{EngineKind, case, measure};
    let figures = |name: &str| {
        let c = case(name).unwrap();
        let m = (c.model)().unwrap();
        measure(&c, std::borrow::Cow::Owned(m), EngineKind::GpuF32, 1, false, 400, 0.0, None).unwrap()
    };
    let (quiet, every) = (figures("rings-2000"), figures("rings-2000+every-step"));
    let (all, indirect) = every.recorded_dispatches_per_step.unwrap();
    assert_eq!(every.recorded_dispatches_per_quiet_step, Some(all as f64));
    assert_eq!((quiet.grid_misses_per_1000_steps, every.grid_misses_per_1000_steps), (Some(0.0), Some(0.0)));
    // Between grid steps a step records the dispatches outside the grid stage (`all` less its
    // indirect ones and `grid_args_set`); one step in eight and the warm-up's 40 record them all
    // (the + 1: the timed batch's first step, which may or may not be a grid step).
    let q = quiet.recorded_dispatches_per_quiet_step.unwrap();
    let between = (all - indirect - 1) as f64;
    let most = between + (indirect + 1) as f64 * (40.0 + 400.0 / 8.0 + 1.0) / 440.0;
    assert!(q > between && q <= most, "{q} dispatches per quiet step ({between} between grid steps, {most} at most)");
}

#[test]
fn a_replica_rolled_back_alone_goes_on_out_of_phase_with_the_same_bits() {
    // A study of two slowly turning blocks (distinct spins) that rebuild rarely, early at their
    // grid steps. After three advances of 45 steps (45 = 5 mod 8) replica 0 is rolled back to
    // the start of the third, alone: 90 steps against the other's 135, grid phases 2 and 7, so
    // the batch's running replicas are out of step and it records the grid stage in every step
    // from then on, while each replica still rebuilds early at its own grid steps. Rebuild
    // times never change a force: each replica's state must be, bit for bit, that of its model
    // alone stepped to the same step. Rebuilds: the other replica's are those it makes alone (the
    // rollback's evaluation rebuilds the rolled-back replica only), and the rolled-back one's
    // are those of its model alone given the same advances and rollback (its quiet history goes
    // back with it).
    use rrpdem::engine::BatchEngine;
    let models = [block_at_wall(0.0, 0.4, 5.0), block_at_wall(0.0, 0.55, 5.0)].map(|t| model_from_json(&t).1);
    let stride = 45u64;
    let refs: Vec<&Model> = models.iter().collect();
    let options = GpuOptions::default();
    let mut b = GpuEngine::new_batch(&refs, Integrator::RrpNewmark, 1e-3, Precision::F64, AdapterChoice::Any, options)
        .unwrap_or_else(|e| panic!("GPU batch unavailable: {e}"));
    let d0 = BatchEngine::diagnostics(&mut b).unwrap();
    for (r, m) in models.iter().enumerate() {
        assert!(BatchEngine::set_watch(&mut b, r, Watch::new(&d0[r], f64::INFINITY, &m.params.walls)));
    }
    for _ in 0..3 {
        BatchEngine::advance(&mut b, stride).unwrap();
    }
    let counts = b.replica_rebuilds();
    BatchEngine::rollback(&mut b, 0).unwrap();
    assert_eq!(b.replica_rebuilds()[1], counts[1], "the rollback of replica 0 rebuilds nothing of replica 1");
    let before = Engine::recorded_figures(&b).unwrap();
    for _ in 0..5 {
        BatchEngine::advance(&mut b, stride).unwrap();
    }
    let after = Engine::recorded_figures(&b).unwrap().since(before);
    assert_eq!((after.steps, after.grid_steps), (5 * stride, 5 * stride), "out of step: the grid in every step");
    let diags = BatchEngine::diagnostics(&mut b).unwrap();
    assert_eq!((diags[0].step, diags[1].step), (7 * stride, 8 * stride));
    // Alone, `advances` of 45 steps, the third rolled back where asked.
    let alone = |m: &Model, advances: usize, rollback: bool| {
        let mut e = engine(m, Precision::F64, false);
        watched(&mut e, m);
        for k in 0..advances {
            Engine::advance(&mut e, stride).unwrap();
            if rollback && k == 2 {
                Engine::rollback(&mut e).unwrap();
            }
        }
        e
    };
    let mut rolled = alone(&models[0], 8, true);
    let mut straight = [alone(&models[0], 7, false), alone(&models[1], 8, false)];
    for r in 0..2 {
        let snap = BatchEngine::snapshot(&mut b, r).unwrap();
        let want = bits(&mut straight[r]);
        assert_eq!(common::gpu::state_bits(&snap, &diags[r]), want, "replica {r}: batch = alone, bit for bit");
    }
    assert_eq!(bits(&mut rolled), bits(&mut straight[0]), "a rollback changes no result");
    let rebuilds = b.replica_rebuilds();
    // (Each replica's own count, which a rollback takes back with it; `neighbour_rebuilds`
    // counts the engine's rebuilds, the rolled-back ones included.)
    let alone_rebuilds = [rolled.replica_rebuilds()[0], straight[1].replica_rebuilds()[0]];
    eprintln!("rebuilds: batch {rebuilds:?}, alone {alone_rebuilds:?}");
    assert!(alone_rebuilds.iter().all(|&n| n >= 3), "both rebuild (early) alone: {alone_rebuilds:?}");
    assert_eq!(rebuilds, alone_rebuilds, "each replica rebuilds as alone");
}

#[test]
fn a_rollback_takes_back_what_the_batch_taught_about_rebuilds() {
    // The block flying at the wall, in advances of 10 steps: the first two fly (no rebuild:
    // rare, so the next batch is quiet), the third hits the wall and misses a rebuild (it
    // rebuilds often: not rare). Rolled back to the third's start and taken again, the third is
    // quiet again, as the first time (what a batch learns of a replica's rebuilds goes back
    // with it), and misses at the same step, with the same bits.
    let (_, m) = model_from_json(&block_at_wall(10.0, 0.0, 0.25));
    let mut e = engine(&m, Precision::F64, false);
    watched(&mut e, &m);
    for _ in 0..2 {
        Engine::advance(&mut e, 10).unwrap();
    }
    let start = Engine::recorded_figures(&e).unwrap();
    Engine::advance(&mut e, 10).unwrap();
    let first = Engine::recorded_figures(&e).unwrap().since(start);
    let want = bits(&mut e);
    Engine::rollback(&mut e).unwrap();
    let again = Engine::recorded_figures(&e).unwrap();
    Engine::advance(&mut e, 10).unwrap();
    let second = Engine::recorded_figures(&e).unwrap().since(again);
    eprintln!("first {first:?}, again {second:?}");
    assert!(first.misses == 1 && first.grid_steps < first.steps, "the third advance is quiet and misses: {first:?}");
    assert_eq!(second, first, "taken again, the same recording");
    assert_eq!(bits(&mut e), want, "and the same bits");
}
