//! How the CPU engine's parallel bond pass adds each bond's result into its two ends in bond order
//! without storing every bond's result.
//!
//! The bonds are cut into contiguous ranges, a few per thread, run in parallel, each in bond
//! order. A particle belongs to the range that holds its first end (its lowest bond): that
//! range adds the particle's ends it holds straight into the particle's sums, and those ends
//! are the first of the particle's ends in bond order. The particle's later ends, in later
//! ranges, are stored (force and moment, 48 B, and a 4 B slot each) and added by the particle
//! pass, in bond order, onto that prefix. So every particle's sum runs over its bonds in bond
//! order, as the serial pass adds them, and has the same bits on any number of threads.
//!
//! Only ends past a range boundary are stored: of a particle whose bonds straddle one. On 2
//! threads (6 ranges) that is 6 % of the ends of the FCC block of 10⁵ spheres in lattice order
//! (a range boundary parts the bonds of one lattice layer), 2.7 % at 10⁶ and 1.6 % for the solid
//! torus of 10⁶ spheres in Morton order (measured), against every bond's result (72 B per bond)
//! and an incidence list (8 B per bond) for a gather; and one parallel loop per evaluation, as
//! a gather has (a loop per block of bonds instead made the threads sleep and wake hundreds of
//! times per step: 18 000 context switches against 1 500 in a 6 s run of fcc-1e5).

use glam::DVec3;
use rayon::prelude::*;

/// Ranges per thread: enough for rayon to even out uneven ranges (broken bonds are cheaper),
/// few enough that boundaries stay rare.
const RANGES_PER_THREAD: usize = 3;

/// Bonds per block of the bond energies: a block's energies are summed in bond order from +0,
/// and the blocks' sums in block order, on one thread as on many (a range is whole blocks), so
/// that the parallel pass sums them as it goes instead of storing them per bond.
pub(crate) const ENERGY_BLOCK: usize = 1024;

/// No range: a particle without bonds.
const NONE: u32 = u32::MAX;

/// A force and a moment on one particle from one bond.
pub(crate) type EndLoad = (DVec3, DVec3);

/// A bond's energies: bending, axial, shear, and the contact of its two particles (where the
/// bond pass evaluates it, `CpuEngine::bond_contacts`; else 0).
pub(crate) type BondEnergies = [f64; 4];

/// Adds `e` into the sums `u`, channel by channel.
#[inline(always)]
pub(crate) fn add_energies(u: &mut BondEnergies, e: &BondEnergies) {
    for (s, x) in u.iter_mut().zip(e) {
        *s += x;
    }
}

/// The ranges of the bonds, which range each particle's sums belong to, and where the ends past
/// a particle's range are stored: each a load `L` (`EndLoad`; with dissipative bond loads the bond's
/// conservative and dissipative loads apart, `[EndLoad; 2]`, since the ledger books the latter
/// alone).
pub(crate) struct BondRanges<L = EndLoad> {
    /// Threads the ranges were cut for.
    threads: usize,
    n_bonds: usize,
    /// Bonds per range (the last holds the rest).
    len: usize,
    /// The range of each particle's first end (`NONE` without bonds).
    owner: Vec<u32>,
    /// Range r's deferred ends (ends in r of particles owned by an earlier range), in bond
    /// order, go to `deferred[slot[s]]` for s in `range_slots[r] .. range_slots[r + 1]`.
    range_slots: Vec<u32>,
    slot: Vec<u32>,
    /// Particle p's deferred ends are `deferred[deferred_off[p] .. deferred_off[p + 1]]`, in
    /// bond order.
    deferred_off: Vec<u32>,
    deferred: Vec<L>,
    /// Each `ENERGY_BLOCK` of bonds' energies (`BondEnergies`) of the last `pass`.
    block_energies: Vec<BondEnergies>,
}

