//! The CPU engine's step of `lgvi` (MODEL §12): every free particle moves as a rigid body —
//! the spheres of a clump together (their body's tensor), every other free sphere as a body of
//! its own (`J = jI`, where the map is `rrp-exact`'s). Fixed particles stay where they are.
//!
//! A step: each body's opening half kick, drift and rotation update (`integrator::lgvi::rotate`,
//! one Newton solve per body), its spheres placed (`x + R ρ_p`, `q ⊗ q_body_p`, and the half
//! step's velocities `v + Ω × R ρ_p`, Ω, which rupture's booking reads); the engine's evaluation
//! (per sphere, as for any run); each body's loads gathered from its spheres in member order
//! (`F = Σ F_p`, `RM = Σ RM_p + (R ρ_p) × F_p`); the closing half kick; the spheres' velocities
//! placed. Bodies are independent, so the passes run in parallel with per-body results folded in
//! body order: the same bits for any thread count.

use super::integrate::KinSums;
use super::{CpuEngine, ParticleAcc};
use crate::error::EngineError;
use crate::integrator::Kinematics;
use crate::integrator::lgvi::{NoRoot, rotate, rotate_scalar, scalar_of, spatial_omega, to_body};
use crate::model::Model;
use glam::{DMat3, DQuat, DVec3};
use rayon::prelude::*;

/// Bodies per parallel task (a body is a few hundred flops).
const BODY_MIN: usize = 1024;

/// A body's constants: its spheres, mass and tensor, and which clump it is.
#[derive(Clone, Debug)]
struct BodyConst {
    /// Its first particle and how many (a clump's members are a range).
    first: u32,
    len: u32,
    inv_mass: f64,
    mass: f64,
    j: DMat3,
    j_inv: DMat3,
    /// `j` where `J = jI` (a lone sphere): the rotation's root in closed form (`rotate_scalar`).
    scalar: Option<f64>,
    /// First slot of its members in `Rigid::rho`/`q_body`.
    slot: u32,
    /// The model's clump it is, `None` for a lone sphere.
    clump: Option<u32>,
}

/// One body's state: centre, velocity, attitude and body angular momentum `Π = J Rᵀ Ω`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct BodyKin {
    pub(crate) x: DVec3,
    pub(crate) v: DVec3,
    pub(crate) q: DQuat,
    pub(crate) pi: DVec3,
}

/// The rigid bodies of an `lgvi` run.
#[derive(Clone, Debug)]
pub(super) struct Rigid {
    bodies: Vec<BodyConst>,
    rho: Vec<DVec3>,
    q_body: Vec<DQuat>,
    /// Per particle: its body, or `u32::MAX` for a fixed particle.
    body_of: Vec<u32>,
    pub(super) state: Vec<BodyKin>,
    /// `F`, `RM` on each body at the current state.
    loads: Vec<(DVec3, DVec3)>,
}

impl Rigid {
    /// The bodies of `model`: its clumps, and every other free particle alone, in particle order.
    pub(super) fn new(model: &Model) -> Rigid {
        let p = &model.particles;
        let n = p.len();
        let mut clump_at = vec![u32::MAX; n];
        for (c, cl) in model.clumps.iter().enumerate() {
            clump_at[cl.members.start as usize] = c as u32;
        }
        let mut r = Rigid {
            bodies: Vec::new(),
            rho: Vec::new(),
            q_body: Vec::new(),
            body_of: vec![u32::MAX; n],
            state: Vec::new(),
            loads: Vec::new(),
        };
        let mut i = 0;
        while i < n {
            let b = r.bodies.len() as u32;
            let slot = r.rho.len() as u32;
            if clump_at[i] != u32::MAX {
                let c = &model.clumps[clump_at[i] as usize];
                let len = c.members.len();
                r.bodies.push(BodyConst {
                    first: i as u32,
                    len: len as u32,
                    inv_mass: 1.0 / c.mass,
                    mass: c.mass,
                    j: c.inertia,
                    j_inv: c.inertia.inverse(),
                    scalar: scalar_of(&c.inertia),
                    slot,
                    clump: Some(clump_at[i]),
                });
                r.rho.extend_from_slice(&c.rho);
                r.q_body.extend_from_slice(&c.q_body);
                r.state.push(BodyKin { x: c.x, v: c.v, q: c.q, pi: c.inertia * to_body(c.q, c.w) });
                r.body_of[i..i + len].fill(b);
                i += len;
                continue;
            }
            if !p.fixed[i] {
                let j = DMat3::from_diagonal(DVec3::splat(p.inertia[i]));
                r.bodies.push(BodyConst {
                    first: i as u32,
                    len: 1,
                    inv_mass: 1.0 / p.mass[i],
                    mass: p.mass[i],
                    j,
                    j_inv: DMat3::from_diagonal(DVec3::splat(1.0 / p.inertia[i])),
                    scalar: Some(p.inertia[i]),
                    slot,
                    clump: None,
                });
                r.rho.push(DVec3::ZERO);
                r.q_body.push(DQuat::IDENTITY);
                r.state.push(BodyKin { x: p.x[i], v: p.v[i], q: p.q[i], pi: to_body(p.q[i], p.inertia[i] * p.w[i]) });
                r.body_of[i] = b;
            }
            i += 1;
        }
        r.loads = vec![(DVec3::ZERO, DVec3::ZERO); r.bodies.len()];
        r
    }

