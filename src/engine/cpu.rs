//! The CPU reference engine: f64, parallel over bonds and particles with rayon, deterministic.
//!
//! Per step: each bond's force and moments are added into its two ends, every particle's in
//! bond order; each particle then adds its contacts (found in the hashed grid, visited in a
//! fixed order), walls and fields. Every output element is written by exactly one task and
//! every sum runs in a fixed order, so results do not depend on the number of threads.
//! Energies are not stored per item: the last evaluation of an `advance` folds them in index
//! order, the particles' block by block into the same sequential sums, the bonds' as sums over
//! blocks of `ENERGY_BLOCK` bonds (each in bond order) added in block order.
//!
//! On one thread (and for small systems) the bond pass adds each bond into its ends as it goes.
//! In parallel it runs over contiguous ranges of bonds (`scatter::BondRanges`): a range adds
//! into the particles whose first bond it holds and stores the ends of the others, which the
//! particle pass adds after: the same additions in the same order, without storing every
//! bond's result (72 B per bond). The ranges are cut at the first parallel evaluation, and
//! again when the pool's thread count changes (same results, fewer idle threads). The
//! closing half kick of a step shares a pass with the next step's first part, and that pass
//! goes by blocks so that the rotation updates' square roots pipeline.

use super::scatter::{BondRanges, ENERGY_BLOCK};
use super::{Engine, EngineInfo, EngineState, Precision, Watch, wrong_state_kind};
use crate::diagnostics::Diagnostics;
use crate::error::EngineError;
use crate::grid::{NeighbourList, PAR_MIN, SKIN_FACTOR};
use crate::guard::EnergyAt;
use crate::impact::WallAt;
use crate::integrator::{self, Integrator, Kinematics};
use crate::interactions::BondOut;
use crate::interactions::rupture::{BOUND_SLACK_F64, bond_breaks};
use crate::interactions::{BreakEvent, contact, gravity, pendulum, wall};
use crate::model::{Model, Params, bond_terms_ref, bond_terms_rel};
use crate::rrp;
use glam::{DQuat, DVec3};
use rayon::prelude::*;

/// Whether a loop over `n` items runs on the calling thread: small loops, and every loop when
/// the pool has one thread (rayon's splitting and bookkeeping then only cost time).
#[inline]
fn serial(n: usize) -> bool {
    n < PAR_MIN || rayon::current_num_threads() == 1
}

/// Whether the bond pass of `n_bonds` bonds runs in parallel on the current pool (and so holds
/// `BondRanges`).
pub(crate) fn parallel_bonds(n_bonds: usize) -> bool {
    !serial(n_bonds)
}

/// The lowest index in `0..n` for which `pred` holds.
fn first_index(n: usize, pred: impl Fn(usize) -> bool + Sync + Send) -> Option<usize> {
    if serial(n) {
        (0..n).find(|&i| pred(i))
    } else {
        (0..n).into_par_iter().with_min_len(PAR_MIN / 4).find_first(|&i| pred(i))
    }
}

/// Items per block when a pass also folds per-item values in index order: each block is
/// computed in parallel into a small buffer, then folded sequentially, so the fold is the same
/// sequential sum whatever the schedule, without a per-item array.
const FOLD_BLOCK: usize = 1 << 14;

/// Runs `f(i, &mut a[i])` for every index (in parallel for large slices). With `fold`, the
/// values `f` returns are passed to it in index order. Each item is written by one call only,
/// so nothing depends on the schedule.
fn run_pass<A: Send, E: Copy + Default + Send + Sync>(
    a: &mut [A],
    fold: Option<&mut dyn FnMut(E)>,
    f: impl Fn(usize, &mut A) -> E + Sync + Send,
) {
    let Some(fold) = fold else {
        if serial(a.len()) {
            a.iter_mut().enumerate().for_each(|(i, x)| {
                f(i, x);
            });
        } else {
            a.par_iter_mut().with_min_len(PAR_MIN / 4).enumerate().for_each(|(i, x)| {
                f(i, x);
            });
        }
        return;
    };
    let mut buf = vec![E::default(); FOLD_BLOCK.min(a.len())];
    for (blk, ca) in a.chunks_mut(FOLD_BLOCK).enumerate() {
        let base = blk * FOLD_BLOCK;
        let out = &mut buf[..ca.len()];
        if serial(ca.len()) {
            for (k, (x, o)) in ca.iter_mut().zip(out.iter_mut()).enumerate() {
                *o = f(base + k, x);
            }
        } else {
            ca.par_iter_mut().zip(out.par_iter_mut()).with_min_len(PAR_MIN / 4).enumerate().for_each(|(k, (x, o))| {
                *o = f(base + k, x);
            });
        }
        out.iter().for_each(|&e| fold(e));
    }
}

/// Steps between checks of the particle order (`Engine::order_check_interval`). A check reads
/// the positions and sorts them along a Morton curve: about half a step's time at one thread
/// (45 ms against a 67 ms step at 2.6·10⁵ spheres, docs/BENCHMARKS.md), so under 0.1 % of the
/// run; a gas scatters its order by 0.13 in 1000 steps.
pub(crate) const ORDER_CHECK_INTERVAL: u64 = 1000;

/// Particle-steps between the run driver's stops when nothing else stops it
/// (`Engine::guard_interval`): about a second of one thread's work.
const GUARD_PARTICLE_STEPS: u64 = 10_000_000;

