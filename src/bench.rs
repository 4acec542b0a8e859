//! `rrpdem bench`: throughput of the standard cases (paper torus, lattices of rings, FCC
//! blocks) on the chosen engines, precisions and thread counts, in particle-steps/s and
//! bond-steps/s, with the bytes each step moves per particle and the memory-bandwidth fraction
//! that implies. Timing covers `advance` only (the engine waits for the device); models are
//! built outside it.

use crate::engine::{CpuEngine, Engine, Precision, Watch};
use crate::gpu::{AdapterChoice, GpuEngine};
use crate::integrator::Integrator;
use crate::interactions::{ShearVariant, Wall};
use crate::model::{Model, Params, Particles};
use crate::scenario::Scenario;
use glam::{DQuat, DVec3};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

pub mod report;
mod traffic;
pub use traffic::{
    cpu_bytes_per_step, cpu_dissipation_bytes_per_step, gpu_bytes_per_step, gpu_dissipation_bytes_per_step,
};

/// Spheres per ring in the ring lattices.
const RING: usize = 100;

/// The cases `--cases standard` runs, the set the generated section of docs/BENCHMARKS.md
/// reports: the paper torus, rings and FCC blocks at 10⁵ and 10⁶ particles, a solid torus.
pub const STANDARD: &[&str] = &["torus", "rings-1e5", "rings-1e6", "fcc-1e5", "fcc-1e6", "solid-torus-1e5"];

/// A benchmark case: a name, a model builder and its time step.
pub struct Case {
    pub name: String,
    pub model: Box<dyn Fn() -> Result<Model, String> + Send + Sync>,
    /// `None`: the bench's step, `BENCH_DT`. `Some(dt)`: a scenario's step, halved while it is
    /// above half the model's stable-step estimate (`Case::dt`), as a user would have to.
    pub scenario_dt: Option<f64>,
    /// `+listed`: the engines keep bonded pairs in their contact lists, as before they were left
    /// out (`CpuEngine::list_bonded_pairs`, `GpuOptions::list_bonded_pairs`): the same results,
    /// for before/after figures on any machine.
    pub listed: bool,
    /// `+every-step`: the GPU engine records the grid stage in every step and rebuilds only where
    /// the skin rule requires (`GpuOptions::grid_every_step`, as before quiet steps left it
    /// out): the same results, for before/after figures. The CPU engine ignores it.
    pub every_step: bool,
    /// `+bond-refs`: the GPU engine reads every bond's reference data per bond
    /// (`GpuOptions::per_bond_references`), for figures of the bond kernel's gathers.
    pub bond_refs: bool,
}

/// Dispatches recorded per step without a rebuild on average, and batches finished after a
/// missed rebuild per 1000 steps, from what an engine recorded over the measurement (`r`), the
/// dispatches a full step records (`all`) and the fraction of steps that rebuild: a rebuilding
/// step is taken to record them all.
fn quiet_step_figures(r: crate::engine::RecordedSteps, all: usize, rebuild_fraction: f64) -> (f64, f64) {
    let rebuilding = (rebuild_fraction * r.steps as f64).round();
    let quiet = (r.dispatches as f64 - rebuilding * all as f64) / (r.steps as f64 - rebuilding).max(1.0);
    (quiet, 1000.0 * r.misses as f64 / r.steps.max(1) as f64)
}

/// The time step of the synthetic cases (their masses are chosen so that it is stable).
pub const BENCH_DT: f64 = 1e-3;

impl Case {
    /// The GPU engine's options this case asks for (`+listed`, `+every-step`).
    pub fn gpu_options(&self) -> crate::gpu::GpuOptions {
        crate::gpu::GpuOptions {
            list_bonded_pairs: self.listed,
            grid_every_step: self.every_step,
            per_bond_references: self.bond_refs,
            ..Default::default()
        }
    }

    /// The step this case runs `model` (its built model) with.
    pub fn dt(&self, model: &Model) -> f64 {
        match self.scenario_dt {
            None => BENCH_DT,
            Some(dt) => {
                let h_max = crate::stability::estimate(model).h_max;
                let mut dt = dt;
                while dt > crate::stability::WARN_FRACTION * h_max {
                    dt *= 0.5;
                }
                dt
            }
        }
    }
}

/// The case names a bench runs: `standard` expands to `STANDARD`, others stay.
pub fn expand_cases(cases: &[String]) -> Vec<String> {
    cases
        .iter()
        .flat_map(|c| match c.as_str() {
            "standard" => STANDARD.iter().map(|s| s.to_string()).collect(),
            _ => vec![c.clone()],
        })
        .collect()
}

/// Checks a bench's counts and bandwidth (the message names the option's meaning).
pub fn check_options(steps: u64, threads: &[usize], min_seconds: f64, bandwidth: Option<f64>) -> Result<(), String> {
    if steps == 0 || threads.contains(&0) {
        return Err("steps and threads must be at least 1".into());
    }
    if !(min_seconds.is_finite() && min_seconds >= 0.0) {
        return Err(format!("the minimum time per measurement must be 0 or more seconds, not {min_seconds}"));
    }
    if bandwidth.is_some_and(|b| b.is_nan() || b <= 0.0) {
        return Err("the bandwidth must be positive (GB/s)".into());
    }
    Ok(())
}

