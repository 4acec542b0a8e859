//! Property tests of the chunk planner (`gpu::chunks::plan`, no adapter needed): over a few
//! thousand random batches (random bond lists over random particle counts, split into
//! replicas; random binding limits, page sizes, neighbour-list capacities, bond-result sizes and
//! two-part splits of the per-particle arrays), every read a chunk's kernels make lies in a
//! window the chunk binds: the bond results of its particles' bonds (or the halo entries that
//! stand in for those below its window), its incidence and neighbour-list ranges, its own
//! particle's part of the per-particle arrays, its particles' rows of the contact history, the
//! bonds a bond chunk computes and copies into
//! the halo, and the bonds a reduction chunk sums. Every window is aligned, fits one binding and
//! lies in one page. The draws are counter-based SplitMix64 (`rrpdem::rng`): the same cases on
//! every run.

use rrpdem::gpu::chunks::{ALIGN, ChunkInputs, ChunkPlan, Pages, plan};
use rrpdem::rng::splitmix64;
use std::ops::Range;

/// Counter-based draws: draw k of case c is a function of (c, k) alone.
struct Draws {
    case: u64,
    k: u64,
}

impl Draws {
    fn next(&mut self) -> u64 {
        self.k += 1;
        splitmix64(splitmix64(self.case) ^ self.k)
    }

    /// Uniform in `lo..=hi`.
    fn int(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        rrpdem::rng::unit(self.next()) < p
    }

    /// Log-uniform in `lo..=hi`.
    fn log(&mut self, lo: u64, hi: u64) -> u64 {
        let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
        ((a + rrpdem::rng::unit(self.next()) * (b - a)).exp() as u64).clamp(lo, hi)
    }
}

/// One random batch and the limits it is planned under, as `DemState` would hand it over.
struct Case {
    n: usize,
    nb: usize,
    inc_offsets: Vec<u32>,
    inc_entries: Vec<u32>,
    bond_lo: Vec<u32>,
    bond_hi: Vec<u32>,
    nbr_offsets: Vec<u32>,
    reduce_bonds: Vec<Range<u64>>,
    bond_bytes: u64,
    max_binding: u64,
    part_len: Option<u64>,
    pages: [Pages; 3],
    /// The contact history's row bytes (0: no friction) and pages, in particles.
    hist_bytes: u64,
    hist_pages: Pages,
}

impl Case {
    fn inputs(&self) -> ChunkInputs<'_> {
        ChunkInputs {
            n: self.n as u64,
            n_bonds: self.nb as u64,
            inc_offsets: &self.inc_offsets,
            inc_entries: &self.inc_entries,
            bond_lo: &self.bond_lo,
            bond_hi: &self.bond_hi,
            nbr_offsets: &self.nbr_offsets,
            reduce_bonds: &self.reduce_bonds,
            bond_bytes: self.bond_bytes,
            max_binding: self.max_binding,
            part_len: self.part_len,
            bond_pages: self.pages[0],
            inc_pages: self.pages[1],
            inc_bytes: 4,
            nbr_pages: self.pages[2],
            hist_bytes: self.hist_bytes,
            hist_pages: self.hist_pages,
        }
    }

    /// Incident bonds of particle q, in its incidence order.
    fn bonds_of(&self, q: usize) -> impl Iterator<Item = u64> + '_ {
        self.inc_entries[self.inc_offsets[q] as usize..self.inc_offsets[q + 1] as usize].iter().map(|e| (e >> 1) as u64)
    }
}

