//! The CPU engine's force evaluation: the bond pass (bond by bond on one thread, by ranges of
//! bonds in parallel, `scatter::BondRanges`; with each bonded pair's contact where it goes with
//! the bond, `CpuEngine::bond_contacts`), the bonds that break booked, then the particle pass
//! (the other contacts, walls, fields); and the diagnostics summed from the state and the
//! energies of the last evaluation.

use super::columns::{BondRef, Column, RefAttitudes};
use super::dissipation::PassInputs;
use super::pass::{parallel_bonds, run_pass};
use super::{BROKE_NOW, BROKEN, CpuEngine, INTACT, ParticleAcc};
use crate::diagnostics::Diagnostics;
use crate::engine::scatter::{BondEnergies, BondRanges, Disjoint, ENERGY_BLOCK, EndLoad, add_energies};
use crate::error::EngineError;
use crate::grid::PAR_MIN;
use crate::integrator::Kinematics;
use crate::interactions::rupture::{BOUND_SLACK_F64, bond_breaks, released_energy};
use crate::interactions::{
    BondOut, BreakEvent, ContactLoad, DashpotConsts, binder_damping, contact, contact_dissipation_with, dashpot_eta0,
    gravitation, gravity, hertz_constant, pendulum, wall,
};
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
        let bond_contacts = self.bond_contacts();
        if let Some(d) = &mut self.diss {
            d.bond_loads = d.coef.binder() || (bond_contacts && d.coef.pairs());
        }
        if parallel {
            // Where the bond pass gives dissipative loads the ranges store each end's two apart.
            match self.diss.as_mut().filter(|d| d.bond_loads) {
                Some(d) => cut_ranges(&mut d.ranges, n, &self.bonds),
                None => cut_ranges(&mut self.ranges, n, &self.bonds),
            }
        }
        self.place_neighbours(moved)?;
        if let Some(d) = &mut self.diss {
            d.prepare(&self.neighbours, bond_contacts);
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
    pub(super) fn place_neighbours(&mut self, moved: Option<bool>) -> Result<(), EngineError> {
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
    /// into `sums`. Where the bond pass evaluates the contacts of bonded pairs
    /// (`bond_contacts`), each bond's pair contact (intact or broken) is added to its force
    /// and its energy to `U_contact`. With binder damping, or the dashpots and sliders of those
    /// contacts (MODEL §10; the sliders' history per bond), each bond's dissipative loads are evaluated here, once per bond from the
    /// ends the bond's own terms loaded, and gathered in bond order into the dissipative loads
    /// (`DissState::loads`, which the ledger books apart; the particle pass adds the other
    /// contacts' and the walls' onto them and the sum into `acc`). Zeroes `acc` first unless
    /// the integration pass did.
    fn bond_pass(&mut self, parallel: bool, energies: bool, sums: &mut Sums) {
        let bonds = &self.bonds;
        let kin = &self.kin;
        let input = BondInputs {
            kin,
            prm: &self.params,
            bonds,
            ref_q: &self.ref_q,
            scale: &self.bond_scale,
            identity: self.ref_q.is_identity(),
        };
        let bond_eval = |k: usize, state: &mut u8| input.eval(k, state);
        let pairs = self.bond_contacts().then_some(BondContacts {
            radius: &self.radius,
            inv_mass: &self.inv_mass,
            k_contact: self.params.k_contact,
            group: self.group.as_deref(),
        });
        let pair_contact = |b: &BondRef, d: DVec3| pairs.as_ref().and_then(|p| p.bond_contact(b, d));
        if !std::mem::take(&mut self.acc_zeroed) {
            self.acc.fill(ParticleAcc::default());
        }
        let acc = Disjoint::new(&mut self.acc);
        let add = |p: usize, &(f, m): &EndLoad| {
            // SAFETY: `gather_bonds` adds into each particle from one task at a time.
            let a = unsafe { acc.get(p) };
            a.force += f;
            a.moment += m;
        };
        let ends = |k: usize| (bonds[k].i, bonds[k].j);
        let states = &mut self.bond_state;
        let Some(diss) = self.diss.as_mut().filter(|d| d.bond_loads) else {
            // What bond `k` puts on its ends i and j, and its energies; `None` when it puts
            // nothing (broken, its pair's contact not evaluated here or not touching).
            let loads = |k: usize, state: &mut u8| {
                let b = &bonds[k];
                let c = pair_contact(b, kin[b.i as usize].x - kin[b.j as usize].x);
                let bond = bond_eval(k, state).map(|(o, _, _)| o);
                bond_loads(bond, c).map(|(f, m_i, m_j, u)| ([(f, m_i), (-f, m_j)], u))
            };
            let plan = if parallel { self.ranges.as_mut() } else { None };
            gather_bonds(plan, states, ends, energies, sums, loads, add);
            return;
        };
        let (gamma, binder) = (diss.coef.binder, diss.coef.binder());
        let coef = diss.coef;
        let h = self.dt;
        diss.loads.fill(ParticleAcc::default());
        let dl = Disjoint::new(&mut diss.loads);
        // With pair friction, the bonded pairs' history: read at bond k, rewritten at bond k.
        let slider = diss.history.bond_history();
        // The bond's conservative and dissipative loads on each end, apart: its binder's
        // dashpots (intact), then its pair contact's dashpot and spring–slider.
        let loads = |k: usize, state: &mut u8| {
            let b = &bonds[k];
            let (ki, kj) = (&kin[b.i as usize], &kin[b.j as usize]);
            let d = ki.x - kj.x;
            let c = pair_contact(b, d);
            let bond = bond_eval(k, state).map(|(o, _, _)| o);
            let intact = bond.is_some();
            let Some((f, m_i, m_j, u)) = bond_loads(bond, c) else {
                if let Some((_, next)) = &slider {
                    // SAFETY: bond k's own entry; each bond is evaluated once per pass.
                    *unsafe { next.get(k) } = DVec3::ZERO;
                }
                return None;
            };
            let (mut df, mut dm_i, mut dm_j) = (DVec3::ZERO, DVec3::ZERO, DVec3::ZERO);
            if intact && binder {
                let bd = binder_damping(d, ki.v - kj.v, ki.w, kj.w, gamma);
                (df, dm_i, dm_j) = (bd.f_i, bd.m_i, bd.m_j);
            }
            let mut xi_new = DVec3::ZERO;
            if let (Some(p), Some(c), true) = (&pairs, &c, coef.pairs()) {
                // Without friction the slider's arguments are constants and its loads not
                // added, so that its code drops out of the damped models' pass.
                let (beta, kappa) = (coef.beta, coef.stiffness_ratio);
                if let Some((xi, _)) = &slider {
                    let o = p.bonded_dissipation(b, d, c.reach, ki, kj, xi[k], h, beta, coef.mu, kappa);
                    df += o.f_i;
                    dm_i += o.m_i;
                    dm_j += o.m_j;
                    xi_new = o.xi;
                } else {
                    df += p.bonded_dissipation(b, d, c.reach, ki, kj, DVec3::ZERO, 0.0, beta, 0.0, 0.0).f_i;
                }
            }
            if let Some((_, next)) = &slider {
                // SAFETY: as above.
                *unsafe { next.get(k) } = xi_new;
            }
            Some(([[(f, m_i), (df, dm_i)], [(-f, m_j), (-df, dm_j)]], u))
        };
        let add_both = |p: usize, [c, (f, m)]: &[EndLoad; 2]| {
            add(p, c);
            // SAFETY: as `add`'s.
            let a = unsafe { dl.get(p) };
            a.force += *f;
            a.moment += *m;
        };
        let plan = if parallel { diss.ranges.as_mut() } else { None };
        gather_bonds(plan, states, ends, energies, sums, loads, add_both);
    }

    /// The particle pass: each particle's deferred bond ends (parallel bond pass), contacts from
    /// the neighbour list in index order, walls, gravity and the pendulum field, written once
    /// into `acc`; with `energies` their energies and the wall force folded into `sums` in
    /// particle order.
    fn particle_pass(&mut self, parallel: bool, energies: bool, sums: &mut Sums) {
        let bond_contacts = self.bond_contacts();
        let (kin, prm) = (&self.kin, &self.params);
        // Where the bond pass gives dissipative loads the deferred ends are the dissipation's
        // (`DissPass::deferred`).
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
                parallel,
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
                for &[(f, m), _] in diss.as_ref().map_or(&[][..], |d| d.deferred(i)) {
                    fi += f;
                    mi += m;
                }
                let xi = kin[i].x;
                let ri = radius.get(i);
                let mut u_contact = 0.0;
                // The dissipative sums (MODEL §10), added after the conservative loads.
                let mut dp = diss.as_ref().map(|d| d.start(i));
                // `a`: the partner's place among i's contacts, where its friction history is.
                let partners = if bond_contacts { nbr.listed(i) } else { nbr.contacts(i) };
                for (a, j) in partners.enumerate() {
                    // The spheres of one clump never touch each other (MODEL §12).
                    if group.is_some_and(|g| g[i] == g[j]) {
                        continue;
                    }
                    let d = xi - kin[j].x;
                    let c = contact(d, ri + radius.get(j), prm.k_contact);
                    fi += c.force;
                    if j > i {
                        u_contact += c.energy;
                    }
                    // The contact's dashpot and slider from the same visit of the partner.
                    if let (Some(dd), Some(p)) = (&diss, &mut dp) {
                        dd.pair(p, a, j, d);
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
                if let (Some(d), Some(p)) = (&diss, dp) {
                    // The dissipative loads after the conservative ones (MODEL §10).
                    let (f, m, fw) = d.finish(i, p);
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
        } else {
            for (i, k) in self.kin.iter().enumerate() {
                let (m, j) = (self.mass.get(i), self.inertia.get(i));
                d.e_trans += 0.5 * m * k.v.length_squared();
                d.e_rot += 0.5 * j * k.w.length_squared();
                d.p += m * k.v;
                d.s += j * k.w;
                d.l += k.x.cross(m * k.v) + j * k.w;
                d.x_cm += m * k.x;
            }
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

/// What the bond pass reads to evaluate the contact of each bonded pair (`bond_contacts`).
struct BondContacts<'a> {
    radius: &'a Column<f64>,
    inv_mass: &'a Column<f64>,
    k_contact: f64,
    /// The particles' clumps (MODEL §12), whose spheres never touch each other.
    group: Option<&'a [u32]>,
}

/// A bonded pair's Hertz contact (`contact`), and its radius sum.
#[derive(Clone, Copy)]
struct PairContact {
    force: DVec3,
    energy: f64,
    reach: f64,
}

impl BondContacts<'_> {
    /// The contact of bond `b`'s particles at `d = x_i − x_j` (`interactions::contact`, the
    /// particle pass's law and operations), `None` where they do not touch or are spheres of
    /// one clump. The twin of WGSL `bond_contact_force` (shaders/bonds.wgsl).
    #[inline(always)]
    fn bond_contact(&self, b: &BondRef, d: DVec3) -> Option<PairContact> {
        let (i, j) = (b.i as usize, b.j as usize);
        if self.group.is_some_and(|g| g[i] == g[j]) {
            return None;
        }
        let reach = self.radius.get(i) + self.radius.get(j);
        if d.length_squared() >= reach * reach {
            return None;
        }
        let c = contact(d, reach, self.k_contact);
        Some(PairContact { force: c.force, energy: c.energy, reach })
    }

    /// The dissipative loads (MODEL §10, `contact_dissipation`: normal dashpot and, with
    /// `mu` > 0, spring–slider from ξ seen from end i, `xi`) of bond `b`'s touching
    /// particles `ki`, `kj` at `d = x_i − x_j`, radius sum `reach`; zero where they do not touch.
    /// Formed by the operations of `DissPass::pair` seen from end i, so that the same contact
    /// gives the same bits. The twin of WGSL `bonded_dissipation` (shaders/dissipation.wgsl),
    /// whose arguments are what these are read from there (the ends' velocities, the
    /// coefficients).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn bonded_dissipation(
        &self,
        b: &BondRef,
        d: DVec3,
        reach: f64,
        ki: &Kinematics,
        kj: &Kinematics,
        xi: DVec3,
        h: f64,
        beta: f64,
        mu: f64,
        kappa: f64,
    ) -> ContactLoad {
        let inv = self.inv_mass.get(b.i as usize) + self.inv_mass.get(b.j as usize);
        let l2 = d.length_squared();
        if !(l2 < reach * reach && l2 > 0.0 && inv > 0.0) {
            return ContactLoad::default();
        }
        let l = l2.sqrt();
        let s = reach - l;
        if s <= 0.0 {
            return ContactLoad::default();
        }
        let k_h = hertz_constant(self.k_contact, reach);
        let consts = DashpotConsts { k_h, eta0: dashpot_eta0(beta, 1.0 / inv, k_h) };
        let slider = || {
            let (ri, rj) = (self.radius.get(b.i as usize), self.radius.get(b.j as usize));
            (k_h * s * s.sqrt(), l * ri / reach, l * rj / reach)
        };
        contact_dissipation_with(d / l, s, &consts, slider, ki.v - kj.v, ki.w, kj.w, xi, h, mu, kappa)
    }
}

/// A bond's conservative loads with its pair's contact where the bond pass evaluates it: the
/// force on end i (its negative on j), the moments on i and j and the energies; `None` where it
/// exerts nothing (broken, its pair not touching or not evaluated here).
#[inline(always)]
fn bond_loads(bond: Option<BondOut>, c: Option<PairContact>) -> Option<(DVec3, DVec3, DVec3, BondEnergies)> {
    match (bond, c) {
        (Some(o), None) => Some((o.f_i, o.m_i, o.m_j, [o.u_bend, o.u_axial, o.u_shear, 0.0])),
        (Some(o), Some(c)) => Some((o.f_i + c.force, o.m_i, o.m_j, [o.u_bend, o.u_axial, o.u_shear, c.energy])),
        (None, Some(c)) => Some((c.force, DVec3::ZERO, DVec3::ZERO, [0.0, 0.0, 0.0, c.energy])),
        (None, None) => None,
    }
}

/// What the bond pass reads to evaluate a bond.
struct BondInputs<'a> {
    kin: &'a [Kinematics],
    prm: &'a crate::model::Params,
    bonds: &'a [BondRef],
    ref_q: &'a RefAttitudes,
    scale: &'a Column<f64>,
    identity: bool,
}

impl<'a> BondInputs<'a> {
    /// The result of intact bond `k` and its ends' states, or `None` when it is (or has just
    /// been) broken. Inlined into each pass that calls it (with and without binder damping).
    #[inline(always)]
    fn eval(&self, k: usize, state: &mut u8) -> Option<(BondOut, &'a Kinematics, &'a Kinematics)> {
        if *state != INTACT {
            *state = BROKEN;
            return None;
        }
        let (prm, b) = (self.prm, &self.bonds[k]);
        let (ki, kj) = (&self.kin[b.i as usize], &self.kin[b.j as usize]);
        let (dq_i, dq_j) = if self.identity {
            (ki.q, kj.q)
        } else {
            let (q_i0, q_j0) = self.ref_q.get(k, b);
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
                self.scale.get(k),
                sum,
                BOUND_SLACK_F64,
            ) {
                // Broken from this evaluation on: it exerts nothing from F_k on (MODEL §6).
                *state = BROKE_NOW + mode as u8;
                return None;
            }
        }
        Some((o, ki, kj))
    }
}

/// Cuts the parallel bond pass's ranges anew unless `plan` holds ranges cut for this pool.
pub(super) fn cut_ranges<L: Copy + Default + Send + Sync>(
    plan: &mut Option<BondRanges<L>>,
    n: usize,
    bonds: &[BondRef],
) {
    if !plan.as_ref().is_some_and(BondRanges::fits_pool) {
        *plan = Some(BondRanges::new(n, bonds.len(), |k| (bonds[k].i, bonds[k].j)));
    }
}

/// Runs `loads(k, &mut states[k])` for every bond and adds each end's load into its particle
/// (`add(p, load)`, each particle in bond order, one task at a time per particle): in parallel
/// by `plan`'s ranges when given (the ends past a particle's range stored there, for the
/// particle pass), else in bond order on this thread. With `energies`, the bond energies into
/// `sums`, by `ENERGY_BLOCK`s in block order either way.
fn gather_bonds<L: Copy + Default + Send + Sync>(
    plan: Option<&mut BondRanges<L>>,
    states: &mut [u8],
    ends: impl Fn(usize) -> (u32, u32) + Sync,
    energies: bool,
    sums: &mut Sums,
    loads: impl Fn(usize, &mut u8) -> Option<([L; 2], BondEnergies)> + Sync,
    add: impl Fn(usize, &L) + Sync,
) {
    let mut add_sums = |u: &BondEnergies| {
        sums.u_bend += u[0];
        sums.u_axial += u[1];
        sums.u_shear += u[2];
        sums.u_contact += u[3];
    };
    if let Some(plan) = plan {
        plan.pass(states, ends, loads, add);
        if energies {
            plan.block_energies().iter().for_each(add_sums);
        }
        return;
    }
    for (first, states) in (0..states.len()).step_by(ENERGY_BLOCK).zip(states.chunks_mut(ENERGY_BLOCK)) {
        let mut u = [0.0; 4];
        for (l, state) in states.iter_mut().enumerate() {
            let k = first + l;
            let Some(([load_i, load_j], e)) = loads(k, state) else { continue };
            let (i, j) = ends(k);
            add(i as usize, &load_i);
            add(j as usize, &load_j);
            add_energies(&mut u, &e);
        }
        if energies {
            add_sums(&u);
        }
    }
}
