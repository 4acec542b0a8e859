//! V13 (MODEL §10) on the GPU engine: the dashpots (pairs and walls) and the viscous binder
//! against the CPU reference in f64 and f32, with rupture; the ledger E_dissipated; bit-identical
//! resumes, batches and rollbacks; the grid walk of an overflowed neighbour list; friction
//! refused with a message that names the CPU engine.

mod common;

use common::gpu::{cpu, gpu, lattice_model_with, lattice_params, model_from_json, state_bits};
use rrpdem::engine::{BatchEngine, Engine, Precision};

/// Replica r's bits in a batch.
fn replica_bits(b: &mut GpuEngine, r: usize) -> Vec<u64> {
    let d = BatchEngine::diagnostics(b).unwrap()[r];
    state_bits(&BatchEngine::snapshot(b, r).unwrap(), &d)
}
use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
use rrpdem::integrator::Integrator;
use rrpdem::interactions::{Dissipation, restitution_beta};
use rrpdem::model::Model;

const DT: f64 = 1e-3;

/// A bonded 6×5×4 block of overlapping spheres falling on a floor with every dashpot on and
/// distinct coefficients (pairs e = 0.5, wall e = 0.3, binder γ distinct per channel).
fn block() -> Model {
    let mut prm = lattice_params();
    prm.dissipation = Some(Dissipation {
        beta: restitution_beta(0.5),
        beta_wall: restitution_beta(0.3),
        mu: 0.0,
        mu_wall: 0.0,
        stiffness_ratio: 2.0 / 7.0,
        binder: [0.8, 0.5, 0.05, 0.03],
    });
    lattice_model_with(6, 5, 4, 0.97, true, 17, prm)
}

/// A 300-sphere solid torus hitting a wall at speed 1 with rupture and every dashpot on.
fn torus() -> Model {
    model_from_json(
        r#"{"name": "t", "dt": 1e-3, "t_end": 1, "particle": {"mass": 1, "inertia": 1},
        "stiffness": {"bending": 10, "axial": 200, "shear": 200, "contact": 2100, "wall": 2100}, "shear": "objective",
        "walls": [{"point": [0, 0, 0], "normal": [1, 0, 0]}], "rupture": {"tension": 0.01, "shear": 0.1},
        "damping": {"restitution": 0.5, "wall_restitution": 0.3,
            "binder": {"axial": 0.5, "shear": 0.4, "bending": 0.01, "twist": 0.02}},
        "bodies": [{"type": "torus_solid", "torus_diameter": 3, "tube_diameter": 1, "particles": 300,
            "lattice": "fcc", "gap": 0.02, "velocity": [-1, 0, 0]}]}"#,
    )
    .1
}

#[test]
fn damped_runs_on_the_gpu_match_the_cpu_in_f64_and_f32() {
    for (name, model, steps) in [("block", block(), 400u64), ("torus", torus(), 600)] {
        let mut c = cpu(&model, Integrator::RrpNewmark, DT);
        let e0 = c.diagnostics().unwrap().budget_total().abs();
        for p in [Precision::F64, Precision::F32] {
            let mut g = gpu(&model, Integrator::RrpNewmark, DT, p);
            let mut c = cpu(&model, Integrator::RrpNewmark, DT);
            // In three advances (batch ends inside the impact).
            let (mut dx, mut dm, mut de) = (0.0f64, 0.0f64, 0.0f64);
            for k in [steps / 3, steps / 3, steps - 2 * (steps / 3)] {
                let (x, m, e) = common::gpu::compare(&mut g, &mut c, k);
                (dx, dm, de) = (dx.max(x), dm.max(m), de.max(e));
            }
            let (dg, dc) = (Engine::diagnostics(&mut g).unwrap(), c.diagnostics().unwrap());
            let dd = (dg.e_dissipated - dc.e_dissipated).abs();
            let dw = (dg.f_wall - dc.f_wall).length();
            eprintln!(
                "{name} {p:?}: positions {dx:.2e}, motions {dm:.2e}, energies {de:.2e}, E_dissipated {:.6} vs {:.6} \
                 ({dd:.2e}), wall force {dw:.2e}, {} broken",
                dg.e_dissipated, dc.e_dissipated, dc.n_broken
            );
            assert!(dc.e_dissipated > 0.01 * e0, "{name}: the run dissipates ({} of {e0})", dc.e_dissipated);
            // As V7 for the conservative model (tests/gpu_parity.rs): f64 1e-10 of the size (6)
            // and of E0 — both engines make the same f64 operations but for a few summation
            // orders; f32 1e-4 (round-off 6e-8 grown over a few hundred steps of contacts).
            let (tol_x, tol_e) = match p {
                Precision::F64 => (6e-10, 1e-10 * e0),
                Precision::F32 => (1e-4 * 6.0, 1e-4 * e0),
            };
            assert!(dx <= tol_x, "{name} {p:?}: positions differ by {dx:e}");
            assert!(de <= tol_e && dd <= tol_e, "{name} {p:?}: energies {de:e}, E_dissipated {dd:e}");
            assert!(dw <= tol_e * 1e3, "{name} {p:?}: wall force differs by {dw:e}");
            if name == "torus" {
                assert!(dc.n_broken > 0 && dg.n_broken == dc.n_broken || p == Precision::F32, "{name} {p:?}");
            }
        }
    }
}

