//! Device probes: single WGSL functions run over inputs on any adapter, to check them against
//! their Rust twins (`atan2_real`, `cell_hash`, `finite_real`, the rupture functions) and to
//! measure how far a device's arithmetic is from IEEE 754 (`arithmetic_on_device`, which
//! `rrpdem info` reports). Each opens its own device and compiles the kernels: tests and
//! reports only, never a step of a run.

use super::context::{AdapterChoice, GpuContext, create_buffer, map_read};
use super::error::GpuError;
use super::pipeline::DemPipeline;
use super::shader::WG;
use super::sizes::{bytes_to_reals, real_size, reals_to_bytes};
use crate::engine::Precision;
use glam::{DQuat, DVec3};

/// Runs a probe kernel of shaders/probe.wgsl over `input` (raw bytes of its input array) and
/// returns the raw bytes of its `out_bytes`-long output, on any adapter.
fn run_probe(
    precision: Precision,
    entry: &str,
    names: (&str, &str),
    input: &[u8],
    out_bytes: usize,
    items: u32,
) -> Result<Vec<u8>, GpuError> {
    let ctx = GpuContext::new(AdapterChoice::Any, precision)?;
    let pipe = DemPipeline::new(&ctx.device, precision, ctx.limits.max_compute_workgroups_per_dimension)?;
    let buffer = |label: &str, size: usize, usage| {
        create_buffer(&ctx.device, label, (size as u64).next_multiple_of(4).max(4), usage)
            .map_err(|e| GpuError::Wgpu(format!("creating probe buffer `{label}`: {e:?}")))
    };
    let storage = wgpu::BufferUsages::STORAGE;
    let input_buf = buffer("probe_in", input.len(), storage | wgpu::BufferUsages::COPY_DST)?;
    ctx.queue.write_buffer(&input_buf, 0, input);
    let input = input_buf;
    let output = buffer("probe_out", out_bytes, storage | wgpu::BufferUsages::COPY_SRC)?;
    let staging = buffer("probe_staging", out_bytes, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST)?;
    let groups = pipe.bind(&ctx.device, entry, &|name: &str| {
        if name == names.0 {
            Some(input.as_entire_binding())
        } else if name == names.1 {
            Some(output.as_entire_binding())
        } else {
            None
        }
    })?;
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pipe.dispatch(&mut pass, entry, &groups, items, WG);
    }
    encoder.copy_buffer_to_buffer(&output, 0, &staging, 0, out_bytes as u64);
    ctx.queue.submit([encoder.finish()]);
    let bytes = map_read(&ctx.device, &staging)?;
    ctx.take_error()?;
    Ok(bytes)
}

/// Runs `atan2_real` (shaders/atan2_f64.wgsl in f64, the builtin in f32) over `(y, x)` pairs on
/// an adapter, for the accuracy test.
pub fn atan2_on_device(pairs: &[(f64, f64)], precision: Precision) -> Result<Vec<f64>, GpuError> {
    let flat: Vec<f64> = pairs.iter().flat_map(|&(y, x)| [y, x]).collect();
    let n = pairs.len();
    let out = n * real_size(precision);
    let bytes = run_probe(
        precision,
        "atan2_probe",
        ("atan_in", "atan_out"),
        &reals_to_bytes(&flat, precision),
        out.max(4),
        n as u32,
    )?;
    Ok(bytes_to_reals(&bytes[..out], precision))
}

/// Runs the WGSL `cell_hash` (shaders/grid.wgsl) over cell coordinates with a table mask, to
/// check it against `grid::cell_hash`.
pub fn cell_hash_on_device(cells: &[[i32; 3]], mask: u32) -> Result<Vec<u32>, GpuError> {
    let flat: Vec<i32> = cells.iter().flat_map(|c| [c[0], c[1], c[2], mask as i32]).collect();
    let n = cells.len();
    let bytes = run_probe(
        Precision::F32,
        "cell_hash_probe",
        ("hash_in", "hash_out"),
        bytemuck::cast_slice(&flat),
        (4 * n).max(4),
        n as u32,
    )?;
    Ok(bytes[..4 * n].chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Runs the WGSL `finite_real` (shaders/finite_f32.wgsl, finite_f64.wgsl) over values, to
/// check it against `f64::is_finite` (f32: the values rounded to f32 first).
pub fn finite_on_device(values: &[f64], precision: Precision) -> Result<Vec<bool>, GpuError> {
    let n = values.len();
    let bytes = run_probe(
        precision,
        "finite_probe",
        ("finite_in", "finite_out"),
        &reals_to_bytes(values, precision),
        (4 * n).max(4),
        n as u32,
    )?;
    Ok(bytes[..4 * n].chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) != 0).collect())
}

