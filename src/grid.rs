//! Contact search on a hashed uniform grid (CPU): linear in the number of particles, with a
//! deterministic neighbour order (cells in a fixed order, particles by index inside a cell).
//!
//! Cells have the edge `cell_size ≥ 2 r_max`, so every contact partner of a particle lies in
//! the 27 cells around its own. Cell coordinates are hashed into a table of `2^k ≥ 2N` buckets
//! (no bounding box needed: a particle far away costs nothing). Bucket collisions only add
//! candidates, which are filtered by their true cell coordinates, so no pair is seen twice.
//! The GPU grid uses the same hash (`cell_hash` in `shaders/grid.wgsl`).

use glam::DVec3;
use rayon::prelude::*;

/// Largest allowed |cell coordinate|; beyond it a particle is treated as escaped/non-finite.
pub const MAX_CELL_COORD: f64 = (1u32 << 30) as f64;

/// Hash of integer cell coordinates (wrapping u32 arithmetic, identical in WGSL).
#[inline]
pub fn cell_hash(c: [i32; 3], mask: u32) -> u32 {
    ((c[0] as u32).wrapping_mul(73_856_093)
        ^ (c[1] as u32).wrapping_mul(19_349_663)
        ^ (c[2] as u32).wrapping_mul(83_492_791))
        & mask
}

/// The grid, rebuilt every step from the positions.
#[derive(Clone, Debug, Default)]
pub struct CellGrid {
    inv_cell: f64,
    mask: u32,
    cell: Vec<[i32; 3]>,
    hash: Vec<u32>,
    /// Bucket `b` holds `sorted[start[b]..start[b+1]]`.
    start: Vec<u32>,
    sorted: Vec<u32>,
}

impl CellGrid {
    /// A grid for `n` particles with cells of edge `cell_size` (> 0).
    pub fn new(n: usize, cell_size: f64) -> CellGrid {
        let buckets = (2 * n.max(1)).next_power_of_two();
        CellGrid {
            inv_cell: 1.0 / cell_size,
            mask: (buckets - 1) as u32,
            cell: vec![[0; 3]; n],
            hash: vec![0; n],
            start: vec![0; buckets + 1],
            sorted: vec![0; n],
        }
    }

    /// Sorts the particles into buckets. Fails with the first particle (lowest index) whose
    /// position is non-finite or too far from the origin for the grid.
    pub fn build(&mut self, position: impl Fn(usize) -> DVec3 + Sync) -> Result<(), usize> {
        let inv = self.inv_cell;
        let mask = self.mask;
        let place = |i: usize, c: &mut [i32; 3], h: &mut u32| {
            let f = (position(i) * inv).floor();
            // NaN fails this comparison too.
            if f.abs().max_element().partial_cmp(&MAX_CELL_COORD) != Some(std::cmp::Ordering::Less) {
                return Some(i);
            }
            *c = [f.x as i32, f.y as i32, f.z as i32];
            *h = cell_hash(*c, mask);
            None
        };
        // Small grids are placed serially (rayon's dispatch would cost more than the work).
        let bad = if self.cell.len() < 2048 {
            self.cell.iter_mut().zip(self.hash.iter_mut()).enumerate().filter_map(|(i, (c, h))| place(i, c, h)).min()
        } else {
            self.cell
                .par_iter_mut()
                .zip(self.hash.par_iter_mut())
                .enumerate()
                .filter_map(|(i, (c, h))| place(i, c, h))
                .min()
        };
        if let Some(i) = bad {
            return Err(i);
        }
        // Counting sort by bucket; scattering in index order keeps each bucket sorted by index.
        self.start.iter_mut().for_each(|s| *s = 0);
        for &h in &self.hash {
            self.start[h as usize + 1] += 1;
        }
        for b in 0..self.start.len() - 1 {
            self.start[b + 1] += self.start[b];
        }
        let mut fill = self.start.clone();
        for (i, &h) in self.hash.iter().enumerate() {
            self.sorted[fill[h as usize] as usize] = i as u32;
            fill[h as usize] += 1;
        }
        Ok(())
    }

    /// Calls `f(j)` for every particle `j ≠ i` in the 27 cells around particle `i`'s cell, in
    /// a fixed order (cells by offset z, y, x from −1 to 1; particles by index).
    #[inline]
    pub fn for_each_neighbour(&self, i: usize, mut f: impl FnMut(usize)) {
        let c = self.cell[i];
        for dz in -1..=1 {
            for dy in -1..=1 {
                for dx in -1..=1 {
                    let nc = [c[0].wrapping_add(dx), c[1].wrapping_add(dy), c[2].wrapping_add(dz)];
                    let b = cell_hash(nc, self.mask) as usize;
                    for &j in &self.sorted[self.start[b] as usize..self.start[b + 1] as usize] {
                        let j = j as usize;
                        if j != i && self.cell[j] == nc {
                            f(j);
                        }
                    }
                }
            }
        }
    }
}
