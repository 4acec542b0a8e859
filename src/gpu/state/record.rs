//! What a step records: the one list of a step's dispatches (`step_dispatches`: every kernel
//! of a step, in order, with its bind groups and size), the stages it falls into (what
//! `rrpdem bench --stages` times), and the recording of steps, of the initial force evaluation
//! and of the diagnostics reduction at the end of a batch.
//!
//! **Indirect grid arguments**: the grid stage (contact grid and neighbour lists) runs only in
//! steps where some particle has moved more than half the skin since the last rebuild, which
//! the device decides (`integrate` raises the rebuild flag). So every dispatch of the grid stage
//! but the first is indirect: `grid_args_set` writes their workgroup counts into `grid_args`,
//! copied from `grid_full` (the counts at full size, planned with the list) in steps that
//! rebuild and zeros otherwise, so that the other steps launch no grid work at all. Entry k of
//! the arguments belongs to the k-th indirect dispatch of the list. In a batch of replicas that
//! rebuild rarely, the steps between grid steps do not even record the grid stage (docs/GPU.md,
//! "Quiet steps"; `record_step`'s `grid`, `record_step_rest` after a miss).

use super::super::chunks::ChunkPlan;
use super::super::pipeline::DemPipeline;
use super::super::shader::{
    NQ, REBUILD_ALL, REBUILD_SOME, RSTATUS_LEN, RSTATUS_REBUILD, RSTATUS_REBUILDS, SCAN_WG, STATUS_LEN,
    STATUS_MISS_STEP, STATUS_NONE, STATUS_REBUILD, STATUS_STEP, WG,
};
use super::super::sizes::real_size;
use super::super::watch::watch_gpu_size;
use super::DemState;
use crate::integrator::Integrator;

/// The stages of a step, in order: how `step_dispatches` groups a step's kernels, and what
/// `rrpdem bench --stages` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// (rrp-exact check), opening kick, drift, rotation, block moves, rebuild decision.
    Integrate,
    /// Contact grid and neighbour lists (no work in steps that do not rebuild).
    Grid,
    /// The per-bond kernel (with rupture, the break test) and the halo copies.
    Bonds,
    /// The dissipative loads (MODEL §10, where some replica dissipates) and the per-particle
    /// kernel: bond gather, contacts, walls, fields, closing kick.
    Particle,
    /// The watch (energy guard, impact measures), when some replica is watched: its sums per
    /// replica, level after level, and the update of each replica's watch.
    Watch,
}

impl Stage {
    pub const ALL: [Stage; 5] = [Stage::Integrate, Stage::Grid, Stage::Bonds, Stage::Particle, Stage::Watch];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Integrate => "integrate",
            Stage::Grid => "grid",
            Stage::Bonds => "bonds",
            Stage::Particle => "particle",
            Stage::Watch => "watch",
        }
    }
}

/// Timestamp queries for one step of `record_step`: stage k writes its start and end at
/// `base + 2k` and `base + 2k + 1` of `set`; with `kernels`, dispatch k of `step_dispatches`
/// (each in its own pass, `DemState::timed_kernels` names them) does.
#[derive(Clone, Copy)]
pub struct StageQueries<'a> {
    pub set: &'a wgpu::QuerySet,
    pub base: u32,
    pub kernels: bool,
}

/// A compute pass that writes its start and end time into slot `k` of a step's queries.
fn timed_pass<'e>(
    encoder: &'e mut wgpu::CommandEncoder,
    q: StageQueries<'_>,
    k: usize,
    label: &str,
) -> wgpu::ComputePass<'e> {
    let at = q.base + 2 * k as u32;
    let writes = wgpu::ComputePassTimestampWrites {
        query_set: q.set,
        beginning_of_pass_write_index: Some(at),
        end_of_pass_write_index: Some(at + 1),
    };
    encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(label), timestamp_writes: Some(writes) })
}

/// Which bind groups a dispatch uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Groups {
    /// The kernel's groups over the main state buffers (`bind::main_groups`).
    Main,
    /// The kernel's groups of chunk c (`bind_chunks`: of its kind of chunks).
    Chunk(usize),
    /// `scan_blocks`, `scan_add` of scan level l.
    ScanBlocks(usize),
    ScanAdd(usize),
    /// The watch's level l (0: `watch_state`, then `watch_partials`), and `watch_update`.
    WatchLevel(usize),
    WatchUpdate,
}

