//! Adapter discovery and the errors a user sees: the adapter list `rrpdem info` prints, the
//! hardware-only choice on a machine with only a software adapter, and a blown-up run reported
//! as the CPU engine reports it.

mod common;

use common::gpu::*;
use rrpdem::engine::{Engine, Precision};
use rrpdem::error::EngineError;
use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuError, hardware_adapter_available, list_adapters};
use rrpdem::integrator::Integrator;

#[test]
fn adapters_are_listed_with_their_limits() {
    let list = list_adapters();
    assert!(!list.is_empty(), "no adapter: apt-get install mesa-vulkan-drivers libvulkan1");
    for a in &list {
        assert!(!a.name.is_empty());
        assert!(["Vulkan", "Metal", "Dx12"].contains(&a.backend.as_str()), "unexpected backend {}", a.backend);
        assert!(a.max_storage_buffer_binding_size > 0 && a.max_workgroups_per_dimension >= 65535);
    }
    // The CI adapter (lavapipe) offers f64, which the f64 tests rely on.
    assert!(list.iter().any(|a| a.f64), "no adapter with SHADER_F64: {list:?}");
}

#[test]
fn hardware_only_says_what_was_found() {
    let (s, m) = scenario_model("torus_impact.json");
    let r = GpuEngine::new(&m, Integrator::RrpNewmark, s.dt, Precision::F32, AdapterChoice::HardwareOnly);
    if hardware_adapter_available() {
        assert!(r.is_ok(), "{:?}", r.err());
    } else {
        let e = r.err().expect("no hardware adapter, so HardwareOnly must fail");
        assert!(matches!(e, GpuError::NoHardwareAdapter { .. }), "{e}");
        assert!(e.to_string().contains("software adapter"), "{e}");
    }
}

#[test]
fn an_unstable_run_is_reported_like_on_the_cpu() {
    // dt = 0.05 is far beyond the torus's stability limit (~4e-3): the run blows up.
    let (_, m) = scenario_model("torus_impact.json");
    let dt = 0.05;
    let mut c = cpu(&m, Integrator::RrpNewmark, dt);
    let ce = c.advance(2000).expect_err("the CPU run must blow up");
    let mut g = gpu(&m, Integrator::RrpNewmark, dt, Precision::F64);
    let ge = g.advance(2000).expect_err("the GPU run must blow up");
    eprintln!("CPU: {ce}\nGPU: {ge}");
    let where_ = |e: &EngineError| match e {
        EngineError::NonFinite { particle, step, .. } => Some(("non-finite", *particle, *step)),
        EngineError::OutOfRange { particle, step, .. } => Some(("out of range", *particle, *step)),
        _ => None,
    };
    let (kind, particle, step) = where_(&ge).unwrap_or_else(|| panic!("unexpected error {ge}"));
    // Both engines do the same f64 operations, so they fail at the same place.
    assert_eq!(where_(&ce), Some((kind, particle, step)), "CPU: {ce}");
    assert_eq!(g.steps_done(), step);
}

#[test]
fn a_model_too_large_for_the_bindings_says_how_many_particles_fit() {
    use rrpdem::gpu::GpuOptions;
    let (s, m) = scenario_model("torus_impact.json");
    // 80 particles · 4 f64 · 8 B = 2560 B per particle array; cap bindings at 1024 B.
    let options = GpuOptions { max_binding_size: Some(1024), ..Default::default() };
    let e = GpuEngine::with_options(&m, Integrator::RrpNewmark, s.dt, Precision::F64, AdapterChoice::Any, options)
        .err()
        .expect("the size check must refuse the model");
    let msg = e.to_string();
    assert!(matches!(e, GpuError::TooLarge { max_particles: 32, .. }), "{msg}");
    assert!(msg.contains("at most 32 particles"), "{msg}");
}

#[test]
fn a_non_finite_initial_state_is_refused() {
    let (s, mut m) = scenario_model("torus_impact.json");
    m.particles.x[5].y = f64::NAN;
    let ge = GpuEngine::new(&m, Integrator::RrpNewmark, s.dt, Precision::F64, AdapterChoice::Any)
        .err()
        .expect("GPU must refuse NaN");
    // The engine error comes back typed, as the CPU engine would give it.
    let ge = EngineError::from(ge);
    assert!(matches!(ge, EngineError::NonFinite { particle: 5, step: 0, .. }), "{ge}");
}
