//! `GpuEngine`: the `Engine` and `BatchEngine` interfaces on top of the pipeline and the GPU
//! state. One engine steps a batch of replicas (independent models, e.g. the variants of a
//! study) in one GPU state; a single model is the one-replica batch, through the same code. One
//! `advance` records all its steps into a few command buffers and waits once, reading back only
//! the status words and one diagnostics record per replica.
//!
//! Half-step scheduling: inside a batch, the closing half kick of step k and the opening half
//! kick of step k+1 are applied by the same kernel (two half kicks, so the arithmetic equals the
//! CPU's); only the last step of a batch ends with a lone closing half kick, so velocities are
//! full-step whenever diagnostics are read. The first step of a batch starts from full-step
//! velocities and the forces of the current state (evaluated in `new`, and again after
//! `load_state` and `rollback`, exactly as in `new`).
//!
//! Saved states and rollback: the forces are a function of the state alone (neighbour lists
//! sorted by index, so the time of the last rebuild leaves no trace), so restoring positions,
//! velocities, attitudes and angular velocities (and, with rupture, the broken flags) and
//! re-evaluating continues bit for bit. Re-evaluating the other replicas of a batch at their
//! current state changes nothing of them, so one replica is rolled back by range copies and one
//! evaluation of the batch.
//!
//! Replicas: each has its own parameters, walls, grid cell and skin, position frame, step,
//! diagnostics, rupture totals and failure; its contacts are searched among its own particles
//! only and its diagnostics reduced in an order set by its own indices, so a replica's
//! trajectory and diagnostics are bit for bit those of its model alone on the same device. A
//! replica that fails (non-finite, rrp-exact, grid range) stops changing on the device while the
//! others go on; through `BatchEngine` it is then rolled back to the start of the `advance`,
//! frozen and its error kept for `take_failure` (through `Engine`, the one replica's error is
//! returned as before, its state at the failing step). See docs/GPU.md, Batches.
//!
//! Rupture: the bond kernel appends a record per break; the records are read back at the end of
//! a batch (only when some bond broke), sorted by (replica, step, bond) and booked on the host,
//! which keeps each replica's `E_released` and `n_broken` (see docs/GPU.md, Rupture).
//!
//! Positions: a block of the replica's grid and an offset inside it in the engine's real type
//! (`gpu::frame`), so f32 resolves them to ~1e-7 of a cell edge wherever the model lies. Blocks
//! count from an origin per replica: the centre of its initial bounding box in f32, zero in f64.
//! Only the origin-dependent diagnostics see it: the host adds it back in snapshots, in `L`
//! (`o × P`) and in the gravity energy (`−M g·o`).

use super::batch::{BatchLayout, BatchTotals, binding_sizes};
use super::cache::{self, CacheKey, Lease};
use super::context::{AdapterChoice, GpuContext};
use super::error::GpuError;
use super::frame::{Frame, uses_blocks};
use super::params::{
    ParamInputs, ReplicaGpu32, ReplicaGpu64, ReplicaInputs, SimParams32, SimParams64, WallGpu32, WallGpu64,
};
use super::pipeline::DemPipeline;
use super::shader::{
    NQ, REC_E_ROT, REC_E_TRANS, REC_F_WALL, REC_L, REC_MASS_X, REC_P, REC_S, REC_U_AXIAL, REC_U_BEND, REC_U_CONTACT,
    REC_U_GRAVITY, REC_U_SHEAR, REC_U_WALL, RSTATUS_BAD_PARTICLE, RSTATUS_BAD_STEP, RSTATUS_EXACT_PARTICLE,
    RSTATUS_EXACT_STEP, RSTATUS_GRID_PARTICLE, RSTATUS_GRID_STEP, RSTATUS_LEN, STATUS_BREAKS, STATUS_LEN,
    STATUS_MAX_NBR, STATUS_NONE, STATUS_OVERFLOW,
};
use super::sizes::{INITIAL_NBR_CAPACITY, MAX_BREAK_RECORDS};
use super::state::{self, DemState, Stage, StateInputs};
use crate::diagnostics::Diagnostics;
use crate::engine::{BatchEngine, Engine, EngineInfo, EngineState, Precision, wrong_state_kind};
use crate::error::EngineError;
use crate::integrator::{Integrator, Kinematics};
use crate::interactions::BreakEvent;
use crate::model::Model;
use glam::{DQuat, DVec3};
use std::sync::Arc;

/// Steps recorded per command buffer (bounds encoder memory; submits are not waited on).
const STEPS_PER_SUBMIT: u64 = 256;

/// Steps between checks of the particle order (`Engine::order_check_interval`): a check reads
/// the state back and sorts the positions on the host, some 100 steps of an H100's time at
/// 10⁶ particles (10⁻⁹ s per particle-step against ~10⁻⁷ s per particle on the host), so 0.5 %
/// of the run at this interval: an estimate from the H100's throughput and the CPU's check,
/// not measured on a GPU.
pub(crate) const ORDER_CHECK_INTERVAL: u64 = 20_000;

/// Room a list of `c` entries is given beyond them when the lists are laid out after an
/// overflow, for the entries it gains until they are laid out again: a quarter more, plus 8.
/// The constant matters for short lists (a small sphere among large ones, a sphere in a void):
/// in a gas their counts swing by several entries whatever their length. In the polydisperse
/// cloud of tests/gpu_contacts.rs, drawn with 8 seeds, the largest gain of any list within 200
/// steps was 5–8 entries at skin 0.3 r_max and 7–8 at 0.6; the former constant, 4, let lists
/// overflow again after growing in 2 of the 8 clouds at 0.3 and 6 of 8 at 0.6, 8 in none (13.5
/// slots per list at 0.6, against 10.3). The quarter keeps long lists (dense packings, 12 or
/// more entries) some room in proportion.
fn nbr_headroom(c: u64) -> u64 {
    c / 4 + 8
}
/// Steps between the run driver's guard checks. Each check reads the diagnostics back: a host
/// wait that drains the device's queue, whereas the steps between checks are recorded and
/// submitted without waiting. 100 steps spread that wait over ~1000 dispatches, while a
/// rollback after a tripped guard throws away at most 100 steps.
const GUARD_INTERVAL: u64 = 100;
/// Most steps `time_stages` times at once (wgpu's 4096 queries per set, 8 per step).
pub const MAX_TIMED_STEPS: u32 = 4096 / 8;
/// Bytes of the origin at the head of a saved state: three little-endian f64 (the frame's
/// origin; its edge follows from the model).
const ORIGIN_BYTES: usize = 24;
/// Bytes of the rupture totals in a saved state with rupture: `E_released` (f64), `n_broken`
/// (u64); the broken flags (one u32 per bond) follow.
const RUPTURE_TOTALS_BYTES: usize = 16;

/// Tuning options of `GpuEngine::with_options` and `GpuEngine::new_batch`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuOptions {
    /// Caps the workgroups per dispatch dimension below the adapter's limit, so that the 2-D
    /// folding of large dispatches can be exercised on small systems.
    pub max_workgroups_per_dimension: Option<u32>,
    /// Caps the bytes per buffer binding below the adapter's limit (tests of the size check).
    pub max_binding_size: Option<u64>,
    /// Caps the bytes of each buffer ("page") the chunked arrays are stored in below the
    /// adapter's buffer limit, so that their paging (`gpu::chunks::Pages`) can be exercised on
    /// small systems. The arrays bound whole are not affected.
    pub page_size: Option<u64>,
    /// Initial capacity of each neighbour list (tests use a tiny one to exercise overflows).
    pub nbr_capacity: Option<u32>,
    /// Caps the bytes of device memory the state's buffers may take (beyond it, allocation fails
    /// as if the device were out of memory): leaves room for other work on a shared device, and
    /// lets tests exercise the out-of-memory report.
    pub memory_budget: Option<u64>,
    /// Counts positions from the coordinate origin instead of the centre of each replica's
    /// bounding box, so that a model far from the origin is stored far out in blocks (tests of
    /// the position frames, `gpu::frame`).
    pub origin_at_zero: bool,
    /// Opens a device of its own instead of taking one from the process-wide cache (see
    /// `cache`), and closes it when the engine is dropped: for comparisons with a fresh device.
    pub fresh_device: bool,
    /// Caps the break records one batch of steps holds below `MAX_BREAK_RECORDS` (tests of
    /// the overflow, after which the advance is taken again in shorter batches).
    pub max_break_records: Option<u64>,
}

