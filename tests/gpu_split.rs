//! Arrays beyond one storage binding (issue 10): the per-bond arrays, the incidence entries and
//! the neighbour lists are bound as windows and their kernels dispatched in chunks
//! (src/gpu/chunks.rs). With the binding limit cut so far that they split into many chunks, a
//! squeezed bonded block on a floor, with contacts and bonds breaking, runs bit for bit as
//! unsplit, and so does a Morton-numbered solid torus whose far bonds come through the halo.

mod common;

use common::gpu::*;
use rrpdem::engine::{Engine, Precision};
use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
use rrpdem::integrator::Integrator;
use rrpdem::model::Model;

/// A block of 20·20·6 spheres on a jittered lattice, squeezed (spacing 0.97) onto a floor under
/// gravity, each bonded to its +x neighbour (bonds join particles next in index, as numbering a
/// body slab by slab does), with random velocities and spins, and rupture thresholds that the
/// squeeze exceeds within a few hundred steps.
fn squeezed_block() -> Model {
    use rrpdem::interactions::{Rupture, RuptureRule};
    let params = rrpdem::model::Params {
        rupture: Some(Rupture {
            inv_thresholds: [1.0 / 0.02, 1.0 / 0.2, 0.0, 0.0],
            rule: RuptureRule::Any,
            weibull: None,
        }),
        ..lattice_params()
    };
    lattice_model_with(20, 20, 6, 0.97, true, 13, params)
}

/// Elements a page holds are a multiple of 64 (`gpu::chunks::ALIGN`).
fn align_down(x: u64) -> u64 {
    x / 64 * 64
}

fn open(m: &Model, dt: f64, p: Precision, options: GpuOptions) -> GpuEngine {
    GpuEngine::with_options(m, Integrator::RrpNewmark, dt, p, AdapterChoice::Any, options)
        .unwrap_or_else(|e| panic!("GPU engine: {e} (apt-get install mesa-vulkan-drivers libvulkan1)"))
}

/// Advances both engines `times` × `steps` steps; after each advance they must hold the same
/// bits and have made the same breaks. Returns how many bonds broke.
fn advance_alike(a: &mut GpuEngine, b: &mut GpuEngine, times: u64, steps: u64, what: &str) -> usize {
    let mut broken = 0;
    for k in 1..=times {
        a.advance(steps).unwrap();
        b.advance(steps).unwrap();
        assert!(bits(a) == bits(b), "{what}: differs after {} steps", steps * k);
        let (x, y) = (a.take_breaks(), b.take_breaks());
        assert_eq!(x, y, "{what}: breaks differ");
        broken += x.len();
    }
    broken
}

/// Both engines take 40 more steps and roll back: the same bits, and the same breaks around it.
fn rollback_alike(a: &mut GpuEngine, b: &mut GpuEngine, what: &str) {
    a.advance(40).unwrap();
    b.advance(40).unwrap();
    a.rollback().unwrap();
    b.rollback().unwrap();
    assert!(bits(a) == bits(b), "{what}: rolled-back states differ");
    assert_eq!(a.take_breaks(), b.take_breaks(), "{what}: breaks around the rollback differ");
}

#[test]
fn a_run_split_over_many_bindings_equals_the_unsplit_run_bit_for_bit() {
    let m = squeezed_block();
    let dt = 2e-4;
    let (n, nb) = (m.particles.len(), m.bonds.len());
    for p in [Precision::F32, Precision::F64] {
        let rs = if p == Precision::F32 { 4 } else { 8 };
        // The particle arrays (vec4 of reals) must fit one binding; the bond results (12 reals per
        // bond) then need many.
        let limit = (4 * rs * n as u64).next_multiple_of(256);
        assert!(12 * rs * nb as u64 > 2 * limit, "{p:?}: the bonds must need several bindings");
        let mut whole = open(&m, dt, p, GpuOptions::default());
        let mut split = open(&m, dt, p, GpuOptions { max_binding_size: Some(limit), ..Default::default() });
        assert_eq!(whole.chunk_counts(), (1, 1, 1));
        let (pc, bc, rc) = split.chunk_counts();
        eprintln!(
            "{p:?}: {n} particles, {nb} bonds, binding {limit} B: {pc} particle, {bc} bond, {rc} reduction chunks"
        );
        assert!(pc >= 2 && bc >= 3 && rc >= 2, "{p:?}: ({pc}, {bc}, {rc}) chunks");
        assert!(bits(&mut whole) == bits(&mut split), "{p:?}: initial state differs");
        let broken = advance_alike(&mut whole, &mut split, 4, 150, &format!("{p:?}"));
        let u = whole.diagnostics().unwrap();
        eprintln!("{p:?}: {broken} bonds broke, U_contact + U_wall = {:.3e}", u.u_contact + u.u_wall);
        assert!(broken > 0 && u.u_wall > 0.0, "{p:?}: the run must break bonds and touch the wall");
        // Saved states are the same bytes; a rollback returns both to the same bits.
        assert!(whole.save_state().unwrap() == split.save_state().unwrap(), "{p:?}: saved states differ");
        rollback_alike(&mut whole, &mut split, &format!("{p:?}"));
    }
}

