//! Fragments (MODEL §11): the connected pieces of intact binder a body is broken into, labelled
//! by the smallest particle index (the user's numbering) in each, and what each piece weighs,
//! where it is and how it moves.
//!
//! Why here, on the host, from the break list: the run driver already knows which bonds are
//! broken (every engine reports each break once, in the user's numbering: `breaks.csv`), so the
//! labels are a pure function of the model and that set, whatever engine, precision, thread
//! count, particle order or batch ran it, and a resumed run (its broken set read back from
//! `breaks.csv`) labels as the uninterrupted one. Union–find with union by rank and path halving
//! is `O((n + b) α(n))` time and `9n` bytes for `n` particles and `b` bonds, one pass over the
//! bonds in their order; the label (the component's smallest index) is taken in a last pass in
//! index order, so it does not depend on the order the unions happened in. Device label
//! propagation would need as many sweeps as a fragment is wide and would give the same labels.

use crate::integrator::Kinematics;
use crate::model::{Bond, Particles};
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// Marks an entry not yet set.
const NONE: u32 = u32::MAX;

/// Disjoint sets over `0..n` (union by rank, path halving).
struct Sets {
    parent: Vec<u32>,
    rank: Vec<u8>,
}

impl Sets {
    fn new(n: usize) -> Sets {
        Sets { parent: (0..n as u32).collect(), rank: vec![0; n] }
    }

    #[inline]
    fn find(&mut self, mut a: u32) -> u32 {
        while self.parent[a as usize] != a {
            let up = self.parent[self.parent[a as usize] as usize];
            self.parent[a as usize] = up;
            a = up;
        }
        a
    }

    #[inline]
    fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return;
        }
        let (ka, kb) = (self.rank[ra as usize], self.rank[rb as usize]);
        if ka < kb {
            self.parent[ra as usize] = rb;
        } else {
            self.parent[rb as usize] = ra;
            if ka == kb {
                self.rank[ra as usize] += 1;
            }
        }
    }
}

/// The fragment label of each of `n` particles: the smallest particle index in its connected
/// component of the graph of the bonds not flagged in `broken` (one flag per bond, in the order
/// of `bonds`). A particle without intact bonds is its own label.
pub fn label(n: usize, bonds: &[Bond], broken: &[bool]) -> Vec<u32> {
    assert_eq!(bonds.len(), broken.len(), "one broken flag per bond");
    label_pairs(n, bonds.iter().zip(broken).filter(|(_, x)| !**x).map(|(b, _)| (b.i, b.j)))
}

/// `label` of a model: its intact bonds, and each clump's spheres joined (MODEL §12: a clump is
/// one rigid piece, whatever breaks).
pub fn label_model(model: &crate::model::Model, broken: &[bool]) -> Vec<u32> {
    assert_eq!(model.bonds.len(), broken.len(), "one broken flag per bond");
    let intact = model.bonds.iter().zip(broken).filter(|(_, x)| !**x).map(|(b, _)| (b.i, b.j));
    label_pairs(model.particles.len(), intact.chain(clump_links(&model.clumps)))
}

/// The links that hold each clump's spheres together for `label_pairs`: each to its clump's first.
pub fn clump_links(clumps: &[crate::model::Clump]) -> impl Iterator<Item = (u32, u32)> + '_ {
    clumps.iter().flat_map(|c| (c.members.start + 1..c.members.end).map(move |k| (c.members.start, k)))
}

/// `label` of bonds given as particle index pairs (`pairs`, 8 bytes a bond instead of a
/// `Bond`'s 104: what a run keeps to label at every record) with their `broken` flags.
pub fn label_flagged(n: usize, pairs: &[(u32, u32)], broken: &[bool]) -> Vec<u32> {
    assert_eq!(pairs.len(), broken.len(), "one broken flag per bond");
    label_pairs(n, pairs.iter().zip(broken).filter(|(_, x)| !**x).map(|(p, _)| *p))
}

