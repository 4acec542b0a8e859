//! GPU-resident simulation state of a batch of replicas (one model is the one-replica batch):
//! the buffers (structure of arrays, vec4 lanes, in the engine's real type; replicas concatenated
//! as `batch::BatchLayout` says), their bind groups for every kernel, and the recording of steps,
//! force evaluations, segmented diagnostics reductions and per-replica range copies into a
//! command encoder. Nothing here waits on the GPU except the `read_*` functions.

use super::batch::{BatchLayout, broken_words};
use super::chunks::{ALIGN, ChunkGpu, ChunkPlan, Pages};
use super::context::{BufferFailure, create_buffer, map_read};
use super::error::GpuError;
use super::frame::Frame;
use super::pipeline::DemPipeline;
use super::shader::{NQ, RSTATUS_LEN, SCAN_WG, STATUS_LEN, STATUS_NONE, STATUS_REBUILD, WG};
use super::sizes::{CELL_BYTES, MIN_BUFFER, bytes_to_reals, particle_part_len, push_reals, real_size};
use crate::engine::Precision;
use crate::integrator::Integrator;
use crate::model::Model;
use std::collections::HashMap;

/// Break records read back: (midpoint xyz, energy) in f64, and (bond, step within the batch,
/// channel).
pub type BreakRecords = (Vec<[f64; 4]>, Vec<[u32; 3]>);

/// One level of the multi-level prefix scan.
struct ScanLevel {
    blocks: Vec<wgpu::BindGroup>,
    /// Adds the scanned block totals of the level above (absent at the top level).
    add: Option<Vec<wgpu::BindGroup>>,
}

/// One reduction level: `n_groups` workgroups, each summing what its chunk-table entry says.
struct ReduceLevel {
    n_groups: u32,
    groups: Vec<wgpu::BindGroup>,
}

/// The first reduction level (`reduce_state`), dispatched in chunks (`chunk_bind`).
struct ReduceFirst {
    n_groups: u32,
    red_len: wgpu::Buffer,
}

/// What the host keeps to plan chunks again (`DemState::replan`): 12 bytes per particle.
struct ChunkHost {
    inc_offsets: Vec<u32>,
    bond_lo: Vec<u32>,
    bond_hi: Vec<u32>,
    reduce_bonds: Vec<std::ops::Range<u64>>,
}

/// A chunked array in its buffers, one per page.
struct Paged {
    pages: Pages,
    /// Bytes per element.
    elem: u64,
    buffers: Vec<wgpu::Buffer>,
}

/// The arrays stored in pages: the per-bond arrays (one page layout, in bonds), the incidence
/// entries and the neighbour lists (each with an overlap of one particle's longest range).
const PAGED: [&str; 7] = ["bond_ends", "bond_ref", "bond_q0", "bond_scale", "bond_out", "inc_entries", "nbr"];

/// The binding of the state buffer that WGSL variable `name` is bound to, outside the chunk
/// windows: a whole buffer, or, for a `shader::PARTED` array bound in two parts of `part_len`
/// and `n − part_len` particles, its first part (`name`; `part` 1 for the second, as the
/// particle kernel binds `PARTICLE_OWN` for a chunk in the second part) or its second
/// (`<name>_hi`). Placeholders (smaller than a part) are bound whole.
fn state_binding<'a>(
    buffers: &'a HashMap<&'static str, wgpu::Buffer>,
    name: &str,
    precision: Precision,
    parts: Option<(u64, u64)>,
    part: usize,
) -> Option<wgpu::BindingResource<'a>> {
    let (base, hi) = match name.strip_suffix("_hi") {
        Some(b) if super::shader::parted_elem(b, precision).is_some() => (b, true),
        _ => (name, false),
    };
    let buffer = buffers.get(if base == "bucket_count" { "bucket_start" } else { base })?;
    let (Some(elem), Some((part_len, n))) = (super::shader::parted_elem(base, precision), parts) else {
        return Some(buffer.as_entire_binding());
    };
    let first = part_len * elem;
    if buffer.size() <= first {
        return Some(buffer.as_entire_binding());
    }
    let (offset, size) = if hi || part == 1 { (first, (n - part_len) * elem) } else { (0, first) };
    Some(wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer, offset, size: std::num::NonZeroU64::new(size) }))
}

/// Buffers and bind groups of a batch of replicas on one device.
pub struct DemState {
    pub precision: Precision,
    /// Particles and bonds of the whole batch.
    pub n: u32,
    pub n_bonds: u32,
    /// Where each replica lies in the arrays.
    pub layout: BatchLayout,
    /// Contact-grid bucket count (power of two ≥ 2N).
    pub buckets: u32,
    /// The dispatches of the grid stage, in order (`grid_dispatches`).
    grid: Vec<GridDispatch>,
    /// Slots of all Verlet neighbour lists together (`nbr_offsets[n]`), and the largest
    /// capacity of one list.
    pub nbr_entries: u64,
    pub nbr_max_capacity: u32,
    /// The host's copy of `nbr_offsets` once the lists are laid out per particle (empty while
    /// every list has the initial capacity: no host memory per particle for them).
    pub nbr_offsets: Vec<u32>,
    /// Bonds of some replica may break: the rupture buffers are real (placeholders otherwise).
    pub rupture: bool,
    /// Bytes of device memory held by the buffers (the neighbour lists' growth included).
    pub bytes: u64,
    memory_budget: Option<u64>,
    buffers: HashMap<&'static str, wgpu::Buffer>,
    bind: HashMap<&'static str, Vec<wgpu::BindGroup>>,
    scan: Vec<ScanLevel>,
    reduce_first: ReduceFirst,
    /// Lengths of the scan levels.
    scan_lens: Vec<u32>,
    /// The grid stage's indirect arguments: full sizes and this step's (`grid_args_set`).
    grid_args: Option<(wgpu::Buffer, wgpu::Buffer)>,
    chunk_host: ChunkHost,
    /// Most bytes one storage binding may hold.
    max_binding: u64,
    /// (particles in the first part, particles) when the per-particle arrays are bound in two
    /// parts (`particle_part_len`).
    parts: Option<(u64, u64)>,
    /// Most bytes one buffer may hold (arrays beyond it are paged).
    max_buffer: u64,
    /// The chunked arrays, each over its pages (`gpu::chunks::Pages`; one buffer when it fits).
    paged: HashMap<&'static str, Paged>,
    /// The chunks of the chunked kernels and their bind groups, chunk by chunk.
    chunks: ChunkPlan,
    chunk_bind: HashMap<&'static str, Vec<Vec<wgpu::BindGroup>>>,
    /// Break records one batch can hold (every bond, or what one binding holds).
    pub break_capacity: u64,
    reduce: Vec<ReduceLevel>,
    /// Buffer holding the final diagnostics record.
    reduce_result: &'static str,
    /// MAP_READ buffer: status words, then one diagnostics record per replica.
    readback: wgpu::Buffer,
    /// Bytes of the status words (batch-wide, then per replica).
    status_bytes: u64,
}

/// Kernels bound to the main state buffers (the scan and reduction levels bind their own).
const MAIN_KERNELS: [&str; 6] =
    ["integrate_check", "integrate", "grid_clear", "grid_count", "grid_scatter", "grid_order"];

/// Kernels dispatched in chunks (`gpu::chunks`), each chunk with bind groups of its own.
const CHUNKED_KERNELS: [&str; 5] = ["particle", "nbr_build", "bonds", "halo_copy", "reduce_state"];

/// Which bind groups a dispatch of the grid stage uses.
#[derive(Clone, Copy, Debug)]
enum GridBind {
    Main,
    /// `nbr_build` of particle chunk c.
    Nbr(usize),
    /// `scan_blocks` of scan level l.
    ScanBlocks(usize),
    /// `scan_add` of scan level l.
    ScanAdd(usize),
}

/// One dispatch of the grid stage, in order: its kernel, bind groups and full size. Its
/// workgroup counts are the k-th entry of the indirect arguments (`grid_args`), which
/// `grid_args_set` fills from these sizes in steps that rebuild and with zeros otherwise.
#[derive(Clone, Copy, Debug)]
struct GridDispatch {
    kernel: &'static str,
    bind: GridBind,
    items: u32,
    per_group: u32,
}