/// What the host keeps of one replica.
struct Replica {
    params: crate::model::Params,
    /// Block edge and origin of the stored positions (see the module note).
    frame: Frame,
    total_mass: f64,
    inv_cell: f64,
    skin: f64,
    /// Its bonds' reference attitudes are per bond, not per particle (`FLAG_BOND_Q0`).
    bond_attitudes: bool,
    /// Its bonds' reference directions and lengths are per bond (`FLAG_BOND_REF`).
    bond_refs: bool,
    /// Ends (i, j) of every bond, replica-relative, for the break events.
    bond_ends: Vec<(u32, u32)>,
    /// Steps this replica has taken.
    step: u64,
    diag: Diagnostics,
    /// Step at the start of the last `advance`, whose state the backup buffers hold (`None`
    /// before the first `advance` and after `load_state`).
    backup_step: Option<u64>,
    /// Bond energy released by ruptures so far, summed on the host over the sorted events
    /// (step, then bond order, as on the CPU): deterministic without float atomics.
    e_released: f64,
    n_broken: u64,
    /// `e_released` and `n_broken` at the start of the last `advance` (for `rollback`).
    backup_rupture: (f64, u64),
    /// A failure found by `BatchEngine::advance`, not yet taken.
    failure: Option<EngineError>,
    /// Frozen: the kernels leave it alone (FLAG_HELD).
    held: bool,
}

pub struct GpuEngine {
    ctx: Arc<GpuContext>,
    pipe: Arc<DemPipeline>,
    state: DemState,
    integrator: Integrator,
    dt: f64,
    precision: Precision,
    reps: Vec<Replica>,
    /// Neighbour-list layouts set since the engine was built (`plan_nbr_offsets`).
    nbr_layouts: u64,
    /// Longest neighbour list an overflowing rebuild found, and whether the lists could not be
    /// given room for it (for the fallback warning).
    longest_list: u32,
    lists_stuck: bool,
    /// While `time_stages` runs: its timestamp queries (8 per step).
    stage_queries: Option<wgpu::QuerySet>,
    /// The next batch starts with a rebuild (after the neighbour lists were reallocated, or a
    /// failure or a rollback left them stale).
    rebuild_next: bool,
    /// Steps taken by the running replicas.
    step: u64,
    /// Breaks not yet taken by `take_breaks`, as (replica, event).
    breaks: Vec<(usize, BreakEvent)>,
    /// Steps run in batches where some neighbour list overflowed (see `fallback_steps`).
    fallback_steps: u64,
    /// The last batch broke more bonds than the break records hold: `run` goes back to the
    /// advance's start and takes shorter batches.
    break_overflow: bool,
    /// What it was built with (`renumber` builds it again).
    adapter: AdapterChoice,
    options: GpuOptions,
    /// The device and kernels this engine holds; last, so that the state's buffers are gone
    /// before the device goes back to the cache.
    _lease: Lease,
}

impl GpuEngine {
    /// Opens a device, uploads the model and evaluates the initial forces and diagnostics.
    pub fn new(
        model: &Model,
        integrator: Integrator,
        dt: f64,
        precision: Precision,
        adapter: AdapterChoice,
    ) -> Result<GpuEngine, GpuError> {
        GpuEngine::with_options(model, integrator, dt, precision, adapter, GpuOptions::default())
    }

    /// `new` with tuning options (tests use them to force folded dispatches): the one-replica
    /// batch, whose initial state must be sound.
    pub fn with_options(
        model: &Model,
        integrator: Integrator,
        dt: f64,
        precision: Precision,
        adapter: AdapterChoice,
        options: GpuOptions,
    ) -> Result<GpuEngine, GpuError> {
        let mut e = GpuEngine::new_batch(&[model], integrator, dt, precision, adapter, options)?;
        match e.reps[0].failure.take() {
            Some(EngineError::Gpu(g)) => Err(g),
            Some(other) => Err(GpuError::InitialState(Box::new(other))),
            None => Ok(e),
        }
    }

    /// A batch of replicas, one per model, stepped in lockstep with one integrator and time
    /// step (see the module note). A replica whose initial state fails is frozen with its
    /// error kept for `take_failure` (the others go on). At least one model.
    pub fn new_batch(
        models: &[&Model],
        integrator: Integrator,
        dt: f64,
        precision: Precision,
        adapter: AdapterChoice,
        options: GpuOptions,
    ) -> Result<GpuEngine, GpuError> {
        if models.is_empty() {
            return Err(GpuError::EmptyBatch);
        }
        let key = CacheKey { adapter, precision, max_workgroups: options.max_workgroups_per_dimension };
        let lease = cache::lease(key, options.fresh_device)?;
        GpuEngine::build(lease, models, integrator, dt, precision, adapter, options)
    }

    /// `new_batch` on the device and kernels of `lease`.
    fn build(
        lease: Lease,
        models: &[&Model],
        integrator: Integrator,
        dt: f64,
        precision: Precision,
        adapter: AdapterChoice,
        options: GpuOptions,
    ) -> Result<GpuEngine, GpuError> {
        let ctx = lease.ctx.clone();
        let n: u64 = models.iter().map(|m| m.particles.len() as u64).sum();
        let have = ctx.limits.max_storage_buffer_binding_size.min(ctx.limits.max_buffer_size);
        let have = options.max_binding_size.map_or(have, |m| m.min(have));
        // Per-particle arrays larger than a binding are bound in two parts (`shader::Parts`),
        // by kernels compiled for that, from one buffer each.
        let part_len = super::sizes::particle_part_len(n, precision, have);
        if let Some(p) = part_len {
            let have_storage = ctx.limits.max_storage_buffers_per_shader_stage;
            if have_storage < super::context::STORAGE_BUFFERS_NEEDED_PARTS {
                return Err(GpuError::TooFewStorageBuffers {
                    adapter: ctx.adapter_name.clone(),
                    have: have_storage,
                    need: super::context::STORAGE_BUFFERS_NEEDED_PARTS,
                });
            }
            let elem = super::sizes::particle_elem(precision);
            let max_particles = (2 * p).min(ctx.limits.max_buffer_size / elem);
            if n > max_particles {
                return Err(GpuError::TooLarge {
                    adapter: ctx.adapter_name.clone(),
                    what: "particle arrays (vec4 per particle, in two bindings of one buffer)",
                    need: n * elem,
                    have: max_particles * elem,
                    max_particles,
                });
            }
        }
        let pipe = match part_len {
            Some(_) => Arc::new(DemPipeline::with_parts(
                &ctx.device,
                precision,
                lease.pipe.max_workgroups(),
                super::shader::Parts::Two,
            )?),
            None => lease.pipe.clone(),
        };
        let nbr_capacity = options.nbr_capacity.unwrap_or(INITIAL_NBR_CAPACITY).max(1);
        let max_buffer = options.page_size.map_or(ctx.limits.max_buffer_size, |m| m.min(ctx.limits.max_buffer_size));
        // Per particle where the bonds agree on it (always, for models built from their initial
        // state, and for checkpoints): `q_ref`; per bond otherwise.
        let ref_q: Vec<_> = models.iter().map(|m| m.reference_attitudes()).collect();
        // Likewise the reference directions and lengths, from the particles' positions where the
        // bonds were made from them; per bond otherwise.
        let ref_x: Vec<_> = models.iter().map(|m| m.reference_positions()).collect();
        let mut totals = BatchTotals::default();
        for (m, (q, x)) in models.iter().zip(ref_q.iter().zip(&ref_x)) {
            totals.add_with(m, q.is_none(), x.is_none());
        }
        // Arrays bound whole must fit a binding; those bound in parts (`gpu::chunks`) are paged
        // over as many buffers as they need.
        // Neighbour-list slots and incidence entries are indexed by u32 (`nbr_offsets`,
        // `inc_offsets`, `2·bond + end`).
        let slots = totals.n.saturating_mul(nbr_capacity as u64);
        let need = slots.max(2 * totals.nb + 1);
        if need > u32::MAX as u64 {
            return Err(GpuError::TooManyIndices {
                what: if slots > 2 * totals.nb { "neighbour-list slots" } else { "incidence entries" },
                need,
                max_particles: (n as u128 * u32::MAX as u128 / need as u128) as u64,
            });
        }
        let mut sizes = binding_sizes(&totals, precision);
        if part_len.is_some() {
            // Checked above, in two parts.
            sizes.retain(|s| s.0 != super::batch::PARTICLE_ARRAYS);
        }
        if sizes.iter().any(|&(_, need)| need > have) {
            // How many particles fit is set by the tightest buffer, not the first that fails.
            let fits = |need: u64| (n as u128 * have as u128 / need as u128) as u64;
            let (what, need) = sizes
                .iter()
                .copied()
                .filter(|&(_, need)| need > 0)
                .min_by_key(|&(_, need)| fits(need))
                .unwrap_or(("particle arrays", 0));
            return Err(GpuError::TooLarge {
                adapter: ctx.adapter_name.clone(),
                what,
                need,
                have,
                max_particles: fits(need.max(1)),
            });
        }
        let reps: Vec<Replica> = models
            .iter()
            .zip(ref_q.iter().zip(&ref_x))
            .map(|(model, (ref_q, ref_x))| {
                // List candidates are at most r_i + r_j + skin ≤ 2 r_max + skin apart: one cell.
                let skin = crate::grid::SKIN_FACTOR * model.max_radius();
                let cell = (2.0 * model.max_radius() + skin).max(f64::MIN_POSITIVE);
                let origin = match precision {
                    // The reference positions' box: the same origin for a resumed run as for the
                    // run it continues, so that its reference positions split the same.
                    Precision::F32 if !options.origin_at_zero => {
                        bounding_box_centre(model.reference_x.as_deref().unwrap_or(&model.particles.x))
                    }
                    _ => DVec3::ZERO,
                };
                Replica {
                    params: model.params.clone(),
                    frame: Frame::new(origin, cell, precision),
                    total_mass: model.particles.mass.iter().sum(),
                    inv_cell: 1.0 / cell,
                    skin,
                    bond_attitudes: ref_q.is_none(),
                    bond_refs: ref_x.is_none(),
                    bond_ends: model.bonds.iter().map(|b| (b.i, b.j)).collect(),
                    step: 0,
                    diag: Diagnostics::default(),
                    backup_step: None,
                    e_released: 0.0,
                    n_broken: 0,
                    backup_rupture: (0.0, 0),
                    failure: None,
                    held: false,
                }
            })
            .collect();
        let layout = BatchLayout::new(models);
        let frames: Vec<Frame> = reps.iter().map(|r| r.frame).collect();
        let walls: Vec<u8> = reps.iter().flat_map(|r| walls_bytes(&r.params.walls, &r.frame, precision)).collect();
        let global = ParamInputs {
            integrator,
            h: dt,
            n_particles: layout.n,
            n_bonds: layout.nb,
            mask: (super::batch::bucket_count(layout.n as u64, have) - 1) as u32,
            n_replicas: models.len() as u32,
            part_len: part_len.map_or(layout.n, |p| p as u32),
        };
        let params = params_bytes(&global, precision, 0);
        let reps_b = reps_bytes(&reps, &layout, precision);
        let inputs = StateInputs {
            models,
            ref_q: &ref_q,
            ref_x: &ref_x,
            frames: &frames,
            params_bytes: &params,
            reps_bytes: &reps_b,
            walls_bytes: &walls,
            nbr_capacity,
            memory_budget: options.memory_budget,
            max_binding: have,
            max_buffer,
            max_break_records: options.max_break_records.map_or(MAX_BREAK_RECORDS, |m| m.clamp(1, MAX_BREAK_RECORDS)),
        };
        let state = DemState::new(&ctx.device, &ctx.queue, &pipe, inputs)?;
        let mut e = GpuEngine {
            ctx,
            pipe,
            state,
            integrator,
            dt,
            precision,
            reps,
            stage_queries: None,
            nbr_layouts: 0,
            longest_list: 0,
            lists_stuck: false,
            rebuild_next: false,
            step: 0,
            breaks: Vec::new(),
            fallback_steps: 0,
            break_overflow: false,
            adapter,
            options,
            _lease: lease,
        };
        let failures = e.evaluate_current().map_err(|err| match err {
            EngineError::Gpu(g) => g,
            other => GpuError::InitialState(Box::new(other)),
        })?;
        for (r, err) in failures {
            e.reps[r].failure = Some(err);
            e.reps[r].held = true;
        }
        e.write_reps();
        Ok(e)
    }

