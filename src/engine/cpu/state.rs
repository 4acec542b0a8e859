//! The CPU engine's state as saved and loaded: the copy an `advance` can roll back to, its bytes
//! in a checkpoint (`encode_state`, `decode_state`), and setting it (forces re-evaluated).

use super::dissipation::HistoryEntry;
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
    /// With dissipation (MODEL §10): `E_dissipated` and the contact history the last
    /// evaluation started from (pairs, then wall contacts; `dissipation::History`).
    pub(super) dissipation: Option<SavedDissipation>,
    /// With `lgvi` (MODEL §12): every body's state (the particles' follow from it).
    pub(super) bodies: Vec<super::rigid::BodyKin>,
}

/// The dissipation's part of a saved state.
#[derive(Clone, Debug, Default)]
pub(super) struct SavedDissipation {
    pub(super) e_dissipated: f64,
    /// Velocities the last evaluation's loads came from, per particle (`DissState::v_eval`).
    pub(super) v_eval: Vec<[DVec3; 2]>,
    pub(super) pairs: Vec<HistoryEntry>,
    pub(super) walls: Vec<HistoryEntry>,
}

/// Bytes of one saved contact: i, j (or the wall's index) as u32, ξ as three f64.
const HISTORY_ENTRY: usize = 32;

fn put_history(out: &mut Vec<u8>, entries: &[HistoryEntry]) {
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (i, j, xi) in entries {
        out.extend_from_slice(&i.to_le_bytes());
        out.extend_from_slice(&j.to_le_bytes());
        for v in xi.to_array() {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// Reads a history list at `data[at..]`; `None` when it does not fit or names a particle (or
/// wall) beyond `n` (`limit_j`), or a pair not in increasing order.
fn take_history(data: &[u8], at: &mut usize, n: usize, limit_j: usize, pairs: bool) -> Option<Vec<HistoryEntry>> {
    let count = u64::from_le_bytes(data.get(*at..*at + 8)?.try_into().ok()?) as usize;
    *at += 8;
    let bytes = data.get(*at..*at + count.checked_mul(HISTORY_ENTRY)?)?;
    *at += bytes.len();
    let mut out = Vec::with_capacity(count);
    for c in bytes.chunks_exact(HISTORY_ENTRY) {
        let u = |k: usize| u32::from_le_bytes(c[k..k + 4].try_into().expect("4 bytes"));
        let f = |k: usize| f64::from_le_bytes(c[8 + 8 * k..16 + 8 * k].try_into().expect("8 bytes"));
        let (i, j, xi) = (u(0), u(4), DVec3::new(f(0), f(1), f(2)));
        if i as usize >= n || j as usize >= limit_j || !xi.is_finite() {
            return None;
        }
        if pairs && (j <= i || out.last().is_some_and(|&(a, b, _)| (a, b) >= (i, j))) {
            return None;
        }
        out.push((i, j, xi));
    }
    Some(out)
}

/// Encodes a state (little-endian): per particle x, v, q (x, y, z, w), Ω as f64; then
/// `E_released` (f64), `n_broken` (u64) and one byte per bond (1 = broken); with dissipation
/// then `E_dissipated` (f64), per particle the velocity and angular velocity its last
/// evaluation's loads came from (six f64), and the history: a count (u64) of pair contacts, each i, j (u32,
/// i < j, in increasing order) and ξ (three f64), then the same for wall contacts (particle,
/// wall); with `lgvi` (MODEL §12) last every body's centre, velocity, attitude (x, y, z, w) and
/// body angular momentum Π (13 f64). A model without either has the bytes of the versions before it.
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
    if let Some(d) = &s.dissipation {
        out.extend_from_slice(&d.e_dissipated.to_le_bytes());
        for v in d.v_eval.iter().flatten().flat_map(|v| v.to_array()) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        put_history(&mut out, &d.pairs);
        put_history(&mut out, &d.walls);
    }
    for b in &s.bodies {
        for v in [b.x.x, b.x.y, b.x.z, b.v.x, b.v.y, b.v.z, b.q.x, b.q.y, b.q.z, b.q.w, b.pi.x, b.pi.y, b.pi.z] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// Bytes of one body's saved state (13 f64).
pub(super) const BODY_BYTES: usize = 104;

/// Decodes `encode_state`'s bytes; `walls`: `Some(number of walls)` when the model dissipates.
pub(super) fn decode_state(
    data: &[u8],
    step: u64,
    n: usize,
    n_bonds: usize,
    walls: Option<usize>,
    n_bodies: usize,
) -> Option<Saved> {
    let (data, body_bytes) = data.split_at(data.len().checked_sub(n_bodies * BODY_BYTES)?);
    let bodies = body_bytes
        .chunks_exact(BODY_BYTES)
        .map(|c| {
            let r = |k: usize| f64::from_le_bytes(c[8 * k..8 * k + 8].try_into().expect("8 bytes"));
            super::rigid::BodyKin {
                x: DVec3::new(r(0), r(1), r(2)),
                v: DVec3::new(r(3), r(4), r(5)),
                q: glam::DQuat::from_xyzw(r(6), r(7), r(8), r(9)),
                pi: DVec3::new(r(10), r(11), r(12)),
            }
        })
        .collect::<Vec<_>>();
    if bodies.iter().any(|b| !(b.x.is_finite() && b.v.is_finite() && b.q.is_finite() && b.pi.is_finite())) {
        return None;
    }
    let fixed = n * 104 + 16 + n_bonds;
    let dissipation = match walls {
        None if data.len() == fixed => None,
        Some(nw) if data.len() >= fixed + 8 + 48 * n => {
            let real = |k: usize| f64::from_le_bytes(data[k..k + 8].try_into().expect("8 bytes"));
            let v_eval = (0..n)
                .map(|i| {
                    let r = |c: usize| real(fixed + 8 + 48 * i + 8 * c);
                    [DVec3::new(r(0), r(1), r(2)), DVec3::new(r(3), r(4), r(5))]
                })
                .collect();
            let mut at = fixed + 8 + 48 * n;
            let pairs = take_history(data, &mut at, n, n, true)?;
            let walls = take_history(data, &mut at, n, nw, false)?;
            if at != data.len() {
                return None;
            }
            let e = f64::from_le_bytes(data[fixed..fixed + 8].try_into().expect("8 bytes"));
            Some(SavedDissipation { e_dissipated: e, v_eval, pairs, walls })
        }
        _ => return None,
    };
    let data = &data[..fixed];
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
    Some(Saved { step, kin, broken, e_released: real(tail), n_broken, dissipation, bodies })
}

impl CpuEngine {
    pub(super) fn current(&self) -> Saved {
        Saved {
            step: self.step,
            kin: self.kin.clone(),
            broken: self.bond_state.iter().map(|&s| s != INTACT).collect(),
            e_released: self.e_released,
            n_broken: self.n_broken,
            dissipation: self.current_dissipation(),
            bodies: self.rigid.as_ref().map_or_else(Vec::new, |r| r.state.clone()),
        }
    }

    /// The dissipation's part of the current state (`None` without dissipation).
    pub(super) fn current_dissipation(&self) -> Option<SavedDissipation> {
        self.diss.as_ref().map(|d| {
            let (pairs, walls) = d.history.saved(&self.bonds);
            SavedDissipation { e_dissipated: d.e_dissipated, v_eval: d.v_eval.clone(), pairs, walls }
        })
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
        if let Some(r) = &mut self.rigid {
            // `decode_state` reads exactly this many; a saved copy always has them.
            if s.bodies.len() != r.state.len() {
                return Err(EngineError::Unsupported(format!(
                    "a saved lgvi state holds {} body states, the model has {} bodies",
                    s.bodies.len(),
                    r.state.len()
                )));
            }
            r.state = s.bodies;
        }
        // With dissipation the loads at this node came from the velocities of the half step
        // before it (and the history before them): the evaluation is made again from those,
        // then the node's own velocities are put back.
        let mut node_velocities = None;
        if let Some(d) = &mut self.diss {
            let saved = s.dissipation.unwrap_or_default();
            d.e_dissipated = saved.e_dissipated;
            d.history.load(&saved.pairs, &saved.walls, &self.bonds);
            if saved.v_eval.len() == self.kin.len() {
                let node: Vec<[DVec3; 2]> = self.kin.iter().map(|k| [k.v, k.w]).collect();
                for (k, [v, w]) in self.kin.iter_mut().zip(saved.v_eval) {
                    (k.v, k.w) = (v, w);
                }
                node_velocities = Some(node);
            }
        }
        // Breaks after this step never happened.
        self.breaks.retain(|e| e.step <= s.step);
        let evaluated = self.evaluate(true, None);
        if let Some(node) = node_velocities {
            for (k, [v, w]) in self.kin.iter_mut().zip(node) {
                (k.v, k.w) = (v, w);
            }
        }
        evaluated?;
        if let Some(r) = &mut self.rigid {
            r.gather(&self.acc);
        }
        self.diag = self.sum_diagnostics();
        Ok(())
    }
}
