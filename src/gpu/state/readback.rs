//! Reading the state back to the host and writing parts of it from the host: status and
//! diagnostics after a batch, a replica's per-particle arrays, blocks and broken flags (for
//! snapshots, saved states and error reports), the neighbour counts and the break records.
//! Every read of device memory waits on the device; writes are queued before the next submit.
//! Indices are replica-relative: replica r's ranges start at `p_start[r]`, `broken_word[r]`.

use super::super::batch::broken_words;
use super::super::context::{create_buffer, map_read};
use super::super::error::GpuError;
use super::super::shader::DLOAD_ARRAYS;
use super::super::sizes::{CELL_BYTES, bytes_to_reals, real_size};
use super::{BROKEN, CELL, DemState};

/// Break records read back: (midpoint xyz, energy) in f64, and (bond, step within the batch,
/// channel).
pub type BreakRecords = (Vec<[f64; 4]>, Vec<[u32; 3]>);

impl DemState {
    /// Maps the readback buffer (after the submission that filled it): the status words
    /// (batch-wide, then per replica) and one diagnostics record per replica (NQ reals each), in
    /// f64.
    pub fn read_status(&self, device: &wgpu::Device) -> Result<(Vec<u32>, Vec<f64>), GpuError> {
        let bytes = map_read(device, &self.readback)?;
        let (words, records) = bytes.split_at(self.status_bytes as usize);
        let status = words.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok((status, bytes_to_reals(records, self.precision)))
    }

    /// Bytes of replica r's part of one per-particle vec4 array.
    pub fn array_bytes(&self, r: usize) -> usize {
        4 * real_size(self.precision) * self.layout.n_particles[r] as usize
    }

    /// Copies replica r's part of per-particle vec4 arrays back, raw (the device's reals,
    /// little-endian).
    pub fn read_arrays_raw(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        names: &[&str],
        r: usize,
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        let len = self.array_bytes(r) as u64;
        let at = 4 * real_size(self.precision) as u64 * self.layout.p_start[r] as u64;
        let parts: Vec<(&str, u64, u64)> = names.iter().map(|&name| (name, at, len)).collect();
        self.read_buffers_raw(device, queue, &parts)
    }

    /// The neighbour count of every particle at the last rebuild (also of lists that
    /// overflowed: their full length).
    pub fn read_nbr_counts(&self, device: &wgpu::Device, queue: &wgpu::Queue) -> Result<Vec<u32>, GpuError> {
        let raw = self.read_buffers_raw(device, queue, &[("nbr_count", 0, 4 * self.n as u64)])?.swap_remove(0);
        Ok(bytemuck::pod_collect_to_vec(&raw))
    }

    /// Replica r's blocks, raw (`CELL_BYTES` per particle: i32 x, y, z, 0, little-endian).
    pub fn read_cells_raw(&self, device: &wgpu::Device, queue: &wgpu::Queue, r: usize) -> Result<Vec<u8>, GpuError> {
        let c = CELL_BYTES as u64;
        let (at, len) = (c * self.layout.p_start[r] as u64, c * self.layout.n_particles[r] as u64);
        Ok(self.read_buffers_raw(device, queue, &[(CELL.0, at, len)])?.swap_remove(0))
    }

    /// Replica r's blocks (replica-relative indices).
    pub fn read_cells(&self, device: &wgpu::Device, queue: &wgpu::Queue, r: usize) -> Result<Vec<[i32; 3]>, GpuError> {
        let raw = self.read_cells_raw(device, queue, r)?;
        Ok(bytemuck::pod_collect_to_vec::<u8, i32>(&raw).chunks_exact(4).map(|c| [c[0], c[1], c[2]]).collect())
    }

    /// Overwrites replica r's blocks with raw bytes of `CELL_BYTES · n_particles` length (queued
    /// before the next submit).
    pub fn write_cells_raw(&self, queue: &wgpu::Queue, bytes: &[u8], r: usize) {
        debug_assert_eq!(bytes.len(), CELL_BYTES * self.layout.n_particles[r] as usize);
        if !bytes.is_empty() {
            queue.write_buffer(&self.buffers[CELL.0], CELL_BYTES as u64 * self.layout.p_start[r] as u64, bytes);
        }
    }