/// The grid stage for `n` particles, a table of `buckets` buckets and scan levels of lengths
/// `scan_lens` (the one description of its dispatches, used to plan and to record them).
fn grid_dispatches(n: u32, buckets: u32, scan_lens: &[u32], chunks: &[super::chunks::Chunk]) -> Vec<GridDispatch> {
    let d = |kernel, bind, items, per_group| GridDispatch { kernel, bind, items, per_group };
    let mut v = vec![d("grid_clear", GridBind::Main, buckets + 1, WG), d("grid_count", GridBind::Main, n, WG)];
    for (l, &len) in scan_lens.iter().enumerate() {
        v.push(d("scan_blocks", GridBind::ScanBlocks(l), len, 2 * SCAN_WG));
    }
    // Every level but the top one adds the scanned totals of the level above, top down.
    for (l, &len) in scan_lens.iter().enumerate().rev().skip(1) {
        v.push(d("scan_add", GridBind::ScanAdd(l), len, SCAN_WG));
    }
    for k in ["grid_scatter", "grid_order"] {
        v.push(d(k, GridBind::Main, n, WG));
    }
    for (c, ch) in chunks.iter().enumerate() {
        v.push(d("nbr_build", GridBind::Nbr(c), ch.gpu.p_end - ch.gpu.p_first, WG));
    }
    v
}

/// Per-buffer size needs of one model alone, checked against the adapter's limits before
/// anything is allocated (`batch::binding_sizes` for a batch).
pub fn buffer_sizes(model: &Model, precision: Precision, nbr_capacity: u32) -> Vec<(&'static str, u64)> {
    let t = super::batch::BatchTotals::of(&[model]);
    let mut v = super::batch::binding_sizes(&t, precision);
    v.extend(super::batch::chunked_sizes(&t, precision, nbr_capacity));
    v
}

/// What a planned buffer starts with: zeros, bytes at hand, or bytes made when the buffer is
/// allocated, so that the host holds one array's bytes at a time, not the whole state's.
enum Fill<'a> {
    Zeros,
    Bytes(Vec<u8>),
    Make(Box<dyn FnOnce() -> Vec<u8> + 'a>),
}

/// Bytes written to the device before the uploads are flushed (`queue.submit` and a wait), so
/// that wgpu's staging copies of them are freed: the host then holds at most this much of
/// them, however large the state (an array's bytes are written in slices of this size).
const UPLOAD_FLUSH: usize = 64 << 20;

/// Buffers of the state, listed with their sizes and contents before any is allocated, so that
/// the total is known up front: for the memory budget, and for the out-of-memory report.
#[derive(Default)]
struct Plan<'a> {
    items: Vec<(&'static str, u64, wgpu::BufferUsages, Fill<'a>)>,
}

impl<'a> Plan<'a> {
    /// Plans a buffer of `len` bytes (padded to at least `MIN_BUFFER`) that starts with `fill`;
    /// returns its index in the allocation.
    fn add(&mut self, name: &'static str, len: usize, fill: Fill<'a>, usage: wgpu::BufferUsages) -> usize {
        let size = len.max(MIN_BUFFER).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT as usize) as u64;
        self.items.push((name, size, usage, fill));
        self.items.len() - 1
    }

    fn total(&self) -> u64 {
        self.items.iter().map(|i| i.1).sum()
    }

    /// Allocates every planned buffer through the fallible path and uploads the contents, each
    /// made just before its upload. `budget` caps the sum of the sizes; `n` scales the "how
    /// many particles fit" estimate.
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
        let mut pending = 0usize;
        let mut out = Vec::with_capacity(self.items.len());
        for (name, size, usage, fill) in self.items {
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
            let data = match fill {
                Fill::Zeros => Vec::new(),
                Fill::Bytes(d) => d,
                Fill::Make(make) => make(),
            };
            for (k, slice) in data.chunks(UPLOAD_FLUSH).enumerate() {
                queue.write_buffer(&buffer, (k * UPLOAD_FLUSH) as u64, slice);
                pending += slice.len();
                if pending >= UPLOAD_FLUSH {
                    queue.submit([]);
                    device
                        .poll(wgpu::PollType::wait_indefinitely())
                        .map_err(|e| GpuError::Wgpu(format!("uploading the state: {e}")))?;
                    pending = 0;
                }
            }
            drop(data);
            allocated += size;
            out.push(buffer);
        }
        Ok(out)
    }
}

/// The stages of a step, in order: the one description of what a step records
/// (`DemState::record_stage`), and what `rrpdem bench --stages` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// (rrp-exact check), opening kick, drift, rotation, block moves, rebuild decision.
    Integrate,
    /// Contact grid and neighbour lists (the kernels return at once in steps that do not
    /// rebuild).
    Grid,
    /// The per-bond kernel (with rupture, the break test).
    Bonds,
    /// The per-particle kernel: bond gather, contacts, walls, fields, closing kick.
    Particle,
}

impl Stage {
    pub const ALL: [Stage; 4] = [Stage::Integrate, Stage::Grid, Stage::Bonds, Stage::Particle];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Integrate => "integrate",
            Stage::Grid => "grid",
            Stage::Bonds => "bonds",
            Stage::Particle => "particle",
        }
    }
}

/// Timestamp queries for one step of `record_step`: stage k writes its start and end at
/// `base + 2k` and `base + 2k + 1` of `set`.
#[derive(Clone, Copy)]
pub struct StageQueries<'a> {
    pub set: &'a wgpu::QuerySet,
    pub base: u32,
}

/// The state arrays of reals that `save_state` reads and `rollback` restores: with `CELL`,
/// everything the next step depends on that is not a model constant or recomputed by a force
/// evaluation. `pos` holds offsets inside the blocks of `CELL` (see `gpu::frame`).
pub const STATE_ARRAYS: [&str; 4] = ["pos", "vel", "quat", "omega"];
/// Their device-side copies made at the start of each `advance`, in the same order.
const BACKUP_ARRAYS: [&str; 4] = ["pos_backup", "vel_backup", "quat_backup", "omega_backup"];
/// The block of each particle's position (vec4<i32>, 16 bytes per particle): state like `pos`,
/// with its backup, where positions use blocks (`frame::uses_blocks`, f32); in f64 the grid's
/// cells, which are not state.
pub const CELL: (&str, &str) = ("cell", "cell_backup");
/// With rupture, the broken flags are state too (one bit per bond, each replica's from a word
/// boundary: `BatchLayout::broken_word`), with their own backup.
const BROKEN: (&str, &str) = ("bond_broken", "bond_broken_backup");

