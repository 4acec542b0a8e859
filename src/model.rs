//! The resolved physical model an engine runs: particles, bonds with their reference data, and
//! interaction parameters. Built from a scenario; independent of any engine.

use crate::integrator::Kinematics;
use crate::interactions::{BondOut, Dissipation, Pendulum, Rupture, ShearVariant, Wall, axial, bending, shear};
use glam::{DMat3, DQuat, DVec3};
use rayon::prelude::*;
use serde::Serialize;

/// Per-particle initial state and constants (structure of arrays, f64).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Particles {
    pub x: Vec<DVec3>,
    pub v: Vec<DVec3>,
    /// Attitude as a unit quaternion (homogeneous RRP).
    pub q: Vec<DQuat>,
    /// Spatial angular velocity Ω.
    pub w: Vec<DVec3>,
    pub mass: Vec<f64>,
    /// Scalar moment of inertia J (spheres).
    pub inertia: Vec<f64>,
    pub radius: Vec<f64>,
    /// Fixed particles are not integrated (they keep their state) but still interact.
    pub fixed: Vec<bool>,
}

impl Particles {
    pub fn len(&self) -> usize {
        self.x.len()
    }

    pub fn is_empty(&self) -> bool {
        self.x.is_empty()
    }

    /// Appends one particle.
    #[allow(clippy::too_many_arguments)]
    pub fn push(&mut self, x: DVec3, v: DVec3, q: DQuat, w: DVec3, mass: f64, inertia: f64, radius: f64, fixed: bool) {
        self.x.push(x);
        self.v.push(v);
        self.q.push(q);
        self.w.push(w);
        self.mass.push(mass);
        self.inertia.push(inertia);
        self.radius.push(radius);
        self.fixed.push(fixed);
    }

    /// Appends all of `other` (moved when `self` is empty, so a generated body is not copied).
    pub fn append(&mut self, mut other: Particles) {
        if self.is_empty() {
            *self = other;
            return;
        }
        self.x.append(&mut other.x);
        self.v.append(&mut other.v);
        self.q.append(&mut other.q);
        self.w.append(&mut other.w);
        self.mass.append(&mut other.mass);
        self.inertia.append(&mut other.inertia);
        self.radius.append(&mut other.radius);
        self.fixed.append(&mut other.fixed);
    }
}

/// A binder bond with the reference data taken when it was made (t = 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bond {
    pub i: u32,
    pub j: u32,
    /// Reference direction `d̂0 = d0/|d0|`, `d0 = x_i − x_j` at t = 0.
    pub dhat0: DVec3,
    /// Reference length `L0 = |d0|`.
    pub l0: f64,
    /// Reference attitudes of the two ends.
    pub q_i0: DQuat,
    pub q_j0: DQuat,
}

/// Verlet skin in units of the largest radius, for both engines' neighbour lists (a list is
/// rebuilt once some particle has moved half of it since the last rebuild). A rebuild costs
/// several steps; at 0.6 a body moving as a whole rebuilds half as often as at 0.3, for lists
/// some 1.4× longer, and a close packing's second neighbours (2√2 r apart, beyond 2 r + 0.6 r)
/// stay out of the lists until it is compressed by 8 %. Results do not depend on it: a listed
/// pair that does not overlap adds +0 to sums that start at +0. The default of the scenario
/// field `neighbour_skin` (`Params::skin`).
pub const SKIN_FACTOR: f64 = 0.6;

/// The largest skin a scenario may ask for: 2.5 r_max reaches (2 r + 2.5 r = 4.5 r) the fifth
/// neighbours of a close packing, 78 partners per particle (66 of them not bonded), more than
/// any rebuild saving repays.
pub const MAX_SKIN_FACTOR: f64 = 2.5;

/// Interaction parameters (MODEL §3).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Params {
    pub k_bend: f64,
    pub k_axial: f64,
    pub k_shear: f64,
    pub k_contact: f64,
    pub k_wall: f64,
    pub shear: ShearVariant,
    pub walls: Vec<Wall>,
    pub gravity: DVec3,
    pub pendulum: Option<Pendulum>,
    /// Binder rupture (MODEL §6); `None`: bonds never break.
    pub rupture: Option<Rupture>,
    /// Dissipation and friction (MODEL §10); `None`: the conservative model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dissipation: Option<Dissipation>,
    /// Mutual gravitation's constant `G` (MODEL §12: `U = −G m_p m_q / |x_p − x_q|` between every
    /// two spheres of different clumps); `None`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gravitation: Option<f64>,
    /// Verlet skin of both engines' contact lists in units of the largest radius (scenario
    /// field `neighbour_skin`; `grid::SKIN_FACTOR` by default). Changes when lists are rebuilt,
    /// never a result.
    pub skin: f64,
}