/// The standard cases, by name: `torus` (the paper's 80 spheres), `rings-N` (⌈N/100⌉ rings of
/// 100 unit spheres on a square lattice moving onto a wall), `fcc-N` (an FCC cube of about N
/// spheres at nearest-neighbour spacing, bonded to nearest neighbours, moving onto a wall),
/// `solid-torus-N` (a solid torus of about N FCC spheres, D_t = 3, D_c = 1, as in
/// `scenarios/solid_torus_impact.json` without rupture, spheres of mass 100, moving onto a wall),
/// `solid-torus-rupture-N` (the same torus with its binder breaking as in that scenario:
/// objective shear, tension 0.06, shear 0.6), `solid-torus-impact-N` (the users' job:
/// `scenarios/solid_torus_impact.json` itself, its torus made of about N spheres, at the
/// scenario's step or, where the spheres' stiffer binder needs it, half of it, and so on),
/// `tori-N` (N copies of the paper torus, 80·N spheres, stepped as a study batch steps its
/// variants: on the CPU one engine each, in parallel over the copies; on the GPU one state
/// holding all of them; `measure` treats it specially). Then suffixes, each at most once, in
/// any order (`SUFFIXES`): `+damped` or `+friction` (`dissipative_case`: MODEL §10 on), `+listed`
/// (`Case::listed`), `+skin=S` (the contact lists' skin, `Params::skin`, in units of r_max), the
/// first three for one-model cases only, `+every-step` (`Case::every_step`) and `+bond-refs`
/// (`Case::bond_refs`).
pub fn case(name: &str) -> Result<Case, String> {
    let mut parts = name.split('+');
    let base = parts.next().unwrap_or_default();
    if base.is_empty() {
        return Err(format!(
            "`{name}`: no case before its suffixes; a case is torus, rings-N, fcc-N, solid-torus-N, \
             solid-torus-rupture-N, solid-torus-impact-N or tori-N, then suffixes, e.g. fcc-1e5+damped"
        ));
    }
    let (mut dissipation, mut listed, mut skin, mut every_step, mut bond_refs) = (None, false, None, false, false);
    for suffix in parts {
        let twice = || format!("`{name}`: `+{suffix}` given twice (or with its alternative)");
        match suffix {
            "damped" | "friction" if dissipation.is_none() => dissipation = Some(suffix),
            "listed" if !listed => listed = true,
            "every-step" if !every_step => every_step = true,
            "bond-refs" if !bond_refs => bond_refs = true,
            s if s.starts_with("skin=") && skin.is_none() => {
                let max = crate::grid::MAX_SKIN_FACTOR;
                let value = &s["skin=".len()..];
                skin = Some(match value.parse::<f64>() {
                    Ok(v) if v > 0.0 && v <= max => v,
                    _ => {
                        return Err(format!(
                            "`{name}`: +skin= takes a skin in (0, {max}] (units of r_max), not `{value}`"
                        ));
                    }
                });
            }
            "damped" | "friction" | "listed" | "every-step" | "bond-refs" => return Err(twice()),
            s if s.starts_with("skin=") => return Err(twice()),
            _ => return Err(format!("`{name}`: unknown suffix `+{suffix}`; {SUFFIXES}")),
        }
    }
    if base.starts_with("tori-") && (dissipation.is_some() || listed || skin.is_some()) {
        return Err(format!(
            "`{name}`: `+damped`, `+friction`, `+listed` and `+skin=` apply to one model (torus, rings-N, fcc-N, \
             solid-torus-N, …), not to tori-N"
        ));
    }
    let mut c = match dissipation {
        Some(extra) => dissipative_case(base, extra)?,
        None => base_case(base)?,
    };
    if let Some(skin) = skin {
        let inner = c.model;
        c.model = Box::new(move || {
            let mut m = inner()?;
            m.params.skin = skin;
            Ok(m)
        });
    }
    Ok(Case { name: name.into(), listed, every_step, bond_refs, ..c })
}

/// What `case` says of the suffixes a case may take.
const SUFFIXES: &str = "a case takes `+damped` or `+friction`, `+listed`, `+skin=S` (one-model cases), \
                        `+every-step` and `+bond-refs`, each at most once, e.g. fcc-1e5+damped+skin=1.0";

