//! Running steps: batches of steps recorded and submitted without waiting, each finished by
//! one host wait that reads the status words and one diagnostics record per replica back
//! (`finish_batch`); failures turned into the CPU engine's errors, breaks booked in order,
//! neighbour lists laid out anew after an overflow; the backup point of an `advance` and the
//! rollback to it; the re-evaluations after a restore; and the timing of a step's stages.

use super::{GpuEngine, quiet};
use crate::diagnostics::Diagnostics;
use crate::error::EngineError;
use crate::gpu::context::map_read;
use crate::gpu::params::GridSteps;
use crate::gpu::shader::{
    NQ, REC_E_DISS, REC_E_ROT, REC_E_TRANS, REC_F_WALL, REC_L, REC_MASS_X, REC_P, REC_S, REC_U_AXIAL, REC_U_BEND,
    REC_U_CONTACT, REC_U_GRAVITY, REC_U_SHEAR, REC_U_WALL, RSTATUS_BAD_PARTICLE, RSTATUS_BAD_STEP,
    RSTATUS_CONTACT_WALL, RSTATUS_EXACT_PARTICLE, RSTATUS_EXACT_STEP, RSTATUS_GRID_PARTICLE, RSTATUS_GRID_STEP,
    RSTATUS_HIST_PARTICLE, RSTATUS_HIST_STEP, RSTATUS_LEN, RSTATUS_REBUILDS, STATUS_BREAKS, STATUS_LEN, STATUS_MAX_NBR,
    STATUS_MISS_STEP, STATUS_NONE, STATUS_OVERFLOW, STATUS_REBUILDS,
};
use crate::gpu::state::{Stage, StageQueries};
use crate::interactions::BreakEvent;
use glam::DVec3;

/// Steps recorded per command buffer (bounds encoder memory; submits are not waited on).
const STEPS_PER_SUBMIT: u64 = 256;

/// A kernel's mean device seconds per step (`GpuEngine::time_kernels`): (stage, kernel, seconds).
pub type KernelTime = (&'static str, &'static str, f64);

/// Most steps `time_stages` times at once (wgpu's 4096 queries per set, two per stage).
pub const MAX_TIMED_STEPS: u32 = 4096 / (2 * Stage::ALL.len() as u32);
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

impl GpuEngine {
    /// Forces, moments and diagnostics of the current state of every running replica, with
    /// fresh neighbour lists, as at the start of a run. If a list overflows, the forces are
    /// still exact (grid fallback) but the lists are reallocated, where they can grow, and
    /// built again. Returns the replicas whose state fails.
    pub(super) fn evaluate_current(&mut self) -> Result<Vec<(usize, EngineError)>, EngineError> {
        self.evaluate_rebuilding(None)
    }

    /// `evaluate_current` that rebuilds the lists of the replicas `only` where given: the other
    /// running replicas' lists hold for their current state (their last step's skin tests
    /// passed or rebuilt them), so they keep them and their rebuild counts, as alone
    /// (issue 24: a replica's rebuild does not touch the others'). After an overflow (in the
    /// last batch, or in this evaluation) the lists are incomplete or laid out anew (empty):
    /// then every running replica rebuilds.
    fn evaluate_rebuilding(&mut self, only: Option<&[usize]>) -> Result<Vec<(usize, EngineError)>, EngineError> {
        // Lists incomplete or laid out anew after an overflow: every replica rebuilds.
        let mut only = only.filter(|_| !self.lists_stale);
        loop {
            let layout = self.nbr_layouts;
            self.ctx.queue.write_buffer(self.state.buffer("params"), 0, &self.params_bytes(0, GridSteps::default()));
            match only.take() {
                Some(only) => self.state.reset_status_rebuilding(&self.ctx.queue, only),
                None => self.state.reset_status(&self.ctx.queue, true),
            }
            let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
            if !self.dload_kept {
                // An evaluation that computes the dissipative loads takes the friction history's
                // step in place: one made again (lists grown) starts from the same history, a
                // fresh state's.
                self.state.record_clear_history(&mut encoder);
            }
            self.state.record_initial(&self.pipe, &mut encoder);
            self.state.record_readback(&self.pipe, &mut encoder);
            self.ctx.queue.submit([encoder.finish()]);
            let failures = self.finish_batch(0)?;
            if self.break_overflow {
                // One evaluation is one step: no shorter batch can hold its breaks.
                self.break_overflow = false;
                return Err(self.too_many_breaks());
            }
            if !self.rebuild_next || self.nbr_layouts == layout || !failures.is_empty() {
                return Ok(failures);
            }
        }
    }