/// Particles per block of the integration pass (its stage buffers live on the stack).
const INTEGRATE_BLOCK: usize = 64;

/// Exact equality (bit patterns), so that a value stored once is the value every item had.
trait SameBits {
    fn same_bits(&self, other: &Self) -> bool;
}

impl SameBits for f64 {
    fn same_bits(&self, other: &Self) -> bool {
        self.to_bits() == other.to_bits()
    }
}

impl SameBits for bool {
    fn same_bits(&self, other: &Self) -> bool {
        self == other
    }
}

impl SameBits for DQuat {
    fn same_bits(&self, other: &Self) -> bool {
        self.to_array().iter().zip(other.to_array()).all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

/// A per-particle constant, stored once when every particle has the same bits (the common
/// case: uniform spheres, identity reference attitudes).
#[derive(Clone, Debug)]
enum Column<T> {
    Uniform(T),
    Each(Vec<T>),
}

impl<T: Copy + SameBits + Send + Sync> Column<T> {
    fn new(values: &[T], fallback: T) -> Column<T> {
        let first = values.first().copied().unwrap_or(fallback);
        let uniform = if values.len() < PAR_MIN {
            values.iter().all(|v| v.same_bits(&first))
        } else {
            values.par_iter().all(|v| v.same_bits(&first))
        };
        if uniform { Column::Uniform(first) } else { Column::Each(values.to_vec()) }
    }

    #[inline(always)]
    fn get(&self, i: usize) -> T {
        match self {
            Column::Uniform(v) => *v,
            Column::Each(v) => v[i],
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Column::Uniform(_) => 0,
            Column::Each(v) => v.capacity() * size_of::<T>(),
        }
    }
}

/// The reference attitudes of the bonds' ends: per particle when the bonds agree on each
/// particle's (`Model::reference_attitudes`: always for a model built from its initial state,
/// and for a checkpoint's), per bond otherwise.
#[derive(Clone, Debug)]
enum RefAttitudes {
    Particle(Column<DQuat>),
    Bond(Vec<[DQuat; 2]>),
}

impl RefAttitudes {
    fn new(model: &Model) -> RefAttitudes {
        match model.reference_attitudes() {
            Some(q) => RefAttitudes::Particle(Column::new(&q, DQuat::IDENTITY)),
            None => RefAttitudes::Bond(model.bonds.par_iter().map(|b| [b.q_i0, b.q_j0]).collect()),
        }
    }

    /// Whether every reference attitude is exactly the identity (then `q q0⁻¹` is `q` up to the
    /// sign of zero components, which no result depends on: bond results only enter sums that
    /// start at +0, squares, lengths, and `atan2` of a length).
    fn is_identity(&self) -> bool {
        matches!(self, RefAttitudes::Particle(Column::Uniform(q)) if q.same_bits(&DQuat::IDENTITY))
    }

    #[inline(always)]
    fn get(&self, k: usize, b: &BondRef) -> (DQuat, DQuat) {
        match self {
            RefAttitudes::Particle(c) => (c.get(b.i as usize), c.get(b.j as usize)),
            RefAttitudes::Bond(v) => (v[k][0], v[k][1]),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            RefAttitudes::Particle(c) => c.bytes(),
            RefAttitudes::Bond(v) => v.capacity() * size_of::<[DQuat; 2]>(),
        }
    }
}

/// A bond's ends and reference direction and length (its reference attitudes are in
/// `RefAttitudes`): 40 bytes.
#[derive(Clone, Copy, Debug)]
struct BondRef {
    i: u32,
    j: u32,
    dhat0: DVec3,
    l0: f64,
}

/// Force and spatial moment on a particle from one force evaluation.
#[derive(Clone, Copy, Debug, Default)]
struct ParticleAcc {
    force: DVec3,
    moment: DVec3,
}

/// Bond state byte: intact, broken, or broken in this evaluation by channel `s - BROKE_NOW`.
const INTACT: u8 = 0;
const BROKEN: u8 = 1;
const BROKE_NOW: u8 = 2;

/// Sums over particles and bonds of one evaluation, folded in index order (the same sequential
/// sums as over stored per-item values).
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    u_bend: f64,
    u_axial: f64,
    u_shear: f64,
    u_contact: f64,
    u_wall: f64,
    u_gravity: f64,
    f_wall: DVec3,
}

/// Kinetic sums of one block of particles at a closed step, for the watch (`Engine::set_watch`):
/// each block in particle order, the blocks folded in block order, so that the sums do not
/// depend on the thread count.
#[derive(Clone, Copy, Debug, Default)]
struct KinSums {
    e_trans: f64,
    e_rot: f64,
    p: DVec3,
}

impl KinSums {
    fn add(&mut self, o: &KinSums) {
        self.e_trans += o.e_trans;
        self.e_rot += o.e_rot;
        self.p += o.p;
    }
}

pub struct CpuEngine {
    integrator: Integrator,
    dt: f64,
    params: Params,
    kin: Vec<Kinematics>,
    mass: Column<f64>,
    inertia: Column<f64>,
    /// `inverse(mass, fixed)` and `inverse(inertia, fixed)`, divided once instead of per step.
    inv_mass: Column<f64>,
    inv_inertia: Column<f64>,
    radius: Column<f64>,
    fixed: Column<bool>,
    bonds: Vec<BondRef>,
    ref_q: RefAttitudes,
    /// The parallel bond pass's ranges (cut at the first parallel evaluation).
    ranges: Option<BondRanges>,
    bond_state: Vec<u8>,
    /// Per-bond scale of the rupture thresholds (Weibull; 1 without).
    bond_scale: Column<f64>,
    acc: Vec<ParticleAcc>,
    /// `acc` was zeroed by the integration pass (the serial evaluation adds into it).
    acc_zeroed: bool,
    /// Energies and wall force of the last evaluation that computed them.
    sums: Sums,
    total_mass: f64,
    e_released: f64,
    n_broken: u64,
    /// Breaks not yet taken by `take_breaks`.
    breaks: Vec<BreakEvent>,
    neighbours: NeighbourList,
    step: u64,
    diag: Diagnostics,
    /// State at the start of the last `advance`, or after a failure the last good state it
    /// returned to (for `rollback`).
    saved: Saved,
    /// The run's watch (`Engine::set_watch`), updated at every step once set.
    watch: Option<Watch>,
    /// Per-block kinetic sums of the integration pass (reused buffer).
    kin_blocks: Vec<(bool, KinSums)>,
}

/// `1/m` for a free particle, 0 for a fixed one.
#[inline(always)]
fn inverse(m: f64, fixed: bool) -> f64 {
    if fixed { 0.0 } else { 1.0 / m }
}

impl CpuEngine {
    /// Builds the engine and evaluates the forces and diagnostics of the initial state.
    pub fn new(model: &Model, integrator: Integrator, dt: f64) -> Result<CpuEngine, EngineError> {
        let p = &model.particles;
        let n = p.len();
        let kin = (0..n).into_par_iter().map(|i| Kinematics { x: p.x[i], v: p.v[i], q: p.q[i], w: p.w[i] }).collect();
        let r_max = model.max_radius();
        let nb = model.bonds.len();
        let mut e = CpuEngine {
            integrator,
            dt,
            params: model.params.clone(),
            kin,
            mass: Column::new(&p.mass, 1.0),
            inertia: Column::new(&p.inertia, 1.0),
            inv_mass: Column::new(&(0..n).map(|i| inverse(p.mass[i], p.fixed[i])).collect::<Vec<_>>(), 1.0),
            inv_inertia: Column::new(&(0..n).map(|i| inverse(p.inertia[i], p.fixed[i])).collect::<Vec<_>>(), 1.0),
            radius: Column::new(&p.radius, 0.0),
            fixed: Column::new(&p.fixed, false),
            bonds: model.bonds.par_iter().map(|b| BondRef { i: b.i, j: b.j, dhat0: b.dhat0, l0: b.l0 }).collect(),
            ref_q: RefAttitudes::new(model),
            ranges: None,
            bond_state: vec![INTACT; nb],
            bond_scale: model.params.rupture.map_or(Column::Uniform(1.0), |_| Column::new(&model.bond_scales(), 1.0)),
            acc: vec![ParticleAcc::default(); n],
            acc_zeroed: false,
            sums: Sums::default(),
            total_mass: p.mass.iter().sum(),
            e_released: 0.0,
            n_broken: 0,
            breaks: Vec::new(),
            neighbours: NeighbourList::new(n, r_max, (SKIN_FACTOR * r_max).max(f64::MIN_POSITIVE)),
            step: 0,
            diag: Diagnostics::default(),
            saved: Saved::default(),
            watch: None,
            kin_blocks: Vec::new(),
        };
        e.evaluate(true, None)?;
        e.diag = e.sum_diagnostics();
        Ok(e)
    }

