//! The CPU engine's dissipation (MODEL §10): per particle the dissipative loads of the last
//! evaluation (the ledger books their work after the closing half kick), the contacts'
//! tangential history, the parallel bond pass's ranges where it gives dissipative loads (it
//! evaluates the binder's dashpots, and the bonded pairs' contact dashpots and sliders where they go with
//! the bonds, once per bond), and the loads of one particle (its other contacts' added as the
//! particle pass visits each partner for the conservative contact).
//!
//! History layout: ξ of a bonded pair whose contact goes with its bond (`CpuEngine::
//! bond_contacts`) is kept per bond, seen from the bond's end i (`History::bond_xi`, written by
//! the bond pass). ξ of any other pair (i, j) is kept by both, each at the other's place among
//! its contacts (the list's partners, `NeighbourList::listed`, or with bonded pairs listed
//! `contacts`; `History::off`/`keys` are a copy of that sequence), seen from
//! itself: `contact_dissipation` is odd under the exchange of the ends bit for bit, so the
//! two copies stay exact negatives of each other and each end reads its own (no lookup in the
//! other's list, a cache miss per pair). A saved state holds each pair once, by its lower index;
//! and per particle and wall. Each evaluation reads the history it started from (`xi`, its input)
//! and writes the one it ends with (`next`); the next evaluation swaps them. A saved state holds
//! the input of its last evaluation, so that setting it and evaluating again gives the same
//! loads and the same new history, bit for bit. After a rebuild of the neighbour list, and
//! after a load, the values follow their pairs into the new list by a merge of two sorted
//! partner lists: which list finds a contact, and when, changes nothing.

use super::ParticleAcc;
use super::columns::{BondRef, Column};
use crate::engine::scatter::{BondRanges, Disjoint, EndLoad};
use crate::grid::NeighbourList;
use crate::integrator::Kinematics;
use crate::interactions::{
    ContactLoad, DashpotConsts, Dissipation, Wall, contact_dissipation_with, dashpot_eta0, hertz_constant,
};
use glam::DVec3;

/// A contact's saved history: (i, j or wall index, ξ), i the lower index of a pair.
pub(crate) type HistoryEntry = (u32, u32, DVec3);

/// The tangential history of the contacts (module documentation).
#[derive(Clone, Debug, Default)]
pub(super) struct History {
    off: Vec<u32>,
    keys: Vec<u32>,
    /// The neighbour list's rebuild count `keys` copies; `None` after a load (not a list).
    aligned: Option<u64>,
    xi: Vec<DVec3>,
    next: Vec<DVec3>,
    walls: usize,
    wall_xi: Vec<DVec3>,
    wall_next: Vec<DVec3>,
    /// The next evaluation starts from `next` (false right after a load).
    promote: bool,
    /// Where the bond pass evaluates the bonded pairs' contacts with friction
    /// (`CpuEngine::bond_contacts`): ξ of each bond's pair seen from its end i, the input and
    /// the output of an evaluation as `xi`/`next` (one per bond; empty without pair friction).
    bond_xi: Vec<DVec3>,
    bond_next: Vec<DVec3>,
}

impl History {
    /// `bonds`: the bonds whose pairs keep a history of their own (pair friction, else 0).
    fn new(n: usize, walls: usize, wall_friction: bool, bonds: usize) -> History {
        let nw = if wall_friction { walls * n } else { 0 };
        History {
            off: vec![0; n + 1],
            walls: if wall_friction { walls } else { 0 },
            wall_xi: vec![DVec3::ZERO; nw],
            wall_next: vec![DVec3::ZERO; nw],
            bond_xi: vec![DVec3::ZERO; bonds],
            bond_next: vec![DVec3::ZERO; bonds],
            ..Default::default()
        }
    }