    /// `read_arrays_raw` as f64 (for snapshots and error reports): replica-relative indices.
    pub fn read_arrays(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        names: &[&str],
        r: usize,
    ) -> Result<Vec<Vec<f64>>, GpuError> {
        let raw = self.read_arrays_raw(device, queue, names, r)?;
        Ok(raw.iter().map(|b| bytes_to_reals(b, self.precision)).collect())
    }

    /// Copies `len` bytes at `offset` of each named array back, raw, with one host wait (one per
    /// slice where they exceed what one staging buffer holds).
    pub(super) fn read_buffers_raw(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        parts: &[(&str, u64, u64)],
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        let size: u64 = parts.iter().map(|p| p.2).sum();
        if size == 0 {
            return Ok(parts.iter().map(|_| Vec::new()).collect());
        }
        if size > self.max_buffer {
            // More than one staging buffer holds (a paged array: the friction history of a large
            // model): each part in slices of whole elements that one buffer holds, one host
            // wait each.
            let mut out = Vec::with_capacity(parts.len());
            for &(name, offset, len) in parts {
                let elem = self.paged.get(name).map_or(4, |p| p.elem);
                let step = (self.max_buffer / elem).max(1) * elem;
                let mut bytes = Vec::with_capacity(len as usize);
                let mut at = 0;
                while at < len {
                    let piece = step.min(len - at);
                    bytes.extend(self.read_buffers_raw(device, queue, &[(name, offset + at, piece)])?.remove(0));
                    at += piece;
                }
                out.push(bytes);
            }
            return Ok(out);
        }
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let staging = create_buffer(device, "readback", size, usage)
            .map_err(|e| GpuError::Readback(format!("cannot allocate {size} bytes of staging memory: {e:?}")))?;
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
        let mut at = 0;
        for &(name, offset, len) in parts {
            if len > 0 {
                for (buffer, from, bytes, rel) in self.locate(name, offset, len) {
                    encoder.copy_buffer_to_buffer(buffer, from, &staging, at + rel, bytes);
                }
            }
            at += len;
        }
        queue.submit([encoder.finish()]);
        let bytes = map_read(device, &staging)?;
        let mut out = Vec::with_capacity(parts.len());
        let mut at = 0;
        for &(_, _, len) in parts {
            out.push(bytes[at..at + len as usize].to_vec());
            at += len as usize;
        }
        Ok(out)
    }

    /// The first `count` break records of the batch just finished (a host wait, made only when
    /// the status words say some bond broke): per record the midpoint (relative to the position
    /// origin) and energy as f64, and (bond, step within the batch, channel).
    pub fn read_breaks(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        count: u32,
    ) -> Result<BreakRecords, GpuError> {
        let count = count.min(self.n_bonds) as u64;
        let rs = real_size(self.precision) as u64;
        let raw =
            self.read_buffers_raw(device, queue, &[("break_at", 0, 4 * rs * count), ("break_id", 0, 16 * count)])?;
        let at = bytes_to_reals(&raw[0], self.precision).chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect();
        let ids =
            bytemuck::pod_collect_to_vec::<u8, u32>(&raw[1]).chunks_exact(4).map(|c| [c[0], c[1], c[2]]).collect();
        Ok((at, ids))
    }

    /// Replica r's broken flags, raw (one little-endian u32 per bond; empty when its bonds
    /// cannot break).
    pub fn read_broken_raw(&self, device: &wgpu::Device, queue: &wgpu::Queue, r: usize) -> Result<Vec<u8>, GpuError> {
        if !self.layout.rupture[r] {
            return Ok(Vec::new());
        }
        let nb = self.layout.n_bonds[r] as usize;
        let (at, len) = (4 * self.layout.broken_word[r] as u64, 4 * broken_words(nb as u64));
        let words: Vec<u32> =
            bytemuck::pod_collect_to_vec(&self.read_buffers_raw(device, queue, &[(BROKEN.0, at, len)])?.swap_remove(0));
        Ok((0..nb).flat_map(|k| ((words[k / 32] >> (k % 32)) & 1).to_le_bytes()).collect())
    }

