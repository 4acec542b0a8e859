//! Issue 22 item 6 and defect M6: checkpoints are checked against their own rules, against the
//! model their scenario builds and against the folder they are in. Before, a checkpoint edited
//! and re-sealed with a new CRC loaded an unvalidated model (a mass ×10⁶, a bond of a particle to
//! itself, L0 = 0); another run's checkpoint copied into a folder was resumed and spliced two
//! runs into one `series.csv`; `resume --scenario` missed an edited particle file; the header's
//! hash was recomputed from a re-serialisation, so any change of the serialised form would have
//! made older checkpoints unreadable. `tests/data/checkpoint_v3` is a version-3 run folder
//! written by rrpdem 8136b00: it must keep resuming.

use rrpdem::checkpoint::{self, Checkpoint};
use rrpdem::engine;
use rrpdem::output::OutputDir;
use rrpdem::run::{self, RunOptions, Start};
use rrpdem::scenario::{Backend, Scenario};
use rrpdem::stability;
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/checkpoint_v3/run")
}

/// A copy of the fixture's run folder in a fresh temporary folder.
fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    for f in ["checkpoint.bin", "series.csv", "summary.json", "final_state.csv"] {
        std::fs::copy(fixture().join(f), dir.join(f)).unwrap();
    }
    (tmp, dir)
}

fn resume(dir: &Path, t_end: Option<f64>, check: Option<&Scenario>) -> Result<run::Summary, run::RunError> {
    let out = OutputDir::reopen(dir).unwrap();
    run::resume(&out, t_end, check, RunOptions::default(), |_| {})
}

/// Rewrites `bytes`' length field and CRC after an edit (what someone who knows the format does).
fn reseal(mut b: Vec<u8>) -> Vec<u8> {
    b.truncate(b.len() - 4);
    let len = (b.len() - 28) as u64;
    b[20..28].copy_from_slice(&len.to_le_bytes());
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn the_version_3_fixture_is_read_as_written_and_resumes() {
    // The fixture's run went to step 100 with checkpoints every 50: its checkpoint is at step 50
    // and its series.csv goes on to 100, as a run that stopped after its last checkpoint leaves.
    let bytes = std::fs::read(fixture().join("checkpoint.bin")).unwrap();
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 3, "the fixture is a version-3 file");
    let path = fixture().join("checkpoint.bin");
    let cp = Checkpoint::from_bytes(&bytes, &path).unwrap();
    assert_eq!((cp.engine.step, cp.engine.kind.as_str()), (50, "cpu-f64"));
    let series = std::fs::read_to_string(fixture().join("series.csv")).unwrap();
    let rows: Vec<&str> = series.lines().collect();
    assert_eq!(rows[1], cp.progress.first.csv_row());
    assert_eq!(rows[6], cp.progress.last.csv_row(), "the row of step 50");
    // The decoded particles are the state of that row: its centre of mass and momentum (unit
    // masses; the sums' order may differ, so to round-off of positions ~2 and speeds ~1).
    let p = &cp.model.particles;
    let n = p.len() as f64;
    let x_cm = p.x.iter().fold(glam::DVec3::ZERO, |a, x| a + *x) / n;
    let mom = p.v.iter().fold(glam::DVec3::ZERO, |a, v| a + *v);
    let col = |name: &str| {
        let k = rows[0].split(',').position(|h| h == name).unwrap();
        rows[6].split(',').nth(k).unwrap().parse::<f64>().unwrap()
    };
    assert!((x_cm.x - col("x_cm")).abs() < 1e-14 && (x_cm.y - col("y_cm")).abs() < 1e-14, "{x_cm}");
    assert!((mom.x - col("P_x")).abs() < 1e-13 && (mom.y - col("P_y")).abs() < 1e-13, "{mom}");
    cp.check_model(&path).unwrap();
    cp.check_folder(&fixture(), &path).unwrap();

    let (_tmp, dir) = fixture_copy();
    let opts = RunOptions { checkpoint_every: Some(50), ..Default::default() };
    let summary = run::resume(&OutputDir::reopen(&dir).unwrap(), Some(0.2), None, opts, |_| {}).unwrap();
    assert_eq!((summary.steps, summary.status.as_str()), (200, "completed"));
    let after = std::fs::read_to_string(dir.join("series.csv")).unwrap();
    let kept: String = rows[..7].iter().map(|r| format!("{r}\n")).collect();
    assert!(after.starts_with(&kept), "rows up to the checkpoint are kept as they were");
    assert_eq!(after.lines().count(), 1 + 21, "rows every 10 steps to step 200");
    assert_eq!(after.lines().last().unwrap().split(',').next(), Some("200"));
    // The continued run conserves energy as the first 100 steps did (1e-5 there).
    assert!(summary.energy_and_momenta.max_rel_energy_deviation < 1e-3, "{:?}", summary.energy_and_momenta);
    // What it writes now is the current version, which reads back.
    let now = std::fs::read(dir.join("checkpoint.bin")).unwrap();
    assert_eq!(u32::from_le_bytes(now[8..12].try_into().unwrap()), checkpoint::FORMAT_VERSION);
}