impl Params {
    /// Bonds may break with thresholds scattered per bond (Weibull, MODEL §6).
    pub fn weibull(&self) -> bool {
        self.rupture.as_ref().is_some_and(|r| r.weibull.is_some())
    }
}

impl Default for Params {
    fn default() -> Self {
        Params {
            k_bend: 0.0,
            k_axial: 0.0,
            k_shear: 0.0,
            k_contact: 0.0,
            k_wall: 0.0,
            shear: ShearVariant::Objective,
            walls: Vec::new(),
            gravity: DVec3::ZERO,
            pendulum: None,
            rupture: None,
            dissipation: None,
            gravitation: None,
            skin: SKIN_FACTOR,
        }
    }
}

/// A rigid clump of spheres (MODEL §12): its particles `members` (a contiguous range) move as
/// one body with mass `mass` and body-frame inertia tensor `inertia`; a sphere p sits at
/// `x + R ρ_p` with attitude `q ⊗ q_body_p`. A single sphere with a tensor is a general rigid body.
#[derive(Clone, Debug, PartialEq)]
pub struct Clump {
    pub members: std::ops::Range<u32>,
    pub mass: f64,
    /// Body-frame inertia tensor (symmetric positive definite).
    pub inertia: DMat3,
    /// Each member's offset from the centre in the body frame, `ρ_p`.
    pub rho: Vec<DVec3>,
    /// Each member's attitude relative to the body, `q_body_p = q⁻¹ ⊗ q_p` at t = 0.
    pub q_body: Vec<DQuat>,
    /// The body's state when the model was built: centre, velocity, attitude and spatial Ω.
    pub x: DVec3,
    pub v: DVec3,
    pub q: DQuat,
    pub w: DVec3,
}

impl Clump {
    /// The body's spheres' positions and attitudes at its state `(x, q)`: `x + R ρ_p`, `q ⊗ q_body_p`.
    pub fn place(&self, x: DVec3, q: DQuat) -> impl Iterator<Item = (DVec3, DQuat)> + '_ {
        self.rho.iter().zip(&self.q_body).map(move |(r, qb)| (x + q * *r, q * *qb))
    }
}

/// Everything an engine needs to start.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub particles: Particles,
    pub bonds: Vec<Bond>,
    pub params: Params,
    /// Where the particles were when the bonds were made (t = 0), when that is not
    /// `particles.x`: a resumed run's model, whose particles have moved on (the checkpoint
    /// carries them). `None`: `particles.x`.
    pub reference_x: Option<Vec<DVec3>>,
    /// The user's index of each particle when the engine runs the model in another order
    /// (`crate::order`); `None`: the indices are the user's. Random draws keyed by particle
    /// (the Weibull scale of a bond's thresholds) use these, so they follow the particle.
    pub user_ids: Option<Vec<u32>>,
    /// Rigid clumps (MODEL §12), each over a range of `particles`; run by `lgvi` on the CPU engine.
    pub clumps: Vec<Clump>,
}

impl Model {
    /// The model a run continues from: constants and bonds of `model`, kinematics `state`.
    pub fn at_state(&self, state: &[Kinematics]) -> Model {
        let mut m = self.clone();
        // Where the bonds were made stays where it was (for a model from a version-1 checkpoint,
        // which does not say, the positions it was resumed at: they do not match its bonds, so
        // `Model::reference_positions` is `None` and the engines store the references per bond).
        m.reference_x.get_or_insert_with(|| self.particles.x.clone());
        let p = &mut m.particles;
        for (i, k) in state.iter().enumerate() {
            p.x[i] = k.x;
            p.v[i] = k.v;
            p.q[i] = k.q;
            p.w[i] = k.w;
        }
        m
    }