    /// Overwrites replica r's broken flags with raw bytes of `4·n_bonds` length (queued before
    /// the next submit).
    pub fn write_broken_raw(&self, queue: &wgpu::Queue, bytes: &[u8], r: usize) {
        debug_assert_eq!(bytes.len(), 4 * self.layout.n_bonds[r] as usize);
        if self.layout.rupture[r] && !bytes.is_empty() {
            let mut words = vec![0u32; broken_words(self.layout.n_bonds[r] as u64) as usize];
            for (k, flag) in bytes.chunks_exact(4).enumerate() {
                if flag.iter().any(|&b| b != 0) {
                    words[k / 32] |= 1 << (k % 32);
                }
            }
            queue.write_buffer(
                &self.buffers[BROKEN.0],
                4 * self.layout.broken_word[r] as u64,
                bytemuck::cast_slice(&words),
            );
        }
    }

    /// Overwrites replica r's part of a per-particle vec4 array with raw bytes of
    /// `array_bytes(r)` length (queued before the next submit).
    pub fn write_array_raw(&self, queue: &wgpu::Queue, name: &str, bytes: &[u8], r: usize) {
        debug_assert_eq!(bytes.len(), self.array_bytes(r));
        if !bytes.is_empty() {
            let at = 4 * real_size(self.precision) as u64 * self.layout.p_start[r] as u64;
            queue.write_buffer(&self.buffers[name], at, bytes);
        }
    }
}

impl DemState {
    /// Replica r's dissipative loads and ledger shares, raw, three vec4 per particle in the
    /// order of `shader::DLOAD_ARRAYS` (the layout saved states hold, from when they were one
    /// array). One array read back at a time, so that the host holds the result and one array
    /// (a save of a large model is gigabytes).
    pub fn read_dload_raw(&self, device: &wgpu::Device, queue: &wgpu::Queue, r: usize) -> Result<Vec<u8>, GpuError> {
        let (at, len) = self.dload_range(r);
        let v4 = 4 * real_size(self.precision);
        let mut out = vec![0u8; 3 * len as usize];
        for (k, name) in DLOAD_ARRAYS.into_iter().enumerate() {
            let array = self.read_buffers_raw(device, queue, &[(name, at, len)])?.swap_remove(0);
            for (p, v) in array.chunks_exact(v4).enumerate() {
                out[(3 * p + k) * v4..(3 * p + k + 1) * v4].copy_from_slice(v);
            }
        }
        Ok(out)
    }

    /// Overwrites replica r's dissipative loads with raw bytes of `read_dload_raw`'s length and
    /// layout.
    pub fn write_dload_raw(&self, queue: &wgpu::Queue, bytes: &[u8], r: usize) {
        // A replica that does not dissipate saves no loads (and the arrays may be placeholders).
        if bytes.is_empty() {
            return;
        }
        let (at, len) = self.dload_range(r);
        debug_assert_eq!(bytes.len() as u64, 3 * len);
        let v4 = 4 * real_size(self.precision);
        for (k, name) in DLOAD_ARRAYS.into_iter().enumerate() {
            let array: Vec<u8> = bytes.chunks_exact(v4).skip(k).step_by(3).flatten().copied().collect();
            queue.write_buffer(&self.buffers[name], at, &array);
        }
    }

    /// Byte offset and length of replica r's part of each of `shader::DLOAD_ARRAYS`.
    fn dload_range(&self, r: usize) -> (u64, u64) {
        let per = 4 * real_size(self.precision) as u64;
        (per * self.layout.p_start[r] as u64, per * self.layout.n_particles[r] as u64)
    }
}

impl DemState {
    /// Copies `len` bytes at `offset` of each named buffer back, raw, with one host wait (for
    /// the parts of a saved state that are not per-particle vec4 arrays: the contact history).
    pub fn read_ranges_raw(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        parts: &[(&str, u64, u64)],
    ) -> Result<Vec<Vec<u8>>, GpuError> {
        self.read_buffers_raw(device, queue, parts)
    }

    /// Overwrites the bytes at `offset` of a named array, page by page where it is paged
    /// (queued before the next submit).
    pub fn write_range_raw(&self, queue: &wgpu::Queue, name: &str, offset: u64, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        for (buffer, at, len, rel) in self.locate(name, offset, bytes.len() as u64) {
            queue.write_buffer(buffer, at, &bytes[rel as usize..(rel + len) as usize]);
        }
    }
}