/// `open` with another integrator.
fn open_with(m: &Model, dt: f64, p: Precision, integrator: Integrator, options: GpuOptions) -> GpuEngine {
    GpuEngine::with_options(m, integrator, dt, p, AdapterChoice::Any, options)
        .unwrap_or_else(|e| panic!("GPU engine: {e} (apt-get install mesa-vulkan-drivers libvulkan1)"))
}

/// Runs `m` with its per-particle arrays whole and in two parts (a binding of `part` particles'
/// vec4), which must hold the same bits throughout: steps, breaks, diagnostics, saved states, a
/// rollback and a reloaded state. With `stuck`, the parted engine's lists have one slot and no
/// memory to grow, so every step takes the grid fallback, which reads the bucket-ordered copies
/// (`sorted_pos`, `sorted_cell`) across both parts. Returns the bonds broken and the
/// diagnostics after the first 300 steps.
fn parted_alike(
    m: &Model,
    dt: f64,
    p: Precision,
    integrator: Integrator,
    part: u64,
    stuck: bool,
    what: &str,
) -> (usize, rrpdem::diagnostics::Diagnostics) {
    let n = m.particles.len() as u64;
    let elem = if p == Precision::F32 { 16 } else { 32 };
    assert!(n > part && n <= 2 * part && part.is_multiple_of(64), "{what}: {n} particles in parts of {part}");
    let limit = elem * part;
    let mut whole = open_with(m, dt, p, integrator, GpuOptions::default());
    let mut options = GpuOptions { max_binding_size: Some(limit), ..Default::default() };
    if stuck {
        // The budget of the parted engine with lists of one slot, less their growth (4 bytes a
        // slot beyond one per particle), as tests/gpu_cache.rs does.
        options.nbr_capacity = Some(1);
        let grown = open_with(m, dt, p, integrator, options);
        assert!(grown.neighbour_capacity() > 1, "{what}: lists of one slot must overflow");
        options.memory_budget = Some(grown.device_bytes() - 4 * (grown.neighbour_entries() - n));
    }
    let mut split = open_with(m, dt, p, integrator, options);
    assert_eq!(whole.particle_part_len(), None);
    assert_eq!(split.particle_part_len(), Some(part as u32), "{what}");
    let (pc, bc, rc) = split.chunk_counts();
    eprintln!("{what}: binding {limit} B: ({pc}, {bc}, {rc}) chunks, {} halo entries", split.halo_entries());
    assert!(pc >= 2 && bc >= 2, "{what}: ({pc}, {bc}, {rc}) chunks");
    assert!(bits(&mut whole) == bits(&mut split), "{what}: initial state differs");
    let broken = advance_alike(&mut whole, &mut split, 3, 100, what);
    if stuck {
        assert_eq!((split.neighbour_capacity(), split.fallback_steps()), (1, 300), "{what}: every step falls back");
    }
    let d = whole.diagnostics().unwrap();
    assert_eq!(d, split.diagnostics().unwrap(), "{what}: diagnostics differ");
    assert!(whole.save_state().unwrap() == split.save_state().unwrap(), "{what}: saved states differ");
    rollback_alike(&mut whole, &mut split, what);
    // A saved state loads into the parted engine, which then continues as the whole one.
    let saved = whole.save_state().unwrap();
    split.load_state(&saved).unwrap();
    (broken + advance_alike(&mut whole, &mut split, 1, 50, &format!("{what}, reloaded")), d)
}

