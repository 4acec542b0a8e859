//! The CPU reference engine: f64, parallel over bonds and particles with rayon, deterministic.
//!
//! Per step: per-bond terms are computed once into `bond_out`; each particle then gathers its
//! bond results through the CSR incidence list in a fixed order and adds its contacts (found in
//! the hashed grid, visited in a fixed order), walls and fields. Every output element is written
//! by exactly one task and every sum runs in a fixed order, so results do not depend on the
//! number of threads.

use super::{Engine, EngineInfo, EngineState, Precision, wrong_state_kind};
use crate::diagnostics::Diagnostics;
use crate::error::EngineError;
use crate::grid::NeighbourList;
use crate::integrator::{self, Integrator, Kinematics};
use crate::interactions::{BondOut, BreakEvent, contact, gravity, pendulum, rupture, rupture_measures, wall};
use crate::model::{Bond, Model, Params, bond_terms};
use glam::DVec3;
use rayon::prelude::*;

/// Below this many items a loop runs on the calling thread: rayon's dispatch costs more than
/// the work for small systems (the paper's 80-particle torus ran 4× slower in parallel).
const PAR_MIN: usize = 2048;

/// Runs `f(i, &mut item)` for every item, in parallel for large slices. Each item is written
/// by one call only, so the result does not depend on the schedule.
fn for_each_indexed<T: Send>(items: &mut [T], f: impl Fn(usize, &mut T) + Sync + Send) {
    if items.len() < PAR_MIN {
        items.iter_mut().enumerate().for_each(|(i, t)| f(i, t));
    } else {
        items.par_iter_mut().with_min_len(PAR_MIN / 4).enumerate().for_each(|(i, t)| f(i, t));
    }
}

/// The lowest index in `0..n` for which `pred` holds.
fn first_index(n: usize, pred: impl Fn(usize) -> bool + Sync + Send) -> Option<usize> {
    if n < PAR_MIN {
        (0..n).find(|&i| pred(i))
    } else {
        (0..n).into_par_iter().with_min_len(PAR_MIN / 4).find_first(|&i| pred(i))
    }
}

/// What one force evaluation gives a particle: force, spatial moment, its potential energies
/// (contact pairs with `j > i`, walls, gravity + pendulum) and the force of the walls on it.
#[derive(Clone, Copy, Debug, Default)]
struct ParticleAcc {
    force: DVec3,
    moment: DVec3,
    pot: [f64; 3],
    f_wall: DVec3,
}

/// One bond's result of a force evaluation and its rupture state.
#[derive(Clone, Copy, Debug, Default)]
struct BondSlot {
    out: BondOut,
    broken: bool,
    /// The channel that broke it in this evaluation, if it broke now.
    broke_now: Option<u8>,
    /// Its energy when it broke now.
    released: f64,
}

pub struct CpuEngine {
    integrator: Integrator,
    dt: f64,
    params: Params,
    kin: Vec<Kinematics>,
    mass: Vec<f64>,
    inertia: Vec<f64>,
    inv_m: Vec<f64>,
    inv_j: Vec<f64>,
    radius: Vec<f64>,
    fixed: Vec<bool>,
    bonds: Vec<Bond>,
    inc_offsets: Vec<u32>,
    inc_entries: Vec<u32>,
    bond_out: Vec<BondSlot>,
    /// Per-bond scale of the rupture thresholds (Weibull; 1 without).
    bond_scale: Vec<f64>,
    acc: Vec<ParticleAcc>,
    total_mass: f64,
    e_released: f64,
    n_broken: u64,
    /// Breaks not yet taken by `take_breaks`.
    breaks: Vec<BreakEvent>,
    neighbours: NeighbourList,
    step: u64,
    diag: Diagnostics,
    /// State at the start of the last `advance` (for `rollback`).
    saved: Saved,
}

impl CpuEngine {
    /// Builds the engine and evaluates the forces and diagnostics of the initial state.
    pub fn new(model: &Model, integrator: Integrator, dt: f64) -> Result<CpuEngine, EngineError> {
        let p = &model.particles;
        let n = p.len();
        let kin = (0..n).map(|i| Kinematics { x: p.x[i], v: p.v[i], q: p.q[i], w: p.w[i] }).collect();
        let inv =
            |a: &[f64]| -> Vec<f64> { a.iter().zip(&p.fixed).map(|(m, &f)| if f { 0.0 } else { 1.0 / m }).collect() };
        let (inc_offsets, inc_entries) = model.incidence();
        // A skin of 0.3 r_max: the list is rebuilt after a particle moves 0.15 r_max.
        let r_max = model.max_radius();
        let mut e = CpuEngine {
            integrator,
            dt,
            params: model.params.clone(),
            kin,
            mass: p.mass.clone(),
            inertia: p.inertia.clone(),
            inv_m: inv(&p.mass),
            inv_j: inv(&p.inertia),
            radius: p.radius.clone(),
            fixed: p.fixed.clone(),
            bonds: model.bonds.clone(),
            inc_offsets,
            inc_entries,
            bond_out: vec![BondSlot::default(); model.bonds.len()],
            bond_scale: model
                .params
                .rupture
                .map_or_else(Vec::new, |r| r.scales(model.bonds.iter().map(|b| (b.i, b.j)))),
            acc: vec![ParticleAcc::default(); n],
            total_mass: p.mass.iter().sum(),
            e_released: 0.0,
            n_broken: 0,
            breaks: Vec::new(),
            neighbours: NeighbourList::new(n, r_max, (0.3 * r_max).max(f64::MIN_POSITIVE)),
            step: 0,
            diag: Diagnostics::default(),
            saved: Saved::default(),
        };
        e.evaluate()?;
        e.diag = e.sum_diagnostics();
        Ok(e)
    }

