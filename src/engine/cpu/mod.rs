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
//! goes by blocks so that the rotation updates' square roots pipeline.//!
//! Files: `pass.rs` (loops on the calling thread or the pool, folds in index order),
//! `columns.rs` (per-particle and per-bond constants), `integrate.rs` (the integration pass),
//! `evaluate.rs` (bond pass, breaks, particle pass, diagnostics), `step.rs` (one step and the
//! loop of an `advance`), `state.rs` (saved states, their bytes, setting one), `implicit.rs`
//! (the implicit step of `em` and `sm`, MODEL §13), `rigid.rs` (the step of `lgvi` over rigid
//! bodies, MODEL §12); this file holds the engine's data, its
//! construction and the `Engine` interface.

mod columns;
mod dissipation;
mod evaluate;
mod implicit;
mod integrate;
mod pass;
mod rigid;
mod state;
mod step;

pub use implicit::{ImplicitSolver, NEWTON_MAX_UNKNOWNS, TOLERANCE as IMPLICIT_TOLERANCE, check_translation_only};
pub(crate) use pass::parallel_bonds;

use super::scatter::BondRanges;
use super::{Engine, EngineInfo, EngineState, Precision, Watch, wrong_state_kind};
use crate::diagnostics::Diagnostics;
use crate::error::EngineError;
use crate::grid::{BondedPartners, NeighbourList};
use crate::integrator::{Integrator, Kinematics};
use crate::interactions::BreakEvent;
use crate::model::{Model, Params};
use columns::{BondRef, Column, RefAttitudes};
use dissipation::DissState;
use evaluate::Sums;
use glam::DVec3;
use integrate::KinSums;
use rayon::prelude::*;
use state::{Saved, decode_state, encode_state};

/// Steps between checks of the particle order (`Engine::order_check_interval`). A check reads
/// the positions and sorts them along a Morton curve: about half a step's time at one thread
/// (45 ms against a 67 ms step at 2.6·10⁵ spheres, docs/BENCHMARKS.md), so under 0.1 % of the
/// run; a gas scatters its order by 0.13 in 1000 steps.
pub(crate) const ORDER_CHECK_INTERVAL: u64 = 1000;

/// Particle-steps between the run driver's stops when nothing else stops it
/// (`Engine::guard_interval`): about a second of one thread's work.
const GUARD_PARTICLE_STEPS: u64 = 10_000_000;

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
    kin_blocks: Vec<(u8, KinSums)>,
    /// How `em` and `sm` solve each step.
    solver: ImplicitSolver,
    /// Largest particle radius (the implicit solve's length scale).
    radius_max: f64,
    /// Damping and friction (MODEL §10); `None`: the conservative model.
    diss: Option<DissState>,
    /// The rigid bodies `lgvi` moves (MODEL §12); `None` for the other integrators.
    rigid: Option<rigid::Rigid>,
    /// Per particle its group where some pairs must not interact: the spheres of one clump
    /// share one (no contact, no gravitation between them; MODEL §12). `None`: every particle
    /// alone.
    group: Option<Vec<u32>>,
}

/// `1/m` for a free particle, 0 for a fixed one.
#[inline(always)]
fn inverse(m: f64, fixed: bool) -> f64 {
    if fixed { 0.0 } else { 1.0 / m }
}

/// Whether `integrator` can move `model` (the refusals `CpuEngine::new` starts with): `em` and
/// `sm` move translations only (`implicit::check_translation_only`), clumps need `lgvi`, and
/// `lgvi` books no dissipated work. A study checks every variant with it before anything runs.
pub fn check_integrator(model: &Model, integrator: Integrator) -> Result<(), EngineError> {
    if integrator.is_implicit() {
        implicit::check_translation_only(model, integrator)?;
    }
    if !model.clumps.is_empty() && integrator != Integrator::Lgvi {
        return Err(EngineError::Unsupported(format!(
            "the model has clumps, which `{integrator}` cannot move (a full inertia tensor): use `lgvi` (MODEL §12)"
        )));
    }
    if integrator == Integrator::Lgvi && model.params.dissipation.is_some() {
        return Err(EngineError::Unsupported(
            "`lgvi` does not book the work of damping and friction (MODEL §10); use rrp-newmark".into(),
        ));
    }
    Ok(())
}