#[test]
fn per_particle_arrays_in_two_bindings_equal_the_whole_run_bit_for_bit() {
    // The per-particle arrays bound in two parts, by kernels compiled for that; every chunked
    // array splits too. The squeezed block (2400 spheres in parts of 1536 + 864; in f32 the
    // binding also caps the bucket table at 4096): contacts, the floor, gravity, rupture; with
    // rrp-exact, whose check kernel reads Ω, M and 1/J; with the grid fallback at every step.
    let m = squeezed_block();
    let dt = 2e-4;
    for (p, integrator, stuck) in [
        (Precision::F32, Integrator::RrpNewmark, false),
        (Precision::F64, Integrator::RrpNewmark, false),
        (Precision::F32, Integrator::RrpExact, false),
        (Precision::F64, Integrator::RrpNewmark, true),
    ] {
        let what = format!("block {p:?} {integrator:?}{}", if stuck { ", grid fallback" } else { "" });
        let (broken, d) = parted_alike(&m, dt, p, integrator, 1536, stuck, &what);
        assert!(broken > 0 && d.u_wall > 0.0 && d.u_contact > 0.0, "{what}: must break, touch the floor, press");
    }
    // The block drifting along x at speed 5 besides (0.3 in 300 steps, a quarter of a block
    // edge of 2·r + skin = 1.3): in f32 many particles cross from block to block, so that
    // `integrate` moves their block and reference position (`cell_put`, `x_ref_put`) in both
    // parts.
    let mut drift = squeezed_block();
    drift.particles.v.iter_mut().for_each(|v| v.x += 5.0);
    let (broken, _) =
        parted_alike(&drift, dt, Precision::F32, Integrator::RrpNewmark, 1536, false, "drifting block F32");
    assert!(broken > 0, "drifting block: bonds must break");
    // Beyond two parts: a clear error naming what does not fit and how many particles would.
    let e = GpuEngine::with_options(
        &m,
        Integrator::RrpNewmark,
        dt,
        Precision::F32,
        AdapterChoice::Any,
        GpuOptions { max_binding_size: Some(16 * 1024), ..Default::default() },
    )
    .err()
    .expect("2400 particles in two bindings of 1024");
    let text = e.to_string();
    assert!(text.contains("two bindings") && text.contains("2048"), "{text}");
}

#[test]
fn lists_laid_out_anew_while_split_keep_the_bits() {
    // Lists of one slot overflow at once; each is then given room for its own count, which
    // re-plans the chunks (new windows of `nbr`) mid-run. The split run must still equal the
    // unsplit, default one bit for bit.
    let m = squeezed_block();
    let dt = 2e-4;
    let n = m.particles.len() as u64;
    let limit = (4 * 8 * n).next_multiple_of(256);
    let mut whole = open(&m, dt, Precision::F64, GpuOptions::default());
    let options = GpuOptions { max_binding_size: Some(limit), nbr_capacity: Some(1), ..Default::default() };
    let mut split = open(&m, dt, Precision::F64, options);
    let (pc, bc, _) = split.chunk_counts();
    assert!(pc >= 2 && bc >= 2, "({pc}, {bc}) chunks");
    assert!(split.neighbour_capacity() > 1, "the lists must have been laid out anew");
    advance_alike(&mut whole, &mut split, 3, 100, "relaid lists");
}

/// A solid FCC torus of 1000 spheres (5.9 bonds each), Morton-numbered, hitting a wall at
/// speed 2 with rupture thresholds that it exceeds.
fn small_solid_torus() -> (rrpdem::scenario::Scenario, Model) {
    model_from_json(
        r#"{ "name": "small_solid_torus", "integrator": "rrp-newmark", "dt": 5e-4, "t_end": 1,
             "particle": { "mass": 1, "inertia": 1 },
             "stiffness": { "bending": 10, "axial": 200, "shear": 200, "contact": 2100, "wall": 2100 },
             "shear": "objective", "walls": [ { "point": [0, 0, 0], "normal": [1, 0, 0] } ],
             "rupture": { "tension": 0.004, "shear": 0.05 },
             "bodies": [ { "type": "torus_solid", "torus_diameter": 3, "tube_diameter": 1, "particles": 1000,
                           "lattice": "fcc", "gap": 0, "velocity": [-2, 0, 0] } ] }"#,
    )
}