impl DemState {
    /// Allocates and fills the buffers of a batch of `models` (replica r's positions split into
    /// block and offset by `frames[r]`) and builds the bind groups. `reps_bytes` holds the per-replica
    /// parameters (`ReplicaGpu`), `walls_bytes` every replica's walls in order. `memory_budget`
    /// caps the bytes allocated (see `GpuOptions`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pipe: &DemPipeline,
        models: &[&Model],
        ref_q: &[Option<std::borrow::Cow<'_, [glam::DQuat]>>],
        ref_x: &[Option<&[glam::DVec3]>],
        frames: &[Frame],
        params_bytes: &[u8],
        reps_bytes: &[u8],
        walls_bytes: &[u8],
        nbr_capacity: u32,
        memory_budget: Option<u64>,
        max_binding: u64,
        max_buffer: u64,
        max_break_records: u64,
    ) -> Result<DemState, GpuError> {
        let precision = pipe.precision;
        let rs = real_size(precision);
        let layout = BatchLayout::new(models);
        let n = layout.n as usize;
        let nb = layout.nb as usize;
        let n_rep = layout.replicas();
        let buckets = super::batch::bucket_count(n as u64, max_binding) as usize;
        let parts = particle_part_len(n as u64, precision, max_binding).map(|p| (p, n as u64));
        if parts.is_some() != (pipe.parts == super::shader::Parts::Two) {
            return Err(GpuError::Wgpu(format!(
                "internal: kernels compiled for {:?} per-particle bindings, the state needs {:?}; please report this",
                pipe.parts, parts
            )));
        }
        // Per-bond reference attitudes only where some replica's bonds disagree on a particle's
        // (then for the whole batch, so that bond k's are at 2k, 2k + 1).
        let bond_attitudes = ref_q.iter().any(Option::is_none);
        let any_rupture = layout.rupture.iter().any(|&r| r);
        // The incidence (CSR over the batch), which the host keeps (offsets) and plans with.
        let mut inc_offsets: Vec<u32> = Vec::with_capacity(n + 1);
        let mut inc_entries: Vec<u32> = Vec::with_capacity(2 * nb);
        for (r, model) in models.iter().enumerate() {
            let (offsets, entries) = model.incidence();
            let base = inc_entries.len() as u32;
            inc_offsets.extend(offsets[..model.particles.len()].iter().map(|o| o + base));
            inc_entries.extend(entries.iter().map(|e| e + 2 * layout.b_start[r]));
        }
        inc_offsets.push(inc_entries.len() as u32);
        let status = initial_status(true, n_rep);
        let status_bytes = 4 * status.len() as u64;
        let (table0, table_levels) = layout.reduce_tables();
        let records = table0.len();
        let records1 = table_levels.first().map_or(1, |t| t.len());
        let mut table: Vec<u32> = table0.iter().flatten().copied().collect();
        for t in &table_levels {
            table.extend(t.iter().flatten());
        }

        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let uniform = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
        let u = |v: &[u32]| bytemuck::cast_slice::<u32, u8>(v).to_vec();
        let mut plan = Plan::default();
        let mut main: Vec<(&'static str, usize)> = Vec::new();
        macro_rules! data {
            ($name:expr, $len:expr, $fill:expr, $usage:expr) => {
                main.push(($name, plan.add($name, $len, $fill, $usage)))
            };
        }
        let bytes = |b: Vec<u8>| (b.len(), Fill::Bytes(b));
        let v4_bytes = 4 * rs * n;
        // Per-particle arrays, each made when its buffer is allocated.
        let vec4 = |f: fn(&Model, &Frame, usize) -> [f64; 4]| {
            Fill::Make(Box::new(move || {
                particle_bytes(models, 4 * rs, |r, i, out| push_reals(out, &f(models[r], &frames[r], i), precision))
            }))
        };
        let position = |m: &Model, frame: &Frame, i: usize| {
            let (_, o) = frame.split(m.particles.x[i]);
            [o.x, o.y, o.z, m.particles.radius[i]]
        };
        for (name, fill) in [
            ("params", bytes(params_bytes.to_vec())),
            ("reps", bytes(reps_bytes.to_vec())),
            ("walls", bytes(walls_bytes.to_vec())),
            ("pos", (v4_bytes, vec4(position))),
            ("vel", (v4_bytes, vec4(|m, _, i| m.particles.v[i].extend(0.0).to_array()))),
            ("quat", (v4_bytes, vec4(|m, _, i| m.particles.q[i].to_array()))),
            ("omega", (v4_bytes, vec4(|m, _, i| m.particles.w[i].extend(0.0).to_array()))),
            (
                "inertial",
                (
                    v4_bytes,
                    vec4(|m, _, i| {
                        let (mass, inertia) = (m.particles.mass[i], m.particles.inertia[i]);
                        // The inverses are 0 for a fixed particle (not integrated).
                        if m.particles.fixed[i] {
                            [mass, inertia, 0.0, 0.0]
                        } else {
                            [mass, inertia, 1.0 / mass, 1.0 / inertia]
                        }
                    }),
                ),
            ),
        ] {
            let usage = if name == "params" { uniform } else { storage };
            data!(name, fill.0, fill.1, usage);
        }
        let fixed = Fill::Make(Box::new(move || {
            particle_bytes(models, 4, |r, i, out| {
                out.extend_from_slice(&(models[r].particles.fixed[i] as u32 | (r as u32) << 1).to_ne_bytes())
            })
        }));
        data!("fixed", 4 * n, fixed, storage);
        // The chunked arrays, in pages where they exceed one buffer (`gpu::chunks::Pages`).
        let too_small = |what: &str| {
            GpuError::Wgpu(format!("buffers of {max_buffer} bytes cannot hold {ALIGN} elements of the {what}"))
        };
        let bond_pages =
            Pages::new(nb as u64, 12 * rs as u64, max_buffer, 0).ok_or_else(|| too_small("bond results"))?;
        let longest = inc_offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0) as u64;
        let inc_pages = Pages::new(inc_entries.len() as u64, 4, max_buffer, longest.next_multiple_of(ALIGN))
            .ok_or_else(|| too_small("incidence entries"))?;
        let nbr_pages = Pages::new(nbr_capacity as u64 * n as u64, 4, max_buffer, nbr_overlap(nbr_capacity))
            .ok_or_else(|| too_small("neighbour lists"))?;
        let mut paged_items: Vec<(&'static str, u64, Pages, Vec<usize>)> = Vec::new();
        macro_rules! paged {
            ($name:expr, $elem:expr, $pages:expr, $make:expr) => {
                paged_items.push(($name, $elem, $pages, plan_pages(&mut plan, $name, $elem, $pages, $make, storage)))
            };
        }
        let rs64 = rs as u64;
        let b_start = &layout.b_start;
        let p_start = &layout.p_start;
        let per_bond = |elem: u64, f: fn(&Model, &crate::model::Bond, u32, Precision, &mut Vec<u8>)| {
            make_pages(move |range| {
                bond_bytes(models, b_start, range, elem as usize, |r, b, out| {
                    f(models[r], b, p_start[r], precision, out)
                })
            })
        };
        paged!(
            "bond_ends",
            8,
            bond_pages,
            per_bond(8, |_, b, p0, _, out| {
                out.extend_from_slice(&(b.i + p0).to_ne_bytes());
                out.extend_from_slice(&(b.j + p0).to_ne_bytes());
            })
        );
        // Reference directions and lengths per bond only where some replica's particles are not
        // where its bonds were made (then for the whole batch); otherwise from `ref_pos`.
        if ref_x.iter().any(Option::is_none) {
            paged!(
                "bond_ref",
                4 * rs64,
                bond_pages,
                per_bond(4 * rs64, |_, b, _, p, out| push_reals(out, &b.dhat0.extend(b.l0).to_array(), p))
            );
        } else {
            paged!("bond_ref", 4 * rs64, Pages::one(0), None);
        }
        // Reference positions split as positions are (a replica with per-bond references gets
        // its current positions, which no kernel reads).
        let reference = move |r: usize, i: usize| frames[r].split(ref_x[r].unwrap_or(&models[r].particles.x)[i]);
        let ref_pos = Fill::Make(Box::new(move || {
            particle_bytes(models, 4 * rs, |r, i, out| {
                let (_, o) = reference(r, i);
                push_reals(out, &o.extend(0.0).to_array(), precision)
            })
        }));
        data!("ref_pos", v4_bytes, ref_pos, storage);
        let blocks = super::frame::uses_blocks(precision);
        let ref_cell = Fill::Make(Box::new(move || {
            if !blocks {
                return Vec::new();
            }
            particle_bytes(models, CELL_BYTES, |r, i, out| push_block(out, reference(r, i).0))
        }));
        data!("ref_cell", if blocks { CELL_BYTES * n } else { 0 }, ref_cell, storage);
        let q0 = |_: &Model, b: &crate::model::Bond, _, p, out: &mut Vec<u8>| {
            push_reals(out, &b.q_i0.to_array(), p);
            push_reals(out, &b.q_j0.to_array(), p);
        };
        if bond_attitudes {
            paged!("bond_q0", 8 * rs64, bond_pages, per_bond(8 * rs64, q0));
        } else {
            paged!("bond_q0", 8 * rs64, Pages::one(0), None);
        }
        let q_ref = Fill::Make(Box::new(move || {
            particle_bytes(models, 4 * rs, |r, i, out| {
                push_reals(out, &ref_q[r].as_deref().unwrap_or(&models[r].particles.q)[i].to_array(), precision)
            })
        }));
        data!("q_ref", v4_bytes, q_ref, storage);
        data!("inc_offsets", 4 * (n + 1), Fill::Bytes(u(&inc_offsets)), storage);
        let entries = &inc_entries;
        paged!("inc_entries", 4, inc_pages, make_pages(move |e| u(&entries[e.start as usize..e.end as usize])));
        // Every list starts with the same capacity; the engine plans them per particle once
        // some overflow (`set_nbr_offsets`).
        let offsets: Vec<u32> = (0..=n as u32).map(|i| i * nbr_capacity).collect();
        data!("nbr_offsets", 4 * (n + 1), Fill::Bytes(u(&offsets)), storage);
        // Written by `replan` (gpu::chunks: which far bonds each particle reads from the halo).
        data!("halo_off", 4 * (n + 1), Fill::Zeros, storage);
        // The scan runs over all buckets + 1 entries, so that the last one ends at the number of
        // particles counted this rebuild (frozen replicas' are not): no stale entry lies inside
        // any bucket's range.
        data!("bucket_start", 4 * (buckets + 1), Fill::Zeros, storage);
        data!("status", status_bytes as usize, Fill::Bytes(u(&status)), storage);
        data!("x_ref", v4_bytes, vec4(position), storage);
        let cells = Fill::Make(Box::new(move || {
            particle_bytes(models, CELL_BYTES, |r, i, out| push_block(out, frames[r].split(models[r].particles.x[i]).0))
        }));
        data!(CELL.0, CELL_BYTES * n, cells, storage);
        // Rupture buffers only where bonds may break; otherwise minimal placeholders for the
        // bindings, which the kernels never read (FLAG_RUPTURE is off). The thresholds' scales
        // only where some replica has Weibull scatter (FLAG_WEIBULL; the others' are never
        // read): without it every scale is 1.
        if models.iter().any(|m| m.params.weibull()) {
            let scale =
                |m: &Model, b: &crate::model::Bond, _, p, out: &mut Vec<u8>| push_reals(out, &[m.bond_scale(b)], p);
            paged!("bond_scale", rs64, bond_pages, per_bond(rs64, scale));
        } else {
            paged!("bond_scale", rs64, Pages::one(0), None);
        }
        data!("red_table", 4 * table.len(), Fill::Bytes(u(&table)), storage);
        let nr = if any_rupture { nb } else { 0 };
        // Break records: one per bond, at most what one binding holds and `MAX_BREAK_RECORDS`
        // (a batch that breaks more is taken again in shorter ones; 32 bytes a record in f64).
        let nr_records = (nr as u64).min(max_binding / (4 * rs as u64).max(16)).min(max_break_records) as usize;
        for (name, len) in [
            ("force", v4_bytes),
            ("moment", v4_bytes),
            ("pot", v4_bytes),
            ("hash", 4 * n),
            ("slot", 4 * n),
            ("sorted_tmp", 4 * n),
            ("sorted_cell", 16 * n),
            ("sorted_pos", v4_bytes),
            ("step_next", 16),
            ("zeros", 16),
            ("nbr_count", 4 * n),
            ("red_a", NQ * rs * records),
            ("red_b", NQ * rs * records1),
            ("pos_backup", v4_bytes),
            ("vel_backup", v4_bytes),
            ("quat_backup", v4_bytes),
            ("omega_backup", v4_bytes),
            (CELL.1, if super::frame::uses_blocks(precision) { CELL_BYTES * n } else { 0 }),
            ("break_at", 4 * rs * nr_records),
            ("break_id", 16 * nr_records),
        ] {
            main.push((name, plan.add(name, len, Fill::Zeros, storage)));
        }
        paged!("bond_out", 12 * rs64, bond_pages, None);
        paged!("nbr", 4, nbr_pages, None);
        // Broken flags, a bit per bond, bound whole (`BatchLayout::broken_word`).
        let words = if any_rupture { 4 * layout.broken_words as usize } else { 0 };
        data!(BROKEN.0, words, Fill::Zeros, storage);
        data!(BROKEN.1, words, Fill::Zeros, storage);

        // Scan levels: lengths M, ⌈M/B⌉, … down to one block (B = 2·SCAN_WG values per block).
        let block = 2 * SCAN_WG as usize;
        let mut lens = vec![buckets + 1];
        while *lens.last().unwrap_or(&1) > block {
            let l = lens.last().copied().unwrap_or(1).div_ceil(block);
            lens.push(l);
        }
        let scan_lens: Vec<u32> = lens.iter().map(|&l| l as u32).collect();
        let aux: Vec<usize> =
            lens.iter().skip(1).map(|&len| plan.add("scan_aux", 4 * len, Fill::Zeros, storage)).collect();
        let scan_dummy = plan.add("scan_top_sum", 16, Fill::Zeros, storage);
        let scan_len: Vec<usize> = lens
            .iter()
            .map(|&len| {
                let bytes = u(&[len as u32, 0, 0, 0]);
                plan.add("scan_len", bytes.len(), Fill::Bytes(bytes), uniform)
            })
            .collect();
        // Reductions: level 0 writes `records` partial records into red_a; each further level
        // reduces them as its chunk table says, ping-ponging between red_a and red_b. One
        // uniform per level: (workgroups, offset of the level's entries in red_table).
        let mut red_lens = Vec::new();
        let mut offset = 0usize;
        for len in std::iter::once(table0.len()).chain(table_levels.iter().map(|t| t.len())) {
            let bytes = u(&[len as u32, offset as u32, 0, 0]);
            red_lens.push((len, plan.add("red_len", bytes.len(), Fill::Bytes(bytes), uniform)));
            offset += len;
        }
        let readback_at = plan.add(
            "readback",
            status_bytes as usize + n_rep * NQ * rs,
            Fill::Zeros,
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
        let mut paged = HashMap::new();
        for (name, elem, pages, ids) in paged_items {
            let buffers = ids.into_iter().map(&mut take).collect::<Result<Vec<_>, _>>()?;
            paged.insert(name, Paged { pages, elem, buffers });
        }
        debug_assert!(PAGED.iter().all(|n| paged.contains_key(n)));
        let aux: Vec<wgpu::Buffer> = aux.into_iter().map(&mut take).collect::<Result<_, _>>()?;
        let scan_dummy = take(scan_dummy)?;
        let scan_len: Vec<wgpu::Buffer> = scan_len.into_iter().map(&mut take).collect::<Result<_, _>>()?;
        let red_lens: Vec<(usize, wgpu::Buffer)> =
            red_lens.into_iter().map(|(c, k)| Ok((c, take(k)?))).collect::<Result<_, GpuError>>()?;
        let readback = take(readback_at)?;

        let mut scan = Vec::new();
        for l in 0..lens.len() {
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
            scan.push(ScanLevel { blocks, add });
        }

        let lookup_main = |name: &str| state_binding(&buffers, name, precision, parts, 0);
        let mut bind = HashMap::new();
        for k in MAIN_KERNELS {
            bind.insert(k, pipe.bind(device, k, &lookup_main)?);
        }
        let mut red_lens = red_lens.into_iter();
        let (len0, len0_buf) = red_lens.next().ok_or_else(|| GpuError::Wgpu("no reduction level".into()))?;
        let red_lens: Vec<(usize, wgpu::Buffer)> = red_lens.collect();
        let reduce_first = ReduceFirst { n_groups: len0 as u32, red_len: len0_buf };
        let mut reduce = Vec::new();
        let (mut cur, mut other) = ("red_a", "red_b");
        for (count, len_buf) in &red_lens {
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
        // What the chunk plan needs (`gpu::chunks`): each particle's lowest and highest bond,
        // and each level-0 reduction workgroup's bonds.
        let (mut bond_lo, mut bond_hi) = (vec![u32::MAX; n], vec![0u32; n]);
        for (r, model) in models.iter().enumerate() {
            let (p0, b0) = (layout.p_start[r], layout.b_start[r]);
            for (k, b) in model.bonds.iter().enumerate() {
                let k = b0 + k as u32;
                for i in [(b.i + p0) as usize, (b.j + p0) as usize] {
                    bond_lo[i] = bond_lo[i].min(k);
                    bond_hi[i] = bond_hi[i].max(k);
                }
            }
        }
        let reduce_bonds = table0
            .iter()
            .map(|&[r, t0, _, _]| {
                let (b0, nb_r) = (layout.b_start[r as usize] as u64, layout.n_bonds[r as usize] as u64);
                let t0 = t0 as u64;
                (b0 + t0.min(nb_r))..(b0 + (t0 + WG as u64).min(nb_r))
            })
            .collect();
        let break_capacity = nr_records as u64;
        let mut state = DemState {
            precision,
            n: n as u32,
            n_bonds: nb as u32,
            layout,
            buckets: buckets as u32,
            scan_lens,
            grid: Vec::new(),
            grid_args: None,
            chunk_host: ChunkHost { inc_offsets, bond_lo, bond_hi, reduce_bonds },
            max_binding,
            parts,
            max_buffer,
            paged,
            chunks: ChunkPlan::default(),
            chunk_bind: HashMap::new(),
            break_capacity,
            nbr_entries: nbr_capacity as u64 * n as u64,
            nbr_max_capacity: nbr_capacity,
            nbr_offsets: Vec::new(),
            rupture: any_rupture,
            bytes,
            memory_budget,
            buffers,
            bind,
            scan,
            reduce_first,
            reduce,
            reduce_result: cur,
            readback,
            status_bytes,
        };
        let plan = state.plan_for(device, queue, &state.nbr_offsets_in_use(), nbr_pages, Some(&inc_entries))?;
        let plan = plan.map_err(|particle| GpuError::ChunkTooLarge { particle, max_binding })?;
        state.replan(device, queue, pipe, plan)?;
        Ok(state)
    }

    /// The chunks for neighbour-list offsets `nbr_offsets` (`gpu::chunks::plan`). Takes the
    /// incidence entries from `host` where given (construction), else reads them back when
    /// some bonds may need the halo (a one-off host wait).
    fn plan_for(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        nbr_offsets: &[u32],
        nbr_pages: Pages,
        host: Option<&[u32]>,
    ) -> Result<Result<ChunkPlan, usize>, GpuError> {
        let h = &self.chunk_host;
        let bond_bytes = 12 * real_size(self.precision) as u64;
        let one_window = (self.n_bonds as u64 + ALIGN) * bond_bytes <= self.max_binding;
        let read: Vec<u32>;
        let entries: &[u32] = if one_window && self.paged["bond_out"].buffers.len() == 1 {
            &[]
        } else if let Some(e) = host {
            e
        } else {
            let raw = self.read_buffers_raw(device, queue, &[("inc_entries", 0, 8 * self.n_bonds as u64)])?;
            read = bytemuck::pod_collect_to_vec(&raw[0]);
            &read
        };
        Ok(super::chunks::plan(&super::chunks::ChunkInputs {
            n: self.n as u64,
            n_bonds: self.n_bonds as u64,
            inc_offsets: &h.inc_offsets,
            inc_entries: entries,
            bond_lo: &h.bond_lo,
            bond_hi: &h.bond_hi,
            nbr_offsets,
            reduce_bonds: &h.reduce_bonds,
            bond_bytes,
            max_binding: self.max_binding,
            part_len: self.parts.map(|p| p.0),
            bond_pages: self.paged["bond_out"].pages,
            inc_pages: self.paged["inc_entries"].pages,
            nbr_pages,
        }))
    }

    /// Bytes of each named state buffer, largest first (the scan, reduction and chunk
    /// uniforms and the readback buffer are left out: a few kB).
    pub fn buffer_parts(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<(&'static str, u64)> = self.buffers.iter().map(|(k, b)| (*k, b.size())).collect();
        v.extend(self.paged.iter().map(|(k, p)| (*k, p.buffers.iter().map(|b| b.size()).sum())));
        v.sort_by_key(|&(k, s)| (std::cmp::Reverse(s), k));
        v
    }

    /// `SimParams::part_len`: particles in the first part of the per-particle arrays, or all
    /// of them when they are bound whole.
    pub fn part_len(&self) -> u32 {
        self.parts.map_or(self.n, |p| p.0 as u32)
    }

    /// Entries of the halo.
    pub fn halo_entries(&self) -> usize {
        self.chunks.halo_src.len()
    }

    /// Pages of the per-bond arrays, the incidence entries and the neighbour lists.
    pub fn page_counts(&self) -> (usize, usize, usize) {
        let count = |name: &str| self.paged[name].buffers.len();
        (count("bond_out"), count("inc_entries"), count("nbr"))
    }

    /// Particle, bond and reduction chunks.
    pub fn chunk_counts(&self) -> (usize, usize, usize) {
        (self.chunks.particles.len(), self.chunks.bonds.len(), self.chunks.reduce.len())
    }

    /// The neighbour-list offsets in use (n + 1).
    fn nbr_offsets_in_use(&self) -> Vec<u32> {
        if self.nbr_offsets.is_empty() {
            (0..=self.n).map(|i| i * self.nbr_max_capacity).collect()
        } else {
            self.nbr_offsets.clone()
        }
    }

    /// Takes on the chunks `plan` of the chunked kernels (`plan_for`, after construction and after
    /// the neighbour lists are laid out anew) and makes their uniforms, bind groups and the grid
    /// stage's dispatch list and indirect arguments.
    fn replan(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pipe: &DemPipeline,
        plan: ChunkPlan,
    ) -> Result<(), GpuError> {
        let rs = real_size(self.precision) as u64;
        // Every window of a real (not placeholder) array must lie in one page and one binding:
        // a plan that broke that would bind the wrong elements, so it is an error, not a fallback.
        for c in plan.particles.iter().chain(&plan.bonds).chain(&plan.reduce) {
            for name in PAGED {
                let p = &self.paged[name];
                let w = window_of(c, name);
                let inside = w.end <= w.start
                    || p.pages.len == 0
                    || (p.pages.holds(w.start, w.end) && (w.end - w.start) * p.elem <= self.max_binding);
                if !inside {
                    return Err(GpuError::Wgpu(format!(
                        "internal: the chunk plan binds elements {w:?} of `{name}` across a page or beyond a binding \
                         ({:?}); please report this",
                        p.pages
                    )));
                }
            }
        }
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        // The halo: its offsets (planned with the state) and the copies and their lists.
        queue.write_buffer(&self.buffers["halo_off"], 0, bytemuck::cast_slice(&plan.halo_off));
        let halo_entries = plan.halo_src.len() as u64;
        for (name, bytes) in
            [("halo", 12 * rs * halo_entries), ("halo_src", 4 * halo_entries), ("halo_fill", 4 * halo_entries)]
        {
            let size = bytes.max(MIN_BUFFER as u64);
            let b = create_buffer(device, name, size, storage)
                .map_err(|e| GpuError::Wgpu(format!("creating `{name}` ({size} bytes): {e:?}")))?;
            self.buffers.insert(name, b);
        }
        if halo_entries > 0 {
            queue.write_buffer(&self.buffers["halo_src"], 0, bytemuck::cast_slice(&plan.halo_src));
            queue.write_buffer(&self.buffers["halo_fill"], 0, bytemuck::cast_slice(&plan.halo_fill));
        }
        let uniform = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
        let mut chunk_bind: HashMap<&'static str, Vec<Vec<wgpu::BindGroup>>> = HashMap::new();
        for (kernel, chunks) in CHUNKED_KERNELS.iter().map(|&k| {
            (
                k,
                match k {
                    "bonds" | "halo_copy" => &plan.bonds,
                    "reduce_state" => &plan.reduce,
                    _ => &plan.particles,
                },
            )
        }) {
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
                    let own = kernel == "particle" && super::shader::PARTICLE_OWN.contains(&name);
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
        let grid = grid_dispatches(self.n, self.buckets, &self.scan_lens, &plan.particles);
        let full: Vec<u32> = grid
            .iter()
            .flat_map(|g| {
                let (x, y) = pipe.grid(g.items.div_ceil(g.per_group));
                [x, y, 1]
            })
            .collect();
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
        self.bind.insert("grid_args_set", set);
        self.grid = grid;
        self.grid_args = Some((grid_full, grid_args));
        self.chunks = plan;
        self.chunk_bind = chunk_bind;
        Ok(())
    }

    pub fn buffer(&self, name: &str) -> &wgpu::Buffer {
        &self.buffers[name]
    }

    /// Gives the neighbour lists a new capacity (after an overflow): a new list buffer and the
    /// bind groups of the kernels that use it; the caller forces a rebuild next. Growing is an
    /// optimisation only (an overflowing list falls back to the grid, with the same result), so
    /// a new buffer that would exceed the memory budget or that the device has no room for
    /// leaves the capacity as it is: returns whether it grew.
    /// Lays the neighbour lists out anew: list i gets the slots `offsets[i] .. offsets[i + 1]`
    /// (n + 1 offsets, from `plan_nbr_offsets`). Reallocates `nbr`; false (nothing changed) if
    /// the memory budget or the device refuses it. The lists must be rebuilt before use.
    pub fn set_nbr_offsets(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pipe: &DemPipeline,
        offsets: Vec<u32>,
    ) -> Result<bool, GpuError> {
        debug_assert_eq!(offsets.len(), self.n as usize + 1);
        let entries = offsets.last().copied().unwrap_or(0) as u64;
        let longest = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        let Some(pages) = Pages::new(entries, 4, self.max_buffer, nbr_overlap(longest)) else {
            return Ok(false); // some list alone would exceed a buffer
        };
        let Ok(plan) = self.plan_for(device, queue, &offsets, pages, None)? else {
            return Ok(false); // some list alone would exceed a binding
        };
        let old: u64 = self.paged["nbr"].buffers.iter().map(|b| b.size()).sum();
        let sizes: Vec<u64> = (0..pages.count())
            .map(|k| {
                let e = pages.range(k);
                (4 * (e.end - e.start)).max(MIN_BUFFER as u64).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
            })
            .collect();
        let bytes: u64 = sizes.iter().sum();
        if self.memory_budget.is_some_and(|b| self.bytes - old + bytes > b) {
            return Ok(false);
        }
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let mut buffers = Vec::with_capacity(sizes.len());
        for size in sizes {
            match create_buffer(device, "nbr", size, usage) {
                Ok(b) => buffers.push(b),
                Err(BufferFailure::OutOfMemory(_)) => return Ok(false),
                Err(BufferFailure::Other(e)) => {
                    return Err(GpuError::Wgpu(format!("creating buffer `nbr` ({size} bytes): {e}")));
                }
            }
        }
        self.paged.insert("nbr", Paged { pages, elem: 4, buffers });
        queue.write_buffer(&self.buffers["nbr_offsets"], 0, bytemuck::cast_slice(&offsets));
        self.bytes = self.bytes - old + bytes;
        self.nbr_entries = entries;
        self.nbr_max_capacity = longest;
        self.nbr_offsets = offsets;
        self.replan(device, queue, pipe, plan)?;
        Ok(true)
    }

    /// Records the device-side copy of the state arrays that `rollback` returns to (no host
    /// wait: it runs in order before the steps recorded after it).
    pub fn record_backup(&self, encoder: &mut wgpu::CommandEncoder) {
        for (a, b) in self.backed_up() {
            if let (Some(pa), Some(pb)) = (self.paged.get(a), self.paged.get(b)) {
                // Same layout, page by page.
                for (x, y) in pa.buffers.iter().zip(&pb.buffers) {
                    encoder.copy_buffer_to_buffer(x, 0, y, 0, x.size());
                }
            } else {
                encoder.copy_buffer_to_buffer(&self.buffers[a], 0, &self.buffers[b], 0, self.buffers[a].size());
            }
        }
    }

    /// Where the bytes `offset .. offset + len` of a named array lie: (buffer, offset in it,
    /// bytes, place relative to `offset`); for a paged array piece by piece, each element from
    /// the page `x / step` (`Pages::pieces`).
    fn locate(&self, name: &str, offset: u64, len: u64) -> Vec<(&wgpu::Buffer, u64, u64, u64)> {
        match self.paged.get(name) {
            Some(p) => {
                debug_assert!(offset.is_multiple_of(p.elem) && len.is_multiple_of(p.elem), "{name}: {offset} + {len}");
                let e = p.elem;
                p.pages
                    .pieces(offset / e..(offset + len) / e)
                    .into_iter()
                    .map(|(k, r, at)| (&p.buffers[k], r.start * e, (r.end - r.start) * e, at * e))
                    .collect()
            }
            None => vec![(&self.buffers[name], offset, len, 0)],
        }
    }

    /// Records the copy of replica r's ranges of the backup back into the state arrays (its
    /// particles' four arrays and, with rupture, its bonds' broken flags): the other replicas
    /// keep their state.
    pub fn record_restore(&self, encoder: &mut wgpu::CommandEncoder, r: usize) {
        let v4 = 4 * real_size(self.precision) as u64;
        let (p0, np) = (self.layout.p_start[r] as u64, self.layout.n_particles[r] as u64);
        let nb = self.layout.n_bonds[r] as u64;
        let c = CELL_BYTES as u64;
        for (a, b) in self.backed_up() {
            let (at, len) = match a {
                _ if a == BROKEN.0 => (4 * self.layout.broken_word[r] as u64, 4 * broken_words(nb)),
                _ if a == CELL.0 => (c * p0, c * np),
                _ => (v4 * p0, v4 * np),
            };
            if len > 0 {
                // Backup and state share one layout, so their pieces pair up.
                for ((src, from, bytes, _), (dst, to, _, _)) in
                    self.locate(b, at, len).into_iter().zip(self.locate(a, at, len))
                {
                    encoder.copy_buffer_to_buffer(src, from, dst, to, bytes);
                }
            }
        }
    }

    /// (state buffer, backup buffer) pairs: the state arrays, the blocks, and the broken flags
    /// with rupture.
    fn backed_up(&self) -> impl Iterator<Item = (&'static str, &'static str)> {
        let broken = self.rupture.then_some(BROKEN);
        let cell = super::frame::uses_blocks(self.precision).then_some(CELL);
        STATE_ARRAYS.into_iter().zip(BACKUP_ARRAYS).chain(cell).chain(broken)
    }

    /// Resets the status words and the step counter before a batch (queued before the next
    /// submit); `rebuild` makes its first step rebuild the grid and the neighbour lists.
    pub fn reset_status(&self, queue: &wgpu::Queue, rebuild: bool) {
        let status = initial_status(rebuild, self.layout.replicas());
        queue.write_buffer(&self.buffers["status"], 0, bytemuck::cast_slice(&status));
        queue.write_buffer(&self.buffers["step_next"], 0, bytemuck::cast_slice(&[0u32; 4]));
    }

    /// Publishes the step counter and (except at the first step of a batch, whose flag the host
    /// sets) clears the rebuild flag, which `integrate` then raises
    /// where needed. Must be outside a compute pass.
    fn record_step_prologue(&self, encoder: &mut wgpu::CommandEncoder, first: bool) {
        encoder.copy_buffer_to_buffer(&self.buffers["step_next"], 0, &self.buffers["status"], 0, 4);
        if !first {
            let at = 4 * STATUS_REBUILD as u64;
            encoder.copy_buffer_to_buffer(&self.buffers["zeros"], 0, &self.buffers["status"], at, 4);
        }
    }

    /// Records one stage of a step (the dispatches of `Stage`, in order).
    fn record_stage(&self, pipe: &DemPipeline, pass: &mut wgpu::ComputePass<'_>, stage: Stage, integrator: Integrator) {
        let n = self.n;
        match stage {
            Stage::Integrate => {
                if integrator == Integrator::RrpExact {
                    pipe.dispatch(pass, "integrate_check", &self.bind["integrate_check"], n, WG);
                }
                pipe.dispatch(pass, "integrate", &self.bind["integrate"], n, WG);
            }
            Stage::Grid => {
                // Workgroup counts for this step (zeros unless it rebuilds), then every grid
                // dispatch from them.
                let args = self.grid.len() as u32 * 3;
                pipe.dispatch(pass, "grid_args_set", &self.bind["grid_args_set"], args, WG);
                let Some((_, grid_args)) = &self.grid_args else { return };
                for (k, g) in self.grid.iter().enumerate() {
                    let groups = match g.bind {
                        GridBind::Main => &self.bind[g.kernel],
                        GridBind::Nbr(c) => &self.chunk_bind["nbr_build"][c],
                        GridBind::ScanBlocks(l) => &self.scan[l].blocks,
                        GridBind::ScanAdd(l) => match &self.scan[l].add {
                            Some(add) => add,
                            None => continue,
                        },
                    };
                    pipe.dispatch_indirect(pass, g.kernel, groups, grid_args, 12 * k as u64);
                }
            }
            Stage::Bonds => {
                let halo = self.chunks.bonds.iter().zip(&self.chunk_bind["halo_copy"]);
                for ((c, groups), (_, copy)) in self.chunks.bonds.iter().zip(&self.chunk_bind["bonds"]).zip(halo) {
                    pipe.dispatch(pass, "bonds", groups, c.gpu.b_end - c.gpu.b_first, WG);
                    pipe.dispatch(pass, "halo_copy", copy, c.gpu.fill_end - c.gpu.fill_first, WG);
                }
            }
            Stage::Particle => {
                for (c, groups) in self.chunks.particles.iter().zip(&self.chunk_bind["particle"]) {
                    pipe.dispatch(pass, "particle", groups, c.gpu.p_end - c.gpu.p_first, WG);
                }
            }
        }
    }

    /// The initial force evaluation (params.batch_len = 0: no kicks): the stages after
    /// `Integrate`.
    pub fn record_initial(&self, pipe: &DemPipeline, encoder: &mut wgpu::CommandEncoder) {
        self.record_step_prologue(encoder, true);
        let mut pass = encoder
            .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("evaluate"), timestamp_writes: None });
        for stage in &Stage::ALL[1..] {
            self.record_stage(pipe, &mut pass, *stage, Integrator::RrpNewmark);
        }
    }

    /// One full step, `Stage::ALL` in order: (rrp-exact check), opening kick + drift + rotation,
    /// force evaluation and closing kick. One compute pass; with `queries`, one pass per stage,
    /// each writing its start and end time (for `rrpdem bench --stages`).
    pub fn record_step(
        &self,
        pipe: &DemPipeline,
        encoder: &mut wgpu::CommandEncoder,
        integrator: Integrator,
        first: bool,
        queries: Option<StageQueries<'_>>,
    ) {
        self.record_step_prologue(encoder, first);
        let Some(q) = queries else {
            let mut pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("step"), timestamp_writes: None });
            for stage in Stage::ALL {
                self.record_stage(pipe, &mut pass, stage, integrator);
            }
            return;
        };
        for (k, stage) in Stage::ALL.into_iter().enumerate() {
            let at = q.base + 2 * k as u32;
            let writes = wgpu::ComputePassTimestampWrites {
                query_set: q.set,
                beginning_of_pass_write_index: Some(at),
                end_of_pass_write_index: Some(at + 1),
            };
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(stage.name()),
                timestamp_writes: Some(writes),
            });
            self.record_stage(pipe, &mut pass, stage, integrator);
        }
    }

    /// Diagnostics reduction and the copy of status + diagnostics into the readback buffer.
    pub fn record_readback(&self, pipe: &DemPipeline, encoder: &mut wgpu::CommandEncoder) {
        {
            let mut pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("reduce"), timestamp_writes: None });
            debug_assert_eq!(self.chunks.reduce.iter().map(|c| c.groups).sum::<u32>(), self.reduce_first.n_groups);
            for (c, groups) in self.chunks.reduce.iter().zip(&self.chunk_bind["reduce_state"]) {
                pipe.dispatch(&mut pass, "reduce_state", groups, c.groups * WG, WG);
            }
            for level in &self.reduce {
                pipe.dispatch(&mut pass, "reduce_partials", &level.groups, level.n_groups * WG, WG);
            }
        }
        let rs = real_size(self.precision) as u64;
        let records = (self.layout.replicas() * NQ) as u64 * rs;
        encoder.copy_buffer_to_buffer(&self.buffers["status"], 0, &self.readback, 0, self.status_bytes);
        encoder.copy_buffer_to_buffer(&self.buffers[self.reduce_result], 0, &self.readback, self.status_bytes, records);
    }

    /// Maps the readback buffer (after the submission that filled it): the status words
    /// (batch-wide, then per replica) and one diagnostics record per replica (NQ reals each), in
    /// f64.
    pub fn read_status(&self, device: &wgpu::Device) -> Result<(Vec<u32>, Vec<f64>), GpuError> {
        let bytes = map_read(device, &self.readback)?;
        let (words, records) = bytes.split_at(self.status_bytes as usize);
        let status = words.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok((status, bytes_to_reals(records, self.precision)))
    }

    /// Bytes of replica r's part of one per-particle vec4 array.
    pub fn array_bytes(&self, r: usize) -> usize {
        4 * real_size(self.precision) * self.layout.n_particles[r] as usize
    }

    /// Copies replica r's part of per-particle vec4 arrays back, raw (the device's reals,
    /// little-endian).
    pub fn read_arrays_raw(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        names: &[&str],
        r: usize,
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        let len = self.array_bytes(r) as u64;
        let at = 4 * real_size(self.precision) as u64 * self.layout.p_start[r] as u64;
        let parts: Vec<(&str, u64, u64)> = names.iter().map(|&name| (name, at, len)).collect();
        self.read_buffers_raw(device, queue, &parts)
    }

    /// The neighbour count of every particle at the last rebuild (also of lists that
    /// overflowed: their full length).
    pub fn read_nbr_counts(&self, device: &wgpu::Device, queue: &wgpu::Queue) -> Result<Vec<u32>, GpuError> {
        let raw = self.read_buffers_raw(device, queue, &[("nbr_count", 0, 4 * self.n as u64)])?.swap_remove(0);
        Ok(bytemuck::pod_collect_to_vec(&raw))
    }

    /// Replica r's blocks, raw (`CELL_BYTES` per particle: i32 x, y, z, 0, little-endian).
    pub fn read_cells_raw(&self, device: &wgpu::Device, queue: &wgpu::Queue, r: usize) -> Result<Vec<u8>, GpuError> {
        let c = CELL_BYTES as u64;
        let (at, len) = (c * self.layout.p_start[r] as u64, c * self.layout.n_particles[r] as u64);
        Ok(self.read_buffers_raw(device, queue, &[(CELL.0, at, len)])?.swap_remove(0))
    }

    /// Replica r's blocks (replica-relative indices).
    pub fn read_cells(&self, device: &wgpu::Device, queue: &wgpu::Queue, r: usize) -> Result<Vec<[i32; 3]>, GpuError> {
        let raw = self.read_cells_raw(device, queue, r)?;
        Ok(bytemuck::pod_collect_to_vec::<u8, i32>(&raw).chunks_exact(4).map(|c| [c[0], c[1], c[2]]).collect())
    }

    /// Overwrites replica r's blocks with raw bytes of `CELL_BYTES · n_particles` length (queued
    /// before the next submit).
    pub fn write_cells_raw(&self, queue: &wgpu::Queue, bytes: &[u8], r: usize) {
        debug_assert_eq!(bytes.len(), CELL_BYTES * self.layout.n_particles[r] as usize);
        if !bytes.is_empty() {
            queue.write_buffer(&self.buffers[CELL.0], CELL_BYTES as u64 * self.layout.p_start[r] as u64, bytes);
        }
    }

    /// `read_arrays_raw` as f64 (for snapshots and error reports): replica-relative indices.
    pub fn read_arrays(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        names: &[&str],
        r: usize,
    ) -> Result<Vec<Vec<f64>>, GpuError> {
        let raw = self.read_arrays_raw(device, queue, names, r)?;
        Ok(raw.iter().map(|b| bytes_to_reals(b, self.precision)).collect())
    }

    /// Copies `len` bytes at `offset` of each named buffer back, raw, with one host wait.
    fn read_buffers_raw(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        parts: &[(&str, u64, u64)],
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        let size: u64 = parts.iter().map(|p| p.2).sum();
        if size == 0 {
            return Ok(parts.iter().map(|_| Vec::new()).collect());
        }
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let staging = create_buffer(device, "readback", size, usage)
            .map_err(|e| GpuError::Readback(format!("cannot allocate {size} bytes of staging memory: {e:?}")))?;
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
        let mut at = 0;
        for &(name, offset, len) in parts {
            if len > 0 {
                for (buffer, from, bytes, rel) in self.locate(name, offset, len) {
                    encoder.copy_buffer_to_buffer(buffer, from, &staging, at + rel, bytes);
                }
            }
            at += len;
        }
        queue.submit([encoder.finish()]);
        let bytes = map_read(device, &staging)?;
        let mut out = Vec::with_capacity(parts.len());
        let mut at = 0;
        for &(_, _, len) in parts {
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
        let raw =
            self.read_buffers_raw(device, queue, &[("break_at", 0, 4 * rs * count), ("break_id", 0, 16 * count)])?;
        let at = bytes_to_reals(&raw[0], self.precision).chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect();
        let ids =
            bytemuck::pod_collect_to_vec::<u8, u32>(&raw[1]).chunks_exact(4).map(|c| [c[0], c[1], c[2]]).collect();
        Ok((at, ids))
    }

    /// Replica r's broken flags, raw (one little-endian u32 per bond; empty when its bonds
    /// cannot break).
    pub fn read_broken_raw(&self, device: &wgpu::Device, queue: &wgpu::Queue, r: usize) -> Result<Vec<u8>, GpuError> {
        if !self.layout.rupture[r] {
            return Ok(Vec::new());
        }
        let nb = self.layout.n_bonds[r] as usize;
        let (at, len) = (4 * self.layout.broken_word[r] as u64, 4 * broken_words(nb as u64));
        let words: Vec<u32> =
            bytemuck::pod_collect_to_vec(&self.read_buffers_raw(device, queue, &[(BROKEN.0, at, len)])?.swap_remove(0));
        Ok((0..nb).flat_map(|k| ((words[k / 32] >> (k % 32)) & 1).to_le_bytes()).collect())
    }

    /// Overwrites replica r's broken flags with raw bytes of `4·n_bonds` length (queued before
    /// the next submit).
    pub fn write_broken_raw(&self, queue: &wgpu::Queue, bytes: &[u8], r: usize) {
        debug_assert_eq!(bytes.len(), 4 * self.layout.n_bonds[r] as usize);
        if self.layout.rupture[r] && !bytes.is_empty() {
            let mut words = vec![0u32; broken_words(self.layout.n_bonds[r] as u64) as usize];
            for (k, flag) in bytes.chunks_exact(4).enumerate() {
                if flag.iter().any(|&b| b != 0) {
                    words[k / 32] |= 1 << (k % 32);
                }
            }
            queue.write_buffer(
                &self.buffers[BROKEN.0],
                4 * self.layout.broken_word[r] as u64,
                bytemuck::cast_slice(&words),
            );
        }
    }

    /// Overwrites replica r's part of a per-particle vec4 array with raw bytes of
    /// `array_bytes(r)` length (queued before the next submit).
    pub fn write_array_raw(&self, queue: &wgpu::Queue, name: &str, bytes: &[u8], r: usize) {
        debug_assert_eq!(bytes.len(), self.array_bytes(r));
        if !bytes.is_empty() {
            let at = 4 * real_size(self.precision) as u64 * self.layout.p_start[r] as u64;
            queue.write_buffer(&self.buffers[name], at, bytes);
        }
    }
}

