//! Arrays larger than one storage binding: the per-bond arrays, the incidence entries, the
//! neighbour lists and the contact history's rows (MODEL §10 friction, read and written only by
//! their own particle) are bound as windows (offset + size) of their buffers, and the kernels that
//! index them run as several dispatches ("chunks"), each over a range of particles, bonds or
//! reduction workgroups whose windows fit the binding limit. This module plans the chunks on
//! the host; a kernel reads element x of a whole array as element x − `*_win` of its window
//! (`ChunkGpu`, shaders/bindings.wgsl). With everything within one binding there is one chunk
//! of each kind with windows at 0, so the arithmetic is the unsplit one and results are bit
//! for bit the same either way (tested). Per-particle arrays are read at random and are not
//! windowed: where one binding cannot hold them they are bound in two parts with accessors
//! (`shader::Parts`), and particle chunks do not cross the parts' boundary, so that the particle
//! kernel can bind its own particle's values as one part (`ChunkGpu::part_win`). A chunked
//! array larger than one buffer (4 GiB on an H100) is paged (below).
//!
//! The **halo**: a particle chunk's window of bond results ends at its highest incident bond
//! and reaches back as far as a binding allows; an incident bond below it (a partner far away
//! in index order, as across the faces of a Morton order) is read from the halo instead, a
//! copy of those results made after the bond kernel (`halo_fill`, dispatched per bond chunk):
//! particle i's far bonds, in its incidence order, are halo entries `halo_off[i] ..`. The
//! values are copies, so results do not change. The halo must fit one binding: far bonds are
//! the surface of the chunks, not their volume.
//!
//! **Pages**: a chunked array larger than one buffer (`max_buffer_size`: 4 GiB on NVIDIA's
//! Vulkan driver, 2 GiB on lavapipe) is stored over several buffers (`Pages`), and the planner
//! keeps every window inside one page. The per-bond arrays share one page layout, in bonds: a
//! bond chunk ends at a page boundary, and a particle chunk's window of bond results starts no
//! lower than the page of its highest incident bond (the bonds below come through the halo, as
//! above). The incidence entries and the neighbour lists, which are read per particle, are
//! stored with an **overlap**: page k holds elements k·step .. (k + 1)·step + overlap, the
//! overlap at least one particle's longest range, so every particle's range lies whole in the
//! page where it starts (the entries are written to both copies; a neighbour list is written
//! and read through the same window, in that page). The contact history's rows are paged in
//! particles without overlap, and a particle chunk ends where a page of them does. One page
//! when the array fits one buffer, so the layout, and the results, are the unpaged ones.

use std::ops::Range;

/// Window starts are multiples of this many elements, so that their byte offsets are multiples
/// of 256 (wgpu's `min_storage_buffer_offset_alignment` is at most 256) for every element size
/// here (a multiple of 4 bytes).
pub const ALIGN: u64 = 64;

/// Mirrors WGSL `ChunkGpu` (shaders/bindings.wgsl), one uniform per chunk.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ChunkGpu {
    /// Particles `p_first .. p_end` (particle kernel, `nbr_build`).
    pub p_first: u32,
    pub p_end: u32,
    /// Bonds `b_first .. b_end` (bond kernel).
    pub b_first: u32,
    pub b_end: u32,
    /// First bond of the per-bond windows.
    pub bond_win: u32,
    /// First entry of the incidence window.
    pub inc_win: u32,
    /// First slot of the neighbour-list window.
    pub nbr_win: u32,
    /// First level-0 workgroup of `reduce_state`.
    pub group_base: u32,
    /// Entries `fill_first .. fill_end` of `halo_fill` (bond chunks).
    pub fill_first: u32,
    pub fill_end: u32,
    /// First particle of the part of the per-particle arrays this particle chunk lies in (0, or
    /// `part_len` when they are bound in two parts): the particle kernel's own particle's values
    /// are element i − part_win of their bindings (`shader::PARTICLE_OWN`).
    pub part_win: u32,
    /// First particle of the contact history's window (`dissipate`: row i − hist_win).
    pub hist_win: u32,
}