/// `label` of the graph whose edges are the particle index pairs `intact`.
pub fn label_pairs(n: usize, intact: impl Iterator<Item = (u32, u32)>) -> Vec<u32> {
    let mut sets = Sets::new(n);
    for (i, j) in intact {
        sets.union(i, j);
    }
    // In index order the first particle met of a component is its smallest; its index is kept
    // in the root's slot of `label` (a root's own slot is written only once it is met itself,
    // with the same value, and a non-root's slot is never a root's).
    let mut label = vec![NONE; n];
    for i in 0..n as u32 {
        let r = sets.find(i) as usize;
        if label[r] == NONE {
            label[r] = i;
        }
        label[i as usize] = label[r];
    }
    label
}

/// The figures of one record (`series.csv`): fragments, the largest one's share of the mass, and
/// the single particles (debris).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Fragments, single particles included.
    pub n_fragments: u64,
    /// Mass of the heaviest fragment over the total mass (the first of equal ones by label).
    pub largest_fraction: f64,
    /// Label of that fragment.
    pub largest_label: u32,
    /// Particles of that fragment.
    pub largest_particles: u64,
    /// Particles without an intact bond.
    pub debris: u64,
    /// Their mass over the total mass.
    pub debris_fraction: f64,
}

/// The counts of the labelling `labels` (from `label`) of particles of masses `mass`. Sums run
/// in particle index order, so the figures are a function of the labels and masses alone.
pub fn counts(labels: &[u32], mass: &[f64]) -> Counts {
    assert_eq!(labels.len(), mass.len(), "one label per particle");
    let n = labels.len();
    let mut m = vec![0.0f64; n];
    let mut size = vec![0u32; n];
    let mut total = 0.0;
    for (&l, &mi) in labels.iter().zip(mass) {
        m[l as usize] += mi;
        size[l as usize] += 1;
        total += mi;
    }
    let mut c = Counts::default();
    let mut largest = f64::NEG_INFINITY;
    let mut debris_mass = 0.0;
    for l in 0..n {
        if size[l] == 0 {
            continue;
        }
        c.n_fragments += 1;
        if size[l] == 1 {
            c.debris += 1;
            debris_mass += m[l];
        }
        if m[l] > largest {
            largest = m[l];
            c.largest_label = l as u32;
            c.largest_particles = size[l] as u64;
        }
    }
    if n > 0 {
        c.largest_fraction = largest / total;
        c.debris_fraction = debris_mass / total;
    }
    c
}

/// One fragment of more than one particle (a row of `fragments.csv`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fragment {
    /// The smallest particle index in it.
    pub label: u32,
    pub particles: u64,
    pub mass: f64,
    /// Sum of its spheres' volumes.
    pub volume: f64,
    /// Volume-equivalent diameter, `(6 V/π)^(1/3)`.
    pub diameter: f64,
    /// Centre of mass.
    pub x: DVec3,
    /// Velocity of the centre of mass (momentum over mass).
    pub v: DVec3,
    /// Intact bonds joining its particles.
    pub bonds: u64,
}

/// The volume-equivalent diameter of volume `v`.
pub fn equivalent_diameter(v: f64) -> f64 {
    (6.0 * v / std::f64::consts::PI).cbrt()
}

fn sphere_volume(r: f64) -> f64 {
    4.0 / 3.0 * std::f64::consts::PI * r * r * r
}

/// The cumulative mass distribution of fragment sizes: `fraction[k]` of the total mass lies in
/// fragments whose diameter is at most `diameter[k]` (increasing; the last fraction is 1 up to
/// round-off). Exact at every distinct diameter when there are at most `CUMULATIVE_POINTS` of
/// them; otherwise at `CUMULATIVE_POINTS` diameters spaced evenly in log between the smallest
/// and the largest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cumulative {
    pub diameter: Vec<f64>,
    pub fraction: Vec<f64>,
}

/// Points of `Cumulative` at most.
pub const CUMULATIVE_POINTS: usize = 64;

