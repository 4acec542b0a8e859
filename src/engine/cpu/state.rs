//! The CPU engine's state as saved and loaded: the copy an `advance` can roll back to, its bytes
//! in a checkpoint (`encode_state`, `decode_state`), and setting it (forces re-evaluated).

use super::{BROKEN, CpuEngine, INTACT};
use crate::error::EngineError;
use crate::integrator::Kinematics;
use glam::DVec3;

/// The engine's state at the start of an `advance` (for `rollback`).
#[derive(Clone, Debug, Default)]
pub(super) struct Saved {
    pub(super) step: u64,
    pub(super) kin: Vec<Kinematics>,
    pub(super) broken: Vec<bool>,
    pub(super) e_released: f64,
    pub(super) n_broken: u64,
}

/// Encodes a state (little-endian): per particle x, v, q (x, y, z, w), Ω as f64; then
/// `E_released` (f64), `n_broken` (u64) and one byte per bond (1 = broken).
pub(super) fn encode_state(s: &Saved) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.kin.len() * 104 + 16 + s.broken.len());
    for k in &s.kin {
        for v in [k.x.x, k.x.y, k.x.z, k.v.x, k.v.y, k.v.z, k.q.x, k.q.y, k.q.z, k.q.w, k.w.x, k.w.y, k.w.z] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out.extend_from_slice(&s.e_released.to_le_bytes());
    out.extend_from_slice(&s.n_broken.to_le_bytes());
    out.extend(s.broken.iter().map(|&b| b as u8));
    out
}

pub(super) fn decode_state(data: &[u8], step: u64, n: usize, n_bonds: usize) -> Option<Saved> {
    if data.len() != n * 104 + 16 + n_bonds {
        return None;
    }
    let real = |k: usize| f64::from_le_bytes(data[8 * k..8 * k + 8].try_into().expect("8 bytes"));
    let kin = (0..n)
        .map(|i| {
            let r = |c: usize| real(13 * i + c);
            Kinematics {
                x: DVec3::new(r(0), r(1), r(2)),
                v: DVec3::new(r(3), r(4), r(5)),
                q: glam::DQuat::from_xyzw(r(6), r(7), r(8), r(9)),
                w: DVec3::new(r(10), r(11), r(12)),
            }
        })
        .collect();
    let tail = 13 * n;
    let n_broken = u64::from_le_bytes(data[8 * tail + 8..8 * tail + 16].try_into().expect("8 bytes"));
    let broken = data[8 * tail + 16..].iter().map(|&b| b != 0).collect();
    Some(Saved { step, kin, broken, e_released: real(tail), n_broken })
}

impl CpuEngine {
    pub(super) fn current(&self) -> Saved {
        Saved {
            step: self.step,
            kin: self.kin.clone(),
            broken: self.bond_state.iter().map(|&s| s != INTACT).collect(),
            e_released: self.e_released,
            n_broken: self.n_broken,
        }
    }

    /// Sets the state and re-evaluates forces and diagnostics. The forces are a function of the
    /// state alone (contact partners are summed in index order; a bond that broke at this step
    /// is already marked), so stepping on from here is bit-identical to never having left.
    pub(super) fn set_state(&mut self, s: Saved) -> Result<(), EngineError> {
        self.kin = s.kin;
        self.step = s.step;
        for (state, b) in self.bond_state.iter_mut().zip(s.broken) {
            *state = if b { BROKEN } else { INTACT };
        }
        self.e_released = s.e_released;
        self.n_broken = s.n_broken;
        // Breaks after this step never happened.
        self.breaks.retain(|e| e.step <= s.step);
        self.evaluate(true, None)?;
        self.diag = self.sum_diagnostics();
        Ok(())
    }
}
