//! The bind groups of a state: for the kernels over the main buffers, for every scan and
//! reduction level, for every chunk of the chunked kernels (windows of the paged arrays), and
//! for `grid_args_set` with the grid stage's indirect arguments.
//!
//! **Two-part bindings**: where one binding cannot hold a per-particle vec4 array
//! (`shader::PARTED`), the kernels are compiled for two parts (`shader::Parts::Two`) and every
//! such array is bound twice from its one buffer: its first `part_len` particles as `<name>`, the
//! rest as `<name>_hi`, read through accessors that pick the part. The particle kernel binds its
//! own particle's arrays (`shader::PARTICLE_OWN`) as the one part its chunk lies in (the planner
//! keeps particle chunks within one part, `ChunkGpu::part_win`), which keeps it within the
//! storage bindings a stage may have. Placeholders smaller than a part are bound whole.

use super::super::chunks::{ChunkGpu, ChunkPlan};
use super::super::context::create_buffer;
use super::super::error::GpuError;
use super::super::pipeline::DemPipeline;
use super::super::shader::{PARTICLE_OWN, parted_elem};
use super::DemState;
use super::chunked::window_of;
use super::record::{Dispatch, grid_arguments};
use crate::engine::Precision;
use std::collections::HashMap;

/// One level of the multi-level prefix scan.
pub(super) struct ScanLevel {
    pub blocks: Vec<wgpu::BindGroup>,
    /// Adds the scanned block totals of the level above (absent at the top level).
    pub add: Option<Vec<wgpu::BindGroup>>,
}

/// One reduction level: `n_groups` workgroups, each summing what its chunk-table entry says.
pub(super) struct ReduceLevel {
    pub n_groups: u32,
    pub groups: Vec<wgpu::BindGroup>,
}

/// The first reduction level (`reduce_state`), dispatched in chunks (`chunk_bind`).
pub(super) struct ReduceFirst {
    pub n_groups: u32,
    pub red_len: wgpu::Buffer,
}

/// Kernels bound to the main state buffers (the scan and reduction levels bind their own).
const MAIN_KERNELS: [&str; 8] = [
    "integrate_check",
    "drift_anchor",
    "integrate",
    "rebuild_decide",
    "grid_clear",
    "grid_count",
    "grid_scatter",
    "grid_order",
];

/// Kernels dispatched in chunks (`gpu::chunks`), each chunk with bind groups of its own.
const CHUNKED_KERNELS: [&str; 6] = ["particle", "dissipate", "nbr_build", "bonds", "halo_copy", "reduce_state"];

/// The binding of the state buffer that WGSL variable `name` is bound to, outside the chunk
/// windows: a whole buffer, or, for a `shader::PARTED` array bound in two parts of `part_len`
/// and `n − part_len` particles, its first part (`name`; `part` 1 for the second, as the
/// particle kernel binds `PARTICLE_OWN` for a chunk in the second part) or its second
/// (`<name>_hi`). Placeholders (smaller than a part) are bound whole.
pub(super) fn state_binding<'a>(
    buffers: &'a HashMap<&'static str, wgpu::Buffer>,
    name: &str,
    precision: Precision,
    parts: Option<(u64, u64)>,
    part: usize,
) -> Option<wgpu::BindingResource<'a>> {
    let (base, hi) = match name.strip_suffix("_hi") {
        Some(b) if parted_elem(b, precision).is_some() => (b, true),
        _ => (name, false),
    };
    let buffer = buffers.get(if base == "bucket_count" { "bucket_start" } else { base })?;
    let (Some(elem), Some((part_len, n))) = (parted_elem(base, precision), parts) else {
        return Some(buffer.as_entire_binding());
    };
    let first = part_len * elem;
    if buffer.size() <= first {
        return Some(buffer.as_entire_binding());
    }
    let (offset, size) = if hi || part == 1 { (first, (n - part_len) * elem) } else { (0, first) };
    Some(wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer, offset, size: std::num::NonZeroU64::new(size) }))
}

