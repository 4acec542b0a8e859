//! The `rrpdem` binary end to end: output files and their formats, overrides, refusal of an
//! unstable step, and outputs kept when a run fails.

use std::path::Path;
use std::process::Command;

fn rrpdem(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rrpdem")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
}

#[test]
fn run_writes_the_three_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let o = rrpdem(&[
        "run",
        "scenarios/torus_impact.json",
        "--t-end",
        "0.5",
        "--record-every",
        "50",
        // The checks below hold the CPU's f64 (`auto` takes a hardware GPU's f32 where there is one).
        "--backend",
        "cpu",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("max |E - E0|/E_scale") && stdout.contains("particle-steps/s"), "{stdout}");

    let series = std::fs::read_to_string(out.join("series.csv")).unwrap();
    let mut lines = series.lines();
    assert_eq!(
        lines.next().unwrap(),
        "step,t,E,E_trans,E_rot,U_bend,U_axial,U_shear,U_contact,U_wall,U_gravity,P_x,P_y,P_z,S_x,S_y,S_z,L_x,L_y,L_z,\
         E_released,n_broken,F_wall_x,F_wall_y,F_wall_z,x_cm,y_cm,z_cm,v_cm_x,v_cm_y,v_cm_z,E_scale,n_fragments,\
         largest_fragment_fraction,debris_fraction,E_dissipated"
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 11, "steps 0, 50, …, 500");
    let last: Vec<&str> = rows[10].split(',').collect();
    assert_eq!(last.len(), 36);
    // Fragments (MODEL §11): the ring, all bonds intact, is one piece holding all the mass;
    // nothing dissipates without damping or friction (MODEL §10).
    assert_eq!(last[32..], ["1", "1.0000000000000000e0", "0.0000000000000000e0", "0.0000000000000000e0"]);
    assert_eq!(last[0], "500");
    // The impact columns (MODEL §9): no rupture, the wall pushes along +x only, and v_cm = P/M
    // (80 unit masses) to round-off.
    assert_eq!((last[20], last[21]), ("0.0000000000000000e0", "0"));
    let num = |k: usize| last[k].parse::<f64>().unwrap();
    assert_eq!((num(23), num(24)), (0.0, 0.0));
    assert!((num(28) - num(11) / 80.0).abs() <= 1e-15 * num(11).abs().max(1.0));
    // 17 significant digits: d.dddddddddddddddde±x.
    assert!(last[2].split('e').next().unwrap().replace(['-', '.'], "").len() == 17, "{}", last[2]);

    let fin = std::fs::read_to_string(out.join("final_state.csv")).unwrap();
    let mut lines = fin.lines();
    assert_eq!(lines.next().unwrap(), "id,x,y,z,vx,vy,vz,qw,qx,qy,qz,wx,wy,wz,mass,inertia,diameter,fixed,fragment");
    let rows: Vec<Vec<f64>> = lines.map(|l| l.split(',').map(|v| v.parse().unwrap()).collect()).collect();
    assert_eq!(rows.len(), 80);
    for r in &rows {
        assert_eq!(r[18], 0.0, "one fragment, labelled 0");
        assert!(r[7] >= 0.0, "qw ≥ 0");
        let qn: f64 = r[7..11].iter().map(|v| v * v).sum();
        assert!((qn - 1.0).abs() < 1e-14);
    }

    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["status"], "completed");
    assert_eq!(summary["steps"], 500);
    assert_eq!(summary["engine"]["precision"], "f64");
    assert_eq!(summary["scenario"]["t_end"], 0.5, "the resolved scenario carries the override");
    assert!(summary["particle_steps_per_s"].as_f64().unwrap() > 0.0);
    assert!((summary["energy_and_momenta"]["e0"].as_f64().unwrap() - 40.0).abs() < 1e-12);
    for k in ["max_rel_energy_deviation", "conserved_drift_p", "conserved_drift_s"] {
        assert!(summary["energy_and_momenta"][k].as_f64().is_some(), "{k}");
    }
}

