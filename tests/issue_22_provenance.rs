//! Issue 22, item 12: every `summary.json` and `study.json` records which rrpdem made it (version,
//! commit), the command line, the date, the host and the threads, as the bench report does.

use std::path::Path;
use std::process::Command;

fn rrpdem(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rrpdem")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Checks a provenance object against this build and the command line that made it.
fn check(p: &serde_json::Value, args: &[&str]) {
    assert_eq!(p["version"].as_str(), Some(env!("CARGO_PKG_VERSION")), "{p}");
    assert!(!p["commit"].as_str().unwrap().is_empty(), "{p}");
    let line: Vec<&str> = p["command_line"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(line[0].ends_with("rrpdem"), "{line:?}");
    assert_eq!(&line[1..], args, "the command line as given");
    // The date of today (UTC), as `date -u` gives it: an independent clock and calendar.
    let today = Command::new("date").args(["-u", "+%Y-%m-%d"]).output().unwrap();
    let today = String::from_utf8_lossy(&today.stdout).trim().to_string();
    assert!(p["date"].as_str().unwrap().starts_with(&today), "{p}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(p["host"].as_str(), Some(host.trim()));
    assert!(p["threads"].as_u64().unwrap() >= 1);
    assert!(p["machine"]["logical_cpus"].as_u64().unwrap() >= 1);
}

#[test]
fn runs_and_studies_say_what_made_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args =
        ["run", "scenarios/torus_impact.json", "--t-end", "0.05", "--backend", "cpu", "--out", out.to_str().unwrap()];
    let o = rrpdem(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    check(&json(&out.join("summary.json"))["provenance"], &args);

    // A two-variant study: study.json and each variant's summary.json.
    let study = dir.path().join("s.json");
    std::fs::write(
        &study,
        format!(
            r#"{{"name": "p", "base": "{}", "set": {{"/t_end": 0.02}}, "vary": {{"list": [{{"/dt": 1e-3}}, {{"/dt": 5e-4}}]}}}}"#,
            Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json").display()
        ),
    )
    .unwrap();
    let sout = dir.path().join("study");
    let args = ["study", study.to_str().unwrap(), "--backend", "cpu", "--out", sout.to_str().unwrap()];
    let o = rrpdem(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    check(&json(&sout.join("study.json"))["provenance"], &args);
    check(&json(&sout.join("variants/1/summary.json"))["provenance"], &args);
}