    /// The error of a step that broke more bonds than one batch's break records hold.
    fn too_many_breaks(&self) -> EngineError {
        EngineError::Unsupported(format!(
            "more than {} bonds broke in one step (at step {}), more than the break records hold on this adapter",
            self.state.break_capacity, self.step
        ))
    }

    /// Runs `steps` steps (at most `MAX_TIMED_STEPS`) of a one-replica engine with a timestamp
    /// before and after each stage, and returns the mean device time per step of each stage
    /// (`Stage::ALL` order) in seconds; `None` where the adapter has no timestamp queries. The
    /// steps are real steps of the run; each stage is its own compute pass while timed.
    pub fn time_stages(&mut self, steps: u32) -> Result<Option<Vec<(&'static str, f64)>>, EngineError> {
        let steps = steps.clamp(1, MAX_TIMED_STEPS);
        let Some(per_slot) = self.time_passes(steps, false)? else { return Ok(None) };
        Ok(Some(Stage::ALL.iter().map(|s| s.name()).zip(per_slot).collect()))
    }

    /// As `time_stages`, each dispatch of a step in its own timed pass (at most
    /// `4096 / (2 · dispatches)` steps: wgpu's queries per set): the mean device time per step
    /// of each kernel, summed over its dispatches (chunks, scan levels), as (stage, kernel,
    /// seconds) in the order the step first dispatches it. Where a pass boundary costs the
    /// device something, the kernels' sum exceeds the stages'.
    pub fn time_kernels(&mut self, steps: u32) -> Result<Option<Vec<KernelTime>>, EngineError> {
        let kernels = self.state.timed_kernels();
        let steps = steps.clamp(1, (4096 / (2 * kernels.len() as u32)).max(1));
        let Some(per_slot) = self.time_passes(steps, true)? else { return Ok(None) };
        let mut out: Vec<KernelTime> = Vec::new();
        for ((stage, kernel), t) in kernels.into_iter().zip(per_slot) {
            match out.iter_mut().find(|x| x.1 == kernel) {
                Some(x) => x.2 += t,
                None => out.push((stage.name(), kernel, t)),
            }
        }
        Ok(Some(out))
    }