    /// The limits `split_batches` needs for batches on this adapter: (the bytes one buffer
    /// binding may hold, the memory budget), as `new_batch` with these options would apply them.
    /// Opens the device (or takes it from the cache, where it goes back at once).
    pub fn batch_limits(
        adapter: AdapterChoice,
        precision: Precision,
        options: GpuOptions,
    ) -> Result<(u64, Option<u64>), GpuError> {
        let key = CacheKey { adapter, precision, max_workgroups: options.max_workgroups_per_dimension };
        let lease = cache::lease(key, options.fresh_device)?;
        let have = lease.ctx.limits.max_storage_buffer_binding_size.min(lease.ctx.limits.max_buffer_size);
        Ok((options.max_binding_size.map_or(have, |m| m.min(have)), options.memory_budget))
    }

    /// Forces, moments and diagnostics of the current state of every running replica, with
    /// fresh neighbour lists, as at the start of a run. If a list overflows, the forces are
    /// still exact (grid fallback) but the lists are reallocated, where they can grow, and
    /// built again. Returns the replicas whose state fails.
    fn evaluate_current(&mut self) -> Result<Vec<(usize, EngineError)>, EngineError> {
        loop {
            let layout = self.nbr_layouts;
            self.ctx.queue.write_buffer(self.state.buffer("params"), 0, &self.params_bytes(0));
            self.state.reset_status(&self.ctx.queue, true);
            let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
            self.state.record_initial(&self.pipe, &mut encoder);
            self.state.record_readback(&self.pipe, &mut encoder);
            self.ctx.queue.submit([encoder.finish()]);
            let failures = self.finish_batch(0)?;
            if !self.rebuild_next || self.nbr_layouts == layout || !failures.is_empty() {
                return Ok(failures);
            }
        }
    }

    /// Destroys the device, as a driver reset or a removed GPU would end it: for tests of the
    /// device-loss path. Every later call fails with `GpuError::DeviceLost`.
    pub fn destroy_device(&self) {
        self.ctx.destroy_device();
    }

    /// Bytes of device memory the engine's state buffers take.
    pub fn device_bytes(&self) -> u64 {
        self.state.bytes
    }

    /// Steps run in batches in which some neighbour list overflowed its capacity, so that from
    /// the overflowing step to the end of the batch (at most 100 steps under the run driver) the
    /// overflowing lists fell back to the grid: same results, more work. After an overflow the
    /// lists grow, so this stays 0 for a run whose lists could grow in time (an overflow in `new`
    /// counts no steps); it keeps rising while they cannot (binding limit, memory budget, out of
    /// device memory). Steps later undone by `rollback` stay counted: they were run.
    pub fn fallback_steps(&self) -> u64 {
        self.fallback_steps
    }

