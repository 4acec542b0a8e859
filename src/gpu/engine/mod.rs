//! `GpuEngine`: the `Engine` and `BatchEngine` interfaces on top of the pipeline and the GPU
//! state. One engine steps a batch of replicas (independent models, e.g. the variants of a
//! study) in one GPU state; a single model is the one-replica batch, through the same code. One
//! `advance` records all its steps into a few command buffers and waits once (twice where a quiet
//! batch missed a rebuild: docs/GPU.md, "Quiet steps"), reading back only the status words and
//! one diagnostics record per replica.
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

mod bond_history;
mod history;
mod limits;
use limits::{check_sizes, two_part_limit};
mod options;
mod quiet;
mod run;
mod saved;
mod upload;

pub use options::GpuOptions;
pub use run::{MAX_TIMED_STEPS, plan_nbr_offsets};

use crate::diagnostics::Diagnostics;
use crate::engine::{BatchEngine, Engine, EngineInfo, EngineState, Precision, RecordedSteps, Watch};
use crate::error::EngineError;
use crate::gpu::batch::{BatchLayout, BatchTotals, PARTICLE_ARRAYS, binding_sizes, bucket_count};
use crate::gpu::cache::{self, CacheKey, Lease};
use crate::gpu::context::{AdapterChoice, GpuContext, STORAGE_BUFFERS_NEEDED_PARTS};
use crate::gpu::error::GpuError;
use crate::gpu::frame::Frame;
use crate::gpu::params::ParamInputs;
use crate::gpu::pipeline::DemPipeline;
use crate::gpu::shader::Parts;
use crate::gpu::sizes::{MAX_BREAK_RECORDS, particle_elem, particle_part_len};
use crate::gpu::state::{DemState, StateInputs};
use crate::integrator::{Integrator, Kinematics};
use crate::interactions::BreakEvent;
use crate::model::Model;
use glam::DVec3;
use std::sync::Arc;
use upload::{bounding_box_centre, params_bytes, reps_bytes, walls_bytes};

/// Steps between checks of the particle order (`Engine::order_check_interval`): a check reads
/// the state back and sorts the positions on the host, some 100 steps of an H100's time at
/// 10⁶ particles (10⁻⁹ s per particle-step against ~10⁻⁷ s per particle on the host), so 0.5 %
/// of the run at this interval: an estimate from the H100's throughput and the CPU's check,
/// not measured on a GPU.
const ORDER_CHECK_INTERVAL: u64 = 20_000;

/// Steps between the run driver's stops where nothing else asks for one. Each stop reads the
/// diagnostics back: a host wait that drains the device's queue, whereas the steps between
/// stops are recorded and submitted without waiting. The energy guard and the impact measures
/// are watched on the device at every step whatever this is (shaders/watch.wgsl).
const GUARD_INTERVAL: u64 = 100;

/// Particle-steps between stops beyond `GUARD_INTERVAL` steps: a small model stops at most every
/// 1000 steps, so that its host waits cost little against its steps, a large one every 100
/// (about 0.5 s of a 10⁷-particle run on an H100: an interrupt is still noticed quickly).
const GUARD_PARTICLE_STEPS: u64 = 200_000_000;

/// The driver's stride for `particles` in the batch (`Engine::guard_interval`).
fn guard_interval(particles: u64) -> u64 {
    GUARD_PARTICLE_STEPS.div_ceil(particles.max(1)).clamp(GUARD_INTERVAL, 10 * GUARD_INTERVAL)
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
    /// Its contact lists leave its bonded pairs out (`FLAG_UNLISTED`).
    unlisted: bool,
    /// Its bonded pairs' friction history lies beside the incidence (`FLAG_BOND_HISTORY`).
    bond_history: bool,
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
    /// The run's watch (`Engine::set_watch`), kept up to date on the device at every step
    /// (shaders/watch.wgsl), and as it was at the backup point (for `rollback`).
    watch: Option<Watch>,
    backup_watch: Option<Watch>,
    /// Steps in which this replica rebuilt its grid part and contact lists (`replica_rebuilds`),
    /// and the count at the backup point.
    rebuilds: u64,
    backup_rebuilds: u64,
    /// Its last batch rebuilt it rarely (`quiet::rebuilds_rarely`), and whether it rebuilds
    /// early at grid steps in this batch (`FLAG_EARLY`; docs/GPU.md, "Quiet steps"); `rare` at
    /// the backup point, so that a rollback takes back what the batches after it taught.
    rare: bool,
    early: bool,
    backup_rare: bool,
}

