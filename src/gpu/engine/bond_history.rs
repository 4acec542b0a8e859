//! The bonded pairs' tangential history beside the incidence (`inc_xi`, MODEL §10) in a saved
//! state: where the lists leave bonded pairs out their sliders go with their bonds, and each
//! incidence entry keeps ξ of its bond's pair seen from the bond's end i. A saved state holds
//! them as any other pair (in the lower index's row, ξ seen from it: the format of
//! src/gpu/engine/history.rs, the same whichever array keeps a pair), so saving merges them into
//! the rows and loading takes them out again.

use super::GpuEngine;
use super::history::{negate_reals, too_many_frictional_contacts, vec4_lanes, vec4_length, word};
use crate::error::EngineError;
use crate::gpu::shader::HIST_SLOTS;
use crate::gpu::sizes::real_size;

/// One replica's incidence as the device lays it out (`Model::incidence` of its bonds):
/// replica-relative offsets and entries (2·bond + end).
pub(super) struct Incidence {
    offsets: Vec<u32>,
    entries: Vec<u32>,
}

impl GpuEngine {
    /// Replica r's incidence, where its bonded pairs' history is kept beside it (`None` where
    /// it is not: no pair friction, or bonded pairs listed).
    pub(super) fn bond_history_incidence(&self, r: usize) -> Option<Incidence> {
        if !self.reps[r].bond_history {
            return None;
        }
        let ends = &self.reps[r].bond_ends;
        let (offsets, entries) = crate::model::incidence(self.np(r) as usize, ends.len(), || ends.iter().copied());
        Some(Incidence { offsets, entries })
    }

    /// Replica r's `inc_xi`, raw (a vec4 of reals per incidence entry).
    pub(super) fn read_bond_history(&self, r: usize) -> Result<Vec<u8>, EngineError> {
        let v4 = 4 * real_size(self.precision) as u64;
        let e = self.state.incidence_of(r);
        let parts = [("inc_xi", v4 * e.start, v4 * (e.end - e.start))];
        Ok(self.state.read_ranges_raw(&self.ctx.device, &self.ctx.queue, &parts)?.remove(0))
    }

    /// Adds replica r's bonded pairs with ξ ≠ 0 to saved rows (`counts`, `keys` as batch
    /// indices from `p0`, `xi`; each row its pairs with higher-index partners, ascending): each
    /// pair in its lower index's row, ξ seen from it, in partner order. A row that would hold
    /// more than `HIST_SLOTS` is an error naming its particle.
    pub(super) fn merge_bond_history(
        &self,
        r: usize,
        inc: &Incidence,
        rows: &mut [Vec<u8>],
    ) -> Result<(), EngineError> {
        let v4 = 4 * real_size(self.precision);
        let raw = self.read_bond_history(r)?;
        let p0 = self.state.layout.p_start[r];
        let ends = &self.reps[r].bond_ends;
        for a in 0..inc.offsets.len() - 1 {
            let mut row: Vec<(u32, Vec<u8>)> = (0..word(&rows[0], a) as usize)
                .map(|s| {
                    let slot = a * HIST_SLOTS + s;
                    (word(&rows[1], slot), rows[2][slot * v4..(slot + 1) * v4].to_vec())
                })
                .collect();
            let before = row.len();
            for p in inc.offsets[a] as usize..inc.offsets[a + 1] as usize {
                let (i, j) = ends[(inc.entries[p] >> 1) as usize];
                let partner = if i as usize == a { j } else { i };
                let x = &raw[p * v4..(p + 1) * v4];
                if partner as usize <= a || vec4_lanes(x, self.precision) == [0.0; 3] {
                    continue;
                }
                let mut x = x.to_vec();
                if i as usize != a {
                    negate_reals(&mut x, self.precision);
                }
                row.push((p0 + partner, x));
            }
            if row.len() == before {
                continue;
            }
            row.sort_by_key(|e| e.0);
            // Two bonds on one pair evaluate its one contact alike: saved once.
            row.dedup_by_key(|e| e.0);
            if row.len() > HIST_SLOTS {
                return Err(too_many_frictional_contacts(a, "in the state being saved"));
            }
            rows[0][4 * a..4 * a + 4].copy_from_slice(&(row.len() as u32).to_le_bytes());
            for (s, (k, x)) in row.into_iter().enumerate() {
                let slot = a * HIST_SLOTS + s;
                rows[1][4 * slot..4 * slot + 4].copy_from_slice(&k.to_le_bytes());
                rows[2][slot * v4..(slot + 1) * v4].copy_from_slice(&x);
            }
        }
        Ok(())
    }