/// `summary.json`'s `fragments`: the outcome at the final state, and the count at t = 0 it is
/// read against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Fragments, single particles included.
    pub count: u64,
    /// Fragments of the model with every bond intact (several bodies: several).
    pub initial_count: u64,
    /// Fragments of more than one particle (the rows of `fragments.csv`).
    pub pieces: u64,
    pub largest_mass_fraction: f64,
    pub largest_label: u32,
    pub largest_particles: u64,
    /// Single particles.
    pub debris_count: u64,
    pub debris_mass_fraction: f64,
    /// Mass-weighted mean of the fragments' volume-equivalent diameters, single particles
    /// included: `Σ m_f d_f / Σ m_f`.
    pub mean_diameter: f64,
    pub cumulative_mass: Cumulative,
}

/// Everything `fragments.csv` and `summary.json` say of the final state.
pub struct Outcome {
    /// Fragments of more than one particle, by label.
    pub pieces: Vec<Fragment>,
    pub summary: Summary,
}

/// The fragments of `state` (positions and velocities of `particles`, user numbering) with the
/// labelling `labels` of `bonds` and their `broken` flags; `initial_count` the fragments at
/// t = 0.
pub fn outcome(
    labels: &[u32],
    particles: &Particles,
    state: &[Kinematics],
    bonds: &[Bond],
    broken: &[bool],
    initial_count: u64,
) -> Outcome {
    let n = labels.len();
    assert!(particles.len() == n && state.len() == n, "one label and one state per particle");
    let c = counts(labels, &particles.mass);
    // Slot of each multi-particle fragment in `pieces`, by label.
    let mut size = vec![0u32; n];
    for &l in labels {
        size[l as usize] += 1;
    }
    let mut slot = vec![NONE; n];
    let mut pieces = Vec::new();
    for l in 0..n {
        if size[l] > 1 {
            slot[l] = pieces.len() as u32;
            pieces.push(Fragment {
                label: l as u32,
                particles: size[l] as u64,
                mass: 0.0,
                volume: 0.0,
                diameter: 0.0,
                x: DVec3::ZERO,
                v: DVec3::ZERO,
                bonds: 0,
            });
        }
    }
    // (diameter, mass) of every fragment, for the distribution.
    let mut sizes: Vec<(f64, f64)> = Vec::with_capacity(pieces.len() + c.debris as usize);
    for i in 0..n {
        let (m, r) = (particles.mass[i], particles.radius[i]);
        match slot[labels[i] as usize] {
            NONE => sizes.push((2.0 * r, m)),
            s => {
                let f = &mut pieces[s as usize];
                f.mass += m;
                f.volume += sphere_volume(r);
                f.x += m * state[i].x;
                f.v += m * state[i].v;
            }
        }
    }
    for (b, _) in bonds.iter().zip(broken).filter(|(_, x)| !**x) {
        let s = slot[labels[b.i as usize] as usize];
        if s != NONE {
            pieces[s as usize].bonds += 1;
        }
    }
    for f in &mut pieces {
        f.diameter = equivalent_diameter(f.volume);
        f.x /= f.mass;
        f.v /= f.mass;
        sizes.push((f.diameter, f.mass));
    }
    let total: f64 = particles.mass.iter().sum();
    let mean_diameter = sizes.iter().map(|(d, m)| d * m).sum::<f64>() / total;
    let summary = Summary {
        count: c.n_fragments,
        initial_count,
        pieces: pieces.len() as u64,
        largest_mass_fraction: c.largest_fraction,
        largest_label: c.largest_label,
        largest_particles: c.largest_particles,
        debris_count: c.debris,
        debris_mass_fraction: c.debris_fraction,
        mean_diameter,
        cumulative_mass: cumulative(sizes, total),
    };
    Outcome { pieces, summary }
}

