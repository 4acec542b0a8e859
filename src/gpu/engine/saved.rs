//! Saved states and renumbering: a replica's raw device arrays as an `EngineState` (and back),
//! read exactly as a one-replica engine of its model writes them; the renumbered state a
//! resume in another particle order loads; snapshots and the largest force.
//!
//! Saved-state layout: the origin of the stored positions (three little-endian f64), then the raw
//! device arrays pos (offsets, with the radius in w), vel, quat, omega, four reals per particle
//! each, and in f32 the blocks (four i32 per particle); with rupture, then `E_released` (f64),
//! `n_broken` (u64) and the broken flags (u32 per bond); with dissipation (MODEL §10), then the
//! raw dissipative loads and the contact history (`history`). The conservative forces are a function of this state
//! alone and the dissipative ones are in it, so loading it and re-evaluating (keeping the loads)
//! continues bit for bit.

use super::GpuEngine;
use super::upload::walls_bytes;
use crate::engine::{Engine, EngineState, wrong_state_kind};
use crate::error::EngineError;
use crate::gpu::frame::uses_blocks;
use crate::gpu::sizes::CELL_BYTES;
use crate::gpu::state::STATE_ARRAYS;
use crate::integrator::Kinematics;
use crate::model::Model;
use glam::{DQuat, DVec3};

/// Bytes of the origin at the head of a saved state: three little-endian f64 (the frame's
/// origin; its edge follows from the model).
const ORIGIN_BYTES: usize = 24;
/// Bytes of the rupture totals in a saved state with rupture: `E_released` (f64), `n_broken`
/// (u64); the broken flags (one u32 per bond) follow.
const RUPTURE_TOTALS_BYTES: usize = 16;

impl GpuEngine {
    /// Bytes of a saved state of replica r (see `save_state`).
    pub(super) fn state_bytes(&self, r: usize) -> usize {
        let l = &self.state.layout;
        let rupture = if l.rupture[r] { RUPTURE_TOTALS_BYTES + 4 * l.n_bonds[r] as usize } else { 0 };
        let cells = if uses_blocks(self.precision) { CELL_BYTES * l.n_particles[r] as usize } else { 0 };
        ORIGIN_BYTES + STATE_ARRAYS.len() * self.state.array_bytes(r) + cells + rupture + self.dissipation_bytes(r)
    }