/// How a dispatch gets its workgroup count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Launch {
    /// From its size, on the host, in every step (none when it has no items).
    Always,
    /// As `Always`, only with the rrp-exact integrator.
    RrpExact,
    /// Entry k of the indirect arguments `grid_args` (see the module note).
    Indirect(usize),
    /// As `Always`, only in batches that watch some replica (`DemState::start_watch`).
    Watching,
}

/// One dispatch of a step: its stage, kernel, bind groups, size (`items`, `per_group` items per
/// workgroup: at full size for an indirect one) and launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Dispatch {
    pub stage: Stage,
    pub kernel: &'static str,
    pub groups: Groups,
    pub items: u32,
    pub per_group: u32,
    pub launch: Launch,
}

/// Every dispatch of a step, in the order it is recorded, for `n` particles of `replicas`
/// replicas, a grid of `buckets` buckets scanned in levels of `scan_lens`, the chunks of `plan`,
/// the watch's levels of `watch_groups` workgroups and, with `dissipate`, the dissipative loads: the one description of a step
/// (`record_stage` records it, `bind_grid_args` sizes the indirect arguments from it). Made again
/// whenever the chunks change (`replan`).
pub(super) fn step_dispatches(
    n: u32,
    replicas: u32,
    buckets: u32,
    scan_lens: &[u32],
    plan: &ChunkPlan,
    watch_groups: &[u32],
    dissipate: bool,
) -> Vec<Dispatch> {
    use {Groups::*, Launch::*, Stage::*};
    let d =
        |stage, kernel, groups, items, per_group, launch| Dispatch { stage, kernel, groups, items, per_group, launch };
    let mut v = vec![
        // The rrp-exact condition h²|Ω_h|² < 1, with the first step's opening kick.
        d(Integrate, "integrate_check", Main, n, WG, RrpExact),
        // Each replica's anchor displacement, which the skin rule is relative to.
        d(Integrate, "drift_anchor", Main, replicas, WG, Always),
        // Kick, drift, rotation, block moves; each replica's skin-rule verdicts.
        d(Integrate, "integrate", Main, n, WG, Always),
        // Which replicas rebuild in this step (each on its own verdicts), and whether any does.
        d(Integrate, "rebuild_decide", Main, replicas, WG, Always),
    ];
    // The grid stage, all indirect: clear the bucket table, count, scan the counts (each level,
    // then, top down, add the scanned totals of the level above into every level but the top),
    // scatter the particles into their buckets, order each bucket by index, then build the
    // neighbour lists chunk by chunk.
    let mut grid = vec![(Main, "grid_clear", buckets + 1, WG), (Main, "grid_count", n, WG)];
    for (l, &len) in scan_lens.iter().enumerate() {
        grid.push((ScanBlocks(l), "scan_blocks", len, 2 * SCAN_WG));
    }
    for (l, &len) in scan_lens.iter().enumerate().rev().skip(1) {
        grid.push((ScanAdd(l), "scan_add", len, SCAN_WG));
    }
    grid.push((Main, "grid_scatter", n, WG));
    grid.push((Main, "grid_order", n, WG));
    for (c, ch) in plan.particles.iter().enumerate() {
        grid.push((Chunk(c), "nbr_build", ch.gpu.p_end - ch.gpu.p_first, WG));
    }
    // This step's workgroup counts of the grid stage, three words per indirect dispatch.
    v.push(d(Grid, "grid_args_set", Main, 3 * grid.len() as u32, WG, Always));
    for (k, (groups, kernel, items, per_group)) in grid.into_iter().enumerate() {
        v.push(d(Grid, kernel, groups, items, per_group, Indirect(k)));
    }
    // Per bond chunk: the bond kernel, then the copy of its far bonds' results into the halo.
    for (c, ch) in plan.bonds.iter().enumerate() {
        v.push(d(Bonds, "bonds", Chunk(c), ch.gpu.b_end - ch.gpu.b_first, WG, Always));
        v.push(d(Bonds, "halo_copy", Chunk(c), ch.gpu.fill_end - ch.gpu.fill_first, WG, Always));
    }
    // Per particle chunk: with `dissipate` (some replica dissipates) the dissipative loads (MODEL
    // §10), then bond gather, contacts, walls, fields, closing kick.
    for (c, ch) in plan.particles.iter().enumerate().filter(|_| dissipate) {
        v.push(d(Particle, "dissipate", Chunk(c), ch.gpu.p_end - ch.gpu.p_first, WG, Always));
    }
    for (c, ch) in plan.particles.iter().enumerate() {
        v.push(d(Particle, "particle", Chunk(c), ch.gpu.p_end - ch.gpu.p_first, WG, Always));
    }
    // The watch: the particles' shares summed per replica, level after level, then each
    // replica's watch updated.
    for (l, &groups) in watch_groups.iter().enumerate() {
        let kernel = if l == 0 { "watch_state" } else { "watch_partials" };
        v.push(d(Watch, kernel, WatchLevel(l), groups * WG, WG, Watching));
    }
    v.push(d(Watch, "watch_update", WatchUpdate, replicas, WG, Watching));
    v
}