    /// Each particle's contact group: its body, or a group of its own for a fixed particle. The
    /// spheres of one clump never interact (MODEL §12).
    pub(super) fn groups(&self) -> Vec<u32> {
        let nb = self.bodies.len() as u32;
        self.body_of.iter().enumerate().map(|(i, &b)| if b == u32::MAX { nb + i as u32 } else { b }).collect()
    }

    /// `F`, `RM` on each body at the current state.
    pub(super) fn loads(&self) -> Vec<(DVec3, DVec3)> {
        self.loads.clone()
    }

    /// Total mass of the bodies.
    pub(super) fn mass(&self) -> f64 {
        self.bodies.iter().map(|b| b.mass).sum()
    }

    /// What body `b` is, in words (for errors).
    fn name(&self, b: usize) -> String {
        let c = &self.bodies[b];
        match c.clump {
            // Inclusive, as a reader counts them (a one-sphere clump: "particle 0").
            Some(k) if c.len == 1 => format!("clump {k} (particle {})", c.first),
            Some(k) => format!("clump {k} (particles {} to {})", c.first, c.first + c.len - 1),
            None => format!("particle {}", c.first),
        }
    }

    /// Places every body's spheres: positions and attitudes (with `pose`; a closing kick leaves
    /// them) and velocities `v + Ω × Rρ`, Ω.
    fn place(&self, kin: &mut [Kinematics], pose: bool) {
        let (state, bodies, rho, q_body, body_of) = (&self.state, &self.bodies, &self.rho, &self.q_body, &self.body_of);
        kin.par_iter_mut().with_min_len(BODY_MIN).enumerate().for_each(|(i, k)| {
            let b = body_of[i];
            if b == u32::MAX {
                return;
            }
            let (c, s) = (&bodies[b as usize], &state[b as usize]);
            let slot = (c.slot + i as u32 - c.first) as usize;
            let r = s.q * rho[slot];
            let w = spatial_omega(s.q, &c.j_inv, s.pi);
            (k.v, k.w) = (s.v + w.cross(r), w);
            if pose {
                (k.x, k.q) = (s.x + r, s.q * q_body[slot]);
            }
        });
    }

    /// Gathers each body's load from its spheres' (member order).
    pub(super) fn gather(&mut self, acc: &[ParticleAcc]) {
        let (state, rho) = (&self.state, &self.rho);
        self.bodies
            .par_iter()
            .with_min_len(BODY_MIN)
            .zip(state.par_iter())
            .map(|(c, s)| {
                let (mut f, mut m) = (DVec3::ZERO, DVec3::ZERO);
                for k in 0..c.len as usize {
                    let a = &acc[c.first as usize + k];
                    f += a.force;
                    m += a.moment + (s.q * rho[c.slot as usize + k]).cross(a.force);
                }
                (f, m)
            })
            .collect_into_vec(&mut self.loads);
    }