    /// Runs `steps` timed steps, a timestamp pair per stage (per dispatch with `kernels`), and
    /// returns the mean seconds per step of each pair; `None` without timestamp queries.
    fn time_passes(&mut self, steps: u32, kernels: bool) -> Result<Option<Vec<f64>>, EngineError> {
        self.single("time_stages")?;
        if !self.ctx.timestamps {
            return Ok(None);
        }
        let slots = self.state.timed_slots(kernels) as u32;
        let count = 2 * slots * steps;
        let set = self.ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("stages"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        self.stage_queries = Some((set, kernels));
        let ran = self.run(steps as u64);
        let set = self.stage_queries.take();
        if let Some((_, err)) = ran?.into_iter().next() {
            return Err(err);
        }
        let (set, _) = set.ok_or_else(|| EngineError::Unsupported("the stage queries vanished".into()))?;
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
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&map_read(&self.ctx.device, &staging)?);
        self.ctx.take_error()?;
        // Nanoseconds per tick; a timestamp pair that went backwards (a reset counter) counts 0.
        let period = self.ctx.queue.get_timestamp_period() as f64 * 1e-9;
        let slots = slots as usize;
        Ok(Some(
            (0..slots)
                .map(|k| {
                    let total: u64 = (0..steps as usize)
                        .map(|t| {
                            let at = 2 * (t * slots + k);
                            ticks[at + 1].saturating_sub(ticks[at])
                        })
                        .sum();
                    total as f64 * period / steps as f64
                })
                .collect(),
        ))
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
        if status[STATUS_MISS_STEP] != STATUS_NONE {
            // The batch stopped where it missed a rebuild: `advance_batch` finishes it.
            self.missed_at = Some(status[STATUS_MISS_STEP]);
            return Ok(Vec::new());
        }
        self.rebuilds += status[STATUS_REBUILDS] as u64;
        // Each replica's own (taken back with it by `restore_replica`, so that a batch taken
        // again or a rewind does not count its steps twice), and whether it rebuilds rarely.
        for (r, rep) in self.reps.iter_mut().enumerate() {
            let count = status[STATUS_LEN + r * RSTATUS_LEN + RSTATUS_REBUILDS] as u64;
            rep.rebuilds += count;
            if steps > 0 && !rep.held {
                rep.rare = quiet::rebuilds_rarely(count, steps, rep.early);
            }
        }
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
        let watches =
            if self.state.watching() && steps > 0 { Some(self.state.read_watch(&self.ctx.device)?) } else { None };
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
            // The watch of this batch's steps; a refused step is a failure (`run` then takes the
            // replica back to the step before it).
            let wall0 = self.state.layout.wall_start[r] as usize;
            let rep = &mut self.reps[r];
            if let (Some(all), Some(watch)) = (&watches, rep.watch.as_mut()) {
                let (read, flags) = &all[r];
                let start = rep.step;
                let first_here = read.first.map(|s| start + s as u64 + 1);
                let trip = read.merge(watch, *flags, start);
                // The wall it touched first in this batch, by the device's choice: its normal
                // as the model gives it (the device's is in its precision).
                if first_here.is_some() && watch.impact.first_contact_step == first_here {
                    let k = (w(RSTATUS_CONTACT_WALL) as usize).saturating_sub(wall0);
                    if let Some(wall) = rep.params.walls.get(k) {
                        watch.impact.normal = Some(wall.normal);
                    }
                }
                if let Some((step, error)) = trip {
                    let limit = watch.energy.limit;
                    rep.step = step;
                    let t = step as f64 * self.dt;
                    failures
                        .push((r, EngineError::EnergyGuard { step, t, error, limit, particle: None, force: f64::NAN }));
                    continue;
                }
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
        // A batch or evaluation with a rebuild of every running replica at its first step (which
        // follows any overflow) leaves stale lists only with the replicas it held.
        self.lists_stale = overflow || (self.lists_stale && self.reps.iter().any(|r| r.held));
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
        if failed(RSTATUS_HIST_STEP) && !failed(RSTATUS_GRID_STEP) && !failed(RSTATUS_BAD_STEP) {
            let particle = w(RSTATUS_HIST_PARTICLE) as usize - p0;
            let step = if steps == 0 { start } else { start + w(RSTATUS_HIST_STEP) as u64 + 1 };
            self.reps[r].step = step;
            return Ok(Some(super::history::too_many_frictional_contacts(particle, &format!("at step {step}"))));
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
    ///
    /// Where every running replica rebuilds rarely, the batch records the grid stage only at its
    /// first step and its grid steps (`quiet::plan`; docs/GPU.md, "Quiet steps"). Should some
    /// replica have to rebuild at another step after all, the device stops the whole batch
    /// there (`STATUS_MISS_STEP`), and the batch is finished from that step with the grid
    /// stage in every step: the same steps, the same decisions, the same bits.
    fn advance_batch(&mut self, steps: u32, backup: bool) -> Result<Vec<(usize, EngineError)>, EngineError> {
        // Each replica's early rebuilds on its own history only, so that it rebuilds at the steps
        // it rebuilds at alone.
        for rep in &mut self.reps {
            rep.early = rep.rare && !self.options.grid_every_step;
        }
        let running: Vec<(u64, bool)> = self.reps.iter().filter(|r| !r.held).map(|r| (r.step, r.early)).collect();
        let grid = quiet::plan(&running, !self.lists_stuck);
        self.ctx.queue.write_buffer(self.state.buffer("params"), 0, &self.params_bytes(steps, grid));
        self.write_reps();
        self.start_watch();
        self.submit_steps(0..steps as u64, grid, backup, false);
        let found = self.finish_batch(steps as u64)?;
        let Some(missed) = self.missed_at.take() else {
            return Ok(found);
        };
        self.recorded.misses += 1;
        let every = GridSteps { fast: false, ..grid };
        self.ctx.queue.write_buffer(self.state.buffer("params"), 0, &self.params_bytes(steps, every));
        self.state.resume_after_miss(&self.ctx.queue, missed);
        self.submit_steps(missed as u64..steps as u64, every, false, true);
        let found = self.finish_batch(steps as u64)?;
        match self.missed_at.take() {
            // With the grid stage in every step no rebuild can be missed.
            Some(again) => Err(EngineError::Unsupported(format!("a rebuild at batch step {again} was missed twice"))),
            None => Ok(found),
        }
    }

    /// Records and submits the batch steps `range` (with `rest`, the first of them from its grid
    /// stage on: the rest of a missed step) with the grid stage where `grid` records it, in
    /// command buffers of `STEPS_PER_SUBMIT` steps, the first starting with the backup copy
    /// where `backup`, the last ending with the readback; counts what they record.
    fn submit_steps(&mut self, range: std::ops::Range<u64>, grid: GridSteps, backup: bool, rest: bool) {
        let mut done = range.start;
        while done < range.end {
            let chunk = STEPS_PER_SUBMIT.min(range.end - done);
            let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
            if backup && done == 0 {
                self.state.record_backup(&mut encoder);
            }
            for k in done..done + chunk {
                let queries = self.stage_queries.as_ref().map(|&(ref set, kernels)| {
                    let slots = self.state.timed_slots(kernels) as u64;
                    StageQueries { set, base: (2 * slots * k) as u32, kernels }
                });
                let with_grid = grid.recorded(k);
                self.recorded.steps += 1;
                self.recorded.grid_steps += with_grid as u64;
                let recorded = if rest && k == range.start {
                    self.state.record_step_rest(&self.pipe, &mut encoder, queries)
                } else {
                    self.state.record_step(&self.pipe, &mut encoder, self.integrator, (k == 0, with_grid), queries)
                };
                self.recorded.dispatches += recorded as u64;
            }
            done += chunk;
            if done == range.end {
                self.state.record_readback(&self.pipe, &mut encoder);
            }
            self.ctx.queue.submit([encoder.finish()]);
        }
    }

    /// Marks the start of an `advance`: the backup point of every replica (the backup copies
    /// hold every replica's state, a frozen one's too).
    fn begin_advance(&mut self) {
        for rep in self.reps.iter_mut() {
            rep.backup_step = Some(rep.step);
            rep.backup_rupture = (rep.e_released, rep.n_broken);
            rep.backup_watch.clone_from(&rep.watch);
            rep.backup_rebuilds = rep.rebuilds;
            rep.backup_rare = rep.rare;
        }
    }

    /// Takes replica r back to the run's step `to`, the step before the one its energy guard
    /// refused: to the start of the advance, then forward again alone, the others held (the
    /// same bits: results do not depend on where batches end). `to` becomes its rollback point.
    fn rewind(&mut self, r: usize, to: u64) -> Result<(), EngineError> {
        let start = self.reps[r].backup_step.unwrap_or(self.reps[r].step);
        let held: Vec<bool> = self.reps.iter().map(|p| p.held).collect();
        for (k, rep) in self.reps.iter_mut().enumerate() {
            rep.held = k != r;
        }
        self.restore_replica(r);
        self.evaluate_thawed(&[r])?;
        let steps = self.step;
        let again = self.replay(r, start, to)?;
        self.step = steps;
        for (rep, h) in self.reps.iter_mut().zip(held) {
            rep.held = h;
        }
        self.write_reps();
        // The others were held while r evaluated and stepped alone: their lists still hold for
        // their state, unless an overflow (in those steps or the batch before) left them
        // incomplete or laid out anew (zeroed): then every replica rebuilds at the next batch's
        // first step.
        self.rebuild_next |= self.lists_stale;
        if let Some((_, e)) = again.into_iter().next() {
            // It passed these steps before; the same steps cannot fail now.
            return Err(EngineError::NoRollback {
                error: Box::new(EngineError::Unsupported("the energy guard refused a step".into())),
                rollback: Box::new(e),
            });
        }
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        self.state.record_backup_replica(&mut encoder, r);
        self.ctx.queue.submit([encoder.finish()]);
        let rep = &mut self.reps[r];
        rep.backup_step = Some(rep.step);
        rep.backup_rupture = (rep.e_released, rep.n_broken);
        rep.backup_watch.clone_from(&rep.watch);
        rep.backup_rebuilds = rep.rebuilds;
        rep.backup_rare = rep.rare;
        Ok(())
    }

    /// Steps replica r (the others held) from `start`, where it stands restored and evaluated,
    /// to `to`, in batches the break records can hold: a batch that broke more bonds than they
    /// hold (its breaks not collected, the host's step not advanced) is taken again from `start`
    /// in batches a quarter as long, as `run` does. Returns the failures found.
    fn replay(&mut self, r: usize, start: u64, to: u64) -> Result<Vec<(usize, EngineError)>, EngineError> {
        let mut longest = (to.saturating_sub(start)).clamp(1, u32::MAX as u64 / 2);
        loop {
            let (mut at, mut found) = (start, Vec::new());
            self.break_overflow = false;
            while at < to && found.is_empty() && !self.break_overflow {
                let batch = (to - at).min(longest);
                found = self.advance_batch(batch as u32, false)?;
                at += batch;
            }
            if !self.break_overflow {
                return Ok(found);
            }
            self.break_overflow = false;
            if longest == 1 {
                return Err(self.too_many_breaks());
            }
            longest = (longest / 4).max(1);
            self.restore_replica(r);
            self.evaluate_thawed(&[r])?;
        }
    }

    /// Resets the status words and hands every running, watched replica's watch to the device
    /// for the next batch, with the wall it touched first.
    fn start_watch(&mut self) {
        use crate::gpu::watch::WatchStart;
        let starts: Vec<Option<WatchStart<'_>>> = self
            .reps
            .iter()
            .map(|rep| {
                let w = rep.watch.as_ref().filter(|_| !rep.held)?;
                let gravity_shift = rep.total_mass * rep.params.gravity.dot(rep.frame.origin);
                Some(WatchStart { watch: w, released: rep.e_released, mass: rep.total_mass, gravity_shift })
            })
            .collect();
        self.state.start_watch(&self.ctx.queue, &starts);
        let mut walls = Vec::new();
        for (r, rep) in self.reps.iter().enumerate() {
            let normal = rep.watch.as_ref().and_then(|w| w.impact.normal);
            if let Some(k) = normal.and_then(|n| rep.params.walls.iter().position(|w| w.normal == n)) {
                walls.push((r, self.state.layout.wall_start[r] + k as u32));
            }
        }
        self.state.reset_status_with_walls(&self.ctx.queue, self.rebuild_next, &walls);
    }

    /// Copies replica r's backup ranges back (queued) and resets its host side to the backup
    /// point: step, rupture totals, breaks after that step. The caller re-evaluates.
    pub(super) fn restore_replica(&mut self, r: usize) -> bool {
        let Some(step) = self.reps[r].backup_step else {
            return false; // no advance since the engine was built or loaded
        };
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        self.state.record_restore(&mut encoder, r);
        self.ctx.queue.submit([encoder.finish()]);
        let rep = &mut self.reps[r];
        rep.step = step;
        (rep.e_released, rep.n_broken) = rep.backup_rupture;
        rep.watch.clone_from(&rep.backup_watch);
        rep.rebuilds = rep.backup_rebuilds;
        rep.rare = rep.backup_rare;
        // Breaks after the restored step never happened.
        self.breaks.retain(|(q, e)| *q != r || e.step <= step);
        // Its lists were built for the state it leaves.
        self.rebuild_next = true;
        true
    }

    /// Re-evaluates the batch so that the replicas in `thaw` (restored, perhaps frozen) get the
    /// forces and diagnostics of their state; those frozen before stay frozen. The running
    /// replicas' forces and diagnostics come out unchanged (functions of their state).
    pub(super) fn evaluate_thawed(&mut self, thaw: &[usize]) -> Result<(), EngineError> {
        let held: Vec<bool> = thaw.iter().map(|&r| self.reps[r].held).collect();
        for &r in thaw {
            self.reps[r].held = false;
        }
        self.write_reps();
        let failures = self.evaluate_rebuilding(Some(thaw));
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
    pub(super) fn run(&mut self, steps: u64) -> Result<Vec<(usize, EngineError)>, EngineError> {
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
                // A step the guard refused: the replica goes back to the step before it.
                for (r, e) in &failures {
                    if let EngineError::EnergyGuard { step, .. } = e {
                        self.rewind(*r, step.saturating_sub(1))?;
                    }
                }
                return Ok(failures);
            }
            self.break_overflow = false;
            if batch == 1 {
                return Err(self.too_many_breaks());
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
        e_dissipated: r[REC_E_DISS],
        ..Default::default()
    }
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
