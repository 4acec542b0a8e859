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

/// Below this many items a loop runs on the calling thread: rayon's dispatch costs more than
/// the work for small systems (the paper's 80-particle torus ran 4× slower in parallel). The
/// CPU engine's passes and the grid's use it.
pub const PAR_MIN: usize = 2048;

pub use crate::model::{MAX_SKIN_FACTOR, SKIN_FACTOR};

/// Buckets of a hashed grid of `n` particles: the power of two ≥ 2n (the CPU grid's, and the
/// GPU's where one binding holds the table: `gpu::batch::bucket_count`).
pub fn bucket_count(n: usize) -> usize {
    (2 * n.max(1)).next_power_of_two()
}

/// Largest allowed |cell coordinate|; beyond it a particle is treated as escaped/non-finite.
pub const MAX_CELL_COORD: f64 = (1u32 << 30) as f64;

/// Multipliers of the cell hash (the GPU header injects these into `shaders/grid.wgsl`).
pub const CELL_HASH_PRIMES: [u32; 3] = [73_856_093, 19_349_663, 83_492_791];

/// Hash of integer cell coordinates (wrapping u32 arithmetic, identical in WGSL).
#[inline]
pub fn cell_hash(c: [i32; 3], mask: u32) -> u32 {
    let [a, b, d] = CELL_HASH_PRIMES;
    ((c[0] as u32).wrapping_mul(a) ^ (c[1] as u32).wrapping_mul(b) ^ (c[2] as u32).wrapping_mul(d)) & mask
}

/// Each particle's bonded partners (over every bond, intact or broken), sorted by index without
/// repeats (CSR): the pairs the contact lists leave out (`NeighbourList::leave_out_bonded`).
/// The contact of a bonded pair is evaluated with its bond instead (`CpuEngine::bond_contacts`),
/// so a break never needs a rebuild; `NeighbourList::contacts` merges them into the list in
/// index order for a walk that wants every partner.
#[derive(Clone, Debug, Default)]
pub struct BondedPartners {
    off: Vec<u32>,
    list: Vec<u32>,
}

impl BondedPartners {
    /// The partners of `n` particles joined by bonds with the given ends.
    pub fn new<I: Iterator<Item = (u32, u32)>>(n: usize, ends: impl Fn() -> I) -> BondedPartners {
        // The incidence (`model::incidence`), each entry turned into the bond's other end.
        let pairs: Vec<(u32, u32)> = ends().collect();
        let (off, mut all) = crate::model::incidence(n, pairs.len(), || pairs.iter().copied());
        for e in &mut all {
            let (i, j) = pairs[(*e >> 1) as usize];
            *e = if *e & 1 == 0 { j } else { i };
        }
        // Sorted, and without the repeats of two bonds on one pair (a pair's contact once).
        let mut list = Vec::with_capacity(all.len());
        let mut new_off = Vec::with_capacity(n + 1);
        new_off.push(0u32);
        for p in 0..n {
            let s = &mut all[off[p] as usize..off[p + 1] as usize];
            s.sort_unstable();
            let start = list.len();
            for &q in s.iter() {
                if list.len() == start || list.last() != Some(&q) {
                    list.push(q);
                }
            }
            new_off.push(list.len() as u32);
        }
        BondedPartners { off: new_off, list }
    }

    /// Particle `i`'s partners, by increasing index.
    #[inline]
    pub fn of(&self, i: usize) -> &[u32] {
        self.off.get(i + 1).map_or(&[][..], |&e| &self.list[self.off[i] as usize..e as usize])
    }

    /// Whether `i` and `j` are joined by a bond.
    #[inline]
    pub fn contains(&self, i: usize, j: usize) -> bool {
        self.of(i).binary_search(&(j as u32)).is_ok()
    }

    /// Entries (each pair counted from both ends).
    pub fn entries(&self) -> usize {
        self.list.len()
    }

