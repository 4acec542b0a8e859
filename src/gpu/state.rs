//! GPU-resident simulation state: the buffers (structure of arrays, vec4 lanes, in the engine's
//! real type), their bind groups for every kernel, and the recording of steps, force
//! evaluations and diagnostics reductions into a command encoder. Nothing here waits on the GPU.

use super::context::{BufferFailure, create_buffer};
use super::error::GpuError;
use super::pipeline::DemPipeline;
use super::shader::{
    NQ, SCAN_WG, STATUS_BAD_STEP, STATUS_EXACT_PARTICLE, STATUS_EXACT_STEP, STATUS_LEN, STATUS_NONE, STATUS_REBUILD, WG,
};
use crate::engine::Precision;
use crate::integrator::Integrator;
use crate::model::Model;
use std::collections::HashMap;

/// Break records read back: (midpoint xyz, energy) in f64, and (bond, step within the batch,
/// channel).
pub type BreakRecords = (Vec<[f64; 4]>, Vec<[u32; 3]>);

/// Status words at the start of the readback buffer; the diagnostics record follows.
const STATUS_BYTES: u64 = (STATUS_LEN * 4) as u64;
/// Every buffer is at least this large: no zero-size bindings, and at least one element of the
/// widest array type (BondOutGpu in f64 is 96 bytes).
const MIN_BUFFER: usize = 128;

/// Bytes of one real.
pub fn real_size(p: Precision) -> usize {
    match p {
        Precision::F32 => 4,
        Precision::F64 => 8,
    }
}

/// f64 values as the device's reals.
pub fn reals_to_bytes(v: &[f64], p: Precision) -> Vec<u8> {
    match p {
        Precision::F32 => bytemuck::cast_slice(&v.iter().map(|&x| x as f32).collect::<Vec<f32>>()).to_vec(),
        Precision::F64 => bytemuck::cast_slice(v).to_vec(),
    }
}

/// Device reals back to f64.
pub fn bytes_to_reals(b: &[u8], p: Precision) -> Vec<f64> {
    match p {
        Precision::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
        Precision::F64 => b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
    }
}

/// One level of the multi-level prefix scan.
struct ScanLevel {
    len: u32,
    blocks: Vec<wgpu::BindGroup>,
    /// Adds the scanned block totals of the level above (absent at the top level).
    add: Option<Vec<wgpu::BindGroup>>,
}

/// One `reduce_partials` level: `n_in` records in, `ceil(n_in / WG)` out.
struct ReduceLevel {
    n_in: u32,
    groups: Vec<wgpu::BindGroup>,
}

/// Buffers and bind groups of one model on one device.
pub struct DemState {
    pub precision: Precision,
    pub n: u32,
    pub n_bonds: u32,
    /// Contact-grid bucket count (power of two ≥ 2N).
    pub buckets: u32,
    /// Capacity of each Verlet neighbour list.
    pub nbr_capacity: u32,
    /// Bonds may break: the rupture buffers are real (placeholders otherwise).
    pub rupture: bool,
    /// Bytes of device memory held by the buffers (the neighbour lists' growth included).
    pub bytes: u64,
    memory_budget: Option<u64>,
    buffers: HashMap<&'static str, wgpu::Buffer>,
    bind: HashMap<&'static str, Vec<wgpu::BindGroup>>,
    scan: Vec<ScanLevel>,
    reduce_first: Vec<wgpu::BindGroup>,
    reduce: Vec<ReduceLevel>,
    /// Buffer holding the final diagnostics record.
    reduce_result: &'static str,
    /// MAP_READ buffer: status words, then the diagnostics record.
    readback: wgpu::Buffer,
}

/// Kernels bound to the main state buffers (the scan and reduction levels bind their own).
const MAIN_KERNELS: [&str; 8] =
    ["integrate_check", "integrate", "grid_count", "grid_scatter", "grid_order", "nbr_build", "bonds", "particle"];