/// One chunk: its uniform, the element ranges of its windows, and (reduction chunks) how many
/// workgroups it dispatches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub gpu: ChunkGpu,
    /// Window of the per-bond arrays, in bonds.
    pub bonds: Range<u64>,
    /// Window of the incidence entries.
    pub inc: Range<u64>,
    /// Window of the neighbour-list slots.
    pub nbr: Range<u64>,
    /// Window of the contact history's rows, in particles.
    pub hist: Range<u64>,
    /// Workgroups of a reduction chunk.
    pub groups: u32,
}

/// The chunks of a state: particle ranges (particle kernel and `nbr_build`), bond ranges (bond
/// kernel) and reduction-workgroup ranges (`reduce_state`), and the halo.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkPlan {
    pub particles: Vec<Chunk>,
    pub bonds: Vec<Chunk>,
    pub reduce: Vec<Chunk>,
    /// Particle i's far bonds are halo entries `halo_off[i] .. halo_off[i + 1]` (n + 1).
    pub halo_off: Vec<u32>,
    /// The bond each halo entry copies.
    pub halo_src: Vec<u32>,
    /// Halo entries in the order of their bonds (each bond chunk fills a range of it).
    pub halo_fill: Vec<u32>,
}

/// How an array of `len` elements lies in buffers ("pages"): page k holds elements
/// `k·step .. min((k + 1)·step + overlap, len)`, so elements of the overlap are in pages k and
/// k + 1, and the page of element x is `x / step`. `step` is a multiple of `ALIGN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pages {
    pub len: u64,
    pub step: u64,
    pub overlap: u64,
}

impl Pages {
    /// One page for the whole array.
    pub fn one(len: u64) -> Pages {
        Pages { len, step: len.next_multiple_of(ALIGN).max(ALIGN), overlap: 0 }
    }

    /// The layout of `len` elements of `elem` bytes in buffers of at most `max_buffer` bytes:
    /// one page when it fits, else pages of `step + overlap` elements. `None` when a buffer
    /// cannot hold `ALIGN` elements beyond the overlap.
    pub fn new(len: u64, elem: u64, max_buffer: u64, overlap: u64) -> Option<Pages> {
        if len * elem <= max_buffer {
            return Some(Pages::one(len));
        }
        let step = align_down((max_buffer / elem.max(1)).checked_sub(overlap)?);
        (step >= ALIGN).then_some(Pages { len, step, overlap })
    }

    pub fn count(&self) -> usize {
        self.len.div_ceil(self.step).max(1) as usize
    }

    /// Elements page k holds.
    pub fn range(&self, k: usize) -> Range<u64> {
        let start = k as u64 * self.step;
        start.min(self.len)..(start + self.step + self.overlap).min(self.len)
    }

    /// The page a window starting at element `lo` is bound from.
    pub fn page_of(&self, lo: u64) -> usize {
        (align_down(lo) / self.step) as usize
    }

    /// Whether the window `[align_down(lo), hi)` lies in one page (the page of its start).
    pub fn holds(&self, lo: u64, hi: u64) -> bool {
        hi <= lo || hi <= (self.page_of(lo) as u64 + 1) * self.step + self.overlap
    }

    /// Pieces of the elements `range` in their pages, without repetition: (page, elements in
    /// it relative to the page's first, the elements' place relative to `range.start`). Each
    /// element comes from the page `x / step`.
    pub fn pieces(&self, range: Range<u64>) -> Vec<(usize, Range<u64>, u64)> {
        let mut out = Vec::new();
        let mut x = range.start;
        while x < range.end {
            let k = (x / self.step) as usize;
            let base = k as u64 * self.step;
            let end = range.end.min(base + self.step);
            out.push((k, x - base..end - base, x - range.start));
            x = end;
        }
        out
    }
}

