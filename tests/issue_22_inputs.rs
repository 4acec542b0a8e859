//! Issue 22, input defects of the new-user pass (shared/notes/new-user-defects.md): unbounded
//! inputs that exhausted memory or aborted (M1 `bond_tolerance`, M2 huge counts, M3 `--dry-run`
//! building 10⁸ particles), silent acceptance of wrong inputs (L3 Weibull modulus, L4 a body
//! behind a wall, L7 rounding of `t_end`, empty bodies, a pendulum body without its field, L8 a
//! duplicate CSV column, a bond 100 diameters long, `generate` overwriting, `bench --json DIR`)
//! and messages that did not say where or what (L6). Each test failed before its fix.

use rrpdem::scenario::Scenario;
use rrpdem::stability;
use std::path::Path;
use std::process::{Command, Output};

const GOOD: &str = r#"{
  "name": "t", "dt": 1e-3, "t_end": 1,
  "particle": {"mass": 1, "inertia": 1, "diameter": 1},
  "stiffness": {"axial": 100, "contact": 1000},
  "bodies": [{"type": "particles", "particles": [{"x": [0,0,0]}, {"x": [1,0,0]}], "bonds": [[0,1]]}]
}"#;

const BODY: &str = r#"{"type": "particles", "particles": [{"x": [0,0,0]}, {"x": [1,0,0]}], "bonds": [[0,1]]}"#;

/// The error of loading and building `text` (as file `bad.json`); it must name the file.
fn error_of(text: &str) -> String {
    let r = Scenario::from_json(text, Path::new("bad.json")).and_then(|s| s.build_model().map(|_| ()));
    let msg = r.expect_err("expected an error").to_string();
    assert!(msg.starts_with("bad.json"), "the error must name the file: {msg}");
    msg
}

fn assert_mentions(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "`{msg}` should mention `{p}`");
    }
}

fn with_body(body: &str) -> String {
    GOOD.replace(BODY, body)
}

fn rrpdem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rrpdem")).args(args).output().expect("rrpdem runs")
}