/// The bind groups of every scan level: level 0 scans the bucket table, level l > 0 the block
/// totals of level l − 1 (`aux[l − 1]`); each but the top writes its block totals to `aux[l]`
/// and adds the scanned totals back (`scan_add`), the top one writes them to `top`.
pub(super) fn scan_levels(
    device: &wgpu::Device,
    pipe: &DemPipeline,
    buffers: &HashMap<&'static str, wgpu::Buffer>,
    aux: &[wgpu::Buffer],
    top: &wgpu::Buffer,
    scan_len: &[wgpu::Buffer],
) -> Result<Vec<ScanLevel>, GpuError> {
    let levels = scan_len.len();
    let mut scan = Vec::with_capacity(levels);
    for l in 0..levels {
        let data = if l == 0 { &buffers["bucket_start"] } else { &aux[l - 1] };
        let sums = if l + 1 < levels { &aux[l] } else { top };
        let lookup = |name: &str| match name {
            "scan_len" => Some(scan_len[l].as_entire_binding()),
            "scan_data" => Some(data.as_entire_binding()),
            "scan_sums" => Some(sums.as_entire_binding()),
            "status" => Some(buffers["status"].as_entire_binding()),
            _ => None,
        };
        let blocks = pipe.bind(device, "scan_blocks", &lookup)?;
        let add = if l + 1 < levels { Some(pipe.bind(device, "scan_add", &lookup)?) } else { None };
        scan.push(ScanLevel { blocks, add });
    }
    Ok(scan)
}

/// The bind groups of the kernels over the main buffers (`MAIN_KERNELS`).
pub(super) fn main_groups(
    device: &wgpu::Device,
    pipe: &DemPipeline,
    buffers: &HashMap<&'static str, wgpu::Buffer>,
    precision: Precision,
    parts: Option<(u64, u64)>,
) -> Result<HashMap<&'static str, Vec<wgpu::BindGroup>>, GpuError> {
    let lookup_main = |name: &str| state_binding(buffers, name, precision, parts, 0);
    let mut bind = HashMap::new();
    for k in MAIN_KERNELS {
        bind.insert(k, pipe.bind(device, k, &lookup_main)?);
    }
    Ok(bind)
}

/// The reduction levels (one per entry of `red_len`: its workgroups and uniform): the first
/// (`reduce_state`, bound per chunk later) and the bind groups of every further one, which
/// ping-pong between `red_a` and `red_b`; with the buffer that holds the final records.
pub(super) fn reduce_levels(
    device: &wgpu::Device,
    pipe: &DemPipeline,
    buffers: &HashMap<&'static str, wgpu::Buffer>,
    red_len: Vec<(usize, wgpu::Buffer)>,
) -> Result<(ReduceFirst, Vec<ReduceLevel>, &'static str), GpuError> {
    let mut red_len = red_len.into_iter();
    let (len0, len0_buf) = red_len.next().ok_or_else(|| GpuError::Wgpu("no reduction level".into()))?;
    let first = ReduceFirst { n_groups: len0 as u32, red_len: len0_buf };
    let mut reduce = Vec::new();
    let (mut cur, mut other) = ("red_a", "red_b");
    for (count, len_buf) in &red_len.collect::<Vec<_>>() {
        let groups = pipe.bind(device, "reduce_partials", &|name: &str| match name {
            "red_len" => Some(len_buf.as_entire_binding()),
            "red_in" => Some(buffers[cur].as_entire_binding()),
            "red_out" => Some(buffers[other].as_entire_binding()),
            "red_table" => Some(buffers["red_table"].as_entire_binding()),
            _ => None,
        })?;
        reduce.push(ReduceLevel { n_groups: *count as u32, groups });
        std::mem::swap(&mut cur, &mut other);
    }
    Ok((first, reduce, cur))
}

