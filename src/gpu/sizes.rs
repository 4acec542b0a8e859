//! Element sizes and limits of the GPU engine's arrays, the ground floor every other part of
//! `gpu` builds on (the batch's memory estimates, the state's allocation plan, the shader
//! header's element sizes and the engine's limit checks): what one real, one particle's vec4,
//! one bond's results and one block take in bytes, how reals become the device's bytes and back,
//! and the fixed caps of the break records and the initial neighbour lists. Nothing here knows
//! buffers or devices.

use super::chunks::ALIGN;
use crate::engine::Precision;

/// Every buffer is at least this large: no zero-size bindings, and at least one element of the
/// widest array type (BondOutGpu in f64 is 96 bytes).
pub const MIN_BUFFER: usize = 128;

/// Bytes of one particle's block (`cell`: vec4<i32>, the position's integer part in f32, the
/// grid's cell in f64; see `gpu::frame`).
pub const CELL_BYTES: usize = 16;

/// Break records one batch of steps holds at most (f32: 32 B each, 134 MB; f64: 48 B, 201 MB),
/// whatever the bond count: a batch that breaks more is taken again in shorter batches
/// (`GpuEngine::run`). Before, the records were sized to every bond (up to what a binding holds:
/// 4.3 GB at 10⁸ bonds in f32), most of which no batch ever uses.
pub const MAX_BREAK_RECORDS: u64 = 1 << 22;

/// Initial capacity of each neighbour list; an overflow is handled exactly (grid fallback) and
/// grows the capacity for the next batch.
pub const INITIAL_NBR_CAPACITY: u32 = 16;

/// The least initial capacity of a neighbour list (`BatchTotals::initial_nbr_capacity`).
pub const MIN_NBR_CAPACITY: u32 = 4;

/// Bytes of one real.
pub fn real_size(p: Precision) -> usize {
    match p {
        Precision::F32 => 4,
        Precision::F64 => 8,
    }
}

/// Bytes per particle of the widest per-particle array (a vec4 of reals).
pub fn particle_elem(precision: Precision) -> u64 {
    4 * real_size(precision) as u64
}

/// Bytes per bond of the bond kernel's results (WGSL `BondOutGpu`: f_i, m_i, m_j, three vec4 of
/// reals), the widest per-bond array; the halo holds the same records.
pub fn bond_out_elem(precision: Precision) -> u64 {
    12 * real_size(precision) as u64
}

/// Particles in the first part of the per-particle arrays (`shader::PARTED`) when one binding
/// of `max_binding` bytes cannot hold such an array whole (they are then bound in two parts,
/// `shader::Parts::Two`), else `None`. A multiple of `ALIGN`, so that the second part's offset
/// is aligned; `None` too where a binding holds fewer than `ALIGN` particles (the model is then
/// refused as one binding's worth).
pub fn particle_part_len(n: u64, precision: Precision, max_binding: u64) -> Option<u64> {
    let elem = particle_elem(precision);
    let part = max_binding / elem / ALIGN * ALIGN;
    (n * elem > max_binding && part > 0).then_some(part)
}

/// f64 values as the device's reals.
pub fn reals_to_bytes(v: &[f64], p: Precision) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * real_size(p));
    push_reals(&mut out, v, p);
    out
}

/// Device reals back to f64.
pub fn bytes_to_reals(b: &[u8], p: Precision) -> Vec<f64> {
    match p {
        Precision::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect(),
        Precision::F64 => b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
    }
}

/// Appends reals in the device's precision, in the host's byte order as the bytemuck casts of the
/// other arrays (little-endian on every host wgpu runs on).
pub fn push_reals(out: &mut Vec<u8>, v: &[f64], p: Precision) {
    for &x in v {
        match p {
            Precision::F32 => out.extend_from_slice(&(x as f32).to_ne_bytes()),
            Precision::F64 => out.extend_from_slice(&x.to_ne_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_particle_arrays_split_into_aligned_parts_only_beyond_one_binding() {
        // Two parts from the first particle a binding cannot hold, the first a multiple of 64
        // particles.
        let lavapipe = 128 << 20;
        assert_eq!(particle_part_len(10_000_000, Precision::F32, lavapipe), Some(8_388_608));
        assert_eq!(particle_part_len(8_388_608, Precision::F32, lavapipe), None);
        assert_eq!(particle_part_len(2400, Precision::F64, 32 * 1536), Some(1536));
        assert_eq!(particle_part_len(2400, Precision::F64, 32 * 1536 + 100), Some(1536));
        // A binding of fewer than 64 particles cannot start an aligned second part.
        assert_eq!(particle_part_len(80, Precision::F64, 1024), None);
    }

    #[test]
    fn reals_round_trip_through_the_device_bytes() {
        let v = [1.0, -2.5, 1e300, f64::MIN_POSITIVE];
        assert_eq!(bytes_to_reals(&reals_to_bytes(&v, Precision::F64), Precision::F64), v);
        let b = reals_to_bytes(&v, Precision::F32);
        assert_eq!(b.len(), 16);
        assert_eq!(bytes_to_reals(&b, Precision::F32), v.map(|x| x as f32 as f64));
    }
}