    /// Before an evaluation: takes the last one's output as this one's input, and aligns the
    /// pair values with the current neighbour list.
    /// `pairs`: whether pair contacts keep a history (else only the walls' is kept);
    /// `with_bonds`: whether the bonded pairs' go with their bonds (`bond_xi`), so that the rows
    /// hold the list's partners alone, else every contact of `NeighbourList::contacts`.
    fn prepare(&mut self, nbr: &NeighbourList, pairs: bool, with_bonds: bool) {
        if self.promote {
            std::mem::swap(&mut self.xi, &mut self.next);
            std::mem::swap(&mut self.wall_xi, &mut self.wall_next);
            std::mem::swap(&mut self.bond_xi, &mut self.bond_next);
        }
        self.promote = true;
        if !pairs || self.aligned == Some(nbr.rebuilds()) {
            return;
        }
        let n = self.off.len() - 1;
        let mut off = Vec::with_capacity(n + 1);
        let entries = nbr.entries() + if with_bonds { 0 } else { nbr.bonded_entries() };
        let mut keys = Vec::with_capacity(entries);
        let mut xi = Vec::with_capacity(entries);
        off.push(0u32);
        for i in 0..n {
            let old = &self.keys[self.off[i] as usize..self.off[i + 1] as usize];
            let base = self.off[i] as usize;
            let mut a = 0;
            let partners = if with_bonds { nbr.listed(i) } else { nbr.contacts(i) };
            for j in partners {
                let j = j as u32;
                while a < old.len() && old[a] < j {
                    a += 1;
                }
                let value = if a < old.len() && old[a] == j {
                    self.xi[base + a]
                } else if (j as usize) < i {
                    // After a load only the lower index holds the pair: its ξ, negated.
                    let (lo, hi) = (self.off[j as usize] as usize, self.off[j as usize + 1] as usize);
                    match self.keys[lo..hi].binary_search(&(i as u32)) {
                        Ok(k) => -self.xi[lo + k],
                        Err(_) => DVec3::ZERO,
                    }
                } else {
                    DVec3::ZERO
                };
                keys.push(j);
                xi.push(value);
            }
            off.push(keys.len() as u32);
        }
        self.next = vec![DVec3::ZERO; xi.len()];
        (self.off, self.keys, self.xi) = (off, keys, xi);
        self.aligned = Some(nbr.rebuilds());
    }

    /// The input of the last evaluation: active pairs (lower index first; the rows' and, where
    /// bonded pairs keep theirs with the bonds, the bonds' of `bonds`, so that the saved state
    /// is the same whichever keeps a pair) and wall contacts.
    pub(super) fn saved(&self, bonds: &[BondRef]) -> (Vec<HistoryEntry>, Vec<HistoryEntry>) {
        let mut pairs = Vec::new();
        for i in 0..self.off.len() - 1 {
            for e in self.off[i] as usize..self.off[i + 1] as usize {
                let j = self.keys[e];
                if j as usize > i && self.xi[e] != DVec3::ZERO {
                    pairs.push((i as u32, j, self.xi[e]));
                }
            }
        }
        if !self.bond_xi.is_empty() {
            for (b, &x) in bonds.iter().zip(&self.bond_xi) {
                if x != DVec3::ZERO {
                    pairs.push(if b.i < b.j { (b.i, b.j, x) } else { (b.j, b.i, -x) });
                }
            }
            // Two bonds on one pair evaluate its one contact alike: saved once.
            pairs.sort_by_key(|&(i, j, _)| (i, j));
            pairs.dedup_by_key(|p| (p.0, p.1));
        }
        let walls = if self.walls == 0 {
            Vec::new()
        } else {
            (0..self.wall_xi.len())
                .filter(|&k| self.wall_xi[k] != DVec3::ZERO)
                .map(|k| ((k / self.walls) as u32, (k % self.walls) as u32, self.wall_xi[k]))
                .collect()
        };
        (pairs, walls)
    }

