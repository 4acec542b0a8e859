//! Issue 24: pairs joined by a bond are not in the contact lists, and their contacts go with
//! the bonds.
//!
//! Both engines' lists leave bonded pairs out (`grid::BondedPartners`). Where contacts between
//! spheres have no friction, the bond pass (the GPU's bond kernel) evaluates each bonded
//! pair's contact once, with its bond, and adds it to the bond's load (its dashpot to the
//! bond's dissipative load): the particle pass visits the lists' partners alone. That sums in
//! another order than when the lists held bonded pairs (the engines' `list_bonded_pairs`, for
//! comparisons, which visit them from both ends in the particle pass), so those runs agree to
//! round-off, not bit for bit; the CPU and the GPU sum in the same order as each other. Where
//! spheres have friction the bonds carry their pairs' sliders too, the tangential history kept
//! per bond on the CPU and per incidence entry on the GPU (`inc_xi`; where that would need more
//! than one buffer the GPU's `dissipate` walks the bonded partners instead:
//! tests/v13_dissipation_gpu.rs).

mod common;
use common::gpu::{bits, cpu, gpu, model_from_json};
use rrpdem::engine::{Engine, Precision};
use rrpdem::integrator::Integrator;

use common::solid_torus_impact_json as impact;

/// How far runs that sum the same contacts in another order may part: the impact amplifies
/// round-off (ε·|x| ≈ 1e-16 per step) to 1.6e-14 in position after these 400 steps on the CPU
/// (measured); the bound is tests/gpu_parity.rs's for the CPU and the GPU in f64.
const REORDERED: f64 = 1e-12;

#[test]
fn the_cpu_lists_leave_bonded_pairs_out_and_bonds_carry_their_contacts() {
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
    let dx = common::gpu::max_position_diff(&unlisted.snapshot().unwrap(), &listed.snapshot().unwrap());
    assert!(dx > 0.0 && dx < REORDERED, "{dx}");
    assert_eq!(d.n_broken, listed.diagnostics().unwrap().n_broken);
    // Broken bonds' pairs stay out of the lists (their contact is found through the bond).
    assert!(entries(&unlisted) < 1.0, "{}", entries(&unlisted));
    // Listed, every bonded neighbour within the skin is there: ~12 in the fcc interior.
    assert!(entries(&listed) > 6.0, "{}", entries(&listed));
}

#[test]
fn the_gpu_lists_leave_bonded_pairs_out_and_bonds_carry_their_contacts() {
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
        if p == Precision::F64 {
            let dx = common::gpu::max_position_diff(&unlisted.snapshot().unwrap(), &listed.snapshot().unwrap());
            assert!(dx > 0.0 && dx < REORDERED, "{dx}");
        }
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
        chunked_runs_equal(&small, s.dt, p, steps, &bits(&mut whole));
        // The bonded partners over several pages (8 kB) beside the incidence, and lists of one
        // slot: the impact's new contacts overflow them, so the particle kernel takes the grid
        // walk (which finds bonded partners too, and leaves them to the bonds) until the lists are laid
        // out anew.
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

/// The impact with every MODEL §10 term on: contact, wall and binder dashpots, and friction
/// between spheres and at the wall (its tangential history kept per contact).
const DISSIPATIVE: &str = r#", "damping": {"restitution": 0.4, "wall_restitution": 0.6,
    "binder": {"axial": 0.5, "shear": 0.3, "bending": 0.01, "twist": 0.02}},
    "friction": {"coefficient": 0.3, "wall_coefficient": 0.5}"#;

/// Contact dashpots and friction without the binder's dashpots.
const NO_BINDER: &str = r#", "damping": {"restitution": 0.4, "wall_restitution": 0.6},
    "friction": {"coefficient": 0.3, "wall_coefficient": 0.5}"#;

