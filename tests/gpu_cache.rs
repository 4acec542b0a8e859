//! The process-wide device cache (src/gpu/cache.rs): an engine on a reused device gives the bits
//! of a fresh device, a lost device is not reused, and the grid-fallback counter.

mod common;

use common::gpu::*;
use rrpdem::engine::{Engine, Precision};
use rrpdem::gpu::cache::{CacheKey, idle_count};
use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
use rrpdem::integrator::Integrator;
use rrpdem::model::Model;

fn open(m: &Model, dt: f64, p: Precision, options: GpuOptions) -> GpuEngine {
    GpuEngine::with_options(m, Integrator::RrpNewmark, dt, p, AdapterChoice::Any, options)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn an_engine_on_a_cached_device_gives_the_bits_of_a_fresh_device() {
    let (s, m) = scenario_model("torus_impact.json");
    let other = lattice_model(4, 4, 4, 1.0, true, 7);
    for p in [Precision::F64, Precision::F32] {
        // A workgroup cap above the adapter's limit is clamped to it (the default kernels), but
        // it is a key of its own: no other test of this binary shares these cache entries.
        let cap = Some(u32::MAX - 1);
        let key = CacheKey { adapter: AdapterChoice::Any, precision: p, max_workgroups: cap };
        let fresh = GpuOptions { fresh_device: true, max_workgroups_per_dimension: cap, ..Default::default() };
        let cached = GpuOptions { max_workgroups_per_dimension: cap, ..Default::default() };

        let t0 = std::time::Instant::now();
        let mut a = open(&m, s.dt, p, fresh);
        let t_fresh = t0.elapsed();
        a.advance(500).unwrap();
        let want = bits(&mut a);
        drop(a);
        assert_eq!(idle_count(key), 0, "{p:?}: a fresh device must not enter the cache");

        // Another model uses the cached device first and leaves it in the cache.
        {
            let mut o = open(&other, 1e-3, p, cached);
            o.advance(50).unwrap();
        }
        assert_eq!(idle_count(key), 1, "{p:?}: the device goes back to the cache");
        let t0 = std::time::Instant::now();
        let mut b = open(&m, s.dt, p, cached);
        let t_cached = t0.elapsed();
        eprintln!("{p:?}: engine on a fresh device {t_fresh:.2?}, on the cached device {t_cached:.2?}");
        assert_eq!(idle_count(key), 0, "{p:?}: the second engine reuses the cached device");
        b.advance(500).unwrap();
        assert!(bits(&mut b) == want, "{p:?}: the cached device gives different bits");
    }
}

#[test]
fn a_lost_device_is_not_reused() {
    let (s, m) = scenario_model("torus_impact.json");
    let cap = Some(u32::MAX - 2);
    let key = CacheKey { adapter: AdapterChoice::Any, precision: Precision::F32, max_workgroups: cap };
    let options = GpuOptions { max_workgroups_per_dimension: cap, ..Default::default() };
    let mut a = open(&m, s.dt, Precision::F32, options);
    a.advance(10).unwrap();
    let want = bits(&mut a);
    a.destroy_device();
    drop(a);
    assert_eq!(idle_count(key), 0, "a lost device must leave the cache");
    let mut b = open(&m, s.dt, Precision::F32, options);
    b.advance(10).unwrap();
    assert!(bits(&mut b) == want, "a new device must give the same bits");
}

#[test]
fn fallback_steps_count_the_steps_whose_lists_could_not_grow() {
    let (s, m) = scenario_model("torus_impact.json");
    let mut normal = gpu(&m, Integrator::RrpNewmark, s.dt, Precision::F64);
    for _ in 0..3 {
        normal.advance(100).unwrap();
    }
    assert_eq!(normal.fallback_steps(), 0, "a normal run must not fall back");

    // Lists of capacity 1 overflow at once; a budget of exactly the engine's bytes leaves no
    // room to grow them, so every batch falls back to the grid (with the same bits).
    // The budget is the engine's bytes with lists of capacity 1: those of an engine whose lists
    // grew during `new`, less the growth (4 bytes per list slot beyond one per particle).
    // (Bonded pairs listed: left out, the ring's lists are empty at rest and fit.)
    let tiny = GpuOptions { nbr_capacity: Some(1), list_bonded_pairs: true, ..Default::default() };
    let grown = open(&m, s.dt, Precision::F64, tiny);
    let n = m.particles.len() as u64;
    assert!(grown.neighbour_capacity() > 1, "the torus must overflow lists of capacity 1");
    let budget = grown.device_bytes() - 4 * (grown.neighbour_entries() - n);
    drop(grown);
    let stuck = GpuOptions { nbr_capacity: Some(1), memory_budget: Some(budget), ..tiny };
    let mut t = open(&m, s.dt, Precision::F64, stuck);
    for _ in 0..3 {
        t.advance(100).unwrap();
    }
    assert_eq!(t.neighbour_capacity(), 1, "the lists must not have grown");
    assert_eq!(t.fallback_steps(), 300);
    // Against a normal run that lists bonded pairs too (left out, their contacts go with the
    // bonds: another summation order).
    let mut listed = open(&m, s.dt, Precision::F64, GpuOptions { list_bonded_pairs: true, ..Default::default() });
    listed.advance(300).unwrap();
    assert!(bits(&mut t) == bits(&mut listed), "the fallback must give the same bits");
    // The user hears of it (summary.json's `warnings`, printed by the CLI); not of a normal run.
    use rrpdem::engine::Engine;
    let w = t.warnings();
    assert!(w.len() == 1 && w[0].contains("300 steps"), "{w:?}");
    assert!(normal.warnings().is_empty());
}