/// What a plan needs to know of the state.
pub struct ChunkInputs<'a> {
    pub n: u64,
    pub n_bonds: u64,
    /// Incidence offsets (n + 1) and entries (2·bond + end) and, per particle, the lowest and
    /// highest bond it is an end of (`u32::MAX`, 0 for none).
    pub inc_offsets: &'a [u32],
    /// May be empty when every bond fits one window (no halo then).
    pub inc_entries: &'a [u32],
    pub bond_lo: &'a [u32],
    pub bond_hi: &'a [u32],
    /// Neighbour-list offsets (n + 1).
    pub nbr_offsets: &'a [u32],
    /// Bond range of each level-0 reduction workgroup (empty ranges for none).
    pub reduce_bonds: &'a [Range<u64>],
    /// Bytes per bond of the widest per-bond array (the results, 12 reals).
    pub bond_bytes: u64,
    /// Most bytes one binding may hold.
    pub max_binding: u64,
    /// Particles in the first part of the per-particle arrays when they are bound in two parts
    /// (`sizes::particle_part_len`): no particle chunk crosses it.
    pub part_len: Option<u64>,
    /// How the per-bond arrays, the incidence entries and the neighbour lists lie in buffers.
    pub bond_pages: Pages,
    pub inc_pages: Pages,
    /// Bytes per incidence entry of the widest array beside the incidence (4, or a vec4 of
    /// reals where the bonded pairs' friction history is real).
    pub inc_bytes: u64,
    pub nbr_pages: Pages,
    /// Bytes per particle of the contact history's widest rows (0 without friction), and how
    /// its rows lie in buffers, in particles.
    pub hist_bytes: u64,
    pub hist_pages: Pages,
}

fn align_down(x: u64) -> u64 {
    x / ALIGN * ALIGN
}

/// A window [align_down(lo), hi) of `elem`-byte elements fits the binding.
fn fits(lo: u64, hi: u64, elem: u64, max_binding: u64) -> bool {
    hi <= lo || (hi - align_down(lo)) * elem <= max_binding
}

/// Plans the chunks, greedily (each as long as its windows fit). Fails with the particle whose
/// own windows do not fit one binding (its bonds span too many others, or its list is longer
/// than a binding holds).
pub fn plan(c: &ChunkInputs<'_>) -> Result<ChunkPlan, usize> {
    let (particles, halo_off, halo_src) = particle_chunks(c)?;
    // The halo is bound whole: it must fit one binding.
    if halo_src.len() as u64 * c.bond_bytes > c.max_binding {
        let worst = (0..c.n as usize).max_by_key(|&i| halo_off[i + 1] - halo_off[i]).unwrap_or(0);
        return Err(worst);
    }
    let mut halo_fill: Vec<u32> = (0..halo_src.len() as u32).collect();
    halo_fill.sort_by_key(|&s| (halo_src[s as usize], s));
    let bonds = bond_chunks(c, &halo_src, &halo_fill)?;
    let reduce = reduce_chunks(c)?;
    Ok(ChunkPlan { particles, bonds, reduce, halo_off, halo_src, halo_fill })
}