/// Case c: 1 to 3 replicas of up to ~700 particles in all (a few with none), each with up to
/// three bonds per particle, mostly to near indices (a chain, a lattice numbered along one axis)
/// and some to any particle of its replica (far in index order: the halo's cases), in bond
/// order or shuffled; lists of one capacity or of per-particle lengths; bindings from a little
/// more than `ALIGN` bond results to four times all of them, and buffers (pages) from half a
/// binding to eight, or unlimited.
/// `None` where a buffer cannot hold the arrays' pages (the state refuses those batches).
fn case(c: u64) -> Option<Case> {
    let mut d = Draws { case: c, k: 0 };
    let replicas = d.int(1, 3) as usize;
    let mut sizes = Vec::new();
    let mut bonds: Vec<(u32, u32)> = Vec::new();
    let mut b_start = Vec::new();
    let mut p0 = 0u32;
    for _ in 0..replicas {
        let np = if d.chance(0.03) { 0 } else { d.log(1, 700 / replicas as u64) as u32 };
        let first = bonds.len();
        b_start.push(first as u64);
        if np >= 2 {
            let nb = d.int(0, 3 * np as u64) as usize;
            let far = if d.chance(0.3) { 0.0 } else { d.int(0, 30) as f64 / 100.0 };
            for _ in 0..nb {
                let i = d.int(0, np as u64 - 1) as u32;
                let j =
                    if d.chance(far) { d.int(0, np as u64 - 1) as u32 } else { (i + d.int(1, 8) as u32).min(np - 1) };
                if i != j {
                    bonds.push((p0 + i, p0 + j));
                }
            }
            if d.chance(0.5) {
                bonds[first..].sort_by_key(|&(i, j)| (i.min(j), i.max(j)));
            }
        }
        sizes.push((np, (bonds.len() - first) as u32));
        p0 += np;
    }
    let (n, nb) = (p0 as usize, bonds.len());
    let (inc_offsets, inc_entries) = rrpdem::model::incidence(n, nb, || bonds.iter().copied());
    let (mut bond_lo, mut bond_hi) = (vec![u32::MAX; n], vec![0u32; n]);
    for (k, &(i, j)) in bonds.iter().enumerate() {
        for p in [i as usize, j as usize] {
            bond_lo[p] = bond_lo[p].min(k as u32);
            bond_hi[p] = bond_hi[p].max(k as u32);
        }
    }
    let nbr_offsets: Vec<u32> = if d.chance(0.5) {
        let cap = d.int(1, 40) as u32;
        (0..=n as u32).map(|i| i * cap).collect()
    } else {
        let mut v = vec![0u32];
        for _ in 0..n {
            let len = d.int(0, 60) as u32;
            v.push(v.last().unwrap() + len);
        }
        v
    };
    // The reduction's level-0 workgroups, as `BatchLayout::reduce_tables` and
    // `ChunkHost::new` make them: per replica, WG items each over its particles and bonds.
    let wg = 64u64;
    let mut reduce_bonds = Vec::new();
    for (r, &(np, nbr)) in sizes.iter().enumerate() {
        let (b0, nbr) = (b_start[r], nbr as u64);
        for g in 0..(np as u64).max(nbr).max(1).div_ceil(wg) {
            let t0 = g * wg;
            reduce_bonds.push(b0 + t0.min(nbr)..b0 + (t0 + wg).min(nbr));
        }
    }
    let bond_bytes = if d.chance(0.5) { 48 } else { 96 };
    // Bindings mostly smaller than the bond results (chunks), sometimes larger (one chunk).
    let least = (ALIGN + 8) * bond_bytes;
    let max_binding = d.log(least, least.max(4 * nb as u64 * bond_bytes)) / 4 * 4;
    let part_len = (n as u64 > 2 * ALIGN && d.chance(0.3)).then(|| ALIGN * d.int(1, n as u64 / ALIGN - 1));
    let max_buffer = if d.chance(0.3) { u64::MAX } else { d.log(max_binding / 2, 8 * max_binding) };
    let longest = |o: &[u32]| o.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0) as u64;
    let pages = [
        Pages::new(nb as u64, bond_bytes, max_buffer, 0)?,
        Pages::new(inc_entries.len() as u64, 4, max_buffer, longest(&inc_offsets).next_multiple_of(ALIGN))?,
        Pages::new(nbr_offsets[n] as u64, 4, max_buffer, longest(&nbr_offsets).next_multiple_of(ALIGN))?,
    ];
    // Friction's history rows in half the cases: up to 512 B per particle, at least two
    // aligned runs of rows per binding (as a binding holds 10³–10⁷ rows on real adapters).
    let hist_bytes = if d.chance(0.5) { 0 } else { (d.int(4, 512).min(max_binding / (2 * ALIGN)) / 4 * 4).max(4) };
    let hist_pages =
        if hist_bytes == 0 { Pages::one(n as u64) } else { Pages::new(n as u64, hist_bytes, max_buffer, 0)? };
    Some(Case {
        hist_bytes,
        hist_pages,
        n,
        nb,
        inc_offsets,
        inc_entries,
        bond_lo,
        bond_hi,
        nbr_offsets,
        reduce_bonds,
        bond_bytes,
        max_binding,
        part_len,
        pages,
    })
}

/// A window of `elem`-byte elements as a chunk binds it: aligned start, within one binding and
/// within the page of its start (or empty: then nothing is read through it).
fn check_window(w: &Range<u64>, elem: u64, max_binding: u64, pages: Pages, what: &str) {
    if w.end <= w.start {
        return;
    }
    assert_eq!(w.start % ALIGN, 0, "{what}: window {w:?} not aligned");
    assert!((w.end - w.start) * elem <= max_binding, "{what}: window {w:?} beyond a binding of {max_binding} B");
    assert!(pages.holds(w.start, w.end), "{what}: window {w:?} across pages {pages:?}");
}

/// Whether `inner` (non-empty) lies in `outer`.
fn inside(inner: Range<u64>, outer: &Range<u64>) -> bool {
    inner.end <= inner.start || (outer.start <= inner.start && inner.end <= outer.end)
}

