//! `rrpdem bench`: throughput of the standard cases (paper torus, lattices of rings, FCC
//! blocks) on the chosen engines, precisions and thread counts, in particle-steps/s and
//! bond-steps/s, with the bytes each step moves per particle and the memory-bandwidth fraction
//! that implies. Timing covers `advance` only (the engine waits for the device); models are
//! built outside it.

use crate::engine::{CpuEngine, Engine, Precision};
use crate::gpu::{AdapterChoice, GpuEngine};
use crate::integrator::Integrator;
use crate::interactions::{ShearVariant, Wall};
use crate::model::{Model, Params, Particles};
use crate::scenario::Scenario;
use glam::{DQuat, DVec3};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// Spheres per ring in the ring lattices.
const RING: usize = 100;

/// A benchmark case: a name and a model builder.
pub struct Case {
    pub name: String,
    pub model: Box<dyn Fn() -> Result<Model, String> + Send + Sync>,
}

/// The standard cases, by name: `torus` (the paper's 80 spheres), `rings-N` (⌈N/100⌉ rings of
/// 100 unit spheres on a square lattice moving onto a wall), `fcc-N` (an FCC cube of about N
/// spheres at nearest-neighbour spacing, bonded to nearest neighbours, moving onto a wall),
/// `tori-N` (N copies of the paper torus stepped as a study's variants are on the CPU: one
/// engine each, in parallel over the copies; `measure` treats it specially).
pub fn case(name: &str) -> Result<Case, String> {
    let n = |s: &str| -> Result<usize, String> {
        s.parse::<f64>().map(|v| v as usize).map_err(|_| format!("`{s}`: expected a particle count such as 1e5"))
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
        if n(count)? == 0 {
            return Err("tori-N needs N ≥ 1".into());
        }
        Box::new(|| case("torus").and_then(|c| (c.model)()))
    } else if let Some(count) = name.strip_prefix("fcc-") {
        let count = n(count)?;
        Box::new(move || fcc_block(count))
    } else {
        return Err(format!("unknown case `{name}` (torus, rings-N, fcc-N)"));
    };
    Ok(Case { name: name.into(), model })
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

/// About `n` unit spheres of an FCC cube at nearest-neighbour spacing, bonds to nearest
/// neighbours, moving onto a wall at x = 0.
pub fn fcc_block(n: usize) -> Result<Model, String> {
    // FCC: 4 sites per cubic cell of edge a = √2 (nearest-neighbour distance 1).
    let cells = ((n as f64 / 4.0).cbrt().round() as usize).max(1);
    let a = std::f64::consts::SQRT_2;
    let basis = [[0.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [0.0, 0.5, 0.5]];
    let mut x = Vec::with_capacity(4 * cells * cells * cells);
    for i in 0..cells {
        for j in 0..cells {
            for k in 0..cells {
                for b in basis {
                    x.push([(i as f64 + b[0]) * a + 0.5, (j as f64 + b[1]) * a, (k as f64 + b[2]) * a]);
                }
            }
        }
    }
    let index = |p: [f64; 3]| -> [i64; 3] {
        [(p[0] * 2.0 / a).round() as i64, (p[1] * 2.0 / a).round() as i64, (p[2] * 2.0 / a).round() as i64]
    };
    let mut at = std::collections::HashMap::with_capacity(x.len());
    for (k, p) in x.iter().enumerate() {
        at.insert(index(*p), k as u32);
    }
    // Nearest neighbours in half-lattice units: the 12 permutations of (±1, ±1, 0); half of
    // them (lexicographically positive) so that each pair is listed once.
    let mut offsets = Vec::new();
    for d in [[1, 1, 0], [1, -1, 0], [1, 0, 1], [1, 0, -1], [0, 1, 1], [0, 1, -1]] {
        offsets.push(d);
    }
    let mut pairs = Vec::new();
    for (k, p) in x.iter().enumerate() {
        let c = index(*p);
        for d in &offsets {
            if let Some(&j) = at.get(&[c[0] + d[0], c[1] + d[1], c[2] + d[2]]) {
                pairs.push((k as u32, j));
            }
        }
    }
    let mut particles = Particles::default();
    for p in &x {
        particles.push(DVec3::from(*p), DVec3::new(-1.0, 0.0, 0.0), DQuat::IDENTITY, DVec3::ZERO, 1.0, 1.0, 0.5, false);
    }
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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
#[derive(Clone, Debug, Serialize)]
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
}

/// Runs `case` on `engine` with `threads` rayon threads: a warm-up of `steps / 10` steps, then
/// `steps` timed steps (repeated until at least `min_seconds` have passed).
pub fn measure(
    case: &Case,
    model: &Model,
    engine: EngineKind,
    threads: usize,
    steps: u64,
    min_seconds: f64,
) -> Result<Measurement, String> {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().map_err(|e| e.to_string())?;
    if let Some(copies) = case.name.strip_prefix("tori-") {
        let copies = copies.parse::<f64>().map_err(|e| e.to_string())? as usize;
        return pool.install(|| measure_copies(case, model, engine, threads, copies, steps, min_seconds));
    }
    pool.install(|| {
        let mut e: Box<dyn Engine> = match engine {
            EngineKind::Cpu => {
                Box::new(CpuEngine::new(model, Integrator::RrpNewmark, 1e-3).map_err(|e| e.to_string())?)
            }
            EngineKind::GpuF32 | EngineKind::GpuF64 => {
                let p = if engine == EngineKind::GpuF32 { Precision::F32 } else { Precision::F64 };
                Box::new(
                    GpuEngine::new(model, Integrator::RrpNewmark, 1e-3, p, AdapterChoice::Any)
                        .map_err(|e| e.to_string())?,
                )
            }
        };
        e.advance((steps / 10).max(1)).map_err(|e| e.to_string())?;
        let start = Instant::now();
        let mut done = 0;
        while done == 0 || start.elapsed().as_secs_f64() < min_seconds {
            e.advance(steps).map_err(|e| e.to_string())?;
            done += steps;
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(Measurement {
            case: case.name.clone(),
            engine,
            device: e.info().device,
            threads,
            particles: model.particles.len(),
            bonds: model.bonds.len(),
            steps: done,
            seconds,
            particle_steps_per_s: done as f64 * model.particles.len() as f64 / seconds,
            bond_steps_per_s: done as f64 * model.bonds.len() as f64 / seconds,
        })
    })
}

/// `copies` independent engines of `model` advanced together, in parallel over the copies (what
/// a study does with its variants on the CPU).
fn measure_copies(
    case: &Case,
    model: &Model,
    engine: EngineKind,
    threads: usize,
    copies: usize,
    steps: u64,
    min_seconds: f64,
) -> Result<Measurement, String> {
    use rayon::prelude::*;
    if engine != EngineKind::Cpu {
        return Err("tori-N measures the CPU's parallel variants; a GPU study runs its variants one by one".into());
    }
    let mut engines: Vec<CpuEngine> = (0..copies)
        .map(|_| CpuEngine::new(model, Integrator::RrpNewmark, 1e-3).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let advance = |engines: &mut Vec<CpuEngine>, k: u64| {
        engines.par_iter_mut().try_for_each(|e| e.advance(k).map_err(|e| e.to_string()))
    };
    advance(&mut engines, (steps / 10).max(1))?;
    let start = Instant::now();
    let mut done = 0;
    while done == 0 || start.elapsed().as_secs_f64() < min_seconds {
        advance(&mut engines, steps)?;
        done += steps;
    }
    let seconds = start.elapsed().as_secs_f64();
    let (n, b) = (copies * model.particles.len(), copies * model.bonds.len());
    Ok(Measurement {
        case: case.name.clone(),
        engine,
        device: engines[0].info().device,
        threads,
        particles: n,
        bonds: b,
        steps: done,
        seconds,
        particle_steps_per_s: done as f64 * n as f64 / seconds,
        bond_steps_per_s: done as f64 * b as f64 / seconds,
    })
}