impl<L: Copy + Default + Send + Sync> BondRanges<L> {
    /// The plan for `n` particles and `n_bonds` bonds whose ends are `ends(k)`, cut for the
    /// current rayon pool. Linear in the bonds (sequential: a few passes over the bond ends).
    pub(crate) fn new(n: usize, n_bonds: usize, ends: impl Fn(usize) -> (u32, u32)) -> BondRanges<L> {
        // Ends and slots are counted in u32 (a model that large, 2³¹ bonds, needs 86 GB for
        // its bonds alone).
        assert!(2 * n_bonds <= u32::MAX as usize, "{n_bonds} bonds: more than the CPU engine indexes");
        let threads = rayon::current_num_threads();
        let len = range_len(n_bonds);
        // `pass` pairs each range with its energy blocks: whole blocks only.
        assert_eq!(len % ENERGY_BLOCK, 0);
        let ranges = n_bonds.div_ceil(len);
        let (owner, mut count, mut range_slots) = owners(n, n_bonds, len, &ends);
        for p in 0..n {
            count[p + 1] += count[p];
        }
        for r in 0..ranges {
            range_slots[r + 1] += range_slots[r];
        }
        let deferred_off = count;
        let mut fill = deferred_off.clone();
        let mut slot = Vec::with_capacity(range_slots[ranges] as usize);
        for k in 0..n_bonds {
            let r = (k / len) as u32;
            let (i, j) = ends(k);
            for p in [i as usize, j as usize] {
                if owner[p] != r {
                    slot.push(fill[p]);
                    fill[p] += 1;
                }
            }
        }
        // `pass` relies on `slot` being a permutation of the deferred entries: each particle's
        // filled exactly, and as many slots as the ranges hold (`ends` is called twice here;
        // these checks make a closure that answers differently a panic, not a data race).
        assert!(
            slot.len() == range_slots[ranges] as usize && (0..n).all(|p| fill[p] == deferred_off[p + 1]),
            "bond ends changed while the bond ranges were cut"
        );
        let deferred = vec![L::default(); slot.len()];
        let block_energies = vec![[0.0; 4]; n_bonds.div_ceil(ENERGY_BLOCK)];
        BondRanges { threads, n_bonds, len, owner, range_slots, slot, deferred_off, deferred, block_energies }
    }

    /// Whether the plan was cut for the current rayon pool (a plan cut for another gives the
    /// same results, but may leave threads idle or store more ends than needed).
    pub(crate) fn fits_pool(&self) -> bool {
        self.threads == rayon::current_num_threads()
    }

    /// Bytes held (capacities).
    pub(crate) fn bytes(&self) -> usize {
        4 * (self.owner.capacity() + self.range_slots.capacity() + self.slot.capacity() + self.deferred_off.capacity())
            + self.deferred.capacity() * size_of::<L>()
            + self.block_energies.capacity() * size_of::<BondEnergies>()
    }

    /// Runs `eval(k, &mut state[k])` for every bond, in parallel over the ranges and in bond
    /// order within each; its loads on the two ends (`None` for a bond that exerts nothing) go
    /// into `add(p, load)` for particles p of the bond's range, and are stored for the others
    /// (`None` stores zeros, which add nothing to sums that start at +0); its energies into the
    /// sums of its `ENERGY_BLOCK` (`block_energies`). `ends(k)` must be the ends the plan was
    /// made with (checked where it matters: a range never writes past its own slots), and
    /// `state` one per bond. `add(p, ·)` is called for each particle p from one task only
    /// (its range's), in bond order: it may write p's sums through a `Disjoint`.
    pub(crate) fn pass<S: Send>(
        &mut self,
        state: &mut [S],
        ends: impl Fn(usize) -> (u32, u32) + Sync,
        eval: impl Fn(usize, &mut S) -> Option<([L; 2], BondEnergies)> + Sync,
        add: impl Fn(usize, &L) + Sync,
    ) {
        assert_eq!(state.len(), self.n_bonds);
        let deferred = Disjoint::new(&mut self.deferred);
        let (owner, slot, range_slots, len) = (&self.owner, &self.slot, &self.range_slots, self.len);
        let per_range = len / ENERGY_BLOCK;
        state
            .par_chunks_mut(len)
            .zip(self.block_energies.par_chunks_mut(per_range))
            .enumerate()
            .with_max_len(1)
            .for_each(|(r, (states, energies))| {
                let (mut s, slots_end) = (range_slots[r] as usize, range_slots[r + 1] as usize);
                for (b, (block, energy)) in states.chunks_mut(ENERGY_BLOCK).zip(energies.iter_mut()).enumerate() {
                    let first = r * len + b * ENERGY_BLOCK;
                    let mut u = [0.0; 4];
                    for (l, st) in block.iter_mut().enumerate() {
                        let k = first + l;
                        let (i, j) = ends(k);
                        let out = eval(k, st);
                        if let Some((_, e)) = &out {
                            add_energies(&mut u, e);
                        }
                        for (end, p) in [(0, i as usize), (1, j as usize)] {
                            if owner[p] == r as u32 {
                                if let Some((loads, _)) = &out {
                                    // Only range `owner[p]` adds into p's sums, and this range
                                    // runs on one task.
                                    add(p, &loads[end]);
                                }
                            } else {
                                assert!(s < slots_end, "bond {k}: more ends past its range than the plan holds");
                                let load = out.as_ref().map_or(L::default(), |o| o.0[end]);
                                // SAFETY: `slot` is a permutation of the deferred entries (made
                                // by `new`), and this range reads only its own part of it.
                                *unsafe { deferred.get(slot[s] as usize) } = load;
                                s += 1;
                            }
                        }
                    }
                    *energy = u;
                }
            });
    }