/// Per-buffer size needs, checked against the adapter's limits before anything is allocated.
pub fn buffer_sizes(model: &Model, precision: Precision, nbr_capacity: u32) -> Vec<(&'static str, u64)> {
    let n = model.particles.len() as u64;
    let b = model.bonds.len() as u64;
    let rs = real_size(precision) as u64;
    let buckets = (2 * n.max(1)).next_power_of_two();
    let records = n.max(b).max(1).div_ceil(WG as u64);
    let mut sizes = vec![
        ("particle arrays (vec4 per particle)", 4 * rs * n),
        ("bucket table", 4 * (buckets + 1)),
        ("bond results", 12 * rs * b),
        ("bond reference attitudes", 8 * rs * b),
        ("diagnostics partial sums", NQ as u64 * rs * records),
        ("neighbour lists", 4 * nbr_capacity as u64 * n),
    ];
    if model.params.rupture.is_some() {
        sizes.push(("break records", 4 * rs * b));
        sizes.push(("break record ids", 16 * b));
    }
    sizes
}

/// Buffers of the state, listed with their sizes and contents before any is allocated, so that
/// the total is known up front: for the memory budget, and for the out-of-memory report.
#[derive(Default)]
struct Plan {
    items: Vec<(&'static str, u64, wgpu::BufferUsages, Option<Vec<u8>>)>,
}

impl Plan {
    /// Plans a buffer holding `data` (zeros when `None`) padded to at least `MIN_BUFFER` bytes;
    /// returns its index in the allocation.
    fn add(&mut self, name: &'static str, len: usize, data: Option<Vec<u8>>, usage: wgpu::BufferUsages) -> usize {
        let size = len.max(MIN_BUFFER).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT as usize) as u64;
        self.items.push((name, size, usage, data));
        self.items.len() - 1
    }

    fn total(&self) -> u64 {
        self.items.iter().map(|i| i.1).sum()
    }

    /// Allocates every planned buffer through the fallible path and uploads the contents.
    /// `budget` caps the sum of the sizes; `n` scales the "how many particles fit" estimate.
    fn allocate(
        self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        budget: Option<u64>,
        n: u64,
    ) -> Result<Vec<wgpu::Buffer>, GpuError> {
        let total = self.total();
        let fit = |available: u64| (n as u128 * available as u128 / total.max(1) as u128) as u64;
        let mut allocated = 0u64;
        let mut out = Vec::with_capacity(self.items.len());
        for (name, size, usage, data) in self.items {
            if let Some(b) = budget.filter(|&b| allocated + size > b) {
                return Err(GpuError::OutOfMemory {
                    what: name,
                    bytes: size,
                    allocated,
                    total,
                    max_particles: fit(b),
                    message: format!("the engine's memory budget is {b} bytes"),
                });
            }
            let buffer = match create_buffer(device, name, size, usage) {
                Ok(b) => b,
                Err(BufferFailure::OutOfMemory(message)) => {
                    // What was allocated before is what the device had room for (a lower bound).
                    return Err(GpuError::OutOfMemory {
                        what: name,
                        bytes: size,
                        allocated,
                        total,
                        max_particles: fit(allocated),
                        message,
                    });
                }
                Err(BufferFailure::Other(e)) => {
                    return Err(GpuError::Wgpu(format!("creating buffer `{name}` ({size} bytes): {e}")));
                }
            };
            if let Some(d) = data.filter(|d| !d.is_empty()) {
                queue.write_buffer(&buffer, 0, &d);
            }
            allocated += size;
            out.push(buffer);
        }
        Ok(out)
    }
}

/// The state arrays that `save_state` reads and `rollback` restores: everything the next step
/// depends on that is not a model constant or recomputed by a force evaluation.
pub const STATE_ARRAYS: [&str; 4] = ["pos", "vel", "quat", "omega"];
/// Their device-side copies made at the start of each `advance`, in the same order.
const BACKUP_ARRAYS: [&str; 4] = ["pos_backup", "vel_backup", "quat_backup", "omega_backup"];
/// With rupture, the broken flags are state too (one u32 per bond), with their own backup.
const BROKEN: (&str, &str) = ("bond_broken", "bond_broken_backup");