/// `rrpdem` under an address-space limit (KiB), so that a run that tries to build a huge model
/// fails fast instead of filling the machine.
fn rrpdem_limited(kib: u64, args: &[&str]) -> Output {
    let cmd = format!("ulimit -v {kib}; exec \"$0\" \"$@\"");
    Command::new("sh").arg("-c").arg(cmd).arg(env!("CARGO_BIN_EXE_rrpdem")).args(args).output().expect("sh runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const BLOCK: &str = r#"{"type": "block_solid", "size": [1, 1, 1], "particle_diameter": 0.25, "bond_tolerance": 100}"#;

#[test]
fn m1_bond_tolerance_has_an_upper_bound() {
    // Before: tolerance 100 bonded every pair of the block (1 000 spheres: 600 000 bonds; with
    // D 0.1 and tolerance 1000, 19 GB in a minute).
    let msg = error_of(&with_body(BLOCK));
    assert_mentions(&msg, &["bodies[0].bond_tolerance", "[0, 1]", "100"]);
    // The bound itself is accepted and gives fcc's shells within 2 D_p (12 + 6 + 24 + 12 = 54
    // neighbours of an interior site).
    let ok = Scenario::from_json(&with_body(&BLOCK.replace("100", "1")), Path::new("ok.json")).unwrap();
    ok.build_model().unwrap();
}

#[test]
fn m2_huge_counts_are_errors_not_aborts() {
    let dir = tempfile::tempdir().unwrap();
    for n in ["2000000000", "1000000000000"] {
        let ring = with_body(&format!(r#"{{"type": "torus_ring", "n": {n}, "torus_diameter": 3}}"#));
        let path = dir.path().join("ring.json");
        std::fs::write(&path, ring).unwrap();
        // Before: an allocation failure, a backtrace and SIGABRT (rc 134).
        let out = rrpdem_limited(4 << 20, &["run", path.to_str().unwrap(), "--out", dir.path().to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "n = {n}: {}", stderr(&out));
        assert_mentions(&stderr(&out), &["bodies[0].n", "at most"]);
    }
    let out = rrpdem_limited(4 << 20, &["bench", "--cases", "fcc-1e12", "--min-seconds", "0"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_mentions(&stderr(&out), &["fcc-1e12", "1e12"]);
}

#[test]
fn m2_a_count_needing_too_fine_a_lattice_is_an_error() {
    // Found by tests/fuzz_parsers.rs: solving D_p for 10⁶ spheres in a torus of D_t 2³¹ and
    // D_c 1 counted the lattice row by row at D_p ≈ 1, 2·10⁹ rows (8 GB, then an abort).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("thin.json");
    let body = r#"{"type": "torus_solid", "torus_diameter": 2147483648, "tube_diameter": 1, "particles": 1000000}"#;
    std::fs::write(&path, with_body(body)).unwrap();
    let out = rrpdem_limited(2 << 20, &["run", path.to_str().unwrap(), "--dry-run"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_mentions(&stderr(&out), &["bodies[0].particles", "2^20"]);
}

#[test]
fn m2_a_model_larger_than_the_machine_is_refused_before_it_is_built() {
    // 10⁹ particles in a ring: about 240 GB for the model alone (Linux reports the memory).
    let ring = with_body(r#"{"type": "torus_ring", "n": 1000000000, "torus_diameter": 3e9}"#);
    let s = Scenario::from_json(&ring, Path::new("big.json")).unwrap();
    let size = s.size_estimate().unwrap();
    assert_eq!((size.particles, size.bonds, size.exact), (1e9, 1e9, true));
    if std::path::Path::new("/proc/meminfo").exists() {
        let msg = s.build_geometry().map(|_| ()).unwrap_err().to_string();
        assert_mentions(&msg, &["field `bodies`", "GB", "--dry-run"]);
    }
}

/// A block of about 10⁸ fcc spheres (D_p 2e-3 in a unit cube: √2/D_p³ ≈ 1.8e8 sites).
const HUGE_BLOCK: &str = r#"{"type": "block_solid", "size": [1, 1, 1], "particle_diameter": 0.002}"#;

#[test]
fn m3_dry_run_estimates_a_large_model_without_building_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.json");
    std::fs::write(&path, with_body(HUGE_BLOCK).replace(r#""t_end": 1"#, r#""t_end": 0.01"#)).unwrap();
    // Before: the dry run built all 1.75e8 spheres (tens of GB); under a 4 GB limit it aborted.
    let start = std::time::Instant::now();
    let out = rrpdem_limited(4 << 20, &["run", path.to_str().unwrap(), "--dry-run"]);
    assert!(start.elapsed().as_secs_f64() < 30.0, "took {:?}", start.elapsed());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_mentions(&text, &["estimate", "not built", "particles       1.75", "GB", "nothing was built"]);
    // The whole report either way; exit status 1 where a run would be refused (a machine with
    // less than the model's 140 GB of memory and swap).
    let refused = text.contains("a run would be refused");
    assert_eq!(out.status.success(), !refused, "{text}{}", stderr(&out));
}

#[test]
fn m3_dry_run_says_when_a_cpu_run_would_not_fit() {
    // A model that fits the machine while a CPU run (model and engine) may not: the dry run
    // says so exactly where the estimate exceeds the memory and swap (it checked the model
    // only). About 2·10⁷ fcc spheres: a 16 GB model, a 30 GB CPU run.
    let body = r#"{"type": "block_solid", "size": [1, 1, 1], "particle_diameter": 0.004}"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("large.json");
    std::fs::write(&path, with_body(body)).unwrap();
    let out = rrpdem_limited(4 << 20, &["run", path.to_str().unwrap(), "--dry-run"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.success(), !text.contains("a run would be refused"), "{text}{}", stderr(&out));
    let s = Scenario::from_json(&with_body(body), &path).unwrap();
    let m = rrpdem::generate::estimate(&s, &s.size_estimate().unwrap()).memory;
    let Some(total) = rrpdem::scenario::memory_total() else { return };
    if m.model < total {
        assert_eq!(text.contains("a CPU run needs about"), m.model + m.cpu_engine > total, "{text}");
    } else {
        assert!(text.contains("a run would be refused"), "{text}");
    }
}

#[test]
fn m3_estimate_agrees_with_the_built_model() {
    // The particle count is the lattice's exact count; bonds are bounded by N z/2 (interior
    // coordination 12 for every sphere, surface spheres have fewer).
    let text = with_body(r#"{"type": "torus_solid", "torus_diameter": 3, "tube_diameter": 1, "particles": 5000}"#);
    let s = Scenario::from_json(&text, Path::new("t.json")).unwrap();
    let size = s.size_estimate().unwrap();
    let g = s.build_geometry().unwrap();
    assert_eq!(size.particles, g.particles.len() as f64);
    let bonds = g.pairs.len() as f64;
    assert_eq!(size.bonds, 6.0 * size.particles, "N·12/2");
    assert!(bonds <= size.bonds, "{bonds} bonds > the bound {}", size.bonds);
    // A 5000-sphere torus of tube diameter ~12 D_p has about a third of its spheres within one
    // D_p of the surface, each missing 3 to 5 of its 12 bonds: the bound exceeds the count by
    // roughly 10 to 25 %.
    assert!(size.bonds < 1.3 * bonds, "bound {} vs {bonds}", size.bonds);
    // Memory: the estimate counts every column as varying, so it bounds the exact figure.
    let exact = rrpdem::generate::memory_estimate(&g.particles, &g.pairs);
    let est = rrpdem::generate::estimate(&s, &size).memory;
    assert!(est.model >= exact.model && (est.model as f64) < 1.3 * exact.model as f64, "{est:?} {exact:?}");
    assert!(est.cpu_engine >= exact.cpu_engine, "{est:?} vs {exact:?}");
}

#[test]
fn l3_weibull_modulus_is_bounded_below() {
    let text = GOOD.replace(r#""bodies""#, r#""rupture": {"tension": 0.1, "weibull": {"modulus": 1e-3}}, "bodies""#);
    assert_mentions(&error_of(&text), &["rupture.weibull.modulus", "≥ 1", "0.001"]);
    let ok = text.replace(r#""modulus": 1e-3"#, r#""modulus": 3"#);
    Scenario::from_json(&ok, Path::new("ok.json")).unwrap().build_model().unwrap();
}

#[test]
fn l4_a_body_behind_a_wall_is_refused() {
    let wall = r#""walls": [{"point": [0, 0, 0], "normal": [1, 0, 0]}], "bodies""#;
    let ring = |center: &str| {
        with_body(&format!(r#"{{"type": "torus_ring", "n": 80, "torus_diameter": 3{center}}}"#))
            .replace(r#""bodies""#, wall)
    };
    // Before: 21 radii behind the wall ran (2130 % overlap, E0 1.7e7).
    let msg = error_of(&ring(r#", "center": [-0.5, 0, 0]"#));
    assert_mentions(&msg, &["bodies[0].particles[", "walls[0]", "behind", "100 %"]);
    // The default placement touches the wall, and a 90 % overlap may be a choice: both accepted.
    Scenario::from_json(&ring(""), Path::new("ok.json")).unwrap().build_model().unwrap();
    let dp = 3.0 * (std::f64::consts::PI / 80.0).sin();
    let pressed = ring(&format!(r#", "center": [{}, 0, 0]"#, 1.5 + 0.5 * dp - 0.45 * dp));
    Scenario::from_json(&pressed, Path::new("ok.json")).unwrap().build_model().unwrap();
}

#[test]
fn l6_messages_name_the_field_and_print_numbers_briefly() {
    // Serde's type errors now name the field, inside bodies too.
    assert_mentions(&error_of(&GOOD.replace(r#""dt": 1e-3"#, r#""dt": "1e-3""#)), &["field `dt`", "line 2"]);
    let ring = with_body(r#"{"type": "torus_ring", "n": "80", "torus_diameter": 3}"#);
    assert_mentions(&error_of(&ring), &["field `bodies[0].n`", "usize"]);
    let short = GOOD.replace(r#"{"x": [1,0,0]}"#, r#"{"x": [1,0]}"#);
    assert_mentions(&error_of(&short), &["field `bodies[0].particles[1].x`"]);
    // A number is printed as the shortest text that reads back, not 300 digits.
    let msg = error_of(&GOOD.replace(r#""mass": 1"#, r#""mass": -1e300"#));
    assert_mentions(&msg, &["particle.mass", "-1e300"]);
    assert!(msg.len() < 200, "{msg}");
    // A top-level array is refused as such; a UTF-8 byte-order mark is accepted.
    assert_mentions(&error_of("[1, 2]"), &["JSON object", "array"]);
    Scenario::from_json(&format!("\u{feff}{GOOD}"), Path::new("bom.json")).unwrap();
}

#[test]
fn l6_out_naming_a_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("taken");
    std::fs::write(&file, "x").unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    let out = rrpdem(&["run", scenario.to_str().unwrap(), "--out", file.to_str().unwrap(), "--t-end", "0.01"]);
    assert!(!out.status.success());
    // Before: "File exists (os error 17)".
    assert_mentions(&stderr(&out), &["is a file, not a folder"]);
}

#[test]
fn l6_the_guard_does_not_blame_a_negligible_force() {
    let e = rrpdem::error::EngineError::EnergyGuard {
        step: 10,
        t: 0.01,
        error: 0.2,
        limit: 0.05,
        particle: Some(3),
        force: 1e-17,
    };
    let msg = e.to_string();
    assert_mentions(&msg, &["for reference", "1.000e-17", "particle 3", "a small one means"]);
    assert!(!msg.contains("the largest force was"), "{msg}");
}

#[test]
fn l7_t_end_must_be_a_whole_number_of_steps() {
    // Before: 4e-4 with dt 1e-3 ran 1 step to t = 1e-3 without a word.
    let msg = error_of(&GOOD.replace(r#""t_end": 1"#, r#""t_end": 4e-4"#));
    assert_mentions(&msg, &["field `t_end`", "0.0004", "1 step", "0.001"]);
    let msg = error_of(&GOOD.replace(r#""t_end": 1"#, r#""t_end": 0.0025"#));
    assert_mentions(&msg, &["0.002 (2 step(s))", "0.003 (3 step(s))"]);
    // Within 0.1 % of t_end: the paper's torus at dt 3e-4 ends 1e-4 (3e-6 of t_end) early.
    let near = GOOD.replace(r#""dt": 1e-3, "t_end": 1"#, r#""dt": 3e-4, "t_end": 35"#);
    assert_eq!(Scenario::from_json(&near, Path::new("ok.json")).unwrap().total_steps(), 116_667);
}

#[test]
fn l7_empty_bodies_and_a_pendulum_without_its_field_are_refused() {
    let empty = with_body(r#"{"type": "particles", "particles": []}"#);
    assert_mentions(&error_of(&empty), &["bodies[0].particles", "at least one particle"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.csv"), "# no rows\nx,y,z\n").unwrap();
    let csv = with_body(r#"{"type": "csv", "particles": "p.csv"}"#);
    let path = dir.path().join("s.json");
    std::fs::write(&path, csv).unwrap();
    let msg = Scenario::load(&path).unwrap().build_model().map(|_| ()).unwrap_err().to_string();
    assert_mentions(&msg, &["p.csv:2", "no particles"]);
    let pendulum = with_body(r#"{"type": "pendulum", "alpha": [0.1, 0, 0]}"#);
    assert_mentions(&error_of(&pendulum), &["bodies[0]", "top-level `pendulum` field"]);
}

#[test]
fn l7_a_wide_size_spread_is_warned_about() {
    let spheres = |big: f64| {
        with_body(&format!(
            r#"{{"type": "particles", "particles": [{{"x": [0,0,0], "diameter": {big}}}, {{"x": [{},0,0]}}, {{"x": [{},0,0]}}, {{"x": [{},0,0]}}]}}"#,
            big + 1.0,
            big + 2.5,
            big + 4.0
        ))
    };
    let warning = |big: f64| {
        let s = Scenario::from_json(&spheres(big), Path::new("p.json")).unwrap();
        let est = stability::estimate(&s.build_model().unwrap());
        stability::check_step(1e-6, false, &est).unwrap()
    };
    // Before: one sphere 1000 times the others ran 40 times slower without a word.
    let w = warning(1000.0).expect("a warning");
    assert_mentions(&w, &["particle 0", "1.000e3 times the median", "contact search"]);
    assert!(warning(1.0).is_none(), "equal spheres: silent");
}

#[test]
fn l8_a_duplicate_csv_column_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.csv"), "# comment\nx,y,z,x\n0,0,0,5\n2,0,0,6\n").unwrap();
    let path = dir.path().join("s.json");
    std::fs::write(&path, with_body(r#"{"type": "csv", "particles": "p.csv"}"#)).unwrap();
    let msg = Scenario::load(&path).unwrap().build_model().map(|_| ()).unwrap_err().to_string();
    assert_mentions(&msg, &["p.csv:2", "column `x` appears twice"]);
}

#[test]
fn l8_an_explicit_bond_between_distant_particles_is_refused() {
    let far = GOOD.replace(r#"{"x": [1,0,0]}"#, r#"{"x": [100,0,0]}"#);
    assert_mentions(&error_of(&far), &["bodies[0].bonds[0]", "100 apart", "at most 2 (r_i + r_j)"]);
    // Twice the contact distance is the limit, and allowed.
    let two = GOOD.replace(r#"{"x": [1,0,0]}"#, r#"{"x": [2,0,0]}"#);
    Scenario::from_json(&two, Path::new("ok.json")).unwrap().build_model().unwrap();
}

#[test]
fn l8_generate_refuses_to_overwrite_without_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    let (s, out) = (scenario.to_str().unwrap(), dir.path().to_str().unwrap());
    assert!(rrpdem(&["generate", s, "--out", out]).status.success());
    std::fs::write(dir.path().join("bonds.csv"), "i,j\n").unwrap();
    let again = rrpdem(&["generate", s, "--out", out]);
    assert!(!again.status.success(), "a second generate must not replace the files");
    assert_mentions(&stderr(&again), &["particles.csv", "--overwrite"]);
    assert_eq!(std::fs::read_to_string(dir.path().join("bonds.csv")).unwrap(), "i,j\n", "left as it was");
    assert!(rrpdem(&["generate", s, "--out", out, "--overwrite"]).status.success());
    assert_eq!(std::fs::read_to_string(dir.path().join("bonds.csv")).unwrap().lines().count(), 81);
}

#[test]
fn l8_bench_json_naming_a_folder_is_refused_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let out = rrpdem(&[
        "bench",
        "--cases",
        "torus",
        "--steps",
        "1",
        "--min-seconds",
        "0",
        "--json",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_mentions(&err, &["--json", "is a folder"]);
    assert!(!err.contains("building torus"), "nothing is measured first: {err}");
}

#[test]
fn bench_minimum_time_must_be_a_number_of_seconds() {
    // Before: `--min-seconds -1` or `nan` measured one round as if 0 had been given.
    for bad in ["-1", "nan", "inf"] {
        let out = rrpdem(&["bench", "--cases", "torus", "--steps", "1", &format!("--min-seconds={bad}")]);
        assert_eq!(out.status.code(), Some(1), "{bad}: {}", stderr(&out));
        assert_mentions(&stderr(&out), &["--min-seconds", "minimum time"]);
    }
}
