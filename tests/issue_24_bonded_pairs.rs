//! Issue 24: pairs joined by a bond are not in the contact lists.
//!
//! Both engines' lists leave bonded pairs out (`grid::BondedPartners`, `Params::bonded_pairs_unlisted`)
//! and visit them from each particle's sorted bonded partners instead, merged into the list in
//! index order: every contact sum runs over the same pairs in the same order as when the lists
//! held them, so a run is the same bit for bit with and without the lists holding them (the
//! engines' `list_bonded_pairs`, for comparisons). Where contacts between spheres dissipate
//! (MODEL §10) the lists keep bonded pairs (their loads and history are per list entry).

mod common;
use common::gpu::{bits, cpu, gpu, model_from_json};
use rrpdem::engine::{Engine, Precision};
use rrpdem::integrator::Integrator;

/// A solid torus of ~`n` fcc spheres hitting the wall at speed 1 with rupture (the users' job,
/// scenarios/solid_torus_impact.json, smaller), with `extra` fields (JSON, leading comma).
fn impact(n: usize, extra: &str) -> String {
    format!(
        r#"{{"name": "impact", "dt": 5e-4, "t_end": 1,
        "particle": {{"mass": 1, "inertia": 1}},
        "stiffness": {{"bending": 10, "axial": 200, "shear": 200, "contact": 2100, "wall": 2100}},
        "shear": "objective",
        "walls": [{{"point": [0, 0, 0], "normal": [1, 0, 0]}}],
        "rupture": {{"tension": 0.01, "shear": 0.1}}{extra},
        "bodies": [{{"type": "torus_solid", "torus_diameter": 3, "tube_diameter": 1, "particles": {n},
                     "lattice": "fcc", "gap": 0, "velocity": [-1, 0, 0]}}]}}"#
    )
}

#[test]
fn the_cpu_lists_leave_bonded_pairs_out_and_the_run_is_the_same_bit_for_bit() {
    let (s, m) = model_from_json(&impact(1500, ""));
    let steps = 400;
    let mut unlisted = cpu(&m, Integrator::RrpNewmark, s.dt);
    let mut listed = cpu(&m, Integrator::RrpNewmark, s.dt);
    listed.list_bonded_pairs().unwrap();
    let n = m.particles.len() as f64;
    let entries = |e: &rrpdem::engine::CpuEngine| e.neighbour_entries() as f64 / n;
    // Left out, the lists hold only pairs without a bond: none in an fcc solid at rest (its
    // second neighbours, 2√2 r apart, lie beyond 2 r + skin).
    assert_eq!(unlisted.neighbour_entries(), 0);
    assert_eq!(unlisted.bonded_entries(), 2 * m.bonds.len());
    unlisted.advance(steps).unwrap();
    listed.advance(steps).unwrap();
    let d = unlisted.diagnostics().unwrap();
    // The test means something: the torus hit the wall and bonds broke.
    assert!(d.n_broken > 50, "{}", d.n_broken);
    assert!(bits(&mut unlisted) == bits(&mut listed), "results differ");
    // Broken bonds' pairs stay out of the lists (their contact is found through the bond).
    assert!(entries(&unlisted) < 1.0, "{}", entries(&unlisted));
    // Listed, every bonded neighbour within the skin is there: ~12 in the fcc interior.
    assert!(entries(&listed) > 6.0, "{}", entries(&listed));
}