#[test]
fn a_version_3_header_hash_of_another_serialisation_is_not_held_against_it() {
    // Version 3 put a hash of the re-serialised scenario in the header, and the reader
    // re-serialised to compare: a scenario serialised differently by another version (here:
    // pretty-printed) made the checkpoint unreadable. The CRC guards those bytes.
    let mut bytes = std::fs::read(fixture().join("checkpoint.bin")).unwrap();
    let cp = Checkpoint::from_bytes(&bytes, Path::new("v3")).unwrap();
    let mut s = cp.scenario.clone();
    s.t_end = 0.0;
    let other = serde_json::to_string_pretty(&s).unwrap();
    let hash = other.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3));
    bytes[12..20].copy_from_slice(&hash.to_le_bytes());
    let bytes = reseal(bytes);
    let read = Checkpoint::from_bytes(&bytes, Path::new("v3")).unwrap();
    assert_eq!(read.model, cp.model);
}

#[test]
fn version_4_checks_the_hash_of_its_json_block() {
    let cp = Checkpoint::read(&fixture().join("checkpoint.bin")).unwrap();
    let mut v4 = cp.to_bytes();
    Checkpoint::from_bytes(&v4, Path::new("v4")).unwrap();
    // One byte of the JSON block changed (the scenario's name: still valid JSON), CRC redone.
    let at = v4.windows(13).position(|w| w == b"checkpoint_v3").unwrap();
    v4[at] = b'C';
    let e = Checkpoint::from_bytes(&reseal(v4), Path::new("v4")).unwrap_err().to_string();
    assert!(e.contains("does not match the header's hash"), "{e}");
}

/// The fixture's checkpoint with `edit` applied to its decoded form, re-encoded and re-sealed.
fn edited(edit: impl FnOnce(&mut Checkpoint)) -> Vec<u8> {
    let mut cp = Checkpoint::read(&fixture().join("checkpoint.bin")).unwrap();
    edit(&mut cp);
    cp.to_bytes()
}

#[test]
fn an_edited_and_resealed_checkpoint_is_refused() {
    // A mass ×10⁶ is a valid number: the model its scenario builds tells it apart.
    let (_tmp, dir) = fixture_copy();
    std::fs::write(dir.join("checkpoint.bin"), edited(|cp| cp.model.particles.mass[3] *= 1e6)).unwrap();
    let e = resume(&dir, Some(0.2), None).unwrap_err().to_string();
    assert!(e.contains("particle 3 has mass 1e6") && e.contains("its scenario gives 1e0"), "{e}");
    assert!(e.contains("was the checkpoint edited"), "{e}");
    // A radius, a bond's reference length: the same.
    let (_tmp, dir) = fixture_copy();
    std::fs::write(dir.join("checkpoint.bin"), edited(|cp| cp.model.bonds[5].l0 *= 1.5)).unwrap();
    let e = resume(&dir, Some(0.2), None).unwrap_err().to_string();
    assert!(e.contains("bond 5's reference data"), "{e}");

    // Breaking the checkpoint's own rules: refused as it is read, naming the bond or particle.
    let path = Path::new("edited.bin");
    type Edit = Box<dyn Fn(&mut Checkpoint)>;
    let cases: [(&str, Edit); 5] = [
        ("bond 2 joins particle", Box::new(|cp| cp.model.bonds[2].j = cp.model.bonds[2].i)),
        ("bond 4: reference length L0 = 0e0", Box::new(|cp| cp.model.bonds[4].l0 = 0.0)),
        ("particle 6: mass -1e0", Box::new(|cp| cp.model.particles.mass[6] = -1.0)),
        ("particle 1: v", Box::new(|cp| cp.model.particles.v[1].y = f64::NAN)),
        ("bond 7 joins particles", Box::new(|cp| cp.model.bonds[7] = cp.model.bonds[0])),
    ];
    for (what, edit) in cases {
        let e = Checkpoint::from_bytes(&edited(edit), path).unwrap_err().to_string();
        assert!(e.contains("malformed") && e.contains(what), "expected `{what}`: {e}");
    }
}