/// Appends a position block as the device reads it (`cell`, `CELL_BYTES`: i32 x, y, z, 0).
fn push_block(out: &mut Vec<u8>, b: [i32; 3]) {
    for c in [b[0], b[1], b[2], 0] {
        out.extend_from_slice(&c.to_ne_bytes());
    }
}

/// The window of a chunked array `name` in chunk `c`: incidence, lists, or bonds.
fn window_of<'c>(c: &'c super::chunks::Chunk, name: &str) -> &'c std::ops::Range<u64> {
    match name {
        "inc_entries" => &c.inc,
        "nbr" => &c.nbr,
        _ => &c.bonds,
    }
}

/// A per-particle array over the batch, `elem` bytes per particle: `f(r, i, out)` appends
/// particle i of replica r.
fn particle_bytes(models: &[&Model], elem: usize, f: impl Fn(usize, usize, &mut Vec<u8>)) -> Vec<u8> {
    let n: usize = models.iter().map(|m| m.particles.len()).sum();
    let mut out = Vec::with_capacity(n * elem);
    for (r, m) in models.iter().enumerate() {
        for i in 0..m.particles.len() {
            f(r, i, &mut out);
        }
    }
    debug_assert_eq!(out.len(), n * elem);
    out
}

/// Bonds `range` of the batch (replica r's start at `b_start[r]`) of a per-bond array, `elem`
/// bytes per bond: `f(r, bond, out)` appends one.
fn bond_bytes(
    models: &[&Model],
    b_start: &[u32],
    range: std::ops::Range<u64>,
    elem: usize,
    f: impl Fn(usize, &crate::model::Bond, &mut Vec<u8>),
) -> Vec<u8> {
    let mut out = Vec::with_capacity((range.end - range.start) as usize * elem);
    for (r, m) in models.iter().enumerate() {
        let b0 = b_start[r] as u64;
        let (lo, hi) = (range.start.max(b0), range.end.min(b0 + m.bonds.len() as u64));
        for k in lo..hi {
            f(r, &m.bonds[(k - b0) as usize], &mut out);
        }
    }
    debug_assert_eq!(out.len() as u64, (range.end - range.start) * elem as u64);
    out
}