#[test]
fn the_gpu_lists_leave_bonded_pairs_out_and_the_run_is_the_same_bit_for_bit() {
    use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
    let (s, m) = model_from_json(&impact(1500, ""));
    let steps = 400;
    let n = m.particles.len() as f64;
    let mut reference = cpu(&m, Integrator::RrpNewmark, s.dt);
    reference.advance(steps).unwrap();
    for p in [Precision::F64, Precision::F32] {
        let open = |m: &rrpdem::model::Model, list_bonded_pairs: bool| {
            let o = GpuOptions { list_bonded_pairs, ..Default::default() };
            GpuEngine::with_options(m, Integrator::RrpNewmark, s.dt, p, AdapterChoice::Any, o).unwrap()
        };
        let mut unlisted = open(&m, false);
        let mut listed = open(&m, true);
        assert_eq!(unlisted.neighbour_entries_in_use().unwrap(), 0, "{p:?}");
        Engine::advance(&mut unlisted, steps).unwrap();
        Engine::advance(&mut listed, steps).unwrap();
        assert!(unlisted.diagnostics().unwrap().n_broken > 50);
        assert!(bits(&mut unlisted) == bits(&mut listed), "{p:?}: results differ");
        let entries = unlisted.neighbour_entries_in_use().unwrap() as f64 / n;
        assert!(entries < 1.0, "{p:?}: {entries}");
        let entries = listed.neighbour_entries_in_use().unwrap() as f64 / n;
        assert!(entries > 6.0, "{p:?}: {entries}");
        // The bonded partners in chunk windows (a smaller torus in bindings of 32 and 64 kB:
        // several chunks of particles and of the incidence, as in a model of ~10⁷ spheres on a
        // real device), the same as in one binding.
        let (_, small) = model_from_json(&impact(300, ""));
        let mut whole = open(&small, false);
        Engine::advance(&mut whole, steps).unwrap();
        assert!(whole.diagnostics().unwrap().n_broken > 10);
        let mut split = 0;
        for bytes in [1u64 << 14, 1 << 15, 1 << 16] {
            let o = GpuOptions { max_binding_size: Some(bytes), ..Default::default() };
            // Too small a binding for some particle's bonds is refused (tests/gpu_chunks.rs).
            let Ok(mut chunked) =
                GpuEngine::with_options(&small, Integrator::RrpNewmark, s.dt, p, AdapterChoice::Any, o)
            else {
                continue;
            };
            split += usize::from(chunked.chunk_counts().0 > 1);
            Engine::advance(&mut chunked, steps).unwrap();
            assert!(bits(&mut chunked) == bits(&mut whole), "{p:?}, {bytes} B: chunked results differ");
        }
        assert!(split >= 1, "{p:?}: no run in several chunks");
        // The bonded partners over several pages (8 kB) beside the incidence, and lists of one
        // slot: the impact's new contacts overflow them, so the particle kernel takes the grid
        // walk (which finds bonded and other partners alike) until the lists are laid out anew.
        let o = GpuOptions { page_size: Some(1 << 13), nbr_capacity: Some(1), ..Default::default() };
        let mut paged = GpuEngine::with_options(&m, Integrator::RrpNewmark, s.dt, p, AdapterChoice::Any, o).unwrap();
        assert!(paged.page_counts().1 > 1, "{p:?}: {:?}", paged.page_counts());
        Engine::advance(&mut paged, steps).unwrap();
        assert!(paged.neighbour_capacity() > 1, "{p:?}: the lists must have overflowed and grown");
        assert!(bits(&mut paged) == bits(&mut unlisted), "{p:?}: paged, overflowing run differs");
        if p == Precision::F64 {
            // And the CPU's: the GPU twins agree to round-off (tests/gpu_parity.rs's bound).
            let dx = common::gpu::max_position_diff(&unlisted.snapshot().unwrap(), &reference.snapshot().unwrap());
            assert!(dx < 1e-12, "{dx}");
            assert_eq!(unlisted.diagnostics().unwrap().n_broken, reference.diagnostics().unwrap().n_broken);
        }
    }
}

#[test]
fn a_batch_mixes_replicas_that_list_bonded_pairs_and_replicas_that_do_not() {
    // Contact damping between spheres keeps a replica's bonded pairs listed (its loads are per
    // list entry); a conservative replica of the same batch leaves them out. Each replica of the
    // batch is its run alone, bit for bit, and the damped one matches the CPU (whose lists keep
    // them too) to round-off.
    use rrpdem::engine::BatchEngine;
    use rrpdem::gpu::{AdapterChoice, GpuEngine};
    let (s, plain) = model_from_json(&impact(300, ""));
    let (_, damped) = model_from_json(&impact(300, r#", "damping": {"restitution": 0.4}"#));
    assert!(plain.params.bonded_pairs_unlisted() && !damped.params.bonded_pairs_unlisted());
    let steps = 300;
    for p in [Precision::F64, Precision::F32] {
        let mut b = GpuEngine::new_batch(
            &[&plain, &damped],
            Integrator::RrpNewmark,
            s.dt,
            p,
            AdapterChoice::Any,
            Default::default(),
        )
        .unwrap();
        BatchEngine::advance(&mut b, steps).unwrap();
        let diags = BatchEngine::diagnostics(&mut b).unwrap();
        assert!(diags[1].e_dissipated > 1e-3 * diags[1].total(), "{:?}", diags[1]);
        for (r, m) in [&plain, &damped].into_iter().enumerate() {
            let mut alone = gpu(m, Integrator::RrpNewmark, s.dt, p);
            Engine::advance(&mut alone, steps).unwrap();
            let snap = BatchEngine::snapshot(&mut b, r).unwrap();
            assert!(common::gpu::state_bits(&snap, &diags[r]) == bits(&mut alone), "{p:?}, replica {r}");
        }
    }
    let mut c = cpu(&damped, Integrator::RrpNewmark, s.dt);
    c.advance(steps).unwrap();
    let mut g = gpu(&damped, Integrator::RrpNewmark, s.dt, Precision::F64);
    Engine::advance(&mut g, steps).unwrap();
    assert!(c.neighbour_entries() as f64 > 6.0 * damped.particles.len() as f64, "listed: {}", c.neighbour_entries());
    let dx = common::gpu::max_position_diff(&Engine::snapshot(&mut g).unwrap(), &c.snapshot().unwrap());
    assert!(dx < 1e-12, "{dx}");
}