    /// Replica r's kinematics, positions joined from their blocks and offsets.
    pub(super) fn snapshot_of(&mut self, r: usize) -> Result<Vec<Kinematics>, EngineError> {
        self.ctx.check_lost()?;
        self.check_replica(r)?;
        let a = self.state.read_arrays(&self.ctx.device, &self.ctx.queue, &STATE_ARRAYS, r)?;
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

    /// Lowest index on ties; a NaN |F| neither wins nor is beaten unless it comes first, as on
    /// the CPU.
    pub(super) fn largest_force_of(&mut self, r: usize) -> Result<Option<(usize, f64)>, EngineError> {
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

    /// Replica r's saved state, laid out as the module note says. A replica's ranges give exactly
    /// what a one-replica engine of its model writes.
    pub(super) fn save_state_of(&mut self, r: usize) -> Result<EngineState, EngineError> {
        self.ctx.check_lost()?;
        self.check_replica(r)?;
        let arrays = self.state.read_arrays_raw(&self.ctx.device, &self.ctx.queue, &STATE_ARRAYS, r)?;
        let cells = match uses_blocks(self.precision) {
            true => self.state.read_cells_raw(&self.ctx.device, &self.ctx.queue, r)?,
            false => Vec::new(),
        };
        let broken = self.state.read_broken_raw(&self.ctx.device, &self.ctx.queue, r)?;
        let dissipation = self.save_dissipation(r)?;
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
        data.extend_from_slice(&dissipation);
        Ok(EngineState { kind: self.state_kind_str(), step: rep.step, data })
    }

    /// A one-replica raw state (`save_state_of`) renumbered by `perm`: the per-particle arrays
    /// and blocks gathered by particle, the broken flags by bond; origin and totals as they are.
    pub(super) fn permuted_state(&self, data: &[u8], perm: &crate::order::Order) -> Result<Vec<u8>, EngineError> {
        let n = self.state.n as usize;
        let len = self.state.array_bytes(0);
        let blocks = if uses_blocks(self.precision) { CELL_BYTES * n } else { 0 };
        let mut out = Vec::with_capacity(data.len());
        let gather = |out: &mut Vec<u8>, part: &[u8], items: &[u32]| {
            let size = part.len() / items.len().max(1);
            for &k in items {
                out.extend_from_slice(&part[k as usize * size..(k as usize + 1) * size]);
            }
        };
        let (head, rest) = data.split_at(ORIGIN_BYTES);
        out.extend_from_slice(head);
        let (arrays, rest) = rest.split_at(STATE_ARRAYS.len() * len);
        for a in arrays.chunks_exact(len.max(1)) {
            gather(&mut out, a, &perm.particles);
        }
        let (cells, rest) = rest.split_at(blocks);
        if blocks > 0 {
            gather(&mut out, cells, &perm.particles);
        }
        let (rupture, dissipation) = rest.split_at(rest.len() - self.dissipation_bytes(0));
        if self.state.layout.rupture[0] {
            let (totals, flags) = rupture.split_at(RUPTURE_TOTALS_BYTES);
            out.extend_from_slice(totals);
            gather(&mut out, flags, &perm.bonds);
        }
        out.extend(self.permuted_dissipation(dissipation, perm)?);
        debug_assert_eq!(out.len(), data.len());
        Ok(out)
    }

    /// `Engine::load_state`: a one-replica saved state of this engine's kind, size and (f32 with
    /// bonds) origin, written to the device and re-evaluated. Forgets the rollback point: the
    /// loaded state is the last one checked. Breaks not yet taken that come after the loaded
    /// step never happened (as on the CPU).
    pub(super) fn load_state_of(&mut self, saved: &EngineState) -> Result<(), EngineError> {
        self.ctx.check_lost()?;
        self.single("load_state")?;
        self.write_replica_state(0, saved)?;
        self.loaded(saved.step)
    }

    /// `BatchEngine::load_states`: replica r takes `states[r]` (each as `load_state_of` checks
    /// it), all at one step, and the batch is evaluated once, as a batch of these replicas
    /// stepped to there would be: each replica's state, loads and history are those its engine
    /// alone would load.
    pub(super) fn load_states_of(&mut self, states: &[EngineState]) -> Result<(), EngineError> {
        self.ctx.check_lost()?;
        let step = crate::engine::batch::common_step(states, self.reps.len())?;
        for (r, saved) in states.iter().enumerate() {
            self.write_replica_state(r, saved).map_err(|e| match e {
                EngineError::Unsupported(m) => EngineError::Unsupported(format!("replica {r}: {m}")),
                other => other,
            })?;
        }
        self.loaded(step)
    }

    /// Writes a one-replica saved state into replica r (checked: kind, size, origin), without
    /// evaluating it (`loaded`).
    fn write_replica_state(&mut self, r: usize, saved: &EngineState) -> Result<(), EngineError> {
        if saved.kind != self.state_kind_str() {
            return Err(wrong_state_kind(&saved.kind, &self.state_kind_str()));
        }
        let want = self.state_bytes(r);
        let l = &self.state.layout;
        let (n, n_bonds, rupture) = (l.n_particles[r] as usize, l.n_bonds[r], l.rupture[r]);
        if saved.data.len() != want {
            // f32 states written before positions had blocks lack 16 bytes per particle.
            let older = uses_blocks(self.precision) && saved.data.len() + CELL_BYTES * n == want;
            return Err(EngineError::Unsupported(format!(
                "the saved state holds {} bytes; {n} particles and {n_bonds} bonds{} need {want}{}",
                saved.data.len(),
                if rupture { " with rupture" } else { " without rupture" },
                if older {
                    " (it was written by an rrpdem whose f32 positions had no blocks: resume it with that \
                     version, or rerun)"
                } else {
                    ""
                },
            )));
        }
        let len = self.state.array_bytes(r);
        let (head, rest) = saved.data.split_at(ORIGIN_BYTES);
        let (arrays, rest) = rest.split_at(STATE_ARRAYS.len() * len);
        let blocks = if uses_blocks(self.precision) { n } else { 0 };
        let (cells, rest) = rest.split_at(CELL_BYTES * blocks);
        let (rupture_bytes, dissipation) = rest.split_at(rest.len() - self.dissipation_bytes(r));
        let c: Vec<f64> = head.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect();
        let origin = DVec3::new(c[0], c[1], c[2]);
        if !origin.is_finite() {
            return Err(EngineError::Unsupported(format!("the saved state's position origin {origin} is not finite")));
        }
        // The bonds' reference positions were split in this engine's frame (f32 blocks); a
        // state counted from another origin would need them split anew, bit for bit as the
        // saving engine did, which only a model with the same reference positions gives. (A
        // replica without bonds has none: it takes the saved origin, as before.)
        let frame = &self.reps[r].frame;
        if blocks > 0
            && !self.reps[r].bond_refs
            && n_bonds > 0
            && origin.to_array().map(f64::to_bits) != frame.origin.to_array().map(f64::to_bits)
        {
            return Err(EngineError::Unsupported(format!(
                "the saved state counts positions from {origin}, this f32 engine from {}: its bonds' reference \
                 positions are stored relative to the latter; build the engine from the same model as the saving \
                 one (or from a version-2 checkpoint's)",
                frame.origin
            )));
        }
        for (name, bytes) in STATE_ARRAYS.iter().zip(arrays.chunks_exact(len.max(1))) {
            self.state.write_array_raw(&self.ctx.queue, name, bytes, r);
        }
        if blocks > 0 {
            self.state.write_cells_raw(&self.ctx.queue, cells, r);
        }
        // The loads at the saved node, which the evaluation after loading keeps
        // (`SimParams::keep_dload`), and the contact history.
        self.load_dissipation(r, dissipation)?;
        let rep = &mut self.reps[r];
        if rupture {
            let (totals, flags) = rupture_bytes.split_at(RUPTURE_TOTALS_BYTES);
            let word = |k: usize| <[u8; 8]>::try_from(&totals[8 * k..8 * k + 8]).unwrap_or([0; 8]);
            rep.e_released = f64::from_le_bytes(word(0));
            rep.n_broken = u64::from_le_bytes(word(1));
            self.state.write_broken_raw(&self.ctx.queue, flags, r);
        }
        rep.frame.origin = origin;
        rep.step = saved.step;
        rep.backup_step = None;
        rep.held = false;
        rep.failure = None;
        Ok(())
    }

    /// After `write_replica_state` of every replica at `step`: the walls (stored in each
    /// replica's frame, rewritten with its origin so that nothing of the previous state's
    /// set-up survives) and the replicas' parameters written, the state evaluated. Breaks not
    /// yet taken that come after `step` never happened.
    fn loaded(&mut self, step: u64) -> Result<(), EngineError> {
        self.breaks.retain(|(_, e)| e.step <= step);
        self.step = step;
        let walls: Vec<u8> =
            self.reps.iter().flat_map(|r| walls_bytes(&r.params.walls, &r.frame, self.precision)).collect();
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

    /// Builds the engine again from `model` on the same device and loads the renumbered raw
    /// state, as a resume does. Until the old state's buffers are dropped, both are on the
    /// device: a model that fills more than half of its memory cannot be renumbered (the error
    /// says so and the engine is unchanged; the run driver goes on in the old order).
    pub(super) fn renumber_to(&mut self, model: &Model, perm: &crate::order::Order) -> Result<(), EngineError> {
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
        let data = self.permuted_state(&saved.data, perm)?;
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
        fresh.recorded = fresh.recorded.plus(self.recorded);
        // The run's watch goes on.
        let watch = self.reps[0].watch.take();
        fresh.reps[0].backup_watch.clone_from(&watch);
        fresh.reps[0].watch = watch;
        std::mem::swap(&mut fresh._lease, &mut self._lease);
        *self = fresh;
        Ok(())
    }
}
