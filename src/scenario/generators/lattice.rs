//! Lattice sites inside a region (MODEL §7): the three lattices, the rows of sites they are
//! enumerated by, and the space-filling-curve order the particles are stored in.
//!
//! A lattice is described by integer coordinates `(I, J, K)` and the scales that turn them into
//! a position, `x = I·sx`, `y = J·sy + y_shift(K)`, `z = K·sz`, with `I ≡ parity(J, K)` modulo
//! `step`. Integer coordinates make mirror-image sites exactly mirrored in floating point (the
//! torus stays symmetric) and give the Morton code without quantising positions.
//!
//! Sites are enumerated row by row (fixed `J`, `K`): the region gives each row's interval(s) of
//! centre positions analytically, widened by one site on each side, and every candidate is then
//! tested with the region's exact predicate. So the work is O(N + rows) instead of the bounding
//! box's volume (a thin torus fills a small part of its box), and whether a site is kept does not
//! depend on the interval arithmetic, only on the predicate.

use super::region::Region;
use crate::grid::morton3;
use glam::DVec3;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Which lattice fills a solid body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LatticeKind {
    /// Face-centred cubic: nearest-neighbour distance D_p, 12 neighbours, packing 0.74.
    #[default]
    Fcc,
    /// Hexagonal close-packed (ABAB layers stacked along the local z axis): 12 neighbours, 0.74.
    Hcp,
    /// Simple cubic: 6 neighbours, packing π/6 ≈ 0.52.
    Sc,
}

impl LatticeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LatticeKind::Fcc => "fcc",
            LatticeKind::Hcp => "hcp",
            LatticeKind::Sc => "sc",
        }
    }

    /// Sites per unit volume for nearest-neighbour distance `dp`.
    pub fn site_density(self, dp: f64) -> f64 {
        match self {
            LatticeKind::Fcc | LatticeKind::Hcp => std::f64::consts::SQRT_2 / (dp * dp * dp),
            LatticeKind::Sc => 1.0 / (dp * dp * dp),
        }
    }

    /// Neighbours of an interior site at distance `dp`.
    pub fn coordination(self) -> u32 {
        match self {
            LatticeKind::Fcc | LatticeKind::Hcp => 12,
            LatticeKind::Sc => 6,
        }
    }

    /// Circumradius of a site's Voronoi cell: every point of space lies within it of some site.
    /// FCC's rhombic dodecahedron and HCP's trapezo-rhombic one reach the octahedral holes at
    /// `dp/√2`; SC's cube reaches its corners at `dp·√3/2`. Bounds the lattice's surface term.
    pub fn voronoi_circumradius(self, dp: f64) -> f64 {
        match self {
            LatticeKind::Fcc | LatticeKind::Hcp => dp * std::f64::consts::FRAC_1_SQRT_2,
            LatticeKind::Sc => dp * 0.75f64.sqrt(),
        }
    }
}

/// A lattice resolved for one particle diameter.
#[derive(Clone, Copy, Debug)]
pub struct Lattice {
    pub kind: LatticeKind,
    pub dp: f64,
    sx: f64,
    sy: f64,
    sz: f64,
    step: i64,
}

impl Lattice {
    pub fn new(kind: LatticeKind, dp: f64) -> Lattice {
        let (sx, sy, sz, step) = match kind {
            // FCC = integer points with an even coordinate sum, scaled so neighbours are dp apart.
            LatticeKind::Fcc => {
                let s = dp * std::f64::consts::FRAC_1_SQRT_2;
                (s, s, s, 2)
            }
            // HCP: triangular layers (x steps of dp/2 with I ≡ J + layer parity), layers
            // dp·√(2/3) apart, B layers shifted by (dp/2, dp/(2√3)).
            LatticeKind::Hcp => (0.5 * dp, 0.75f64.sqrt() * dp, (2.0f64 / 3.0).sqrt() * dp, 2),
            LatticeKind::Sc => (dp, dp, dp, 1),
        };
        Lattice { kind, dp, sx, sy, sz, step }
    }

    fn y_shift(&self, k: i64) -> f64 {
        match self.kind {
            LatticeKind::Hcp if k.rem_euclid(2) == 1 => self.dp / (2.0 * 3f64.sqrt()),
            _ => 0.0,
        }
    }

    fn parity(&self, j: i64, k: i64) -> i64 {
        match self.kind {
            LatticeKind::Fcc => (j + k).rem_euclid(2),
            LatticeKind::Hcp => (j + k.rem_euclid(2)).rem_euclid(2),
            LatticeKind::Sc => 0,
        }
    }