    /// The bond energies (`BondEnergies`) of each `ENERGY_BLOCK` of bonds in the last `pass`,
    /// summed in bond order.
    pub(crate) fn block_energies(&self) -> &[BondEnergies] {
        &self.block_energies
    }

    /// Particle p's deferred ends of the last `pass`, in bond order.
    #[inline]
    pub(crate) fn deferred(&self, p: usize) -> &[L] {
        &self.deferred[self.deferred_off[p] as usize..self.deferred_off[p + 1] as usize]
    }
}

/// Bonds per range for the current rayon pool (whole energy blocks).
fn range_len(n_bonds: usize) -> usize {
    n_bonds.div_ceil(RANGES_PER_THREAD * rayon::current_num_threads()).max(1).next_multiple_of(ENERGY_BLOCK)
}

/// Each particle's range (that of its first end), and how many of its ends, and of each
/// range's, lie in a later range than the particle's (at index p + 1 and r + 1).
fn owners(n: usize, n_bonds: usize, len: usize, ends: impl Fn(usize) -> (u32, u32)) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut owner = vec![NONE; n];
    let mut count = vec![0u32; n + 1];
    let mut range_slots = vec![0u32; n_bonds.div_ceil(len) + 1];
    for k in 0..n_bonds {
        let r = (k / len) as u32;
        let (i, j) = ends(k);
        for p in [i as usize, j as usize] {
            if owner[p] == NONE {
                owner[p] = r;
            } else if owner[p] != r {
                count[p + 1] += 1;
                range_slots[r as usize + 1] += 1;
            }
        }
    }
    (owner, count, range_slots)
}

/// How many bond ends the parallel bond pass stores for `n` particles and the bonds whose ends
/// are `ends` on the current rayon pool (for memory estimates).
pub(crate) fn stored_ends(n: usize, ends: &[(u32, u32)]) -> usize {
    owners(n, ends.len(), range_len(ends.len()), |k| ends[k]).2.iter().map(|&c| c as usize).sum()
}

/// A mutable slice whose elements parallel tasks write, each element by one task only.
pub(crate) struct Disjoint<'a, T>(*mut T, usize, std::marker::PhantomData<&'a mut [T]>);

// SAFETY: elements are handed out only under `get`'s contract (one task per element).
unsafe impl<T: Send> Sync for Disjoint<'_, T> {}
unsafe impl<T: Send> Send for Disjoint<'_, T> {}

impl<'a, T> Disjoint<'a, T> {
    pub(crate) fn new(s: &'a mut [T]) -> Disjoint<'a, T> {
        Disjoint(s.as_mut_ptr(), s.len(), std::marker::PhantomData)
    }

    /// Element `i`.
    ///
    /// # Safety
    /// No other task reads or writes element `i` while the reference lives.
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub(crate) unsafe fn get(&self, i: usize) -> &mut T {
        assert!(i < self.1);
        // SAFETY: in bounds (checked above); exclusive by the caller's guarantee.
        unsafe { &mut *self.0.add(i) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "bond ends changed")]
    fn ends_that_change_while_the_ranges_are_cut_are_refused() {
        // 3072 bonds in ranges of 1024 on a 3-thread pool; the second reading of the ends
        // differs from the first, which would make two ranges share a stored end.
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let ends = |k: usize| {
            let call = calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let shift = if call >= 3072 { 1 } else { 0 };
            ((k % 7) as u32, (7 + (k + shift) % 5) as u32)
        };
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        pool.install(|| BondRanges::<EndLoad>::new(12, 3072, ends));
    }
}
