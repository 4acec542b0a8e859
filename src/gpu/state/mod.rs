//! GPU-resident simulation state of a batch of replicas (one model is the one-replica batch):
//! the buffers (structure of arrays, vec4 lanes, in the engine's real type; replicas concatenated
//! as `batch::BatchLayout` says), their bind groups for every kernel, and the recording of steps,
//! force evaluations, segmented diagnostics reductions and per-replica range copies into a
//! command encoder. Nothing here waits on the GPU except the `read_*` functions.
//!
//! Built in four steps, each in a room of its own: the allocation plan (`plan`: every buffer, its
//! size and contents, allocated in order), the chunk and page planning of the arrays larger than
//! a binding or a buffer (`chunked`: the page rule, the halo), the bind groups (`bind`: two-part
//! bindings, windows) and the list of a step's dispatches with its indirect grid arguments
//! (`record`). Backups and per-replica restores are in `backup`, reads and writes from the host
//! in `readback`.

mod backup;
mod bind;
mod chunked;
mod plan;
mod readback;
mod record;
mod watch;

pub use plan::{StateInputs, buffer_sizes};
pub use readback::BreakRecords;
pub use record::{Stage, StageQueries};

use super::batch::BatchLayout;
use super::chunks::ChunkPlan;
use super::error::GpuError;
use super::pipeline::DemPipeline;
use super::sizes::real_size;
use crate::engine::Precision;
use bind::{ReduceFirst, ReduceLevel, ScanLevel};
use chunked::{ChunkHost, PAGED, Paged};
use plan::{Planned, Shape};
use record::Dispatch;
use std::collections::HashMap;

/// The state arrays of reals that `save_state` reads and `rollback` restores: with `CELL`,
/// everything the next step depends on that is not a model constant or recomputed by a force
/// evaluation. `pos` holds offsets inside the blocks of `CELL` (see `gpu::frame`).
pub const STATE_ARRAYS: [&str; 4] = ["pos", "vel", "quat", "omega"];
/// The block of each particle's position (vec4<i32>, `sizes::CELL_BYTES` per particle): state
/// like `pos`, with its backup, where positions use blocks (`frame::uses_blocks`, f32); in f64
/// the grid's cells, which are not state.
pub const CELL: (&str, &str) = ("cell", "cell_backup");
/// With rupture, the broken flags are state too (one bit per bond, each replica's from a word
/// boundary: `BatchLayout::broken_word`), with their own backup.
const BROKEN: (&str, &str) = ("bond_broken", "bond_broken_backup");
/// Where some replica dissipates (MODEL §10), the dissipative loads of the last evaluation and
/// each particle's share of E_dissipated (`shader::DLOAD_ARRAYS`, one vec4 per particle each,
/// shaders/bindings.wgsl) are state too: the loads at a node come from the velocities of the
/// half step before it, which the state arrays no longer hold. With their own backups, these.
pub const DLOAD_BACKUPS: [&str; 3] = ["dload_force_backup", "dload_moment_backup", "dload_wall_backup"];

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
    /// Every dispatch of a step, in order (`record::step_dispatches`).
    steps: Vec<Dispatch>,
    /// Slots of all Verlet neighbour lists together (`nbr_offsets[n]`), and the largest
    /// capacity of one list.
    pub nbr_entries: u64,
    pub nbr_max_capacity: u32,
    /// The host's copy of `nbr_offsets` once the lists are laid out per particle (empty while
    /// every list has the initial capacity: no host memory per particle for them).
    pub nbr_offsets: Vec<u32>,
    /// Bonds of some replica may break: the rupture buffers are real (placeholders otherwise).
    pub rupture: bool,
    /// Some replica dissipates (MODEL §10): the `dload_*` arrays are real and `dissipate` runs.
    pub dissipation: bool,
    /// Some replica has pair friction, some wall friction: the contact history `hist_*`, and
    /// `whist` (of `wall_slots` per particle), are real.
    pub friction: (bool, bool),
    pub wall_slots: u32,
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
    /// parts (`sizes::particle_part_len`).
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
    /// MAP_READ buffer: status words, one diagnostics record per replica, then every replica's
    /// watch and its flags (from `watch_offset`).
    readback: wgpu::Buffer,
    watch_offset: u64,
    /// The watch's bind groups (`watch::WatchLevels`), and whether this batch watches.
    watch: watch::WatchLevels,
    watching: bool,
    /// Bytes of the status words (batch-wide, then per replica).
    status_bytes: u64,
}