/// Every read of every chunk of `p` lies in a window the chunk binds (see the module note).
fn check_plan(c: &Case, p: &ChunkPlan) {
    let (m, bb) = (c.max_binding, c.bond_bytes);
    let [bond_pages, inc_pages, nbr_pages] = c.pages;
    // Particle chunks: consecutive, covering 0..n.
    assert_eq!(p.halo_off.len(), c.n + 1);
    assert_eq!((p.halo_off[0], p.halo_off[c.n] as usize), (0, p.halo_src.len()));
    let mut next = 0u32;
    for ch in &p.particles {
        let g = &ch.gpu;
        assert_eq!(g.p_first, next, "particle chunks in order");
        assert!(g.p_end > g.p_first || c.n == 0, "an empty particle chunk");
        next = g.p_end;
        assert_eq!(
            (g.bond_win as u64, g.inc_win as u64, g.nbr_win as u64),
            (ch.bonds.start, ch.inc.start, ch.nbr.start)
        );
        check_window(&ch.bonds, bb, m, bond_pages, "particle chunk bond results");
        check_window(&ch.inc, 4, m, inc_pages, "incidence");
        check_window(&ch.nbr, 4, m, nbr_pages, "neighbour lists");
        let (a, b) = (g.p_first as u64, g.p_end as u64);
        // Its particles' rows of the contact history.
        assert_eq!(g.hist_win as u64, ch.hist.start);
        check_window(&ch.hist, c.hist_bytes, m, c.hist_pages, "contact history");
        assert!(inside(a..b, &ch.hist), "particles {a}..{b}: history rows outside {:?}", ch.hist);
        match c.part_len {
            Some(l) => {
                assert!(b <= l || a >= l, "chunk {a}..{b} crosses the parts at {l}");
                assert_eq!(g.part_win as u64, if a >= l { l } else { 0 });
            }
            None => assert_eq!(g.part_win, 0),
        }
        for q in a as usize..b as usize {
            let inc = c.inc_offsets[q] as u64..c.inc_offsets[q + 1] as u64;
            assert!(inside(inc, &ch.inc), "particle {q}: incidence outside {:?}", ch.inc);
            let list = c.nbr_offsets[q] as u64..c.nbr_offsets[q + 1] as u64;
            assert!(inside(list, &ch.nbr), "particle {q}: list outside {:?}", ch.nbr);
            // Its bonds: in the window, or below it and then its halo entries, in incidence order.
            let below: Vec<u32> = c.bonds_of(q).filter(|&k| k < ch.bonds.start).map(|k| k as u32).collect();
            let halo = &p.halo_src[p.halo_off[q] as usize..p.halo_off[q + 1] as usize];
            assert_eq!(halo, &below[..], "particle {q}: halo entries against its bonds below {:?}", ch.bonds);
            assert!(c.bonds_of(q).all(|k| k < ch.bonds.end), "particle {q}: a bond above {:?}", ch.bonds);
        }
    }
    assert_eq!(next as usize, c.n, "particle chunks cover every particle");
    // The halo is bound whole.
    assert!(p.halo_src.len() as u64 * bb <= m, "{} halo entries beyond a binding", p.halo_src.len());
    // Bond chunks: consecutive over 0..nb; each computes its bonds through its window and
    // copies exactly the halo entries of its bonds.
    let mut sorted_fill = p.halo_fill.clone();
    sorted_fill.sort_unstable();
    assert_eq!(sorted_fill, (0..p.halo_src.len() as u32).collect::<Vec<_>>(), "halo_fill is a permutation");
    let mut next = 0u32;
    let mut filled = 0u32;
    for ch in &p.bonds {
        let g = &ch.gpu;
        assert_eq!(g.b_first, next, "bond chunks in order");
        next = g.b_end;
        assert_eq!(g.bond_win as u64, ch.bonds.start);
        check_window(&ch.bonds, bb, m, bond_pages, "bond chunk");
        assert!(
            inside(g.b_first as u64..g.b_end as u64, &ch.bonds),
            "bonds {}..{} outside {:?}",
            g.b_first,
            g.b_end,
            ch.bonds
        );
        assert_eq!(g.fill_first, filled, "halo fills in order");
        filled = g.fill_end;
        let mut mine: Vec<u32> = p.halo_fill[g.fill_first as usize..g.fill_end as usize].to_vec();
        let mut want: Vec<u32> =
            (0..p.halo_src.len() as u32).filter(|&e| (g.b_first..g.b_end).contains(&p.halo_src[e as usize])).collect();
        mine.sort_unstable();
        want.sort_unstable();
        assert_eq!(mine, want, "bond chunk {}..{}: halo entries it fills", g.b_first, g.b_end);
    }
    assert_eq!((next as usize, filled as usize), (c.nb, p.halo_src.len()), "bond chunks cover every bond and entry");
    // Reduction chunks: consecutive workgroups; each workgroup's bonds in its chunk's window.
    let mut g0 = 0usize;
    for ch in &p.reduce {
        assert_eq!(ch.gpu.group_base as usize, g0);
        assert_eq!(ch.gpu.bond_win as u64, ch.bonds.start);
        check_window(&ch.bonds, bb, m, bond_pages, "reduction chunk");
        for g in g0..g0 + ch.groups as usize {
            assert!(
                inside(c.reduce_bonds[g].clone(), &ch.bonds),
                "workgroup {g}: {:?} outside {:?}",
                c.reduce_bonds[g],
                ch.bonds
            );
        }
        g0 += ch.groups as usize;
    }
    assert_eq!(g0, c.reduce_bonds.len(), "reduction chunks cover every workgroup");
    // Everything within one binding and one buffer: one chunk of each kind, windows at 0 and no
    // halo, so the kernels run unsplit (results bit for bit those of no chunking at all).
    let whole = (c.nb as u64 + ALIGN) * bb <= m
        && c.inc_entries.len() as u64 * 4 <= m
        && c.nbr_offsets[c.n] as u64 * 4 <= m
        && c.pages.iter().all(|p| p.count() == 1)
        && c.n as u64 * c.hist_bytes <= m
        && c.hist_pages.count() == 1
        && c.part_len.is_none();
    if whole {
        assert_eq!((p.particles.len(), p.bonds.len(), p.reduce.len()), (1, 1, 1));
        assert!(p.halo_src.is_empty());
    }
}

