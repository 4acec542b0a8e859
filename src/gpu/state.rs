//! GPU-resident simulation state: the buffers (structure of arrays, vec4 lanes, in the engine's
//! real type), their bind groups for every kernel, and the recording of steps, force
//! evaluations and diagnostics reductions into a command encoder. Nothing here waits on the GPU.

use super::error::GpuError;
use super::pipeline::DemPipeline;
use super::shader::{
    NQ, SCAN_WG, STATUS_BAD_STEP, STATUS_EXACT_PARTICLE, STATUS_EXACT_STEP, STATUS_LEN, STATUS_NONE, STATUS_REBUILD, WG,
};
use crate::engine::Precision;
use crate::integrator::Integrator;
use crate::model::Model;
use std::collections::HashMap;
use wgpu::util::DeviceExt;

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
    vec![
        ("particle arrays (vec4 per particle)", 4 * rs * n),
        ("bucket table", 4 * (buckets + 1)),
        ("bond results", 12 * rs * b),
        ("bond reference attitudes", 8 * rs * b),
        ("diagnostics partial sums", NQ as u64 * rs * records),
        ("neighbour lists", 4 * nbr_capacity as u64 * n),
    ]
}

impl DemState {
    pub fn new(
        device: &wgpu::Device,
        pipe: &DemPipeline,
        model: &Model,
        params_bytes: &[u8],
        walls_bytes: &[u8],
        origin: glam::DVec3,
        nbr_capacity: u32,
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
        let zeros = vec![0.0; 4 * n];
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
        let make = |name: &'static str, bytes: &[u8], usage: wgpu::BufferUsages| -> wgpu::Buffer {
            let mut data = bytes.to_vec();
            if data.len() < MIN_BUFFER {
                data.resize(MIN_BUFFER, 0);
            }
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(name), contents: &data, usage })
        };
        let empty = |name: &'static str, bytes: usize| make(name, &vec![0u8; bytes], storage);
        let r = |v: &[f64]| reals_to_bytes(v, precision);
        let u = |v: &[u32]| bytemuck::cast_slice::<u32, u8>(v).to_vec();
        let mut buffers: HashMap<&'static str, wgpu::Buffer> = HashMap::new();
        let uniform = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
        buffers.insert("params", make("params", params_bytes, uniform));
        buffers.insert("walls", make("walls", walls_bytes, storage));
        buffers.insert("pos", make("pos", &r(&pos), storage));
        buffers.insert("vel", make("vel", &r(&vel), storage));
        buffers.insert("quat", make("quat", &r(&quat), storage));
        buffers.insert("omega", make("omega", &r(&omega), storage));
        buffers.insert("inertial", make("inertial", &r(&inertial), storage));
        buffers.insert("fixed", make("fixed", &u(&fixed), storage));
        buffers.insert("force", make("force", &r(&zeros), storage));
        buffers.insert("moment", make("moment", &r(&zeros), storage));
        buffers.insert("pot", make("pot", &r(&zeros), storage));
        buffers.insert("bond_ends", make("bond_ends", &u(&bond_ends), storage));
        buffers.insert("bond_ref", make("bond_ref", &r(&bond_ref), storage));
        buffers.insert("bond_q0", make("bond_q0", &r(&bond_q0), storage));
        buffers.insert("bond_out", empty("bond_out", 12 * rs * nb));
        buffers.insert("inc_offsets", make("inc_offsets", &u(&inc_offsets), storage));
        buffers.insert("inc_entries", make("inc_entries", &u(&inc_entries), storage));
        buffers.insert("cell", empty("cell", 16 * n));
        buffers.insert("hash", empty("hash", 4 * n));
        buffers.insert("slot", empty("slot", 4 * n));
        buffers.insert("bucket_start", make("bucket_start", &u(&bucket_start), storage));
        buffers.insert("sorted_tmp", empty("sorted_tmp", 4 * n));
        buffers.insert("sorted_cell", empty("sorted_cell", 16 * n));
        buffers.insert("sorted_pos", empty("sorted_pos", 4 * rs * n));
        buffers.insert("status", make("status", &u(&status), storage));
        buffers.insert("step_next", empty("step_next", 16));
        buffers.insert("zeros", empty("zeros", 16));
        buffers.insert("nbr", empty("nbr", 4 * nbr_capacity as usize * n));
        buffers.insert("nbr_count", empty("nbr_count", 4 * n));
        buffers.insert("x_ref", make("x_ref", &r(&pos), storage));
        buffers.insert("red_a", empty("red_a", NQ * rs * records));
        buffers.insert("red_b", empty("red_b", NQ * rs * records.div_ceil(WG as usize)));

        // Scan levels: lengths M, ⌈M/B⌉, … down to one block (B = 2·SCAN_WG values per block).
        let block = 2 * SCAN_WG as usize;
        let mut lens = vec![buckets];
        while *lens.last().unwrap_or(&1) > block {
            let l = lens.last().copied().unwrap_or(1).div_ceil(block);
            lens.push(l);
        }
        let mut aux: Vec<wgpu::Buffer> = Vec::new();
        for (l, &len) in lens.iter().enumerate().skip(1) {
            aux.push(empty(["scan_aux1", "scan_aux2", "scan_aux3", "scan_aux4", "scan_aux5"][(l - 1).min(4)], 4 * len));
        }
        let scan_dummy = empty("scan_top_sum", 16);
        let mut scan = Vec::new();
        for (l, &len) in lens.iter().enumerate() {
            let len_buf = make("scan_len", &u(&[len as u32, 0, 0, 0]), uniform);
            let data = if l == 0 { &buffers["bucket_start"] } else { &aux[l - 1] };
            let sums = if l + 1 < lens.len() { &aux[l] } else { &scan_dummy };
            let lookup = |name: &str| match name {
                "scan_len" => Some(len_buf.as_entire_binding()),
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
        // Reductions: level 0 writes `records` partial records into red_a; each further level
        // reduces WG records into one, ping-ponging between red_a and red_b.
        let red_len0 = make("red_len", &u(&[records as u32, 0, 0, 0]), uniform);
        let reduce_first = pipe.bind(device, "reduce_state", &|name: &str| match name {
            "red_len" => Some(red_len0.as_entire_binding()),
            "red_out" => Some(buffers["red_a"].as_entire_binding()),
            other => lookup_main(other),
        })?;
        let mut reduce = Vec::new();
        let (mut cur, mut other) = ("red_a", "red_b");
        let mut count = records;
        while count > 1 {
            let n_out = count.div_ceil(WG as usize);
            let len_buf = make("red_len", &u(&[n_out as u32, count as u32, 0, 0]), uniform);
            let groups = pipe.bind(device, "reduce_partials", &|name: &str| match name {
                "red_len" => Some(len_buf.as_entire_binding()),
                "red_in" => Some(buffers[cur].as_entire_binding()),
                "red_out" => Some(buffers[other].as_entire_binding()),
                _ => None,
            })?;
            reduce.push(ReduceLevel { n_in: count as u32, groups });
            std::mem::swap(&mut cur, &mut other);
            count = n_out;
        }
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: STATUS_BYTES + (NQ * rs) as u64,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Ok(DemState {
            precision,
            n: n as u32,
            n_bonds: nb as u32,
            buckets: buckets as u32,
            nbr_capacity,
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
    /// bind groups of the kernels that use it. The caller forces a rebuild next.
    pub fn set_nbr_capacity(&mut self, device: &wgpu::Device, pipe: &DemPipeline, cap: u32) -> Result<(), GpuError> {
        let bytes = (4 * cap as usize * self.n as usize).max(MIN_BUFFER) as u64;
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("nbr"),
            size: bytes,
            usage,
            mapped_at_creation: false,
        });
        self.buffers.insert("nbr", buffer);
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
        Ok(())
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

    /// Copies whole state arrays back (for snapshots and error reports), as f64 (u32 arrays are
    /// not read this way).
    pub fn read_arrays(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        names: &[&str],
    ) -> Result<Vec<Vec<f64>>, GpuError> {
        let len = 4 * real_size(self.precision) as u64 * self.n as u64;
        if len == 0 {
            return Ok(names.iter().map(|_| Vec::new()).collect());
        }
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("snapshot"),
            size: len * names.len() as u64,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("snapshot") });
        for (k, name) in names.iter().enumerate() {
            encoder.copy_buffer_to_buffer(&self.buffers[name], 0, &staging, k as u64 * len, len);
        }
        queue.submit([encoder.finish()]);
        let bytes = map_read(device, &staging)?;
        Ok(bytes.chunks_exact(len as usize).map(|c| bytes_to_reals(c, self.precision)).collect())
    }
}

/// Status words at the start of a batch: no failure yet, step 0, rebuild flag as asked.
fn initial_status(rebuild: bool) -> [u32; STATUS_LEN] {
    let mut status = [0u32; STATUS_LEN];
    for slot in [STATUS_EXACT_STEP, STATUS_EXACT_PARTICLE, STATUS_BAD_STEP, super::shader::STATUS_BAD_PARTICLE] {
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