    /// Force and spatial moment on every particle at the current state (for tests and tools).
    pub fn forces(&self) -> Vec<(DVec3, DVec3)> {
        self.acc.iter().map(|a| (a.force, a.moment)).collect()
    }

    /// Diagnostics of the current state without `&mut` (for tests and tools).
    pub fn clone_diagnostics(&self) -> Diagnostics {
        self.diag
    }

    /// How many times the contact neighbour list was rebuilt.
    pub fn neighbour_rebuilds(&self) -> u64 {
        self.neighbours.rebuilds()
    }

    fn time(&self) -> f64 {
        self.step as f64 * self.dt
    }

    /// Forces, moments and per-term energies at the current state.
    fn evaluate(&mut self) -> Result<(), EngineError> {
        let step = self.step;
        let t = self.time();
        let kin = &self.kin;
        self.neighbours.update(|i| kin[i].x, &self.radius).map_err(|i| {
            let x = kin[i].x;
            if x.is_finite() {
                EngineError::OutOfRange { particle: i, step, position: format!("{x}") }
            } else {
                EngineError::NonFinite { particle: i, step, t, what: format!("position {x}") }
            }
        })?;
        let prm = &self.params;
        let bonds = &self.bonds;
        let scale = &self.bond_scale;
        for_each_indexed(&mut self.bond_out, |k, slot| {
            slot.broke_now = None;
            if slot.broken {
                slot.out = BondOut::default();
                return;
            }
            let b = &bonds[k];
            let (ki, kj) = (&kin[b.i as usize], &kin[b.j as usize]);
            slot.out = bond_terms(b, ki.x, kj.x, ki.q, kj.q, prm);
            if let Some(r) = &prm.rupture {
                let (dq_i, dq_j) = (ki.q * b.q_i0.conjugate(), kj.q * b.q_j0.conjugate());
                let m = rupture_measures(prm.shear, ki.x - kj.x, b.l0, b.dhat0, dq_i, dq_j);
                if let Some(mode) =
                    rupture(m, r.inv_thresholds, scale[k], r.rule == crate::interactions::RuptureRule::Sum)
                {
                    // Broken from this evaluation on: it exerts nothing from F_k on (MODEL §6).
                    slot.broken = true;
                    slot.broke_now = Some(mode as u8);
                    slot.released = slot.out.u_bend + slot.out.u_axial + slot.out.u_shear;
                    slot.out = BondOut::default();
                }
            }
        });
        if self.params.rupture.is_some() {
            self.collect_breaks(t);
        }
        let (kin, prm) = (&self.kin, &self.params);
        let bond_out = &self.bond_out;
        let (off, ent) = (&self.inc_offsets, &self.inc_entries);
        let (radius, mass, nbr) = (&self.radius, &self.mass, &self.neighbours);
        for_each_indexed(&mut self.acc, |i, acc| {
            let (mut fi, mut mi) = (DVec3::ZERO, DVec3::ZERO);
            for &e in &ent[off[i] as usize..off[i + 1] as usize] {
                let o = &bond_out[(e >> 1) as usize].out;
                if e & 1 == 0 {
                    fi += o.f_i;
                    mi += o.m_i;
                } else {
                    fi -= o.f_i;
                    mi += o.m_j;
                }
            }
            let xi = kin[i].x;
            let mut u_contact = 0.0;
            for &j in nbr.partners(i) {
                let j = j as usize;
                let c = contact(xi - kin[j].x, radius[i] + radius[j], prm.k_contact);
                fi += c.force;
                if j > i {
                    u_contact += c.energy;
                }
            }
            let mut u_wall = 0.0;
            let mut f_wall = DVec3::ZERO;
            for w in &prm.walls {
                let c = wall(xi, radius[i], w.point, w.normal, prm.k_wall);
                fi += c.force;
                f_wall += c.force;
                u_wall += c.energy;
            }
            let mut u_grav = 0.0;
            if prm.gravity != DVec3::ZERO {
                let g = gravity(xi, mass[i], prm.gravity);
                fi += g.force;
                u_grav += g.energy;
            }
            if let Some(pd) = prm.pendulum {
                let g = pendulum(kin[i].q, mass[i], pd.g, pd.rho0, pd.up);
                mi += g.moment;
                u_grav += g.energy;
            }
            *acc = ParticleAcc { force: fi, moment: mi, pot: [u_contact, u_wall, u_grav], f_wall };
        });
        Ok(())
    }