#[test]
fn far_bonds_come_through_the_halo_bit_for_bit() {
    // A solid torus numbered in Morton order: across the faces of the order, bonded particles
    // lie far apart in index, so chunks read some bonds from the halo. It hits a wall and
    // ruptures; split, it must still equal the unsplit run bit for bit.
    let (s, m) = small_solid_torus();
    let (n, nb) = (m.particles.len(), m.bonds.len());
    for p in [Precision::F32, Precision::F64] {
        let rs = if p == Precision::F32 { 4 } else { 8 };
        let limit = (4 * rs * n as u64).next_multiple_of(256).max(64 << 10);
        let mut whole = open(&m, s.dt, p, GpuOptions::default());
        let mut split = open(&m, s.dt, p, GpuOptions { max_binding_size: Some(limit), ..Default::default() });
        let (pc, bc, rc) = split.chunk_counts();
        let halo = split.halo_entries();
        eprintln!(
            "{p:?}: {n} particles, {nb} bonds, binding {limit} B: ({pc}, {bc}, {rc}) chunks, {halo} halo entries"
        );
        assert!(pc >= 2 && bc >= 3 && halo > 0, "{p:?}: ({pc}, {bc}, {rc}) chunks, {halo} halo entries");
        let broken = advance_alike(&mut whole, &mut split, 3, 100, &format!("{p:?}"));
        eprintln!("{p:?}: {broken} bonds broke");
        assert!(broken > 0, "{p:?}: bonds must break");
    }
}

#[test]
fn a_neighbour_list_longer_than_one_binding_is_a_clear_error() {
    let m = squeezed_block();
    // Lists of 4096 slots (16 KiB each) in 8 KiB bindings... with particle arrays that fit.
    let limit = (4 * 4 * m.particles.len() as u64).next_multiple_of(256);
    let tiny = GpuOptions { max_binding_size: Some(limit), nbr_capacity: Some(4 * limit as u32), ..Default::default() };
    let e = GpuEngine::with_options(&m, Integrator::RrpNewmark, 2e-4, Precision::F32, AdapterChoice::Any, tiny)
        .err()
        .expect("a list of more slots than a binding holds cannot be windowed");
    let text = e.to_string();
    assert!(text.contains("particle 0's bonds span, or its neighbour list holds"), "{text}");
}

