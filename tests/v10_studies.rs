//! V10 (studies): a variant run inside a study equals the same variant run alone, bit for bit;
//! a study run as shards and merged equals the study run whole; invalid variants are refused
//! before anything runs, naming the variant and the field; JSON Pointer overrides, grids,
//! seeded random samples and the impact convenience pointers resolve as documented.

mod common;

use common::reopen;
use rrpdem::run::{self, EngineChoice};
use rrpdem::scenario::Backend;
use rrpdem::study::{self, Study};
use std::path::{Path, PathBuf};
use std::process::Command;

fn rrpdem(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rrpdem")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
}

/// A study of the paper torus (with rupture) written next to a copy of its base scenario, to
/// t = `t_end`: 2 speeds × 2 shear laws.
fn small_study(dir: &Path, t_end: f64) -> PathBuf {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    std::fs::copy(base, dir.join("torus_impact.json")).unwrap();
    let text = format!(
        r#"{{"name": "mini", "base": "torus_impact.json",
            "set": {{"/t_end": {t_end}, "/record_every": 5, "/rupture": {{"bending": 0.3}}}},
            "vary": {{"grid": {{"/@impact_speed": [1, 3], "/shear": ["paper", "objective"]}}}}}}"#
    );
    let p = dir.join("mini.json");
    std::fs::write(&p, text).unwrap();
    p
}

fn strip_timing(csv: &str) -> String {
    // wall_time_s and particle_steps_per_s are the last two columns.
    csv.lines().map(|l| l.rsplitn(3, ',').nth(2).unwrap_or(l).to_string()).collect::<Vec<_>>().join("\n")
}

fn variant_alone_matches(backend: &str, precision: Option<&str>) {
    let tmp = tempfile::tempdir().unwrap();
    let path = small_study(tmp.path(), 2.0);
    let out = tmp.path().join("out");
    let mut args = vec!["study", path.to_str().unwrap(), "--out", out.to_str().unwrap(), "--backend", backend];
    if let Some(p) = precision {
        args.extend(["--precision", p]);
    }
    let o = rrpdem(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = Study::load(&path).unwrap();
    assert_eq!(s.variants.len(), 4);
    let choice = EngineChoice {
        backend: Some(if backend == "cpu" { Backend::Cpu } else { Backend::Gpu }),
        precision: precision
            .map(|p| if p == "f32" { rrpdem::engine::Precision::F32 } else { rrpdem::engine::Precision::F64 }),
        ..Default::default()
    };
    for k in [0, 3] {
        let alone = tmp.path().join(format!("alone{k}"));
        let scenario = s.scenario(k, &path).unwrap();
        run::run_scenario(&scenario, &alone, false, &choice, Default::default(), &|_| {}).unwrap();
        for f in ["series.csv", "final_state.csv", "breaks.csv"] {
            let a = std::fs::read(alone.join(f)).unwrap();
            let b = std::fs::read(study::variant_dir(&out, k).join(f)).unwrap();
            assert!(a == b, "{backend}: variant {k}: {f} differs from the variant run alone");
        }
    }
    let table = std::fs::read_to_string(out.join("study.csv")).unwrap();
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 5);
    assert!(rows[0].starts_with("variant,/@impact_speed,/shear,status,"), "{}", rows[0]);
    assert!(rows[4].starts_with("3,3,objective,completed,"), "{}", rows[4]);
}

#[test]
fn variant_in_a_study_equals_the_variant_alone_cpu() {
    variant_alone_matches("cpu", None);
}

#[test]
fn variant_in_a_study_equals_the_variant_alone_gpu_f64() {
    variant_alone_matches("gpu", Some("f64"));
}