    /// Loads a saved history (pairs sorted by i then j, i < j) as the next evaluation's input;
    /// where bonded pairs keep theirs with the bonds (`bond_xi` in use), each bond of `bonds`
    /// takes its pair's (the rows keep them too until the next `prepare` aligns them with the
    /// list's partners alone).
    pub(super) fn load(&mut self, pairs: &[HistoryEntry], walls: &[HistoryEntry], bonds: &[BondRef]) {
        if !self.bond_xi.is_empty() {
            for (b, x) in bonds.iter().zip(&mut self.bond_xi) {
                let key = (b.i.min(b.j), b.i.max(b.j));
                *x = match pairs.binary_search_by_key(&key, |&(i, j, _)| (i, j)) {
                    Ok(k) if b.i < b.j => pairs[k].2,
                    Ok(k) => -pairs[k].2,
                    Err(_) => DVec3::ZERO,
                };
            }
        }
        let n = self.off.len() - 1;
        self.off = vec![0; n + 1];
        for &(i, _, _) in pairs {
            self.off[i as usize + 1] += 1;
        }
        for i in 0..n {
            self.off[i + 1] += self.off[i];
        }
        self.keys = pairs.iter().map(|p| p.1).collect();
        self.xi = pairs.iter().map(|p| p.2).collect();
        self.next = vec![DVec3::ZERO; pairs.len()];
        self.aligned = None;
        self.wall_xi.iter_mut().for_each(|x| *x = DVec3::ZERO);
        for &(i, w, x) in walls {
            if self.walls > 0 {
                self.wall_xi[i as usize * self.walls + w as usize] = x;
            }
        }
        self.promote = false;
    }

    /// Where bonded pairs keep their history with their bonds: ξ of bond k's pair seen from
    /// its end i, this evaluation's input and where its output goes (the bond pass's; `None`
    /// where they do not).
    pub(super) fn bond_history(&mut self) -> Option<(&[DVec3], Disjoint<'_, DVec3>)> {
        (!self.bond_xi.is_empty()).then(|| (&self.bond_xi[..], Disjoint::new(&mut self.bond_next)))
    }

    fn bytes(&self) -> usize {
        4 * (self.off.capacity() + self.keys.capacity())
            + 24 * (self.xi.capacity() + self.next.capacity() + self.wall_xi.capacity() + self.wall_next.capacity())
            + 24 * (self.bond_xi.capacity() + self.bond_next.capacity())
    }
}

/// What the CPU engine keeps for MODEL §10 (present only when something dissipates).
pub(super) struct DissState {
    pub(super) coef: Dissipation,
    /// Whether the bond pass gives dissipative loads (binder damping, or the dashpots and
    /// sliders of the bonded pairs' contacts it evaluates: `CpuEngine::bond_contacts`), set
    /// before each evaluation.
    pub(super) bond_loads: bool,
    /// Dissipative force and moment on each particle at the last evaluation. Where the bond
    /// pass gives dissipative loads (`bond_loads`) it gathers the bonds' here first (in bond
    /// order, as their conservative loads into `acc`); the particle pass adds the contacts' and
    /// walls'.
    pub(super) loads: Vec<ParticleAcc>,
    /// Where the bond pass gives dissipative loads, the parallel bond pass's ranges: each stored
    /// end holds the bond's
    /// conservative and dissipative loads apart (the engine's own `ranges` stay unused).
    pub(super) ranges: Option<BondRanges<[EndLoad; 2]>>,
    pub(super) history: History,
    /// Work of the dissipative loads so far, with its sign flipped (MODEL §10 ledger).
    pub(super) e_dissipated: f64,
    /// Each particle's velocity and angular velocity the last evaluation's loads were computed
    /// from (`v_{k−½}`, `Ω_{k−½}` of the RRP maps): part of the state, since a saved state
    /// holds `v_k` and the loads at node k cannot be formed again from it.
    pub(super) v_eval: Vec<[DVec3; 2]>,
    /// Whether an evaluation writes `v_eval`: only a state between `advance`s is ever saved,
    /// so the steps of an advance but its last leave it (`CpuEngine::steps`), 48 B per
    /// particle-step not written.
    pub(super) keep_v_eval: bool,
}

impl DissState {
    /// `bonds`: where the bond pass evaluates the bonded pairs' contacts
    /// (`CpuEngine::bond_contacts`), the bonds, whose pairs then keep their history with them.
    pub(super) fn new(coef: Dissipation, n: usize, walls: usize, bonds: usize) -> DissState {
        let bonds = if coef.mu > 0.0 { bonds } else { 0 };
        DissState {
            coef,
            bond_loads: coef.binder(),
            loads: vec![ParticleAcc::default(); n],
            ranges: None,
            history: History::new(n, walls, coef.mu_wall > 0.0, bonds),
            e_dissipated: 0.0,
            v_eval: vec![[DVec3::ZERO; 2]; n],
            keep_v_eval: true,
        }
    }

