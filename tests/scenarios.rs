//! Loads every file in `scenarios/` and runs it briefly: shipped scenarios must stay valid.
//!
//! Scenarios above `STEP_LIMIT` particles (the 1e6-particle `solid_torus_large.json`, meant for
//! GPUs and benchmarks) are built and checked against the stability estimate but not stepped:
//! building takes seconds, while the CPU engine would need about 2.5 GB and a minute for the 20
//! steps on the 2-core CI machine. Their physics is that of the stepped smaller variants.

mod common;
use rrpdem::engine::{CpuEngine, Engine};
use rrpdem::scenario::Scenario;
use rrpdem::stability;

/// Largest model the test steps (see the module note).
const STEP_LIMIT: usize = 200_000;

#[test]
fn every_shipped_scenario_loads_and_runs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if text.contains("\"vary\"") {
            // A study: every variant resolves and validates (stability included) on load, and
            // each runs a few steps below.
            let study = rrpdem::study::Study::load(&path).unwrap_or_else(|e| panic!("{e}"));
            for k in 0..study.variants.len() {
                check_runs(&study.scenario(k, &path).unwrap(), &path);
            }
            count += 1;
            continue;
        }
        let s = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        check_runs(&s, &path);
        count += 1;
    }
    assert!(count >= 2, "expected the shipped scenarios in {}", dir.display());
}

/// Builds the model, checks the step against the estimate and runs 20 steps (models up to
/// `STEP_LIMIT` particles).
fn check_runs(s: &Scenario, path: &std::path::Path) {
    {
        let model = s.build_model().unwrap_or_else(|e| panic!("{e}"));
        let est = stability::estimate(&model);
        assert!(
            s.dt <= est.h_max || s.force_dt,
            "{}: dt {} above the stability estimate {}",
            path.display(),
            s.dt,
            est.h_max
        );
        if model.particles.len() > STEP_LIMIT {
            return;
        }
        let mut e = CpuEngine::new(&model, s.integrator, s.dt).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let d0 = e.diagnostics().unwrap();
        e.advance(20).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let d = e.diagnostics().unwrap();
        assert!(d.total().is_finite() && d.step == 20, "{}", path.display());
        // 20 small steps of a stable scenario cannot move the energy by more than 10 %.
        assert!(
            (d.total() - d0.total()).abs() <= 0.1 * d0.total().abs().max(1e-12),
            "{}: E {} → {}",
            path.display(),
            d0.total(),
            d.total()
        );
    }
}
