//! The CPU engine's integration pass: one pass over the particles that makes the closing half
//! kick of a step, the watch's kinetic sums of the step it closes, and the opening kick, drift
//! and rotation of the next (`integrator::post_force`, `integrator::pre_force_kick_drift`), by
//! blocks so that the rotation updates' square roots pipeline.

use super::pass::serial;
use super::{CpuEngine, ParticleAcc};
use crate::grid::PAR_MIN;
use crate::integrator::{self, Integrator, Kinematics};
use crate::rrp;
use glam::{DQuat, DVec3};
use rayon::prelude::*;

/// Particles per block of the integration pass (its stage buffers live on the stack).
const INTEGRATE_BLOCK: usize = 64;

/// Kinetic sums of one block of particles at a closed step, for the watch (`Engine::set_watch`):
/// each block in particle order, the blocks folded in block order, so that the sums do not
/// depend on the thread count.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct KinSums {
    pub(super) e_trans: f64,
    pub(super) e_rot: f64,
    pub(super) p: DVec3,
    /// Work of the dissipative loads in this pass's closing and opening kicks (MODEL §10
    /// ledger), kept apart so that the ledger adds the same sums in the same order whether a
    /// pass makes both kicks or two passes make one each.
    pub(super) w_post: f64,
    pub(super) w_pre: f64,
    /// E_dissipated at the closed step: the ledger after the closing kick, before the opening
    /// kick of the next step that the same pass makes (set once the blocks are folded; 0 where
    /// nothing dissipates). The watch checks the energy at that node, whose kinetic energy the
    /// sums above hold: the ledger after both kicks would be ahead by the opening kick's work,
    /// about ½ h D·v (a guard that fails or a largest error that grows with `record_every`).
    pub(super) e_dissipated: f64,
}

impl KinSums {
    fn add(&mut self, o: &KinSums) {
        self.e_trans += o.e_trans;
        self.e_rot += o.e_rot;
        self.p += o.p;
        self.w_post += o.w_post;
        self.w_pre += o.w_pre;
    }
}

/// The work of dissipative loads `d` in a kick by `c` that took a particle from `a` to `b`
/// (MODEL §10 ledger): the kick changes ½ m v² by exactly (c/2) D·(a + b) (and ½ J Ω² likewise),
/// so booked kick by kick the ledger holds, at every node, the work actually applied. (Booking
/// both half kicks' share h D·v_{k+1} at node k+1 would be ahead by about ½ h D·v: a first-order
/// error at every node.)
#[inline(always)]
fn kick_work(c: f64, d: &ParticleAcc, a: &Kinematics, b: &Kinematics) -> f64 {
    0.5 * c * (d.force.dot(a.v + b.v) + d.moment.dot(a.w + b.w))
}

impl CpuEngine {
    /// One pass over the particles: with `post`, the closing half kick of the previous step;
    /// with `pre`, the first part of the next one (then `acc` is zeroed behind it, and the
    /// result says whether the skin rule asks for a rebuild, `grid::NeighbourList::moved`). With
    /// `post` and a watch, also the kinetic sums of the step it closes (`KinSums`).
    pub(super) fn integrate(&mut self, post: bool, pre: bool) -> (bool, Option<KinSums>) {
        let (h, integ) = (self.dt, self.integrator);
        if pre {
            self.set_anchor_drift(post);
        }
        let (inv_mass, inv_inertia, fixed, nbr) = (&self.inv_mass, &self.inv_inertia, &self.fixed, &self.neighbours);
        let (mass, inertia) = (&self.mass, &self.inertia);
        let sum = post && self.watch.is_some();
        // The ledger's share of each kick (`kick_work`).
        let loads = self.diss.as_ref().map(|d| &d.loads[..]);
        let (c_post, c_pre) = if integ == Integrator::Campello { (0.0, h) } else { (0.5 * h, 0.5 * h) };
        // Particles go by blocks, each stage over the whole block: the rotation update's two
        // square roots and reciprocals are then independent loops that pipeline (and pair up
        // in SIMD lanes) instead of one long latency chain per particle. Every particle gets
        // the operations of `pre_force`/`post_force`, in their order.
        let block = |base: usize, kin: &mut [Kinematics], acc: &mut [ParticleAcc]| -> (u8, KinSums) {
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
                    let before = *k;
                    integrator::post_force(integ, h, inv_m, inv_j, k, a.force, a.moment);
                    if let Some(l) = loads {
                        ks.w_post += kick_work(c_post, &l[i], &before, k);
                    }
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
                    let before = *k;
                    // rrp-exact's condition was checked before, so this does not fail; if it
                    // did, the rotation would be left alone as in `pre_force`.
                    if let Ok(d) = integrator::pre_force_kick_drift(integ, h, inv_m, inv_j, k, a.force, a.moment) {
                        dalpha[j] = d;
                        turn[j] = true;
                    }
                    if let Some(l) = loads {
                        ks.w_pre += kick_work(c_pre, &l[i], &before, k);
                    }
                }
            }
            if !pre {
                return (0, ks);
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
            let mut moved = 0u8;
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
        let mut moved = 0u8;
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
        if let Some(d) = self.diss.as_mut() {
            if post {
                d.e_dissipated -= total.w_post;
            }
            total.e_dissipated = d.e_dissipated;
            if pre {
                d.e_dissipated -= total.w_pre;
            }
        }
        (moved == crate::grid::MOVED_ALL, sum.then_some(total))
    }

    /// The skin rule's common displacement for the coming pass: the anchor's (particle 0's)
    /// position after it, computed as the pass will compute it (src/grid.rs; the GPU's twin is
    /// `drift_anchor` in shaders/integrate.wgsl).
    fn set_anchor_drift(&mut self, post: bool) {
        if self.kin.is_empty() {
            return;
        }
        let (h, integ) = (self.dt, self.integrator);
        // The anchor's (particle 0's) position after this pass, computed as the pass will
        // compute it: the skin rule is relative to its displacement (src/grid.rs; the GPU's
        // twin is `drift_anchor` in shaders/integrate.wgsl).
        let mut k = self.kin[0];
        let d = if self.fixed.get(0) {
            DVec3::ZERO
        } else {
            let (inv_m, inv_j, a) = (self.inv_mass.get(0), self.inv_inertia.get(0), &self.acc[0]);
            if post {
                integrator::post_force(integ, h, inv_m, inv_j, &mut k, a.force, a.moment);
            }
            let _ = integrator::pre_force_kick_drift(integ, h, inv_m, inv_j, &mut k, a.force, a.moment);
            self.neighbours.displacement(0, k.x)
        };
        self.neighbours.set_drift(d);
    }
}