#[test]
fn the_gpu_ledger_is_second_order_and_dashpots_only_take_energy() {
    // E + E_released + E_dissipated on the GPU (f64): its error falls about 4× when h halves,
    // as the CPU's (tests/v13_dissipation.rs), and E_dissipated never decreases.
    let model = torus();
    let err = |dt: f64, steps: u64| {
        let mut g = gpu(&model, Integrator::RrpNewmark, dt, Precision::F64);
        let b0 = Engine::diagnostics(&mut g).unwrap().budget_total();
        let (mut worst, mut last) = (0.0f64, 0.0f64);
        for _ in 0..20 {
            Engine::advance(&mut g, steps / 20).unwrap();
            let d = Engine::diagnostics(&mut g).unwrap();
            worst = worst.max((d.budget_total() - b0).abs());
            assert!(d.e_dissipated >= last, "E_dissipated fell from {last} to {}", d.e_dissipated);
            last = d.e_dissipated;
        }
        (worst, last)
    };
    let (e1, d1) = err(2e-3, 300);
    let (e2, _) = err(1e-3, 600);
    let (e4, _) = err(5e-4, 1200);
    eprintln!("ledger error {e1:.3e} → {e2:.3e} → {e4:.3e}; E_dissipated {d1}");
    assert!(d1 > 0.0 && e1 / e2 > 3.0 && e2 / e4 > 3.0, "not second order: {e1:e} {e2:e} {e4:e}");
}

#[test]
fn damped_gpu_runs_resume_batch_and_roll_back_bit_for_bit() {
    let model = torus();
    for p in [Precision::F64, Precision::F32] {
        let mut whole = gpu(&model, Integrator::RrpNewmark, DT, p);
        Engine::advance(&mut whole, 500).unwrap();
        let want = common::gpu::bits(&mut whole);
        // Resume: saved at step 250 mid-impact, loaded into a fresh engine.
        let mut first = gpu(&model, Integrator::RrpNewmark, DT, p);
        Engine::advance(&mut first, 250).unwrap();
        let saved = Engine::save_state(&mut first).unwrap();
        let mut resumed = gpu(&model, Integrator::RrpNewmark, DT, p);
        Engine::load_state(&mut resumed, &saved).unwrap();
        Engine::advance(&mut resumed, 250).unwrap();
        assert_eq!(common::gpu::bits(&mut resumed), want, "{p:?}: resumed");
        // Rollback: 100 steps taken back and taken again.
        Engine::advance(&mut first, 100).unwrap();
        Engine::rollback(&mut first).unwrap();
        Engine::advance(&mut first, 250).unwrap();
        assert_eq!(common::gpu::bits(&mut first), want, "{p:?}: rolled back");
        // A batch with a conservative model and the block: each replica as alone.
        let plain = lattice_model_with(3, 3, 3, 0.97, true, 5, lattice_params());
        let other = block();
        let mut b = GpuEngine::new_batch(
            &[&plain, &model, &other],
            Integrator::RrpNewmark,
            DT,
            p,
            AdapterChoice::Any,
            GpuOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        BatchEngine::advance(&mut b, 500).unwrap();
        assert_eq!(replica_bits(&mut b, 1), want, "{p:?}: in a batch");
        for (r, m) in [(0, &plain), (2, &other)] {
            let mut alone = gpu(m, Integrator::RrpNewmark, DT, p);
            Engine::advance(&mut alone, 500).unwrap();
            assert_eq!(replica_bits(&mut b, r), common::gpu::bits(&mut alone), "{p:?}: replica {r}");
        }
    }
}

#[test]
fn an_overflowed_list_gives_the_same_dashpots_bit_for_bit() {
    // Lists of capacity 1 overflow at once: the first evaluation walks the grid
    // (shaders/walk.wgsl) in index order, as later lists do; the run equals the one with room.
    let model = block();
    let mut roomy = gpu(&model, Integrator::RrpNewmark, DT, Precision::F64);
    let tiny = GpuOptions { nbr_capacity: Some(1), ..Default::default() };
    let mut walked =
        GpuEngine::with_options(&model, Integrator::RrpNewmark, DT, Precision::F64, AdapterChoice::Any, tiny)
            .unwrap_or_else(|e| panic!("{e}"));
    Engine::advance(&mut roomy, 200).unwrap();
    Engine::advance(&mut walked, 200).unwrap();
    assert!(walked.fallback_steps() > 0 || walked.neighbour_capacity() > 1, "the tiny lists overflowed");
    assert_eq!(common::gpu::bits(&mut walked), common::gpu::bits(&mut roomy));
}

#[test]
fn friction_is_refused_on_the_gpu_and_auto_picks_the_cpu() {
    let mut model = block();
    if let Some(d) = model.params.dissipation.as_mut() {
        d.mu_wall = 0.4;
    }
    let err =
        GpuEngine::new(&model, Integrator::RrpNewmark, DT, Precision::F64, AdapterChoice::Any).err().expect("refused");
    let text = err.to_string();
    assert!(text.contains("friction") && text.contains("backend `cpu`"), "{text}");
    let auto = rrpdem::engine::create(&model, Integrator::RrpNewmark, DT, rrpdem::engine::Backend::Auto, None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(auto.info().backend, "cpu", "auto picks the CPU engine for friction");
}