/// How far a device's division, square root and a·b + c are from IEEE 754 (correctly rounded,
/// unfused), over the inputs `arithmetic_on_device` was given: the number of results that differ
/// from the CPU's and the largest difference in units in the last place (for a·b + c, over the
/// inputs whose c is not −a·b).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArithmeticReport {
    pub cases: usize,
    pub div_differ: usize,
    pub div_max_ulps: u64,
    pub sqrt_differ: usize,
    pub sqrt_max_ulps: u64,
    pub mul_add_differ: usize,
    pub mul_add_max_ulps: u64,
    /// Results of a·b + c equal to the fused (single rounding) value: all of them where the
    /// driver fuses; on an IEEE device, those where both roundings agree.
    pub mul_add_as_fused: usize,
}

impl ArithmeticReport {
    /// Every result equal to IEEE 754's: the device computes as the CPU does, operation by
    /// operation.
    pub fn ieee(&self) -> bool {
        self.div_differ == 0 && self.sqrt_differ == 0 && self.mul_add_differ == 0
    }
}

/// Runs `a / b`, `sqrt(a)` and `a * b + c` on the device over random inputs spread over many
/// binades (a seeded generator: the same inputs every call; half of them with c = −a·b) and
/// compares each result with the
/// CPU's IEEE 754 result (f32: inputs and results rounded to f32). Vulkan lets a driver round
/// f64 division and square root less precisely and fuse a·b + c; where it does, a chaotic run's
/// CPU–GPU difference grows from a larger start (docs/GPU.md, "Real GPU").
pub fn arithmetic_on_device(precision: Precision) -> Result<ArithmeticReport, GpuError> {
    let n = 4096;
    // Counter-based draws (crate::rng): draw d of the probe is a function of d alone.
    let mut d = 0u64;
    let mut next = || {
        d += 1;
        crate::rng::unit(crate::rng::splitmix64(0x5eed ^ (d << 20)))
    };
    let mut rnd = |span: f64| (next() + 0.5) * 2f64.powf((next() - 0.5) * span);
    let round = |x: f64| match precision {
        Precision::F32 => x as f32 as f64,
        Precision::F64 => x,
    };
    // Inputs rounded to the precision once. Every other c is −(a·b) rounded: unfused, a·b + c
    // is then 0; fused, it is the product's rounding error, nonzero unless the product is exact.
    // So fusing shows.
    let cases: Vec<[f64; 3]> = (0..n)
        .map(|k| {
            let (a, b) = (round(rnd(40.0)), round(rnd(40.0)));
            let c = if k % 2 == 0 { -round(a * b) } else { -round(rnd(40.0)) };
            [a, b, c]
        })
        .collect();
    let flat: Vec<f64> = cases.iter().flat_map(|c| [c[0], c[1], c[2], 0.0]).collect();
    let out = 4 * n * real_size(precision);
    let bytes = run_probe(
        precision,
        "arith_probe",
        ("arith_in", "arith_out"),
        &reals_to_bytes(&flat, precision),
        out,
        n as u32,
    )?;
    let got = bytes_to_reals(&bytes[..out], precision);
    let ulps = |a: f64, b: f64| -> u64 {
        match precision {
            Precision::F32 => ((a as f32).to_bits() as i64 - (b as f32).to_bits() as i64).unsigned_abs(),
            Precision::F64 => (a.to_bits() as i128 - b.to_bits() as i128).unsigned_abs() as u64,
        }
    };
    let mut r = ArithmeticReport { cases: n, ..Default::default() };
    for (k, &[a, b, cc]) in cases.iter().enumerate() {
        let want = match precision {
            Precision::F32 => {
                let (a, b, cc) = (a as f32, b as f32, cc as f32);
                [(a / b) as f64, a.sqrt() as f64, (a * b + cc) as f64]
            }
            Precision::F64 => [a / b, a.sqrt(), a * b + cc],
        };
        let g = &got[4 * k..4 * k + 3];
        let fused = match precision {
            Precision::F32 => (a as f32).mul_add(b as f32, cc as f32) as f64,
            Precision::F64 => a.mul_add(b, cc),
        };
        r.mul_add_as_fused += (g[2] == fused) as usize;
        for (op, (&w, &v)) in want.iter().zip(g).enumerate() {
            let u = ulps(w, v);
            let (count, max) = match op {
                0 => (&mut r.div_differ, &mut r.div_max_ulps),
                1 => (&mut r.sqrt_differ, &mut r.sqrt_max_ulps),
                _ => (&mut r.mul_add_differ, &mut r.mul_add_max_ulps),
            };
            if u != 0 {
                *count += 1;
                // a·b + c against −a·b: the unfused result is 0 and an ulp count meaningless.
                if op < 2 || k % 2 == 1 {
                    *max = (*max).max(u);
                }
            }
        }
    }
    Ok(r)
}

/// What `rupture_on_device` gives per case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RuptureResult {
    /// `rupture_measures`.
    pub measures: [f64; 4],
    /// `rupture` of the measures: the breaking channel, `None` when the bond holds.
    pub mode: Option<usize>,
    /// `rupture_bounds` with the precision's `RUPTURE_SLACK`.
    pub bounds: [f64; 4],
    /// `bond_breaks` with that slack (what the bond kernel decides).
    pub breaks: Option<usize>,
}