/// Chunked arrays over several buffers (`gpu::chunks::Pages`), as a model beyond 4 GiB of bond
/// results needs on an H100: with pages of 8 kB, the bond arrays, the incidence entries and the
/// neighbour lists of the solid torus each span several, the lists are laid out anew (capacity
/// 1 at first) and bonds break; the run equals the unpaged, unsplit one bit for bit, in steps, breaks, saved states
/// and rollback, and an unpaged saved state loaded into the paged engine (broken flags written
/// page by page) continues the same.
#[test]
fn arrays_paged_over_several_buffers_equal_the_unpaged_run_bit_for_bit() {
    let (s, m) = small_solid_torus();
    let dt = s.dt;
    let (n, nb) = (m.particles.len() as u64, m.bonds.len() as u64);
    // Bonded pairs listed (the lists long enough for several pages) and left out (the sorted
    // bonded partners, `bonded`, paged beside the incidence, the lists short).
    for (p, listed) in
        [(Precision::F32, true), (Precision::F64, true), (Precision::F32, false), (Precision::F64, false)]
    {
        let rs = if p == Precision::F32 { 4 } else { 8 };
        let page = 8192;
        let plain = GpuOptions { list_bonded_pairs: listed, ..Default::default() };
        let paged_options = GpuOptions { page_size: Some(page), nbr_capacity: Some(1), ..plain };
        let mut whole = open(&m, dt, p, plain);
        let mut paged = open(&m, dt, p, paged_options);
        let (bp, ip, np) = paged.page_counts();
        eprintln!(
            "{p:?}: {n} particles, {nb} bonds, pages of {page} B: {bp} bond, {ip} incidence, {np} lists; \
             chunks {:?}, halo {}",
            paged.chunk_counts(),
            paged.halo_entries()
        );
        assert_eq!(whole.page_counts(), (1, 1, 1));
        // Bond results 48 or 96 B, incidence 4 B per entry (2 per bond), lists 4 B per slot.
        assert_eq!(bp as u64, nb.div_ceil(align_down(page / (12 * rs))), "{p:?}");
        assert!(bp >= 30 && ip >= 5 && (np >= 2 || !listed), "{p:?}: pages ({bp}, {ip}, {np})");
        assert!(paged.neighbour_capacity() > 1 || !listed, "{p:?}: the lists must have been laid out anew");
        assert!(paged.halo_entries() > 0, "{p:?}: bonds across page boundaries come through the halo");
        assert!(bits(&mut whole) == bits(&mut paged), "{p:?}: initial state differs");
        let broken = advance_alike(&mut whole, &mut paged, 3, 100, &format!("{p:?}"));
        assert!(broken > 0, "{p:?}: bonds must break");
        let saved = whole.save_state().unwrap();
        assert!(saved == paged.save_state().unwrap(), "{p:?}: saved states differ");
        rollback_alike(&mut whole, &mut paged, &format!("{p:?}"));
        // The unpaged engine's state, loaded into a fresh paged one, continues bit for bit.
        let mut fresh = open(&m, dt, p, paged_options);
        fresh.load_state(&saved).unwrap();
        advance_alike(&mut whole, &mut fresh, 1, 100, &format!("{p:?}, loaded into the paged engine"));
    }
}

/// Break records hold a bounded number of breaks per batch of steps
/// (`gpu::sizes::MAX_BREAK_RECORDS`); an advance that breaks more goes back to its start and
/// is taken again in shorter batches. With as many records as the most bonds that break in one
/// step, advances that break several times that give the same states, breaks and rollbacks, bit
/// for bit, as with records for every bond.
#[test]
fn more_breaks_than_records_take_the_advance_again_in_shorter_batches() {
    let (s, m) = small_solid_torus();
    for p in [Precision::F32, Precision::F64] {
        let mut whole = open(&m, s.dt, p, GpuOptions::default());
        let mut events = Vec::new();
        let mut per_advance = Vec::new();
        let mut states = Vec::new();
        for _ in 0..3 {
            whole.advance(100).unwrap();
            let b = whole.take_breaks();
            per_advance.push(b.len());
            events.push(b);
            states.push(bits(&mut whole));
        }
        let mut per_step = std::collections::BTreeMap::new();
        for e in events.iter().flatten() {
            *per_step.entry(e.step).or_insert(0u64) += 1;
        }
        let cap = per_step.values().copied().max().unwrap_or(1);
        let most = per_advance.iter().copied().max().unwrap_or(0) as u64;
        eprintln!("{p:?}: breaks per advance {per_advance:?}, at most {cap} in one step");
        assert!(most > 2 * cap, "{p:?}: an advance must break more bonds ({most}) than the records hold ({cap})");
        let mut few = open(&m, s.dt, p, GpuOptions { max_break_records: Some(cap), ..Default::default() });
        for k in 0..3 {
            few.advance(100).unwrap();
            assert!(states[k] == bits(&mut few), "{p:?}: differs after {} steps", 100 * (k + 1));
            assert_eq!(events[k], few.take_breaks(), "{p:?}: breaks differ");
        }
        rollback_alike(&mut whole, &mut few, &format!("{p:?}"));
    }
}