    /// Bytes held by the engine's arrays (capacities), by part: what it costs per particle and
    /// per bond.
    pub fn memory(&self) -> Vec<(&'static str, usize)> {
        let cap = |len: usize, size: usize| len * size;
        vec![
            ("kinematics", cap(self.kin.capacity(), size_of::<Kinematics>())),
            ("saved kinematics (rollback)", cap(self.saved.kin.capacity(), size_of::<Kinematics>())),
            ("forces", cap(self.acc.capacity(), size_of::<ParticleAcc>())),
            (
                "particle constants",
                self.mass.bytes()
                    + self.inertia.bytes()
                    + self.inv_mass.bytes()
                    + self.inv_inertia.bytes()
                    + self.radius.bytes()
                    + self.fixed.bytes(),
            ),
            ("bond reference data", cap(self.bonds.capacity(), size_of::<BondRef>()) + self.ref_q.bytes()),
            ("bond states", self.bond_state.capacity() + self.saved.broken.capacity() + self.bond_scale.bytes()),
            ("bond ranges", self.ranges.as_ref().map_or(0, BondRanges::bytes)),
            ("neighbour list and grid", self.neighbours.bytes()),
        ]
    }

    /// Force and spatial moment on every particle at the current state (for tests and tools).
    pub fn forces(&self) -> Vec<(DVec3, DVec3)> {
        self.acc.iter().map(|a| (a.force, a.moment)).collect()
    }

    /// Diagnostics of the current state without `&mut` (for tests and tools).
    pub fn clone_diagnostics(&self) -> Diagnostics {
        self.diag
    }

    /// Entries of the contact neighbour list (candidate partners, each pair counted from both
    /// ends).
    pub fn neighbour_entries(&self) -> usize {
        self.neighbours.entries()
    }

    /// How many times the contact neighbour list was rebuilt.
    pub fn neighbour_rebuilds(&self) -> u64 {
        self.neighbours.rebuilds()
    }

    fn time(&self) -> f64 {
        self.step as f64 * self.dt
    }

