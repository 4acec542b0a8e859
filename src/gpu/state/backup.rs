//! Backups and restores: at the start of each `advance` the state arrays are copied on the
//! device (no host wait), and a replica is rolled back by copying its ranges of the copies back.
//!
//! **Replica ranges**: replica r's particles are `p_start[r] .. + n_particles[r]` of every
//! per-particle array and its broken flags the words from `broken_word[r]` (each replica's flags
//! start at a word boundary, so that restoring its words leaves the other replicas' bits alone):
//! restoring those ranges restores replica r and nothing else. A backup has the layout of its
//! array, page by page, so the pieces of a range in both pair up.

use super::super::batch::{HISTORY_ARRAYS, broken_words, history_rows};
use super::super::frame::uses_blocks;
use super::super::shader::DLOAD_ARRAYS;
use super::super::sizes::{CELL_BYTES, real_size};
use super::plan::{BOND_HISTORY, HISTORY_BACKUPS};
use super::{BROKEN, CELL, DLOAD_BACKUPS, DemState, STATE_ARRAYS};

/// The device-side copies of `STATE_ARRAYS` made at the start of each `advance`, in the same
/// order.
pub(super) const BACKUP_ARRAYS: [&str; 4] = ["pos_backup", "vel_backup", "quat_backup", "omega_backup"];

impl DemState {
    /// Records the device-side copy of the state arrays that `rollback` returns to (no host
    /// wait: it runs in order before the steps recorded after it).
    pub fn record_backup(&self, encoder: &mut wgpu::CommandEncoder) {
        for (a, b) in self.backed_up() {
            if let (Some(pa), Some(pb)) = (self.paged.get(a), self.paged.get(b)) {
                // Same layout, page by page.
                for (x, y) in pa.buffers.iter().zip(&pb.buffers) {
                    encoder.copy_buffer_to_buffer(x, 0, y, 0, x.size());
                }
            } else {
                encoder.copy_buffer_to_buffer(&self.buffers[a], 0, &self.buffers[b], 0, self.buffers[a].size());
            }
        }
    }

    /// Records the copy of replica r's ranges of the backup back into the state arrays (its
    /// particles' four arrays, with rupture its bonds' broken flags, with dissipation its
    /// particles' dissipative loads, with friction its contact history): the other replicas
    /// keep their state.
    pub fn record_restore(&self, encoder: &mut wgpu::CommandEncoder, r: usize) {
        self.record_replica_copy(encoder, r, true);
    }

    /// Records the copy of replica r's ranges of the state arrays into the backup: its
    /// rollback point becomes its current state, the other replicas' stay where they were.
    pub fn record_backup_replica(&self, encoder: &mut wgpu::CommandEncoder, r: usize) {
        self.record_replica_copy(encoder, r, false);
    }

    /// Records the zeroing of the contact history (no contacts, ξ = 0 at every wall): a fresh
    /// state's, which the first evaluation of a built engine reads.
    pub fn record_clear_history(&self, encoder: &mut wgpu::CommandEncoder) {
        for name in ["hist_count", "whist", BOND_HISTORY[0]] {
            for buffer in self.paged.get(name).map_or(&[][..], |p| &p.buffers[..]) {
                encoder.clear_buffer(buffer, 0, None);
            }
        }
    }

    /// Whether the bonded pairs' tangential history beside the incidence (`inc_xi`) is real.
    pub(crate) fn bond_history(&self) -> bool {
        self.paged.get(BOND_HISTORY[0]).is_some_and(|p| p.pages.len > 0)
    }

    /// Replica r's incidence entries (its particles' ranges, batch indices).
    pub(crate) fn incidence_of(&self, r: usize) -> std::ops::Range<u64> {
        let (p0, np) = (self.layout.p_start[r] as usize, self.layout.n_particles[r] as usize);
        let o = &self.chunk_host.inc_offsets;
        o[p0] as u64..o[p0 + np] as u64
    }

    /// Bytes per particle of a contact-history array (`None` for the others): the rows the
    /// restores and history reads (`GpuEngine::read_history`) address.
    pub(crate) fn history_row_bytes(&self, name: &str) -> Option<u64> {
        let k = HISTORY_ARRAYS.iter().position(|&a| a == name)?;
        Some(history_rows(self.precision, self.wall_slots as u64)[k])
    }

    /// Replica r's ranges copied from the backup to the state (`restore`) or the other way.
    fn record_replica_copy(&self, encoder: &mut wgpu::CommandEncoder, r: usize, restore: bool) {
        let v4 = 4 * real_size(self.precision) as u64;
        let (p0, np) = (self.layout.p_start[r] as u64, self.layout.n_particles[r] as u64);
        let nb = self.layout.n_bonds[r] as u64;
        let c = CELL_BYTES as u64;
        for (a, b) in self.backed_up() {
            // Bytes per particle of a per-particle array.
            let per = match a {
                _ if a == BROKEN.0 => 0,
                _ if a == CELL.0 => c,
                _ => self.history_row_bytes(a).unwrap_or(v4),
            };
            let (at, len) = if a == BROKEN.0 {
                (4 * self.layout.broken_word[r] as u64, 4 * broken_words(nb))
            } else if a == BOND_HISTORY[0] {
                let e = self.incidence_of(r);
                (v4 * e.start, v4 * (e.end - e.start))
            } else {
                (per * p0, per * np)
            };
            if len == 0 {
                continue;
            }
            // Backup and state share one layout, so their pieces pair up.
            let (source, target) = if restore { (b, a) } else { (a, b) };
            for ((src, from, bytes, _), (dst, to, _, _)) in
                self.locate(source, at, len).into_iter().zip(self.locate(target, at, len))
            {
                encoder.copy_buffer_to_buffer(src, from, dst, to, bytes);
            }
        }
    }

    /// (state buffer, backup buffer) pairs: the state arrays, the blocks, the broken flags with
    /// rupture, the dissipative loads with dissipation, the contact history with friction (the
    /// bonded pairs' beside the incidence where real).
    fn backed_up(&self) -> impl Iterator<Item = (&'static str, &'static str)> {
        let broken = self.rupture.then_some(BROKEN);
        let cell = uses_blocks(self.precision).then_some(CELL);
        let dload = DLOAD_ARRAYS.into_iter().zip(DLOAD_BACKUPS).filter(|_| self.dissipation);
        // The history's real arrays, as `batch::history_sizes` has them: the pairs' three with
        // pair friction, `whist` with wall friction.
        let (pairs, walls) = self.friction;
        let real = [pairs, pairs, pairs, walls];
        let history = HISTORY_ARRAYS.into_iter().zip(HISTORY_BACKUPS).zip(real).filter(|&(_, r)| r).map(|(ab, _)| ab);
        let bonds = self.bond_history().then_some((BOND_HISTORY[0], BOND_HISTORY[1]));
        STATE_ARRAYS.into_iter().zip(BACKUP_ARRAYS).chain(cell).chain(broken).chain(dload).chain(history).chain(bonds)
    }
}
