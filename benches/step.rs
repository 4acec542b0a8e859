//! Throughput of one time step (particle-steps/s) on 10³, 10⁵ and 10⁶ particles for the CPU
//! reference and the GPU engine in f32 and f64, side by side in one criterion run.
//!
//! `cargo bench --bench step`; `RRPDEM_BENCH_SIZES=1000,100000` picks other sizes. The system
//! is a square lattice of 100-sphere rings (the paper's parameters, unit spheres) moving onto a
//! wall, so that coordinates stay small enough for f32 at every size.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rrpdem::engine::{CpuEngine, Engine, Precision};
use rrpdem::gpu::{AdapterChoice, GpuEngine};
use rrpdem::integrator::Integrator;
use rrpdem::model::Model;
use rrpdem::scenario::Scenario;
use std::path::Path;
use std::time::{Duration, Instant};

const RING: usize = 100;

/// About `n` particles: ⌈n/100⌉ rings of 100 unit spheres on a square lattice.
fn rings(n: usize) -> Model {
    let count = n.div_ceil(RING);
    let side = (count as f64).sqrt().ceil() as usize;
    let d_t = 1.0 / (std::f64::consts::PI / RING as f64).sin();
    let pitch = d_t + 2.0;
    let bodies: Vec<String> = (0..count)
        .map(|k| {
            let (cx, cy) = (0.5 * d_t + 0.5 + (k % side) as f64 * pitch, (k / side) as f64 * pitch);
            format!(r#"{{"type": "torus_ring", "n": {RING}, "particle_diameter": 1, "center": [{cx}, {cy}, 0], "velocity": [-1, 0, 0]}}"#)
        })
        .collect();
    let json = format!(
        r#"{{"name": "bench", "dt": 1e-3, "t_end": 1, "shear": "paper",
            "particle": {{"mass": 1, "inertia": 1}},
            "stiffness": {{"bending": 10, "axial": 200, "shear": 200, "contact": 2100}},
            "walls": [{{"point": [0, 0, 0], "normal": [1, 0, 0]}}],
            "bodies": [{}]}}"#,
        bodies.join(",")
    );
    Scenario::from_json(&json, Path::new("bench.json")).and_then(|s| s.build_model()).expect("bench scenario")
}

fn sizes() -> Vec<usize> {
    std::env::var("RRPDEM_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|v| v.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 100_000, 1_000_000])
}

/// Times `iters` steps; `advance` returns with the work finished (the GPU engine waits).
fn time_steps(engine: &mut dyn Engine, iters: u64) -> Duration {
    let start = Instant::now();
    engine.advance(iters).expect("step");
    start.elapsed()
}

fn bench_step(c: &mut Criterion) {
    let mut group = c.benchmark_group("step");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    for n in sizes() {
        let model = rings(n);
        let n = model.particles.len();
        group.throughput(Throughput::Elements(n as u64));
        let mut engines: Vec<(String, Box<dyn Engine>)> = vec![(
            "cpu-f64".into(),
            Box::new(CpuEngine::new(&model, Integrator::RrpNewmark, 1e-3).expect("CPU engine")),
        )];
        for p in [Precision::F32, Precision::F64] {
            match GpuEngine::new(&model, Integrator::RrpNewmark, 1e-3, p, AdapterChoice::Any) {
                Ok(g) => engines.push((format!("gpu-{}", p.as_str()), Box::new(g))),
                Err(e) => eprintln!("note: no GPU {} row for n = {n}: {e}", p.as_str()),
            }
        }
        for (name, engine) in engines.iter_mut() {
            group.bench_with_input(BenchmarkId::new(name.as_str(), n), &n, |b, _| {
                b.iter_custom(|iters| time_steps(engine.as_mut(), iters))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_step);
criterion_main!(benches);