impl CpuEngine {
    /// Builds the engine and evaluates the forces and diagnostics of the initial state.
    pub fn new(model: &Model, integrator: Integrator, dt: f64) -> Result<CpuEngine, EngineError> {
        check_integrator(model, integrator)?;
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
            neighbours: NeighbourList::new(n, r_max, (model.params.skin * r_max).max(f64::MIN_POSITIVE)),
            step: 0,
            diag: Diagnostics::default(),
            saved: Saved::default(),
            watch: None,
            kin_blocks: Vec::new(),
            solver: ImplicitSolver::Auto,
            radius_max: r_max,
            diss: None,
            rigid: None,
            group: None,
        };
        if integrator == Integrator::Lgvi {
            let r = rigid::Rigid::new(model);
            let fixed_mass: f64 = (0..n).filter(|&i| p.fixed[i]).map(|i| p.mass[i]).sum();
            e.total_mass = r.mass() + fixed_mass;
            e.group = Some(r.groups());
            e.rigid = Some(r);
        }
        e.diss = model.params.dissipation.map(|c| DissState::new(c, n, model.params.walls.len(), nb));
        if nb > 0 {
            e.neighbours.leave_out_bonded(BondedPartners::new(n, || model.bonds.iter().map(|b| (b.i, b.j))));
        }
        e.evaluate(true, None)?;
        if let Some(r) = &mut e.rigid {
            r.gather(&e.acc);
        }
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
            ("dissipation: loads, bond ranges, contact history", self.diss.as_ref().map_or(0, DissState::bytes)),
        ]
    }

    /// Force and spatial moment on every particle at the current state (for tests and tools).
    pub fn forces(&self) -> Vec<(DVec3, DVec3)> {
        self.acc.iter().map(|a| (a.force, a.moment)).collect()
    }

    /// With `lgvi`: every rigid body's force and spatial moment about its centre at the current
    /// state (`F = Σ F_p`, `RM = Σ RM_p + (R ρ_p) × F_p`, MODEL §12), bodies in particle order;
    /// empty otherwise (for tests and tools).
    pub fn body_loads(&self) -> Vec<(DVec3, DVec3)> {
        self.rigid.as_ref().map_or_else(Vec::new, |r| r.loads())
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

    /// Entries of the bonded partners the contact list leaves out (`grid::BondedPartners`),
    /// visited every evaluation beside the list's; 0 where they are listed.
    pub fn bonded_entries(&self) -> usize {
        self.neighbours.bonded_entries()
    }

    /// Whether the bond pass evaluates the contact of each bonded pair (intact or broken), with
    /// its dashpot and spring–slider where contacts dissipate (MODEL §10; the slider's history
    /// then kept per bond), instead of the particle pass visiting it from both ends: wherever
    /// the lists leave bonded pairs out.
    pub(super) fn bond_contacts(&self) -> bool {
        self.neighbours.bonded_entries() > 0
    }

    /// Lists bonded pairs as any other pair (as before they were left out,
    /// `grid::BondedPartners`), the list rebuilt now, and visits their contacts in the particle
    /// pass from both ends, as before they were evaluated with their bonds (`bond_contacts`):
    /// the same contacts, summed in another order, so the same results to round-off. For
    /// comparisons and measurements.
    pub fn list_bonded_pairs(&mut self) -> Result<(), EngineError> {
        if self.neighbours.bonded_entries() == 0 {
            return Ok(());
        }
        // The bonded pairs' friction history moves from their bonds into the rows: the state is
        // set again (as a resume does), the history loaded into the rows alone.
        let state = self.current();
        self.neighbours.list_bonded();
        if let Some(d) = &mut self.diss {
            d.drop_bond_history();
        }
        self.set_state(state)
    }

    /// How many times the contact neighbour list was rebuilt.
    pub fn neighbour_rebuilds(&self) -> u64 {
        self.neighbours.rebuilds()
    }

    fn time(&self) -> f64 {
        self.step as f64 * self.dt
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
        self.saved.dissipation = self.current_dissipation();
        self.saved.bodies = self.rigid.as_ref().map_or_else(Vec::new, |r| r.state.clone());
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
            EngineError::RrpExactCondition { step, .. }
            | EngineError::ImplicitSolve { step, .. }
            | EngineError::RigidSolve { step, .. } => *step,
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
        let walls = self.diss.as_ref().map(|_| self.params.walls.len());
        let bodies = self.rigid.as_ref().map_or(0, |r| r.state.len());
        let saved = decode_state(&state.data, state.step, n, nb, walls, bodies).ok_or_else(|| {
            EngineError::Unsupported(format!(
                "the saved state holds {} bytes; {n} particles and {nb} bonds need {}{}{}",
                state.data.len(),
                n * 104 + 16 + nb,
                if walls.is_some() {
                    " and then the dissipation's energy and contact history (a well-formed list)"
                } else {
                    " (and no dissipation)"
                },
                if bodies > 0 {
                    format!(", then {bodies} finite body states of {} bytes", state::BODY_BYTES)
                } else {
                    String::new()
                }
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

    fn list_figures(&mut self) -> Option<(u64, u64)> {
        Some((self.neighbours.rebuilds(), self.neighbours.entries() as u64))
    }

    fn set_watch(&mut self, watch: Watch) -> bool {
        self.watch = Some(watch);
        true
    }

    fn watch(&self) -> Option<&Watch> {
        self.watch.as_ref()
    }

    fn order_check_interval(&self) -> Option<u64> {
        // `lgvi`'s bodies are ranges of particles: the engine keeps the model's order.
        self.rigid.is_none().then_some(ORDER_CHECK_INTERVAL)
    }

    fn clumps(&mut self) -> Result<Vec<super::ClumpState>, EngineError> {
        Ok(self.rigid.as_ref().map_or_else(Vec::new, |r| r.clump_states()))
    }

    fn tangential_displacement(&mut self) -> Result<Option<Vec<f64>>, EngineError> {
        Ok(self.diss.as_ref().and_then(|d| d.tangential_displacement(self.kin.len(), &self.bonds)))
    }

    /// Builds the engine anew from `model` (the bond ranges, neighbour lists and per-particle
    /// columns in the new order) and loads the renumbered state, as a resume does; for the
    /// moment of the swap both engines are in memory.
    fn renumber(&mut self, model: &Model, perm: &crate::order::Order) -> Result<(), EngineError> {
        if self.rigid.is_some() {
            return Err(EngineError::Unsupported("an lgvi engine keeps its bodies' particle order".into()));
        }
        perm.check_renumbering(model, self.kin.len(), self.bonds.len())?;
        let kin = perm.particles.par_iter().map(|&k| self.kin[k as usize]).collect();
        let broken = perm.bonds.iter().map(|&b| self.bond_state[b as usize] != INTACT).collect();
        let dissipation = self.current().dissipation.map(|mut d| {
            // The history follows its particles into the new numbering, each pair kept by
            // its lower new index (ξ seen from that end).
            let mut new_of = vec![0u32; perm.particles.len()];
            for (k, &old) in perm.particles.iter().enumerate() {
                new_of[old as usize] = k as u32;
            }
            for (i, j, xi) in &mut d.pairs {
                let (a, b) = (new_of[*i as usize], new_of[*j as usize]);
                (*i, *j, *xi) = if a < b { (a, b, *xi) } else { (b, a, -*xi) };
            }
            d.pairs.sort_by_key(|&(i, j, _)| (i, j));
            for (i, _, _) in &mut d.walls {
                *i = new_of[*i as usize];
            }
            d.v_eval = perm.particles.iter().map(|&old| d.v_eval[old as usize]).collect();
            d.walls.sort_by_key(|&(i, w, _)| (i, w));
            d
        });
        let state = Saved {
            step: self.step,
            kin,
            broken,
            e_released: self.e_released,
            n_broken: self.n_broken,
            dissipation,
            bodies: Vec::new(),
        };
        let mut fresh = CpuEngine::new(model, self.integrator, self.dt)?;
        // An engine told to list its bonded pairs (`list_bonded_pairs`) keeps doing so.
        if self.neighbours.bonded_entries() == 0 && fresh.neighbours.bonded_entries() > 0 {
            fresh.neighbours.list_bonded();
            // Its bonded pairs' friction history is in the rows (`list_bonded_pairs`).
            if let Some(d) = &mut fresh.diss {
                d.drop_bond_history();
            }
        }
        fresh.set_state(state)?;
        // Bonds the fresh engine broke before their flags were loaded broke long ago.
        fresh.breaks.clear();
        fresh.watch = self.watch.take();
        fresh.solver = self.solver;
        *self = fresh;
        Ok(())
    }
}