    /// Position of the site with integer coordinates `(i, j, k)`.
    #[inline]
    pub fn position(&self, i: i32, j: i32, k: i32) -> DVec3 {
        DVec3::new(i as f64 * self.sx, j as f64 * self.sy + self.y_shift(k as i64), k as f64 * self.sz)
    }

    /// The rows of candidate sites of a region (each row: its `J`, `K` and up to two ranges of
    /// `I`, widened by one site beyond the analytic interval), layer by layer.
    fn rows(&self, region: &Region) -> Vec<Row> {
        self.layers(region).flat_map(|k| self.layer_rows(region, k)).collect()
    }

    /// The layers `K` whose rows may hold sites.
    fn layers(&self, region: &Region) -> std::ops::RangeInclusive<i64> {
        let zh = region.z_half(self.dp);
        if zh.is_nan() || zh < 0.0 {
            #[allow(clippy::reversed_empty_ranges)]
            return 1..=0;
        }
        let k_max = (zh / self.sz).floor() as i64 + 1;
        -k_max..=k_max
    }

    /// The rows of layer `k`, made one at a time (counting keeps none in memory).
    fn layer_rows<'a>(&'a self, region: &'a Region, k: i64) -> impl Iterator<Item = Row> + 'a {
        let z = k as f64 * self.sz;
        let shift = self.y_shift(k);
        let (j_lo, j_hi) = match region.y_half(self.dp, z) {
            Some(yh) => (((-yh - shift) / self.sy).floor() as i64 - 1, ((yh - shift) / self.sy).ceil() as i64 + 1),
            None => (1, 0),
        };
        (j_lo..=j_hi).map(move |j| {
            let y = j as f64 * self.sy + shift;
            let par = self.parity(j, k);
            // Index I = step·m + par; candidate m from the interval, one more each side.
            let to_m = |lo: f64, hi: f64| -> (i64, i64) {
                let st = self.step as f64;
                (
                    ((lo / self.sx - par as f64) / st).floor() as i64 - 1,
                    ((hi / self.sx - par as f64) / st).ceil() as i64 + 1,
                )
            };
            let (a, b) = region.x_intervals(self.dp, y, z);
            let ra = to_m(a[0], a[1]);
            let (ranges, merged) = match b.map(|b| to_m(b[0], b[1])) {
                // Overlapping candidate ranges merge, so no site is listed twice.
                Some(rb) if rb.0 <= ra.1 + 1 => ([(ra.0, rb.1), (0, -1)], true),
                Some(rb) => ([ra, rb], false),
                None => ([ra, (0, -1)], false),
            };
            Row { j, k, par, ranges, merged }
        })
    }

    /// The kept sites of a row as runs `(m0, len)` of consecutive `m`, in increasing `m`.
    fn row_runs(&self, region: &Region, row: &Row) -> Vec<(i64, u32)> {
        let mut runs: Vec<(i64, u32)> = Vec::new();
        for &(lo, hi) in &row.ranges {
            for m in lo..=hi {
                let i = self.step * m + row.par;
                if region.keeps_site(self.dp, self.position(i as i32, row.j as i32, row.k as i32)) {
                    match runs.last_mut() {
                        Some((m0, len)) if *m0 + *len as i64 == m => *len += 1,
                        _ => runs.push((m, 1)),
                    }
                }
            }
        }
        runs
    }

    /// Number of kept sites (for solving the diameter from a particle count). Each candidate
    /// range is trimmed from its ends with the exact predicate: inside a range the kept sites
    /// are contiguous (a line meets the region in at most two intervals), so this is O(rows).
    /// Merged ranges (a row grazing the torus hole) may have a gap in the middle and are scanned.
    /// Rows are made and counted layer by layer, in parallel over the layers: nothing is kept, so
    /// a thin body spanning millions of rows is counted in constant memory.
    pub fn count(&self, region: &Region) -> u64 {
        let count_row = |row: Row| {
            let keep = |m: i64| {
                let i = self.step * m + row.par;
                region.keeps_site(self.dp, self.position(i as i32, row.j as i32, row.k as i32))
            };
            let mut n = 0u64;
            for &(mut lo, mut hi) in &row.ranges {
                if row.merged {
                    n += (lo..=hi).filter(|&m| keep(m)).count() as u64;
                    continue;
                }
                while lo <= hi && !keep(lo) {
                    lo += 1;
                }
                while hi >= lo && !keep(hi) {
                    hi -= 1;
                }
                n += (hi - lo + 1).max(0) as u64;
            }
            n
        };
        self.layers(region).into_par_iter().map(|k| self.layer_rows(region, k).map(count_row).sum::<u64>()).sum()
    }

