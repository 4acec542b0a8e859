//! The CPU engine's force evaluation: the bond pass (bond by bond on one thread, by ranges of
//! bonds in parallel, `scatter::BondRanges`), the bonds that break booked, then the particle
//! pass (contacts, walls, fields); and the diagnostics summed from the state and the energies of
//! the last evaluation.

use super::dissipation::PassInputs;
use super::pass::{parallel_bonds, run_pass};
use super::{BROKE_NOW, BROKEN, CpuEngine, INTACT, ParticleAcc};
use crate::diagnostics::Diagnostics;
use crate::engine::scatter::{BondRanges, ENERGY_BLOCK};
use crate::error::EngineError;
use crate::grid::PAR_MIN;
use crate::interactions::rupture::{BOUND_SLACK_F64, bond_breaks, released_energy};
use crate::interactions::{BondOut, BreakEvent, contact, gravitation, gravity, pendulum, wall};
use crate::model::{bond_terms_ref, bond_terms_rel};
use glam::DVec3;
use rayon::prelude::*;

/// Sums over particles and bonds of one evaluation, folded in index order (the same sequential
/// sums as over stored per-item values).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Sums {
    pub(super) u_bend: f64,
    pub(super) u_axial: f64,
    pub(super) u_shear: f64,
    pub(super) u_contact: f64,
    pub(super) u_wall: f64,
    pub(super) u_gravity: f64,
    pub(super) f_wall: DVec3,
}

impl CpuEngine {
    /// Forces and moments at the current state; with `energies`, also the energies and wall
    /// force summed into `sums` (needed at the end of an `advance` only). `moved`: whether some
    /// particle moved far enough to rebuild the neighbour list, when the caller knows.
    ///
    /// The bond pass adds each bond's result into its two ends' sums in bond order: directly on
    /// one thread (or for small systems), by ranges in parallel (`BondRanges`) otherwise. A
    /// broken bond adds nothing directly and +0 through a stored end, which changes no sum that
    /// starts at +0. The bond energies are summed per `ENERGY_BLOCK` of bonds on the way (a
    /// range is whole blocks), and the block sums added in order when asked for.
    pub(super) fn evaluate(&mut self, energies: bool, moved: Option<bool>) -> Result<(), EngineError> {
        let (nb, n) = (self.bonds.len(), self.kin.len());
        let parallel = parallel_bonds(nb);
        if parallel && !self.ranges.as_ref().is_some_and(BondRanges::fits_pool) {
            let bonds = &self.bonds;
            self.ranges = Some(BondRanges::new(n, nb, |k| (bonds[k].i, bonds[k].j)));
        }
        self.place_neighbours(moved)?;
        if let Some(d) = &mut self.diss {
            d.prepare(&self.neighbours);
        }
        let mut sums = Sums::default();
        self.bond_pass(parallel, energies, &mut sums);
        if self.params.rupture.is_some() {
            self.collect_breaks(self.time());
        }
        self.particle_pass(parallel, energies, &mut sums);
        if let Some(g) = self.params.gravitation {
            self.gravitation_pass(g, energies, &mut sums);
        }
        if energies {
            self.sums = sums;
        }
        Ok(())
    }

    /// Places the particles in the contact grid and rebuilds the neighbour list when one has
    /// moved far enough (`moved`, when the caller knows); a particle that cannot be placed is
    /// an error naming it.
    fn place_neighbours(&mut self, moved: Option<bool>) -> Result<(), EngineError> {
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
        Ok(())
    }

    /// The bond pass: each intact bond's force and moments into its two ends (in bond order),
    /// the bonds that break in this evaluation marked, and with `energies` the bond energies
    /// into `sums`. Zeroes `acc` first unless the integration pass did.
    fn bond_pass(&mut self, parallel: bool, energies: bool, sums: &mut Sums) {
        let nb = self.bonds.len();
        let kin = &self.kin;
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
    }

