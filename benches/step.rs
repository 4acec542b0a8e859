//! Throughput of one time step (particle-steps/s) on rings of 10³, 10⁵ and 10⁶ particles, for
//! every engine available, side by side in one criterion run.
//!
//! `cargo bench --bench step`; `RRPDEM_BENCH_SIZES=1000,100000` picks other sizes.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rrpdem::engine::{CpuEngine, Engine};
use rrpdem::integrator::Integrator;
use rrpdem::model::Model;
use rrpdem::scenario::Scenario;
use std::path::Path;
use std::time::{Duration, Instant};

/// The paper's torus parameters on a ring of `n` unit spheres moving onto a wall.
fn ring(n: usize) -> Model {
    let json = format!(
        r#"{{"name": "bench", "dt": 1e-3, "t_end": 1, "shear": "paper",
            "particle": {{"mass": 1, "inertia": 1}},
            "stiffness": {{"bending": 10, "axial": 200, "shear": 200, "contact": 2100}},
            "walls": [{{"point": [0, 0, 0], "normal": [1, 0, 0]}}],
            "bodies": [{{"type": "torus_ring", "n": {n}, "particle_diameter": 1, "velocity": [-1, 0, 0]}}]}}"#
    );
    Scenario::from_json(&json, Path::new("bench.json")).and_then(|s| s.build_model()).expect("bench scenario")
}

fn sizes() -> Vec<usize> {
    std::env::var("RRPDEM_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|v| v.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 100_000, 1_000_000])
}

/// Times `iters` steps of an engine (each `advance` ends with the state ready to read).
fn time_steps(engine: &mut dyn Engine, iters: u64) -> Duration {
    let start = Instant::now();
    engine.advance(iters).expect("step");
    start.elapsed()
}

fn bench_step(c: &mut Criterion) {
    let mut group = c.benchmark_group("step");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    for n in sizes() {
        let model = ring(n);
        group.throughput(Throughput::Elements(n as u64));
        let mut cpu = CpuEngine::new(&model, Integrator::RrpNewmark, 1e-3).expect("CPU engine");
        group.bench_with_input(BenchmarkId::new("cpu-f64", n), &n, |b, _| {
            b.iter_custom(|iters| time_steps(&mut cpu, iters))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_step);
criterion_main!(benches);