    /// Forces and moments at the current state; with `energies`, also the energies and wall
    /// force summed into `sums` (needed at the end of an `advance` only). `moved`: whether some
    /// particle moved far enough to rebuild the neighbour list, when the caller knows.
    ///
    /// The bond pass adds each bond's result into its two ends' sums in bond order: directly on
    /// one thread (or for small systems), by ranges in parallel (`BondRanges`) otherwise. A
    /// broken bond adds nothing directly and +0 through a stored end, which changes no sum that
    /// starts at +0. The bond energies are summed per `ENERGY_BLOCK` of bonds on the way (a
    /// range is whole blocks), and the block sums added in order when asked for.
    fn evaluate(&mut self, energies: bool, moved: Option<bool>) -> Result<(), EngineError> {
        let (nb, n) = (self.bonds.len(), self.kin.len());
        let parallel = parallel_bonds(nb);
        if parallel && !self.ranges.as_ref().is_some_and(BondRanges::fits_pool) {
            let bonds = &self.bonds;
            self.ranges = Some(BondRanges::new(n, nb, |k| (bonds[k].i, bonds[k].j)));
        }
        let step = self.step;
        let t = self.time();
        let kin = &self.kin;
        let radius = &self.radius;
        let placed = match moved {
            Some(m) => self.neighbours.update_moved(m, |i| kin[i].x, |i| radius.get(i)),
            None => self.neighbours.update_with(|i| kin[i].x, |i| radius.get(i)),
        };
        placed.map_err(|i| {
            let x = kin[i].x;
            if x.is_finite() {
                EngineError::OutOfRange { particle: i, step, position: format!("{x}") }
            } else {
                EngineError::NonFinite { particle: i, step, t, what: format!("position {x}") }
            }
        })?;
        let prm = &self.params;
        let (bonds, ref_q) = (&self.bonds, &self.ref_q);
        let scale = &self.bond_scale;
        let identity = ref_q.is_identity();
        // The result of intact bond `k`, or `None` when it is (or has just been) broken.
        let bond_eval = |k: usize, state: &mut u8| -> Option<BondOut> {
            if *state != INTACT {
                *state = BROKEN;
                return None;
            }
            let b = &bonds[k];
            let (ki, kj) = (&kin[b.i as usize], &kin[b.j as usize]);
            let (dq_i, dq_j) = if identity {
                (ki.q, kj.q)
            } else {
                let (q_i0, q_j0) = ref_q.get(k, b);
                (ki.q * q_i0.conjugate(), kj.q * q_j0.conjugate())
            };
            let o = bond_terms_rel(b.dhat0, b.l0, dq_i, dq_j, ki.x, kj.x, prm);
            if let Some(r) = &prm.rupture {
                let sum = r.rule == crate::interactions::RuptureRule::Sum;
                let d = ki.x - kj.x;
                if let Some(mode) = bond_breaks(
                    prm.shear,
                    d,
                    b.l0,
                    b.dhat0,
                    dq_i,
                    dq_j,
                    r.inv_thresholds,
                    scale.get(k),
                    sum,
                    BOUND_SLACK_F64,
                ) {
                    // Broken from this evaluation on: it exerts nothing from F_k on (MODEL §6).
                    *state = BROKE_NOW + mode as u8;
                    return None;
                }
            }
            Some(o)
        };
        let mut sums = Sums::default();
        let acc = &mut self.acc;
        if !std::mem::take(&mut self.acc_zeroed) {
            acc.fill(ParticleAcc::default());
        }
        // Bond energies: sums of blocks of ENERGY_BLOCK bonds in bond order, in block order.
        let mut add_energies = |u: &[f64; 3]| {
            sums.u_bend += u[0];
            sums.u_axial += u[1];
            sums.u_shear += u[2];
        };
        let add = |a: &mut ParticleAcc, &(f, m): &(DVec3, DVec3)| {
            a.force += f;
            a.moment += m;
        };
        // What bond `k` puts on its ends i and j, and its energies; `None` when broken.
        let loads = |k: usize, state: &mut u8| {
            bond_eval(k, state).map(|o| ([(o.f_i, o.m_i), (-o.f_i, o.m_j)], [o.u_bend, o.u_axial, o.u_shear]))
        };
        if let (true, Some(plan)) = (parallel, &mut self.ranges) {
            plan.pass(acc, &mut self.bond_state, |k| (bonds[k].i, bonds[k].j), loads, add);
            if energies {
                plan.block_energies().iter().for_each(add_energies);
            }
        } else {
            for (first, states) in (0..nb).step_by(ENERGY_BLOCK).zip(self.bond_state.chunks_mut(ENERGY_BLOCK)) {
                let mut u = [0.0; 3];
                for (l, state) in states.iter_mut().enumerate() {
                    let k = first + l;
                    let Some(([load_i, load_j], e)) = loads(k, state) else { continue };
                    let b = &bonds[k];
                    add(&mut acc[b.i as usize], &load_i);
                    add(&mut acc[b.j as usize], &load_j);
                    u[0] += e[0];
                    u[1] += e[1];
                    u[2] += e[2];
                }
                if energies {
                    add_energies(&u);
                }
            }
        }
        if self.params.rupture.is_some() {
            self.collect_breaks(t);
        }
        let (kin, prm) = (&self.kin, &self.params);
        let deferred = if parallel { self.ranges.as_ref() } else { None };
        let (radius, mass, nbr) = (&self.radius, &self.mass, &self.neighbours);
        let mut fold_particle = |u: [f64; 6]| {
            sums.u_contact += u[0];
            sums.u_wall += u[1];
            sums.u_gravity += u[2];
            sums.f_wall += DVec3::new(u[3], u[4], u[5]);
        };
        run_pass(
            &mut self.acc,
            if energies { Some(&mut fold_particle as &mut dyn FnMut([f64; 6])) } else { None },
            |i, acc| {
                // The bond ends of earlier ranges are in `acc`; the later ones follow in order.
                let (mut fi, mut mi) = (acc.force, acc.moment);
                for &(f, m) in deferred.map_or(&[][..], |d| d.deferred(i)) {
                    fi += f;
                    mi += m;
                }
                let xi = kin[i].x;
                let ri = radius.get(i);
                let mut u_contact = 0.0;
                for &j in nbr.partners(i) {
                    let j = j as usize;
                    let c = contact(xi - kin[j].x, ri + radius.get(j), prm.k_contact);
                    fi += c.force;
                    if j > i {
                        u_contact += c.energy;
                    }
                }
                let mut u_wall = 0.0;
                let mut f_wall = DVec3::ZERO;
                for w in &prm.walls {
                    let c = wall(xi, ri, w.point, w.normal, prm.k_wall);
                    fi += c.force;
                    f_wall += c.force;
                    u_wall += c.energy;
                }
                let mut u_grav = 0.0;
                if prm.gravity != DVec3::ZERO {
                    let g = gravity(xi, mass.get(i), prm.gravity);
                    fi += g.force;
                    u_grav += g.energy;
                }
                if let Some(pd) = prm.pendulum {
                    let g = pendulum(kin[i].q, mass.get(i), pd.g, pd.rho0, pd.up);
                    mi += g.moment;
                    u_grav += g.energy;
                }
                *acc = ParticleAcc { force: fi, moment: mi };
                [u_contact, u_wall, u_grav, f_wall.x, f_wall.y, f_wall.z]
            },
        );
        if energies {
            self.sums = sums;
        }
        Ok(())
    }