/// The particle chunks, with the halo's offsets (n + 1) and entries (the bond each copies).
#[allow(clippy::type_complexity)]
fn particle_chunks(c: &ChunkInputs<'_>) -> Result<(Vec<Chunk>, Vec<u32>, Vec<u32>), usize> {
    let max = c.max_binding;
    let mut particles = Vec::new();
    // Particles: a chunk grows while its incidence, list and history windows fit and the
    // highest bonds of its particles lie within one window; bonds below the window go to the
    // halo.
    let capb = (max / c.bond_bytes.max(1)).saturating_sub(ALIGN);
    let n = c.n as usize;
    let mut halo_off = vec![0u32; n + 1];
    let mut halo_src: Vec<u32> = Vec::new();
    let mut p0 = 0usize;
    while p0 < n || (n == 0 && particles.is_empty()) {
        let (mut top_lo, mut top_hi, mut all_lo) = (u64::MAX, 0u64, u64::MAX);
        // The part of the per-particle arrays the chunk lies in, and where it ends.
        let (part_win, part_end) = match c.part_len {
            Some(l) if p0 as u64 >= l => (l as usize, n),
            Some(l) => (0, n.min(l as usize)),
            None => (0, n),
        };
        let mut p = p0;
        while p < part_end {
            let (l, h) = if c.bond_lo[p] <= c.bond_hi[p] {
                let top = c.bond_hi[p] as u64;
                (top_lo.min(top), top_hi.max(top + 1))
            } else {
                (top_lo, top_hi)
            };
            let (inc_lo, inc_hi) = (c.inc_offsets[p0] as u64, c.inc_offsets[p + 1] as u64);
            let (nbr_lo, nbr_hi) = (c.nbr_offsets[p0] as u64, c.nbr_offsets[p + 1] as u64);
            let ok = (h <= l || (h - l <= capb && c.bond_pages.page_of(l) == c.bond_pages.page_of(h - 1)))
                && fits(inc_lo, inc_hi, c.inc_bytes, max)
                && c.inc_pages.holds(inc_lo, inc_hi)
                && fits(nbr_lo, nbr_hi, 4, max)
                && c.nbr_pages.holds(nbr_lo, nbr_hi)
                && fits(p0 as u64, p as u64 + 1, c.hist_bytes, max)
                && c.hist_pages.holds(p0 as u64, p as u64 + 1);
            if !ok {
                break;
            }
            (top_lo, top_hi) = (l, h);
            all_lo = all_lo.min(c.bond_lo[p] as u64);
            p += 1;
        }
        if p == p0 && n > 0 {
            return Err(p0);
        }
        // The window: down to the lowest incident bond where a binding and the page of the
        // highest allow, else as far back as they do (aligned), up to the highest bond.
        let page_lo = if top_hi == 0 { 0 } else { c.bond_pages.page_of(top_hi - 1) as u64 * c.bond_pages.step };
        let bonds = if top_hi == 0 {
            0..0
        } else if all_lo >= page_lo && fits(all_lo, top_hi, c.bond_bytes, max) {
            align_down(all_lo)..top_hi
        } else {
            let lo = top_hi.saturating_sub(capb).div_ceil(ALIGN) * ALIGN;
            lo.max(page_lo).min(align_down(top_lo))..top_hi
        };
        for q in p0..p {
            if all_lo >= bonds.start {
                // No incident bond of the chunk lies below the window (and `inc_entries` may be
                // left out then: the caller omits it when every bond fits one window).
                halo_off[q + 1] = halo_src.len() as u32;
                continue;
            }
            for &e in &c.inc_entries[c.inc_offsets[q] as usize..c.inc_offsets[q + 1] as usize] {
                if ((e >> 1) as u64) < bonds.start {
                    halo_src.push(e >> 1);
                }
            }
            halo_off[q + 1] = halo_src.len() as u32;
        }
        let inc = align_down(c.inc_offsets[p0] as u64)..c.inc_offsets[p] as u64;
        let nbr = align_down(c.nbr_offsets[p0] as u64)..c.nbr_offsets[p] as u64;
        let hist = align_down(p0 as u64)..p as u64;
        let gpu = ChunkGpu {
            p_first: p0 as u32,
            p_end: p as u32,
            bond_win: bonds.start as u32,
            inc_win: inc.start as u32,
            nbr_win: nbr.start as u32,
            part_win: part_win as u32,
            hist_win: hist.start as u32,
            ..Default::default()
        };
        particles.push(Chunk { gpu, bonds, inc, nbr, hist, groups: 0 });
        p0 = p;
        if n == 0 {
            break;
        }
    }
    Ok((particles, halo_off, halo_src))
}