/// A case without suffixes (`case`).
fn base_case(name: &str) -> Result<Case, String> {
    // A count the model cannot hold is an error here, not an allocation failure while building.
    let max = crate::scenario::generators::MAX_PARTICLES;
    let n = |s: &str| -> Result<usize, String> {
        match s.parse::<f64>() {
            Ok(v) if v >= 1.0 && v <= max => Ok(v as usize),
            Ok(v) => Err(format!("{name}: {v} particles; a case has from 1 to {max:e}")),
            Err(_) => Err(format!("{name}: `{s}` is not a particle count; give one such as 1e5 (e.g. fcc-1e5)")),
        }
    };
    let model: Box<dyn Fn() -> Result<Model, String> + Send + Sync> = if name == "torus" {
        Box::new(|| {
            let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
            let text = include_str!("../scenarios/torus_impact.json");
            Scenario::from_json(text, &p).and_then(|s| s.build_model()).map_err(|e| e.to_string())
        })
    } else if let Some(count) = name.strip_prefix("rings-") {
        let count = n(count)?;
        Box::new(move || rings(count))
    } else if let Some(count) = name.strip_prefix("tori-") {
        if n(count)?.saturating_mul(80) as f64 > max {
            return Err(format!("{name}: {count} copies of the 80-sphere torus exceed {max:e} particles"));
        }
        Box::new(|| case("torus").and_then(|c| (c.model)()))
    } else if let Some(count) = name.strip_prefix("fcc-") {
        let count = n(count)?;
        Box::new(move || fcc_block(count))
    } else if let Some(count) = name.strip_prefix("solid-torus-impact-") {
        let count = n(count)?;
        let model = Box::new(move || solid_torus_impact(count));
        return Ok(Case {
            name: name.into(),
            model,
            scenario_dt: Some(SOLID_TORUS_IMPACT_DT),
            listed: false,
            every_step: false,
            bond_refs: false,
        });
    } else if let Some(count) = name.strip_prefix("solid-torus-rupture-") {
        let count = n(count)?;
        Box::new(move || solid_torus_rupture(count))
    } else if let Some(count) = name.strip_prefix("solid-torus-") {
        let count = n(count)?;
        Box::new(move || solid_torus(count))
    } else {
        return Err(format!(
            "unknown case `{name}` (torus, rings-N, fcc-N, solid-torus-N, solid-torus-rupture-N, solid-torus-impact-N \
             with N a particle count such as 1e5, tori-N with N copies of the 80-sphere torus; {SUFFIXES})"
        ));
    };
    Ok(Case { name: name.into(), model, scenario_dt: None, listed: false, every_step: false, bond_refs: false })
}

/// The case `base` with the dissipation of MODEL §10 on (`extra`), as
/// `scenarios/solid_torus_impact_damped.json` has it: `damped` the dashpots (restitution 0.5
/// between spheres, 0.3 at the walls, binder γ = 0.5 axial and shear, 0.01 bending and twist),
/// `friction` those and Coulomb friction (0.3 between spheres, 0.5 at the walls).
fn dissipative_case(base: &str, extra: &str) -> Result<Case, String> {
    use crate::interactions::{Dissipation, restitution_beta};
    let friction = extra == "friction";
    let inner = base_case(base)?;
    let model = move || {
        let mut m = (inner.model)()?;
        m.params.dissipation = Some(Dissipation {
            beta: restitution_beta(0.5),
            beta_wall: restitution_beta(0.3),
            mu: if friction { 0.3 } else { 0.0 },
            mu_wall: if friction { 0.5 } else { 0.0 },
            stiffness_ratio: 2.0 / 7.0,
            binder: [0.5, 0.5, 0.01, 0.01],
        });
        Ok(m)
    };
    Ok(Case {
        name: base.into(),
        model: Box::new(model),
        scenario_dt: inner.scenario_dt,
        listed: false,
        every_step: false,
        bond_refs: false,
    })
}

const PAPER: &str = r#""dt": 1e-3, "t_end": 1, "shear": "paper", "particle": {"mass": 1, "inertia": 1},
    "stiffness": {"bending": 10, "axial": 200, "shear": 200, "contact": 2100},
    "walls": [{"point": [0, 0, 0], "normal": [1, 0, 0]}]"#;

/// About `n` particles: ⌈n/100⌉ rings of 100 unit spheres on a square lattice.
pub fn rings(n: usize) -> Result<Model, String> {
    let count = n.div_ceil(RING);
    let side = (count as f64).sqrt().ceil() as usize;
    let d_t = 1.0 / (std::f64::consts::PI / RING as f64).sin();
    let pitch = d_t + 2.0;
    let bodies: Vec<String> = (0..count)
        .map(|k| {
            let (cx, cy) = (0.5 * d_t + 0.5 + (k % side) as f64 * pitch, (k / side) as f64 * pitch);
            format!(
                r#"{{"type": "torus_ring", "n": {RING}, "particle_diameter": 1, "center": [{cx}, {cy}, 0], "velocity": [-1, 0, 0]}}"#
            )
        })
        .collect();
    let json = format!(r#"{{"name": "bench", {PAPER}, "bodies": [{}]}}"#, bodies.join(","));
    Scenario::from_json(&json, Path::new("bench.json")).and_then(|s| s.build_model()).map_err(|e| e.to_string())
}

/// A solid torus (`torus_solid`, FCC, D_t = 3, D_c = 1, about `n` spheres, about 6 bonds per
/// sphere) moving onto a wall at x = 0 with the paper's stiffnesses, spheres of mass and
/// inertia 100 (stable at dt = 10⁻³ up to 10⁷ spheres and beyond).
pub fn solid_torus(n: usize) -> Result<Model, String> {
    // Spheres of mass and inertia 100: the binder's stiffness grows as the spheres shrink
    // (h_max ≈ 6e-4 at 10⁶ spheres of mass 1), and the bench steps with dt = 10⁻³.
    let params = PAPER.replace(r#""mass": 1, "inertia": 1"#, r#""mass": 100, "inertia": 100"#);
    let json = format!(
        r#"{{"name": "bench", {params}, "bodies": [{{"type": "torus_solid", "torus_diameter": 3, "tube_diameter": 1,
        "particles": {n}, "lattice": "fcc", "gap": 0, "velocity": [-1, 0, 0]}}]}}"#
    );
    Scenario::from_json(&json, Path::new("bench.json")).and_then(|s| s.build_model()).map_err(|e| e.to_string())
}