#[test]
fn bytes_appended_to_a_checkpoint_are_not_called_truncation() {
    let mut bytes = std::fs::read(fixture().join("checkpoint.bin")).unwrap();
    let n = bytes.len();
    bytes.extend_from_slice(b"xyz");
    let e = Checkpoint::from_bytes(&bytes, Path::new("c.bin")).unwrap_err().to_string();
    assert!(e.contains("3 bytes after its end") && !e.contains("truncated"), "{e}");
    let e = Checkpoint::from_bytes(&bytes[..n - 10], Path::new("c.bin")).unwrap_err().to_string();
    assert!(e.contains("truncated"), "{e}");
}

/// Runs `scenario` from t = 0 into `dir` with VTK frames, stopping (as an interrupt does) at
/// `stop`, which writes a checkpoint.
fn interrupted(s: &Scenario, dir: &Path, stop: u64) {
    let model = s.build_model().unwrap();
    let out = OutputDir::create(dir, false).unwrap();
    let mut e = engine::create(&model, s.integrator, s.dt, Backend::Cpu, None).unwrap();
    let opts =
        RunOptions { stop_at: Some(stop), vtk: run::VtkOptions { every: Some(50), replica: 0 }, ..Default::default() };
    let est = stability::estimate(&model);
    let r = run::run(s, &model, e.as_mut(), Start::Fresh { stability: est }, &out, opts);
    assert!(matches!(r, Err(run::RunError::Interrupted { .. })), "{r:?}");
}

fn scenario(name: &str, t_end: f64, dt: f64) -> Scenario {
    let mut s = Scenario::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name)).unwrap();
    (s.t_end, s.dt, s.backend) = (t_end, dt, Backend::Cpu);
    s
}

/// The files of `dir` that a refused resume must leave as they were.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    ["series.csv", "particles.pvd", "summary.json", "final_state.csv"]
        .iter()
        .filter_map(|f| std::fs::read(dir.join(f)).ok().map(|b| (f.to_string(), b)))
        .collect()
}

#[test]
fn another_runs_checkpoint_is_refused_and_the_folder_left_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|n| tmp.path().join(n));
    interrupted(&scenario("torus_impact.json", 1.0, 1e-3), &a, 300);
    interrupted(&scenario("two_rings.json", 1.0, 1e-3), &b, 200);
    // The same start with another time step, and with another wall stiffness (the same state
    // at step 0, and the same times).
    interrupted(&scenario("torus_impact.json", 1.0, 5e-4), &c, 400);
    let mut soft = scenario("torus_impact.json", 1.0, 1e-3);
    soft.stiffness.wall = Some(1000.0);
    interrupted(&soft, &d, 400);
    let cases = [(&b, "is not the first row"), (&c, "with dt = 1e-3, was at 1e-2"), (&d, "not the row of that step")];
    for (dir, why) in cases {
        std::fs::copy(a.join("checkpoint.bin"), dir.join("checkpoint.bin")).unwrap();
        let before = snapshot(dir);
        assert!(before.iter().any(|(f, _)| f == "particles.pvd"), "the run wrote frames");
        // Before: rc 0 and a series.csv spliced from two runs (particles.pvd kept the frames).
        let e = resume(dir, None, None).unwrap_err().to_string();
        assert!(e.contains("not the run of the folder") && e.contains(why), "{e}");
        assert_eq!(snapshot(dir), before, "nothing in the folder was touched");
    }
    // The summary of the softer wall's run tells too, where series.csv has no row there.
    let early = tmp.path().join("e");
    interrupted(&soft, &early, 295);
    std::fs::copy(a.join("checkpoint.bin"), early.join("checkpoint.bin")).unwrap();
    let e = resume(&early, None, None).unwrap_err().to_string();
    assert!(e.contains("describes another scenario"), "{e}");
    // Its own checkpoint resumes.
    resume(&a, None, None).unwrap();
}