/// The bond chunks; each fills the halo entries (`halo_fill`, in the order of their bonds)
/// whose bonds it computes.
fn bond_chunks(c: &ChunkInputs<'_>, halo_src: &[u32], halo_fill: &[u32]) -> Result<Vec<Chunk>, usize> {
    let max = c.max_binding;
    let mut bonds = Vec::new();
    // Bonds: as many as fit, in multiples of ALIGN so that each window starts where its chunk does.
    let per = (max / c.bond_bytes.max(1)).max(1);
    let per = if per >= ALIGN { align_down(per) } else { per };
    let mut b0 = 0u64;
    loop {
        let page_end = (b0 / c.bond_pages.step + 1) * c.bond_pages.step;
        let b1 = (b0 + per).min(page_end).min(c.n_bonds);
        let start = align_down(b0);
        if !fits(b0, b1, c.bond_bytes, max) {
            return Err(0);
        }
        // The halo entries whose bonds this chunk computes.
        let fill_first = halo_fill.partition_point(|&s| (halo_src[s as usize] as u64) < b0) as u32;
        let fill_end = halo_fill.partition_point(|&s| (halo_src[s as usize] as u64) < b1) as u32;
        let gpu = ChunkGpu {
            b_first: b0 as u32,
            b_end: b1 as u32,
            bond_win: start as u32,
            fill_first,
            fill_end,
            ..Default::default()
        };
        bonds.push(Chunk { gpu, bonds: start..b1, inc: 0..0, nbr: 0..0, hist: 0..0, groups: 0 });
        b0 = b1;
        if b0 >= c.n_bonds {
            break;
        }
    }
    Ok(bonds)
}