/// The full-size workgroup counts (x, y, 1) of the indirect dispatches of `steps`, in the order
/// of their entries (`grid_full`).
pub(super) fn grid_arguments(steps: &[Dispatch], pipe: &DemPipeline) -> Vec<u32> {
    let mut full = Vec::new();
    for s in steps {
        if let Launch::Indirect(k) = s.launch {
            debug_assert_eq!(3 * k, full.len());
            let (x, y) = pipe.grid(s.items.div_ceil(s.per_group));
            full.extend([x, y, 1]);
        }
    }
    full
}

impl DemState {
    /// Dispatches one step records for `integrator` with the watch on: (all of them, those of
    /// the grid stage among them, which are indirect and launch no workgroup unless the step
    /// rebuilds). The figures `rrpdem bench` reports (issue 24).
    pub fn dispatch_counts(&self, integrator: Integrator) -> (usize, usize) {
        let recorded = |s: &&Dispatch| match s.launch {
            Launch::RrpExact => integrator == Integrator::RrpExact,
            _ => s.items > 0 || matches!(s.launch, Launch::Indirect(_)),
        };
        let all = self.steps.iter().filter(recorded).count();
        let grid = self.steps.iter().filter(recorded).filter(|s| matches!(s.launch, Launch::Indirect(_))).count();
        (all, grid)
    }
}

/// Status words at the start of a batch: step 0, rebuild flag as asked, no failure of any of
/// the `replicas` yet.
pub(super) fn initial_status(rebuild: bool, replicas: usize) -> Vec<u32> {
    let mut status = vec![0u32; STATUS_LEN];
    status.extend(std::iter::repeat_n(STATUS_NONE, replicas * RSTATUS_LEN));
    for r in 0..replicas {
        status[STATUS_LEN + r * RSTATUS_LEN + RSTATUS_REBUILD] = 0;
        status[STATUS_LEN + r * RSTATUS_LEN + RSTATUS_REBUILDS] = 0;
    }
    status[STATUS_REBUILD] = if rebuild { REBUILD_ALL } else { 0 };
    status[STATUS_MISS_STEP] = STATUS_NONE;
    status
}

/// Status words of an evaluation that rebuilds the replicas `only` (their verdicts set as if
/// both skin tests had failed; `rebuild_decide` rebuilds a replica on its own verdicts) and
/// leaves the others' lists as they are.
pub(super) fn status_rebuilding(only: &[usize], replicas: usize) -> Vec<u32> {
    let mut status = initial_status(false, replicas);
    for &r in only {
        status[STATUS_LEN + r * RSTATUS_LEN + RSTATUS_REBUILD] = REBUILD_ALL;
    }
    status
}

impl DemState {
    /// Resets the status words and the step counter before a batch (queued before the next
    /// submit); `rebuild` makes its first step rebuild the grid and the neighbour lists.
    pub fn reset_status(&self, queue: &wgpu::Queue, rebuild: bool) {
        self.write_status(queue, &initial_status(rebuild, self.layout.replicas()));
    }

    /// `reset_status` for an evaluation that rebuilds the replicas `only` (`status_rebuilding`).
    pub fn reset_status_rebuilding(&self, queue: &wgpu::Queue, only: &[usize]) {
        self.write_status(queue, &status_rebuilding(only, self.layout.replicas()));
    }