#[test]
fn an_edited_particle_file_is_noticed() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = "x,y,z,vx\n0,0,0,1\n1,0,0,1\n2,0,0,1\n";
    std::fs::write(tmp.path().join("p.csv"), csv).unwrap();
    std::fs::write(tmp.path().join("b.csv"), "i,j\n0,1\n1,2\n").unwrap();
    let text = r#"{"name": "chain", "dt": 1e-3, "t_end": 0.5, "backend": "cpu",
        "particle": {"mass": 1, "inertia": 1, "diameter": 1}, "stiffness": {"axial": 100, "bending": 1},
        "bodies": [{"type": "csv", "particles": "p.csv", "bonds": "b.csv"}]}"#;
    let path = tmp.path().join("chain.json");
    std::fs::write(&path, text).unwrap();
    let s = Scenario::load(&path).unwrap();
    let dir = tmp.path().join("out");
    interrupted(&s, &dir, 100);
    let hash = checkpoint::scenario_hash(&s);
    // An edit of a velocity in the particle file: the same JSON, another scenario.
    std::fs::write(tmp.path().join("p.csv"), csv.replace("x,y,z,vx\n0,0,0,1", "x,y,z,vx\n0,0,0,1.5")).unwrap();
    let edited = Scenario::load(&path).unwrap();
    edited.build_model().unwrap();
    assert_ne!(checkpoint::scenario_hash(&edited), hash, "the identity covers the particle file");
    // Before: `resume --scenario` accepted it (the hash covered the JSON only).
    let e = resume(&dir, None, Some(&edited)).unwrap_err().to_string();
    assert!(
        e.contains("bodies[0].particles") && e.contains("`p.csv`") && e.contains("not the file its run started from"),
        "{e}"
    );
    // And without --scenario, the checkpoint's own scenario finds its input changed.
    let e = resume(&dir, None, None).unwrap_err().to_string();
    assert!(e.contains("`p.csv` has changed since the run started"), "{e}");
    // Restored, the run resumes.
    std::fs::write(tmp.path().join("p.csv"), csv).unwrap();
    resume(&dir, None, Some(&Scenario::load(&path).unwrap())).unwrap();
}

#[test]
fn a_finished_run_with_checkpoints_resumes_from_its_end() {
    // 250 steps with a checkpoint every 100: the last one used to be at step 200, so `resume
    // --t-end` of the finished run took 50 steps again; now a checkpoint is also written at the
    // end, and the extended run equals one run straight to the new end, byte for byte. Not
    // where the end is off the recording grid (`record_every` 100 here): its series row there
    // is the end's own, which the longer run does not write, so the checkpoint stays at 200.
    for (record_every, at) in [(10, 250), (100, 200)] {
        let mut s = scenario("torus_impact.json", 0.25, 1e-3);
        s.record_every = record_every;
        extended_from_its_end(&s, at);
    }
}

/// Runs `s` (250 steps) with a checkpoint every 100, checks the checkpoint is at step `at`,
/// resumes it to step 400 and compares with a run straight there.
fn extended_from_its_end(s: &Scenario, at: u64) {
    let model = s.build_model().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let run_to = |dir: &Path, s: &Scenario| {
        let out = OutputDir::create(dir, false).unwrap();
        let mut e = engine::create(&model, s.integrator, s.dt, Backend::Cpu, None).unwrap();
        let opts = RunOptions { checkpoint_every: Some(100), ..Default::default() };
        let est = stability::estimate(&model);
        run::run(s, &model, e.as_mut(), Start::Fresh { stability: est }, &out, opts).unwrap();
    };
    let (short, long) = (tmp.path().join("short"), tmp.path().join("long"));
    run_to(&short, s);
    let cp = Checkpoint::from_bytes(&std::fs::read(short.join("checkpoint.bin")).unwrap(), Path::new("c.bin")).unwrap();
    assert_eq!(cp.progress.last.step, at, "record_every {}: the checkpoint's step", s.record_every);
    let resumed = resume(&short, Some(0.4), None).unwrap();
    assert_eq!(resumed.steps, 400);
    let mut longer = s.clone();
    longer.t_end = 0.4;
    run_to(&long, &longer);
    for f in ["series.csv", "final_state.csv"] {
        let same = std::fs::read(short.join(f)).unwrap() == std::fs::read(long.join(f)).unwrap();
        assert!(same, "record_every {}: {f} differs", s.record_every);
    }
    // The summary's energy error and momenta drift too: the first run's end (step 250, no
    // multiple of the guard's sampling interval) is reported in its summary but not kept as a
    // sample in its checkpoint, which the straight run never takes (before, the extended run's
    // drift_s was the larger of the drift at 250 and at 400).
    let figures = |dir: &Path| {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
        v["energy_and_momenta"].clone()
    };
    assert_eq!(figures(&short), figures(&long), "record_every {}", s.record_every);
    // The checkpoint stayed at `at` (the resume was given no checkpoints): resuming again to an
    // end before step 400 would cut the completed run short, and is refused, the folder left as
    // it is; to 400 it is computed again (the announcement says so), byte for byte; a later end
    // extends it.
    let before = snapshot(&short);
    for t_end in [None, Some(0.3)] {
        let e = resume(&short, t_end, None).unwrap_err();
        assert!(matches!(e, run::RunError::AlreadyCompleted { step: 400, .. }), "{t_end:?}: {e}");
        assert!(e.to_string().contains("already completed to step 400"), "{e}");
    }
    assert!(snapshot(&short) == before, "the refused resumes left the folder as it was");
    let out = OutputDir::reopen(&short).unwrap();
    let mut said = String::new();
    run::resume(&out, Some(0.4), None, RunOptions::default(), |s| said = s.to_string()).unwrap();
    drop(out);
    assert!(said.contains("already completed to step 400: computing it again"), "{said}");
    for f in ["series.csv", "final_state.csv"] {
        let same = std::fs::read(short.join(f)).unwrap() == std::fs::read(long.join(f)).unwrap();
        assert!(same, "computed again: {f} the same bytes");
    }
    assert_eq!(resume(&short, Some(0.45), None).unwrap().steps, 450);
}