    /// Capacity of each Verlet neighbour list (grows after an overflow).
    /// Runs `steps` steps (at most `MAX_TIMED_STEPS`) of a one-replica engine with a timestamp
    /// before and after each stage, and returns the mean device time per step of each stage
    /// (`Stage::ALL` order) in seconds; `None` where the adapter has no timestamp queries. The
    /// steps are real steps of the run; each stage is its own compute pass while timed.
    pub fn time_stages(&mut self, steps: u32) -> Result<Option<Vec<(&'static str, f64)>>, EngineError> {
        self.single("time_stages")?;
        if !self.ctx.timestamps {
            return Ok(None);
        }
        let steps = steps.clamp(1, MAX_TIMED_STEPS);
        let count = 2 * Stage::ALL.len() as u32 * steps;
        let set = self.ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("stages"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        self.stage_queries = Some(set);
        let ran = self.run(steps as u64);
        let set = self.stage_queries.take();
        if let Some((_, err)) = ran?.into_iter().next() {
            return Err(err);
        }
        let set = set.ok_or_else(|| EngineError::Unsupported("the stage queries vanished".into()))?;
        let bytes = 8 * count as u64;
        let resolve = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("stages resolve"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let staging = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("stages readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        encoder.resolve_query_set(&set, 0..count, &resolve, 0);
        encoder.copy_buffer_to_buffer(&resolve, 0, &staging, 0, bytes);
        self.ctx.queue.submit([encoder.finish()]);
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&super::context::map_read(&self.ctx.device, &staging)?);
        self.ctx.take_error()?;
        // Nanoseconds per tick; a timestamp pair that went backwards (a reset counter) counts 0.
        let period = self.ctx.queue.get_timestamp_period() as f64 * 1e-9;
        Ok(Some(
            Stage::ALL
                .iter()
                .enumerate()
                .map(|(k, s)| {
                    let total: u64 = (0..steps as usize)
                        .map(|t| {
                            let at = 2 * (t * Stage::ALL.len() + k);
                            ticks[at + 1].saturating_sub(ticks[at])
                        })
                        .sum();
                    (s.name(), total as f64 * period / steps as f64)
                })
                .collect(),
        ))
    }

    /// The largest capacity of one neighbour list (all equal until some list overflowed; then
    /// each list's capacity follows its own count, see `plan_nbr_offsets`).
    pub fn neighbour_capacity(&self) -> u32 {
        self.state.nbr_max_capacity
    }

    /// Chunks of the kernels dispatched in parts (`gpu::chunks`): particle ranges, bond ranges
    /// and reduction-workgroup ranges (1, 1, 1 when every array fits one binding).
    pub fn chunk_counts(&self) -> (usize, usize, usize) {
        self.state.chunk_counts()
    }

    /// Particles in the first of the two parts the per-particle arrays are bound in, when one
    /// binding cannot hold them (`shader::Parts::Two`); `None` when they are bound whole.
    pub fn particle_part_len(&self) -> Option<u32> {
        let p = self.state.part_len();
        (p < self.state.n).then_some(p)
    }

    /// Contact-list entries of the last rebuild, over all particles (reads the counts back: a
    /// host wait, for reports such as `rrpdem bench`'s traffic estimate).
    pub fn neighbour_entries_in_use(&mut self) -> Result<u64, EngineError> {
        let counts = self.state.read_nbr_counts(&self.ctx.device, &self.ctx.queue)?;
        Ok(counts.iter().map(|&c| c as u64).sum())
    }

    /// Bytes of each state buffer by name, largest first (`rrpdem bench`'s report).
    pub fn buffer_parts(&self) -> Vec<(&'static str, u64)> {
        self.state.buffer_parts()
    }

    /// Results of far bonds that particle chunks read from the halo (`gpu::chunks`).
    pub fn halo_entries(&self) -> usize {
        self.state.halo_entries()
    }

    /// Buffers ("pages", `gpu::chunks::Pages`) of the per-bond arrays, the incidence entries
    /// and the neighbour lists (1, 1, 1 when each fits one buffer).
    pub fn page_counts(&self) -> (usize, usize, usize) {
        self.state.page_counts()
    }

    /// Slots of all neighbour lists together.
    pub fn neighbour_entries(&self) -> u64 {
        self.state.nbr_entries
    }

    /// Bytes of a saved state of replica r (see `save_state`).
    fn state_bytes(&self, r: usize) -> usize {
        let l = &self.state.layout;
        let rupture = if l.rupture[r] { RUPTURE_TOTALS_BYTES + 4 * l.n_bonds[r] as usize } else { 0 };
        let cells = if uses_blocks(self.precision) { super::sizes::CELL_BYTES * l.n_particles[r] as usize } else { 0 };
        ORIGIN_BYTES + state::STATE_ARRAYS.len() * self.state.array_bytes(r) + cells + rupture
    }

    fn params_bytes(&self, batch_len: u32) -> Vec<u8> {
        let inputs = ParamInputs {
            integrator: self.integrator,
            h: self.dt,
            n_particles: self.state.n,
            n_bonds: self.state.n_bonds,
            mask: self.state.buckets - 1,
            n_replicas: self.reps.len() as u32,
            part_len: self.state.part_len(),
        };
        params_bytes(&inputs, self.precision, batch_len)
    }

    /// Uploads the per-replica parameters (after a replica was frozen or thawed).
    fn write_reps(&self) {
        let bytes = reps_bytes(&self.reps, &self.state.layout, self.precision);
        self.ctx.queue.write_buffer(self.state.buffer("reps"), 0, &bytes);
    }

    fn time(&self, step: u64) -> f64 {
        step as f64 * self.dt
    }

    /// Waits for the batch of `steps` steps just submitted, reads status and diagnostics and
    /// turns each running replica's recorded failure into the engine error the CPU engine would
    /// give for its model; returns those (by replica).
    ///
    /// The report names the lowest failing particle of the replica's first failing step,
    /// whatever the workgroup schedule (see `failed_before` in shaders/bindings.wgsl). After a
    /// failure every kernel stops on that replica from the next step on (from the check itself
    /// for rrp-exact, from the grid for a position the grid refuses): its positions and
    /// attitudes are those of the failing step. For rrp-exact failing after the first step of a
    /// batch, velocities already carry that step's opening half kick (it was fused into the
    /// previous step); the error's `value` is computed from them.
    fn finish_batch(&mut self, steps: u64) -> Result<Vec<(usize, EngineError)>, EngineError> {
        self.ctx.wait()?;
        self.ctx.take_error()?;
        let (status, rec) = self.state.read_status(&self.ctx.device)?;
        // Breaks first: a failing replica keeps those it made (the kernels freeze after a
        // failure), and `rollback` drops the ones after the step it returns to, as on the CPU.
        if status[STATUS_BREAKS] as u64 > self.state.break_capacity {
            // Records were lost: `run` takes this advance again in shorter batches.
            self.break_overflow = true;
            return Ok(Vec::new());
        }
        if status[STATUS_BREAKS] != 0 {
            self.collect_breaks(steps, status[STATUS_BREAKS])?;
        }
        let mut failures = Vec::new();
        for r in 0..self.reps.len() {
            if self.reps[r].held {
                continue;
            }
            let w = |slot: usize| status[STATUS_LEN + r * RSTATUS_LEN + slot];
            if let Some(err) = self.replica_failure(r, steps, &w)? {
                failures.push((r, err));
                continue;
            }
            let rep = &self.reps[r];
            let step = rep.step + steps;
            let mut d = diagnostics_from_record(&rec[r * NQ..(r + 1) * NQ], step, self.time(step));
            d.l += rep.frame.origin.cross(d.p);
            if rep.params.gravity != DVec3::ZERO {
                d.u_gravity -= rep.total_mass * rep.params.gravity.dot(rep.frame.origin);
            }
            // The record holds Σ m (x − origin): Σ m x = that + M·origin (as the CPU, Σ m x / M).
            d.x_cm = (d.x_cm + rep.total_mass * rep.frame.origin) / rep.total_mass;
            d.v_cm = d.p / rep.total_mass;
            d.e_released = rep.e_released;
            d.n_broken = rep.n_broken;
            let rep = &mut self.reps[r];
            rep.step = step;
            rep.diag = d;
        }
        self.step += steps;
        // After an overflow the forces stayed exact (grid fallback). The next batch must start
        // with a rebuild (its first step would otherwise use the lists without a fresh grid);
        // the lists get room for it where the binding limit allows. After a failure the grid and
        // lists of the failing replica stopped at the failing step: whatever runs next rebuilds.
        let overflow = status[STATUS_OVERFLOW] != 0;
        self.rebuild_next = overflow || !failures.is_empty();
        if overflow {
            self.fallback_steps += steps;
            self.longest_list = self.longest_list.max(status[STATUS_MAX_NBR]);
            // Each list gets room for its own count (a one-off read of one u32 per particle):
            // a few long lists no longer cost every particle their length.
            let counts = self.state.read_nbr_counts(&self.ctx.device, &self.ctx.queue)?;
            let planned = plan_nbr_offsets(&counts, &self.state.nbr_offsets);
            if let Some(offsets) = planned
                && self.state.set_nbr_offsets(&self.ctx.device, &self.ctx.queue, &self.pipe, offsets)?
            {
                self.nbr_layouts += 1;
            } else {
                self.lists_stuck = true;
            }
            // (If they cannot grow, the lists keep falling back to the grid: same results.)
        }
        Ok(failures)
    }

    /// The error of replica r's failure recorded in its status words `w` (None if it has
    /// none); sets the replica's step to the failing one, as the CPU engine stops there.
    fn replica_failure(
        &mut self,
        r: usize,
        steps: u64,
        w: &dyn Fn(usize) -> u32,
    ) -> Result<Option<EngineError>, EngineError> {
        let failed = |slot: usize| w(slot) != STATUS_NONE;
        let start = self.reps[r].step;
        let p0 = self.state.layout.p_start[r] as usize;
        if failed(RSTATUS_EXACT_STEP) {
            let s = w(RSTATUS_EXACT_STEP) as u64;
            let particle = w(RSTATUS_EXACT_PARTICLE) as usize - p0;
            self.reps[r].step = start + s;
            let arrays =
                self.state.read_arrays(&self.ctx.device, &self.ctx.queue, &["omega", "moment", "inertial"], r)?;
            let at = |a: &Vec<f64>| DVec3::new(a[4 * particle], a[4 * particle + 1], a[4 * particle + 2]);
            let h = self.dt;
            // The opening kick is applied by the check only at the first step of a batch.
            let kick = if s == 0 { 0.5 * h } else { 0.0 };
            let wh = at(&arrays[0]) + at(&arrays[1]) * (kick * arrays[2][4 * particle + 3]);
            return Ok(Some(EngineError::RrpExactCondition {
                particle,
                step: start + s,
                t: self.time(start + s),
                value: h * h * wh.length_squared(),
            }));
        }
        // A position the grid refuses stops the step before its forces (as on the CPU), so at
        // most one of the two is set; the grid's comes first if both were.
        let grid = failed(RSTATUS_GRID_STEP);
        if !grid && !failed(RSTATUS_BAD_STEP) {
            return Ok(None);
        }
        let (s, particle) = if grid {
            (w(RSTATUS_GRID_STEP) as u64, w(RSTATUS_GRID_PARTICLE) as usize - p0)
        } else {
            (w(RSTATUS_BAD_STEP) as u64, w(RSTATUS_BAD_PARTICLE) as usize - p0)
        };
        // The failure shows in the force evaluation that ends step s (step index s + 1 of the
        // run), or in the initial evaluation of `new`.
        let step = if steps == 0 { start } else { start + s + 1 };
        self.reps[r].step = step;
        let a = self.state.read_arrays(&self.ctx.device, &self.ctx.queue, &["pos", "vel", "omega", "force"], r)?;
        let v = |k: usize| DVec3::new(a[k][4 * particle], a[k][4 * particle + 1], a[k][4 * particle + 2]);
        let blocks = self.state.read_cells(&self.ctx.device, &self.ctx.queue, r)?;
        let x = self.reps[r].frame.join(blocks[particle], v(0));
        Ok(Some(if grid && x.is_finite() {
            EngineError::OutOfRange { particle, step, position: format!("{x}") }
        } else {
            EngineError::NonFinite {
                particle,
                step,
                t: self.time(step),
                what: format!("x = {x}, v = {}, Ω = {}, F = {}", v(1), v(2), v(3)),
            }
        }))
    }

    /// Reads the `count` break records of the batch of `steps` steps just run, sorts them by
    /// (replica, step, bond) and books them: each replica's energies are added to its
    /// `E_released` in step then bond order, as the CPU engine adds them.
    fn collect_breaks(&mut self, steps: u64, count: u32) -> Result<(), EngineError> {
        let (at, ids) = self.state.read_breaks(&self.ctx.device, &self.ctx.queue, count)?;
        let layout = &self.state.layout;
        let mut found: Vec<(usize, BreakEvent)> = at
            .iter()
            .zip(&ids)
            .map(|(a, &[k, s, mode])| {
                let r = layout.replica_of_bond(k);
                let rep = &self.reps[r];
                let bond = k - layout.b_start[r];
                // The evaluation at batch step s ends step s + 1 of the batch; the initial one
                // (no steps) is that of the current state.
                let step = if steps == 0 { rep.step } else { rep.step + s as u64 + 1 };
                let (i, j) = rep.bond_ends[bond as usize];
                let x = DVec3::new(a[0], a[1], a[2]) + rep.frame.origin;
                (r, BreakEvent { step, t: self.time(step), bond, i, j, mode: mode as u8, x, energy: a[3] })
            })
            .collect();
        found.sort_by_key(|(r, e)| (*r, e.step, e.bond));
        for (r, e) in &found {
            self.reps[*r].e_released += e.energy;
            self.reps[*r].n_broken += 1;
        }
        self.breaks.extend(found);
        Ok(())
    }

    /// Runs one batch of at most u32::MAX steps; with `backup`, its first command buffer starts
    /// by copying the state arrays for `rollback`. Returns the replicas that failed in it.
    fn advance_batch(&mut self, steps: u32, backup: bool) -> Result<Vec<(usize, EngineError)>, EngineError> {
        self.ctx.queue.write_buffer(self.state.buffer("params"), 0, &self.params_bytes(steps));
        self.state.reset_status(&self.ctx.queue, self.rebuild_next);
        let mut done = 0u64;
        while done < steps as u64 {
            let chunk = STEPS_PER_SUBMIT.min(steps as u64 - done);
            let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
            if backup && done == 0 {
                self.state.record_backup(&mut encoder);
            }
            for k in 0..chunk {
                let queries = self
                    .stage_queries
                    .as_ref()
                    .map(|set| state::StageQueries { set, base: (2 * Stage::ALL.len() as u64 * (done + k)) as u32 });
                self.state.record_step(&self.pipe, &mut encoder, self.integrator, done + k == 0, queries);
            }
            done += chunk;
            if done == steps as u64 {
                self.state.record_readback(&self.pipe, &mut encoder);
            }
            self.ctx.queue.submit([encoder.finish()]);
        }
        self.finish_batch(steps as u64)
    }

    /// Marks the start of an `advance`: the backup point of every replica (the backup copies
    /// hold every replica's state, a frozen one's too).
    fn begin_advance(&mut self) {
        for rep in self.reps.iter_mut() {
            rep.backup_step = Some(rep.step);
            rep.backup_rupture = (rep.e_released, rep.n_broken);
        }
    }

    /// Copies replica r's backup ranges back (queued) and resets its host side to the backup
    /// point: step, rupture totals, breaks after that step. The caller re-evaluates.
    fn restore_replica(&mut self, r: usize) -> bool {
        let Some(step) = self.reps[r].backup_step else {
            return false; // no advance since the engine was built or loaded
        };
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        self.state.record_restore(&mut encoder, r);
        self.ctx.queue.submit([encoder.finish()]);
        let rep = &mut self.reps[r];
        rep.step = step;
        (rep.e_released, rep.n_broken) = rep.backup_rupture;
        // Breaks after the restored step never happened.
        self.breaks.retain(|(q, e)| *q != r || e.step <= step);
        // Its lists were built for the state it leaves.
        self.rebuild_next = true;
        true
    }

    /// Re-evaluates the batch so that the replicas in `thaw` (restored, perhaps frozen) get the
    /// forces and diagnostics of their state; those frozen before stay frozen. The running
    /// replicas' forces and diagnostics come out unchanged (functions of their state).
    fn evaluate_thawed(&mut self, thaw: &[usize]) -> Result<(), EngineError> {
        let held: Vec<bool> = thaw.iter().map(|&r| self.reps[r].held).collect();
        for &r in thaw {
            self.reps[r].held = false;
        }
        self.write_reps();
        let failures = self.evaluate_current();
        for (&r, h) in thaw.iter().zip(held) {
            self.reps[r].held = h;
        }
        for (r, err) in failures? {
            // A running replica cannot fail at a state it already passed; keep it safe anyway.
            self.reps[r].held = true;
            self.reps[r].failure.get_or_insert(err);
        }
        self.write_reps();
        Ok(())
    }

    /// Runs `steps` steps of every running replica; returns the failures (replica, error),
    /// each replica's state left at its failing step.
    fn run(&mut self, steps: u64) -> Result<Vec<(usize, EngineError)>, EngineError> {
        self.ctx.check_lost()?;
        self.begin_advance();
        if steps == 0 {
            let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
            self.state.record_backup(&mut encoder);
            self.ctx.queue.submit([encoder.finish()]);
            return Ok(Vec::new());
        }
        let step0 = self.step;
        // Batches as long as the step counter allows; after more breaks in one batch than the
        // break records hold, every replica goes back to the advance's start (the backup) and
        // the advance is taken again in batches a quarter as long. Results do not depend on
        // where batches end (the lists' rebuilds do not change forces), so nothing changes
        // but the records kept.
        let mut longest = u32::MAX as u64 / 2;
        loop {
            let mut left = steps;
            let mut first = true;
            let mut failures = Vec::new();
            let mut batch = longest;
            self.break_overflow = false;
            while left > 0 {
                batch = left.min(longest);
                let found = self.advance_batch(batch as u32, first)?;
                first = false;
                if self.break_overflow {
                    break;
                }
                left -= batch;
                if !found.is_empty() && left > 0 {
                    // Later batches must leave the failed replicas as they are.
                    for (r, _) in &found {
                        self.reps[*r].held = true;
                    }
                    self.write_reps();
                }
                failures.extend(found);
            }
            for (r, _) in &failures {
                self.reps[*r].held = false;
            }
            if !self.break_overflow {
                return Ok(failures);
            }
            self.break_overflow = false;
            if batch == 1 {
                return Err(EngineError::Unsupported(format!(
                    "more than {} bonds broke in one step, more than the break records hold on this adapter",
                    self.state.break_capacity
                )));
            }
            for r in 0..self.reps.len() {
                self.restore_replica(r);
            }
            self.step = step0;
            let all: Vec<usize> = (0..self.reps.len()).collect();
            self.evaluate_thawed(&all)?;
            longest = (batch / 4).max(1);
        }
    }

    /// The engine as one model: its methods need a one-replica batch.
    fn single(&self, what: &str) -> Result<(), EngineError> {
        if self.reps.len() == 1 {
            return Ok(());
        }
        Err(EngineError::Unsupported(format!(
            "`{what}` of the Engine interface needs a one-replica GPU engine; this one steps {} replicas (use              BatchEngine)",
            self.reps.len()
        )))
    }

    fn check_replica(&self, r: usize) -> Result<(), EngineError> {
        if r < self.reps.len() {
            return Ok(());
        }
        Err(EngineError::Unsupported(format!("replica {r} does not exist (the batch has {})", self.reps.len())))
    }

    fn snapshot_of(&mut self, r: usize) -> Result<Vec<Kinematics>, EngineError> {
        self.ctx.check_lost()?;
        self.check_replica(r)?;
        let a = self.state.read_arrays(&self.ctx.device, &self.ctx.queue, &state::STATE_ARRAYS, r)?;
        let v = |k: usize, i: usize| DVec3::new(a[k][4 * i], a[k][4 * i + 1], a[k][4 * i + 2]);
        let blocks = self.state.read_cells(&self.ctx.device, &self.ctx.queue, r)?;
        let frame = self.reps[r].frame;
        Ok((0..self.state.layout.n_particles[r] as usize)
            .map(|i| Kinematics {
                x: frame.join(blocks[i], v(0, i)),
                v: v(1, i),
                q: DQuat::from_xyzw(a[2][4 * i], a[2][4 * i + 1], a[2][4 * i + 2], a[2][4 * i + 3]),
                w: v(3, i),
            })
            .collect())
    }

    /// Data: the origin of the stored positions (three little-endian f64), then the raw device
    /// arrays pos (offsets, with the radius in w), vel, quat, omega, four reals per particle
    /// each, and in f32 the blocks (four i32 per particle); with rupture, then `E_released` (f64),
    /// `n_broken` (u64) and the broken flags (u32 per bond).
    /// A replica's ranges give exactly what a one-replica engine of its model writes.
    fn save_state_of(&mut self, r: usize) -> Result<EngineState, EngineError> {
        self.ctx.check_lost()?;
        self.check_replica(r)?;
        let arrays = self.state.read_arrays_raw(&self.ctx.device, &self.ctx.queue, &state::STATE_ARRAYS, r)?;
        let cells = match uses_blocks(self.precision) {
            true => self.state.read_cells_raw(&self.ctx.device, &self.ctx.queue, r)?,
            false => Vec::new(),
        };
        let broken = self.state.read_broken_raw(&self.ctx.device, &self.ctx.queue, r)?;
        let rep = &self.reps[r];
        let mut data = Vec::with_capacity(self.state_bytes(r));
        for c in rep.frame.origin.to_array() {
            data.extend_from_slice(&c.to_le_bytes());
        }
        for a in &arrays {
            data.extend_from_slice(a);
        }
        data.extend_from_slice(&cells);
        if self.state.layout.rupture[r] {
            data.extend_from_slice(&rep.e_released.to_le_bytes());
            data.extend_from_slice(&rep.n_broken.to_le_bytes());
            data.extend_from_slice(&broken);
        }
        Ok(EngineState { kind: self.state_kind_str(), step: rep.step, data })
    }

    /// A one-replica raw state (`save_state_of`) renumbered by `perm`: the per-particle arrays
    /// and blocks gathered by particle, the broken flags by bond; origin and totals as they are.
    fn permuted_state(&self, data: &[u8], perm: &crate::order::Order) -> Vec<u8> {
        let n = self.state.n as usize;
        let len = self.state.array_bytes(0);
        let blocks = if uses_blocks(self.precision) { super::sizes::CELL_BYTES * n } else { 0 };
        let mut out = Vec::with_capacity(data.len());
        let gather = |out: &mut Vec<u8>, part: &[u8], items: &[u32]| {
            let size = part.len() / items.len().max(1);
            for &k in items {
                out.extend_from_slice(&part[k as usize * size..(k as usize + 1) * size]);
            }
        };
        let (head, rest) = data.split_at(ORIGIN_BYTES);
        out.extend_from_slice(head);
        let (arrays, rest) = rest.split_at(state::STATE_ARRAYS.len() * len);
        for a in arrays.chunks_exact(len.max(1)) {
            gather(&mut out, a, &perm.particles);
        }
        let (cells, rest) = rest.split_at(blocks);
        if blocks > 0 {
            gather(&mut out, cells, &perm.particles);
        }
        if self.state.layout.rupture[0] {
            let (totals, flags) = rest.split_at(RUPTURE_TOTALS_BYTES);
            out.extend_from_slice(totals);
            gather(&mut out, flags, &perm.bonds);
        }
        debug_assert_eq!(out.len(), data.len());
        out
    }

    fn state_kind_str(&self) -> String {
        format!("gpu-{}", self.precision.as_str())
    }

    fn info_of(&self) -> EngineInfo {
        EngineInfo {
            backend: "gpu".into(),
            device: format!("{} ({})", self.ctx.adapter_name, self.ctx.backend),
            precision: self.precision,
        }
    }

    /// Lowest index on ties; a NaN |F| neither wins nor is beaten unless it comes first, as on
    /// the CPU.
    fn largest_force_of(&mut self, r: usize) -> Result<Option<(usize, f64)>, EngineError> {
        self.ctx.check_lost()?;
        self.check_replica(r)?;
        let f = &self.state.read_arrays(&self.ctx.device, &self.ctx.queue, &["force"], r)?[0];
        Ok(f.chunks_exact(4).map(|c| DVec3::new(c[0], c[1], c[2]).length()).enumerate().fold(
            None,
            |best: Option<(usize, f64)>, (i, f)| match best {
                Some((_, b)) if f.partial_cmp(&b) != Some(std::cmp::Ordering::Greater) => best,
                _ => Some((i, f)),
            },
        ))
    }

    fn warnings_of(&self) -> Vec<String> {
        if self.fallback_steps == 0 {
            return Vec::new();
        }
        let why = if self.lists_stuck {
            "they could not grow (binding limit or device memory)"
        } else {
            "each list was then given room for its own count"
        };
        vec![format!(
            "{} steps ran in batches in which a contact neighbour list overflowed (longest {} entries) and used \
             the slower grid search from that step on (same results, lower throughput); {why}",
            self.fallback_steps, self.longest_list
        )]
    }
}

/// Offsets of per-particle neighbour lists (n + 1) for the neighbour counts of the last rebuild
/// and the current `offsets` (empty: none yet): each list keeps its capacity or gets its count
/// plus `nbr_headroom` of it, whichever is larger, so capacities only grow (a moving particle's
/// list does not overflow twice at the same length). `None` past u32 slots.
pub fn plan_nbr_offsets(counts: &[u32], offsets: &[u32]) -> Option<Vec<u32>> {
    let mut planned = Vec::with_capacity(counts.len() + 1);
    let mut at = 0u64;
    planned.push(0);
    for (i, &c) in counts.iter().enumerate() {
        let old = offsets.get(i + 1).zip(offsets.get(i)).map_or(0, |(b, a)| b.saturating_sub(*a));
        at += (c as u64 + nbr_headroom(c as u64)).max(old as u64);
        planned.push(u32::try_from(at).ok()?);
    }
    Some(planned)
}

/// The per-replica parameter buffer (`ReplicaGpu` per replica).
fn reps_bytes(reps: &[Replica], layout: &BatchLayout, precision: Precision) -> Vec<u8> {
    let inputs = |r: usize| ReplicaInputs {
        params: &reps[r].params,
        inv_cell: reps[r].inv_cell,
        cell_edge: reps[r].frame.edge,
        skin: reps[r].skin,
        p_start: layout.p_start[r],
        n_particles: layout.n_particles[r],
        b_start: layout.b_start[r],
        n_bonds: layout.n_bonds[r],
        wall_start: layout.wall_start[r],
        held: reps[r].held,
        bond_attitudes: reps[r].bond_attitudes,
        bond_refs: reps[r].bond_refs,
        broken_word: layout.broken_word[r],
    };
    match precision {
        Precision::F32 => {
            let v: Vec<ReplicaGpu32> = (0..reps.len()).map(|r| ReplicaGpu32::new(&inputs(r))).collect();
            bytemuck::cast_slice(&v).to_vec()
        }
        Precision::F64 => {
            let v: Vec<ReplicaGpu64> = (0..reps.len()).map(|r| ReplicaGpu64::new(&inputs(r))).collect();
            bytemuck::cast_slice(&v).to_vec()
        }
    }
}

/// One replica's walls in the engine's precision: points split into block and offset by its
/// frame, as positions are.
fn walls_bytes(walls: &[crate::interactions::Wall], frame: &Frame, precision: Precision) -> Vec<u8> {
    let split = |w: &crate::interactions::Wall| {
        let (b, o) = frame.split(w.point);
        ([b[0], b[1], b[2], 0], o, w.normal)
    };
    match precision {
        Precision::F32 => {
            let v: Vec<WallGpu32> = walls
                .iter()
                .map(split)
                .map(|(block, o, n)| WallGpu32 {
                    point: [o.x as f32, o.y as f32, o.z as f32, 0.0],
                    normal: [n.x as f32, n.y as f32, n.z as f32, 0.0],
                    block,
                    _pad_b: [0; 4],
                })
                .collect();
            bytemuck::cast_slice(&v).to_vec()
        }
        Precision::F64 => {
            let v: Vec<WallGpu64> = walls
                .iter()
                .map(split)
                .map(|(block, o, n)| WallGpu64 {
                    point: [o.x, o.y, o.z, 0.0],
                    normal: [n.x, n.y, n.z, 0.0],
                    block,
                    _pad_b: [0; 4],
                })
                .collect();
            bytemuck::cast_slice(&v).to_vec()
        }
    }
}

fn params_bytes(inputs: &ParamInputs, precision: Precision, batch_len: u32) -> Vec<u8> {
    match precision {
        Precision::F32 => bytemuck::bytes_of(&SimParams32 { batch_len, ..SimParams32::new(inputs) }).to_vec(),
        Precision::F64 => bytemuck::bytes_of(&SimParams64 { batch_len, ..SimParams64::new(inputs) }).to_vec(),
    }
}

/// Centre of the bounding box of the positions (zero for no particles).
fn bounding_box_centre(x: &[DVec3]) -> DVec3 {
    if x.is_empty() {
        return DVec3::ZERO;
    }
    let (lo, hi) = x.iter().fold((x[0], x[0]), |(lo, hi), p| (lo.min(*p), hi.max(*p)));
    0.5 * (lo + hi)
}

/// Diagnostics from a reduced record (layout in shaders/reduce.wgsl); the rupture totals, the
/// origin's terms and the centre of mass are the host's (`finish_batch`).
fn diagnostics_from_record(r: &[f64], step: u64, t: f64) -> Diagnostics {
    debug_assert!(r.len() >= NQ);
    let v = |k: usize| DVec3::new(r[k], r[k + 1], r[k + 2]);
    Diagnostics {
        step,
        t,
        e_trans: r[REC_E_TRANS],
        e_rot: r[REC_E_ROT],
        u_bend: r[REC_U_BEND],
        u_axial: r[REC_U_AXIAL],
        u_shear: r[REC_U_SHEAR],
        u_contact: r[REC_U_CONTACT],
        u_wall: r[REC_U_WALL],
        u_gravity: r[REC_U_GRAVITY],
        p: v(REC_P),
        s: v(REC_S),
        l: v(REC_L),
        f_wall: v(REC_F_WALL),
        // Σ m (x − origin) until `finish_batch` turns it into the centre of mass.
        x_cm: v(REC_MASS_X),
        ..Default::default()
    }
}

/// The one-model interface: a one-replica engine (`new`, `with_options`). Methods that speak of
/// one state need exactly one replica.
impl Engine for GpuEngine {
    fn info(&self) -> EngineInfo {
        self.info_of()
    }

    fn n_particles(&self) -> usize {
        self.state.n as usize
    }

    fn steps_done(&self) -> u64 {
        self.reps.first().map_or(self.step, |r| r.step)
    }

    fn advance(&mut self, steps: u64) -> Result<(), EngineError> {
        self.single("advance")?;
        match self.run(steps)?.into_iter().next() {
            Some((_, err)) => Err(err),
            None => Ok(()),
        }
    }

    fn diagnostics(&mut self) -> Result<Diagnostics, EngineError> {
        self.ctx.check_lost()?;
        self.single("diagnostics")?;
        Ok(self.reps[0].diag)
    }

    fn snapshot(&mut self) -> Result<Vec<Kinematics>, EngineError> {
        self.single("snapshot")?;
        self.snapshot_of(0)
    }

    fn state_kind(&self) -> String {
        self.state_kind_str()
    }

    fn save_state(&mut self) -> Result<EngineState, EngineError> {
        self.single("save_state")?;
        self.save_state_of(0)
    }

    /// Forgets the rollback point: the loaded state is the last one checked. Breaks not yet
    /// taken that come after the loaded step never happened (as on the CPU).
    fn load_state(&mut self, saved: &EngineState) -> Result<(), EngineError> {
        self.ctx.check_lost()?;
        self.single("load_state")?;
        if saved.kind != self.state_kind_str() {
            return Err(wrong_state_kind(&saved.kind, &self.state_kind_str()));
        }
        let want = self.state_bytes(0);
        let rupture = self.state.layout.rupture[0];
        if saved.data.len() != want {
            // f32 states written before positions had blocks lack 16 bytes per particle.
            let blocks = super::sizes::CELL_BYTES * self.state.n as usize;
            let older = uses_blocks(self.precision) && saved.data.len() + blocks == want;
            return Err(EngineError::Unsupported(format!(
                "the saved state holds {} bytes; {} particles and {} bonds{} need {want}{}",
                saved.data.len(),
                self.state.n,
                self.state.n_bonds,
                if rupture { " with rupture" } else { " without rupture" },
                if older {
                    " (it was written by an rrpdem whose f32 positions had no blocks: resume it with that \
                     version, or rerun)"
                } else {
                    ""
                },
            )));
        }
        let len = self.state.array_bytes(0);
        let (head, rest) = saved.data.split_at(ORIGIN_BYTES);
        let (arrays, rest) = rest.split_at(state::STATE_ARRAYS.len() * len);
        let blocks = if uses_blocks(self.precision) { self.state.layout.n_particles[0] as usize } else { 0 };
        let (cells, rupture_bytes) = rest.split_at(super::sizes::CELL_BYTES * blocks);
        let c: Vec<f64> = head.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect();
        let origin = DVec3::new(c[0], c[1], c[2]);
        if !origin.is_finite() {
            return Err(EngineError::Unsupported(format!("the saved state's position origin {origin} is not finite")));
        }
        // The bonds' reference positions were split in this engine's frame (f32 blocks); a
        // state counted from another origin would need them split anew, bit for bit as the
        // saving engine did, which only a model with the same reference positions gives. (A
        // replica without bonds has none: it takes the saved origin, as before.)
        let frame = &self.reps[0].frame;
        if blocks > 0
            && !self.reps[0].bond_refs
            && self.state.layout.n_bonds[0] > 0
            && origin.to_array().map(f64::to_bits) != frame.origin.to_array().map(f64::to_bits)
        {
            return Err(EngineError::Unsupported(format!(
                "the saved state counts positions from {origin}, this f32 engine from {}: its bonds' reference \
                 positions are stored relative to the latter; build the engine from the same model as the saving \
                 one (or from a version-2 checkpoint's)",
                frame.origin
            )));
        }
        for (name, bytes) in state::STATE_ARRAYS.iter().zip(arrays.chunks_exact(len.max(1))) {
            self.state.write_array_raw(&self.ctx.queue, name, bytes, 0);
        }
        if blocks > 0 {
            self.state.write_cells_raw(&self.ctx.queue, cells, 0);
        }
        let rep = &mut self.reps[0];
        if rupture {
            let (totals, flags) = rupture_bytes.split_at(RUPTURE_TOTALS_BYTES);
            let word = |k: usize| <[u8; 8]>::try_from(&totals[8 * k..8 * k + 8]).unwrap_or([0; 8]);
            rep.e_released = f64::from_le_bytes(word(0));
            rep.n_broken = u64::from_le_bytes(word(1));
            self.state.write_broken_raw(&self.ctx.queue, flags, 0);
        }
        self.breaks.retain(|(_, e)| e.step <= saved.step);
        // The walls are stored in the frame; they are rewritten with its origin so that
        // nothing of the previous state's set-up survives.
        rep.frame.origin = origin;
        rep.step = saved.step;
        rep.backup_step = None;
        rep.held = false;
        rep.failure = None;
        self.step = saved.step;
        let walls = walls_bytes(&rep.params.walls, &rep.frame, self.precision);
        if !walls.is_empty() {
            self.ctx.queue.write_buffer(self.state.buffer("walls"), 0, &walls);
        }
        self.write_reps();
        self.rebuild_next = true;
        match self.evaluate_current()?.into_iter().next() {
            Some((_, err)) => Err(err),
            None => Ok(()),
        }
    }

    fn rollback(&mut self) -> Result<(), EngineError> {
        self.ctx.check_lost()?;
        self.single("rollback")?;
        if !self.restore_replica(0) {
            return Ok(());
        }
        self.step = self.reps[0].step;
        match self.evaluate_current()?.into_iter().next() {
            Some((_, err)) => Err(err),
            None => Ok(()),
        }
    }

    fn largest_force(&mut self) -> Result<Option<(usize, f64)>, EngineError> {
        self.single("largest_force")?;
        self.largest_force_of(0)
    }

    fn guard_interval(&self) -> u64 {
        GUARD_INTERVAL
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings_of()
    }

    fn order_check_interval(&self) -> Option<u64> {
        (self.reps.len() == 1).then_some(ORDER_CHECK_INTERVAL)
    }

    /// Builds the engine again from `model` on the same device and loads the renumbered raw
    /// state, as a resume does. Until the old state's buffers are dropped, both are on the
    /// device: a model that fills more than half of its memory cannot be renumbered (the error
    /// says so and the engine is unchanged; the run driver goes on in the old order).
    fn renumber(&mut self, model: &Model, perm: &crate::order::Order) -> Result<(), EngineError> {
        self.ctx.check_lost()?;
        self.single("renumber")?;
        perm.check_renumbering(model, self.state.n as usize, self.state.n_bonds as usize)?;
        // The budget covers the process's device memory: while the new state is built, the old
        // one is still there.
        let bytes = self.device_bytes();
        if let Some(budget) = self.options.memory_budget.filter(|&b| 2 * bytes > b) {
            return Err(EngineError::Unsupported(format!(
                "renumbering builds a second copy of the {bytes}-byte device state, and the memory budget is {budget} bytes"
            )));
        }
        let saved = self.save_state_of(0)?;
        let data = self.permuted_state(&saved.data, perm);
        let mut fresh = GpuEngine::build(
            self._lease.same_device(),
            &[model],
            self.integrator,
            self.dt,
            self.precision,
            self.adapter,
            self.options,
        )?;
        if let Some(e) = fresh.reps[0].failure.take() {
            return Err(e);
        }
        fresh.load_state(&EngineState { data, ..saved })?;
        // Bonds the fresh engine broke before their flags were loaded broke long ago.
        fresh.breaks.clear();
        // What the warnings report covers the whole run.
        fresh.fallback_steps += self.fallback_steps;
        fresh.nbr_layouts += self.nbr_layouts;
        fresh.longest_list = fresh.longest_list.max(self.longest_list);
        fresh.lists_stuck |= self.lists_stuck;
        std::mem::swap(&mut fresh._lease, &mut self._lease);
        *self = fresh;
        Ok(())
    }

    /// Collected at the end of each batch (see `finish_batch`), already in step then bond order.
    fn take_breaks(&mut self) -> Vec<BreakEvent> {
        std::mem::take(&mut self.breaks).into_iter().map(|(_, e)| e).collect()
    }
}

/// The batch interface: replica indices, particle and bond indices as in each replica's model.
impl BatchEngine for GpuEngine {
    fn info(&self) -> EngineInfo {
        self.info_of()
    }

    fn replicas(&self) -> usize {
        self.reps.len()
    }

    fn n_particles(&self, r: usize) -> usize {
        self.state.layout.n_particles.get(r).map_or(0, |&n| n as usize)
    }

    fn steps_done(&self) -> u64 {
        self.step
    }

    /// A replica that fails is rolled back to the start of this call (range copies), frozen and
    /// its error kept; one evaluation of the batch then gives it the forces and diagnostics of
    /// that state (the others' come out unchanged).
    fn advance(&mut self, steps: u64) -> Result<(), EngineError> {
        let failures = self.run(steps)?;
        if failures.is_empty() {
            return Ok(());
        }
        let mut thaw = Vec::new();
        for (r, err) in failures {
            self.restore_replica(r);
            self.reps[r].failure = Some(err);
            self.reps[r].held = true;
            thaw.push(r);
        }
        self.evaluate_thawed(&thaw)
    }

    fn take_failure(&mut self, r: usize) -> Option<EngineError> {
        self.reps.get_mut(r)?.failure.take()
    }

    fn diagnostics(&mut self) -> Result<Vec<Diagnostics>, EngineError> {
        self.ctx.check_lost()?;
        Ok(self.reps.iter().map(|r| r.diag).collect())
    }

    fn snapshot(&mut self, r: usize) -> Result<Vec<Kinematics>, EngineError> {
        self.snapshot_of(r)
    }

    fn state_kind(&self) -> String {
        self.state_kind_str()
    }

    fn save_state(&mut self, r: usize) -> Result<EngineState, EngineError> {
        self.save_state_of(r)
    }

    fn rollback(&mut self, r: usize) -> Result<(), EngineError> {
        self.ctx.check_lost()?;
        self.check_replica(r)?;
        if !self.restore_replica(r) {
            return Ok(());
        }
        self.evaluate_thawed(&[r])
    }

    fn freeze(&mut self, r: usize) {
        if let Some(rep) = self.reps.get_mut(r) {
            rep.held = true;
            self.write_reps();
        }
    }

    fn largest_force(&mut self, r: usize) -> Result<Option<(usize, f64)>, EngineError> {
        self.largest_force_of(r)
    }

    /// By replica, then step, then bond (each replica's in the order a one-replica engine of
    /// its model gives).
    fn take_breaks(&mut self) -> Vec<(usize, BreakEvent)> {
        let mut b = std::mem::take(&mut self.breaks);
        b.sort_by_key(|(r, e)| (*r, e.step, e.bond));
        b
    }

    fn guard_interval(&self) -> u64 {
        GUARD_INTERVAL
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings_of()
    }

    /// A batch's replicas share its buffers and chunk plans, so none is renumbered alone; and
    /// a one-replica batch does not either, so that a study variant's results do not depend on
    /// how its study was batched. (`rrpdem run` renumbers through the `Engine` interface.)
    fn order_check_interval(&self, _r: usize) -> Option<u64> {
        None
    }
}

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
        super::context::create_buffer(&ctx.device, label, (size as u64).next_multiple_of(4).max(4), usage)
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
        pipe.dispatch(&mut pass, entry, &groups, items, super::shader::WG);
    }
    encoder.copy_buffer_to_buffer(&output, 0, &staging, 0, out_bytes as u64);
    ctx.queue.submit([encoder.finish()]);
    let bytes = super::context::map_read(&ctx.device, &staging)?;
    ctx.take_error()?;
    Ok(bytes)
}