    /// Builds a model, taking each bond's reference data from the initial state.
    /// The caller guarantees that bond indices are valid and bonded particles are apart.
    /// Each bond is computed on its own, so the parallel map is deterministic.
    pub fn new(particles: Particles, pairs: &[(u32, u32)], params: Params) -> Model {
        let bond = |&(i, j): &(u32, u32)| {
            let (dhat0, l0) = bond_reference(particles.x[i as usize] - particles.x[j as usize]);
            Bond { i, j, dhat0, l0, q_i0: particles.q[i as usize], q_j0: particles.q[j as usize] }
        };
        // Small models stay on the calling thread (rayon's dispatch would cost more).
        let bonds =
            if pairs.len() < 4096 { pairs.iter().map(bond).collect() } else { pairs.par_iter().map(bond).collect() };
        Model { particles, bonds, params, reference_x: None, user_ids: None, clumps: Vec::new() }
    }

    /// What of this model only the CPU engine runs (MODEL §12: clumps, mutual gravitation), as
    /// words for an error; `None` when the GPU engine can run it.
    pub fn cpu_only_feature(&self) -> Option<&'static str> {
        if !self.clumps.is_empty() {
            Some("clumps")
        } else if self.params.gravitation.is_some() {
            Some("mutual gravitation and its pairs")
        } else {
            None
        }
    }

    /// Particle → bond incidence in CSR form: the bonds of particle `p` are
    /// `entries[offsets[p]..offsets[p+1]]`, each `2·bond + end` (end 0 = `i`, 1 = `j`), in
    /// increasing bond order. The GPU engine gathers bond results through it in this fixed order
    /// (the CPU engine adds them in bond order as it goes: `src/engine/scatter.rs`).
    pub fn incidence(&self) -> (Vec<u32>, Vec<u32>) {
        incidence(self.particles.len(), self.bonds.len(), || self.bonds.iter().map(|b| (b.i, b.j)))
    }

    /// Each particle's reference attitude `R_0`, when its bonds agree on it bit for bit: MODEL §3
    /// takes every bond's reference attitudes at t = 0, so the `q_i0`/`q_j0` of all bonds of a
    /// particle are its attitude then (`Model::new` makes them so, from the current attitudes;
    /// a checkpoint's bonds keep them while its particles have moved on). Engines then store one
    /// attitude per particle instead of two per bond (16 or 32 bytes per particle against 32 or
    /// 64 per bond, and a solid has about six bonds per particle). A particle without bonds
    /// gets its current attitude (never read). `None` when two bonds disagree on a particle.
    /// Borrowed when the bonds were made from the current attitudes (the usual case, checked in
    /// parallel); otherwise built in one pass over the bonds in order.
    pub fn reference_attitudes(&self) -> Option<std::borrow::Cow<'_, [DQuat]>> {
        let q = &self.particles.q;
        let bits = |a: &DQuat| a.to_array().map(f64::to_bits);
        let current = |b: &Bond| bits(&b.q_i0) == bits(&q[b.i as usize]) && bits(&b.q_j0) == bits(&q[b.j as usize]);
        let all_current =
            if self.bonds.len() < 4096 { self.bonds.iter().all(current) } else { self.bonds.par_iter().all(current) };
        if all_current {
            return Some(std::borrow::Cow::Borrowed(q));
        }
        let mut out = q.clone();
        let mut set = vec![false; q.len()];
        for b in &self.bonds {
            for (p, q0) in [(b.i as usize, b.q_i0), (b.j as usize, b.q_j0)] {
                if !set[p] {
                    set[p] = true;
                    out[p] = q0;
                } else if bits(&out[p]) != bits(&q0) {
                    return None;
                }
            }
        }
        Some(std::borrow::Cow::Owned(out))
    }

    /// The particles' reference positions (`reference_x`, else `particles.x`), when every bond's
    /// reference direction and length are those `Model::new` takes from them (`d0 = x_i − x_j`,
    /// `L0 = |d0|`, `d̂0 = d0 / L0`), bit for bit. Engines may then form `d0` from two
    /// per-particle positions instead of storing four reals per bond. `None` otherwise (a model
    /// moved on without its `reference_x`, as from a version-1 checkpoint).
    pub fn reference_positions(&self) -> Option<&[DVec3]> {
        let x = self.reference_x.as_deref().unwrap_or(&self.particles.x);
        let bits = |v: DVec3| v.to_array().map(f64::to_bits);
        let made_here = |b: &Bond| {
            let (dhat0, l0) = bond_reference(x[b.i as usize] - x[b.j as usize]);
            l0.to_bits() == b.l0.to_bits() && bits(dhat0) == bits(b.dhat0)
        };
        let all = if self.bonds.len() < 4096 {
            self.bonds.iter().all(made_here)
        } else {
            self.bonds.par_iter().all(made_here)
        };
        all.then_some(x)
    }

    /// The scale of each bond's rupture thresholds (MODEL §6; all 1 without Weibull scatter),
    /// drawn from the user's indices of its ends (`user_ids`).
    pub fn bond_scales(&self) -> Vec<f64> {
        let scale = |b: &Bond| self.bond_scale(b);
        if self.bonds.len() < 4096 {
            self.bonds.iter().map(scale).collect()
        } else {
            self.bonds.par_iter().map(scale).collect()
        }
    }

    /// The scale of bond `b`'s rupture thresholds (see `bond_scales`).
    pub fn bond_scale(&self, b: &Bond) -> f64 {
        let Some(r) = &self.params.rupture else { return 1.0 };
        let user = |k: u32| self.user_ids.as_ref().map_or(k, |ids| ids[k as usize]);
        r.scale(user(b.i), user(b.j))
    }

    /// Largest particle radius (sets the contact-search cell size).
    pub fn max_radius(&self) -> f64 {
        self.particles.radius.iter().copied().fold(0.0, f64::max)
    }
}

