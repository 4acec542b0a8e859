//! Backups and restores: at the start of each `advance` the state arrays are copied on the
//! device (no host wait), and a replica is rolled back by copying its ranges of the copies back.
//!
//! **Replica ranges**: replica r's particles are `p_start[r] .. + n_particles[r]` of every
//! per-particle array and its broken flags the words from `broken_word[r]` (each replica's flags
//! start at a word boundary, so that restoring its words leaves the other replicas' bits alone):
//! restoring those ranges restores replica r and nothing else. A backup has the layout of its
//! array, page by page, so the pieces of a range in both pair up; except the contact history's
//! (MODEL §10 friction), which keeps one of the array's two copies: the one each replica's next
//! evaluation reads at the backup point (its `hist_parity` then), row for row.

use super::super::batch::broken_words;
use super::super::frame::uses_blocks;
use super::super::shader::HIST_SLOTS;
use super::super::sizes::{CELL_BYTES, real_size};
use super::{BROKEN, CELL, DLOAD, DemState, STATE_ARRAYS};

/// The device-side copies of `STATE_ARRAYS` made at the start of each `advance`, in the same
/// order.
pub(super) const BACKUP_ARRAYS: [&str; 4] = ["pos_backup", "vel_backup", "quat_backup", "omega_backup"];

impl DemState {
    /// Records the device-side copy of the state arrays that `rollback` returns to (no host
    /// wait: it runs in order before the steps recorded after it). `parities[r]`: the copy of
    /// the contact history replica r's next evaluation reads (`ReplicaGpu::hist_parity`).
    pub fn record_backup(&self, encoder: &mut wgpu::CommandEncoder, parities: &[u32]) {
        for (a, b) in self.backed_up() {
            if let Some(per) = self.history_row_bytes(a) {
                // The read copy of each run of replicas that read the same copy.
                let mut r = 0;
                while r < parities.len() {
                    let mut end = r + 1;
                    while end < parities.len() && parities[end] == parities[r] {
                        end += 1;
                    }
                    let p0 = self.layout.p_start[r] as u64;
                    let rows = self.layout.p_start[end - 1] as u64 + self.layout.n_particles[end - 1] as u64 - p0;
                    let from = per * (parities[r] as u64 * self.n as u64 + p0);
                    encoder.copy_buffer_to_buffer(&self.buffers[a], from, &self.buffers[b], per * p0, per * rows);
                    r = end;
                }
            } else if let (Some(pa), Some(pb)) = (self.paged.get(a), self.paged.get(b)) {
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
    /// particles' dissipative loads, with friction its history into copy `parity`, the one its
    /// evaluation at the backup point read): the other replicas keep their state.
    pub fn record_restore(&self, encoder: &mut wgpu::CommandEncoder, r: usize, parity: u32) {
        self.record_replica_copy(encoder, r, true, parity);
    }

    /// Records the copy of replica r's ranges of the state arrays into the backup (of its
    /// contact history, copy `parity`, the one its next evaluation reads): its rollback point
    /// becomes its current state, the other replicas' stay where they were.
    pub fn record_backup_replica(&self, encoder: &mut wgpu::CommandEncoder, r: usize, parity: u32) {
        self.record_replica_copy(encoder, r, false, parity);
    }

    /// Bytes per particle and copy of a contact-history array (`None` for the others): the
    /// rows the backups, restores and history reads (`GpuEngine::read_history`) address.
    pub(crate) fn history_row_bytes(&self, name: &str) -> Option<u64> {
        let v4 = 4 * real_size(self.precision) as u64;
        match name {
            "hist_count" => Some(4),
            "hist_key" => Some(4 * HIST_SLOTS as u64),
            "hist_xi" => Some(v4 * HIST_SLOTS as u64),
            "whist" => Some(v4 * self.wall_slots as u64),
            _ => None,
        }
    }

    /// Replica r's ranges copied from the backup to the state (`restore`) or the other way.
    fn record_replica_copy(&self, encoder: &mut wgpu::CommandEncoder, r: usize, restore: bool, parity: u32) {
        let v4 = 4 * real_size(self.precision) as u64;
        let (p0, np) = (self.layout.p_start[r] as u64, self.layout.n_particles[r] as u64);
        let nb = self.layout.n_bonds[r] as u64;
        let c = CELL_BYTES as u64;
        let n = self.n as u64;
        for (a, b) in self.backed_up() {
            if let Some(per) = self.history_row_bytes(a) {
                // The replica's rows of copy `parity` (`hist_copies`) and of the backup's one.
                let (state_at, backup_at, len) = (per * (parity as u64 * n + p0), per * p0, per * np);
                if len > 0 {
                    let (src, from, dst, to) =
                        if restore { (b, backup_at, a, state_at) } else { (a, state_at, b, backup_at) };
                    encoder.copy_buffer_to_buffer(&self.buffers[src], from, &self.buffers[dst], to, len);
                }
                continue;
            }
            let ranges = match a {
                _ if a == BROKEN.0 => vec![(4 * self.layout.broken_word[r] as u64, 4 * broken_words(nb))],
                _ if a == CELL.0 => vec![(c * p0, c * np)],
                _ if a == DLOAD.0 => vec![(3 * v4 * p0, 3 * v4 * np)],
                _ => vec![(v4 * p0, v4 * np)],
            };
            for (at, len) in ranges.into_iter().filter(|&(_, len)| len > 0) {
                // Backup and state share one layout, so their pieces pair up.
                let (source, target) = if restore { (b, a) } else { (a, b) };
                for ((src, from, bytes, _), (dst, to, _, _)) in
                    self.locate(source, at, len).into_iter().zip(self.locate(target, at, len))
                {
                    encoder.copy_buffer_to_buffer(src, from, dst, to, bytes);
                }
            }
        }
    }

    /// (state buffer, backup buffer) pairs: the state arrays, the blocks, the broken flags with
    /// rupture, the dissipative loads with dissipation, the contact history with friction.
    fn backed_up(&self) -> impl Iterator<Item = (&'static str, &'static str)> {
        let broken = self.rupture.then_some(BROKEN);
        let cell = uses_blocks(self.precision).then_some(CELL);
        let dload = self.dissipation.then_some(DLOAD);
        let pairs =
            [("hist_count", "hist_count_backup"), ("hist_key", "hist_key_backup"), ("hist_xi", "hist_xi_backup")];
        let pairs = pairs.into_iter().filter(|_| self.friction.0);
        let walls = self.friction.1.then_some(("whist", "whist_backup"));
        STATE_ARRAYS.into_iter().zip(BACKUP_ARRAYS).chain(cell).chain(broken).chain(dload).chain(pairs).chain(walls)
    }
}