/// `solid_torus(n)` with the binder of `scenarios/solid_torus_impact.json`: objective shear and
/// rupture at tension 0.06 or shear 0.6, so that every intact bond is tested at every step and
/// bonds break once the torus is on the wall.
pub fn solid_torus_rupture(n: usize) -> Result<Model, String> {
    let mut model = solid_torus(n)?;
    let text = include_str!("../scenarios/solid_torus_impact.json");
    let scenario =
        Scenario::from_json(text, Path::new("scenarios/solid_torus_impact.json")).map_err(|e| e.to_string())?;
    let own = scenario.params();
    model.params.shear = own.shear;
    model.params.rupture = own.rupture;
    Ok(model)
}

/// The step of `scenarios/solid_torus_impact.json`.
const SOLID_TORUS_IMPACT_DT: f64 = 5e-4;

/// `scenarios/solid_torus_impact.json` with about `n` spheres in its torus (everything else as
/// the file has it: masses, stiffnesses, objective shear, rupture, the wall, v0 = 1).
pub fn solid_torus_impact(n: usize) -> Result<Model, String> {
    let path = Path::new("scenarios/solid_torus_impact.json");
    let text = include_str!("../scenarios/solid_torus_impact.json");
    // The file's one count (checked, so that an edit of the file cannot leave it unscaled).
    let count = r#""particles": 20000"#;
    if text.matches(count).count() != 1 {
        return Err(format!("{}: expected one `{count}` to scale", path.display()));
    }
    let text = text.replace(count, &format!(r#""particles": {n}"#));
    let scenario = Scenario::from_json(&text, path).map_err(|e| e.to_string())?;
    if scenario.dt != SOLID_TORUS_IMPACT_DT {
        return Err(format!("{}: dt {} is not the bench's {SOLID_TORUS_IMPACT_DT}", path.display(), scenario.dt));
    }
    scenario.build_model().map_err(|e| e.to_string())
}

/// About `n` unit spheres of an FCC cube at nearest-neighbour spacing, bonds to nearest
/// neighbours, moving onto a wall at x = 0.
pub fn fcc_block(n: usize) -> Result<Model, String> {
    // FCC: 4 sites per cubic cell of edge a = √2 (nearest-neighbour distance 1). Site
    // `((i·c + j)·c + k)·4 + b` is cell (i, j, k), basis site b; in half-cell units its
    // coordinates are 2·(i, j, k) + PARITY[b]. Built in parallel, linear in the size.
    let cells = ((n as f64 / 4.0).cbrt().round() as usize).max(1);
    let a = std::f64::consts::SQRT_2;
    const PARITY: [[i64; 3]; 4] = [[0, 0, 0], [1, 1, 0], [1, 0, 1], [0, 1, 1]];
    let c = cells as i64;
    let total = 4 * cells * cells * cells;
    let half = |s: usize| -> [i64; 3] {
        let (cell, b) = (s / 4, s % 4);
        let (i, j, k) = ((cell / (cells * cells)) as i64, ((cell / cells) % cells) as i64, (cell % cells) as i64);
        [2 * i + PARITY[b][0], 2 * j + PARITY[b][1], 2 * k + PARITY[b][2]]
    };
    let site = |h: [i64; 3]| -> Option<u32> {
        if h.iter().any(|&v| v < 0 || v >= 2 * c) {
            return None;
        }
        let b = PARITY.iter().position(|p| (0..3).all(|d| p[d] == h[d] & 1))?;
        Some((((h[0] / 2 * c + h[1] / 2) * c + h[2] / 2) * 4 + b as i64) as u32)
    };
    let x: Vec<DVec3> = (0..total)
        .into_par_iter()
        .map(|s| {
            let h = half(s);
            DVec3::new(h[0] as f64 * 0.5 * a + 0.5, h[1] as f64 * 0.5 * a, h[2] as f64 * 0.5 * a)
        })
        .collect();
    // Nearest neighbours in half-cell units: the 12 permutations of (±1, ±1, 0); half of them
    // (lexicographically positive) so that each pair is listed once.
    let offsets = [[1, 1, 0], [1, -1, 0], [1, 0, 1], [1, 0, -1], [0, 1, 1], [0, 1, -1]];
    let pairs: Vec<(u32, u32)> = (0..total)
        .into_par_iter()
        .flat_map_iter(|s| {
            let h = half(s);
            offsets.iter().filter_map(move |d| site([h[0] + d[0], h[1] + d[1], h[2] + d[2]]).map(|j| (s as u32, j)))
        })
        .collect();
    let particles = Particles {
        v: vec![DVec3::new(-1.0, 0.0, 0.0); total],
        q: vec![DQuat::IDENTITY; total],
        w: vec![DVec3::ZERO; total],
        mass: vec![1.0; total],
        inertia: vec![1.0; total],
        radius: vec![0.5; total],
        fixed: vec![false; total],
        x,
    };
    Ok(Model::new(particles, &pairs, paper_params()))
}

/// The paper's torus parameters with a wall at x = 0.
fn paper_params() -> Params {
    Params {
        k_bend: 10.0,
        k_axial: 200.0,
        k_shear: 200.0,
        k_contact: 2100.0,
        k_wall: 2100.0,
        shear: ShearVariant::Paper,
        walls: vec![Wall { point: DVec3::ZERO, normal: DVec3::X }],
        ..Params::default()
    }
}

/// Which engine a measurement ran on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EngineKind {
    Cpu,
    GpuF32,
    GpuF64,
}

impl EngineKind {
    pub fn parse(s: &str) -> Result<EngineKind, String> {
        match s {
            "cpu" => Ok(EngineKind::Cpu),
            "gpu-f32" => Ok(EngineKind::GpuF32),
            "gpu-f64" => Ok(EngineKind::GpuF64),
            _ => Err(format!("unknown engine `{s}` (cpu, gpu-f32, gpu-f64)")),
        }
    }
}

/// One measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measurement {
    pub case: String,
    pub engine: EngineKind,
    pub device: String,
    /// Rayon threads (CPU engine; the GPU engine's host side too).
    pub threads: usize,
    pub particles: usize,
    pub bonds: usize,
    pub steps: u64,
    pub seconds: f64,
    pub particle_steps_per_s: f64,
    pub bond_steps_per_s: f64,
    /// Seconds to build the engine from the model (upload included on the GPU).
    pub engine_setup_s: f64,
    /// Estimated bytes of memory traffic per particle-step (`bytes_per_step` / particles).
    pub bytes_per_particle_step: f64,
    /// Fraction of the given memory bandwidth this throughput implies (`--bandwidth`).
    pub bandwidth_fraction: Option<f64>,
    /// Bytes held by the engine's arrays: `CpuEngine::memory` on the CPU, the device buffers
    /// (`GpuEngine::device_bytes`) on the GPU.
    pub engine_bytes: Option<u64>,
    /// The same by part (every part; the screen shows the eight largest). For `tori-N` the
    /// engines' parts summed over the copies on the CPU, the batch's buffers on the GPU.
    pub engine_parts: Vec<(String, u64)>,
    /// Peak resident memory of the process so far (Linux `VmHWM`), bytes.
    pub peak_rss: Option<u64>,
    /// `--stages`: mean device seconds per step of each stage of a GPU step (`gpu::state::Stage`,
    /// timestamp queries; each stage is its own compute pass while timed); empty where the
    /// adapter has no timestamp queries; `None` when not asked for or not a one-model GPU case.
    pub stage_seconds: Option<Vec<(String, f64)>>,
    /// `--stages` too: the same per kernel (`GpuEngine::time_kernels`: each dispatch its own
    /// timed pass, a kernel's chunks and levels summed), as (stage, kernel, seconds).
    pub kernel_seconds: Option<Vec<(String, String, f64)>>,
    /// Contact-list rebuilds per 1000 steps, counted over the warm-up and the timed steps
    /// together (`warm_up_steps`: a tenth more), and list entries per particle at the end
    /// (`Engine::list_figures`; one-model cases): what the contact search costs, the same on
    /// any device.
    #[serde(default)]
    pub rebuilds_per_1000_steps: Option<f64>,
    #[serde(default)]
    pub list_entries_per_particle: Option<f64>,
    /// Each replica's rebuilds per 1000 steps (warm-up included), smallest and largest over the replicas
    /// (`tori-N`): each replica decides its own rebuilds (issue 24).
    #[serde(default)]
    pub replica_rebuilds_per_1000_steps: Option<(f64, f64)>,
    /// GPU: dispatches one step records, the grid stage's among them (indirect: no workgroup
    /// unless the step rebuilds).
    #[serde(default)]
    pub recorded_dispatches_per_step: Option<(usize, usize)>,
    /// GPU: dispatches that launch workgroups, per step on average (the grid stage's only in
    /// steps that rebuild: `recorded − grid + grid · rebuilds per step`).
    #[serde(default)]
    pub dispatches_per_step: Option<f64>,
    /// GPU: dispatches that launch workgroups in a step without a rebuild (`recorded − grid`).
    #[serde(default)]
    pub dispatches_per_quiet_step: Option<usize>,
    /// GPU: dispatches recorded per step without a rebuild, on average over the timed steps and
    /// their warm-up: `recorded − grid` where a batch leaves the grid stage out of its quiet
    /// steps, `recorded` where it records it in every step (docs/GPU.md, "Quiet steps"). Counted
    /// as the engine records them; a rebuild step is taken to record them all.
    #[serde(default)]
    pub recorded_dispatches_per_quiet_step: Option<f64>,
    /// GPU: batches per 1000 steps that missed a rebuild where they recorded no grid stage and
    /// were finished from that step with the grid stage in every step.
    #[serde(default)]
    pub grid_misses_per_1000_steps: Option<f64>,
    /// Times the host waits for the device per step, as `run` steps (once per advance).
    #[serde(default)]
    pub host_waits_per_step: Option<f64>,
    /// The time step the case ran with (`Case::dt`).
    #[serde(default)]
    pub dt: Option<f64>,
}

