//! Helpers shared by the integration tests: engines to run a test body against, scenario
//! loading, small random generators (deterministic, no extra dependency).
#![allow(dead_code)]

pub mod gpu;

use glam::{DQuat, DVec3};
use rrpdem::engine::{CpuEngine, Engine, Precision};
use rrpdem::gpu::{AdapterChoice, GpuEngine};
use rrpdem::integrator::Integrator;
use rrpdem::model::Model;
use rrpdem::scenario::Scenario;
use std::path::Path;

/// Every engine the engine-level tests run against, by name: the CPU reference and the GPU
/// engine in f64 (on lavapipe in CI). A missing adapter fails the test with what to install:
/// GPU tests are never skipped silently.
pub fn engines(model: &Model, integrator: Integrator, dt: f64) -> Vec<(String, Box<dyn Engine>)> {
    let cpu = CpuEngine::new(model, integrator, dt).expect("CPU engine");
    let gpu = GpuEngine::new(model, integrator, dt, Precision::F64, AdapterChoice::Any)
        .unwrap_or_else(|e| panic!("GPU engine (f64) unavailable: {e}"));
    vec![("cpu".into(), Box::new(cpu) as Box<dyn Engine>), ("gpu-f64".into(), Box::new(gpu))]
}

pub fn scenario(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name);
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Tiny deterministic generator (SplitMix64) so tests need no RNG crate.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Uniform in [−a, a) per component.
    pub fn cube(&mut self, a: f64) -> DVec3 {
        DVec3::new(self.range(-a, a), self.range(-a, a), self.range(-a, a))
    }

    /// Uniform direction on the unit sphere.
    pub fn unit(&mut self) -> DVec3 {
        loop {
            let v = DVec3::new(self.range(-1.0, 1.0), self.range(-1.0, 1.0), self.range(-1.0, 1.0));
            let l = v.length();
            if l > 0.1 && l <= 1.0 {
                return v / l;
            }
        }
    }

    /// A rotation by an angle in [0, max_angle] about a random axis.
    pub fn rotation(&mut self, max_angle: f64) -> DQuat {
        DQuat::from_axis_angle(self.unit(), self.range(0.0, max_angle))
    }
}

/// A scenario parsed from inline JSON (named `inline.json` in errors).
pub fn scenario_from(json: &str) -> Scenario {
    Scenario::from_json(json, Path::new("inline.json")).unwrap_or_else(|e| panic!("{e}"))
}

/// A model of free spheres with the given angular velocities (no interactions).
pub fn free_spheres(omegas: &[DVec3]) -> Model {
    let particles: Vec<String> = omegas
        .iter()
        .enumerate()
        .map(|(i, w)| format!(r#"{{"x": [{}, 0, 0], "omega": [{}, {}, {}]}}"#, 10 * i, w.x, w.y, w.z))
        .collect();
    let json = format!(
        r#"{{"name": "spin", "dt": 1e-3, "t_end": 1, "particle": {{"mass": 1, "inertia": 1, "diameter": 1}},
            "bodies": [{{"type": "particles", "particles": [{}]}}]}}"#,
        particles.join(",")
    );
    scenario_from(&json).build_model().unwrap_or_else(|e| panic!("{e}"))
}

/// Reopens a run's folder. Another test of this process may be spawning a child right now:
/// between its fork and its exec the child holds a copy of every descriptor, the folder's lock
/// included, for a moment; the lock is free again once it has exec'd. So a `Busy` folder is
/// retried for up to 5 s.
pub fn reopen(path: &Path) -> rrpdem::output::OutputDir {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match rrpdem::output::OutputDir::reopen(path) {
            Ok(d) => return d,
            Err(e) if std::time::Instant::now() > deadline => panic!("{e}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// One sphere (m = 1, D = 1) falling at 20 onto a stiff wall at height `z` under g = 10,
/// starting `gap` above it, with the time step above the stability estimate.
pub fn falling_sphere(z: f64, gap: f64, dt: f64, t_end: f64) -> Scenario {
    let json = format!(
        r#"{{"name": "drop", "dt": {dt}, "t_end": {t_end}, "record_every": 1, "force_dt": true,
        "particle": {{"mass": 1, "inertia": 0.1, "diameter": 1}},
        "stiffness": {{"contact": 1e6, "wall": 1e6}}, "gravity": [0, 0, -10],
        "walls": [{{"point": [0, 0, {z}], "normal": [0, 0, 1]}}],
        "bodies": [{{"type": "particles", "particles": [{{"x": [0, 0, {}], "v": [0, 0, -20]}}]}}]}}"#,
        z + 0.5 + gap
    );
    Scenario::from_json(&json, Path::new("drop.json")).unwrap()
}

/// A solid torus of ~`n` fcc spheres hitting the wall at speed 1 with rupture (the users' job,
/// scenarios/solid_torus_impact.json, smaller; the issue 24 tests), with `extra` fields (JSON,
/// leading comma).
pub fn solid_torus_impact_json(n: usize, extra: &str) -> String {
    format!(
        r#"{{"name": "impact", "dt": 5e-4, "t_end": 1,
        "particle": {{"mass": 1, "inertia": 1}},
        "stiffness": {{"bending": 10, "axial": 200, "shear": 200, "contact": 2100, "wall": 2100}},
        "shear": "objective",
        "walls": [{{"point": [0, 0, 0], "normal": [1, 0, 0]}}],
        "rupture": {{"tension": 0.01, "shear": 0.1}}{extra},
        "bodies": [{{"type": "torus_solid", "torus_diameter": 3, "tube_diameter": 1, "particles": {n},
                     "lattice": "fcc", "gap": 0, "velocity": [-1, 0, 0]}}]}}"#
    )
}