    /// The particle pass: each particle's deferred bond ends (parallel bond pass), contacts from
    /// the neighbour list in index order, walls, gravity and the pendulum field, written once
    /// into `acc`; with `energies` their energies and the wall force folded into `sums` in
    /// particle order.
    fn particle_pass(&mut self, parallel: bool, energies: bool, sums: &mut Sums) {
        let (kin, prm) = (&self.kin, &self.params);
        let deferred = if parallel { self.ranges.as_ref() } else { None };
        let (radius, mass, nbr) = (&self.radius, &self.mass, &self.neighbours);
        let group = self.group.as_deref();
        let diss = self.diss.as_mut().map(|d| {
            d.pass(PassInputs {
                h: self.dt,
                k_contact: prm.k_contact,
                k_wall: prm.k_wall,
                walls: &prm.walls,
                kin,
                radius,
                inv_mass: &self.inv_mass,
                bond_state: &self.bond_state,
            })
        });
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
                    // The spheres of one clump never touch each other (MODEL §12).
                    if group.is_some_and(|g| g[i] == g[j]) {
                        continue;
                    }
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
                if let Some(d) = &diss {
                    // The dissipative loads after the conservative ones (MODEL §10).
                    let (f, m, fw) = d.particle(i, nbr.partners(i));
                    fi += f;
                    mi += m;
                    f_wall += fw;
                }
                *acc = ParticleAcc { force: fi, moment: mi };
                [u_contact, u_wall, u_grav, f_wall.x, f_wall.y, f_wall.z]
            },
        );
    }

    /// Mutual gravitation (MODEL §12) of every two particles of different groups, constant `g`:
    /// each particle gathers its pairs in index order (each pair is evaluated from both ends, the
    /// two forces exact negatives), and the energy counts each pair once, from its lower index.
    /// Its forces are added after the particle pass's; its energy goes to `U_gravity`.
    fn gravitation_pass(&mut self, g: f64, energies: bool, sums: &mut Sums) {
        let (kin, mass, group) = (&self.kin, &self.mass, self.group.as_deref());
        let n = kin.len();
        let per = |i: usize| -> (DVec3, f64) {
            let (mut f, mut u) = (DVec3::ZERO, 0.0);
            for j in 0..n {
                if j == i || group.is_some_and(|gr| gr[i] == gr[j]) {
                    continue;
                }
                let o = gravitation(kin[i].x - kin[j].x, mass.get(i), mass.get(j), g);
                f += o.force;
                if j > i {
                    u += o.energy;
                }
            }
            (f, u)
        };
        let out: Vec<(DVec3, f64)> = (0..n).into_par_iter().with_min_len(64).map(per).collect();
        for (a, (f, _)) in self.acc.iter_mut().zip(&out) {
            a.force += *f;
        }
        if energies {
            sums.u_gravity += out.iter().map(|o| o.1).sum::<f64>();
        }
    }

    /// Books the bonds that broke in the evaluation just made, in bond order, with the energy
    /// each held (recomputed from the unchanged state: the same bits as in the evaluation).
    fn collect_breaks(&mut self, t: f64) {
        let (step, h) = (self.step, self.dt);
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
                    // At the initial evaluation no kick is missing: the potential alone.
                    energy: released_energy(
                        o.u_bend + o.u_axial + o.u_shear,
                        o.f_i,
                        o.m_i,
                        o.m_j,
                        ki.v - kj.v,
                        ki.w,
                        kj.w,
                        if step == 0 { 0.0 } else { h },
                    ),
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
    pub(super) fn sum_diagnostics(&self) -> Diagnostics {
        let mut d = Diagnostics { step: self.step, t: self.time(), ..Default::default() };
        if let Some(r) = &self.rigid {
            // lgvi: the bodies' kinetic energies and momenta (MODEL §12), then the fixed particles'.
            let (ks, spin, l, mx) = r.sums(&self.kin, |i| self.mass.get(i));
            (d.e_trans, d.e_rot, d.p, d.s, d.l, d.x_cm) = (ks.e_trans, ks.e_rot, ks.p, spin, l, mx);
        }
        for (i, k) in self.kin.iter().enumerate().filter(|_| self.rigid.is_none()) {
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
        d.e_dissipated = self.diss.as_ref().map_or(0.0, |x| x.e_dissipated);
        d.n_broken = self.n_broken;
        d.u_bend = s.u_bend;
        d.u_axial = s.u_axial;
        d.u_shear = s.u_shear;
        d
    }
}