#[test]
fn dissipative_contacts_leave_bonded_pairs_out_and_keep_their_history_on_the_cpu() {
    // The dashpots and sliders of a bonded pair are evaluated as its Hertz contact is: with its
    // bond, once, the pair's ξ kept per bond. Listed instead (each pair visited from both ends
    // in the particle pass, ξ kept per contact of each end), or switched to that mid-run (the
    // history then moves from the bonds into the rows), the same contacts sum in another order:
    // the runs agree to round-off, with the same breaks. A save mid-run loaded into a fresh
    // engine goes on bit for bit (the saved history holds each pair once, whoever keeps it).
    let (s, m) = model_from_json(&impact(1500, DISSIPATIVE));
    let steps = 300;
    let mut unlisted = cpu(&m, Integrator::RrpNewmark, s.dt);
    let mut listed = cpu(&m, Integrator::RrpNewmark, s.dt);
    listed.list_bonded_pairs().unwrap();
    let mut switched = cpu(&m, Integrator::RrpNewmark, s.dt);
    assert_eq!(unlisted.neighbour_entries(), 0);
    for e in [&mut unlisted, &mut listed, &mut switched] {
        e.advance(steps / 2).unwrap();
    }
    // Friction is at work (sliding contacts hold ξ ≠ 0) before the switch.
    let xi = Engine::tangential_displacement(&mut switched).unwrap().unwrap();
    let sliding = xi.iter().filter(|&&x| x > 0.0).count();
    assert!(sliding > xi.len() / 2, "{sliding} of {}", xi.len());
    let saved = unlisted.save_state().unwrap();
    switched.list_bonded_pairs().unwrap();
    for e in [&mut unlisted, &mut listed, &mut switched] {
        e.advance(steps / 2).unwrap();
    }
    let d = unlisted.diagnostics().unwrap();
    assert!(d.n_broken > 20 && d.e_dissipated > 1e-2 * d.total(), "{} breaks, {d:?}", d.n_broken);
    // The history followed its pairs through rebuilds of the lists (6 in these steps).
    assert!(unlisted.neighbour_rebuilds() >= 5, "{}", unlisted.neighbour_rebuilds());
    let reference = listed.snapshot().unwrap();
    for (name, e) in [("unlisted", &mut unlisted), ("switched mid-run", &mut switched)] {
        let dx = common::gpu::max_position_diff(&e.snapshot().unwrap(), &reference);
        // Measured: 1.6e-14 for both (the switched run parts from the unlisted one by 7e-16).
        assert!(dx > 0.0 && dx < REORDERED, "{name}: {dx}");
        assert_eq!(e.diagnostics().unwrap().n_broken, listed.diagnostics().unwrap().n_broken, "{name}");
        let xi = |e: &mut rrpdem::engine::CpuEngine| Engine::tangential_displacement(e).unwrap().unwrap();
        let (a, b) = (xi(e), xi(&mut listed));
        let scale = b.iter().copied().fold(0.0, f64::max);
        let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        // ξ is a length like the positions (h·v_t summed): the same round-off bound, relative.
        assert!(
            scale > 0.0 && worst <= REORDERED * scale.max(1.0),
            "{name}: the tangential history differs by {worst:e}"
        );
    }
    let mut resumed = cpu(&m, Integrator::RrpNewmark, s.dt);
    resumed.load_state(&saved).unwrap();
    resumed.advance(steps / 2).unwrap();
    assert!(bits(&mut resumed) == bits(&mut unlisted), "resumed at step {} differs", steps / 2);
    // An engine that lists its bonded pairs keeps every pair's ξ in its rows, renumbered too
    // (into the same order: every list rebuilt mid-run): the same bits and history as never
    // renumbered (the fresh engine once took the per-bond history back, stale every other step
    // where no binder damping made the bond pass rewrite it: so none here).
    let (_, m) = model_from_json(&impact(1500, NO_BINDER));
    let (n, nb) = (m.particles.len(), m.bonds.len());
    let identity = rrpdem::order::Order::from_parts((0..n as u32).collect(), (0..nb as u32).collect(), n, nb).unwrap();
    let mut renumbered = cpu(&m, Integrator::RrpNewmark, s.dt);
    renumbered.list_bonded_pairs().unwrap();
    renumbered.advance(steps / 2).unwrap();
    Engine::renumber(&mut renumbered, &m, &identity).unwrap();
    for k in 0..3 {
        renumbered.advance(steps / 6).unwrap();
        let mut again = cpu(&m, Integrator::RrpNewmark, s.dt);
        again.list_bonded_pairs().unwrap();
        again.advance(steps / 2 + (k + 1) * steps / 6).unwrap();
        assert!(bits(&mut renumbered) == bits(&mut again), "listed and renumbered: differs {k}");
        let xi = |e: &mut rrpdem::engine::CpuEngine| Engine::tangential_displacement(e).unwrap().unwrap();
        assert!(xi(&mut renumbered) == xi(&mut again), "listed and renumbered: ξ differs {k}");
        assert!(renumbered.save_state().unwrap() == again.save_state().unwrap(), "saved states differ {k}");
    }
    let n = m.particles.len() as f64;
    assert!((unlisted.neighbour_entries() as f64) < n, "{}", unlisted.neighbour_entries());
    assert!(listed.neighbour_entries() as f64 > 6.0 * n, "{}", listed.neighbour_entries());
}