#[test]
fn final_state_seeds_a_new_run() {
    // final_state.csv uses the particle CSV columns, so a run can restart from it.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("a");
    assert!(
        rrpdem(&["run", "scenarios/pendulum.json", "--t-end", "1", "--out", out.to_str().unwrap()]).status.success()
    );
    std::fs::copy(out.join("final_state.csv"), dir.path().join("state.csv")).unwrap();
    let scen = r#"{"name": "restart", "dt": 0.1, "t_end": 1, "particle": {"mass": 1, "inertia": 1, "diameter": 1},
        "pendulum": {"g": 1}, "bodies": [{"type": "csv", "particles": "state.csv"}]}"#;
    std::fs::write(dir.path().join("restart.json"), scen).unwrap();
    let o = rrpdem(&[
        "run",
        dir.path().join("restart.json").to_str().unwrap(),
        "--out",
        dir.path().join("b").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let first = std::fs::read_to_string(dir.path().join("b/series.csv")).unwrap();
    let e_restart: f64 = first.lines().nth(1).unwrap().split(',').nth(2).unwrap().parse().unwrap();
    let before = std::fs::read_to_string(out.join("series.csv")).unwrap();
    let e_end: f64 = before.lines().last().unwrap().split(',').nth(2).unwrap().parse().unwrap();
    // The state is written with 17 digits, so the energy is reproduced to round-off.
    assert!((e_restart - e_end).abs() < 1e-14, "{e_restart} vs {e_end}");
}

#[test]
fn unstable_step_is_refused_and_force_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("u");
    let o = rrpdem(&["run", "scenarios/torus_impact.json", "--dt", "1e-2", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("stability estimate") && err.contains("--force"), "{err}");
    assert!(!Path::new(&out).exists(), "nothing is started when refused");
    let o = rrpdem(&[
        "run",
        "scenarios/torus_impact.json",
        "--dt",
        "1e-2",
        "--t-end",
        "0.05",
        "--force",
        "--out",
        out.to_str().unwrap(),
    ]);
    // Forced, the run starts (with a warning) and the energy guard stops it at the first step:
    // dt = 1e-2 is unstable for this wall contact (docs/PHYSICS.md).
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("warning") && err.contains("energy guard"), "{err}");
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(summary.contains("\"status\": \"error: energy guard"), "{summary}");
}

#[test]
fn failing_run_keeps_what_was_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let scen = r#"{"name": "fast", "integrator": "rrp-exact", "dt": 0.01, "t_end": 1,
        "particle": {"mass": 1, "inertia": 1, "diameter": 1},
        "bodies": [{"type": "particles", "particles": [{"x": [0,0,0]}, {"x": [5,0,0], "omega": [150, 0, 0]}]}]}"#;
    let path = dir.path().join("fast.json");
    std::fs::write(&path, scen).unwrap();
    let out = dir.path().join("f");
    let o = rrpdem(&["run", path.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("particle 1") && err.contains("step 0") && err.contains("rrp-exact"), "{err}");
    for f in ["series.csv", "final_state.csv", "summary.json"] {
        assert!(out.join(f).exists(), "{f} must be written even though the run failed");
    }
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(summary.contains("\"status\": \"error: rrp-exact"), "{summary}");
}