impl DemState {
    /// The bind groups of every chunk of the chunked kernels, chunk by chunk: each with its
    /// `ChunkGpu` uniform, the windows of the paged arrays (in the page of the window's start:
    /// the page rule, checked by `replan`) and the other buffers as `state_binding` binds them.
    pub(super) fn bind_chunks(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pipe: &DemPipeline,
        plan: &ChunkPlan,
    ) -> Result<HashMap<&'static str, Vec<Vec<wgpu::BindGroup>>>, GpuError> {
        let uniform = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
        let mut chunk_bind: HashMap<&'static str, Vec<Vec<wgpu::BindGroup>>> = HashMap::new();
        for kernel in CHUNKED_KERNELS.into_iter().filter(|k| pipe.has(k)) {
            let chunks = match kernel {
                "bonds" | "halo_copy" => &plan.bonds,
                "reduce_state" => &plan.reduce,
                _ => &plan.particles,
            };
            let mut groups = Vec::with_capacity(chunks.len());
            for c in chunks {
                let u = create_buffer(device, "chunk", std::mem::size_of::<ChunkGpu>() as u64, uniform)
                    .map_err(|e| GpuError::Wgpu(format!("creating a chunk uniform: {e:?}")))?;
                queue.write_buffer(&u, 0, bytemuck::bytes_of(&c.gpu));
                let window = |name: &str| -> Option<wgpu::BindingResource<'_>> {
                    if let Some(p) = self.paged.get(name) {
                        let range = window_of(c, name);
                        // The planner keeps each window in the page of its start (checked above).
                        if range.end <= range.start || p.pages.len == 0 {
                            // A placeholder, or a chunk with nothing in this window: never read.
                            return Some(p.buffers[0].as_entire_binding());
                        }
                        let k = p.pages.page_of(range.start);
                        let buffer = p.buffers.get(k)?;
                        let base = p.pages.range(k).start;
                        let (offset, size) = ((range.start - base) * p.elem, (range.end - range.start) * p.elem);
                        return Some(wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer,
                            offset,
                            size: std::num::NonZeroU64::new(size),
                        }));
                    }
                    // The particle kernel's own particle's values: the part holding the chunk.
                    let own = kernel == "particle" && PARTICLE_OWN.contains(&name);
                    let part = usize::from(own && c.gpu.part_win > 0);
                    state_binding(&self.buffers, name, self.precision, self.parts, part)
                };
                let lookup = |name: &str| match name {
                    "chunk" => Some(u.as_entire_binding()),
                    "red_len" => Some(self.reduce_first.red_len.as_entire_binding()),
                    "red_out" => Some(self.buffers["red_a"].as_entire_binding()),
                    other => window(other),
                };
                groups.push(pipe.bind(device, kernel, &lookup)?);
            }
            chunk_bind.insert(kernel, groups);
        }
        Ok(chunk_bind)
    }

    /// The grid stage's indirect arguments for the dispatch list `steps`: `grid_full` holds the
    /// workgroup counts of its indirect dispatches at full size (`record::grid_arguments`),
    /// `grid_args` this step's, which `grid_args_set` (bound here) copies from `grid_full` in
    /// steps that rebuild and zeroes otherwise. Returns (grid_full, grid_args, its bind groups).
    #[allow(clippy::type_complexity)]
    pub(super) fn bind_grid_args(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pipe: &DemPipeline,
        steps: &[Dispatch],
    ) -> Result<(wgpu::Buffer, wgpu::Buffer, Vec<wgpu::BindGroup>), GpuError> {
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let full = grid_arguments(steps, pipe);
        let bytes = 4 * full.len() as u64;
        let make = |name: &str, usage| {
            create_buffer(device, name, bytes, usage).map_err(|e| GpuError::Wgpu(format!("creating `{name}`: {e:?}")))
        };
        let grid_full = make("grid_full", storage)?;
        let grid_args = make("grid_args", storage | wgpu::BufferUsages::INDIRECT)?;
        queue.write_buffer(&grid_full, 0, bytemuck::cast_slice(&full));
        let set = pipe.bind(device, "grid_args_set", &|name: &str| match name {
            "grid_full" => Some(grid_full.as_entire_binding()),
            "grid_args" => Some(grid_args.as_entire_binding()),
            other => state_binding(&self.buffers, other, self.precision, self.parts, 0),
        })?;
        Ok((grid_full, grid_args, set))
    }
}