    /// Books the bonds that broke in the evaluation just made, in bond order, with the energy
    /// each held (recomputed from the unchanged state: the same bits as in the evaluation).
    fn collect_breaks(&mut self, t: f64) {
        let step = self.step;
        let (bonds, kin, ref_q, prm) = (&self.bonds, &self.kin, &self.ref_q, &self.params);
        let found: Vec<BreakEvent> = self
            .bond_state
            .par_iter()
            .with_min_len(PAR_MIN)
            .enumerate()
            .filter_map(|(k, &s)| {
                if s < BROKE_NOW {
                    return None;
                }
                let b = &bonds[k];
                let (ki, kj) = (&kin[b.i as usize], &kin[b.j as usize]);
                let (q_i0, q_j0) = ref_q.get(k, b);
                let o = bond_terms_ref(b.dhat0, b.l0, q_i0, q_j0, ki.x, kj.x, ki.q, kj.q, prm);
                Some(BreakEvent {
                    step,
                    t,
                    bond: k as u32,
                    i: b.i,
                    j: b.j,
                    mode: s - BROKE_NOW,
                    x: 0.5 * (ki.x + kj.x),
                    energy: o.u_bend + o.u_axial + o.u_shear,
                })
            })
            .collect();
        for e in &found {
            self.e_released += e.energy;
        }
        self.n_broken += found.len() as u64;
        self.breaks.extend(found);
    }

    /// Sums the diagnostics of the current state in particle/bond order (deterministic); the
    /// energies come from the last evaluation, which computed them.
    fn sum_diagnostics(&self) -> Diagnostics {
        let mut d = Diagnostics { step: self.step, t: self.time(), ..Default::default() };
        for (i, k) in self.kin.iter().enumerate() {
            let (m, j) = (self.mass.get(i), self.inertia.get(i));
            d.e_trans += 0.5 * m * k.v.length_squared();
            d.e_rot += 0.5 * j * k.w.length_squared();
            d.p += m * k.v;
            d.s += j * k.w;
            d.l += k.x.cross(m * k.v) + j * k.w;
            d.x_cm += m * k.x;
        }
        let s = &self.sums;
        d.u_contact = s.u_contact;
        d.u_wall = s.u_wall;
        d.u_gravity = s.u_gravity;
        d.f_wall = s.f_wall;
        d.x_cm /= self.total_mass;
        d.v_cm = d.p / self.total_mass;
        d.e_released = self.e_released;
        d.n_broken = self.n_broken;
        d.u_bend = s.u_bend;
        d.u_axial = s.u_axial;
        d.u_shear = s.u_shear;
        d
    }

    /// First particle that violates `rrp-exact`'s condition at the coming half step, if any.
    fn check_exact_condition(&self) -> Option<(usize, f64)> {
        let h = self.dt;
        let value = |i: usize| {
            let wh = self.kin[i].w + self.acc[i].moment * (0.5 * h * self.inv_inertia.get(i));
            integrator::rotation_increment(Integrator::RrpExact, h, wh).err()
        };
        let i = first_index(self.kin.len(), |i| !self.fixed.get(i) && value(i).is_some())?;
        value(i).map(|v| (i, v))
    }