    fn write_status(&self, queue: &wgpu::Queue, status: &[u32]) {
        queue.write_buffer(&self.buffers["status"], 0, bytemuck::cast_slice(status));
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

    /// Records one stage of a step: its dispatches of `step_dispatches`, in order.
    fn record_stage(
        &self,
        pipe: &DemPipeline,
        pass: &mut wgpu::ComputePass<'_>,
        stage: Stage,
        integrator: Integrator,
    ) -> usize {
        self.steps.iter().filter(|s| s.stage == stage).map(|s| self.record_dispatch(pipe, pass, s, integrator)).sum()
    }

    /// Records one dispatch of `step_dispatches` (none where it does not apply to this step);
    /// returns how many it recorded (0 or 1).
    fn record_dispatch(
        &self,
        pipe: &DemPipeline,
        pass: &mut wgpu::ComputePass<'_>,
        s: &Dispatch,
        integrator: Integrator,
    ) -> usize {
        let groups = match s.groups {
            Groups::Main => &self.bind[s.kernel],
            Groups::Chunk(c) => &self.chunk_bind[s.kernel][c],
            Groups::ScanBlocks(l) => &self.scan[l].blocks,
            Groups::ScanAdd(l) => match &self.scan[l].add {
                Some(add) => add,
                None => return 0,
            },
            Groups::WatchLevel(0) => &self.watch.state,
            Groups::WatchLevel(l) => &self.watch.partials[l - 1],
            Groups::WatchUpdate => &self.watch.update,
        };
        let direct = match s.launch {
            Launch::Always => true,
            Launch::RrpExact => integrator == Integrator::RrpExact,
            Launch::Watching => self.watching,
            Launch::Indirect(k) => {
                let Some((_, grid_args)) = &self.grid_args else { return 0 };
                pipe.dispatch_indirect(pass, s.kernel, groups, grid_args, 12 * k as u64);
                return 1;
            }
        };
        usize::from(direct && pipe.dispatch(pass, s.kernel, groups, s.items, s.per_group))
    }

    /// The initial force evaluation (params.batch_len = 0: no kicks): the stages after
    /// `Integrate` up to the forces (the state evaluated is one the watch has already seen).
    pub fn record_initial(&self, pipe: &DemPipeline, encoder: &mut wgpu::CommandEncoder) {
        self.record_step_prologue(encoder, true);
        let mut pass = encoder
            .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("evaluate"), timestamp_writes: None });
        // Which replicas rebuild (those the host's flag names; no particle has moved).
        for s in self.steps.iter().filter(|s| s.kernel == "rebuild_decide") {
            pipe.dispatch(&mut pass, s.kernel, &self.bind[s.kernel], s.items, s.per_group);
        }
        for stage in [Stage::Grid, Stage::Bonds, Stage::Particle] {
            self.record_stage(pipe, &mut pass, stage, Integrator::RrpNewmark);
        }
    }

    /// One full step, `Stage::ALL` in order: (rrp-exact check), opening kick + drift + rotation,
    /// force evaluation and closing kick; without `grid`, no dispatch of the grid stage (a step
    /// the device must not rebuild in: `GridSteps`). One compute pass; with `queries`, one pass
    /// per stage, each writing its start and end time (for `rrpdem bench --stages`). Returns the
    /// dispatches recorded.
    pub fn record_step(
        &self,
        pipe: &DemPipeline,
        encoder: &mut wgpu::CommandEncoder,
        integrator: Integrator,
        (first, grid): (bool, bool),
        queries: Option<StageQueries<'_>>,
    ) -> usize {
        self.record_step_prologue(encoder, first);
        self.record_stages(pipe, encoder, integrator, &Stage::ALL, grid, queries)
    }

    /// The rest of a step whose `Integrate` stage ran in a batch that then missed a rebuild
    /// (`STATUS_MISS_STEP`): its grid stage and the force evaluation, as `record_step` records
    /// them (after `resume_after_miss`; with `queries`, its stages timed in the step's slots).
    /// Returns the dispatches recorded.
    pub fn record_step_rest(
        &self,
        pipe: &DemPipeline,
        encoder: &mut wgpu::CommandEncoder,
        queries: Option<StageQueries<'_>>,
    ) -> usize {
        // The integrator only decides whether `integrate_check` (stage Integrate) is recorded.
        let rest = [Stage::Grid, Stage::Bonds, Stage::Particle, Stage::Watch];
        self.record_stages(pipe, encoder, Integrator::RrpNewmark, &rest, true, queries)
    }

    /// The status words for finishing a batch from batch step `step`, whose rebuild the device
    /// decided where no grid stage was recorded: the step counter back at it, its rebuild flag
    /// raised (the replicas' own slots still hold their decisions), no miss (queued before the
    /// next submit). Everything else the status holds (failures, breaks, counts) carries on.
    pub fn resume_after_miss(&self, queue: &wgpu::Queue, step: u32) {
        let status = &self.buffers["status"];
        let word = |slot: usize, v: u32| queue.write_buffer(status, 4 * slot as u64, bytemuck::bytes_of(&v));
        word(STATUS_STEP, step);
        word(STATUS_REBUILD, REBUILD_SOME);
        word(STATUS_MISS_STEP, STATUS_NONE);
    }

    /// The kernel of each dispatch of a step, in `step_dispatches` order: what the timestamp
    /// pairs of a step timed with `StageQueries::kernels` measure (two per dispatch).
    pub fn timed_kernels(&self) -> Vec<(Stage, &'static str)> {
        self.steps.iter().map(|s| (s.stage, s.kernel)).collect()
    }

    /// Timestamp pairs per timed step: one per dispatch with `kernels`, else one per stage.
    pub fn timed_slots(&self, kernels: bool) -> usize {
        if kernels { self.steps.len() } else { Stage::ALL.len() }
    }

    /// `stages` of a step (in `Stage::ALL` order), the grid's only with `grid`; with `queries`,
    /// one timed pass per stage. Returns the dispatches recorded.
    fn record_stages(
        &self,
        pipe: &DemPipeline,
        encoder: &mut wgpu::CommandEncoder,
        integrator: Integrator,
        stages: &[Stage],
        grid: bool,
        queries: Option<StageQueries<'_>>,
    ) -> usize {
        let mut recorded = 0;
        let Some(q) = queries else {
            let mut pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("step"), timestamp_writes: None });
            for &stage in stages.iter().filter(|&&s| grid || s != Stage::Grid) {
                recorded += self.record_stage(pipe, &mut pass, stage, integrator);
            }
            return recorded;
        };
        if q.kernels {
            for (k, s) in self.steps.iter().enumerate().filter(|(_, s)| stages.contains(&s.stage)) {
                let mut pass = timed_pass(encoder, q, k, s.kernel);
                if grid || s.stage != Stage::Grid {
                    recorded += self.record_dispatch(pipe, &mut pass, s, integrator);
                }
            }
            return recorded;
        }
        for (k, stage) in Stage::ALL.into_iter().enumerate().filter(|(_, s)| stages.contains(s)) {
            let mut pass = timed_pass(encoder, q, k, stage.name());
            if grid || stage != Stage::Grid {
                recorded += self.record_stage(pipe, &mut pass, stage, integrator);
            }
        }
        recorded
    }

    /// The end of a batch: the segmented diagnostics reduction (level 0 chunk by chunk, then
    /// every further level) and the copy of status + diagnostics into the readback buffer.
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
        let replicas = self.layout.replicas() as u64;
        let records = replicas * NQ as u64 * rs;
        encoder.copy_buffer_to_buffer(&self.buffers["status"], 0, &self.readback, 0, self.status_bytes);
        encoder.copy_buffer_to_buffer(&self.buffers[self.reduce_result], 0, &self.readback, self.status_bytes, records);
        // Every replica's watch and its flags word.
        let watch = replicas * watch_gpu_size(self.precision) as u64;
        encoder.copy_buffer_to_buffer(&self.buffers["watch"], 0, &self.readback, self.watch_offset, watch);
        let flags_at = self.watch_offset + watch;
        encoder.copy_buffer_to_buffer(&self.buffers["watch_flags"], 0, &self.readback, flags_at, 4 * replicas);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::chunks::{Chunk, ChunkGpu};

    fn chunk(gpu: ChunkGpu) -> Chunk {
        Chunk { gpu, bonds: 0..0, inc: 0..0, nbr: 0..0, hist: 0..0, groups: 0 }
    }

    #[test]
    fn a_step_lists_every_kernel_once_per_chunk_in_order_with_its_grid_arguments() {
        // Two particle chunks, two bond chunks (the second with halo entries to fill), three scan
        // levels.
        let p = |a, b| chunk(ChunkGpu { p_first: a, p_end: b, ..Default::default() });
        let b =
            |a, e, f0, f1| chunk(ChunkGpu { b_first: a, b_end: e, fill_first: f0, fill_end: f1, ..Default::default() });
        let plan = ChunkPlan {
            particles: vec![p(0, 700), p(700, 1000)],
            bonds: vec![b(0, 640, 0, 0), b(640, 999, 0, 3)],
            ..Default::default()
        };
        let steps = step_dispatches(1000, 2, 2048, &[2049, 5, 1], &plan, &[16, 1], false);
        let names: Vec<(Stage, &str, u32)> = steps.iter().map(|s| (s.stage, s.kernel, s.items)).collect();
        use Stage::*;
        let want = vec![
            (Integrate, "integrate_check", 1000),
            (Integrate, "drift_anchor", 2),
            (Integrate, "integrate", 1000),
            (Integrate, "rebuild_decide", 2),
            (Grid, "grid_args_set", 3 * 11),
            (Grid, "grid_clear", 2049),
            (Grid, "grid_count", 1000),
            (Grid, "scan_blocks", 2049),
            (Grid, "scan_blocks", 5),
            (Grid, "scan_blocks", 1),
            (Grid, "scan_add", 5),
            (Grid, "scan_add", 2049),
            (Grid, "grid_scatter", 1000),
            (Grid, "grid_order", 1000),
            (Grid, "nbr_build", 700),
            (Grid, "nbr_build", 300),
            (Bonds, "bonds", 640),
            (Bonds, "halo_copy", 0),
            (Bonds, "bonds", 359),
            (Bonds, "halo_copy", 3),
            (Particle, "particle", 700),
            (Particle, "particle", 300),
            (Watch, "watch_state", 16 * WG),
            (Watch, "watch_partials", WG),
            (Watch, "watch_update", 2),
        ];
        assert_eq!(names, want);
        // The stages come in the order of `Stage::ALL`, each in one run.
        let order: Vec<Stage> = steps.iter().map(|s| s.stage).collect();
        assert!(
            order
                .windows(2)
                .all(|w| Stage::ALL.iter().position(|&s| s == w[0]) <= Stage::ALL.iter().position(|&s| s == w[1]))
        );
        // Every grid dispatch but `grid_args_set` is indirect, numbered in order; nothing else is.
        let indirect: Vec<usize> = steps
            .iter()
            .filter_map(|s| match s.launch {
                Launch::Indirect(k) => Some(k),
                _ => None,
            })
            .collect();
        assert_eq!(indirect, (0..11).collect::<Vec<_>>());
        assert!(
            steps
                .iter()
                .all(|s| matches!(s.launch, Launch::Indirect(_)) == (s.stage == Grid && s.kernel != "grid_args_set"))
        );
        // Scan levels: blocks of two values per invocation; the additions top down, none at the top.
        assert_eq!(steps[7].per_group, 2 * SCAN_WG);
        assert_eq!((steps[10].groups, steps[11].groups), (Groups::ScanAdd(1), Groups::ScanAdd(0)));
        assert_eq!((steps[14].groups, steps[15].groups), (Groups::Chunk(0), Groups::Chunk(1)));
    }

    #[test]
    fn a_batch_starts_with_no_failure_and_the_rebuild_flag_as_asked() {
        let s = initial_status(true, 2);
        assert_eq!(s.len(), STATUS_LEN + 2 * RSTATUS_LEN);
        assert_eq!(s[STATUS_REBUILD], REBUILD_ALL);
        // No failure; each replica's rebuild verdicts and count at 0.
        for r in 0..2 {
            for (k, &w) in s[STATUS_LEN + r * RSTATUS_LEN..][..RSTATUS_LEN].iter().enumerate() {
                let want = if k == RSTATUS_REBUILD || k == RSTATUS_REBUILDS { 0 } else { STATUS_NONE };
                assert_eq!(w, want, "replica {r}, slot {k}");
            }
        }
        assert_eq!(initial_status(false, 1)[STATUS_REBUILD], 0);
        // An evaluation that rebuilds replica 1 of 3 alone: its verdicts both failed, no one's
        // else, and not the batch's flag (which would rebuild every running replica).
        let s = status_rebuilding(&[1], 3);
        let verdicts: Vec<u32> = (0..3).map(|r| s[STATUS_LEN + r * RSTATUS_LEN + RSTATUS_REBUILD]).collect();
        assert_eq!((s[STATUS_REBUILD], verdicts), (0, vec![0, REBUILD_ALL, 0]));
    }
}