impl Replica {
    /// The host side of a replica of `model` at its initial state: its grid cell and skin, its
    /// position frame, and whether its bonds' reference attitudes (`bond_attitudes`) and
    /// directions (`bond_refs`) are per bond; `history_fits`: the batch's bonded pairs' history
    /// beside the incidence fits one buffer (`batch::bond_history_fits`).
    fn new(
        model: &Model,
        (bond_attitudes, bond_refs): (bool, bool),
        precision: Precision,
        options: &GpuOptions,
        history_fits: bool,
    ) -> Replica {
        let unlisted = !options.list_bonded_pairs && !model.bonds.is_empty();
        // List candidates are at most r_i + r_j + skin ≤ 2 r_max + skin apart: one cell.
        let skin = model.params.skin * model.max_radius();
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
            bond_attitudes,
            bond_refs,
            unlisted,
            bond_history: history_fits && unlisted && model.params.dissipation.is_some_and(|d| d.mu > 0.0),
            bond_ends: model.bonds.iter().map(|b| (b.i, b.j)).collect(),
            step: 0,
            diag: Diagnostics::default(),
            backup_step: None,
            e_released: 0.0,
            n_broken: 0,
            backup_rupture: (0.0, 0),
            failure: None,
            held: false,
            watch: None,
            backup_watch: None,
            rebuilds: 0,
            backup_rebuilds: 0,
            rare: false,
            early: false,
            backup_rare: false,
        }
    }
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
    /// While `time_stages` or `time_kernels` runs: its timestamp queries (two per stage or,
    /// with the flag, per dispatch of a step).
    stage_queries: Option<(wgpu::QuerySet, bool)>,
    /// The next batch starts with a rebuild (after the neighbour lists were reallocated, or a
    /// failure or a rollback left them stale).
    rebuild_next: bool,
    /// Some replica's lists may be incomplete or laid out anew (empty) since a list overflowed
    /// and have not been rebuilt since (a held replica's are not): the next evaluation rebuilds
    /// every running replica's, not only those it thaws.
    lists_stale: bool,
    /// Steps taken by the running replicas.
    step: u64,
    /// Breaks not yet taken by `take_breaks`, as (replica, event).
    breaks: Vec<(usize, BreakEvent)>,
    /// Steps run in batches where some neighbour list overflowed (see `fallback_steps`).
    fallback_steps: u64,
    /// The last batch broke more bonds than the break records hold: `run` goes back to the
    /// advance's start and takes shorter batches.
    break_overflow: bool,
    /// Steps that rebuilt the grid and the neighbour lists (`neighbour_rebuilds`).
    rebuilds: u64,
    /// What the recorded steps cost (`Engine::recorded_figures`), and the step of the running
    /// batch that missed a rebuild (`finish_batch` found `STATUS_MISS_STEP`).
    recorded: RecordedSteps,
    missed_at: Option<u32>,
    /// `SimParams::keep_dload`: false until the first force evaluation has filled the `dload_*`
    /// arrays.
    dload_kept: bool,
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
        if integrator.cpu_only() {
            let section = if integrator.is_implicit() { "MODEL §13" } else { "MODEL §12" };
            return Err(GpuError::InitialState(Box::new(EngineError::Unsupported(format!(
                "integrator `{integrator}` ({section}) runs on the CPU engine only: use backend `cpu`"
            )))));
        }
        if let Some(what) = models.iter().find_map(|m| m.cpu_only_feature()) {
            return Err(GpuError::InitialState(Box::new(EngineError::Unsupported(format!(
                "{what} (MODEL §12) run on the CPU engine only: use backend `cpu`"
            )))));
        }
        let key = CacheKey { adapter, precision, max_workgroups: options.max_workgroups_per_dimension };
        let lease = cache::lease(key, options.fresh_device)?;
        GpuEngine::build(lease, models, integrator, dt, precision, adapter, options)
    }

    /// `new_batch` on the device and kernels of `lease`: the limits checked (`two_part_limit`,
    /// the kernels for two-part bindings where needed, `check_sizes`), the replicas' host
    /// sides (`Replica::new`), the state built and the initial forces evaluated.
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
        let part_len = two_part_limit(&ctx, n, precision, have)?;
        if part_len.is_some() && models.iter().any(|m| m.params.dissipation.is_some()) {
            return Err(GpuError::DissipationTooLarge {
                what: "a per-particle array",
                particles: n,
                max_binding: have,
            });
        }
        let pipe = match part_len {
            Some(_) => {
                Arc::new(DemPipeline::with_parts(&ctx.device, precision, lease.pipe.max_workgroups(), Parts::Two)?)
            }
            None => lease.pipe.clone(),
        };
        let max_buffer = options.page_size.map_or(ctx.limits.max_buffer_size, |m| m.min(ctx.limits.max_buffer_size));
        // Per particle where the bonds agree on it (always, for models built from their initial
        // state, and for checkpoints): `q_ref`; per bond otherwise.
        let per_bond = options.per_bond_references;
        let ref_q: Vec<_> = models.iter().map(|m| m.reference_attitudes().filter(|_| !per_bond)).collect();
        // Likewise the reference directions and lengths, from the particles' positions where the
        // bonds were made from them; per bond otherwise.
        let ref_x: Vec<_> = models.iter().map(|m| m.reference_positions().filter(|_| !per_bond)).collect();
        let mut totals = BatchTotals::default();
        for (m, (q, x)) in models.iter().zip(ref_q.iter().zip(&ref_x)) {
            totals.add_with(m, q.is_none(), x.is_none());
        }
        // Lists that hold bonded pairs (`list_bonded_pairs`) start longer, with no sorted partners.
        totals.unlisted_bonds *= u64::from(!options.list_bonded_pairs);
        let nbr_capacity = options.nbr_capacity.unwrap_or(totals.initial_nbr_capacity()).max(1);
        check_sizes(&ctx, &totals, n, nbr_capacity, precision, have, part_len.is_some())?;
        let fits = crate::gpu::batch::bond_history_fits(totals.nb, precision, max_buffer);
        let refs_per_bond = |(q, x): (&Option<_>, &Option<_>)| (q.is_none(), x.is_none());
        let reps: Vec<Replica> = (models.iter().zip(ref_q.iter().zip(&ref_x)))
            .map(|(model, refs)| Replica::new(model, refs_per_bond(refs), precision, &options, fits))
            .collect();
        let layout = BatchLayout::new(models);
        let frames: Vec<Frame> = reps.iter().map(|r| r.frame).collect();
        let walls: Vec<u8> = reps.iter().flat_map(|r| walls_bytes(&r.params.walls, &r.frame, precision)).collect();
        let global = ParamInputs {
            integrator,
            h: dt,
            n_particles: layout.n,
            n_bonds: layout.nb,
            mask: (bucket_count(layout.n as u64, have) - 1) as u32,
            n_replicas: models.len() as u32,
            part_len: part_len.map_or(layout.n, |p| p as u32),
            keep_dload: false,
        };
        let params = params_bytes(&global, precision, 0, Default::default());
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
            unlisted: !options.list_bonded_pairs,
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
            lists_stale: false,
            step: 0,
            breaks: Vec::new(),
            fallback_steps: 0,
            break_overflow: false,
            rebuilds: 0,
            recorded: RecordedSteps::default(),
            missed_at: None,
            dload_kept: false,
            adapter,
            options,
            _lease: lease,
        };
        let failures = e.evaluate_current().map_err(|err| match err {
            EngineError::Gpu(g) => g,
            other => GpuError::InitialState(Box::new(other)),
        })?;
        // From now on the `dload_*` arrays hold the dissipative loads of the current state (evaluated,
        // loaded or restored with it): evaluations keep them (and the contact history, which
        // that evaluation rewrote).
        e.dload_kept = true;
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
    /// the overflowing step to the end of the batch (at most `guard_interval` steps under the run driver) the
    /// overflowing lists fell back to the grid: same results, more work. After an overflow the
    /// lists grow, so this stays 0 for a run whose lists could grow in time (an overflow in `new`
    /// counts no steps); it keeps rising while they cannot (binding limit, memory budget, out of
    /// device memory). Steps later undone by `rollback` stay counted: they were run.
    pub fn fallback_steps(&self) -> u64 {
        self.fallback_steps
    }

    /// Dispatches per step (all, and the grid stage's indirect ones among them) and host waits
    /// per step under the run driver (one per `guard_interval` steps).
    pub fn step_costs(&self) -> (usize, usize, f64) {
        let (all, grid) = self.state.dispatch_counts(self.integrator);
        (all, grid, 1.0 / Engine::guard_interval(self) as f64)
    }

    /// Steps that rebuilt the grid and the neighbour lists since the engine was made (the
    /// initial evaluation and steps rolled back included), batch-wide: the figure that the skin
    /// rule and a body's flight decide (docs/GPU.md, "Rebuilds").
    pub fn neighbour_rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Each replica's own rebuilds on the way to its current state (the initial evaluation's
    /// included; steps taken back by a rollback, a rewind or a batch taken again are not):
    /// decided on its own particles' motion (`rebuild_decide` in shaders/integrate.wgsl), so
    /// the same as the replica's count when it runs alone, whatever the other replicas do.
    pub fn replica_rebuilds(&self) -> Vec<u64> {
        self.reps.iter().map(|r| r.rebuilds).collect()
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

    fn time(&self, step: u64) -> f64 {
        step as f64 * self.dt
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

    fn tangential_displacement(&mut self) -> Result<Option<Vec<f64>>, EngineError> {
        self.single("tangential_displacement")?;
        self.tangential_displacement_of(0)
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
        self.load_state_of(saved)
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
        guard_interval(self.state.layout.n_particles.iter().map(|&n| n as u64).sum())
    }

    fn list_figures(&mut self) -> Option<(u64, u64)> {
        Some((self.rebuilds, self.neighbour_entries_in_use().ok()?))
    }

    fn recorded_figures(&self) -> Option<RecordedSteps> {
        Some(self.recorded)
    }

    /// Watched on the device at every step (shaders/watch.wgsl).
    fn set_watch(&mut self, watch: Watch) -> bool {
        self.reps.len() == 1 && BatchEngine::set_watch(self, 0, watch)
    }

    fn watch(&self) -> Option<&Watch> {
        self.reps.first().and_then(|r| r.watch.as_ref())
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings_of()
    }

    fn order_check_interval(&self) -> Option<u64> {
        (self.reps.len() == 1).then_some(ORDER_CHECK_INTERVAL)
    }

    /// Builds the engine again from `model` on the same device and loads the renumbered raw
    /// state, as a resume does (`renumber_to`).
    fn renumber(&mut self, model: &Model, perm: &crate::order::Order) -> Result<(), EngineError> {
        self.renumber_to(model, perm)
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

    fn rebuilds_per_replica(&mut self) -> Vec<u64> {
        self.replica_rebuilds()
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

    fn tangential_displacement(&mut self, r: usize) -> Result<Option<Vec<f64>>, EngineError> {
        self.tangential_displacement_of(r)
    }

    fn state_kind(&self) -> String {
        self.state_kind_str()
    }

    fn save_state(&mut self, r: usize) -> Result<EngineState, EngineError> {
        self.save_state_of(r)
    }

    fn load_states(&mut self, states: &[EngineState]) -> Result<(), EngineError> {
        self.load_states_of(states)
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
        guard_interval(self.state.layout.n_particles.iter().map(|&n| n as u64).sum())
    }

    fn set_watch(&mut self, r: usize, watch: Watch) -> bool {
        match self.reps.get_mut(r) {
            Some(rep) => {
                rep.backup_watch = Some(watch.clone());
                rep.watch = Some(watch);
                true
            }
            None => false,
        }
    }

    fn watch(&self, r: usize) -> Option<Watch> {
        self.reps.get(r).and_then(|rep| rep.watch.clone())
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