#[test]
fn every_read_of_every_chunk_lies_in_a_window_it_binds() {
    let (mut planned, mut refused, mut skipped) = (0, 0, 0);
    let (mut split, mut paged, mut halo, mut parts, mut rows) = (0, 0, 0, 0, 0);
    for c in 0..5000 {
        let Some(case) = case(c) else {
            skipped += 1;
            continue;
        };
        match plan(&case.inputs()) {
            Ok(p) => {
                check_plan(&case, &p);
                planned += 1;
                split += (p.particles.len() > 1 && p.bonds.len() > 1) as usize;
                paged += case.pages.iter().any(|p| p.count() > 1) as usize;
                halo += !p.halo_src.is_empty() as usize;
                parts += case.part_len.is_some() as usize;
                // Particle chunks the history's rows split or page.
                rows += (p.particles.len() > 1
                    && (case.hist_pages.count() > 1 || case.n as u64 * case.hist_bytes > case.max_binding))
                    as usize;
            }
            Err(q) => {
                // Named: a particle of the batch (a halo beyond one binding, or a particle whose
                // own windows do not fit).
                assert!(q < case.n.max(1), "case {c}: refused naming particle {q} of {}", case.n);
                let reads =
                    case.inc_offsets[q + 1] > case.inc_offsets[q] || case.nbr_offsets[q + 1] > case.nbr_offsets[q];
                assert!(reads || case.n == 0, "case {c}: refused naming particle {q}, which reads no bond and no list");
                refused += 1;
            }
        }
    }
    eprintln!(
        "{planned} planned ({split} split, {paged} paged, {halo} with a halo, {parts} in two parts, {rows} with \
         the history's rows split or paged), {refused} refused, {skipped} skipped"
    );
    // The cases must reach what they test: most planned, many split, paged, with a halo.
    assert!(planned >= 4000 && split >= 600 && paged >= 300 && halo >= 350 && parts >= 300 && rows >= 300);
}

#[test]
fn a_particle_whose_own_windows_cannot_fit_is_refused_by_name() {
    // Particle 5 of 40 has a list of 100 slots (400 B) in a binding of 384 B; the others' 4.
    let n = 40;
    let mut nbr_offsets = vec![0u32];
    for q in 0..n {
        nbr_offsets.push(nbr_offsets[q] + if q == 5 { 100 } else { 4 });
    }
    // One reduction workgroup, with no bond.
    let group: Range<u64> = 0..0;
    let c = Case {
        n,
        nb: 0,
        inc_offsets: vec![0; n + 1],
        inc_entries: Vec::new(),
        bond_lo: vec![u32::MAX; n],
        bond_hi: vec![0; n],
        nbr_offsets: nbr_offsets.clone(),
        reduce_bonds: vec![group],
        bond_bytes: 48,
        max_binding: 384,
        part_len: None,
        pages: [Pages::one(0), Pages::one(0), Pages::one(nbr_offsets[n] as u64)],
        hist_bytes: 0,
        hist_pages: Pages::one(n as u64),
    };
    assert_eq!(plan(&c.inputs()), Err(5));
}