    /// One pass over the particles: with `post`, the closing half kick of the previous step;
    /// with `pre`, the first part of the next one (then `acc` is zeroed behind it, and the
    /// result says whether some particle moved far enough to rebuild the neighbour list). With
    /// `post` and a watch, also the kinetic sums of the step it closes (`KinSums`).
    fn integrate(&mut self, post: bool, pre: bool) -> (bool, Option<KinSums>) {
        let (h, integ) = (self.dt, self.integrator);
        let (inv_mass, inv_inertia, fixed, nbr) = (&self.inv_mass, &self.inv_inertia, &self.fixed, &self.neighbours);
        let (mass, inertia) = (&self.mass, &self.inertia);
        let sum = post && self.watch.is_some();
        // Particles go by blocks, each stage over the whole block: the rotation update's two
        // square roots and reciprocals are then independent loops that pipeline (and pair up
        // in SIMD lanes) instead of one long latency chain per particle. Every particle gets
        // the operations of `pre_force`/`post_force`, in their order.
        let block = |base: usize, kin: &mut [Kinematics], acc: &mut [ParticleAcc]| -> (bool, KinSums) {
            let n = kin.len();
            let mut dalpha = [DVec3::ZERO; INTEGRATE_BLOCK];
            let mut turn = [false; INTEGRATE_BLOCK];
            let mut r = [0.0f64; INTEGRATE_BLOCK];
            let mut ks = KinSums::default();
            for (j, (k, a)) in kin.iter_mut().zip(acc.iter()).enumerate() {
                let i = base + j;
                let still = fixed.get(i);
                let (inv_m, inv_j) = (inv_mass.get(i), inv_inertia.get(i));
                if post && !still {
                    integrator::post_force(integ, h, inv_m, inv_j, k, a.force, a.moment);
                }
                if sum {
                    // The closed step's velocities, as `sum_diagnostics` reads them.
                    let (m, jm) = (mass.get(i), inertia.get(i));
                    ks.e_trans += 0.5 * m * k.v.length_squared();
                    ks.e_rot += 0.5 * jm * k.w.length_squared();
                    ks.p += m * k.v;
                }
                if still {
                    continue;
                }
                if pre {
                    // rrp-exact's condition was checked before, so this does not fail; if it
                    // did, the rotation would be left alone as in `pre_force`.
                    if let Ok(d) = integrator::pre_force_kick_drift(integ, h, inv_m, inv_j, k, a.force, a.moment) {
                        dalpha[j] = d;
                        turn[j] = true;
                    }
                }
            }
            if !pre {
                return (false, ks);
            }
            // `rrp::apply_increment`, stage by stage.
            for j in 0..n {
                r[j] = rrp::rrp_norm2(dalpha[j]);
            }
            for x in &mut r[..n] {
                *x = 1.0 / x.sqrt();
            }
            let mut p = [DQuat::IDENTITY; INTEGRATE_BLOCK];
            for j in 0..n {
                p[j] = rrp::quat_from_rrp_inv(dalpha[j], r[j]) * kin[j].q;
                r[j] = p[j].length_squared();
            }
            for x in &mut r[..n] {
                *x = 1.0 / x.sqrt();
            }
            let mut moved = false;
            for (j, (k, a)) in kin.iter_mut().zip(acc.iter_mut()).enumerate() {
                if turn[j] {
                    k.q = p[j] * r[j];
                }
                *a = ParticleAcc::default();
                moved |= nbr.moved(base + j, k.x);
            }
            (moved, ks)
        };
        let (kin, acc) = (&mut self.kin, &mut self.acc);
        // Every block is visited (no short circuit), so `acc` is zeroed throughout; the blocks'
        // sums are folded in block order.
        let mut total = KinSums::default();
        let mut moved = false;
        if serial(kin.len()) {
            for (b, (k, a)) in kin.chunks_mut(INTEGRATE_BLOCK).zip(acc.chunks_mut(INTEGRATE_BLOCK)).enumerate() {
                let (m, ks) = block(b * INTEGRATE_BLOCK, k, a);
                moved |= m;
                total.add(&ks);
            }
        } else {
            kin.par_chunks_mut(INTEGRATE_BLOCK)
                .zip(acc.par_chunks_mut(INTEGRATE_BLOCK))
                .with_min_len(PAR_MIN / 4 / INTEGRATE_BLOCK)
                .enumerate()
                .map(|(b, (k, a))| block(b * INTEGRATE_BLOCK, k, a))
                .collect_into_vec(&mut self.kin_blocks);
            for (m, ks) in &self.kin_blocks {
                moved |= m;
                total.add(ks);
            }
        }
        self.acc_zeroed = pre;
        (moved, sum.then_some(total))
    }

    /// Takes the step the last integration pass closed into the watch (its kinetic sums, the
    /// last evaluation's energies and wall force); `Err` when the energy guard refuses it.
    fn observe(&mut self, kin: Option<KinSums>) -> Result<(), EngineError> {
        let (Some(k), Some(w)) = (kin, self.watch.as_mut()) else { return Ok(()) };
        let s = &self.sums;
        let mechanical = k.e_trans + k.e_rot + s.u_bend + s.u_axial + s.u_shear + s.u_contact + s.u_wall;
        let at = EnergyAt { step: self.step, budget: mechanical + s.u_gravity + self.e_released, mechanical };
        w.energy.observe(&at).map_err(|error| EngineError::EnergyGuard {
            step: self.step,
            t: self.step as f64 * self.dt,
            error,
            limit: w.energy.limit,
            particle: None,
            force: f64::NAN,
        })?;
        let at = WallAt { step: self.step, f_wall: s.f_wall, v_cm: k.p / self.total_mass };
        w.impact.observe(&at, &self.params.walls);
        Ok(())
    }