    /// Bytes held (capacities).
    pub(super) fn bytes(&self) -> usize {
        self.loads.capacity() * size_of::<ParticleAcc>()
            + self.v_eval.capacity() * 48
            + self.ranges.as_ref().map_or(0, BondRanges::bytes)
            + self.history.bytes()
    }

    /// With friction, each particle's largest |ξ| after the last evaluation (its output,
    /// `next`): over its entries for its partners (each pair's two copies are exact negatives,
    /// so each end sees the pair's length), its bonds' (`bonds`, where the bonded pairs keep
    /// theirs with them) and its walls.
    pub(super) fn tangential_displacement(&self, n: usize, bonds: &[BondRef]) -> Option<Vec<f64>> {
        if !self.coef.friction() {
            return None;
        }
        let h = &self.history;
        let mut out = vec![0.0f64; n];
        if self.coef.mu > 0.0 && h.off.len() == n + 1 && h.next.len() == h.keys.len() {
            for (i, o) in out.iter_mut().enumerate() {
                for x in &h.next[h.off[i] as usize..h.off[i + 1] as usize] {
                    *o = o.max(x.length());
                }
            }
            for (b, x) in bonds.iter().zip(&h.bond_next) {
                for end in [b.i, b.j] {
                    let o = &mut out[end as usize];
                    *o = o.max(x.length());
                }
            }
        }
        if h.walls > 0 {
            for (i, o) in out.iter_mut().enumerate() {
                for x in &h.wall_next[i * h.walls..(i + 1) * h.walls] {
                    *o = o.max(x.length());
                }
            }
        }
        Some(out)
    }

    /// Readies the history for an evaluation with the current neighbour list; `with_bonds`:
    /// whether the bond pass evaluates the bonded pairs' contacts (`CpuEngine::bond_contacts`).
    pub(super) fn prepare(&mut self, nbr: &NeighbourList, with_bonds: bool) {
        if self.coef.friction() {
            self.history.prepare(nbr, self.coef.mu > 0.0, with_bonds);
        }
    }

    /// Leaves the bonds' own history (the bonded pairs are listed from now on,
    /// `CpuEngine::list_bonded_pairs`): the rows keep every pair after the next load.
    pub(super) fn drop_bond_history(&mut self) {
        self.history.bond_xi = Vec::new();
        self.history.bond_next = Vec::new();
    }
}

/// One particle's dissipative sums while the particle pass visits its contacts, and what of
/// the particle each contact reads (`DissPass::start`).
pub(super) struct ParticleDiss {
    f: DVec3,
    m: DVec3,
    v: DVec3,
    w: DVec3,
    ri: f64,
    inv_i: f64,
    /// Where its history entries begin.
    base: usize,
    /// (radius sum, inverse mass sum, constants) of the last contact that formed them.
    memo: (f64, f64, DashpotConsts),
}

/// What one particle's dissipative loads are computed from (`DissPass::start`, `pair`,
/// `finish`): the state, the history read, and the arrays each particle writes its own part of.
pub(super) struct DissPass<'a> {
    coef: Dissipation,
    /// The bond pass gave dissipative loads (`DissState::bond_loads`).
    bond_loads: bool,
    p: PassInputs<'a>,
    /// The parallel bond pass's stored ends (where it gives dissipative loads).
    ranges: Option<&'a BondRanges<[EndLoad; 2]>>,
    off: &'a [u32],
    /// The partners the history is aligned with (checked in debug builds).
    keys: &'a [u32],
    xi: &'a [DVec3],
    n_walls: usize,
    wall_xi: &'a [DVec3],
    next: Disjoint<'a, DVec3>,
    wall_next: Disjoint<'a, DVec3>,
    loads: Disjoint<'a, ParticleAcc>,
    /// `None` where this evaluation leaves `v_eval` (`DissState::keep_v_eval`).
    v_eval: Option<Disjoint<'a, [DVec3; 2]>>,
}