/// The cumulative mass distribution of fragments given as (diameter, mass), of total mass `total`.
fn cumulative(mut sizes: Vec<(f64, f64)>, total: f64) -> Cumulative {
    sizes.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    // Distinct diameters with the mass up to each.
    let mut exact = Cumulative::default();
    let mut acc = 0.0;
    for (k, &(d, m)) in sizes.iter().enumerate() {
        acc += m;
        if sizes.get(k + 1).is_none_or(|next| next.0 != d) {
            exact.diameter.push(d);
            exact.fraction.push(acc / total);
        }
    }
    if exact.diameter.len() <= CUMULATIVE_POINTS {
        return exact;
    }
    let (lo, hi) = (exact.diameter[0], *exact.diameter.last().expect("points"));
    let mut out = Cumulative::default();
    let mut k = 0;
    for p in 0..CUMULATIVE_POINTS {
        let d = if p + 1 == CUMULATIVE_POINTS {
            hi
        } else {
            lo * (hi / lo).powf(p as f64 / (CUMULATIVE_POINTS - 1) as f64)
        };
        while k + 1 < exact.diameter.len() && exact.diameter[k + 1] <= d {
            k += 1;
        }
        out.diameter.push(d);
        out.fraction.push(exact.fraction[k]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use glam::DQuat;

    fn bond(i: u32, j: u32) -> Bond {
        Bond { i, j, dhat0: DVec3::X, l0: 1.0, q_i0: DQuat::IDENTITY, q_j0: DQuat::IDENTITY }
    }

    #[test]
    fn labels_are_the_smallest_index_of_each_piece() {
        // 0-3-5 (via 5-3, 3-0), 1-4 (2-4 broken), 2 alone, 6-7 joined twice.
        let bonds = [bond(5, 3), bond(3, 0), bond(4, 1), bond(2, 4), bond(7, 6), bond(6, 7)];
        let broken = [false, false, false, true, false, false];
        assert_eq!(label(8, &bonds, &broken), vec![0, 1, 2, 0, 1, 0, 6, 6]);
        let mass = [1.0, 2.0, 3.0, 1.0, 2.0, 1.0, 0.5, 0.5];
        let c = counts(&label(8, &bonds, &broken), &mass);
        assert_eq!((c.n_fragments, c.debris, c.largest_label, c.largest_particles), (4, 1, 1, 2));
        assert_eq!(c.largest_fraction, 4.0 / 11.0);
        assert_eq!(c.debris_fraction, 3.0 / 11.0);
    }

    #[test]
    fn a_long_chain_joined_in_any_order_is_one_piece() {
        let n = 1000u32;
        // Bonds from the far end backwards, then forwards: the label is 0 either way.
        let mut bonds: Vec<Bond> = (1..n).rev().map(|i| bond(i, i - 1)).collect();
        let broken = vec![false; bonds.len()];
        assert!(label(n as usize, &bonds, &broken).iter().all(|&l| l == 0));
        bonds.reverse();
        assert!(label(n as usize, &bonds, &broken).iter().all(|&l| l == 0));
    }

    #[test]
    fn cumulative_distribution_is_exact_or_log_spaced() {
        let c = cumulative(vec![(2.0, 1.0), (1.0, 1.0), (2.0, 2.0)], 4.0);
        assert_eq!(c, Cumulative { diameter: vec![1.0, 2.0], fraction: vec![0.25, 1.0] });
        let many: Vec<(f64, f64)> = (1..=1000).map(|k| (k as f64, 1.0)).collect();
        let c = cumulative(many, 1000.0);
        assert_eq!(c.diameter.len(), CUMULATIVE_POINTS);
        assert_eq!((c.diameter[0], c.fraction[0]), (1.0, 0.001));
        assert_eq!((*c.diameter.last().unwrap(), *c.fraction.last().unwrap()), (1000.0, 1.0));
        // At d = 10^(3·p/63): the fraction of diameters ≤ d.
        for (d, f) in c.diameter.iter().zip(&c.fraction) {
            assert_eq!(*f, d.floor() / 1000.0, "at {d}");
        }
    }
}
