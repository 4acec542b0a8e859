//! Saved states loaded into a batch (`BatchEngine::load_states`, what a study's `--resume` runs):
//! replicas that each take the state their model alone saved continue as each would alone, bit
//! for bit, at any place in the batch: on the GPU (f32 and f64) with rupture, damping and pair
//! and wall friction (the contact history's partners counted from the replica's first particle,
//! its walls in rows as wide as the batch's most walls), and on the CPU's separate engines.
//! States at different steps, or too few, are refused; a study's `--resume` whose batch cannot
//! load one variant's state continues the others alone, their outputs as uninterrupted.

mod common;

use common::gpu::{bits, scenario_model, small_solid_torus, state_bits};
use rrpdem::engine::{BatchEngine, CpuEngine, Engine, EngineState, Precision, Separate};
use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
use rrpdem::integrator::Integrator;
use rrpdem::interactions::BreakEvent;
use rrpdem::interactions::damping::{Dissipation, restitution_beta};
use rrpdem::model::Model;
use rrpdem::run::{self, EngineChoice, RunOptions};
use rrpdem::study::{self, Study};

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
    let s = small_solid_torus();
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
        // Some pair of the frictional replica has a history at the save (the tail's counts,
        // one u32 per particle, come after the loads; then the partners, ξ and its one wall's ξ).
        let (np, v4) = (models[1].particles.len(), if p == Precision::F32 { 16 } else { 32 });
        let slots = rrpdem::gpu::shader::HIST_SLOTS;
        let data = &alone[1].0.data;
        let counts = &data[data.len() - np * (4 + slots * (4 + v4) + v4)..][..4 * np];
        assert!(counts.iter().any(|&b| b != 0), "{p:?}: no pair history saved");
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

/// A study of the paper torus hitting the wall at `variants` impact speeds (the first as the
/// scenario has it, then 2, 3, …; t_end 0.8, a record every 10 steps), written into `dir`, each
/// variant run on the CPU into `dir/part` and interrupted at step 300, as its batch would have
/// left it: (study file, study, the folder).
fn interrupted_study(dir: &std::path::Path, variants: usize) -> (std::path::PathBuf, Study, std::path::PathBuf) {
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    std::fs::copy(base, dir.join("torus_impact.json")).unwrap();
    let path = dir.join("s.json");
    let list: Vec<String> = (0..variants)
        .map(|k| if k == 0 { "{}".into() } else { format!(r#"{{"/@impact_speed": {}}}"#, k + 1) })
        .collect();
    let text = format!(
        r#"{{"name": "s", "base": "torus_impact.json", "set": {{"/t_end": 0.8, "/record_every": 10}},
            "vary": {{"list": [{}]}}}}"#,
        list.join(", ")
    );
    std::fs::write(&path, text).unwrap();
    let st = Study::load(&path).unwrap();
    let part = dir.join("part");
    study::write_resolved(&st, &part).unwrap();
    for k in 0..variants {
        let stop = RunOptions { stop_at: Some(300), ..Default::default() };
        let dir = study::variant_dir(&part, k);
        assert!(run::run_scenario(&st.scenario(k, &path).unwrap(), &dir, false, &cpu(), stop, &|_| {}).is_err());
    }
    (path, st, part)
}

fn cpu() -> EngineChoice {
    EngineChoice { backend: Some(rrpdem::scenario::Backend::Cpu), ..Default::default() }
}

/// A study of three variants interrupted at step 300 (each run alone to there, as its batch
/// would have left it), variant 1's saved state damaged (a particle short): `resume_variants`
/// cannot load the batch, so it takes the variants one by one; variant 1 fails naming the
/// state, 0 and 2 continue and end as the study run without interruption, byte for byte.
#[test]
fn a_batch_that_cannot_load_one_state_continues_the_others_alone() {
    use rrpdem::checkpoint::Checkpoint;
    let tmp = tempfile::tempdir().unwrap();
    let (path, st, part) = interrupted_study(tmp.path(), 3);
    let whole = tmp.path().join("whole");
    let all: Vec<usize> = (0..3).collect();
    study::prepare_folder(&st, &path, &whole, &all, true, false).unwrap();
    let report =
        study::run_variants(&st, &path, &all, &whole, &cpu(), Default::default(), false, None, &|_, _| {}).unwrap();
    assert!(report.ran.iter().all(|r| r.1.is_ok()));
    let cp_path = study::variant_dir(&part, 1).join("checkpoint.bin");
    let mut cp = Checkpoint::read(&cp_path).unwrap();
    cp.engine.data.truncate(cp.engine.data.len() - 13 * 8);
    cp.write(&cp_path).unwrap();
    let said = std::sync::Mutex::new(Vec::new());
    let ran = study::resume_variants(
        &st,
        &path,
        &part,
        &all,
        None,
        Default::default(),
        None,
        &|line| said.lock().unwrap().push(line),
        &|_, _| {},
    );
    let said = said.into_inner().unwrap();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].contains("continuing variant [0] from step 300") && said[1].contains("variant [2]"), "{said:?}");
    assert_eq!(ran.iter().map(|r| r.0).collect::<Vec<_>>(), all);
    let err = ran[1].1.as_ref().unwrap_err();
    assert!(err.message.contains("cannot start the engine") && err.message.contains("saved state"), "{}", err.message);
    for k in [0, 2] {
        assert!(ran[k].1.as_ref().is_ok_and(|s| s.status == "completed"), "variant {k}");
        for f in ["series.csv", "final_state.csv"] {
            let (a, b) = (study::variant_dir(&whole, k).join(f), study::variant_dir(&part, k).join(f));
            assert!(std::fs::read(a).unwrap() == std::fs::read(b).unwrap(), "variant {k}: {f} differs");
        }
    }
}