impl DemState {
    /// Allocates and fills the buffers of `model` (positions relative to `origin`) and builds
    /// the bind groups. `memory_budget` caps the bytes allocated (see `GpuOptions`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pipe: &DemPipeline,
        model: &Model,
        params_bytes: &[u8],
        walls_bytes: &[u8],
        origin: glam::DVec3,
        nbr_capacity: u32,
        memory_budget: Option<u64>,
    ) -> Result<DemState, GpuError> {
        let precision = pipe.precision;
        let rs = real_size(precision);
        let p = &model.particles;
        let n = p.len();
        let nb = model.bonds.len();
        let buckets = (2 * n.max(1)).next_power_of_two();
        let v4 = |f: &dyn Fn(usize) -> [f64; 4]| -> Vec<f64> { (0..n).flat_map(f).collect() };
        let inv = |x: f64, fixed: bool| if fixed { 0.0 } else { 1.0 / x };
        let pos = v4(&|i| {
            let x = p.x[i] - origin;
            [x.x, x.y, x.z, p.radius[i]]
        });
        let vel = v4(&|i| [p.v[i].x, p.v[i].y, p.v[i].z, 0.0]);
        let quat = v4(&|i| p.q[i].to_array());
        let omega = v4(&|i| [p.w[i].x, p.w[i].y, p.w[i].z, 0.0]);
        let inertial = v4(&|i| [p.mass[i], p.inertia[i], inv(p.mass[i], p.fixed[i]), inv(p.inertia[i], p.fixed[i])]);
        let fixed: Vec<u32> = p.fixed.iter().map(|&f| f as u32).collect();
        let bond_ends: Vec<u32> = model.bonds.iter().flat_map(|b| [b.i, b.j]).collect();
        let bond_ref: Vec<f64> = model.bonds.iter().flat_map(|b| [b.dhat0.x, b.dhat0.y, b.dhat0.z, b.l0]).collect();
        let bond_q0: Vec<f64> =
            model.bonds.iter().flat_map(|b| b.q_i0.to_array().into_iter().chain(b.q_j0.to_array())).collect();
        let (inc_offsets, inc_entries) = model.incidence();
        let mut bucket_start = vec![0u32; buckets + 1];
        bucket_start[buckets] = n as u32;
        let status = initial_status(true);
        let records = n.max(nb).max(1).div_ceil(WG as usize);

        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let uniform = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
        let r = |v: &[f64]| reals_to_bytes(v, precision);
        let u = |v: &[u32]| bytemuck::cast_slice::<u32, u8>(v).to_vec();
        let mut plan = Plan::default();
        let mut main: Vec<(&'static str, usize)> = Vec::new();
        let mut data = |plan: &mut Plan, name: &'static str, bytes: Vec<u8>, usage| {
            main.push((name, plan.add(name, bytes.len(), Some(bytes), usage)));
        };
        data(&mut plan, "params", params_bytes.to_vec(), uniform);
        data(&mut plan, "walls", walls_bytes.to_vec(), storage);
        data(&mut plan, "pos", r(&pos), storage);
        data(&mut plan, "vel", r(&vel), storage);
        data(&mut plan, "quat", r(&quat), storage);
        data(&mut plan, "omega", r(&omega), storage);
        data(&mut plan, "inertial", r(&inertial), storage);
        data(&mut plan, "fixed", u(&fixed), storage);
        data(&mut plan, "bond_ends", u(&bond_ends), storage);
        data(&mut plan, "bond_ref", r(&bond_ref), storage);
        data(&mut plan, "bond_q0", r(&bond_q0), storage);
        data(&mut plan, "inc_offsets", u(&inc_offsets), storage);
        data(&mut plan, "inc_entries", u(&inc_entries), storage);
        data(&mut plan, "bucket_start", u(&bucket_start), storage);
        data(&mut plan, "status", u(&status), storage);
        data(&mut plan, "x_ref", r(&pos), storage);
        // Rupture buffers only where bonds may break; otherwise minimal placeholders for the
        // bindings, which the kernels never read (FLAG_RUPTURE is off).
        let rupture = model.params.rupture.as_ref();
        let scales = rupture.map_or_else(Vec::new, |r| r.scales(model.bonds.iter().map(|b| (b.i, b.j))));
        data(&mut plan, "bond_scale", r(&scales), storage);
        let nr = if rupture.is_some() { nb } else { 0 };
        let v4_bytes = 4 * rs * n;
        for (name, len) in [
            ("force", v4_bytes),
            ("moment", v4_bytes),
            ("pot", v4_bytes),
            ("bond_out", 12 * rs * nb),
            ("cell", 16 * n),
            ("hash", 4 * n),
            ("slot", 4 * n),
            ("sorted_tmp", 4 * n),
            ("sorted_cell", 16 * n),
            ("sorted_pos", v4_bytes),
            ("step_next", 16),
            ("zeros", 16),
            ("nbr", 4 * nbr_capacity as usize * n),
            ("nbr_count", 4 * n),
            ("red_a", NQ * rs * records),
            ("red_b", NQ * rs * records.div_ceil(WG as usize)),
            ("pos_backup", v4_bytes),
            ("vel_backup", v4_bytes),
            ("quat_backup", v4_bytes),
            ("omega_backup", v4_bytes),
            ("bond_broken", 4 * nr),
            ("bond_broken_backup", 4 * nr),
            ("break_at", 4 * rs * nr),
            ("break_id", 16 * nr),
        ] {
            main.push((name, plan.add(name, len, None, storage)));
        }

        // Scan levels: lengths M, ⌈M/B⌉, … down to one block (B = 2·SCAN_WG values per block).
        let block = 2 * SCAN_WG as usize;
        let mut lens = vec![buckets];
        while *lens.last().unwrap_or(&1) > block {
            let l = lens.last().copied().unwrap_or(1).div_ceil(block);
            lens.push(l);
        }
        let aux: Vec<usize> = lens.iter().skip(1).map(|&len| plan.add("scan_aux", 4 * len, None, storage)).collect();
        let scan_dummy = plan.add("scan_top_sum", 16, None, storage);
        let scan_len: Vec<usize> = lens
            .iter()
            .map(|&len| {
                let bytes = u(&[len as u32, 0, 0, 0]);
                plan.add("scan_len", bytes.len(), Some(bytes), uniform)
            })
            .collect();
        // Reductions: level 0 writes `records` partial records into red_a; each further level
        // reduces WG records into one, ping-ponging between red_a and red_b.
        let red_len0 = {
            let bytes = u(&[records as u32, 0, 0, 0]);
            plan.add("red_len", bytes.len(), Some(bytes), uniform)
        };
        let mut red_levels = Vec::new();
        let mut count = records;
        while count > 1 {
            let n_out = count.div_ceil(WG as usize);
            let bytes = u(&[n_out as u32, count as u32, 0, 0]);
            red_levels.push((count, plan.add("red_len", bytes.len(), Some(bytes), uniform)));
            count = n_out;
        }
        let readback_at = plan.add(
            "readback",
            STATUS_BYTES as usize + NQ * rs,
            None,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let bytes = plan.total();

        let mut all: Vec<Option<wgpu::Buffer>> =
            plan.allocate(device, queue, memory_budget, n as u64)?.into_iter().map(Some).collect();
        let mut take = |k: usize| all[k].take().ok_or_else(|| GpuError::Wgpu("buffer planned twice".into()));
        let mut buffers: HashMap<&'static str, wgpu::Buffer> = HashMap::new();
        for (name, k) in main {
            buffers.insert(name, take(k)?);
        }
        let aux: Vec<wgpu::Buffer> = aux.into_iter().map(&mut take).collect::<Result<_, _>>()?;
        let scan_dummy = take(scan_dummy)?;
        let scan_len: Vec<wgpu::Buffer> = scan_len.into_iter().map(&mut take).collect::<Result<_, _>>()?;
        let red_len0 = take(red_len0)?;
        let red_levels: Vec<(usize, wgpu::Buffer)> =
            red_levels.into_iter().map(|(c, k)| Ok((c, take(k)?))).collect::<Result<_, GpuError>>()?;
        let readback = take(readback_at)?;

        let mut scan = Vec::new();
        for (l, &len) in lens.iter().enumerate() {
            let data = if l == 0 { &buffers["bucket_start"] } else { &aux[l - 1] };
            let sums = if l + 1 < lens.len() { &aux[l] } else { &scan_dummy };
            let lookup = |name: &str| match name {
                "scan_len" => Some(scan_len[l].as_entire_binding()),
                "scan_data" => Some(data.as_entire_binding()),
                "scan_sums" => Some(sums.as_entire_binding()),
                "status" => Some(buffers["status"].as_entire_binding()),
                _ => None,
            };
            let blocks = pipe.bind(device, "scan_blocks", &lookup)?;
            let add = if l + 1 < lens.len() { Some(pipe.bind(device, "scan_add", &lookup)?) } else { None };
            scan.push(ScanLevel { len: len as u32, blocks, add });
        }

        let lookup_main = |name: &str| {
            let key = if name == "bucket_count" { "bucket_start" } else { name };
            buffers.get(key).map(|b| b.as_entire_binding())
        };
        let mut bind = HashMap::new();
        for k in MAIN_KERNELS {
            bind.insert(k, pipe.bind(device, k, &lookup_main)?);
        }
        let reduce_first = pipe.bind(device, "reduce_state", &|name: &str| match name {
            "red_len" => Some(red_len0.as_entire_binding()),
            "red_out" => Some(buffers["red_a"].as_entire_binding()),
            other => lookup_main(other),
        })?;
        let mut reduce = Vec::new();
        let (mut cur, mut other) = ("red_a", "red_b");
        for (count, len_buf) in &red_levels {
            let groups = pipe.bind(device, "reduce_partials", &|name: &str| match name {
                "red_len" => Some(len_buf.as_entire_binding()),
                "red_in" => Some(buffers[cur].as_entire_binding()),
                "red_out" => Some(buffers[other].as_entire_binding()),
                _ => None,
            })?;
            reduce.push(ReduceLevel { n_in: *count as u32, groups });
            std::mem::swap(&mut cur, &mut other);
        }
        Ok(DemState {
            precision,
            n: n as u32,
            n_bonds: nb as u32,
            buckets: buckets as u32,
            nbr_capacity,
            rupture: rupture.is_some(),
            bytes,
            memory_budget,
            buffers,
            bind,
            scan,
            reduce_first,
            reduce,
            reduce_result: cur,
            readback,
        })
    }

    pub fn buffer(&self, name: &str) -> &wgpu::Buffer {
        &self.buffers[name]
    }

    /// Gives the neighbour lists a new capacity (after an overflow): a new list buffer and the
    /// bind groups of the kernels that use it; the caller forces a rebuild next. Growing is an
    /// optimisation only (an overflowing list falls back to the grid, with the same result), so
    /// a new buffer that would exceed the memory budget or that the device has no room for
    /// leaves the capacity as it is: returns whether it grew.
    pub fn set_nbr_capacity(&mut self, device: &wgpu::Device, pipe: &DemPipeline, cap: u32) -> Result<bool, GpuError> {
        let old = self.buffers["nbr"].size();
        let bytes = (4 * cap as usize * self.n as usize).max(MIN_BUFFER) as u64;
        if self.memory_budget.is_some_and(|b| self.bytes - old + bytes > b) {
            return Ok(false);
        }
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let buffer = match create_buffer(device, "nbr", bytes, usage) {
            Ok(b) => b,
            Err(BufferFailure::OutOfMemory(_)) => return Ok(false),
            Err(BufferFailure::Other(e)) => {
                return Err(GpuError::Wgpu(format!("creating buffer `nbr` ({bytes} bytes): {e}")));
            }
        };
        self.buffers.insert("nbr", buffer);
        self.bytes = self.bytes - old + bytes;
        self.nbr_capacity = cap;
        let buffers = &self.buffers;
        let lookup = |name: &str| {
            let key = if name == "bucket_count" { "bucket_start" } else { name };
            buffers.get(key).map(|b| b.as_entire_binding())
        };
        let mut bind = HashMap::new();
        for k in MAIN_KERNELS {
            bind.insert(k, pipe.bind(device, k, &lookup)?);
        }
        self.bind = bind;
        Ok(true)
    }

    /// Records the device-side copy of the state arrays that `rollback` returns to (no host
    /// wait: it runs in order before the steps recorded after it).
    pub fn record_backup(&self, encoder: &mut wgpu::CommandEncoder) {
        for (a, b) in self.backed_up() {
            encoder.copy_buffer_to_buffer(&self.buffers[a], 0, &self.buffers[b], 0, self.buffers[a].size());
        }
    }

    /// Records the copy of the backup back into the state arrays.
    pub fn record_restore(&self, encoder: &mut wgpu::CommandEncoder) {
        for (a, b) in self.backed_up() {
            encoder.copy_buffer_to_buffer(&self.buffers[b], 0, &self.buffers[a], 0, self.buffers[a].size());
        }
    }

    /// (state buffer, backup buffer) pairs: the state arrays, and the broken flags with rupture.
    fn backed_up(&self) -> impl Iterator<Item = (&'static str, &'static str)> {
        let broken = self.rupture.then_some(BROKEN);
        STATE_ARRAYS.into_iter().zip(BACKUP_ARRAYS).chain(broken)
    }

    /// Resets the status words and the step counter before a batch (queued before the next
    /// submit); `rebuild` makes its first step rebuild the grid and the neighbour lists.
    pub fn reset_status(&self, queue: &wgpu::Queue, rebuild: bool) {
        let status = initial_status(rebuild);
        queue.write_buffer(&self.buffers["status"], 0, bytemuck::cast_slice(&status));
        queue.write_buffer(&self.buffers["step_next"], 0, bytemuck::cast_slice(&[0u32; 4]));
    }

    /// Clears the bucket counts, publishes the step counter and (except at the first step of a
    /// batch, whose flag the host sets) clears the rebuild flag, which `integrate` then raises
    /// where needed. Must be outside a compute pass.
    fn record_step_prologue(&self, encoder: &mut wgpu::CommandEncoder, first: bool) {
        encoder.clear_buffer(&self.buffers["bucket_start"], 0, Some(4 * self.buckets as u64));
        encoder.copy_buffer_to_buffer(&self.buffers["step_next"], 0, &self.buffers["status"], 0, 4);
        if !first {
            let at = 4 * STATUS_REBUILD as u64;
            encoder.copy_buffer_to_buffer(&self.buffers["zeros"], 0, &self.buffers["status"], at, 4);
        }
    }

    /// Force evaluation at the current positions: grid, bonds, then the particle kernel (which
    /// also applies the closing kick inside a batch).
    fn record_evaluate(&self, pipe: &DemPipeline, pass: &mut wgpu::ComputePass<'_>) {
        let n = self.n;
        pipe.dispatch(pass, "grid_count", &self.bind["grid_count"], n, WG);
        for level in &self.scan {
            pipe.dispatch(pass, "scan_blocks", &level.blocks, level.len, 2 * SCAN_WG);
        }
        for level in self.scan.iter().rev() {
            if let Some(add) = &level.add {
                pipe.dispatch(pass, "scan_add", add, level.len, SCAN_WG);
            }
        }
        pipe.dispatch(pass, "grid_scatter", &self.bind["grid_scatter"], n, WG);
        pipe.dispatch(pass, "grid_order", &self.bind["grid_order"], n, WG);
        pipe.dispatch(pass, "nbr_build", &self.bind["nbr_build"], n, WG);
        pipe.dispatch(pass, "bonds", &self.bind["bonds"], self.n_bonds, WG);
        pipe.dispatch(pass, "particle", &self.bind["particle"], n, WG);
    }

    /// The initial force evaluation (params.batch_len = 0: no kicks).
    pub fn record_initial(&self, pipe: &DemPipeline, encoder: &mut wgpu::CommandEncoder) {
        self.record_step_prologue(encoder, true);
        let mut pass = encoder
            .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("evaluate"), timestamp_writes: None });
        self.record_evaluate(pipe, &mut pass);
    }

    /// One full step: (rrp-exact check), opening kick + drift + rotation, force evaluation and
    /// closing kick.
    pub fn record_step(
        &self,
        pipe: &DemPipeline,
        encoder: &mut wgpu::CommandEncoder,
        integrator: Integrator,
        first: bool,
    ) {
        self.record_step_prologue(encoder, first);
        let mut pass =
            encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("step"), timestamp_writes: None });
        if integrator == Integrator::RrpExact {
            pipe.dispatch(&mut pass, "integrate_check", &self.bind["integrate_check"], self.n, WG);
        }
        pipe.dispatch(&mut pass, "integrate", &self.bind["integrate"], self.n, WG);
        self.record_evaluate(pipe, &mut pass);
    }

    /// Diagnostics reduction and the copy of status + diagnostics into the readback buffer.
    pub fn record_readback(&self, pipe: &DemPipeline, encoder: &mut wgpu::CommandEncoder) {
        {
            let mut pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("reduce"), timestamp_writes: None });
            pipe.dispatch(&mut pass, "reduce_state", &self.reduce_first, self.n.max(self.n_bonds).max(1), WG);
            for level in &self.reduce {
                pipe.dispatch(&mut pass, "reduce_partials", &level.groups, level.n_in, WG);
            }
        }
        let rs = real_size(self.precision) as u64;
        encoder.copy_buffer_to_buffer(&self.buffers["status"], 0, &self.readback, 0, STATUS_BYTES);
        encoder.copy_buffer_to_buffer(
            &self.buffers[self.reduce_result],
            0,
            &self.readback,
            STATUS_BYTES,
            NQ as u64 * rs,
        );
    }

    /// Maps the readback buffer (after the submission that filled it): status words and the
    /// diagnostics record in f64.
    pub fn read_status(&self, device: &wgpu::Device) -> Result<([u32; STATUS_LEN], Vec<f64>), GpuError> {
        let bytes = map_read(device, &self.readback)?;
        let mut status = [0u32; STATUS_LEN];
        for (k, s) in status.iter_mut().enumerate() {
            *s = u32::from_le_bytes([bytes[4 * k], bytes[4 * k + 1], bytes[4 * k + 2], bytes[4 * k + 3]]);
        }
        Ok((status, bytes_to_reals(&bytes[STATUS_BYTES as usize..], self.precision)))
    }

    /// Bytes of one per-particle vec4 array.
    pub fn array_bytes(&self) -> usize {
        4 * real_size(self.precision) * self.n as usize
    }

    /// Copies whole per-particle vec4 arrays back, raw (the device's reals, little-endian).
    pub fn read_arrays_raw(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        names: &[&str],
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        let len = self.array_bytes() as u64;
        let parts: Vec<(&str, u64)> = names.iter().map(|&name| (name, len)).collect();
        self.read_buffers_raw(device, queue, &parts)
    }

    /// `read_arrays_raw` as f64 (for snapshots and error reports).
    pub fn read_arrays(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        names: &[&str],
    ) -> Result<Vec<Vec<f64>>, GpuError> {
        let raw = self.read_arrays_raw(device, queue, names)?;
        Ok(raw.iter().map(|b| bytes_to_reals(b, self.precision)).collect())
    }

    /// Copies the first `len` bytes of each named buffer back, raw, with one host wait.
    fn read_buffers_raw(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        parts: &[(&str, u64)],
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        let size: u64 = parts.iter().map(|p| p.1).sum();
        if size == 0 {
            return Ok(parts.iter().map(|_| Vec::new()).collect());
        }
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let staging = create_buffer(device, "readback", size, usage)
            .map_err(|e| GpuError::Readback(format!("cannot allocate {size} bytes of staging memory: {e:?}")))?;
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
        let mut at = 0;
        for &(name, len) in parts {
            encoder.copy_buffer_to_buffer(&self.buffers[name], 0, &staging, at, len);
            at += len;
        }
        queue.submit([encoder.finish()]);
        let bytes = map_read(device, &staging)?;
        let mut out = Vec::with_capacity(parts.len());
        let mut at = 0;
        for &(_, len) in parts {
            out.push(bytes[at..at + len as usize].to_vec());
            at += len as usize;
        }
        Ok(out)
    }

    /// The first `count` break records of the batch just finished (a host wait, made only when
    /// the status words say some bond broke): per record the midpoint (relative to the position
    /// origin) and energy as f64, and (bond, step within the batch, channel).
    pub fn read_breaks(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        count: u32,
    ) -> Result<BreakRecords, GpuError> {
        let count = count.min(self.n_bonds) as u64;
        let rs = real_size(self.precision) as u64;
        let raw = self.read_buffers_raw(device, queue, &[("break_at", 4 * rs * count), ("break_id", 16 * count)])?;
        let at = bytes_to_reals(&raw[0], self.precision).chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect();
        let ids =
            bytemuck::pod_collect_to_vec::<u8, u32>(&raw[1]).chunks_exact(4).map(|c| [c[0], c[1], c[2]]).collect();
        Ok((at, ids))
    }

    /// The broken flags, raw (one little-endian u32 per bond; empty without rupture).
    pub fn read_broken_raw(&self, device: &wgpu::Device, queue: &wgpu::Queue) -> Result<Vec<u8>, GpuError> {
        if !self.rupture {
            return Ok(Vec::new());
        }
        let len = 4 * self.n_bonds as u64;
        Ok(self.read_buffers_raw(device, queue, &[(BROKEN.0, len)])?.swap_remove(0))
    }

    /// Overwrites the broken flags with raw bytes of `4·n_bonds` length (queued before the
    /// next submit).
    pub fn write_broken_raw(&self, queue: &wgpu::Queue, bytes: &[u8]) {
        debug_assert_eq!(bytes.len(), 4 * self.n_bonds as usize);
        if self.rupture && !bytes.is_empty() {
            queue.write_buffer(&self.buffers[BROKEN.0], 0, bytes);
        }
    }

    /// Overwrites a per-particle vec4 array with raw bytes of `array_bytes()` length (queued
    /// before the next submit).
    pub fn write_array_raw(&self, queue: &wgpu::Queue, name: &str, bytes: &[u8]) {
        debug_assert_eq!(bytes.len(), self.array_bytes());
        if !bytes.is_empty() {
            queue.write_buffer(&self.buffers[name], 0, bytes);
        }
    }
}