/// One input of `rupture_on_device`: the arguments of `rupture_measures` and `rupture`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RuptureCase {
    pub variant: crate::interactions::ShearVariant,
    pub d: DVec3,
    pub l0: f64,
    pub dhat0: DVec3,
    pub dq_i: DQuat,
    pub dq_j: DQuat,
    pub inv_thresholds: [f64; 4],
    pub scale: f64,
    pub sum: bool,
}

/// Reals `rupture_probe` writes per case (shaders/probe.wgsl).
const RUPTURE_PROBE_OUT: usize = 10;

/// Runs the WGSL `rupture_measures`, `rupture`, `rupture_bounds` and `bond_breaks`
/// (shaders/interactions.wgsl) over cases, to check them against their Rust twins and each
/// other.
pub fn rupture_on_device(cases: &[RuptureCase], precision: Precision) -> Result<Vec<RuptureResult>, GpuError> {
    use crate::interactions::ShearVariant;
    let flat: Vec<f64> = cases
        .iter()
        .flat_map(|c| {
            let variant = match c.variant {
                ShearVariant::Paper => 0.0,
                ShearVariant::Objective => 1.0,
            };
            [c.d.x, c.d.y, c.d.z, c.l0, c.dhat0.x, c.dhat0.y, c.dhat0.z, c.scale]
                .into_iter()
                .chain(c.dq_i.to_array())
                .chain(c.dq_j.to_array())
                .chain(c.inv_thresholds)
                .chain([variant, c.sum as u8 as f64, 0.0, 0.0])
        })
        .collect();
    let n = cases.len();
    let out = RUPTURE_PROBE_OUT * n * real_size(precision);
    let bytes = run_probe(
        precision,
        "rupture_probe",
        ("rupture_in", "rupture_out"),
        &reals_to_bytes(&flat, precision),
        out.max(4),
        n as u32,
    )?;
    let r = bytes_to_reals(&bytes[..out], precision);
    let mode = |v: f64| (v >= 0.0).then_some(v as usize);
    Ok(r.chunks_exact(RUPTURE_PROBE_OUT)
        .map(|c| RuptureResult {
            measures: [c[0], c[1], c[2], c[3]],
            mode: mode(c[4]),
            bounds: [c[5], c[6], c[7], c[8]],
            breaks: mode(c[9]),
        })
        .collect())
}

/// One input of `damping_on_device`: the arguments of `contact_dissipation` (and, with `xi` as
/// the bond vector, of `binder_damping`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DampingCase {
    pub n: DVec3,
    pub s: f64,
    pub f_el: f64,
    pub k_h: f64,
    pub m_star: f64,
    pub l_i: f64,
    pub l_j: f64,
    pub dv: DVec3,
    pub w_i: DVec3,
    pub w_j: DVec3,
    pub xi: DVec3,
    pub h: f64,
    pub beta: f64,
    pub mu: f64,
    pub kappa: f64,
    pub gamma: [f64; 4],
}

/// Runs the WGSL `contact_dissipation` and `binder_damping` (shaders/interactions.wgsl) over
/// cases, to check them against their Rust twins: per case the contact's loads and the binder's
/// (for d = `xi`).
pub fn damping_on_device(
    cases: &[DampingCase],
    precision: Precision,
) -> Result<Vec<(crate::interactions::ContactLoad, crate::interactions::BondDamping)>, GpuError> {
    let flat: Vec<f64> = cases
        .iter()
        .flat_map(|c| {
            let v = |a: DVec3, w: f64| [a.x, a.y, a.z, w];
            [v(c.n, c.s), [c.f_el, c.k_h, c.m_star, c.l_i], [c.l_j, c.h, c.beta, c.mu], v(c.dv, c.kappa)]
                .into_iter()
                .chain([v(c.w_i, 0.0), v(c.w_j, 0.0), v(c.xi, 0.0), c.gamma])
                .flatten()
        })
        .collect();
    let n = cases.len();
    let out = 28 * n * real_size(precision);
    let bytes = run_probe(
        precision,
        "damping_probe",
        ("damp_in", "damp_out"),
        &reals_to_bytes(&flat, precision),
        out.max(4),
        n as u32,
    )?;
    let r = bytes_to_reals(&bytes[..out], precision);
    let v = |c: &[f64], k: usize| DVec3::new(c[4 * k], c[4 * k + 1], c[4 * k + 2]);
    Ok(r.chunks_exact(28)
        .map(|c| {
            (
                crate::interactions::ContactLoad { f_i: v(c, 0), m_i: v(c, 1), m_j: v(c, 2), xi: v(c, 3) },
                crate::interactions::BondDamping { f_i: v(c, 4), m_i: v(c, 5), m_j: v(c, 6) },
            )
        })
        .collect())
}