/// A bond's reference direction and length from `d0 = x_i − x_j` at t = 0: `(d̂0, L0)` with
/// `L0 = √(d0·d0)` (the dot product summed x, y, z) and `d̂0 = d0 / L0` component by component.
/// The WGSL function of the same name (shaders/bonds.wgsl) does the same operations in the same
/// order, so an IEEE device forms the same bits from the reference positions.
#[inline]
pub fn bond_reference(d0: DVec3) -> (DVec3, f64) {
    let l0 = d0.length();
    (d0 / l0, l0)
}

/// All binder terms of one bond at the current state: bending/torsion, axial and shear.
#[inline]
pub fn bond_terms(bond: &Bond, x_i: DVec3, x_j: DVec3, q_i: DQuat, q_j: DQuat, p: &Params) -> BondOut {
    bond_terms_ref(bond.dhat0, bond.l0, bond.q_i0, bond.q_j0, x_i, x_j, q_i, q_j, p)
}

/// `bond_terms` from the bond's reference data given separately (engines that store it in
/// their own layout).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn bond_terms_ref(
    dhat0: DVec3,
    l0: f64,
    q_i0: DQuat,
    q_j0: DQuat,
    x_i: DVec3,
    x_j: DVec3,
    q_i: DQuat,
    q_j: DQuat,
    p: &Params,
) -> BondOut {
    bond_terms_rel(dhat0, l0, q_i * q_i0.conjugate(), q_j * q_j0.conjugate(), x_i, x_j, p)
}

/// `bond_terms_ref` from the rotations since bonding `dq_e = q_e q_e0⁻¹` (engines that know
/// them without the products, e.g. when every reference attitude is the identity).
#[inline(always)]
pub fn bond_terms_rel(dhat0: DVec3, l0: f64, dq_i: DQuat, dq_j: DQuat, x_i: DVec3, x_j: DVec3, p: &Params) -> BondOut {
    let d = x_i - x_j;
    let bend = bending(dq_i, dq_j, p.k_bend);
    let ax = axial(d, l0, p.k_axial);
    let sh = shear(p.shear, d, dhat0, dq_i, dq_j, p.k_shear);
    BondOut {
        f_i: ax.force + sh.f_i,
        m_i: bend.moment + sh.m_i,
        m_j: sh.m_j - bend.moment,
        u_bend: bend.energy,
        u_axial: ax.energy,
        u_shear: sh.energy,
    }
}

/// Incidence (CSR) of `n_bonds` bonds with ends `ends()` among `n` particles: offsets (n + 1)
/// and entries `2·bond + end` (end 0 for i, 1 for j), each particle's in bond order.
pub fn incidence<I: Iterator<Item = (u32, u32)>>(
    n: usize,
    n_bonds: usize,
    ends: impl Fn() -> I,
) -> (Vec<u32>, Vec<u32>) {
    let mut offsets = vec![0u32; n + 1];
    for (i, j) in ends() {
        offsets[i as usize + 1] += 1;
        offsets[j as usize + 1] += 1;
    }
    for p in 0..n {
        offsets[p + 1] += offsets[p];
    }
    let mut fill = offsets.clone();
    let mut entries = vec![0u32; 2 * n_bonds];
    for (k, (i, j)) in ends().enumerate() {
        for (end, p) in [(0u32, i), (1, j)] {
            entries[fill[p as usize] as usize] = 2 * k as u32 + end;
            fill[p as usize] += 1;
        }
    }
    (offsets, entries)
}