    /// One step; `last`: the last of an `advance`, whose evaluation also sums the energies.
    /// `post_pending`: the previous step's closing half kick is still to be made (it is made
    /// in this step's first pass). Returns whether this step leaves its own pending. With a
    /// watch, every step's energies are summed and each closed step is observed.
    fn one_step(&mut self, post_pending: bool, last: bool) -> Result<bool, EngineError> {
        let integ = self.integrator;
        if integ == Integrator::RrpExact
            && let Some((particle, value)) = self.check_exact_condition()
        {
            return Err(EngineError::RrpExactCondition { particle, step: self.step, t: self.time(), value });
        }
        let (moved, kin) = self.integrate(post_pending, true);
        // The pass closed the previous step (its forces and energies are still in `sums`).
        self.observe(kin)?;
        self.step += 1;
        self.evaluate(last || self.watch.is_some(), Some(moved))?;
        // rrp-exact checks its condition on the closed step, so it closes each step at once.
        if !last && integ != Integrator::RrpExact {
            return Ok(true);
        }
        let (_, kin) = self.integrate(true, false);
        self.observe(kin)?;
        Ok(false)
    }

    /// Steps `steps` steps from the current state (the caller saved it).
    fn steps(&mut self, steps: u64) -> Result<(), EngineError> {
        let mut post_pending = false;
        for s in 0..steps {
            post_pending = self.one_step(post_pending, s + 1 == steps)?;
        }
        self.check_finite()
    }

    /// The first particle with a non-finite state or force, if any.
    fn check_finite(&self) -> Result<(), EngineError> {
        let bad = first_index(self.kin.len(), |i| {
            let (k, a) = (&self.kin[i], &self.acc[i]);
            !(k.x.is_finite()
                && k.v.is_finite()
                && k.q.is_finite()
                && k.w.is_finite()
                && a.force.is_finite()
                && a.moment.is_finite())
        });
        match bad {
            None => Ok(()),
            Some(i) => Err(EngineError::NonFinite {
                particle: i,
                step: self.step,
                t: self.time(),
                what: format!(
                    "x = {}, v = {}, Ω = {}, F = {}",
                    self.kin[i].x, self.kin[i].v, self.kin[i].w, self.acc[i].force
                ),
            }),
        }
    }
}

/// The engine's state at the start of an `advance` (for `rollback`).
#[derive(Clone, Debug, Default)]
struct Saved {
    step: u64,
    kin: Vec<Kinematics>,
    broken: Vec<bool>,
    e_released: f64,
    n_broken: u64,
}

/// Encodes a state (little-endian): per particle x, v, q (x, y, z, w), Ω as f64; then
/// `E_released` (f64), `n_broken` (u64) and one byte per bond (1 = broken).
fn encode_state(s: &Saved) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.kin.len() * 104 + 16 + s.broken.len());
    for k in &s.kin {
        for v in [k.x.x, k.x.y, k.x.z, k.v.x, k.v.y, k.v.z, k.q.x, k.q.y, k.q.z, k.q.w, k.w.x, k.w.y, k.w.z] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out.extend_from_slice(&s.e_released.to_le_bytes());
    out.extend_from_slice(&s.n_broken.to_le_bytes());
    out.extend(s.broken.iter().map(|&b| b as u8));
    out
}

fn decode_state(data: &[u8], step: u64, n: usize, n_bonds: usize) -> Option<Saved> {
    if data.len() != n * 104 + 16 + n_bonds {
        return None;
    }
    let real = |k: usize| f64::from_le_bytes(data[8 * k..8 * k + 8].try_into().expect("8 bytes"));
    let kin = (0..n)
        .map(|i| {
            let r = |c: usize| real(13 * i + c);
            Kinematics {
                x: DVec3::new(r(0), r(1), r(2)),
                v: DVec3::new(r(3), r(4), r(5)),
                q: glam::DQuat::from_xyzw(r(6), r(7), r(8), r(9)),
                w: DVec3::new(r(10), r(11), r(12)),
            }
        })
        .collect();
    let tail = 13 * n;
    let n_broken = u64::from_le_bytes(data[8 * tail + 8..8 * tail + 16].try_into().expect("8 bytes"));
    let broken = data[8 * tail + 16..].iter().map(|&b| b != 0).collect();
    Some(Saved { step, kin, broken, e_released: real(tail), n_broken })
}

impl CpuEngine {
    fn current(&self) -> Saved {
        Saved {
            step: self.step,
            kin: self.kin.clone(),
            broken: self.bond_state.iter().map(|&s| s != INTACT).collect(),
            e_released: self.e_released,
            n_broken: self.n_broken,
        }
    }

    /// Sets the state and re-evaluates forces and diagnostics. The forces are a function of the
    /// state alone (contact partners are summed in index order; a bond that broke at this step
    /// is already marked), so stepping on from here is bit-identical to never having left.
    fn set_state(&mut self, s: Saved) -> Result<(), EngineError> {
        self.kin = s.kin;
        self.step = s.step;
        for (state, b) in self.bond_state.iter_mut().zip(s.broken) {
            *state = if b { BROKEN } else { INTACT };
        }
        self.e_released = s.e_released;
        self.n_broken = s.n_broken;
        // Breaks after this step never happened.
        self.breaks.retain(|e| e.step <= s.step);
        self.evaluate(true, None)?;
        self.diag = self.sum_diagnostics();
        Ok(())
    }
}