/// Status words at the start of a batch: no failure yet, step 0, rebuild flag as asked.
fn initial_status(rebuild: bool) -> [u32; STATUS_LEN] {
    let mut status = [0u32; STATUS_LEN];
    use super::shader::{STATUS_BAD_PARTICLE, STATUS_GRID_PARTICLE, STATUS_GRID_STEP};
    for slot in [
        STATUS_EXACT_STEP,
        STATUS_EXACT_PARTICLE,
        STATUS_BAD_STEP,
        STATUS_BAD_PARTICLE,
        STATUS_GRID_STEP,
        STATUS_GRID_PARTICLE,
    ] {
        status[slot] = STATUS_NONE;
    }
    status[STATUS_REBUILD] = rebuild as u32;
    status
}

/// Maps a MAP_READ buffer, waits, copies its bytes out and unmaps it.
pub fn map_read(device: &wgpu::Device, buffer: &wgpu::Buffer) -> Result<Vec<u8>, GpuError> {
    let (tx, rx) = std::sync::mpsc::channel();
    buffer.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| GpuError::Readback(e.to_string()))?;
    rx.recv().map_err(|e| GpuError::Readback(e.to_string()))?.map_err(|e| GpuError::Readback(e.to_string()))?;
    let bytes = buffer.get_mapped_range(..).map_err(|e| GpuError::Readback(e.to_string()))?.to_vec();
    buffer.unmap();
    Ok(bytes)
}
