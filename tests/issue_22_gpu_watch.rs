//! Issue 22, items 2 and H5 on the GPU engine: the energy guard and the impact measures are
//! taken on the device after every step (shaders/watch.wgsl), so that the GPU's summary says
//! what the CPU's says: the guard stops at the same step, the peak wall force and the contact
//! times do not depend on the record cadence, and the maximum energy deviation is the maximum
//! over every step (before: every 100 steps, 3.46e-4 in the summary against 8.02e-4 in the
//! run's own series.csv).
//!
//! Runs on lavapipe in CI (see docs/GPU.md); a missing adapter fails with what to install.

mod common;
use common::falling_sphere;
use rrpdem::engine::Precision;
use rrpdem::error::EngineError;
use rrpdem::run::{self, EngineChoice, RunError, RunOptions, Summary};
use rrpdem::scenario::{Backend, Scenario};
use std::path::Path;

/// The paper torus at speed `v0` onto a wall of stiffness `k_wall` with bending rupture at
/// `bending`, to `t_end`, recorded every `every` steps.
fn torus(v0: f64, k_wall: f64, bending: f64, t_end: f64, every: u64) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v["bodies"][0]["velocity"] = serde_json::json!([-v0, 0, 0]);
    v["stiffness"]["wall"] = serde_json::json!(k_wall);
    v["rupture"] = serde_json::json!({"bending": bending});
    v["t_end"] = serde_json::json!(t_end);
    v["record_every"] = serde_json::json!(every);
    Scenario::from_json(&v.to_string(), &path).unwrap()
}

fn run_on(s: &Scenario, dir: &Path, engine: Option<Precision>) -> Result<Summary, RunError> {
    let choice = match engine {
        None => EngineChoice { backend: Some(Backend::Cpu), ..Default::default() },
        Some(p) => EngineChoice { backend: Some(Backend::Gpu), precision: Some(p), ..Default::default() },
    };
    run::run_scenario(s, dir, true, &choice, RunOptions::default(), &|_| {})
}

fn guard_step(r: Result<Summary, RunError>) -> u64 {
    match r {
        Err(RunError::Engine { error: EngineError::EnergyGuard { step, .. }, .. }) => step,
        Err(e) => panic!("expected the energy guard, got {e}"),
        Ok(s) => panic!("the run completed (max {:e})", s.energy_and_momenta.max_rel_energy_deviation),
    }
}

