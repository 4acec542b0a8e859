//! `rrpdem info`: the GPU adapters and how their arithmetic rounds.

use anyhow::Result;
use rrpdem::engine::Precision;

pub(super) fn cmd_info() -> Result<()> {
    let adapters = rrpdem::gpu::list_adapters();
    outln!("CPU engine      f64, {} rayon threads", rayon::current_num_threads());
    if adapters.is_empty() {
        outln!("GPU adapters    none ({})", rrpdem::gpu::error::INSTALL_HINT);
    }
    for (k, a) in adapters.iter().enumerate() {
        outln!("GPU adapter {k}   {} ({}, {}, driver {})", a.name, a.backend, a.device_type, a.driver);
        outln!(
            "                f64: {}  max buffer {} MiB  max storage binding {} MiB  storage buffers/stage {}  workgroups/dim {}",
            if a.f64 { "yes" } else { "no" },
            a.max_buffer_size >> 20,
            a.max_storage_buffer_binding_size >> 20,
            a.max_storage_buffers_per_stage,
            a.max_workgroups_per_dimension
        );
    }
    outln!(
        "--backend auto  would use {}",
        if rrpdem::gpu::hardware_adapter_available() { "the hardware GPU" } else { "the CPU engine (no hardware GPU)" }
    );
    // What `--backend gpu` computes with, operation by operation, against IEEE 754 (the CPU).
    if !adapters.is_empty() {
        for p in [Precision::F32, Precision::F64] {
            match rrpdem::gpu::arithmetic_on_device(p) {
                Ok(r) if r.ieee() => {
                    outln!("GPU {} ops     a/b, sqrt, a*b+c as IEEE 754 on all {} inputs", p.as_str(), r.cases)
                }
                Ok(r) => {
                    let op = |name: &str, differ: usize, ulps: u64| {
                        if differ == 0 {
                            format!("{name} as IEEE")
                        } else {
                            format!("{name} {differ} (≤ {ulps} ulp)")
                        }
                    };
                    let mul_add = if r.mul_add_as_fused == r.cases {
                        "a*b+c fused".to_string()
                    } else {
                        op("a*b+c", r.mul_add_differ, r.mul_add_max_ulps)
                    };
                    outln!(
                        "GPU {} ops     differ from IEEE 754 on {} inputs: {}, {}, {}",
                        p.as_str(),
                        r.cases,
                        op("a/b", r.div_differ, r.div_max_ulps),
                        op("sqrt", r.sqrt_differ, r.sqrt_max_ulps),
                        mul_add
                    )
                }
                Err(e) => outln!("GPU {} ops     not checked: {e}", p.as_str()),
            }
        }
    }
    Ok(())
}