/// The reduction chunks.
fn reduce_chunks(c: &ChunkInputs<'_>) -> Result<Vec<Chunk>, usize> {
    let max = c.max_binding;
    let mut reduce = Vec::new();
    // Reduction workgroups: consecutive ones whose bonds fit one window.
    let groups = c.reduce_bonds;
    let mut g0 = 0usize;
    while g0 < groups.len() {
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        let mut g = g0;
        while g < groups.len() {
            let r = &groups[g];
            let (l, h) = if r.end > r.start { (lo.min(r.start), hi.max(r.end)) } else { (lo, hi) };
            if !fits(l, h, c.bond_bytes, max) || !c.bond_pages.holds(l, h) {
                break;
            }
            (lo, hi) = (l, h);
            g += 1;
        }
        if g == g0 {
            return Err(0);
        }
        let bonds = if hi > lo { align_down(lo)..hi } else { 0..0 };
        let gpu = ChunkGpu { bond_win: bonds.start as u32, group_base: g0 as u32, ..Default::default() };
        reduce.push(Chunk { gpu, bonds, inc: 0..0, nbr: 0..0, hist: 0..0, groups: (g - g0) as u32 });
        g0 = g;
    }
    Ok(reduce)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain: particle i bonded to i + 1 (bond i), incidence in bond order.
    fn chain(n: usize, cap: u32, max_binding: u64) -> Result<ChunkPlan, usize> {
        chain_or_ring(n, cap, max_binding, false, u64::MAX, None).map(|(p, _)| p)
    }

    /// A chain's incidence offsets and entries, and the page layouts of its bond arrays,
    /// incidence and lists.
    type Chain = (Vec<u32>, Vec<u32>, [Pages; 3]);

    /// A chain, or with `ring` closed by a last bond n − 1 from particle 0 to particle n − 1,
    /// its arrays in buffers of `max_buffer` bytes (as `DemState` pages them); with the
    /// incidence entries and the page layouts.
    fn chain_or_ring(
        n: usize,
        cap: u32,
        max_binding: u64,
        ring: bool,
        max_buffer: u64,
        part_len: Option<u64>,
    ) -> Result<(ChunkPlan, Chain), usize> {
        let nb = n - 1 + ring as usize;
        let mut inc_offsets = vec![0u32];
        let mut inc_entries = Vec::new();
        let (mut lo, mut hi) = (vec![u32::MAX; n], vec![0u32; n]);
        let mut add = |i: usize, bond: usize, end: u32, inc: &mut Vec<u32>| {
            inc.push(2 * bond as u32 + end);
            lo[i] = lo[i].min(bond as u32);
            hi[i] = hi[i].max(bond as u32);
        };
        for i in 0..n {
            if i > 0 {
                add(i, i - 1, 1, &mut inc_entries);
            }
            if i + 1 < n {
                add(i, i, 0, &mut inc_entries);
            }
            if ring && (i == 0 || i == n - 1) {
                add(i, n - 1, (i == n - 1) as u32, &mut inc_entries);
            }
            inc_offsets.push(inc_entries.len() as u32);
        }
        let nbr: Vec<u32> = (0..=n as u32).map(|i| i * cap).collect();
        let groups: Vec<Range<u64>> =
            (0..nb.div_ceil(64)).map(|g| 64 * g as u64..(64 * g as u64 + 64).min(nb as u64)).collect();
        let pages = [
            Pages::new(nb as u64, 48, max_buffer, 0).unwrap(),
            Pages::new(inc_entries.len() as u64, 4, max_buffer, ALIGN).unwrap(),
            Pages::new(nbr[n] as u64, 4, max_buffer, (cap as u64).next_multiple_of(ALIGN)).unwrap(),
        ];
        let p = plan(&ChunkInputs {
            n: n as u64,
            n_bonds: nb as u64,
            inc_offsets: &inc_offsets,
            inc_entries: &inc_entries,
            bond_lo: &lo,
            bond_hi: &hi,
            nbr_offsets: &nbr,
            reduce_bonds: &groups,
            bond_bytes: 48,
            max_binding,
            part_len,
            bond_pages: pages[0],
            inc_pages: pages[1],
            inc_bytes: 4,
            nbr_pages: pages[2],
            hist_bytes: 0,
            hist_pages: Pages::one(n as u64),
        })?;
        Ok((p, (inc_offsets, inc_entries, pages)))
    }

    #[test]
    fn particle_chunks_stay_within_one_part_of_the_per_particle_arrays() {
        // 5000 particles, parts of 3200 and 1800: chunks (of at most 128 particles here, set by
        // the list windows) end at 3200, not a multiple of 128, and each knows its part.
        let (p, _) = chain_or_ring(5000, 16, 8 << 10, false, u64::MAX, Some(3200)).unwrap();
        assert!(p.particles.len() > 2);
        let mut next = 0;
        for c in &p.particles {
            let (a, b) = (c.gpu.p_first as u64, c.gpu.p_end as u64);
            assert_eq!(a, next, "chunks cover the particles in order");
            assert!(b <= 3200 || a >= 3200, "chunk {a}..{b} crosses the parts");
            assert_eq!(c.gpu.part_win, if a >= 3200 { 3200 } else { 0 });
            next = b;
        }
        assert_eq!(next, 5000);
        assert!(p.particles.iter().any(|c| c.gpu.p_end == 3200), "a chunk ends at the boundary");
        // Whole arrays: every window at 0, and a chunk across 3200.
        let whole = chain(5000, 16, 8 << 10).unwrap();
        assert!(whole.particles.iter().any(|c| c.gpu.p_first < 3200 && c.gpu.p_end > 3200));
        assert!(whole.particles.iter().all(|c| c.gpu.part_win == 0));
    }

    #[test]
    fn pages_cover_an_array_with_their_overlap() {
        // 1000 u32 in buffers of 1 KiB with an overlap of 64: steps of 192 elements.
        let p = Pages::new(1000, 4, 1024, 64).unwrap();
        assert_eq!((p.step, p.count()), (192, 6));
        assert_eq!((p.range(0), p.range(5)), (0..256, 960..1000));
        assert!(p.range(0).end - p.range(0).start <= 256, "a page fits its buffer");
        // A window lies in the page of its (aligned) start, overlap included.
        assert!(p.holds(150, 256) && !p.holds(150, 257) && p.holds(192, 448) && !p.holds(191, 200 + 64 * 3));
        assert_eq!(p.pieces(100..500), vec![(0, 100..192, 0), (1, 0..192, 92), (2, 0..116, 284)]);
        assert_eq!(Pages::new(1000, 4, 4000, 64), Some(Pages::one(1000)));
        assert_eq!(Pages::one(1000).count(), 1);
        assert_eq!(Pages::new(1000, 4, 256, 64), None, "no room beyond the overlap");
    }

    #[test]
    fn paged_arrays_keep_every_window_in_one_page() {
        // Bond results in pages of 21 KiB (448 bonds), incidence and lists in pages of 21 KiB.
        let max_buffer = 21 << 10;
        let (p, (inc_offsets, inc_entries, [bp, ip, np])) =
            chain_or_ring(5000, 16, 8 << 10, true, max_buffer, None).unwrap();
        assert!(bp.count() >= 10 && ip.count() >= 2 && np.count() >= 3, "{bp:?} {ip:?} {np:?}");
        let mut at = 0;
        for c in &p.particles {
            assert_eq!(c.gpu.p_first, at);
            at = c.gpu.p_end;
            for (w, pages) in [(&c.bonds, bp), (&c.inc, ip), (&c.nbr, np)] {
                assert!(pages.holds(w.start, w.end), "{w:?} in {pages:?}");
            }
            // Each particle reads from the halo exactly its incident bonds below the window.
            for q in c.gpu.p_first as usize..c.gpu.p_end as usize {
                let below: Vec<u32> = inc_entries[inc_offsets[q] as usize..inc_offsets[q + 1] as usize]
                    .iter()
                    .map(|e| e >> 1)
                    .filter(|&b| (b as u64) < c.bonds.start)
                    .collect();
                assert_eq!(&p.halo_src[p.halo_off[q] as usize..p.halo_off[q + 1] as usize], &below[..], "particle {q}");
                let above = inc_entries[inc_offsets[q] as usize..inc_offsets[q + 1] as usize]
                    .iter()
                    .any(|e| (e >> 1) as u64 >= c.bonds.end);
                assert!(!above, "particle {q}: a bond above its window");
            }
        }
        assert_eq!(at, 5000);
        // Chain bonds cross every page boundary of the bonds: each brings a halo entry.
        assert!(p.halo_src.len() >= bp.count() - 1, "{} halo entries", p.halo_src.len());
        let mut b = 0;
        for c in &p.bonds {
            assert_eq!(c.gpu.b_first, b);
            assert!(bp.holds(c.bonds.start, c.bonds.end), "{:?}", c.bonds);
            b = c.gpu.b_end;
        }
        assert_eq!(b, 5000);
        for c in &p.reduce {
            assert!(bp.holds(c.bonds.start, c.bonds.end), "{:?}", c.bonds);
        }
        assert_eq!(p.reduce.iter().map(|c| c.groups).sum::<u32>(), 5000u32.div_ceil(64));
    }

    #[test]
    fn one_chunk_of_each_kind_when_everything_fits() {
        let p = chain(1000, 16, 1 << 30).unwrap();
        assert_eq!((p.particles.len(), p.bonds.len(), p.reduce.len()), (1, 1, 1));
        let c = &p.particles[0];
        assert_eq!((c.gpu.p_first, c.gpu.p_end, c.gpu.bond_win, c.gpu.inc_win, c.gpu.nbr_win), (0, 1000, 0, 0, 0));
        assert_eq!((p.bonds[0].gpu.b_first, p.bonds[0].gpu.b_end), (0, 999));
        assert_eq!(p.reduce[0].groups, 16);
    }

    #[test]
    fn chunks_cover_everything_once_with_aligned_windows_that_fit() {
        let max = 8 << 10;
        let p = chain(5000, 16, max).unwrap();
        assert!(p.particles.len() >= 8 && p.bonds.len() >= 20 && p.reduce.len() >= 20, "{:?}", p.particles.len());
        // Particles: consecutive, covering 0..n; windows aligned and within the binding.
        let mut at = 0;
        for c in &p.particles {
            assert_eq!(c.gpu.p_first, at);
            at = c.gpu.p_end;
            for (w, elem) in [(&c.bonds, 48), (&c.inc, 4), (&c.nbr, 4)] {
                assert_eq!(w.start % ALIGN, 0);
                assert!((w.end - w.start) * elem <= max, "{w:?}");
            }
            // Every incident bond of the chunk's particles lies in its window.
            assert!(
                c.bonds.start <= (c.gpu.p_first as u64).saturating_sub(1)
                    && c.bonds.end >= (c.gpu.p_end as u64).min(4999)
            );
        }
        assert_eq!(at, 5000);
        let mut b = 0;
        for c in &p.bonds {
            assert_eq!((c.gpu.b_first, c.gpu.bond_win), (b, b));
            assert!((c.bonds.end - c.bonds.start) * 48 <= max);
            b = c.gpu.b_end;
        }
        assert_eq!(b, 4999);
        assert_eq!(p.reduce.iter().map(|c| c.groups).sum::<u32>(), 4999u32.div_ceil(64));
    }

    #[test]
    fn bonds_below_a_chunks_window_go_to_the_halo() {
        // A chain has no far bonds.
        let p = chain(5000, 16, 8 << 10).unwrap();
        assert!(p.halo_src.is_empty() && p.halo_off.iter().all(|&o| o == 0));
        assert!(p.bonds.iter().all(|c| c.gpu.fill_first == c.gpu.fill_end));
        // Closed into a ring: particle 0's highest bond is the closing one (4999), so its window
        // ends there and its chain bond 0 is read from the halo, which the first bond chunk
        // (the one computing bond 0) fills.
        let (p, _) = chain_or_ring(5000, 16, 8 << 10, true, u64::MAX, None).unwrap();
        assert_eq!(p.halo_src, vec![0]);
        assert_eq!(&p.halo_off[..3], &[0, 1, 1]);
        assert_eq!(*p.halo_off.last().unwrap(), 1);
        let first = &p.particles[0];
        assert!(first.bonds.contains(&4999) && !first.bonds.contains(&0), "{:?}", first.bonds);
        assert_eq!((p.bonds[0].gpu.fill_first, p.bonds[0].gpu.fill_end), (0, 1));
        assert!(p.bonds[1..].iter().all(|c| c.gpu.fill_first == c.gpu.fill_end));
    }

    #[test]
    fn long_lists_split_the_particles_while_the_bonds_fit_one_window_without_the_entries() {
        // Lists of 64 slots in pages of 64 kB (255 lists each) split the particles into chunks,
        // while the chain's 4999 bonds (240 kB of results) fit one 1 MiB window. The caller then
        // leaves the incidence entries out (no bond can come through the halo); later chunks'
        // windows start above bond 0, and the plan must not look at the entries for them
        // (it indexed the empty slice before).
        let n = 5000;
        let mut inc_offsets = vec![0u32];
        let (mut lo, mut hi) = (vec![u32::MAX; n], vec![0u32; n]);
        for i in 0..n {
            let bonds: Vec<u32> =
                [i.checked_sub(1), (i + 1 < n).then_some(i)].into_iter().flatten().map(|b| b as u32).collect();
            for &b in &bonds {
                lo[i] = lo[i].min(b);
                hi[i] = hi[i].max(b);
            }
            inc_offsets.push(inc_offsets[i] + bonds.len() as u32);
        }
        let nbr: Vec<u32> = (0..=n as u32).map(|i| 64 * i).collect();
        let groups: Vec<Range<u64>> = (0..4999u64.div_ceil(64)).map(|g| 64 * g..(64 * g + 64).min(4999)).collect();
        let lists = plan(&ChunkInputs {
            n: n as u64,
            n_bonds: 4999,
            inc_offsets: &inc_offsets,
            inc_entries: &[],
            bond_lo: &lo,
            bond_hi: &hi,
            nbr_offsets: &nbr,
            reduce_bonds: &groups,
            bond_bytes: 48,
            max_binding: 1 << 20,
            part_len: None,
            bond_pages: Pages::one(4999),
            inc_pages: Pages::one(inc_offsets[n] as u64),
            inc_bytes: 4,
            nbr_pages: Pages::new(nbr[n] as u64, 4, 64 << 10, 64).unwrap(),
            hist_bytes: 0,
            hist_pages: Pages::one(n as u64),
        })
        .unwrap();
        assert!(lists.particles.len() >= 5, "{} particle chunks", lists.particles.len());
        assert!(lists.particles.iter().skip(1).all(|c| c.bonds.start > 0));
        assert!(lists.halo_src.is_empty());
    }

    #[test]
    fn a_particle_whose_own_windows_do_not_fit_is_named() {
        // Lists of 100 slots (400 bytes) in a 256-byte binding.
        assert_eq!(chain(10, 100, 256), Err(0));
    }
}
