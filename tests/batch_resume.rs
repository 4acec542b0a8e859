//! Saved states loaded into a batch (`BatchEngine::load_states`, what a study's `--resume` runs):
//! replicas that each take the state their model alone saved continue as each would alone, bit
//! for bit, at any place in the batch: on the GPU (f32 and f64) with rupture, damping and pair
//! and wall friction (the contact history's partners counted from the replica's first particle,
//! its walls in rows as wide as the batch's most walls), and on the CPU's separate engines.
//! States at different steps, or too few, are refused.

mod common;

use common::gpu::{bits, scenario_model, state_bits};
use rrpdem::engine::{BatchEngine, CpuEngine, Engine, EngineState, Precision, Separate};
use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
use rrpdem::integrator::Integrator;
use rrpdem::interactions::BreakEvent;
use rrpdem::interactions::damping::{Dissipation, restitution_beta};
use rrpdem::model::Model;

const DT: f64 = 1e-3;
/// Steps before the states are saved, and after.
const BEFORE: u64 = 150;
const AFTER: u64 = 120;

/// Three distinct replicas: the paper torus between two walls (no dissipation); a small solid
/// torus at the wall with rupture, every damper and friction between spheres and at its one
/// wall (so its wall history rows are narrower than the batch's two walls, and its pairs are
/// numbered from particle 80 when it comes second); the paper torus with damping only.
fn models() -> Vec<Model> {
    let (mut s, _) = scenario_model("torus_impact.json");
    s.walls = serde_json::from_str(
        r#"[ { "point": [0, 0, 0], "normal": [1, 0, 0] }, { "point": [0, -1.6, 0], "normal": [0, 1, 0] } ]"#,
    )
    .unwrap();
    let two_walls = s.build_model().unwrap();
    let (mut s, _) = scenario_model("solid_torus_impact.json");
    s.bodies[0] = serde_json::from_str(
        r#"{"type": "torus_solid", "torus_diameter": 3, "tube_diameter": 1, "particles": 150, "lattice": "fcc",
            "gap": 0, "velocity": [-1, 0, 0]}"#,
    )
    .unwrap();
    s.rupture = Some(serde_json::from_str(r#"{"tension": 0.004, "shear": 0.04}"#).unwrap());
    let mut solid = s.build_model().unwrap();
    solid.params.dissipation = Some(Dissipation {
        beta: restitution_beta(0.5),
        beta_wall: restitution_beta(0.3),
        mu: 0.3,
        mu_wall: 0.5,
        stiffness_ratio: 2.0 / 7.0,
        binder: [0.5, 0.5, 0.01, 0.01],
    });
    let mut damped = scenario_model("torus_impact.json").1;
    damped.params.dissipation =
        Some(Dissipation { beta: restitution_beta(0.7), beta_wall: restitution_beta(0.6), ..Default::default() });
    vec![two_walls, solid, damped]
}

/// Each model alone: its state saved after `BEFORE` steps, then its bits and breaks after
/// `AFTER` more.
fn alone_runs(
    models: &[Model],
    mut make: impl FnMut(&Model) -> Box<dyn Engine>,
) -> Vec<(EngineState, Vec<u64>, Vec<BreakEvent>)> {
    models
        .iter()
        .map(|m| {
            let mut e = make(m);
            e.advance(BEFORE).unwrap();
            let saved = e.save_state().unwrap();
            e.take_breaks();
            e.advance(AFTER).unwrap();
            (saved, bits(e.as_mut()), e.take_breaks())
        })
        .collect()
}

/// Loads the saved states of `order` (indices into the models) into `batch` and checks that
/// every replica continues as its model alone did.
fn check_loaded(
    batch: &mut dyn BatchEngine,
    order: &[usize],
    alone: &[(EngineState, Vec<u64>, Vec<BreakEvent>)],
    what: &str,
) {
    let states: Vec<EngineState> = order.iter().map(|&m| alone[m].0.clone()).collect();
    batch.load_states(&states).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(batch.steps_done(), BEFORE, "{what}");
    batch.advance(AFTER).unwrap();
    let diags = batch.diagnostics().unwrap();
    let breaks = batch.take_breaks();
    for (r, &m) in order.iter().enumerate() {
        assert!(batch.take_failure(r).is_none(), "{what}: replica {r} failed");
        let got = state_bits(&batch.snapshot(r).unwrap(), &diags[r]);
        assert!(got == alone[m].1, "{what}: replica {r} (model {m}) differs from its model alone");
        let own: Vec<BreakEvent> = breaks.iter().filter(|b| b.0 == r).map(|b| b.1).collect();
        assert_eq!(own, alone[m].2, "{what}: replica {r}'s breaks");
    }
}

#[test]
fn a_gpu_batch_loaded_with_saved_states_continues_each_as_alone() {
    let models = models();
    for p in [Precision::F32, Precision::F64] {
        let alone = alone_runs(&models, |m| {
            Box::new(GpuEngine::new(m, Integrator::RrpNewmark, DT, p, AdapterChoice::Any).unwrap_or_else(|e| {
                panic!("GPU engine unavailable: {e} (apt-get install mesa-vulkan-drivers libvulkan1)")
            }))
        });
        // The test must be able to fail: the frictional replica's history is not empty, and its
        // bonds break after the save.
        assert!(alone[1].0.data.len() > alone[2].0.data.len(), "{p:?}: no dissipation tail saved");
        assert!(!alone[1].2.is_empty(), "{p:?}: no bond breaks after the save");
        for order in [[0, 1, 2], [1, 2, 0], [2, 0, 1]] {
            let refs: Vec<&Model> = order.iter().map(|&m| &models[m]).collect();
            let mut batch =
                GpuEngine::new_batch(&refs, Integrator::RrpNewmark, DT, p, AdapterChoice::Any, GpuOptions::default())
                    .unwrap();
            // A batch that has stepped already takes the states as well.
            BatchEngine::advance(&mut batch, 7).unwrap();
            check_loaded(&mut batch, &order, &alone, &format!("{p:?}, order {order:?}"));
        }
        // States at different steps, or one too few, are refused.
        let refs: Vec<&Model> = models.iter().collect();
        let mut batch =
            GpuEngine::new_batch(&refs, Integrator::RrpNewmark, DT, p, AdapterChoice::Any, GpuOptions::default())
                .unwrap();
        let mut states: Vec<EngineState> = alone.iter().map(|a| a.0.clone()).collect();
        let err = BatchEngine::load_states(&mut batch, &states[..2]).unwrap_err().to_string();
        assert!(err.contains("2 saved states for a batch of 3"), "{err}");
        states[2].step += 1;
        let err = BatchEngine::load_states(&mut batch, &states).unwrap_err().to_string();
        assert!(err.contains("replica 2's saved state is at step 151, replica 0's at 150"), "{err}");
        // Another replica's state (another model's size) is refused, naming the replica.
        states.swap(0, 1);
        states[2].step -= 1;
        let err = BatchEngine::load_states(&mut batch, &states).unwrap_err().to_string();
        assert!(err.contains("replica 0: the saved state holds"), "{err}");
    }
}

#[test]
fn cpu_engines_of_a_batch_loaded_with_saved_states_continue_each_as_alone() {
    let models = models();
    let alone = alone_runs(&models, |m| Box::new(CpuEngine::new(m, Integrator::RrpNewmark, DT).unwrap()));
    let order = [2, 0, 1];
    let engines: Vec<CpuEngine> =
        order.iter().map(|&m| CpuEngine::new(&models[m], Integrator::RrpNewmark, DT).unwrap()).collect();
    let mut batch = Separate::new(engines, true);
    check_loaded(&mut batch, &order, &alone, "cpu");
}