    /// Bytes held (capacities).
    pub fn bytes(&self) -> usize {
        4 * (self.off.capacity() + self.list.capacity())
    }
}

/// A particle's contact partners by increasing index: its list's (`NeighbourList::listed`), with
/// its bonded ones merged in (`NeighbourList::contacts`). A partner's place in the sequence the
/// particle pass walks is its place in anything kept per contact (the friction history,
/// `engine::cpu::dissipation`), which a rebuild realigns.
pub struct Contacts<'a> {
    list: &'a [u32],
    bonded: &'a [u32],
    a: usize,
    b: usize,
}

impl Iterator for Contacts<'_> {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        let l = self.list.get(self.a).copied().unwrap_or(u32::MAX);
        let b = self.bonded.get(self.b).copied().unwrap_or(u32::MAX);
        if l < b {
            self.a += 1;
            Some(l as usize)
        } else if b != u32::MAX {
            self.b += 1;
            Some(b as usize)
        } else {
            None
        }
    }
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
        let buckets = bucket_count(n);
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
            // Every component must be finite and in range (a NaN in one lane fails `is_finite`;
            // `max_element` alone would skip it).
            if !(f.is_finite() && f.abs().max_element() < MAX_CELL_COORD) {
                return Some(i);
            }
            *c = [f.x as i32, f.y as i32, f.z as i32];
            *h = cell_hash(*c, mask);
            None
        };
        // Small grids are placed serially (rayon's dispatch would cost more than the work).
        let bad = if self.cell.len() < PAR_MIN {
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

/// `NeighbourList::moved`: some particle has moved half a skin since the last rebuild.
pub const MOVED_ABS: u8 = 1;
/// `NeighbourList::moved`: some particle has moved half a skin relative to the anchor.
pub const MOVED_REL: u8 = 2;
/// Both: the list must be rebuilt.
pub const MOVED_ALL: u8 = MOVED_ABS | MOVED_REL;

/// Verlet neighbour list on top of the grid: for each particle, the partners `j` within
/// `r_i + r_j + skin` at the last rebuild, sorted by index. It stays valid (contains every
/// overlapping pair) while every particle's displacement since the rebuild, less a common vector
/// `d`, is below `skin/2`: a pair's distance then changed by at most
/// `|Δx_i − Δx_j| ≤ |Δx_i − d| + |Δx_j − d| < skin`. Every step tests two such vectors, `d = 0`
/// (the textbook rule) and `d` = the displacement of particle 0 (the anchor, `drift`), and
/// rebuilds only when both tests fail: a body in rigid flight then rebuilds only for its
/// deformation, and no body rebuilds more often than under the textbook rule. Walls are not in
/// the list. Rebuilds are linear (through the grid) and deterministic,
/// and the list's content in sorted order does not change a force, so when they happen does not
/// change a result.
///
/// With `leave_out_bonded`, pairs joined by a bond are not listed (their contacts go with the
/// bonds; `contacts` merges them back in index order, see `BondedPartners`), so the interior of
/// a bonded solid has empty lists.
#[derive(Clone, Debug, Default)]
pub struct NeighbourList {
    skin: f64,
    /// The pairs left out of the list (`leave_out_bonded`).
    bonded: Option<BondedPartners>,
    grid: CellGrid,
    /// Partners of particle `i`: `list[offsets[i]..offsets[i+1]]`.
    offsets: Vec<u32>,
    list: Vec<u32>,
    x_at_build: Vec<DVec3>,
    /// The anchor's displacement, the second vector the skin rule tests (see above).
    drift: DVec3,
    built: bool,
    rebuilds: u64,
}

impl NeighbourList {
    /// A list for `n` particles with largest radius `r_max` and the given skin (> 0).
    pub fn new(n: usize, r_max: f64, skin: f64) -> NeighbourList {
        NeighbourList {
            skin,
            bonded: None,
            grid: CellGrid::new(n, (2.0 * r_max + skin).max(f64::MIN_POSITIVE)),
            offsets: vec![0; n + 1],
            list: Vec::new(),
            x_at_build: vec![DVec3::ZERO; n],
            drift: DVec3::ZERO,
            built: false,
            rebuilds: 0,
        }
    }

    /// Entries of the list (each pair counted from both ends).
    pub fn entries(&self) -> usize {
        self.list.len()
    }

    /// Leaves the pairs of `bonded` out of the list from the next rebuild on (which it forces);
    /// `contacts` visits them from `bonded` instead.
    pub fn leave_out_bonded(&mut self, bonded: BondedPartners) {
        self.bonded = Some(bonded);
        self.built = false;
    }

    /// Lists bonded pairs again from the next rebuild on (which it forces, if they were left out).
    pub fn list_bonded(&mut self) {
        if self.bonded.take().is_some() {
            self.built = false;
        }
    }

    /// Entries of the bonded partners left out of the list (0 where none are).
    pub fn bonded_entries(&self) -> usize {
        self.bonded.as_ref().map_or(0, BondedPartners::entries)
    }

    /// Number of rebuilds so far.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Rebuilds the list if any particle moved more than `skin/2` since the last rebuild (or a
    /// position became non-finite). Fails with the first particle the grid cannot place.
    pub fn update(&mut self, x: impl Fn(usize) -> DVec3 + Sync, radius: &[f64]) -> Result<(), usize> {
        self.update_with(x, |i| radius[i])
    }

    /// `update` with the radii given by a function.
    pub fn update_with(
        &mut self,
        x: impl Fn(usize) -> DVec3 + Sync,
        radius: impl Fn(usize) -> f64 + Sync,
    ) -> Result<(), usize> {
        let n = self.x_at_build.len();
        if self.built && n > 0 {
            self.set_drift(self.displacement(0, x(0)));
        }
        let moved = |i: usize| self.moved(i, x(i));
        let bits = if !self.built {
            0
        } else if n < PAR_MIN {
            (0..n).map(moved).fold(0, |a, b| a | b)
        } else {
            (0..n).into_par_iter().map(moved).reduce(|| 0, |a, b| a | b)
        };
        self.update_moved(bits == MOVED_ALL, x, radius)
    }

    /// The skin rule's two tests for particle `i` now at `x`: `MOVED_ABS` if it has moved at
    /// least `skin/2` since the last rebuild, `MOVED_REL` if it has relative to the anchor's
    /// displacement (both for a non-finite `x`: NaN distances compare false). The list must be
    /// rebuilt when the bits of all particles, or-ed, are `MOVED_ALL`. Engines that visit every
    /// particle anyway test it there and pass the verdict to `update_moved`, saving a pass.
    #[inline(always)]
    pub fn moved(&self, i: usize, x: DVec3) -> u8 {
        let half2 = 0.25 * self.skin * self.skin;
        let far = |d: DVec3| d.length_squared().partial_cmp(&half2) != Some(std::cmp::Ordering::Less);
        let d = x - self.x_at_build[i];
        (far(d) as u8 * MOVED_ABS) | (far(d - self.drift) as u8 * MOVED_REL)
    }

    /// Particle `i`'s displacement since the last rebuild, were it at `x`.
    pub fn displacement(&self, i: usize, x: DVec3) -> DVec3 {
        x - self.x_at_build[i]
    }

    /// Sets the common displacement that `moved` subtracts until the next rebuild or call (a
    /// non-finite one counts as zero, so that it cannot hide the others' displacements).
    pub fn set_drift(&mut self, d: DVec3) {
        self.drift = if d.is_finite() { d } else { DVec3::ZERO };
    }

    /// `update_with` when the caller already knows whether some particle `moved`.
    pub fn update_moved(
        &mut self,
        moved: bool,
        x: impl Fn(usize) -> DVec3 + Sync,
        radius: impl Fn(usize) -> f64 + Sync,
    ) -> Result<(), usize> {
        if moved || !self.built {
            self.rebuild(x, radius)?;
        }
        Ok(())
    }

    /// Bytes held (capacities): the grid, the list and the positions at the last rebuild.
    pub fn bytes(&self) -> usize {
        let g = &self.grid;
        12 * g.cell.capacity()
            + 4 * (g.hash.capacity() + g.start.capacity() + g.sorted.capacity())
            + 4 * (self.offsets.capacity() + self.list.capacity())
            + 24 * self.x_at_build.capacity()
            + self.bonded.as_ref().map_or(0, BondedPartners::bytes)
    }

    fn rebuild(
        &mut self,
        x: impl Fn(usize) -> DVec3 + Sync,
        radius: impl Fn(usize) -> f64 + Sync,
    ) -> Result<(), usize> {
        self.grid.build(&x)?;
        let grid = &self.grid;
        let n = self.x_at_build.len();
        let skin = self.skin;
        let bonded = self.bonded.as_ref();
        // One pass over the 27 cells per particle: blocks of particles fill block-local lists
        // (partners sorted by index per particle) and write their counts into `offsets`; the
        // blocks are then copied into place. The temporaries are the size of the list itself.
        const BLOCK: usize = 4096;
        let fill = |(blk, counts): (usize, &mut [u32])| -> Vec<u32> {
            let mut local = Vec::with_capacity(counts.len() * 8);
            for (k, c) in counts.iter_mut().enumerate() {
                let i = blk * BLOCK + k;
                let xi = x(i);
                let ri = radius(i);
                let start = local.len();
                grid.for_each_neighbour(i, |j| {
                    let reach = ri + radius(j) + skin;
                    if (xi - x(j)).length_squared() < reach * reach && !bonded.is_some_and(|b| b.contains(i, j)) {
                        local.push(j as u32);
                    }
                });
                // The cells are visited in a fixed order, but partners must come by index.
                local[start..].sort_unstable();
                *c = (local.len() - start) as u32;
            }
            local.shrink_to_fit();
            local
        };
        let blocks: Vec<Vec<u32>> = if n < PAR_MIN {
            self.offsets[..n].chunks_mut(BLOCK).enumerate().map(fill).collect()
        } else {
            self.offsets[..n].par_chunks_mut(BLOCK).enumerate().map(fill).collect()
        };
        let mut total = 0u32;
        for o in &mut self.offsets[..n] {
            let c = *o;
            *o = total;
            total += c;
        }
        self.offsets[n] = total;
        self.list.clear();
        self.list.resize(total as usize, 0);
        let offsets = &self.offsets;
        let list = SharedSlice(self.list.as_mut_ptr(), self.list.len());
        let copy = |(blk, local): (usize, Vec<u32>)| {
            let a = offsets[blk * BLOCK] as usize;
            // SAFETY: block `blk` holds exactly the entries `offsets[blk·B]..offsets[(blk+1)·B]`
            // (its counts made those offsets); the blocks' ranges are disjoint, inside `list`,
            // and each is taken by one call only.
            let slot = unsafe { list.range(a, a + local.len()) };
            slot.copy_from_slice(&local);
        };
        if n < PAR_MIN {
            blocks.into_iter().enumerate().for_each(copy);
        } else {
            blocks.into_par_iter().enumerate().for_each(copy);
        }
        for (i, x0) in self.x_at_build.iter_mut().enumerate() {
            *x0 = x(i);
        }
        self.drift = DVec3::ZERO;
        self.built = true;
        self.rebuilds += 1;
        Ok(())
    }

    /// The candidate partners of particle `i` in the list, by increasing index (without the
    /// bonded ones where they are left out: `contacts` has all).
    #[inline]
    pub fn partners(&self, i: usize) -> &[u32] {
        &self.list[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// The list's candidate partners of particle `i` alone (`partners`), as a `Contacts`: where
    /// the contacts of bonded pairs are evaluated with their bonds.
    #[inline]
    pub fn listed(&self, i: usize) -> Contacts<'_> {
        Contacts { list: self.partners(i), bonded: &[], a: 0, b: 0 }
    }

    /// Every candidate contact partner of particle `i` by increasing index: the list's, and the
    /// bonded partners where the list leaves them out (`Contacts`).
    #[inline]
    pub fn contacts(&self, i: usize) -> Contacts<'_> {
        Contacts { list: self.partners(i), bonded: self.bonded.as_ref().map_or(&[][..], |b| b.of(i)), a: 0, b: 0 }
    }
}

/// A mutable slice handed to parallel tasks that each write a disjoint range.
struct SharedSlice(*mut u32, usize);

// SAFETY: used only to give disjoint ranges to parallel tasks (see `range`).
unsafe impl Sync for SharedSlice {}
unsafe impl Send for SharedSlice {}

impl SharedSlice {
    /// The range `a..b`.
    ///
    /// # Safety
    /// `a ≤ b ≤ len`, and no other live reference covers any of the range.
    #[allow(clippy::mut_from_ref)]
    unsafe fn range(&self, a: usize, b: usize) -> &mut [u32] {
        assert!(a <= b && b <= self.1);
        // SAFETY: in bounds (checked above); exclusive by the caller's guarantee.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(a), b - a) }
    }
}

/// Morton (Z-order) code of three 21-bit coordinates.
pub fn morton3(x: u64, y: u64, z: u64) -> u64 {
    spread3(x) | spread3(y) << 1 | spread3(z) << 2
}

/// Spreads the low 21 bits of `v` to every third bit.
fn spread3(v: u64) -> u64 {
    let mut x = v & 0x1f_ffff;
    x = (x | x << 32) & 0x1f00000000ffff;
    x = (x | x << 16) & 0x1f0000ff0000ff;
    x = (x | x << 8) & 0x100f00f00f00f00f;
    x = (x | x << 4) & 0x10c30c30c30c30c3;
    (x | x << 2) & 0x1249249249249249
}

#[cfg(test)]
mod morton_tests {
    use super::morton3;

    #[test]
    fn morton_interleaves_bits() {
        assert_eq!(morton3(1, 0, 0), 1);
        assert_eq!(morton3(0, 1, 0), 2);
        assert_eq!(morton3(0, 0, 1), 4);
        assert_eq!(morton3(3, 0, 0), 0b1001);
        let m = (1u64 << 21) - 1;
        assert_eq!(morton3(m, m, m), (1u64 << 63) - 1);
    }
}

#[cfg(test)]
mod bonded_tests {
    use super::{BondedPartners, Contacts};

    #[test]
    fn bonded_partners_are_sorted_without_repeats_and_merge_with_a_list_by_index() {
        // Particle 2 is bonded to 5, 0, 3 and (twice, two bonds on one pair) to 4.
        let bonds = [(2u32, 5u32), (0, 2), (4, 2), (3, 2), (2, 4), (1, 3)];
        let b = BondedPartners::new(6, || bonds.iter().copied());
        assert_eq!(b.of(2), &[0, 3, 4, 5]);
        assert_eq!(b.of(3), &[1, 2]);
        assert_eq!(b.of(4), &[2]);
        assert_eq!(b.entries(), 2 * bonds.len() - 2);
        assert!(b.contains(2, 4) && b.contains(4, 2) && !b.contains(2, 1));
        assert_eq!(b.of(6), &[] as &[u32], "past the last particle: none");
        // The list's partners interleaved with the bonded ones.
        let list = [1u32, 6, 7];
        let merged: Vec<usize> = Contacts { list: &list, bonded: b.of(2), a: 0, b: 0 }.collect();
        assert_eq!(merged, vec![0, 1, 3, 4, 5, 6, 7]);
        assert_eq!(Contacts { list: &[], bonded: &[], a: 0, b: 0 }.count(), 0);
        assert_eq!(Contacts { list: &list, bonded: &[], a: 0, b: 0 }.collect::<Vec<_>>(), vec![1, 6, 7]);
    }
}