#[test]
fn an_extended_run_reports_the_drift_of_the_run_straight_to_its_end() {
    // A damped, frictional ring with rupture hitting a wall: no momentum is conserved and the
    // spin changes back and forth, so the largest drift depends on which states are sampled.
    // Its first run ends at step 2500, no multiple of the guard's interval (1000 steps here):
    // that end is in its summary but, before, it was also kept as a sample in its checkpoint,
    // and the run extended to 5000 then reported drift_s[0] 2.10 where the straight run
    // reports 1.57 (a new user's check, 2026-11-27).
    let text = r#"{"name": "ring_all", "dt": 1e-3, "t_end": 5, "record_every": 10, "backend": "cpu",
        "particle": {"mass": 1, "inertia": 1},
        "stiffness": {"bending": 10, "axial": 200, "shear": 200, "contact": 2100, "wall": 2100},
        "shear": "objective", "walls": [{"point": [0, 0, 0], "normal": [1, 0, 0]}],
        "rupture": {"bending": 0.3},
        "damping": {"restitution": 0.5, "wall_restitution": 0.3,
                    "binder": {"axial": 0.5, "shear": 0.5, "bending": 0.01, "twist": 0.01}},
        "friction": {"coefficient": 0.3, "wall_coefficient": 0.5},
        "bodies": [{"type": "torus_ring", "n": 80, "torus_diameter": 3, "gap": 0, "velocity": [-2, -1, 0.5]}]}"#;
    let long = Scenario::from_json(text, Path::new("ring_all.json")).unwrap();
    let model = long.build_model().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let run_to = |dir: &Path, s: &Scenario| {
        let out = OutputDir::create(dir, false).unwrap();
        let mut e = engine::create(&model, s.integrator, s.dt, Backend::Cpu, None).unwrap();
        let opts = RunOptions { checkpoint_every: Some(1000), ..Default::default() };
        run::run(s, &model, e.as_mut(), Start::Fresh { stability: stability::estimate(&model) }, &out, opts).unwrap()
    };
    let mut short = long.clone();
    short.t_end = 2.5;
    let (a, b) = (tmp.path().join("straight"), tmp.path().join("extended"));
    let straight = run_to(&a, &long);
    let first = run_to(&b, &short);
    let extended = resume(&b, Some(5.0), None).unwrap();
    let m = |s: &run::Summary| serde_json::to_value(&s.energy_and_momenta).unwrap();
    // The first run's own summary does report its end (its drift differs from both).
    assert_ne!(m(&first), m(&straight));
    assert_eq!(m(&extended), m(&straight));
    for f in ["series.csv", "final_state.csv", "breaks.csv"] {
        assert!(std::fs::read(a.join(f)).unwrap() == std::fs::read(b.join(f)).unwrap(), "{f} differs");
    }
}