/// The constants a `DissPass` reads besides the dissipation's own arrays.
pub(super) struct PassInputs<'a> {
    pub(super) h: f64,
    pub(super) k_contact: f64,
    pub(super) k_wall: f64,
    pub(super) walls: &'a [Wall],
    pub(super) kin: &'a [Kinematics],
    pub(super) radius: &'a Column<f64>,
    pub(super) inv_mass: &'a Column<f64>,
    /// Whether the bond pass ran in parallel (its ranges then hold deferred ends).
    pub(super) parallel: bool,
}

impl DissState {
    /// The particle pass's view of this state.
    pub(super) fn pass<'a>(&'a mut self, p: PassInputs<'a>) -> DissPass<'a> {
        let hist = &mut self.history;
        let ranges = if p.parallel && self.bond_loads { self.ranges.as_ref() } else { None };
        DissPass {
            coef: self.coef,
            bond_loads: self.bond_loads,
            p,
            ranges,
            off: &hist.off,
            keys: &hist.keys,
            xi: &hist.xi,
            n_walls: hist.walls,
            wall_xi: &hist.wall_xi,
            next: Disjoint::new(&mut hist.next),
            wall_next: Disjoint::new(&mut hist.wall_next),
            loads: Disjoint::new(&mut self.loads),
            v_eval: self.keep_v_eval.then(|| Disjoint::new(&mut self.v_eval)),
        }
    }
}