    /// Every kept site, sorted along a Morton (Z-order) curve of its integer coordinates, so that
    /// particles near in space are near in memory, and the index that finds a site's particle
    /// from its coordinates. Deterministic for any thread count.
    pub fn sites(&self, region: &Region) -> (Vec<Site>, SiteIndex) {
        let rows = self.rows(region);
        let row_runs: Vec<Vec<(i64, u32)>> = rows.par_iter().map(|row| self.row_runs(region, row)).collect();
        // Row-major numbering of the sites: runs in row order, each run's sites by increasing m.
        let mut runs = Vec::new();
        let mut row_first = Vec::with_capacity(rows.len() + 1);
        let mut total = 0u64;
        for rr in &row_runs {
            row_first.push(runs.len() as u32);
            for &(m0, len) in rr {
                runs.push(Run { m0, len, start: total });
                total += len as u64;
            }
        }
        row_first.push(runs.len() as u32);
        drop(row_runs);
        let mut layers = Vec::new();
        let k_min = rows.first().map_or(0, |r| r.k);
        for (r, row) in rows.iter().enumerate() {
            let slot = (row.k - k_min) as usize;
            if layers.len() <= slot {
                layers.resize(slot + 1, None);
            }
            let entry = layers[slot].get_or_insert((row.j, row.j, r));
            entry.1 = row.j;
        }
        let index =
            SiteIndex { lattice: *self, k_min, layers, row_par: rows.iter().map(|r| r.par).collect(), row_first, runs };
        let mut sites = vec![Site::default(); total as usize];
        // Carve the output into one slice per row, then fill the rows in parallel.
        let mut slices = Vec::with_capacity(rows.len());
        let mut rest: &mut [Site] = &mut sites;
        for (r, row) in rows.iter().enumerate() {
            let run_range = index.row_first[r] as usize..index.row_first[r + 1] as usize;
            let n: usize = index.runs[run_range.clone()].iter().map(|run| run.len as usize).sum();
            let (head, tail) = rest.split_at_mut(n);
            slices.push((row, &index.runs[run_range], head));
            rest = tail;
        }
        slices.into_par_iter().for_each(|(row, runs, out)| {
            let mut k = 0;
            for run in runs {
                for m in run.m0..run.m0 + run.len as i64 {
                    let i = (self.step * m + row.par) as i32;
                    out[k] = Site {
                        key: 0,
                        r: (run.start + (m - run.m0) as u64) as u32,
                        i,
                        j: row.j as i32,
                        k: row.k as i32,
                    };
                    k += 1;
                }
            }
        });
        if sites.is_empty() {
            return (sites, index);
        }
        // Offsets make the coordinates non-negative; 21 bits per axis fill a u64 key. Larger
        // lattices are coarsened (neighbouring sites may then share a key: the stable sort keeps
        // their row order, so the result is still deterministic).
        let (lo, hi) = sites
            .par_iter()
            .fold(
                || ([i32::MAX; 3], [i32::MIN; 3]),
                |(mut lo, mut hi), s| {
                    for (a, v) in [s.i, s.j, s.k].into_iter().enumerate() {
                        lo[a] = lo[a].min(v);
                        hi[a] = hi[a].max(v);
                    }
                    (lo, hi)
                },
            )
            .reduce(
                || ([i32::MAX; 3], [i32::MIN; 3]),
                |(l1, h1), (l2, h2)| {
                    (std::array::from_fn(|a| l1[a].min(l2[a])), std::array::from_fn(|a| h1[a].max(h2[a])))
                },
            );
        let span = (0..3).map(|a| (hi[a] as i64 - lo[a] as i64) as u64).max().unwrap_or(0);
        let bits = 64 - span.leading_zeros();
        let shift = bits.saturating_sub(21);
        sites.par_iter_mut().for_each(|s| {
            let c = [s.i, s.j, s.k];
            let u: [u64; 3] = std::array::from_fn(|a| ((c[a] as i64 - lo[a] as i64) as u64) >> shift);
            s.key = morton3(u[0], u[1], u[2]);
        });
        if shift == 0 {
            // Keys are distinct: the unstable sort's result is unique.
            sites.par_sort_unstable_by_key(|s| s.key);
        } else {
            sites.par_sort_by_key(|s| s.key);
        }
        (sites, index)
    }