/// Peak resident set size of this process so far (Linux: `VmHWM` in `/proc/self/status`).
pub fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// `--stages` on a GPU engine: after a warm-up, the device time per step of each stage, then of
/// each kernel (`Measurement::stage_seconds`, `kernel_seconds`; empty without timestamp
/// queries), over up to `steps` real steps each, watched as `run` watches them so that the
/// watch is timed too.
#[allow(clippy::type_complexity)]
fn time_gpu_step(
    e: &mut GpuEngine,
    model: &Model,
    steps: u64,
) -> Result<(Vec<(String, f64)>, Vec<(String, String, f64)>), String> {
    let d0 = e.diagnostics().map_err(|e| e.to_string())?;
    Engine::set_watch(e, Watch::new(&d0, f64::INFINITY, &model.params.walls));
    e.advance(warm_up_steps(steps)).map_err(|e| e.to_string())?;
    let timed = steps.min(u32::MAX as u64) as u32;
    let stages = e.time_stages(timed).map_err(|e| e.to_string())?;
    let stages = stages.map_or_else(Vec::new, |t| t.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    let kernels = e.time_kernels(timed).map_err(|e| e.to_string())?;
    let kernels =
        kernels.map_or_else(Vec::new, |t| t.into_iter().map(|(s, k, v)| (s.to_string(), k.to_string(), v)).collect());
    Ok((stages, kernels))
}

/// Runs `case` on `engine` with `threads` rayon threads: a warm-up of `steps / 10` steps, then
/// `steps` timed steps (repeated until at least `min_seconds` have passed). An owned model is
/// dropped once the engine is built (the engine keeps what it needs), so that the peak memory
/// is the engine's. With `stages` (one-model GPU cases), the device time of each stage of a step
/// is measured too, with timestamp queries, over up to `gpu::engine::MAX_TIMED_STEPS` steps
/// after the warm-up (`Measurement::stage_seconds`).
#[allow(clippy::too_many_arguments)]
pub fn measure(
    case: &Case,
    model: std::borrow::Cow<'_, Model>,
    engine: EngineKind,
    threads: usize,
    stages: bool,
    steps: u64,
    min_seconds: f64,
    bandwidth_gbs: Option<f64>,
) -> Result<Measurement, String> {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().map_err(|e| e.to_string())?;
    if let Some(copies) = copies(&case.name) {
        return pool
            .install(|| measure_copies(case, &model, engine, threads, copies, steps, min_seconds, bandwidth_gbs));
    }
    let dt = case.dt(&model);
    pool.install(|| {
        let setup = Instant::now();
        let (n, nb) = (model.particles.len(), model.bonds.len());
        let engine_parts: Vec<(String, u64)>;
        let mut stage_seconds = None;
        let mut kernel_seconds = None;
        let mut step_costs = None;
        let (mut e, engine_bytes, bytes_per_step): (Box<dyn Engine>, _, _) = match engine {
            EngineKind::Cpu => {
                let mut e = CpuEngine::new(&model, Integrator::RrpNewmark, dt).map_err(|e| e.to_string())?;
                if case.listed {
                    e.list_bonded_pairs().map_err(|e| e.to_string())?;
                }
                engine_parts = e.memory().into_iter().map(|(k, v)| (k.to_string(), v as u64)).collect();
                let bytes = engine_parts.iter().map(|m| m.1).sum::<u64>();
                // The list's partners, each read once; bonded pairs left out go with their bonds.
                let (entries, bonded) = (e.neighbour_entries(), if e.bonded_entries() > 0 { nb } else { 0 });
                let mut per_step = cpu_bytes_per_step(n, nb, entries);
                if let Some(d) = &model.params.dissipation {
                    per_step += cpu_dissipation_bytes_per_step(n, entries, bonded, model.params.walls.len(), d);
                }
                (Box::new(e), Some(bytes), per_step)
            }
            EngineKind::GpuF32 | EngineKind::GpuF64 => {
                let p = if engine == EngineKind::GpuF32 { Precision::F32 } else { Precision::F64 };
                let options = case.gpu_options();
                let mut e = GpuEngine::with_options(&model, Integrator::RrpNewmark, dt, p, AdapterChoice::Any, options)
                    .map_err(|e| e.to_string())?;
                if stages {
                    let (by_stage, by_kernel) = time_gpu_step(&mut e, &model, steps)?;
                    (stage_seconds, kernel_seconds) = (Some(by_stage), Some(by_kernel));
                }
                // The GPU's own list lengths (the same contacts as the CPU's lists).
                let listed = e.neighbour_entries_in_use().map_err(|e| e.to_string())? as usize;
                // The particle kernel also reads the bonded partners the lists leave out.
                let partners = listed + if !case.listed { 2 * nb } else { 0 };
                engine_parts = gpu_parts(&e);
                let bytes = e.device_bytes();
                let (all, grid, waits) = e.step_costs();
                step_costs = Some(((all, grid), waits));
                let mut per_step = gpu_bytes_per_step(n, nb, partners, p);
                if let Some(d) = &model.params.dissipation {
                    // `dissipate` walks the lists alone; the bonded pairs go with their bonds.
                    per_step +=
                        gpu_dissipation_bytes_per_step(n, nb, listed, model.params.walls.len(), d, p, !case.listed);
                }
                (Box::new(e), Some(bytes), per_step)
            }
        };
        let built = Built {
            device: e.info().device,
            particles: n,
            bonds: nb,
            engine_setup_s: setup.elapsed().as_secs_f64(),
            bytes_per_step,
            engine_bytes,
            engine_parts,
        };
        // Stepped as `rrpdem run` steps it: watched at every step (an engine that watches its
        // steps does), stopping at its guard interval to read the diagnostics.
        let d0 = e.diagnostics().map_err(|e| e.to_string())?;
        e.set_watch(Watch::new(&d0, f64::INFINITY, &model.params.walls));
        let stride = e.guard_interval().max(1);
        drop(model);
        // The rebuilds are counted over the warm-up and the timed steps together, read outside
        // the timing (on the GPU, `list_figures` reads the list counts back).
        let rebuilds_from = e.list_figures().map_or(0, |f| f.0);
        let recorded_from = e.recorded_figures();
        let m = timed(case, engine, threads, steps, min_seconds, bandwidth_gbs, built, |k| {
            for s in strides(k, stride) {
                e.advance(s).and_then(|()| e.diagnostics()).map_err(|e| e.to_string())?;
            }
            Ok(())
        })?;
        let (mut rebuilds_per_1000_steps, mut list_entries_per_particle) = (None, None);
        if let Some((rebuilds, entries)) = e.list_figures() {
            let stepped = m.steps + warm_up_steps(steps);
            rebuilds_per_1000_steps = Some(1000.0 * rebuilds.saturating_sub(rebuilds_from) as f64 / stepped as f64);
            list_entries_per_particle = Some(entries as f64 / n.max(1) as f64);
        }
        let rebuild_fraction = rebuilds_per_1000_steps.unwrap_or(0.0) / 1000.0;
        let recorded = e
            .recorded_figures()
            .zip(recorded_from)
            .zip(step_costs)
            .map(|((now, from), ((all, _), _))| quiet_step_figures(now.since(from), all, rebuild_fraction));
        Ok(Measurement {
            stage_seconds,
            kernel_seconds,
            rebuilds_per_1000_steps,
            list_entries_per_particle,
            recorded_dispatches_per_step: step_costs.map(|c| c.0),
            dispatches_per_step: step_costs
                .map(|((all, grid), _)| (all - grid) as f64 + grid as f64 * rebuild_fraction),
            dispatches_per_quiet_step: step_costs.map(|((all, grid), _)| all - grid),
            recorded_dispatches_per_quiet_step: recorded.map(|r| r.0),
            grid_misses_per_1000_steps: recorded.map(|r| r.1),
            host_waits_per_step: step_costs.map(|c| c.1),
            dt: Some(dt),
            ..m
        })
    })
}

/// A GPU engine's buffers by name, with what `device_bytes` counts besides them (uniform and
/// parameter buffers) as one more part, so that the parts add up to `engine_bytes`.
fn gpu_parts(e: &GpuEngine) -> Vec<(String, u64)> {
    let mut parts: Vec<(String, u64)> = e.buffer_parts().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let rest = e.device_bytes().saturating_sub(parts.iter().map(|p| p.1).sum());
    if rest > 0 {
        parts.push(("other (uniform and parameter buffers)".into(), rest));
    }
    parts
}

/// The number of copies a `tori-N` case steps (`None` for any other case).
pub fn copies(name: &str) -> Option<usize> {
    let count = name.strip_prefix("tori-")?.split('+').next()?;
    count.parse::<f64>().ok().map(|c| c as usize)
}

/// `k` steps in advances of at most `stride`.
fn strides(k: u64, stride: u64) -> impl Iterator<Item = u64> {
    (0..k.div_ceil(stride)).map(move |i| stride.min(k - i * stride))
}

/// What a built engine reports besides its speed.
struct Built {
    device: String,
    particles: usize,
    bonds: usize,
    engine_setup_s: f64,
    /// Estimated bytes of memory traffic per step of the whole engine.
    bytes_per_step: f64,
    engine_bytes: Option<u64>,
    engine_parts: Vec<(String, u64)>,
}

/// Steps of `timed`'s warm-up for `steps` timed steps.
fn warm_up_steps(steps: u64) -> u64 {
    (steps / 10).max(1)
}

/// A warm-up of `steps / 10` steps, then `steps` timed steps repeated until at least
/// `min_seconds` have passed; the measurement of the engine `advance` steps.
#[allow(clippy::too_many_arguments)]
fn timed(
    case: &Case,
    engine: EngineKind,
    threads: usize,
    steps: u64,
    min_seconds: f64,
    bandwidth_gbs: Option<f64>,
    built: Built,
    mut advance: impl FnMut(u64) -> Result<(), String>,
) -> Result<Measurement, String> {
    advance(warm_up_steps(steps))?;
    let start = Instant::now();
    let mut done = 0;
    while done == 0 || start.elapsed().as_secs_f64() < min_seconds {
        advance(steps)?;
        done += steps;
    }
    let seconds = start.elapsed().as_secs_f64();
    let Built { device, particles, bonds, engine_setup_s, bytes_per_step, engine_bytes, engine_parts } = built;
    Ok(Measurement {
        case: case.name.clone(),
        engine,
        device,
        threads,
        particles,
        bonds,
        steps: done,
        seconds,
        particle_steps_per_s: done as f64 * particles as f64 / seconds,
        bond_steps_per_s: done as f64 * bonds as f64 / seconds,
        engine_setup_s,
        bytes_per_particle_step: bytes_per_step / particles.max(1) as f64,
        bandwidth_fraction: bandwidth_gbs.map(|g| bytes_per_step * done as f64 / seconds / (g * 1e9)),
        engine_bytes,
        engine_parts,
        peak_rss: peak_rss(),
        stage_seconds: None,
        kernel_seconds: None,
        rebuilds_per_1000_steps: None,
        list_entries_per_particle: None,
        replica_rebuilds_per_1000_steps: None,
        recorded_dispatches_per_step: None,
        dispatches_per_step: None,
        dispatches_per_quiet_step: None,
        recorded_dispatches_per_quiet_step: None,
        grid_misses_per_1000_steps: None,
        host_waits_per_step: None,
        dt: None,
    })
}

/// `copies` replicas of `model` as a study batch steps them (`BatchEngine`): on the CPU one
/// engine each, in parallel over the copies (`Separate`); on the GPU one state holding them all
/// (`GpuEngine::new_batch`).
#[allow(clippy::too_many_arguments)]
fn measure_copies(
    case: &Case,
    model: &Model,
    engine: EngineKind,
    threads: usize,
    copies: usize,
    steps: u64,
    min_seconds: f64,
    bandwidth_gbs: Option<f64>,
) -> Result<Measurement, String> {
    use crate::engine::{BatchEngine, Separate};
    use rayon::prelude::*;
    let setup = Instant::now();
    // The copies' contacts are the model's: count its list once.
    let partners = CpuEngine::new(model, Integrator::RrpNewmark, BENCH_DT)
        .map(|c| c.neighbour_entries() + c.bonded_entries())
        .unwrap_or(0);
    let (n1, b1) = (model.particles.len(), model.bonds.len());
    let engine_parts: Vec<(String, u64)>;
    let (mut batch, engine_bytes, bytes_per_step): (Box<dyn BatchEngine>, Option<u64>, f64) = match engine {
        EngineKind::Cpu => {
            let engines: Vec<CpuEngine> = (0..copies)
                .into_par_iter()
                .map(|_| CpuEngine::new(model, Integrator::RrpNewmark, BENCH_DT).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?;
            // Each part summed over the copies, in the engine's order of parts.
            let mut parts: Vec<(String, u64)> = Vec::new();
            for (k, v) in engines.iter().flat_map(|e| e.memory()) {
                match parts.iter_mut().find(|p| p.0 == k) {
                    Some(p) => p.1 += v as u64,
                    None => parts.push((k.to_string(), v as u64)),
                }
            }
            engine_parts = parts;
            let bytes = engine_parts.iter().map(|m| m.1).sum::<u64>();
            let per_step = copies as f64 * cpu_bytes_per_step(n1, b1, partners);
            (Box::new(Separate::new(engines, true)), Some(bytes), per_step)
        }
        EngineKind::GpuF32 | EngineKind::GpuF64 => {
            let p = if engine == EngineKind::GpuF32 { Precision::F32 } else { Precision::F64 };
            let models = vec![model; copies];
            let e = GpuEngine::new_batch(
                &models,
                Integrator::RrpNewmark,
                BENCH_DT,
                p,
                AdapterChoice::Any,
                case.gpu_options(),
            )
            .map_err(|e| e.to_string())?;
            engine_parts = gpu_parts(&e);
            let bytes = e.device_bytes();
            let per_step = copies as f64 * gpu_bytes_per_step(n1, b1, partners, p);
            (Box::new(e), Some(bytes), per_step)
        }
    };
    let built = Built {
        device: batch.info().device,
        particles: copies * n1,
        bonds: copies * b1,
        engine_setup_s: setup.elapsed().as_secs_f64(),
        bytes_per_step,
        engine_bytes,
        engine_parts,
    };
    // Watched and stopped as `rrpdem study` runs a batch.
    let d0 = batch.diagnostics().map_err(|e| e.to_string())?;
    for (r, d) in d0.iter().enumerate() {
        batch.set_watch(r, Watch::new(d, f64::INFINITY, &model.params.walls));
    }
    let stride = batch.guard_interval().max(1);
    let from = batch.rebuilds_per_replica();
    let m = timed(case, engine, threads, steps, min_seconds, bandwidth_gbs, built, |k| {
        for s in strides(k, stride) {
            batch.advance(s).and_then(|()| batch.diagnostics()).map_err(|e| e.to_string())?;
        }
        match (0..copies).find_map(|r| batch.take_failure(r).map(|e| (r, e))) {
            Some((r, e)) => Err(format!("copy {r}: {e}")),
            None => Ok(()),
        }
    })?;
    // Each replica's rebuilds over the warm-up and the timed steps.
    let stepped = (m.steps + warm_up_steps(steps)) as f64;
    let per_replica: Vec<f64> = batch
        .rebuilds_per_replica()
        .iter()
        .zip(&from)
        .map(|(now, then)| 1000.0 * now.saturating_sub(*then) as f64 / stepped)
        .collect();
    let range = per_replica
        .iter()
        .fold(None, |acc: Option<(f64, f64)>, &v| Some(acc.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v)))));
    Ok(Measurement {
        replica_rebuilds_per_1000_steps: range,
        list_entries_per_particle: Some(partners as f64 / n1.max(1) as f64),
        dt: Some(BENCH_DT),
        ..m
    })
}