#[test]
fn dissipative_contacts_leave_bonded_pairs_out_on_the_gpu_and_a_batch_mixes_models() {
    // The bonded pairs' contacts go with their bonds (the bond kernel's Hertz force, and in
    // `dissipate`'s incidence loop their dashpots and sliders, ξ beside the incidence): listed
    // instead (visited from both ends, ξ in the rows), the same contacts in another order, so the
    // same to round-off with the same breaks; a batch of a conservative, a damped and a
    // frictional torus gives each its run alone; and the frictional one matches the CPU to
    // round-off with the same breaks.
    use rrpdem::engine::BatchEngine;
    use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
    let (s, plain) = model_from_json(&impact(300, ""));
    let (_, damped) = model_from_json(&impact(300, r#", "damping": {"restitution": 0.4}"#));
    let (_, friction) = model_from_json(&impact(300, DISSIPATIVE));
    let steps = 300;
    let mut c = cpu(&friction, Integrator::RrpNewmark, s.dt);
    c.advance(steps).unwrap();
    for p in [Precision::F64, Precision::F32] {
        let open = |m: &rrpdem::model::Model, list_bonded_pairs: bool| {
            let o = GpuOptions { list_bonded_pairs, ..Default::default() };
            GpuEngine::with_options(m, Integrator::RrpNewmark, s.dt, p, AdapterChoice::Any, o).unwrap()
        };
        let mut unlisted = open(&friction, false);
        let mut listed = open(&friction, true);
        assert_eq!(unlisted.neighbour_entries_in_use().unwrap(), 0, "{p:?}");
        Engine::advance(&mut unlisted, steps).unwrap();
        Engine::advance(&mut listed, steps).unwrap();
        let d = Engine::diagnostics(&mut unlisted).unwrap();
        assert!(d.n_broken > 10 && d.e_dissipated > 1e-2 * d.total(), "{p:?}: {d:?}");
        let xi = |e: &mut GpuEngine| Engine::tangential_displacement(e).unwrap().unwrap();
        let x = xi(&mut unlisted);
        assert!(x.iter().any(|&v| v > 0.0), "{p:?}: no tangential history");
        if p == Precision::F64 {
            let dx = common::gpu::max_position_diff(
                &Engine::snapshot(&mut unlisted).unwrap(),
                &Engine::snapshot(&mut listed).unwrap(),
            );
            // Measured: 1.1e-15.
            assert!(dx > 0.0 && dx < REORDERED, "{dx}");
            assert_eq!(d.n_broken, Engine::diagnostics(&mut listed).unwrap().n_broken);
            let (y, scale) = (xi(&mut listed), x.iter().copied().fold(0.0, f64::max));
            let worst = x.iter().zip(&y).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(worst <= REORDERED * scale.max(1.0), "the tangential history differs by {worst:e}");
        }
        assert!(unlisted.neighbour_entries_in_use().unwrap() < friction.particles.len() as u64, "{p:?}");
        if p == Precision::F64 {
            // tests/v13_dissipation_gpu.rs's bound for the CPU twin.
            let dx = common::gpu::max_position_diff(&Engine::snapshot(&mut unlisted).unwrap(), &c.snapshot().unwrap());
            // (Measured 1.1e-15: both engines evaluate the bonded pairs' sliders with the bonds.)
            assert!(dx < 1e-12, "{dx}");
            assert_eq!(d.n_broken, c.diagnostics().unwrap().n_broken);
        }
        let models = [&plain, &damped, &friction];
        let mut b =
            GpuEngine::new_batch(&models, Integrator::RrpNewmark, s.dt, p, AdapterChoice::Any, Default::default())
                .unwrap();
        BatchEngine::advance(&mut b, steps).unwrap();
        let diags = BatchEngine::diagnostics(&mut b).unwrap();
        assert!(diags[1].e_dissipated > 1e-3 * diags[1].total(), "{:?}", diags[1]);
        for (r, m) in models.into_iter().enumerate() {
            let mut alone = gpu(m, Integrator::RrpNewmark, s.dt, p);
            Engine::advance(&mut alone, steps).unwrap();
            let snap = BatchEngine::snapshot(&mut b, r).unwrap();
            assert!(common::gpu::state_bits(&snap, &diags[r]) == bits(&mut alone), "{p:?}, replica {r}");
        }
        // The damped torus's contacts in chunk windows (bindings of 16–64 kB), as in one binding.
        let mut whole = open(&damped, false);
        Engine::advance(&mut whole, steps).unwrap();
        chunked_runs_equal(&damped, s.dt, p, steps, &bits(&mut whole));
    }
}

/// `model` run `steps` steps with bindings of 16, 32 and 64 kB (several chunks of particles,
/// bonds and incidence, as a model of ~10⁷ spheres on a real device) gives `want` (its run in
/// one binding), bit for bit; at least one of them runs in several chunks.
fn chunked_runs_equal(model: &rrpdem::model::Model, dt: f64, p: Precision, steps: u64, want: &[u64]) {
    use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
    let mut split = 0;
    for bytes in [1u64 << 14, 1 << 15, 1 << 16] {
        let o = GpuOptions { max_binding_size: Some(bytes), ..Default::default() };
        // Too small a binding for some particle's bonds is refused (tests/gpu_chunks.rs).
        let Ok(mut chunked) = GpuEngine::with_options(model, Integrator::RrpNewmark, dt, p, AdapterChoice::Any, o)
        else {
            continue;
        };
        split += usize::from(chunked.chunk_counts().0 > 1);
        Engine::advance(&mut chunked, steps).unwrap();
        assert!(bits(&mut chunked) == want, "{p:?}, {bytes} B: chunked results differ");
    }
    assert!(split >= 1, "{p:?}: no run in several chunks");
}