/// Before a study's `--resume` runs anything, every interrupted variant's checkpoint is read
/// through: a damaged one (a flipped byte) or another variant's copied in is refused with the
/// others, the folder untouched (before, the resume ran the rest, then failed that variant and
/// advised the same command again). An interrupted variant's summary reports its momenta's drift
/// and energy error up to where it stopped (they were 0 before the guard's first sample). A
/// resume that runs variants from t = 0 beside continued ones says which engine options they
/// take.
#[test]
fn a_study_resume_refuses_damaged_checkpoints_before_running_and_reports_interrupted_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, _, part) = interrupted_study(tmp.path(), 4);
    // The interrupted summary's figures reach step 300: at least the change of P_x between the
    // series' first and last rows (the wall pushes the torus back), and a non-zero energy error.
    let dir0 = study::variant_dir(&part, 0);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir0.join("summary.json")).unwrap()).unwrap();
    let series = std::fs::read_to_string(dir0.join("series.csv")).unwrap();
    let rows: Vec<Vec<f64>> =
        series.lines().skip(1).map(|l| l.split(',').map(|v| v.parse().unwrap()).collect()).collect();
    let px = 11; // step, t, E, E_trans, E_rot, U_bend, U_axial, U_shear, U_contact, U_wall, U_gravity, P_x
    assert_eq!(series.lines().next().unwrap().split(',').nth(px), Some("P_x"));
    let (first, last) = (&rows[0], rows.last().unwrap());
    assert_eq!(last[0], 300.0);
    let budget = &summary["energy_and_momenta"];
    let change = (last[px] - first[px]).abs();
    assert!(change > 1e-3 && budget["drift_p"][0].as_f64().unwrap() >= change, "{budget} vs {change}");
    assert!(budget["final_rel_energy_deviation"].as_f64().unwrap() > 0.0, "{budget}");
    // Variant 1's checkpoint damaged, variant 2's replaced by variant 3's: refused up front.
    let cp = |k: usize| study::variant_dir(&part, k).join("checkpoint.bin");
    let mut bytes = std::fs::read(cp(1)).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 16;
    std::fs::write(cp(1), bytes).unwrap();
    std::fs::copy(cp(3), cp(2)).unwrap();
    let bin = env!("CARGO_BIN_EXE_rrpdem");
    let resume = || {
        std::process::Command::new(bin)
            .args(["study", path.to_str().unwrap(), "--resume", "--out", part.to_str().unwrap(), "--backend", "cpu"])
            .output()
            .unwrap()
    };
    let before: Vec<Vec<u8>> =
        (0..4).map(|k| std::fs::read(study::variant_dir(&part, k).join("series.csv")).unwrap()).collect();
    let o = resume();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("variant 1: corrupt") && err.contains("variant 2: outputs of another study"), "{err}");
    assert!(err.contains("its checkpoint.bin is of another scenario") && err.contains("remove their folders"), "{err}");
    let after: Vec<Vec<u8>> =
        (0..4).map(|k| std::fs::read(study::variant_dir(&part, k).join("series.csv")).unwrap()).collect();
    assert!(before == after, "the refused resume ran something");
    // With those two folders removed they run from t = 0 beside the two continued, on the
    // engine options the command gives (said).
    for k in [1, 2] {
        std::fs::remove_dir_all(study::variant_dir(&part, k)).unwrap();
    }
    let o = resume();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    assert!(err.contains("the [1, 2] run from t = 0 take the engine options of this command (--backend cpu)"), "{err}");
    assert!(err.contains("continuing variants [0, 3] from step 300 (t = 0.3) on CPU"), "{err}");
}