/// What makes the bytes of a page of a chunked array from its element range.
type MakePage<'a> = std::rc::Rc<dyn Fn(std::ops::Range<u64>) -> Vec<u8> + 'a>;

fn make_pages<'a>(f: impl Fn(std::ops::Range<u64>) -> Vec<u8> + 'a) -> Option<MakePage<'a>> {
    Some(std::rc::Rc::new(f))
}

/// Plans the buffers of a chunked array, one per page, each made by `make` from its element
/// range when it is allocated (zeros without `make`); returns their indices in the allocation.
fn plan_pages<'a>(
    plan: &mut Plan<'a>,
    name: &'static str,
    elem: u64,
    pages: Pages,
    make: Option<MakePage<'a>>,
    usage: wgpu::BufferUsages,
) -> Vec<usize> {
    (0..pages.count())
        .map(|k| {
            let e = pages.range(k);
            let len = ((e.end - e.start) * elem) as usize;
            let fill = match &make {
                Some(f) => {
                    let f = f.clone();
                    Fill::Make(Box::new(move || f(e)))
                }
                None => Fill::Zeros,
            };
            plan.add(name, len, fill, usage)
        })
        .collect()
}

/// Overlap of the neighbour lists' pages: the longest list (so that each lies whole in the
/// page where it starts), aligned.
fn nbr_overlap(longest: u32) -> u64 {
    (longest as u64).next_multiple_of(ALIGN)
}

/// Status words at the start of a batch: step 0, rebuild flag as asked, no failure of any of
/// the `replicas` yet.
fn initial_status(rebuild: bool, replicas: usize) -> Vec<u32> {
    let mut status = vec![0u32; STATUS_LEN];
    status.extend(std::iter::repeat_n(STATUS_NONE, replicas * RSTATUS_LEN));
    status[STATUS_REBUILD] = rebuild as u32;
    status
}