fn summary_json(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn the_gpu_guard_stops_where_the_cpu_guard_stops() {
    // dt = 2e-3 is above the wall's stability limit: the sphere gains energy at its first
    // contact steps. Both engines see every step, so both refuse the same step and end at the
    // step before it, far from the origin too (the scale is origin-free).
    let dir = tempfile::tempdir().unwrap();
    for z in [0.0, 1e4] {
        let s = falling_sphere(z, 0.5, 2e-3, 0.2);
        let cpu = guard_step(run_on(&s, &dir.path().join(format!("cpu{z}")), None));
        for p in [Precision::F64, Precision::F32] {
            let out = dir.path().join(format!("{p:?}{z}"));
            let gpu = guard_step(run_on(&s, &out, Some(p)));
            assert_eq!(gpu, cpu, "{p:?}, wall at {z}");
            let summary = summary_json(&out);
            assert_eq!(summary["steps"].as_u64(), Some(cpu - 1), "{p:?}: ends at the last good step");
            assert_eq!(summary["energy_and_momenta"]["every_step"].as_bool(), Some(true), "{p:?}");
            let series = std::fs::read_to_string(out.join("series.csv")).unwrap();
            let last = series.lines().last().unwrap();
            assert!(last.starts_with(&format!("{},", cpu - 1)), "{p:?}: series ends at the last good step: {last}");
        }
    }
}

#[test]
fn gpu_impact_measures_match_the_cpu_and_ignore_the_record_cadence() {
    let dir = tempfile::tempdir().unwrap();
    let cpu = run_on(&torus(4.0, 1000.0, 0.3, 2.0, 10), &dir.path().join("cpu"), None).unwrap();
    let c = cpu.impact.unwrap();
    for p in [Precision::F64, Precision::F32] {
        let mut seen = Vec::new();
        for every in [1, 10, 50] {
            let out = dir.path().join(format!("{p:?}{every}"));
            let s = run_on(&torus(4.0, 1000.0, 0.3, 2.0, every), &out, Some(p)).unwrap();
            let i = s.impact.unwrap();
            seen.push((
                i.peak_wall_force,
                i.peak_wall_force_t,
                i.first_contact_t,
                i.last_contact_t,
                i.contact_episodes,
            ));
        }
        // The watch runs every step whatever the cadence: the same bits.
        assert!(seen.iter().all(|x| *x == seen[0]), "{p:?}: {seen:?}");
        if p == Precision::F32 {
            // An f32 run of a rupturing impact is its own trajectory (the ring starts touching the
            // wall, gap 0, and f32 rounds that to a 7e-7 overlap; bonds then break at other steps):
            // only the cadence invariance above holds. f64 follows the CPU.
            continue;
        }
        let (peak, peak_t, first, last, episodes) = seen[0];
        // Contact steps are decided by a wall force > 0: the same steps on both engines while
        // the trajectories agree (f64: to ~1e-12 over this run, V7).
        assert_eq!(first, c.first_contact_t);
        assert_eq!(last, c.last_contact_t);
        assert_eq!(episodes, c.contact_episodes);
        assert_eq!(peak_t, c.peak_wall_force_t);
        // The peak force to 1e-12 relative (the CPU/GPU f64 agreement of V7; measured 4e-16).
        assert!((peak - c.peak_wall_force).abs() <= 1e-12 * c.peak_wall_force, "{peak} vs {}", c.peak_wall_force);
    }
}

#[test]
fn gpu_max_energy_deviation_covers_every_row_of_its_series() {
    // H5: the maximum in summary.json is over every step, so it is at least every recorded
    // row's deviation from E0 (relative to the scale recorded on that row), and equal to the
    // largest row's when every step is recorded.
    let dir = tempfile::tempdir().unwrap();
    for p in [Precision::F64, Precision::F32] {
        for every in [1u64, 25] {
            let out = dir.path().join(format!("{p:?}{every}"));
            let s = run_on(&torus(4.0, 1000.0, 0.3, 2.0, every), &out, Some(p)).unwrap();
            let b = &s.energy_and_momenta;
            assert!(b.every_step, "{p:?}");
            let text = std::fs::read_to_string(out.join("series.csv")).unwrap();
            let head: Vec<&str> = text.lines().next().unwrap().split(',').collect();
            let col = |name: &str| head.iter().position(|c| *c == name).unwrap_or_else(|| panic!("{name}: {head:?}"));
            let (e, rel, scale) = (col("E"), col("E_released"), col("E_scale"));
            let rows: Vec<Vec<f64>> =
                text.lines().skip(1).map(|l| l.split(',').map(|v| v.parse().unwrap()).collect()).collect();
            let e0 = rows[0][e];
            let row_max = rows.iter().map(|r| (r[e] + r[rel] - e0).abs() / r[scale]).fold(0.0, f64::max);
            // The rows' E is the engine's f64 sum on the host; the watch sums the same terms on
            // the device in another order: equal to ~n ε of the scale (80 particles, 1e-13 in
            // f64; in f32 the device sums in f32: 80 · 6e-8 ≈ 5e-6 of the scale).
            let slack = if p == Precision::F64 { 1e-12 } else { 1e-5 };
            assert!(b.max_rel_energy_deviation + slack >= row_max, "{p:?} every {every}: {b:?} vs rows {row_max:e}");
            if every == 1 {
                assert!((b.max_rel_energy_deviation - row_max).abs() <= slack, "{p:?}: {b:?} vs rows {row_max:e}");
            }
        }
    }
}