/// Runs `atan2_real` (shaders/atan2_f64.wgsl in f64, the builtin in f32) over `(y, x)` pairs on
/// an adapter, for the accuracy test.
pub fn atan2_on_device(pairs: &[(f64, f64)], precision: Precision) -> Result<Vec<f64>, GpuError> {
    let flat: Vec<f64> = pairs.iter().flat_map(|&(y, x)| [y, x]).collect();
    let n = pairs.len();
    let out = n * super::sizes::real_size(precision);
    let bytes = run_probe(
        precision,
        "atan2_probe",
        ("atan_in", "atan_out"),
        &super::sizes::reals_to_bytes(&flat, precision),
        out.max(4),
        n as u32,
    )?;
    Ok(super::sizes::bytes_to_reals(&bytes[..out], precision))
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
        &super::sizes::reals_to_bytes(values, precision),
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
    let out = 4 * n * super::sizes::real_size(precision);
    let bytes = run_probe(
        precision,
        "arith_probe",
        ("arith_in", "arith_out"),
        &super::sizes::reals_to_bytes(&flat, precision),
        out,
        n as u32,
    )?;
    let got = super::sizes::bytes_to_reals(&bytes[..out], precision);
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
    let out = RUPTURE_PROBE_OUT * n * super::sizes::real_size(precision);
    let bytes = run_probe(
        precision,
        "rupture_probe",
        ("rupture_in", "rupture_out"),
        &super::sizes::reals_to_bytes(&flat, precision),
        out.max(4),
        n as u32,
    )?;
    let r = super::sizes::bytes_to_reals(&bytes[..out], precision);
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

#[cfg(test)]
mod tests {
    use super::plan_nbr_offsets;

    #[test]
    fn each_list_gets_its_count_with_room_and_never_shrinks() {
        // Without a layout yet: count + count/4 + 8 each.
        assert_eq!(plan_nbr_offsets(&[0, 3, 40], &[]), Some(vec![0, 8, 19, 77]));
        // With one: the larger of that and the list's current capacity (16, 4, 10).
        assert_eq!(plan_nbr_offsets(&[0, 3, 40], &[0, 16, 20, 30]), Some(vec![0, 16, 27, 85]));
        // Past u32 slots: no layout (the lists keep falling back to the grid).
        assert_eq!(plan_nbr_offsets(&[u32::MAX / 2, u32::MAX / 2], &[]), None);
    }
}
