//! Issue 22, item 10: studies that cannot mix or hide (the study defects H1, H2, M4, M7, L5 and
//! L6 of the new-user pass). Before: a study rerun into a used folder exited 0 and rebuilt
//! study.csv from the earlier study's variants, and shards did the same (H1); with stderr not a
//! terminal a failing variant's reason was never printed and the study exited 0 (H2);
//! `--merge` took any summary.json as the variant's and called a corrupt one missing, and
//! `study STUDY --merge DIR` ignored STUDY (M7); an array-valued override made study.csv rows
//! longer than its header (M4); `/@impact_speed` silently replaced an explicit velocity, a
//! negative speed and a `/name` override were accepted, interrupted variants were listed as
//! failed (L5); variant errors cited a file that does not exist and printed their cause twice,
//! and `--shard` errors read "--shard shard" (L6); nothing ran only what a study lacked
//! (`--resume`, which must continue interrupted variants bit for bit).

use rrpdem::run::{self, EngineChoice, RunOptions};
use rrpdem::scenario::Backend;
use rrpdem::study::{self, Study};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rrpdem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rrpdem")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A study file `<name>.json` in `dir` over a copy of the paper torus, with `set` and `vary`
/// as given (JSON text).
fn write_study(dir: &Path, file: &str, set: &str, vary: &str) -> PathBuf {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    std::fs::copy(base, dir.join("torus_impact.json")).unwrap();
    let p = dir.join(file);
    std::fs::write(&p, format!(r#"{{"name": "s", "base": "torus_impact.json", "set": {set}, "vary": {vary}}}"#))
        .unwrap();
    p
}

/// Every file under `dir` with its bytes (what a refused command must leave as it was).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The records of a CSV file as Python's csv module (an independent RFC 4180 reader) reads them.
fn python_csv(path: &Path) -> Vec<Vec<String>> {
    let o = Command::new("python3")
        .args(["-c", "import csv, json, sys; print(json.dumps(list(csv.reader(open(sys.argv[1], newline='')))))"])
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "python3: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Column `name` of a study.csv read by `python_csv`, one cell per variant.
fn column(records: &[Vec<String>], name: &str) -> Vec<String> {
    let c = records[0].iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}"));
    records[1..].iter().map(|r| r[c].clone()).collect()
}

/// study.csv without its timing columns (the last two), which differ from run to run.
fn strip_timing(records: &[Vec<String>]) -> Vec<Vec<String>> {
    records.iter().map(|r| r[..r.len() - 2].to_vec()).collect()
}

#[test]
fn a_used_folder_is_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let vary = r#"{"list": [{}, {"/@impact_speed": 2}]}"#;
    let a = write_study(tmp.path(), "a.json", r#"{"/t_end": 0.4}"#, vary);
    let b = write_study(tmp.path(), "b.json", r#"{"/t_end": 0.6}"#, vary);
    let out = tmp.path().join("out");
    let o = rrpdem(&["study", s(&a), "--out", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let before = snapshot(&out);
    // Another study (only t_end differs, as in the defect's reproduction), whole or sharded.
    for shard in [None, Some("0/2"), Some("1/2")] {
        let mut args = vec!["study", s(&b), "--out", s(&out)];
        args.extend(shard.map(|sh| ["--shard", sh]).into_iter().flatten());
        let o = rrpdem(&args);
        let err = stderr(&o);
        assert!(!o.status.success(), "{shard:?}: {err}");
        assert!(err.contains("another study") && err.contains("/base/t_end") && err.contains("--overwrite"), "{err}");
        assert!(snapshot(&out) == before, "{shard:?}: the refused study changed the folder");
    }
    // The same study again: its variants are there; the options are named.
    let o = rrpdem(&["study", s(&a), "--out", s(&out)]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("[0, 1]") && err.contains("2 completed"), "{err}");
    assert!(err.contains("--resume") && err.contains("--overwrite"), "{err}");
    assert!(snapshot(&out) == before, "the refused rerun changed the folder");
    // Variants without a study.json: whose they are is unknown.
    std::fs::rename(out.join("study.json"), tmp.path().join("kept.json")).unwrap();
    let o = rrpdem(&["study", s(&b), "--out", s(&out)]);
    assert!(!o.status.success() && stderr(&o).contains("no study.json"), "{}", stderr(&o));
    std::fs::rename(tmp.path().join("kept.json"), out.join("study.json")).unwrap();
    // --overwrite replaces the study: every row is the new study's.
    let o = rrpdem(&["study", s(&b), "--out", s(&out), "--overwrite"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let records = python_csv(&out.join("study.csv"));
    assert_eq!(column(&records, "t_final"), ["0.6", "0.6"]);
    assert_eq!(column(&records, "status"), ["completed", "completed"]);
    let resolved = study::read_resolved(&out).unwrap();
    assert_eq!(resolved.base["t_end"], 0.6);
    // A whole study replacing a larger one leaves none of its variant folders behind.
    let c = write_study(tmp.path(), "c.json", r#"{"/t_end": 0.3}"#, r#"{"list": [{}, {}, {}]}"#);
    // (A figure of the study it replaces goes with it, the fragments' one too.)
    std::fs::write(out.join("study_fragments.png"), b"an earlier study's figure").unwrap();
    assert!(rrpdem(&["study", s(&c), "--out", s(&out), "--overwrite"]).status.success());
    assert!(study::variant_dir(&out, 2).exists());
    assert!(!out.join("study_fragments.png").exists(), "the replaced study's figure is still there");
    let o = rrpdem(&["study", s(&b), "--out", s(&out), "--overwrite"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!study::variant_dir(&out, 2).exists(), "variant 2 of the replaced study is still there");
    assert_eq!(column(&python_csv(&out.join("study.csv")), "t_final"), ["0.6", "0.6"]);
}

#[test]
fn every_failure_reason_is_printed_and_the_exit_code_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let p = write_study(tmp.path(), "f.json", r#"{"/t_end": 0.5}"#, r#"{"list": [{}, {"/max_energy_error": 1e-6}]}"#);
    let out = tmp.path().join("out");
    // The test's stderr is a pipe, not a terminal: a batch job's log.
    let o = rrpdem(&["study", s(&p), "--out", s(&out)]);
    let err = stderr(&o);
    assert!(!o.status.success(), "a failed variant must fail the study: {err}");
    assert!(err.contains("variant 1 failed: energy guard"), "{err}");
    assert!(err.contains("did not complete: [1]") && err.contains("--allow-failures"), "{err}");
    let records = python_csv(&out.join("study.csv"));
    assert_eq!(column(&records, "status"), ["completed", "failed"]);
    // --allow-failures: exit 0, and the reason is still printed.
    let o = rrpdem(&["study", s(&p), "--out", s(&out), "--overwrite", "--allow-failures"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("variant 1 failed: energy guard") && err.contains("did not complete: [1]"), "{err}");
    // A merge of that folder fails too, unless failures are allowed.
    assert!(!rrpdem(&["study", "--merge", s(&out)]).status.success());
    assert!(rrpdem(&["study", "--merge", s(&out), "--allow-failures"]).status.success());
    // Variants whose engine cannot start (a GPU memory budget far too small) write nothing:
    // they are unfinished, not failures with outputs, so even --allow-failures exits non-zero
    // (it exited 0 with every variant "missing").
    let args = ["--out", s(&out), "--overwrite", "--allow-failures", "--backend", "gpu", "--gpu-memory", "1000"];
    let o = rrpdem(&[&["study", s(&p)][..], &args[..]].concat());
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("cannot start the engine") && err.contains("2 variant(s) have no complete outputs"), "{err}");
    assert!(!err.contains("did not complete"), "{err}");
}

#[test]
fn merge_checks_every_variant_against_study_json() {
    let tmp = tempfile::tempdir().unwrap();
    let vary = r#"{"list": [{}, {"/@impact_speed": 2}, {"/@impact_speed": 3}]}"#;
    let a = write_study(tmp.path(), "a.json", r#"{"/t_end": 0.4}"#, vary);
    let b = write_study(tmp.path(), "b.json", r#"{"/t_end": 0.6}"#, vary);
    let (out_a, out_b) = (tmp.path().join("a"), tmp.path().join("b"));
    for i in 0..3 {
        let o = rrpdem(&["study", s(&a), "--out", s(&out_a), "--shard", &format!("{i}/3")]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert!(rrpdem(&["study", s(&b), "--out", s(&out_b)]).status.success());
    let o = rrpdem(&["study", "--merge", s(&out_a)]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Variant 1's summary from the other study; variant 2's cut short.
    let summary = |out: &Path, k| study::variant_dir(out, k).join("summary.json");
    std::fs::copy(summary(&out_b, 1), summary(&out_a, 1)).unwrap();
    let text = std::fs::read_to_string(summary(&out_a, 2)).unwrap();
    std::fs::write(summary(&out_a, 2), &text[..text.len() / 2]).unwrap();
    let o = rrpdem(&["study", "--merge", s(&out_a)]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("variant 1: outputs of another study") && err.contains("`/t_end`"), "{err}");
    assert!(err.contains("variant 2: corrupt: summary.json: EOF"), "{err}");
    assert!(!err.contains("still running"), "a corrupt summary is not a missing one: {err}");
    let records = python_csv(&out_a.join("study.csv"));
    assert_eq!(column(&records, "status"), ["completed", "other-study", "corrupt"]);
    assert_eq!(column(&records, "t_final"), ["0.4", "", ""], "no other study's figures in this study's table");
    // A study file given with --merge is checked against the folder's.
    let o = rrpdem(&["study", s(&b), "--merge", s(&out_a)]);
    assert!(!o.status.success() && stderr(&o).contains("is not the study in"), "{}", stderr(&o));
    let o = rrpdem(&["study", s(&a), "--merge", s(&out_a)]);
    assert!(!o.status.success() && !stderr(&o).contains("is not the study in"), "{}", stderr(&o));
    assert!(stderr(&o).contains("other-study [1], corrupt [2]"), "{}", stderr(&o));
}

/// Interrupts a study (at step 700 of 2000, as an interrupt would: a checkpoint per variant),
/// leaves one variant completed (its t_end comes first), removes one (missing) and marks one
/// failed; `--resume` continues the interrupted ones from their checkpoints, runs the missing
/// and failed ones, keeps the completed one untouched, and every variant's outputs then equal
/// those of the study run without interruption, byte for byte.
fn resume_equals_the_uninterrupted_study(backend: Backend, precision: Option<&str>) {
    let tmp = tempfile::tempdir().unwrap();
    let set = r#"{"/t_end": 2.0, "/record_every": 5, "/rupture": {"bending": 0.3}}"#;
    let vary =
        r#"{"list": [{}, {"/t_end": 0.5}, {"/@impact_speed": 3}, {"/shear": "objective"}, {"/@impact_speed": 2}]}"#;
    let path = write_study(tmp.path(), "r.json", set, vary);
    let name = if backend == Backend::Cpu { "cpu" } else { "gpu" };
    let mut engine = vec!["--backend", name];
    engine.extend(precision.iter().flat_map(|p| ["--precision", p]));
    let whole = tmp.path().join("whole");
    let o = rrpdem(&[&["study", s(&path), "--out", s(&whole)][..], &engine].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    // The interrupted study, variant by variant as its batch would have left it.
    let part = tmp.path().join("part");
    let st = Study::load(&path).unwrap();
    study::write_resolved(&st, &part).unwrap();
    let choice = EngineChoice {
        backend: Some(backend),
        precision: precision
            .map(|p| if p == "f32" { rrpdem::engine::Precision::F32 } else { rrpdem::engine::Precision::F64 }),
        ..Default::default()
    };
    for k in 0..5 {
        let stop = RunOptions { stop_at: Some(700), ..Default::default() };
        let r = run::run_scenario(
            &st.scenario(k, &path).unwrap(),
            &study::variant_dir(&part, k),
            false,
            &choice,
            stop,
            &|_| {},
        );
        assert_eq!(r.is_ok(), k == 1, "variant {k}: only the short one completes before step 700");
    }
    std::fs::remove_dir_all(study::variant_dir(&part, 3)).unwrap();
    // Variant 4 as a run that failed (a lost device, say): its summary says so, no checkpoint.
    let v4 = study::variant_dir(&part, 4);
    let mut summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(v4.join("summary.json")).unwrap()).unwrap();
    summary["status"] = "error: GPU: device lost (simulated)".into();
    std::fs::write(v4.join("summary.json"), summary.to_string()).unwrap();
    std::fs::remove_file(v4.join("checkpoint.bin")).unwrap();
    let o = rrpdem(&["study", "--merge", s(&part)]);
    assert!(!o.status.success());
    let records = python_csv(&part.join("study.csv"));
    assert_eq!(column(&records, "status"), ["interrupted", "completed", "interrupted", "missing", "failed"]);
    let kept = std::fs::read(study::variant_dir(&part, 1).join("summary.json")).unwrap();
    let o = rrpdem(&[&["study", s(&path), "--resume", "--out", s(&part)][..], &engine].concat());
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("1 completed (checked, kept) [1]"), "{err}");
    assert!(err.contains("2 to continue from their checkpoints [0, 2]"), "{err}");
    assert!(err.contains("2 to run from t = 0 [3, 4]"), "{err}");
    // The two interrupted at one step continue as one batch, as the study ran them (they ran
    // variant by variant: on the GPU, a batch of one each).
    assert!(err.contains("continuing variants [0, 2] from step 700 ") && err.contains(", as one batch"), "{err}");
    for k in 0..5 {
        for f in ["series.csv", "final_state.csv", "breaks.csv"] {
            let (a, b) = (study::variant_dir(&whole, k).join(f), study::variant_dir(&part, k).join(f));
            assert!(std::fs::read(a).unwrap() == std::fs::read(b).unwrap(), "{name}: variant {k}: {f} differs");
        }
    }
    assert!(kept == std::fs::read(study::variant_dir(&part, 1).join("summary.json")).unwrap(), "variant 1 rerun");
    let (a, b) = (python_csv(&whole.join("study.csv")), python_csv(&part.join("study.csv")));
    assert_eq!(strip_timing(&a), strip_timing(&b));
    assert_eq!(column(&b, "status"), ["completed"; 5]);
    // Nothing left to do: a second --resume keeps all five.
    let o = rrpdem(&[&["study", s(&path), "--resume", "--out", s(&part)][..], &engine].concat());
    assert!(o.status.success() && stderr(&o).contains("5 completed (checked, kept)"), "{}", stderr(&o));
}

#[test]
fn resume_equals_the_uninterrupted_study_cpu() {
    resume_equals_the_uninterrupted_study(Backend::Cpu, None);
}

#[test]
fn resume_equals_the_uninterrupted_study_gpu_f32() {
    resume_equals_the_uninterrupted_study(Backend::Gpu, Some("f32"));
}

#[test]
fn resume_refuses_what_it_cannot_check() {
    let tmp = tempfile::tempdir().unwrap();
    let vary = r#"{"list": [{}, {"/@impact_speed": 2}]}"#;
    let a = write_study(tmp.path(), "a.json", r#"{"/t_end": 0.3}"#, vary);
    let b = write_study(tmp.path(), "b.json", r#"{"/t_end": 0.5}"#, vary);
    let (out_a, out_b) = (tmp.path().join("a"), tmp.path().join("b"));
    // No study there.
    let o = rrpdem(&["study", s(&a), "--resume", "--out", s(&out_a)]);
    assert!(!o.status.success() && stderr(&o).contains("no study to resume"), "{}", stderr(&o));
    assert!(rrpdem(&["study", s(&a), "--out", s(&out_a)]).status.success());
    assert!(rrpdem(&["study", s(&b), "--out", s(&out_b)]).status.success());
    // Another study's folder.
    let o = rrpdem(&["study", s(&b), "--resume", "--out", s(&out_a)]);
    assert!(!o.status.success() && stderr(&o).contains("another study"), "{}", stderr(&o));
    // A variant of the other study copied in: refused, named, nothing run or removed.
    let from = study::variant_dir(&out_b, 1).join("summary.json");
    std::fs::copy(from, study::variant_dir(&out_a, 1).join("summary.json")).unwrap();
    let before = snapshot(&out_a);
    let o = rrpdem(&["study", s(&a), "--resume", "--out", s(&out_a)]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("variant 1: outputs of another study"), "{err}");
    assert!(snapshot(&out_a) == before, "the refused resume changed the folder");
}

#[test]
fn array_valued_overrides_are_one_quoted_cell() {
    let tmp = tempfile::tempdir().unwrap();
    let p = write_study(
        tmp.path(),
        "g.json",
        r#"{"/t_end": 0.3}"#,
        r#"{"grid": {"/gravity": [[0, 0, 0], [0, -0.5, 0]], "/shear": ["paper", "objective"]}}"#,
    );
    let out = tmp.path().join("out");
    let o = rrpdem(&["study", s(&p), "--out", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let records = python_csv(&out.join("study.csv"));
    assert_eq!(records.len(), 5);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.len(), records[0].len(), "row {i} has {} fields, the header {}", r.len(), records[0].len());
    }
    let gravity: Vec<serde_json::Value> =
        column(&records, "/gravity").iter().map(|c| serde_json::from_str(c).unwrap()).collect();
    let expected: Vec<serde_json::Value> =
        ["[0,0,0]", "[0,0,0]", "[0,-0.5,0]", "[0,-0.5,0]"].iter().map(|c| serde_json::from_str(c).unwrap()).collect();
    assert_eq!(gravity, expected);
    assert_eq!(column(&records, "/shear"), ["paper", "objective", "paper", "objective"]);
    assert_eq!(column(&records, "status"), ["completed"; 4]);
}

#[test]
fn impact_pointers_and_name_overrides_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let load = |set: &str, vary: &str| Study::load(&write_study(tmp.path(), "l.json", set, vary)).map(|_| ());
    let body = r#"{"type": "torus_ring", "n": 80, "torus_diameter": 3, "gap": 0, "velocity": [-1, 0, 0]}"#;
    for (set, vary, needles) in [
        (
            "{}",
            r#"{"list": [{"/@impact_speed": 2, "/bodies/0/velocity": [-1, 0, 0]}]}"#,
            &["/@impact_speed", "/bodies/0/velocity"][..],
        ),
        (
            "{}",
            r#"{"list": [{"/@impact_angle": 30, "/bodies/0/velocity/0": -2}]}"#,
            &["/@impact_angle", "/bodies/0/velocity/0"],
        ),
        (
            r#"{"/bodies/0/velocity": [-2, 0, 0]}"#,
            r#"{"grid": {"/@impact_speed": [1, 2]}}"#,
            &["/@impact_speed", "/bodies/0/velocity"],
        ),
        (
            "{}",
            &format!(r#"{{"list": [{{"/@impact_speed": 1, "/bodies/0": {body}}}]}}"#),
            &["/@impact_speed", "/bodies/0"],
        ),
        ("{}", r#"{"list": [{"/@impact_speed": -1}]}"#, &["/@impact_speed", "negative"]),
        ("{}", r#"{"list": [{"/name": "other"}]}"#, &["/name", "variant 0"]),
        (r#"{"/name": "other"}"#, r#"{"list": [{}]}"#, &["/name", "set"]),
        ("{}", r#"{"list": [{"/@impact_sped": 1}]}"#, &["/@impact_sped", "/@impact_speed"]),
    ] {
        let err = load(set, vary).expect_err(vary).to_string();
        assert!(needles.iter().all(|n| err.contains(n)), "{set} {vary}: {err}");
    }
    // Either way alone is fine.
    load("{}", r#"{"list": [{"/@impact_speed": 2}, {"/@impact_speed": 0}]}"#).unwrap();
    load("{}", r#"{"list": [{"/bodies/0/velocity": [-2, 0, 0]}]}"#).unwrap();
    load(r#"{"/bodies/0/velocity": [-2, 0, 0]}"#, r#"{"list": [{"/shear": "objective"}]}"#).unwrap();
}

#[test]
fn study_messages_name_real_files_and_say_things_once() {
    let tmp = tempfile::tempdir().unwrap();
    let p = write_study(
        tmp.path(),
        "bad.json",
        "{}",
        r#"{"list": [{"/stiffness/contact": 10}, {"/stiffness/contact": -5}]}"#,
    );
    let o = rrpdem(&["study", s(&p)]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("variant 1"), "{err}");
    assert!(!err.contains("s_1.json"), "the variant is no file: {err}");
    assert_eq!(err.matches("stiffness.contact").count(), 1, "{err}");
    let o = rrpdem(&["study", s(&tmp.path().join("nothing.json"))]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("nothing.json"), "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
    let good = write_study(tmp.path(), "good.json", "{}", r#"{"list": [{}]}"#);
    for shard in ["3/2", "x/2", "1"] {
        let o = rrpdem(&["study", s(&good), "--shard", shard, "--out", s(&tmp.path().join("out"))]);
        let err = stderr(&o);
        assert!(!o.status.success() && err.contains(shard) && !err.contains("--shard shard"), "{err}");
    }
}