    /// Integer offsets from a site to every site within `reach` of it (itself excluded), for a
    /// site in layer `k` (HCP's offsets depend on the layer's parity; FCC's and SC's do not).
    pub fn stencil(&self, k: i32, reach: f64) -> Vec<[i32; 3]> {
        let k = k as i64;
        let (j0, par0) = (0i64, self.parity(0, k));
        let origin = self.position(par0 as i32, j0 as i32, k as i32);
        let ext = |s: f64| (reach / s).ceil() as i64 + 2;
        let (mx, my, mz) = (ext(self.sx), ext(self.sy), ext(self.sz));
        let mut out = Vec::new();
        for dk in -mz..=mz {
            for dj in -my..=my {
                let par = self.parity(j0 + dj, k + dk);
                for di in -mx..=mx {
                    let i = par0 + di;
                    if (i - par).rem_euclid(self.step) != 0 || (di, dj, dk) == (0, 0, 0) {
                        continue;
                    }
                    let p = self.position(i as i32, (j0 + dj) as i32, (k + dk) as i32);
                    if (p - origin).length() <= reach {
                        out.push([di as i32, dj as i32, dk as i32]);
                    }
                }
            }
        }
        out
    }
}

/// A run of consecutive kept sites in a row: `m0 .. m0 + len`, numbered from `start` in
/// row-major order.
#[derive(Clone, Copy, Debug)]
struct Run {
    m0: i64,
    len: u32,
    start: u64,
}

/// Finds a site's row-major number from its integer coordinates in O(1): the layer gives the
/// row, the row its runs (one or two for a torus).
#[derive(Clone, Debug)]
pub struct SiteIndex {
    lattice: Lattice,
    k_min: i64,
    /// Per layer `K − k_min`: the first and last `J` of its rows and the index of its first row.
    layers: Vec<Option<(i64, i64, usize)>>,
    row_par: Vec<i64>,
    /// Runs of row r: `runs[row_first[r]..row_first[r+1]]`.
    row_first: Vec<u32>,
    runs: Vec<Run>,
}

impl SiteIndex {
    /// Row-major number of the kept site `(i, j, k)`, if there is one.
    #[inline]
    pub fn find(&self, i: i32, j: i32, k: i32) -> Option<u32> {
        let slot = usize::try_from(k as i64 - self.k_min).ok()?;
        let (j_lo, j_hi, row0) = (*self.layers.get(slot)?)?;
        let j = j as i64;
        if j < j_lo || j > j_hi {
            return None;
        }
        let row = row0 + (j - j_lo) as usize;
        let d = i as i64 - self.row_par[row];
        if d.rem_euclid(self.lattice.step) != 0 {
            return None;
        }
        let m = d.div_euclid(self.lattice.step);
        self.runs[self.row_first[row] as usize..self.row_first[row + 1] as usize]
            .iter()
            .find(|run| m >= run.m0 && m < run.m0 + run.len as i64)
            .map(|run| (run.start + (m - run.m0) as u64) as u32)
    }
}

/// One row of candidate sites: `J`, `K`, the parity of `I`, and up to two ranges of `m` with
/// `I = step·m + par` (an empty range has `lo > hi`); `merged` when the two intervals of a line
/// through the torus hole came so close that their candidate ranges were joined.
#[derive(Clone, Copy, Debug)]
struct Row {
    j: i64,
    k: i64,
    par: i64,
    ranges: [(i64, i64); 2],
    merged: bool,
}

/// A kept lattice site: its Morton key, row-major number and integer coordinates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Site {
    pub key: u64,
    pub r: u32,
    pub i: i32,
    pub j: i32,
    pub k: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_neighbours_are_dp_apart() {
        for kind in [LatticeKind::Fcc, LatticeKind::Hcp, LatticeKind::Sc] {
            let l = Lattice::new(kind, 0.7);
            let region = Region::block(DVec3::splat(4.0));
            let (sites, index) = l.sites(&region);
            for s in &sites {
                assert_eq!(index.find(s.i, s.j, s.k), Some(s.r));
            }
            assert_eq!(index.find(1_000, 0, 0), None);
            let stencil = l.stencil(0, 0.7 * (1.0 + 1e-9));
            assert_eq!(stencil.len() as u32, kind.coordination(), "{kind:?} stencil");
            let p: Vec<DVec3> = sites.iter().map(|s| l.position(s.i, s.j, s.k)).collect();
            // The site nearest the centre has `coordination` neighbours at dp, none closer.
            let c = p.iter().position(|x| x.length() < 1e-12).expect("a site at the centre");
            let d: Vec<f64> = p.iter().map(|x| (*x - p[c]).length()).filter(|&d| d > 0.0).collect();
            let min = d.iter().copied().fold(f64::INFINITY, f64::min);
            assert!((min - 0.7).abs() < 1e-12, "{kind:?}: nearest {min}");
            let n = d.iter().filter(|&&x| (x - 0.7).abs() < 1e-9).count() as u32;
            assert_eq!(n, kind.coordination(), "{kind:?}");
        }
    }
}
