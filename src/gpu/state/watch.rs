//! The watch's place in a state (shaders/watch.wgsl): the bind groups of its levels (the
//! particles' shares summed per replica by `watch_state`, then `watch_partials` level after level
//! ping-ponging between `watch_a` and `watch_b`, then `watch_update` over the replicas), whether a
//! batch watches at all, and the host's writes of each replica's watch before a batch and reads
//! after it. The dispatches themselves are part of a step's list (`record::step_dispatches`,
//! stage `Watch`).
//!
//! **Invariant**: the tables depend only on each replica's particle count
//! (`BatchLayout::watch_tables`), so a replica's sums run in the same order in any batch, and
//! its watch is bit for bit that of the same model alone.

use super::super::context::map_read;
use super::super::error::GpuError;
use super::super::pipeline::DemPipeline;
use super::super::shader::RSTATUS_CONTACT_WALL;
use super::super::watch::{WatchRead, WatchStart, watch_gpu_size};
use super::DemState;
use super::bind::state_binding;
use crate::engine::Precision;
use std::collections::HashMap;

/// The watch's bind groups: level 0, every further level, the update; and the buffer holding
/// the final records.
pub(super) struct WatchLevels {
    /// Workgroups of each level (level 0 first).
    pub groups: Vec<u32>,
    pub state: Vec<wgpu::BindGroup>,
    pub partials: Vec<Vec<wgpu::BindGroup>>,
    pub update: Vec<wgpu::BindGroup>,
}

impl WatchLevels {
    pub fn new(
        device: &wgpu::Device,
        pipe: &DemPipeline,
        buffers: &HashMap<&'static str, wgpu::Buffer>,
        precision: Precision,
        parts: Option<(u64, u64)>,
        watch_len: Vec<(usize, wgpu::Buffer)>,
    ) -> Result<WatchLevels, GpuError> {
        let groups: Vec<u32> = watch_len.iter().map(|(c, _)| *c as u32).collect();
        let (cur, mut other) = ("watch_a", "watch_b");
        let mut cur = cur;
        let state = pipe.bind(device, "watch_state", &|name: &str| match name {
            "watch_len" => Some(watch_len[0].1.as_entire_binding()),
            "watch_out" => Some(buffers[cur].as_entire_binding()),
            "watch_table" => Some(buffers["watch_table"].as_entire_binding()),
            other => state_binding(buffers, other, precision, parts, 0),
        })?;
        let mut partials = Vec::new();
        for (_, len) in &watch_len[1..] {
            partials.push(pipe.bind(device, "watch_partials", &|name: &str| match name {
                "watch_len" => Some(len.as_entire_binding()),
                "watch_in" => Some(buffers[cur].as_entire_binding()),
                "watch_out" => Some(buffers[other].as_entire_binding()),
                "watch_table" => Some(buffers["watch_table"].as_entire_binding()),
                o => state_binding(buffers, o, precision, parts, 0),
            })?);
            std::mem::swap(&mut cur, &mut other);
        }
        // The last level's output holds replica r's record at r.
        let update = pipe.bind(device, "watch_update", &|name: &str| match name {
            "watch_in" => Some(buffers[cur].as_entire_binding()),
            o => state_binding(buffers, o, precision, parts, 0),
        })?;
        Ok(WatchLevels { groups, state, partials, update })
    }
}

impl DemState {
    /// Starts every replica's device watch for a batch: `starts[r]` (`None`: not watched).
    /// Returns whether any replica is watched (the step then records the watch's dispatches).
    pub fn start_watch(&mut self, queue: &wgpu::Queue, starts: &[Option<WatchStart<'_>>]) -> bool {
        let size = watch_gpu_size(self.precision);
        let mut bytes = vec![0u8; size * starts.len()];
        let mut flags = vec![0u32; starts.len()];
        for (r, s) in starts.iter().enumerate() {
            if let Some(s) = s {
                let (b, f) = s.bytes(self.precision);
                bytes[r * size..(r + 1) * size].copy_from_slice(&b);
                flags[r] = f;
            }
        }
        queue.write_buffer(&self.buffers["watch"], 0, &bytes);
        queue.write_buffer(&self.buffers["watch_flags"], 0, bytemuck::cast_slice(&flags));
        self.watching = flags.iter().any(|&f| f != 0);
        self.watching
    }

    /// Whether the last batch started watched some replica (`start_watch`).
    pub fn watching(&self) -> bool {
        self.watching
    }

    /// Resets the status words as `reset_status` does and tells the particle kernel which wall
    /// each replica of `walls` touched first (replica, its batch index), in one write: one
    /// write per replica costs a 10⁴-replica study more than its steps.
    pub fn reset_status_with_walls(&self, queue: &wgpu::Queue, rebuild: bool, walls: &[(usize, u32)]) {
        use super::super::shader::{RSTATUS_LEN, STATUS_LEN};
        let mut status = super::record::initial_status(rebuild, self.layout.replicas());
        for &(r, wall) in walls {
            status[STATUS_LEN + r * RSTATUS_LEN + RSTATUS_CONTACT_WALL] = wall;
        }
        queue.write_buffer(&self.buffers["status"], 0, bytemuck::cast_slice(&status));
        queue.write_buffer(&self.buffers["step_next"], 0, bytemuck::cast_slice(&[0u32; 4]));
    }

    /// The watch of every replica and its flags word from the readback buffer (after the
    /// submission that filled it, `record_readback`).
    pub fn read_watch(&self, device: &wgpu::Device) -> Result<Vec<(WatchRead, u32)>, GpuError> {
        let bytes = map_read(device, &self.readback)?;
        let r = self.layout.replicas();
        let size = watch_gpu_size(self.precision);
        let at = self.watch_offset as usize;
        let flags_at = at + size * r;
        Ok((0..r)
            .map(|k| {
                let w = WatchRead::decode(&bytes[at + k * size..at + (k + 1) * size], self.precision);
                let f = &bytes[flags_at + 4 * k..flags_at + 4 * k + 4];
                (w, u32::from_le_bytes([f[0], f[1], f[2], f[3]]))
            })
            .collect())
    }
}