    /// The opening half kick, drift and rotation of every body, its spheres placed; `Err` names
    /// the first body (in body order) whose rotation update has no root, and why (bodies before
    /// it moved).
    pub(super) fn open(&mut self, kin: &mut [Kinematics], h: f64) -> Result<(), (usize, String)> {
        let (bodies, loads) = (&self.bodies, &self.loads);
        let failed = self
            .state
            .par_iter_mut()
            .with_min_len(BODY_MIN)
            .enumerate()
            .filter_map(|(b, s)| {
                let (c, (f, rm)) = (&bodies[b], loads[b]);
                let v_h = s.v + f * (0.5 * h * c.inv_mass);
                let p = s.pi + to_body(s.q, rm) * (0.5 * h);
                let turned = match c.scalar {
                    Some(j) => rotate_scalar(s.q, p, h, j).map_err(|v| format!("h²|Ω_h|² = {v} ≥ 1")),
                    None => rotate(s.q, p, h, &c.j, &c.j_inv).map(|(q, pi, _)| (q, pi)).map_err(
                        |NoRoot { iterations, correction }| {
                            format!(
                                "{iterations} Newton iterations, last correction {correction:.3e} of |f|, tolerance \
                                 1e-15"
                            )
                        },
                    ),
                };
                match turned {
                    Ok((q, pi)) => {
                        *s = BodyKin { x: s.x + v_h * h, v: v_h, q, pi };
                        None
                    }
                    Err(e) => Some((b, e)),
                }
            })
            .min_by_key(|&(b, _)| b);
        if let Some(f) = failed {
            return Err(f);
        }
        self.place(kin, true);
        Ok(())
    }

    /// The closing half kick of every body with the loads gathered at the new state; its
    /// spheres' velocities placed.
    pub(super) fn close(&mut self, kin: &mut [Kinematics], h: f64) {
        let (bodies, loads) = (&self.bodies, &self.loads);
        self.state.par_iter_mut().with_min_len(BODY_MIN).enumerate().for_each(|(b, s)| {
            let (c, (f, rm)) = (&bodies[b], loads[b]);
            s.v += f * (0.5 * h * c.inv_mass);
            s.pi += to_body(s.q, rm) * (0.5 * h);
        });
        self.place(kin, false);
    }

    /// Kinetic sums of the bodies (body order), then of the fixed particles (particle order):
    /// `½ M |v|²`, `½ Π·J⁻¹Π`, `M v`, and for `Diagnostics` the spin `R Π` and `Σ M x`.
    pub(super) fn sums(&self, kin: &[Kinematics], mass: impl Fn(usize) -> f64) -> (KinSums, DVec3, DVec3, DVec3) {
        let mut ks = KinSums::default();
        let (mut spin, mut l, mut mx) = (DVec3::ZERO, DVec3::ZERO, DVec3::ZERO);
        for (c, s) in self.bodies.iter().zip(&self.state) {
            let p = c.mass * s.v;
            ks.e_trans += 0.5 * c.mass * s.v.length_squared();
            ks.e_rot += 0.5 * s.pi.dot(c.j_inv * s.pi);
            ks.p += p;
            let sp = s.q * s.pi;
            spin += sp;
            l += s.x.cross(p) + sp;
            mx += c.mass * s.x;
        }
        for (i, k) in kin.iter().enumerate() {
            if self.body_of[i] == u32::MAX {
                let m = mass(i);
                ks.e_trans += 0.5 * m * k.v.length_squared();
                ks.p += m * k.v;
                l += k.x.cross(m * k.v);
                mx += m * k.x;
            }
        }
        (ks, spin, l, mx)
    }

    /// The bodies' states as the user sees them: per clump its centre, velocity, attitude and
    /// spatial Ω (lone spheres are in the particles' state).
    pub(super) fn clump_states(&self) -> Vec<crate::engine::ClumpState> {
        self.bodies
            .iter()
            .zip(&self.state)
            .filter(|(c, _)| c.clump.is_some())
            .map(|(c, s)| crate::engine::ClumpState { x: s.x, v: s.v, q: s.q, w: spatial_omega(s.q, &c.j_inv, s.pi) })
            .collect()
    }
}

impl CpuEngine {
    /// One `lgvi` step (the caller took care of nothing else): open, evaluate, gather, close;
    /// the closed step's kinetic sums when the watch asks for them.
    pub(super) fn rigid_step(&mut self, energies: bool) -> Result<Option<KinSums>, EngineError> {
        let (h, step, t) = (self.dt, self.step, self.time());
        let rigid = self.rigid.as_mut().expect("an lgvi engine has its bodies");
        if let Err((b, detail)) = rigid.open(&mut self.kin, h) {
            return Err(EngineError::RigidSolve { what: rigid.name(b), step, t, detail });
        }
        self.step += 1;
        self.acc_zeroed = false;
        self.evaluate(energies, None)?;
        let rigid = self.rigid.as_mut().expect("an lgvi engine has its bodies");
        rigid.gather(&self.acc);
        rigid.close(&mut self.kin, h);
        Ok(self.watch.is_some().then(|| rigid.sums(&self.kin, |i| self.mass.get(i)).0))
    }
}