impl DissPass<'_> {
    /// Particle i's bond ends that the parallel bond pass stored (conservative and dissipative
    /// loads, in bond order), to be added after those its range added.
    #[inline]
    pub(super) fn deferred(&self, i: usize) -> &[[EndLoad; 2]] {
        self.ranges.map_or(&[][..], |r| r.deferred(i))
    }

    /// Starts particle i's dissipative sums: its bonds' loads, which the bond pass gathered
    /// (those of its range, then the stored ones, in bond order). Then `pair` for each of its
    /// contacts in order (`NeighbourList::contacts`; the particle pass visits them once for both
    /// laws), then `finish`. Call once per particle per evaluation, after the bond pass, with
    /// i's contacts in the neighbour list the history was prepared with.
    #[inline(always)]
    pub(super) fn start(&self, i: usize) -> ParticleDiss {
        let k = &self.p.kin[i];
        let (mut f, mut m) = (DVec3::ZERO, DVec3::ZERO);
        if self.bond_loads {
            // SAFETY: particle i's own entry (written by `finish`).
            let loads = unsafe { self.loads.get(i) };
            (f, m) = (loads.force, loads.moment);
            for &[_, (df, dm)] in self.deferred(i) {
                f += df;
                m += dm;
            }
        }
        ParticleDiss {
            f,
            m,
            v: k.v,
            w: k.w,
            ri: self.p.radius.get(i),
            inv_i: self.p.inv_mass.get(i),
            base: self.off.get(i).map_or(0, |&o| o as usize),
            memo: (f64::NAN, f64::NAN, DashpotConsts { k_h: 0.0, eta0: 0.0 }),
        }
    }

    /// Adds the contact of particle i (`start`) with its `a`-th contact `j` (in the order of
    /// `NeighbourList::contacts`) at `d = x_i − x_j`
    /// onto `p`, and writes its new history. A run of partners with the same radius sum and
    /// inverse mass (all of them in a monodisperse packing) shares the pair constants, formed
    /// once for the run: the same values, so the same bits, without a division and three
    /// square roots per contact.
    #[inline(always)]
    pub(super) fn pair(&self, p: &mut ParticleDiss, a: usize, j: usize, d: DVec3) {
        let c = &self.coef;
        if !c.pairs() {
            return;
        }
        let friction = c.mu > 0.0;
        let e = p.base + a;
        debug_assert!(!friction || self.keys.get(e) == Some(&(j as u32)), "history misaligned at {e}: partner {j}");
        let rj = self.p.radius.get(j);
        let rs = p.ri + rj;
        let l2 = d.length_squared();
        let inv = p.inv_i + self.p.inv_mass.get(j);
        let mut xi_new = DVec3::ZERO;
        if l2 < rs * rs && l2 > 0.0 && inv > 0.0 {
            let l = l2.sqrt();
            let s = rs - l;
            if s > 0.0 {
                // NaN equals nothing: the first contact forms the constants.
                if p.memo.0 != rs || p.memo.1 != inv {
                    let k_h = hertz_constant(self.p.k_contact, rs);
                    p.memo = (rs, inv, DashpotConsts { k_h, eta0: dashpot_eta0(c.beta, 1.0 / inv, k_h) });
                }
                let (k_h, ri) = (p.memo.2.k_h, p.ri);
                let kj = &self.p.kin[j];
                // ξ of the pair seen from i: i's own copy (module note).
                let xi = if friction { self.xi[e] } else { DVec3::ZERO };
                let o = contact_dissipation_with(
                    d / l,
                    s,
                    &p.memo.2,
                    || (k_h * s * s.sqrt(), l * ri / rs, l * rj / rs),
                    p.v - kj.v,
                    p.w,
                    kj.w,
                    xi,
                    self.p.h,
                    c.mu,
                    c.stiffness_ratio,
                );
                p.f += o.f_i;
                p.m += o.m_i;
                xi_new = o.xi;
            }
        }
        if friction {
            // SAFETY: entry e lies in particle i's range of the list; only i writes it.
            *unsafe { self.next.get(e) } = xi_new;
        }
    }

    /// Ends particle i's sums (`start`, `pair`): adds its walls in wall order, writes its
    /// loads and its walls' history; returns its dissipative force and moment and the walls'
    /// part of the force.
    pub(super) fn finish(&self, i: usize, p: ParticleDiss) -> (DVec3, DVec3, DVec3) {
        let c = &self.coef;
        let k = &self.p.kin[i];
        let (ri, inv_i) = (p.ri, p.inv_i);
        let (mut f, mut m, mut f_wall) = (p.f, p.m, DVec3::ZERO);
        if c.walls() && inv_i > 0.0 {
            for (w, wall) in self.p.walls.iter().enumerate() {
                let gap = (k.x - wall.point).dot(wall.normal);
                let s = ri - gap;
                let slot = i * self.n_walls + w;
                let mut xi_new = DVec3::ZERO;
                if 1.0 - gap / ri > 0.0 && s > 0.0 {
                    let xi = if self.n_walls > 0 { self.wall_xi[slot] } else { DVec3::ZERO };
                    let o = self.wall_contact(k, wall.normal, ri, inv_i, gap, s, xi);
                    f += o.f_i;
                    m += o.m_i;
                    f_wall += o.f_i;
                    xi_new = o.xi;
                }
                if self.n_walls > 0 {
                    // SAFETY: slot i·walls + w belongs to particle i alone.
                    *unsafe { self.wall_next.get(slot) } = xi_new;
                }
            }
        }
        // SAFETY: particle i's own entries.
        *unsafe { self.loads.get(i) } = ParticleAcc { force: f, moment: m };
        if let Some(v) = &self.v_eval {
            // SAFETY: particle i's own entry.
            *unsafe { v.get(i) } = [k.v, k.w];
        }
        (f, m, f_wall)
    }

    /// The dissipative loads of particle `k`'s contact with a wall at `gap`, overlap `s`.
    /// Not inlined: its Hertz and dashpot constants depend on the particle alone, and inlined
    /// the compiler formed them (two divisions, two square roots) for every particle before the
    /// wall loop, touching or not — a fifth of the damped rings' particle pass.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn wall_contact(
        &self,
        k: &Kinematics,
        normal: DVec3,
        ri: f64,
        inv_i: f64,
        gap: f64,
        s: f64,
        xi: DVec3,
    ) -> ContactLoad {
        let c = &self.coef;
        let k_h = hertz_constant(self.p.k_wall, ri);
        contact_dissipation_with(
            normal,
            s,
            &DashpotConsts { k_h, eta0: dashpot_eta0(c.beta_wall, 1.0 / inv_i, k_h) },
            || (k_h * s * s.sqrt(), gap, 0.0),
            k.v,
            k.w,
            DVec3::ZERO,
            xi,
            self.p.h,
            c.mu_wall,
            c.stiffness_ratio,
        )
    }
}
