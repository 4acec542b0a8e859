//! How the GPU stores positions: an integer block (the replica's grid cell) plus an offset inside
//! it in the engine's real type, so that f32 resolves positions to ~1e-7 of a cell edge (a
//! particle diameter or so) however far the model lies from any origin. The device forms every
//! pair vector as (B_i − B_j)·edge + (o_i − o_j) (`pair_vector`, shaders/bindings.wgsl) and
//! moves a particle into its new block in the step that takes it out (`integrate`), so the
//! stored pair (B, o) is a function of the trajectory alone, never of when lists were rebuilt.
//! This module is the host's side of that convention: splitting positions on upload and joining
//! them on readback.
//!
//! f64 keeps one block per replica (B = 0, the offset is x − origin, `cell` is only the grid's):
//! it resolves 1e-16 of the distance, ample anywhere, and its arithmetic stays the CPU
//! reference's (x_i − x_j), whose agreement to ~1e-12 chaotic contact tests rely on; blocks
//! would change the round-off of every pair vector. `uses_blocks` tells the shaders (`BLOCKS`).

/// Whether positions in this precision are (block, offset) pairs (f32) or offsets from the
/// origin alone (f64).
pub fn uses_blocks(precision: Precision) -> bool {
    precision == Precision::F32
}

use crate::engine::Precision;
use glam::DVec3;

/// One replica's frame: positions are `origin + B·edge + o`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Frame {
    /// Subtracted on the host before splitting (the centre of the replica's initial bounding
    /// box in f32, zero in f64); only diagnostics that depend on the origin (L, Σ m x, the
    /// gravity energy) see it, and the host adds its terms back.
    pub origin: DVec3,
    /// Block edge as the device holds it (the f64 value of the real it is rounded to), so that
    /// host and device mean the same position by (B, o).
    pub edge: f64,
    precision: Precision,
}

impl Frame {
    /// A frame whose blocks have edge `edge` (rounded to the device's real type).
    pub fn new(origin: DVec3, edge: f64, precision: Precision) -> Frame {
        let edge = match precision {
            Precision::F32 => edge as f32 as f64,
            Precision::F64 => edge,
        };
        Frame { origin, edge, precision }
    }

    /// Block and offset of x. With blocks, the offset is in [0, edge) up to its rounding to the
    /// device's real type (exactly y − B·edge of y = x − origin in f64, then rounded once), and
    /// the block saturates far beyond the grid's range (|B| ≥ 2^30), where the first rebuild
    /// reports the particle out of range. Without, (0, y).
    pub fn split(&self, x: DVec3) -> ([i32; 3], DVec3) {
        let y = x - self.origin;
        if !uses_blocks(self.precision) {
            return ([0; 3], y);
        }
        let b = (y / self.edge).floor();
        let o = y - b * self.edge;
        let round = |v: f64| match self.precision {
            Precision::F32 => v as f32 as f64,
            Precision::F64 => v,
        };
        // `as` saturates (and maps NaN to 0): no panic on a wild input; the grid then reports.
        ([b.x as i32, b.y as i32, b.z as i32], DVec3::new(round(o.x), round(o.y), round(o.z)))
    }

    /// The position (B, o) stands for, in f64: origin + (B·edge + o); without blocks,
    /// origin + o (`cell` then holds the grid's cells, not blocks).
    pub fn join(&self, b: [i32; 3], o: DVec3) -> DVec3 {
        if !uses_blocks(self.precision) {
            return self.origin + o;
        }
        self.origin + (DVec3::new(b[0] as f64, b[1] as f64, b[2] as f64) * self.edge + o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_then_join_returns_the_position_to_the_offsets_rounding() {
        // f32: offsets in [0, edge] whatever |x|, back to ½ ulp(edge) ≈ 6e-8·edge per component
        // (plus the join's f64 rounding). f64: no blocks, the offset from the origin, back to a
        // few ulp of |x| (1e6: 1.2e-10).
        let x = [DVec3::new(0.3, -7.25, 1e6 + 0.123), DVec3::new(-4.0e5, 2.5e5, -0.001)];
        for (p, tol) in [(Precision::F64, 1e-9), (Precision::F32, 1.2e-7 * 2.3)] {
            let f = Frame::new(DVec3::new(1.0, 2.0, 3.0), 2.3, p);
            for x in x {
                let (b, o) = f.split(x);
                if uses_blocks(p) {
                    assert!(o.min_element() >= 0.0 && o.max_element() <= f.edge, "{p:?} {x}: offset {o}");
                } else {
                    assert_eq!((b, o), ([0; 3], x - f.origin));
                }
                let back = f.join(b, o);
                assert!((back - x).abs().max_element() <= tol, "{p:?}: {x} came back as {back}");
            }
        }
    }
}