#[test]
fn converge_prints_orders_and_writes_csv() {
    let dir = tempfile::tempdir().unwrap();
    let o = rrpdem(&["converge", "scenarios/pendulum.json", "--levels", "3", "--out", dir.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(stdout.lines().filter(|l| l.starts_with("rrp-") || l.starts_with("campello")).count(), 9, "{stdout}");
    let csv = std::fs::read_to_string(dir.path().join("converge.csv")).unwrap();
    assert!(csv.starts_with("scenario,integrator,dt,steps,E_error,E_order"), "{csv}");
    // Every value with 17 significant digits, the scenario named on every row (`plot` titles
    // the figure with it).
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    assert_eq!((row[0], row[1]), ("pendulum", "rrp-newmark"), "{csv}");
    assert!(row[10].split('e').next().unwrap().len() == 18, "invariant_drift {}", row[10]);
    // An end time that is no whole number of the largest step was run to the nearest one and
    // reported as asked (t = 0.15 for one step of 0.1); a step given twice gave NaN orders; a
    // reference factor of 1 made the finest step its own reference ("order" 46.8).
    for (args, expected) in [
        (&["--dt", "0.1,0.05", "--t-end", "0.15"][..], "t_end = 0.15 is not a whole number of the largest step 0.1"),
        (&["--dt", "0.1,0.1"][..], "dt = 0.1 is given twice"),
        (&["--ref-factor", "1"][..], "--ref-factor 1: it must be at least 2"),
        (&["--dt", "0.3,0.07", "--t-end", "9.9"][..], "dt = 0.07 does not divide the largest step 0.3"),
    ] {
        let mut a = vec!["converge", "scenarios/pendulum.json", "--out", dir.path().to_str().unwrap()];
        a.extend_from_slice(args);
        let o = rrpdem(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(expected), "{args:?}: {err}");
    }
}

#[test]
fn gpu_run_writes_the_same_files_and_compare_reports_parity() {
    let dir = tempfile::tempdir().unwrap();
    let (cpu, gpu) = (dir.path().join("cpu"), dir.path().join("gpu"));
    for (out, backend) in [(&cpu, "cpu"), (&gpu, "gpu")] {
        let o = rrpdem(&[
            "run",
            "scenarios/torus_impact.json",
            "--t-end",
            "0.2",
            "--record-every",
            "20",
            "--backend",
            backend,
            "--precision",
            "f64",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{backend}: {}", String::from_utf8_lossy(&o.stderr));
    }
    // Same files, same headers, same number of rows; numbers agree to round-off after 200 steps.
    for f in ["series.csv", "final_state.csv"] {
        let a = std::fs::read_to_string(cpu.join(f)).unwrap();
        let b = std::fs::read_to_string(gpu.join(f)).unwrap();
        assert_eq!(a.lines().count(), b.lines().count(), "{f}");
        assert_eq!(a.lines().next(), b.lines().next(), "{f}");
        for (la, lb) in a.lines().zip(b.lines()).skip(1) {
            for (x, y) in la.split(',').zip(lb.split(',')) {
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                // f64 on both, different summation orders: ~1e-13 after 200 steps (V7 bound 1e-10).
                assert!((x - y).abs() <= 1e-10 * (1.0 + x.abs()), "{f}: {x} vs {y}");
            }
        }
    }
    let summary = std::fs::read_to_string(gpu.join("summary.json")).unwrap();
    assert!(summary.contains("\"backend\": \"gpu\"") && summary.contains("\"precision\": \"f64\""), "{summary}");

    let o = rrpdem(&["compare", "scenarios/torus_impact.json", "--steps", "300", "--precision", "f64"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    let mut rows = 0;
    for line in table.lines().filter(|l| l.starts_with("position") || l.starts_with("E ") || l.starts_with("U_")) {
        let rel: f64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert!(rel <= 1e-10, "{line}");
        rows += 1;
    }
    assert_eq!(rows, 8, "{table}");
    assert!(table.contains("verdict           agree within 1e-10"), "{table}");
    // Issue 22 item 12: a verdict and an exit status. f32 against the f64 reference differs
    // by ~1e-7 relative (f32 resolution) after 300 steps: refused at 1e-12, accepted at 1e-3.
    let f32 = |tol: &str| {
        rrpdem(&["compare", "scenarios/torus_impact.json", "--steps", "300", "--precision", "f32", "--tolerance", tol])
    };
    let o = f32("1e-12");
    assert!(!o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("DIFFER beyond 1e-12: position"));
    assert!(f32("1e-3").status.success());
    let o = rrpdem(&["compare", "scenarios/torus_impact.json", "--steps", "0"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--steps 0"));
}

#[test]
fn info_lists_adapters() {
    let o = rrpdem(&["info"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("GPU adapter 0") && text.contains("f64:"), "{text}");
}

#[test]
fn dry_run_reports_the_model_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d");
    let o = rrpdem(&["run", "scenarios/solid_torus_impact.json", "--dry-run", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    // The generator's report (particles, bonds, memory) and the step check, nothing run.
    for needle in ["particles", "bonds", "memory", "h_max", "dry run"] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    assert!(!out.exists(), "a dry run writes nothing");
    // A run that would be refused fails the dry run too (before: the refusal printed, exit 0),
    // after the whole report. Here the time step: 5x the file's is beyond the estimate.
    let o = rrpdem(&["run", "scenarios/torus_impact.json", "--dry-run", "--dt", "0.005"]);
    let (text, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{text}{err}");
    assert!(text.contains("time step       refused") && text.contains("dry run"), "{text}");
    assert!(err.contains("would be refused") && err.contains("stability estimate"), "{err}");
}

#[test]
fn a_closed_standard_output_loses_nothing_and_panics_nowhere() {
    // Before: `rrpdem info | head -1` panicked ("failed printing to stdout: Broken pipe") with
    // exit 101; a run or study then lost its summary's printing at best, its files at worst.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let closed = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        writer
    };
    for args in [vec!["info"], vec!["run", "scenarios/pendulum.json", "--t-end", "1", "--out", out.to_str().unwrap()]] {
        let o = Command::new(env!("CARGO_BIN_EXE_rrpdem"))
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("RUST_BACKTRACE", "1")
            .stdout(closed())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success() && !err.contains("panicked"), "{args:?}: {:?} {err}", o.status);
    }
    for f in ["series.csv", "summary.json", "final_state.csv"] {
        assert!(out.join(f).is_file(), "{f}");
    }
}

#[test]
fn plots_flags_draw_the_figures_of_a_run_and_a_study() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p");
    let o = rrpdem(&[
        "run",
        "scenarios/torus_impact.json",
        "--t-end",
        "1",
        "--record-every",
        "10",
        "--plots",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in ["energy.png", "energy_error.png", "momentum_drift.png"] {
        let bytes = std::fs::read(out.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(&bytes[1..4], b"PNG", "{f}");
    }
    // --overwrite removes the earlier run's figures with its other outputs.
    let o = rrpdem(&[
        "run",
        "scenarios/torus_impact.json",
        "--t-end",
        "0.1",
        "--overwrite",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    assert!(!out.join("energy.png").exists(), "figures of the earlier run are gone");

    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    std::fs::copy(base, dir.path().join("torus_impact.json")).unwrap();
    let study = dir.path().join("s.json");
    std::fs::write(
        &study,
        r#"{"name": "s", "base": "torus_impact.json", "set": {"/t_end": 0.5},
            "vary": {"grid": {"/@impact_speed": [0.5, 1], "/shear": ["paper", "objective"]}}}"#,
    )
    .unwrap();
    let sout = dir.path().join("study");
    let o = rrpdem(&["study", study.to_str().unwrap(), "--plots", "--out", sout.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(&std::fs::read(sout.join("study.png")).unwrap()[1..4], b"PNG");
}

#[test]
fn bench_keeps_the_measurements_made_before_a_failure() {
    // The JSON is written after every measurement: a later failure (here a case whose model
    // cannot be built, a torus of one sphere; on a device, a blow-up or a lost device) neither
    // loses the torus figures nor exits 0. (An unknown case name is refused before anything is
    // measured.)
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let args = ["bench", "--cases", "torus,solid-torus-1", "--engines", "cpu", "--steps", "10", "--min-seconds", "0"];
    let o = rrpdem(&[&args[..], &["--json", json.to_str().unwrap()]].concat());
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no fcc site fits a whole sphere"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A wrong name: refused before the torus is measured (no JSON written).
    let early = dir.path().join("early.json");
    let args = ["bench", "--cases", "torus,nope-1", "--engines", "cpu", "--steps", "10", "--min-seconds", "0"];
    let o = rrpdem(&[&args[..], &["--json", early.to_str().unwrap()]].concat());
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("unknown case `nope-1`"));
    assert!(!early.exists(), "nothing measured");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let v = &v["measurements"];
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v[0]["case"], "torus");
    assert!(v[0]["particle_steps_per_s"].as_f64().unwrap() > 0.0, "{v}");
}

/// Reads a figure as `report::sci` writes it (`1.23·10⁶`, `4.50·10⁻³`).
fn read_sci(s: &str) -> f64 {
    let (m, e) = s.split_once("·10").unwrap_or_else(|| panic!("not a figure: {s}"));
    let e: String = e
        .chars()
        .map(|c| match c {
            '⁻' => '-',
            c => char::from_digit("⁰¹²³⁴⁵⁶⁷⁸⁹".chars().position(|d| d == c).expect("a superscript digit") as u32, 10)
                .unwrap(),
        })
        .collect();
    m.parse::<f64>().unwrap() * 10f64.powi(e.parse().unwrap())
}

fn utc_today() -> String {
    let o = Command::new("date").args(["-u", "+%F"]).output().unwrap();
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

#[test]
fn bench_writes_a_dated_report_and_regenerates_its_markdown_section() {
    use rrpdem::bench::report::{BEGIN, END};
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let md = dir.path().join("BENCHMARKS.md");
    let (head, tail) = ("# Benchmarks\nHand-written history above.\n", "\n## Older figures\nkept as they are\n");
    let original = format!("{head}{BEGIN}\nstale table\n{END}{tail}");
    std::fs::write(&md, &original).unwrap();
    let day_before = utc_today();
    // Two cases of distinct sizes on two thread counts: four rows that differ.
    let args = ["bench", "--cases", "torus,rings-1e3", "--threads", "1,2", "--steps", "10", "--min-seconds", "0"];
    let o = rrpdem(&[&args[..], &["--json", json.to_str().unwrap(), "--markdown", md.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let day_after = utc_today();

    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["format"], rrpdem::bench::report::FORMAT);
    // The date is the system's (`date -u`, an independent clock reading and calendar).
    let date = v["date"].as_str().unwrap();
    assert!(date[..10] == day_before || date[..10] == day_after, "{date} vs {day_before}");
    assert!(date.ends_with('Z') && date.len() == 20, "{date}");
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(v["machine"]["logical_cpus"].as_u64(), Some(cpus), "{v}");
    assert!(!v["machine"]["cpu"].as_str().unwrap().is_empty());
    assert!(v["command"].as_array().unwrap().iter().any(|a| a == "torus,rings-1e3"), "{v}");
    let ms = v["measurements"].as_array().unwrap();
    let order: Vec<(String, u64)> =
        ms.iter().map(|m| (m["case"].as_str().unwrap().to_string(), m["threads"].as_u64().unwrap())).collect();
    let want: Vec<(String, u64)> =
        [("torus", 1), ("torus", 2), ("rings-1e3", 1), ("rings-1e3", 2)].map(|(c, t)| (c.to_string(), t)).to_vec();
    assert_eq!(order, want);

    // The file outside the markers is untouched; inside, a row per measurement that an
    // independent reading gives back.
    let doc = std::fs::read_to_string(&md).unwrap();
    assert!(doc.starts_with(&format!("{head}{BEGIN}\n")) && doc.ends_with(&format!("{END}{tail}")), "{doc}");
    assert!(!doc.contains("stale table"));
    assert!(doc.contains(&day_before) || doc.contains(&day_after), "{doc}");
    for m in ms {
        let prefix = format!(
            "| {} | CPU f64 | {} | {} | {} | ",
            m["case"].as_str().unwrap(),
            m["threads"],
            m["particles"],
            m["bonds"]
        );
        let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with(&prefix)).collect();
        assert_eq!(rows.len(), 1, "{prefix} in\n{doc}");
        let cells: Vec<&str> = rows[0].split('|').map(str::trim).collect();
        for (cell, key) in [(6, "particle_steps_per_s"), (7, "bond_steps_per_s")] {
            let (shown, exact) = (read_sci(cells[cell]), m[key].as_f64().unwrap());
            // Three significant digits: within half a unit of the third.
            assert!((shown - exact).abs() <= 5e-3 * exact, "{key}: {shown} vs {exact}");
        }
        let per_particle = m["engine_bytes"].as_f64().unwrap() / m["particles"].as_f64().unwrap();
        assert!((cells[10].parse::<f64>().unwrap() - per_particle).abs() <= 0.5, "{rows:?} vs {per_particle}");
    }

    // Regenerated from the JSON alone: the same document.
    let again = dir.path().join("again.md");
    std::fs::write(&again, &original).unwrap();
    let o = rrpdem(&["bench", "--from", json.to_str().unwrap(), "--markdown", again.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&again).unwrap(), doc);

    // A file without markers is refused before anything is measured, and left as it was.
    let plain = dir.path().join("plain.md");
    std::fs::write(&plain, "# no markers\n").unwrap();
    let o = rrpdem(&["bench", "--cases", "fcc-1e6", "--markdown", plain.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("plain.md") && err.contains(BEGIN), "{err}");
    assert!(!err.contains("building fcc-1e6"), "{err}");
    assert_eq!(std::fs::read_to_string(&plain).unwrap(), "# no markers\n");

    // A JSON from before the report format (a bare list) is named as such.
    let old = dir.path().join("old.json");
    std::fs::write(&old, "[]").unwrap();
    let o = rrpdem(&["bench", "--from", old.to_str().unwrap(), "--markdown", again.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("old.json") && err.contains("without date or machine"), "{err}");
}

/// An error is printed once with its causes, each cause once: the library's errors already name
/// their source (`{path}: cannot write: {source}`), so the CLI does not append it again.
#[test]
fn errors_name_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g");
    let o = rrpdem(&["generate", "scenarios/full_body.json", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("2 rigid bodies").count(), 1, "{err}");
    assert!(!out.join("particles.csv").exists(), "nothing written");
    let o = rrpdem(&["run", "scenarios/no_such_scenario.json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

#[test]
fn compare_of_a_cpu_only_scenario_points_to_against() {
    // The GPU engine's refusal said "use backend `cpu`", an option `compare` does not have.
    let lgvi = ["compare", "scenarios/pendulum.json", "--steps", "10", "--integrator", "lgvi"];
    let o = rrpdem(&lgvi);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("integrator `lgvi` (CPU engine only)") && err.contains("--against"), "{err}");
    assert!(!err.contains("backend"), "{err}");
    let o = rrpdem(&[&lgvi[..], &["--against", "rrp-exact"]].concat());
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && !err.contains("CPU engine only"), "{out}{err}");
    // Clumps move with `lgvi` alone: the hint must not offer `--against rrp-exact`, which
    // refuses them (it said so before); `converge` checks lgvi against itself.
    for clumps in ["scenarios/free_rigid_body.json", "scenarios/clump_impact.json"] {
        let o = rrpdem(&["compare", clumps, "--steps", "10"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("rrpdem converge") && !err.contains("rrp-exact"), "{err}");
    }
}

#[test]
fn compare_at_its_defaults_accepts_the_shipped_torus_in_f32() {
    // Before: 1000 steps at 1e-3 in f32 said DIFFER (velocity 3.3e-2 after the impact, which
    // grows differences as e^{5t}); the defaults are now VALIDATION V7's window and bound.
    let o = rrpdem(&["compare", "scenarios/torus_impact.json", "--precision", "f32"]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{out}{err}");
    assert!(err.contains("200 steps") && out.contains("agree within 1e-4"), "{out}{err}");
}

#[test]
fn plot_and_resume_of_a_missing_folder_or_a_file_say_so() {
    // Before: "nonexist: nothing to plot (no series.csv …)" and "afile holds no run to resume
    // (series.csv is missing)", as if each were an empty output folder.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("afile");
    std::fs::write(&file, "x").unwrap();
    let missing = dir.path().join("nonexist");
    for (cmd, expected) in [("plot", "`rrpdem plot` takes"), ("resume", "`rrpdem resume` takes")] {
        for (path, problem) in [(&missing, "no such folder"), (&file, "a file, not a folder")] {
            let o = rrpdem(&[cmd, path.to_str().unwrap()]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success() && err.contains(problem) && err.contains(expected), "{cmd}: {err}");
        }
    }
}

#[test]
fn resume_names_a_bad_end_time_as_its_option() {
    // Before: "scenarios/…json: field `t_end`: must be a finite number > 0, got NaN", blaming
    // the run's scenario file for what came from `--t-end`.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = rrpdem(&[
        "run",
        "scenarios/pendulum.json",
        "--t-end",
        "1",
        "--checkpoint-every",
        "5",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for bad in ["nan", "inf", "-1", "0"] {
        let o = rrpdem(&["resume", out.to_str().unwrap(), &format!("--t-end={bad}")]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("end time given (--t-end)"), "{bad}: {err}");
        assert!(!err.contains("pendulum.json"), "{bad}: {err}");
    }
}

#[test]
fn a_final_state_that_cannot_be_written_leaves_a_summary_that_says_so() {
    // Before: `resume` failed writing final_state.csv and left summary.json saying "completed"
    // at the earlier end, while series.csv already held the resumed rows.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let path = out.to_str().unwrap();
    let o = rrpdem(&["run", "scenarios/pendulum.json", "--t-end", "1", "--checkpoint-every", "5", "--out", path]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = |key: &str| {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
        v[key].clone()
    };
    let before = summary("steps").as_u64().unwrap();
    // A folder where the file must go: no writer, root included, can replace it.
    std::fs::remove_file(out.join("final_state.csv")).unwrap();
    std::fs::create_dir(out.join("final_state.csv")).unwrap();
    let o = rrpdem(&["resume", path, "--t-end", "2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("final_state.csv"), "{err}");
    let status = summary("status");
    let steps = summary("steps").as_u64().unwrap();
    assert!(
        status.as_str().unwrap().starts_with("error:") && status.as_str().unwrap().contains("final_state.csv"),
        "{status}"
    );
    let series = std::fs::read_to_string(out.join("series.csv")).unwrap();
    let last_step: u64 = series.lines().last().unwrap().split(',').next().unwrap().parse().unwrap();
    assert!(
        steps > before && steps == last_step,
        "summary at step {steps}, series ends at {last_step}, before {before}"
    );
    assert!(summary("final_state").is_null());
    // Once the path is free, resuming again completes the run.
    std::fs::remove_dir(out.join("final_state.csv")).unwrap();
    let o = rrpdem(&["resume", path, "--t-end", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(summary("status"), "completed");
    assert!(out.join("final_state.csv").is_file());
}

#[test]
fn a_drift_along_no_conserved_direction_is_null_not_zero() {
    // Before: summary.json said `"conserved_drift_p": 0.0` for a run whose wall friction
    // conserves P along no direction, which reads as "conserved perfectly" (study.csv left the
    // cell empty).
    let dir = tempfile::tempdir().unwrap();
    let mut s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("scenarios/torus_impact.json").unwrap()).unwrap();
    s["friction"] = serde_json::json!({"coefficient": 0.0, "wall_coefficient": 0.5});
    s["t_end"] = serde_json::json!(0.05);
    let file = dir.path().join("s.json");
    std::fs::write(&file, s.to_string()).unwrap();
    let out = dir.path().join("run");
    let o = rrpdem(&["run", file.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let b = &v["energy_and_momenta"];
    // A figure exactly for the quantities conserved along some direction; P along none here
    // (the wall pushes along its normal and its friction along the wall).
    for k in ["p", "s", "l"] {
        let none = b["conserved"][k].as_array().unwrap().is_empty();
        let drift = &b[format!("conserved_drift_{k}").as_str()];
        assert_eq!(drift.is_null(), none, "{k}: {b}");
    }
    assert!(b["conserved"]["p"].as_array().unwrap().is_empty(), "{b}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("conserved exactly along no direction"), "{text}");
}

/// A run's outputs and a study's never share a folder: a run into a study's folder, and a
/// study into a run's (with --overwrite too, which replaces a study's files, not a run's), are
/// refused before anything is written. Before, both were accepted, and `rrpdem plot` of the
/// folder drew the study alone, silently ignoring the run's series.csv.
#[test]
fn run_and_study_outputs_never_share_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    std::fs::copy(&scenario, dir.path().join("torus_impact.json")).unwrap();
    let study = dir.path().join("s.json");
    std::fs::write(
        &study,
        r#"{"name": "s", "base": "torus_impact.json", "set": {"/t_end": 0.01}, "vary": {"list": [{"/@impact_speed": 1}]}}"#,
    )
    .unwrap();
    let (study_out, run_out) = (dir.path().join("study"), dir.path().join("run"));
    let study_args = |out: &Path, extra: &[&str]| {
        let mut a = vec!["study".to_string(), study.display().to_string(), "--out".into(), out.display().to_string()];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run_args = |out: &Path, extra: &[&str]| {
        let mut a: Vec<String> = ["run", "scenarios/torus_impact.json", "--t-end", "0.01", "--backend", "cpu", "--out"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.push(out.display().to_string());
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let go = |a: Vec<String>| rrpdem(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(go(study_args(&study_out, &[])).status.success());
    assert!(go(run_args(&run_out, &[])).status.success());
    for extra in [&[][..], &["--overwrite"][..]] {
        let o = go(run_args(&study_out, extra));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("holds a study (study.json)"), "{extra:?}: {err}");
        assert!(!study_out.join("series.csv").exists());
        let o = go(study_args(&run_out, extra));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("holds the outputs of a run (series.csv"), "{extra:?}: {err}");
        assert!(!run_out.join("study.json").exists());
    }
    // A file where the folder would be: named as such (it was "cannot read: File exists").
    let o = go(study_args(&study, &[]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("is a file, not a folder"), "{err}");
}

/// What the bench's report says of dissipation, of its parts and of batches (a new-user pass
/// found): the estimated traffic grows with the dashpots and again with friction's history on
/// both engines (the CPU's stayed at its conservative figure, the GPU's ignored friction), the
/// parts of the engine's memory add up to its total (the GPU's listed eight buffers), `tori-N`
/// reports its parts (none) and says that it builds one torus for its copies; bad case names
/// name the case; `--from` refuses measuring options it would ignore.
#[test]
fn bench_reports_dissipation_traffic_every_part_and_refuses_what_it_would_ignore() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("b.json");
    let cases = "fcc-1e3,fcc-1e3+damped,fcc-1e3+friction,tori-3";
    let args = ["bench", "--cases", cases, "--engines", "cpu,gpu-f32", "--steps", "5", "--min-seconds", "0"];
    let o = rrpdem(&[&args[..], &["--json", json.to_str().unwrap()]].concat());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("built tori-3") && err.contains("(3 copies of 80 particles"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let m = v["measurements"].as_array().unwrap();
    let find = |case: &str, engine: &str| {
        m.iter().find(|x| x["case"] == case && x["engine"] == engine).unwrap_or_else(|| panic!("{case} {engine}"))
    };
    for engine in ["Cpu", "GpuF32"] {
        let bytes = |case: &str| find(case, engine)["bytes_per_particle_step"].as_f64().unwrap();
        let (plain, damped, friction) = (bytes("fcc-1e3"), bytes("fcc-1e3+damped"), bytes("fcc-1e3+friction"));
        assert!(plain < damped && damped < friction, "{engine}: {plain} {damped} {friction}");
        for case in ["fcc-1e3+friction", "tori-3"] {
            let x = find(case, engine);
            let parts: u64 = x["engine_parts"].as_array().unwrap().iter().map(|p| p[1].as_u64().unwrap()).sum();
            assert_eq!(Some(parts), x["engine_bytes"].as_u64(), "{case} {engine}");
            assert!(x["engine_parts"].as_array().unwrap().len() > 1, "{case} {engine}");
        }
    }
    for (case, expected) in [
        ("fcc-abc", "fcc-abc: `abc` is not a particle count"),
        ("rings-0", "rings-0: 0 particles"),
        ("+damped+damped", "no case before its suffixes"),
    ] {
        let o = rrpdem(&["bench", "--cases", case]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(expected), "{case}: {err}");
    }
    let md = dir.path().join("x.md");
    let o =
        rrpdem(&["bench", "--from", json.to_str().unwrap(), "--markdown", md.to_str().unwrap(), "--cases", "torus"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("cannot be used with"), "{err}");
}
