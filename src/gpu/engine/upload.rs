//! The host's bytes of the device's parameter structs (`gpu::params`): the batch-wide
//! `SimParams`, every replica's `ReplicaGpu` and every replica's walls, split into block and
//! offset by its frame as positions are; and the origin of a replica's frame.

use super::{GpuEngine, Replica};
use crate::engine::Precision;
use crate::gpu::batch::BatchLayout;
use crate::gpu::frame::Frame;
use crate::gpu::params::{
    GRID_PERIOD, GridSteps, ParamInputs, ReplicaGpu32, ReplicaGpu64, ReplicaInputs, SimParams32, SimParams64,
    WallGpu32, WallGpu64,
};
use glam::DVec3;

impl GpuEngine {
    pub(super) fn params_bytes(&self, batch_len: u32, grid: GridSteps) -> Vec<u8> {
        let inputs = ParamInputs {
            integrator: self.integrator,
            h: self.dt,
            n_particles: self.state.n,
            n_bonds: self.state.n_bonds,
            mask: self.state.buckets - 1,
            n_replicas: self.reps.len() as u32,
            part_len: self.state.part_len(),
            keep_dload: self.dload_kept,
        };
        params_bytes(&inputs, self.precision, batch_len, grid)
    }

    /// Uploads the per-replica parameters (after a replica was frozen or thawed).
    pub(super) fn write_reps(&self) {
        let bytes = reps_bytes(&self.reps, &self.state.layout, self.precision);
        self.ctx.queue.write_buffer(self.state.buffer("reps"), 0, &bytes);
    }
}

/// The per-replica parameter buffer (`ReplicaGpu` per replica).
pub(super) fn reps_bytes(reps: &[Replica], layout: &BatchLayout, precision: Precision) -> Vec<u8> {
    let wall_slots = reps.iter().map(|r| r.params.walls.len()).max().unwrap_or(0) as u32;
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
        early: reps[r].early,
        grid_phase: (reps[r].step % GRID_PERIOD as u64) as u32,
        bond_attitudes: reps[r].bond_attitudes,
        bond_refs: reps[r].bond_refs,
        unlisted: reps[r].unlisted,
        bond_history: reps[r].bond_history,
        broken_word: layout.broken_word[r],
        wall_slots,
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
pub(super) fn walls_bytes(walls: &[crate::interactions::Wall], frame: &Frame, precision: Precision) -> Vec<u8> {
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

pub(super) fn params_bytes(inputs: &ParamInputs, precision: Precision, batch_len: u32, grid: GridSteps) -> Vec<u8> {
    let (grid_fast, grid_phase) = (grid.fast as u32, grid.phase);
    match precision {
        Precision::F32 => {
            bytemuck::bytes_of(&SimParams32 { batch_len, grid_fast, grid_phase, ..SimParams32::new(inputs) }).to_vec()
        }
        Precision::F64 => {
            bytemuck::bytes_of(&SimParams64 { batch_len, grid_fast, grid_phase, ..SimParams64::new(inputs) }).to_vec()
        }
    }
}

/// Centre of the bounding box of the positions (zero for no particles).
pub(super) fn bounding_box_centre(x: &[DVec3]) -> DVec3 {
    if x.is_empty() {
        return DVec3::ZERO;
    }
    let (lo, hi) = x.iter().fold((x[0], x[0]), |(lo, hi), p| (lo.min(*p), hi.max(*p)));
    0.5 * (lo + hi)
}