/// Issue 22, item 7: bonds that break at the first evaluation of a model (here a solid torus
/// stretched by 1 %, every bond beyond its tension threshold of 0.4 %) are the CPU's breaks, at
/// step 0, when the records hold them; when they do not, the engine refuses to start with a
/// message instead of starting from zero diagnostics and no breaks (before: it did so silently).
#[test]
fn breaks_at_the_first_evaluation_are_kept_or_refused() {
    let (s, mut m) = small_solid_torus();
    for x in m.particles.x.iter_mut() {
        *x *= 1.01;
    }
    let mut cpu = rrpdem::engine::CpuEngine::new(&m, Integrator::RrpNewmark, s.dt).unwrap();
    let key = |b: Vec<rrpdem::interactions::BreakEvent>| {
        let mut k: Vec<(u64, u32, u32, u32)> = b.iter().map(|e| (e.step, e.bond, e.i, e.j)).collect();
        k.sort_unstable();
        k
    };
    let at_start = key(cpu.take_breaks());
    assert!(at_start.len() > 100 && at_start.iter().all(|e| e.0 == 0), "{} breaks", at_start.len());
    for p in [Precision::F32, Precision::F64] {
        let mut whole = open(&m, s.dt, p, GpuOptions::default());
        assert_eq!(key(whole.take_breaks()), at_start, "{p:?}");
        let few = GpuOptions { max_break_records: Some(10), ..Default::default() };
        match GpuEngine::with_options(&m, Integrator::RrpNewmark, s.dt, p, AdapterChoice::Any, few) {
            Ok(_) => panic!("{p:?}: started with {} breaks and records for 10", at_start.len()),
            Err(e) => assert!(e.to_string().contains("more than 10 bonds broke in one step (at step 0)"), "{p:?}: {e}"),
        }
    }
}

/// A step the energy guard refuses sends its replica back to the step before: to the advance's
/// start, then forward again alone (`rewind`). That replay must hold its breaks in the records
/// as the advance did (a replay that broke more bonds than they hold was taken in one batch: its
/// breaks were not collected and the host's step not advanced). With records for the most bonds
/// that break in one step, a guard that trips after many more breaks in one advance gives the
/// same error, state and breaks, bit for bit, as with records for every bond.
#[test]
fn a_guard_rewind_that_breaks_more_bonds_than_the_records_hold_keeps_them() {
    use rrpdem::engine::Watch;
    let (s, m) = small_solid_torus();
    let p = Precision::F64;
    // Each step's largest energy deviation and the breaks so far, with no limit.
    let mut probe = open(&m, s.dt, p, GpuOptions::default());
    let d0 = probe.diagnostics().unwrap();
    assert!(probe.set_watch(Watch::new(&d0, f64::INFINITY, &m.params.walls)));
    let (mut dev, mut broken, mut per_step) = (vec![0.0f64], vec![0usize], std::collections::BTreeMap::new());
    for _ in 0..300 {
        probe.advance(1).unwrap();
        dev.push(probe.watch().unwrap().energy.max_deviation);
        let b = probe.take_breaks();
        for e in &b {
            *per_step.entry(e.step).or_insert(0u64) += 1;
        }
        broken.push(broken.last().unwrap() + b.len());
    }
    let cap = per_step.values().copied().max().expect("bonds break");
    // The first step after 3·cap breaks at which the largest deviation grows: a limit halfway
    // makes the guard refuse exactly that step, after more breaks than the records hold.
    let k = (1..dev.len())
        .find(|&k| broken[k - 1] as u64 > 3 * cap && dev[k] > dev[k - 1])
        .expect("a step after the breaks at which the energy error grows");
    let limit = 0.5 * (dev[k - 1] + dev[k]);
    eprintln!("cap {cap}, guard at step {k} after {} breaks, limit {limit:e}", broken[k - 1]);
    let run = |options: GpuOptions| {
        let mut e = open(&m, s.dt, p, options);
        assert!(e.set_watch(Watch::new(&d0, limit, &m.params.walls)));
        let err = e.advance(300).expect_err("the guard refuses a step").to_string();
        (err, bits(&mut e), e.take_breaks())
    };
    let (whole, few) =
        (run(GpuOptions::default()), run(GpuOptions { max_break_records: Some(cap), ..Default::default() }));
    assert!(whole.0.contains(&format!("at step {k} ")), "{}", whole.0);
    assert_eq!(whole.0, few.0, "the same error");
    assert_eq!(whole.2.len(), broken[k - 1], "the breaks up to the step before");
    assert!(whole.2 == few.2, "the same breaks ({} and {})", whole.2.len(), few.2.len());
    assert!(whole.1 == few.1, "the same state");
}