    /// Takes replica r's bonded pairs out of saved rows (`count`, replica-relative `keys`, `xi`:
    /// each row its pairs with higher-index partners) into `inc_xi` (both entries of each of
    /// the pair's bonds, ξ seen from the bond's end i), leaving the rows with the other pairs.
    pub(super) fn split_bond_history(
        &mut self,
        r: usize,
        inc: &Incidence,
        count: &mut [u8],
        keys: &mut [u8],
        xi: &mut [u8],
    ) {
        let v4 = 4 * real_size(self.precision);
        let ends = &self.reps[r].bond_ends;
        let mut out = vec![0u8; inc.entries.len() * v4];
        for a in 0..count.len() / 4 {
            let saved = word(count, a) as usize;
            if saved > HIST_SLOTS {
                // A damaged row, which loading refuses (`history::both_ends`), left as it is.
                continue;
            }
            let mut kept = 0;
            for s in 0..saved {
                let slot = a * HIST_SLOTS + s;
                let b = word(keys, slot);
                let x = xi[slot * v4..(slot + 1) * v4].to_vec();
                let mut bonded = false;
                for p in inc.offsets[a] as usize..inc.offsets[a + 1] as usize {
                    let k = (inc.entries[p] >> 1) as usize;
                    let (i, j) = ends[k];
                    if (i as usize, j) != (a, b) && (j as usize, i) != (a, b) {
                        continue;
                    }
                    bonded = true;
                    let mut seen = x.clone();
                    if i as usize != a {
                        negate_reals(&mut seen, self.precision);
                    }
                    // Both ends' entries of bond k.
                    for q in [i, j] {
                        let q = q as usize;
                        for e in inc.offsets[q] as usize..inc.offsets[q + 1] as usize {
                            if inc.entries[e] >> 1 == k as u32 {
                                out[e * v4..(e + 1) * v4].copy_from_slice(&seen);
                            }
                        }
                    }
                }
                if !bonded {
                    let to = a * HIST_SLOTS + kept;
                    keys.copy_within(4 * slot..4 * slot + 4, 4 * to);
                    xi.copy_within(slot * v4..(slot + 1) * v4, to * v4);
                    kept += 1;
                }
            }
            if kept != saved {
                count[4 * a..4 * a + 4].copy_from_slice(&(kept as u32).to_le_bytes());
                let (from, to) = (a * HIST_SLOTS + kept, (a + 1) * HIST_SLOTS);
                keys[4 * from..4 * to].fill(0);
                xi[from * v4..to * v4].fill(0);
            }
        }
        let e = self.state.incidence_of(r);
        self.state.write_range_raw(&self.ctx.queue, "inc_xi", v4 as u64 * e.start, &out);
    }

    /// Each particle's largest |ξ| over its bonded pairs (replica r; both entries of a bond
    /// hold its pair's ξ), into `out`.
    pub(super) fn bond_history_lengths(&self, r: usize, inc: &Incidence, out: &mut [f64]) -> Result<(), EngineError> {
        let raw = self.read_bond_history(r)?;
        let v4 = 4 * real_size(self.precision);
        for (a, o) in out.iter_mut().enumerate() {
            for p in inc.offsets[a] as usize..inc.offsets[a + 1] as usize {
                *o = o.max(vec4_length(&raw[p * v4..(p + 1) * v4], self.precision));
            }
        }
        Ok(())
    }
}