#[test]
fn shards_merged_equal_the_whole_study() {
    let tmp = tempfile::tempdir().unwrap();
    let path = small_study(tmp.path(), 1.0);
    let (whole, sharded) = (tmp.path().join("whole"), tmp.path().join("sharded"));
    assert!(rrpdem(&["study", path.to_str().unwrap(), "--out", whole.to_str().unwrap()]).status.success());
    for i in 0..3 {
        let shard = format!("{i}/3");
        let o = rrpdem(&["study", path.to_str().unwrap(), "--out", sharded.to_str().unwrap(), "--shard", &shard]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        if i == 0 {
            // Before every shard has run, the merge reports what is missing.
            let m = rrpdem(&["study", "--merge", sharded.to_str().unwrap()]);
            let err = String::from_utf8_lossy(&m.stderr);
            assert!(!m.status.success() && err.contains("[1, 2]"), "{err}");
        }
    }
    let m = rrpdem(&["study", "--merge", sharded.to_str().unwrap()]);
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let a = std::fs::read_to_string(whole.join("study.csv")).unwrap();
    let b = std::fs::read_to_string(sharded.join("study.csv")).unwrap();
    assert_eq!(strip_timing(&a), strip_timing(&b));
    assert!(a != strip_timing(&a), "the timing columns were there to strip");
}

#[test]
fn an_invalid_variant_is_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    std::fs::copy(base, tmp.path().join("torus_impact.json")).unwrap();
    let p = tmp.path().join("bad.json");
    std::fs::write(&p, r#"{"name": "bad", "base": "torus_impact.json", "vary": {"list": [{"/stiffness/contact": 10}, {"/stiffness/contact": -5}]}}"#)
        .unwrap();
    let err = Study::load(&p).unwrap_err().to_string();
    assert!(err.contains("variant 1") && err.contains("stiffness.contact") && err.contains("-5"), "{err}");
    let out = tmp.path().join("out");
    let o = rrpdem(&["study", p.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(!out.exists(), "nothing ran");
    // A pointer into nothing, an unknown field, a variant above the stability estimate.
    for (vary, needle) in [
        (r#"{"list": [{"/bodies/3/velocity/0": 1}]}"#, "past the end"),
        (r#"{"list": [{"/stiffnes/contact": 1}]}"#, "unknown field"),
        (r#"{"list": [{"/dt": 0.05}]}"#, "stability estimate"),
        (r#"{"grid": {"stiffness": [1]}}"#, "JSON Pointer"),
        // An integrator the engine would refuse to start with (it ran as "missing").
        (
            r#"{"list": [{"/integrator": "rrp-newmark"}, {"/integrator": "em"}]}"#,
            "variant 1 (/integrator = \"em\"): integrator `em` moves translations only",
        ),
    ] {
        std::fs::write(&p, format!(r#"{{"name": "bad", "base": "torus_impact.json", "vary": {vary}}}"#)).unwrap();
        let err = Study::load(&p).unwrap_err().to_string();
        assert!(err.contains(needle), "{vary}: {err}");
    }
    // A bad value from `set` is said to come from there (the variant's overrides do not hold it),
    // a variant that overrides the field is not, and a variant without overrides says so.
    for (set, vary, needles, not) in [
        (
            r#"{"/damping/restitution": 2}"#,
            r#"{"list": [{"/dt": 1e-3}]}"#,
            vec![
                "variant 0 (/dt = 0.001)",
                "damping.restitution",
                "comes from the study's `set`: /damping/restitution = 2",
            ],
            None,
        ),
        (
            r#"{"/rupture": {"tension": -1}}"#,
            r#"{"list": [{}]}"#,
            vec!["variant 0 (no overrides)", "rupture.tension", r#"`set`: /rupture = {"tension":-1}"#],
            None,
        ),
        // A misspelt field that only `set` names (before: blamed on the variant alone).
        (
            r#"{"/dampng/restitution": 0.3}"#,
            r#"{"list": [{"/friction/coefficient": 0.1}]}"#,
            vec![
                "variant 0 (/friction/coefficient = 0.1)",
                "unknown field `dampng`",
                "the study's `set` writes into it: /dampng/restitution = 0.3",
            ],
            None,
        ),
        (
            r#"{"/stiffness/contact": 5}"#,
            r#"{"list": [{"/stiffness/contact": -5}]}"#,
            vec!["variant 0 (/stiffness/contact = -5)", "stiffness.contact"],
            Some("`set`"),
        ),
    ] {
        let text = format!(r#"{{"name": "bad", "base": "torus_impact.json", "set": {set}, "vary": {vary}}}"#);
        std::fs::write(&p, text).unwrap();
        let err = Study::load(&p).unwrap_err().to_string();
        for n in needles {
            assert!(err.contains(n), "{set}, {vary}: `{n}` in {err}");
        }
        assert!(not.is_none_or(|n| !err.contains(n)), "{set}, {vary}: {err}");
    }
}

#[test]
fn overrides_grid_random_and_impact_pointers_resolve_as_documented() {
    let tmp = tempfile::tempdir().unwrap();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    std::fs::copy(base, tmp.path().join("torus_impact.json")).unwrap();
    let p = tmp.path().join("s.json");
    // Grid: 2 × 3, last pointer fastest; a pointer that creates `rupture`.
    std::fs::write(
        &p,
        r#"{"name": "g", "base": "torus_impact.json",
            "vary": {"grid": {"/rupture/tension": [0.1, 0.2], "/stiffness/axial": [100, 150, 250]}}}"#,
    )
    .unwrap();
    let s = Study::load(&p).unwrap();
    assert_eq!(s.variants.len(), 6);
    let v4 = s.scenario(4, &p).unwrap();
    assert_eq!(v4.rupture.as_ref().unwrap().tension, Some(0.2));
    assert_eq!(v4.stiffness.axial, 150.0);
    assert_eq!(v4.name, "g_4");
    // Random: reproducible from the seed, inside the ranges, log-uniform where asked.
    std::fs::write(
        &p,
        r#"{"name": "r", "base": "torus_impact.json",
            "vary": {"random": {"samples": 50, "seed": 9, "ranges": {"/stiffness/bending": [5, 15],
                     "/stiffness/contact": {"lo": 100, "hi": 10000, "log": true}}}}}"#,
    )
    .unwrap();
    let (a, b) = (Study::load(&p).unwrap(), Study::load(&p).unwrap());
    assert_eq!(a.variants, b.variants);
    let kc: Vec<f64> = a.variants.iter().map(|v| v["/stiffness/contact"].as_f64().unwrap()).collect();
    assert!(kc.iter().all(|k| (100.0..=10000.0).contains(k)));
    let below_1000 = kc.iter().filter(|k| **k < 1000.0).count();
    // Log-uniform: half the samples below the geometric midpoint 1000 (a uniform draw would put
    // 9 % there); 50 samples give 25 ± 3.5, so 15..35 is a loose 3σ band.
    assert!((15..=35).contains(&below_1000), "{below_1000}");
    // Impact pointers: speed 2 at 30° from the wall normal (+x): v = −2 (cos 30°, sin 30° t).
    std::fs::write(
        &p,
        r#"{"name": "i", "base": "torus_impact.json", "vary": {"list": [{"/@impact_speed": 2, "/@impact_angle": 30}]}}"#,
    )
    .unwrap();
    let s = Study::load(&p).unwrap().scenario(0, &p).unwrap();
    let rrpdem::scenario::Body::TorusRing(r) = &s.bodies[0] else { panic!() };
    assert!((r.velocity.length() - 2.0).abs() < 1e-12);
    assert!((r.velocity.x + 2.0 * 30f64.to_radians().cos()).abs() < 1e-12, "{}", r.velocity);
    // At 90° along the wall exactly (cos 90° in radians is 6e-17: the body drifted towards the
    // wall at round-off and "rebounded" with a restitution of 5.25), at 0° straight at it.
    for (angle, normal) in [(90, 0.0), (0, -2.0)] {
        let text = format!(
            r#"{{"name": "i", "base": "torus_impact.json", "vary": {{"list": [{{"/@impact_speed": 2, "/@impact_angle": {angle}}}]}}}}"#
        );
        std::fs::write(&p, text).unwrap();
        let s = Study::load(&p).unwrap().scenario(0, &p).unwrap();
        let rrpdem::scenario::Body::TorusRing(r) = &s.bodies[0] else { panic!() };
        assert_eq!((r.velocity.x, r.velocity.length()), (normal, 2.0), "{angle}°: {}", r.velocity);
    }
}

/// A batch whose replicas end differently: one trips the energy guard (a limit below what the
/// impact's error reaches), one ends early (shorter `t_end`), two complete. Each variant's
/// outputs equal the same variant run alone, the failing one included (its error, its last good
/// state), so a failing or finished replica neither stops nor disturbs the others.
fn mixed_endings_match_alone(backend: &str, precision: Option<&str>) {
    let tmp = tempfile::tempdir().unwrap();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    std::fs::copy(base, tmp.path().join("torus_impact.json")).unwrap();
    let path = tmp.path().join("mixed.json");
    std::fs::write(
        &path,
        r#"{"name": "mixed", "base": "torus_impact.json", "set": {"/t_end": 3.0, "/record_every": 7},
            "vary": {"list": [{}, {"/max_energy_error": 1e-7}, {"/t_end": 1.234}, {"/@impact_speed": 3}]}}"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let mut args = vec!["study", path.to_str().unwrap(), "--out", out.to_str().unwrap(), "--backend", backend];
    if let Some(p) = precision {
        args.extend(["--precision", p]);
    }
    let o = rrpdem(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("did not complete: [1]") && !o.status.success(), "{err}");
    let s = Study::load(&path).unwrap();
    let choice = EngineChoice {
        backend: Some(if backend == "cpu" { Backend::Cpu } else { Backend::Gpu }),
        precision: precision
            .map(|p| if p == "f32" { rrpdem::engine::Precision::F32 } else { rrpdem::engine::Precision::F64 }),
        ..Default::default()
    };
    for k in 0..4 {
        let alone = tmp.path().join(format!("alone{k}"));
        let r = run::run_scenario(&s.scenario(k, &path).unwrap(), &alone, false, &choice, Default::default(), &|_| {});
        assert_eq!(r.is_err(), k == 1, "variant {k} alone: {:?}", r.err());
        for f in ["series.csv", "final_state.csv"] {
            let a = std::fs::read(alone.join(f)).unwrap();
            let b = std::fs::read(study::variant_dir(&out, k).join(f)).unwrap();
            assert!(a == b, "{backend}: variant {k}: {f} differs from the variant run alone");
        }
        let summary = |d: &Path| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(d.join("summary.json")).unwrap()).unwrap()
        };
        let (a, b) = (summary(&alone), summary(&study::variant_dir(&out, k)));
        for field in ["status", "steps", "t_final", "energy_and_momenta", "final_diagnostics", "impact"] {
            assert_eq!(a[field], b[field], "variant {k}: summary field {field}");
        }
    }
    let status = |k: usize| {
        let t = std::fs::read_to_string(study::variant_dir(&out, k).join("summary.json")).unwrap();
        serde_json::from_str::<serde_json::Value>(&t).unwrap()["status"].as_str().unwrap().to_string()
    };
    assert!(status(1).starts_with("error: energy guard"), "{}", status(1));
    let steps2: u64 = {
        let t = std::fs::read_to_string(study::variant_dir(&out, 2).join("summary.json")).unwrap();
        serde_json::from_str::<serde_json::Value>(&t).unwrap()["steps"].as_u64().unwrap()
    };
    assert_eq!(steps2, 1234, "the short variant ends at its own t_end");
}

#[test]
fn a_failing_or_short_variant_leaves_the_batch_alone_cpu() {
    mixed_endings_match_alone("cpu", None);
}

#[test]
fn a_failing_or_short_variant_leaves_the_batch_alone_gpu_f64() {
    mixed_endings_match_alone("gpu", Some("f64"));
}

#[test]
fn variant_in_a_study_equals_the_variant_alone_gpu_f32() {
    // f32 too: each replica keeps its own position origin and reduction order in the batch.
    variant_alone_matches("gpu", Some("f32"));
}

/// A GPU memory budget that holds two replicas splits the four-variant study into two batches of
/// two (from the memory estimate, before anything is allocated), and the variants' outputs
/// still equal the variants run alone.
#[test]
fn a_gpu_batch_over_the_memory_budget_is_split() {
    let tmp = tempfile::tempdir().unwrap();
    let path = small_study(tmp.path(), 0.5);
    let s = Study::load(&path).unwrap();
    let models: Vec<_> = (0..2).map(|k| s.scenario(k, &path).unwrap().build_model().unwrap()).collect();
    // At the lists' initial capacity, as the study plans its batches.
    let bytes = |m: &[&rrpdem::model::Model]| {
        let cap = rrpdem::gpu::batch::BatchTotals::of(m).initial_nbr_capacity();
        rrpdem::gpu::batch_bytes(m, rrpdem::engine::Precision::F64, cap)
    };
    let two = bytes(&[&models[0], &models[1]]);
    let three = bytes(&[&models[0], &models[1], &models[0]]);
    assert!(three > two, "a third replica needs memory");
    let out = tmp.path().join("out");
    let budget = two.to_string();
    let args =
        ["study", path.to_str().unwrap(), "--out", out.to_str().unwrap(), "--backend", "gpu", "--precision", "f64"];
    let o = rrpdem(&[&args[..], &["--gpu-memory", &budget]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let choice = EngineChoice {
        backend: Some(Backend::Gpu),
        precision: Some(rrpdem::engine::Precision::F64),
        ..Default::default()
    };
    for k in 0..4 {
        let dir = study::variant_dir(&out, k);
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
        assert_eq!(summary["batch_replicas"], 2, "variant {k}");
        let alone = tmp.path().join(format!("alone{k}"));
        run::run_scenario(&s.scenario(k, &path).unwrap(), &alone, false, &choice, Default::default(), &|_| {}).unwrap();
        for f in ["series.csv", "final_state.csv", "breaks.csv"] {
            assert!(std::fs::read(alone.join(f)).unwrap() == std::fs::read(dir.join(f)).unwrap(), "variant {k}: {f}");
        }
    }
    // Without the budget the four share one batch.
    let whole = tmp.path().join("whole");
    let o = rrpdem(&[
        "study",
        path.to_str().unwrap(),
        "--out",
        whole.to_str().unwrap(),
        "--backend",
        "gpu",
        "--precision",
        "f64",
    ]);
    assert!(o.status.success());
    let t = std::fs::read_to_string(study::variant_dir(&whole, 3).join("summary.json")).unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&t).unwrap()["batch_replicas"], 4);
}

/// An interrupt of a GPU batch (deterministic, at step 700 of 2000) leaves each replica's
/// folder with a checkpoint written from the shared state; `rrpdem resume` continues each with
/// a single engine, and the result equals the variant run alone without interruption, byte for
/// byte (f32: the replica's own position origin and summation order survive the move).
#[test]
fn an_interrupted_gpu_batch_resumes_variant_by_variant() {
    use rrpdem::engine::Precision;
    use rrpdem::output::OutputDir;
    use rrpdem::run::{Job, RunError, RunOptions, Start, VtkOptions};
    let tmp = tempfile::tempdir().unwrap();
    let path = small_study(tmp.path(), 2.0);
    let s = Study::load(&path).unwrap();
    let scenarios: Vec<_> = (0..4).map(|k| s.scenario(k, &path).unwrap()).collect();
    let models: Vec<_> = scenarios.iter().map(|sc| sc.build_model().unwrap()).collect();
    let dirs: Vec<_> = (0..4).map(|k| OutputDir::create(&tmp.path().join(format!("v{k}")), false).unwrap()).collect();
    let refs: Vec<_> = models.iter().collect();
    let mut engine = rrpdem::gpu::GpuEngine::new_batch(
        &refs,
        scenarios[0].integrator,
        scenarios[0].dt,
        Precision::F32,
        rrpdem::gpu::AdapterChoice::Any,
        Default::default(),
    )
    .unwrap();
    let jobs: Vec<Job> = (0..4)
        .map(|k| Job {
            scenario: &scenarios[k],
            model: &models[k],
            order: None,
            start: Start::Fresh { stability: rrpdem::stability::estimate(&models[k]) },
            dir: &dirs[k],
            vtk: VtkOptions::default(),
            warnings: Vec::new(),
        })
        .collect();
    let opts = RunOptions { stop_at: Some(700), ..Default::default() };
    let results = run::run_batch(jobs, &mut engine, opts, &|_, _| {});
    drop(engine);
    drop(dirs);
    let choice = EngineChoice { backend: Some(Backend::Gpu), precision: Some(Precision::F32), ..Default::default() };
    for (k, r) in results.into_iter().enumerate() {
        assert!(matches!(r, Err(RunError::Interrupted { step: 700, .. })), "variant {k}: {:?}", r.err());
        let dir = reopen(&tmp.path().join(format!("v{k}")));
        run::resume(&dir, None, None, RunOptions::default(), |_| {}).unwrap();
        let alone = tmp.path().join(format!("alone{k}"));
        run::run_scenario(&scenarios[k], &alone, false, &choice, Default::default(), &|_| {}).unwrap();
        for f in ["series.csv", "final_state.csv", "breaks.csv"] {
            let a = std::fs::read(alone.join(f)).unwrap();
            let b = std::fs::read(dir.path.join(f)).unwrap();
            assert!(a == b, "variant {k}: {f} of the resumed replica differs from the run alone");
        }
    }
}
/// Before: a run resumed after bonds had broken logged them again in breaks.csv, at step 0 (the
/// engine is built from the checkpoint's model, whose bonds are intact, and its first
/// evaluation broke them anew before the saved flags were loaded). On every engine the resumed
/// breaks.csv now equals that of the run without interruption (bonds break before step 700: 4 on
/// the CPU and in f64, 2 in f32).
#[test]
fn a_resumed_run_does_not_log_earlier_breaks_again() {
    use rrpdem::engine::Precision;
    use rrpdem::run::RunOptions;
    let tmp = tempfile::tempdir().unwrap();
    let path = small_study(tmp.path(), 1.0);
    let sc = Study::load(&path).unwrap().scenario(2, &path).unwrap();
    for (name, backend, precision) in [
        ("cpu", Backend::Cpu, None),
        ("f32", Backend::Gpu, Some(Precision::F32)),
        ("f64", Backend::Gpu, Some(Precision::F64)),
    ] {
        let choice = EngineChoice { backend: Some(backend), precision, ..Default::default() };
        let whole = tmp.path().join(format!("whole-{name}"));
        run::run_scenario(&sc, &whole, false, &choice, RunOptions::default(), &|_| {}).unwrap();
        let d = tmp.path().join(format!("resumed-{name}"));
        let stop = RunOptions { stop_at: Some(700), ..Default::default() };
        assert!(run::run_scenario(&sc, &d, false, &choice, stop, &|_| {}).is_err());
        let before = std::fs::read_to_string(d.join("breaks.csv")).unwrap().lines().count() - 1;
        eprintln!("{name}: {before} bonds broke before the checkpoint");
        assert!(before >= 2, "{name}: bonds broke before the checkpoint ({before})");
        run::resume(&reopen(&d), None, None, RunOptions::default(), |_| {}).unwrap();
        for f in ["breaks.csv", "series.csv", "final_state.csv"] {
            let (a, b) = (std::fs::read(whole.join(f)).unwrap(), std::fs::read(d.join(f)).unwrap());
            assert!(a == b, "{name}: {f} of the resumed run differs from the run without interruption");
        }
    }
}

#[test]
fn a_drift_along_no_conserved_direction_is_an_empty_cell() {
    // The paper torus against its wall conserves P along the wall (y, z); with wall friction
    // it conserves none, and study.csv said 0.0 there (perfect conservation) where it has no
    // figure (a new user's check, 2026-11-27).
    let tmp = tempfile::tempdir().unwrap();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    std::fs::copy(base, tmp.path().join("torus_impact.json")).unwrap();
    let p = tmp.path().join("fr.json");
    std::fs::write(
        &p,
        r#"{"name": "fr", "base": "torus_impact.json", "set": {"/t_end": 0.6, "/friction": {"coefficient": 0}},
            "vary": {"list": [{"/friction/wall_coefficient": 0}, {"/friction/wall_coefficient": 0.5}]}}"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = rrpdem(&["study", p.to_str().unwrap(), "--out", out.to_str().unwrap(), "--backend", "cpu"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = std::fs::read_to_string(out.join("study.csv")).unwrap();
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split(',').collect()).collect();
    let col = |name: &str| rows[0].iter().position(|c| *c == name).unwrap();
    let c = col("conserved_drift_p");
    let conserved: f64 = rows[1][c].parse().unwrap_or_else(|_| panic!("variant 0: `{}` in {table}", rows[1][c]));
    assert!(conserved < 1e-10, "variant 0: drift along its conserved P {conserved}");
    assert_eq!(rows[2][c], "", "variant 1 conserves no P: {table}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(study::variant_dir(&out, 1).join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["energy_and_momenta"]["conserved"]["p"], serde_json::json!([]));
    assert!(summary["impact"]["first_contact_t"].is_number(), "the variant reached the wall");
}