    /// Books the bonds that broke in the evaluation just made, in bond order.
    fn collect_breaks(&mut self, t: f64) {
        let step = self.step;
        let (bonds, kin) = (&self.bonds, &self.kin);
        let found: Vec<BreakEvent> = self
            .bond_out
            .par_iter()
            .with_min_len(PAR_MIN)
            .enumerate()
            .filter_map(|(k, s)| {
                let mode = s.broke_now?;
                let b = &bonds[k];
                Some(BreakEvent {
                    step,
                    t,
                    bond: k as u32,
                    i: b.i,
                    j: b.j,
                    mode,
                    x: 0.5 * (kin[b.i as usize].x + kin[b.j as usize].x),
                    energy: s.released,
                })
            })
            .collect();
        for e in &found {
            self.e_released += e.energy;
        }
        self.n_broken += found.len() as u64;
        self.breaks.extend(found);
    }

    /// Sums the diagnostics of the current state in particle/bond order (deterministic).
    fn sum_diagnostics(&self) -> Diagnostics {
        let mut d = Diagnostics { step: self.step, t: self.time(), ..Default::default() };
        for (i, k) in self.kin.iter().enumerate() {
            let (m, j) = (self.mass[i], self.inertia[i]);
            d.e_trans += 0.5 * m * k.v.length_squared();
            d.e_rot += 0.5 * j * k.w.length_squared();
            d.p += m * k.v;
            d.s += j * k.w;
            d.l += k.x.cross(m * k.v) + j * k.w;
            let pot = self.acc[i].pot;
            d.u_contact += pot[0];
            d.u_wall += pot[1];
            d.u_gravity += pot[2];
            d.f_wall += self.acc[i].f_wall;
            d.x_cm += m * k.x;
        }
        d.x_cm /= self.total_mass;
        d.v_cm = d.p / self.total_mass;
        d.e_released = self.e_released;
        d.n_broken = self.n_broken;
        for o in self.bond_out.iter().map(|s| &s.out) {
            d.u_bend += o.u_bend;
            d.u_axial += o.u_axial;
            d.u_shear += o.u_shear;
        }
        d
    }

    /// First particle that violates `rrp-exact`'s condition at the coming half step, if any.
    fn check_exact_condition(&self) -> Option<(usize, f64)> {
        let h = self.dt;
        let value = |i: usize| {
            let wh = self.kin[i].w + self.acc[i].moment * (0.5 * h * self.inv_j[i]);
            integrator::rotation_increment(Integrator::RrpExact, h, wh).err()
        };
        let i = first_index(self.kin.len(), |i| !self.fixed[i] && value(i).is_some())?;
        value(i).map(|v| (i, v))
    }

    fn one_step(&mut self) -> Result<(), EngineError> {
        let h = self.dt;
        let integ = self.integrator;
        if integ == Integrator::RrpExact
            && let Some((particle, value)) = self.check_exact_condition()
        {
            return Err(EngineError::RrpExactCondition { particle, step: self.step, t: self.time(), value });
        }
        let (inv_m, inv_j, fixed, acc) = (&self.inv_m, &self.inv_j, &self.fixed, &self.acc);
        for_each_indexed(&mut self.kin, |i, k| {
            if !fixed[i] {
                // The condition was checked above, so this cannot fail.
                let _ = integrator::pre_force(integ, h, inv_m[i], inv_j[i], k, acc[i].force, acc[i].moment);
            }
        });
        self.step += 1;
        self.evaluate()?;
        let (inv_m, inv_j, fixed, acc) = (&self.inv_m, &self.inv_j, &self.fixed, &self.acc);
        for_each_indexed(&mut self.kin, |i, k| {
            if !fixed[i] {
                integrator::post_force(integ, h, inv_m[i], inv_j[i], k, acc[i].force, acc[i].moment);
            }
        });
        Ok(())
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
            broken: self.bond_out.iter().map(|s| s.broken).collect(),
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
        for (slot, b) in self.bond_out.iter_mut().zip(s.broken) {
            slot.broken = b;
        }
        self.e_released = s.e_released;
        self.n_broken = s.n_broken;
        // Breaks after this step never happened.
        self.breaks.retain(|e| e.step <= s.step);
        self.evaluate()?;
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
        self.saved.broken.extend(self.bond_out.iter().map(|s| s.broken));
        self.saved.e_released = self.e_released;
        self.saved.n_broken = self.n_broken;
        for _ in 0..steps {
            self.one_step()?;
        }
        self.check_finite()?;
        self.diag = self.sum_diagnostics();
        Ok(())
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

    fn guard_interval(&self) -> u64 {
        1
    }
}