impl Engine for CpuEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            backend: "cpu".into(),
            device: format!("CPU reference, {} rayon threads", rayon::current_num_threads()),
            precision: Precision::F64,
        }
    }

    fn n_particles(&self) -> usize {
        self.kin.len()
    }

    fn steps_done(&self) -> u64 {
        self.step
    }

    fn advance(&mut self, steps: u64) -> Result<(), EngineError> {
        self.saved.step = self.step;
        self.saved.kin.clone_from(&self.kin);
        self.saved.broken.clear();
        self.saved.broken.extend(self.bond_state.iter().map(|&s| s != INTACT));
        self.saved.e_released = self.e_released;
        self.saved.n_broken = self.n_broken;
        let watch = self.watch.clone();
        let err = match self.steps(steps) {
            Ok(()) => {
                self.diag = self.sum_diagnostics();
                return Ok(());
            }
            Err(e) => e,
        };
        // Back to the last good state: the step before the one the guard refused, the step at
        // which rrp-exact's condition failed (nothing moved yet), else the advance's start. The
        // steps up to it are taken again (the same bits), and `rollback` returns there.
        let start = self.saved.step;
        let good = match &err {
            EngineError::EnergyGuard { step, .. } => step.saturating_sub(1).max(start),
            EngineError::RrpExactCondition { step, .. } => *step,
            _ => start,
        };
        self.set_state(self.saved.clone())?;
        self.watch = watch;
        if good > start {
            self.steps(good - start)?;
            self.diag = self.sum_diagnostics();
            self.saved = self.current();
        }
        Err(err)
    }

    fn diagnostics(&mut self) -> Result<Diagnostics, EngineError> {
        Ok(self.diag)
    }

    fn snapshot(&mut self) -> Result<Vec<Kinematics>, EngineError> {
        Ok(self.kin.clone())
    }

    fn state_kind(&self) -> String {
        "cpu-f64".into()
    }

    fn save_state(&mut self) -> Result<EngineState, EngineError> {
        Ok(EngineState { kind: self.state_kind(), step: self.step, data: encode_state(&self.current()) })
    }

    fn load_state(&mut self, state: &EngineState) -> Result<(), EngineError> {
        if state.kind != self.state_kind() {
            return Err(wrong_state_kind(&state.kind, &self.state_kind()));
        }
        let (n, nb) = (self.kin.len(), self.bonds.len());
        let saved = decode_state(&state.data, state.step, n, nb).ok_or_else(|| {
            EngineError::Unsupported(format!(
                "the saved state holds {} bytes; {n} particles and {nb} bonds need {}",
                state.data.len(),
                n * 104 + 16 + nb
            ))
        })?;
        self.set_state(saved)
    }

    fn rollback(&mut self) -> Result<(), EngineError> {
        if self.saved.kin.len() != self.kin.len() {
            return Ok(()); // no advance yet: the current state is the initial one
        }
        self.set_state(self.saved.clone())
    }

    fn take_breaks(&mut self) -> Vec<BreakEvent> {
        std::mem::take(&mut self.breaks)
    }

    fn largest_force(&mut self) -> Result<Option<(usize, f64)>, EngineError> {
        Ok(self.acc.iter().map(|a| a.force.length()).enumerate().fold(None, |best: Option<(usize, f64)>, (i, f)| {
            match best {
                Some((_, b)) if f.partial_cmp(&b) != Some(std::cmp::Ordering::Greater) => best,
                _ => Some((i, f)),
            }
        }))
    }

    /// Long enough that the per-advance copy of the state for `rollback` and the sums of the
    /// diagnostics cost little (about one step's worth over 10 steps, or over 10⁷
    /// particle-steps for small models); the energy guard and the impact measures are watched at
    /// every step all the same (`set_watch`).
    fn guard_interval(&self) -> u64 {
        GUARD_PARTICLE_STEPS.div_ceil(self.kin.len().max(1) as u64).max(10)
    }

    fn set_watch(&mut self, watch: Watch) -> bool {
        self.watch = Some(watch);
        true
    }

    fn watch(&self) -> Option<&Watch> {
        self.watch.as_ref()
    }

    fn order_check_interval(&self) -> Option<u64> {
        Some(ORDER_CHECK_INTERVAL)
    }

    /// Builds the engine anew from `model` (the bond ranges, neighbour lists and per-particle
    /// columns in the new order) and loads the renumbered state, as a resume does; for the
    /// moment of the swap both engines are in memory.
    fn renumber(&mut self, model: &Model, perm: &crate::order::Order) -> Result<(), EngineError> {
        perm.check_renumbering(model, self.kin.len(), self.bonds.len())?;
        let kin = perm.particles.par_iter().map(|&k| self.kin[k as usize]).collect();
        let broken = perm.bonds.iter().map(|&b| self.bond_state[b as usize] != INTACT).collect();
        let state = Saved { step: self.step, kin, broken, e_released: self.e_released, n_broken: self.n_broken };
        let mut fresh = CpuEngine::new(model, self.integrator, self.dt)?;
        fresh.set_state(state)?;
        // Bonds the fresh engine broke before their flags were loaded broke long ago.
        fresh.breaks.clear();
        fresh.watch = self.watch.take();
        *self = fresh;
        Ok(())
    }
}