impl DemState {
    /// Allocates and fills the buffers of a batch (`StateInputs`), builds the bind groups and
    /// plans the chunks: the plan and its allocation (`plan`), the scan, main and reduction bind
    /// groups (`bind`), then the chunk plan taken on (`chunked::replan`).
    pub fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pipe: &DemPipeline,
        inputs: StateInputs<'_>,
    ) -> Result<DemState, GpuError> {
        let precision = pipe.precision;
        let shape = Shape::new(&inputs, precision, pipe.parts)?;
        let n = shape.layout.n;
        let a = Planned::new(inputs, &shape, precision).allocate(device, queue, inputs.memory_budget, n as u64)?;
        debug_assert!(PAGED.iter().all(|name| a.paged.contains_key(name)));
        let scan = bind::scan_levels(device, pipe, &a.buffers, &a.scan_aux, &a.scan_top, &a.scan_len)?;
        let bind = bind::main_groups(device, pipe, &a.buffers, precision, shape.parts)?;
        let (reduce_first, reduce, reduce_result) = bind::reduce_levels(device, pipe, &a.buffers, a.red_len)?;
        let watch = watch::WatchLevels::new(device, pipe, &a.buffers, precision, shape.parts, a.watch_len)?;
        let Shape {
            layout,
            buckets,
            parts,
            inc_offsets,
            inc_entries,
            status,
            table0,
            scan_lens,
            nbr_pages,
            break_capacity,
            ..
        } = shape;
        // What the chunk plan needs (`gpu::chunks`): each particle's lowest and highest bond,
        // and each level-0 reduction workgroup's bonds.
        let chunk_host = ChunkHost::new(inputs.models, &layout, inc_offsets, &table0);
        let layout_replicas = layout.replicas();
        let mut state = DemState {
            precision,
            n,
            n_bonds: layout.nb,
            layout,
            buckets: buckets as u32,
            scan_lens: scan_lens.iter().map(|&l| l as u32).collect(),
            steps: Vec::new(),
            grid_args: None,
            chunk_host,
            max_binding: inputs.max_binding,
            parts,
            max_buffer: inputs.max_buffer,
            paged: a.paged,
            chunks: ChunkPlan::default(),
            chunk_bind: HashMap::new(),
            break_capacity,
            nbr_entries: inputs.nbr_capacity as u64 * n as u64,
            nbr_max_capacity: inputs.nbr_capacity,
            nbr_offsets: Vec::new(),
            rupture: inputs.models.iter().any(|m| m.params.rupture.is_some()),
            dissipation: inputs.models.iter().any(|m| m.params.dissipation.is_some()),
            friction: (
                inputs.models.iter().any(|m| m.params.dissipation.is_some_and(|d| d.mu > 0.0)),
                inputs.models.iter().any(|m| m.params.dissipation.is_some_and(|d| d.mu_wall > 0.0)),
            ),
            wall_slots: plan::wall_slots(inputs.models),
            bytes: a.bytes,
            memory_budget: inputs.memory_budget,
            buffers: a.buffers,
            bind,
            scan,
            reduce_first,
            reduce,
            reduce_result,
            readback: a.readback,
            watch_offset: 4 * status.len() as u64 + (layout_replicas * super::shader::NQ * real_size(precision)) as u64,
            watch,
            watching: false,
            status_bytes: 4 * status.len() as u64,
        };
        let plan = state.plan_for(device, queue, &state.nbr_offsets_in_use(), nbr_pages, Some(&inc_entries))?;
        let plan = plan.map_err(|particle| GpuError::ChunkTooLarge { particle, max_binding: inputs.max_binding })?;
        state.replan(device, queue, pipe, plan)?;
        Ok(state)
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

    pub fn buffer(&self, name: &str) -> &wgpu::Buffer {
        &self.buffers[name]
    }
}
