//! The time integrators: the three one-force-evaluation RRP maps of MODEL §2 and their
//! per-particle updates, and the names of the implicit energy–momentum schemes of MODEL §13
//! (`em`, `sm`; their step is `engine::cpu::implicit`, on the CPU engine only), and the Lie group
//! variational integrator of MODEL §12 (`lgvi`: its rotation update is `lgvi.rs`, its step over
//! rigid bodies `engine::cpu::rigid`, on the CPU engine only).
//!
//! An RRP step is split around the force evaluation: `pre_force` (kick, drift, rotation update)
//! and `post_force` (the closing half kick of maps 23/25). Both engines call exactly these.

pub mod discrete;
pub mod lgvi;

use crate::rrp;
use glam::{DQuat, DVec3};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Time integrator selected by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Integrator {
    /// Map (25): second order, explicit, `Δα = h Ω_h` (default).
    #[serde(rename = "rrp-newmark")]
    #[default]
    RrpNewmark,
    /// Map (23): second order, `Δα = 2h/(1 + sqrt(1 − h²|Ω_h|²)) Ω_h`; needs `h²|Ω_h|² < 1`.
    #[serde(rename = "rrp-exact")]
    RrpExact,
    /// Map (27): first order, symplectic-Euler-like.
    #[serde(rename = "campello")]
    Campello,
    /// Energy–momentum scheme (seed 004 §6.2, MODEL §13): implicit, second order, translation
    /// only; energy exact to the solver's tolerance, `P` and `L` exact. CPU engine only.
    #[serde(rename = "em")]
    Em,
    /// Symplectic–momentum midpoint scheme (seed 004 §6.1, MODEL §13): implicit, second order,
    /// translation only; `P` and `L` exact, energy bounded. CPU engine only.
    #[serde(rename = "sm")]
    Sm,
    /// Lie group variational integrator (seed 002, MODEL §12): rigid bodies with a full inertia
    /// tensor (clumps), second order, explicit in translation, a 3-unknown Newton solve per body
    /// for the rotation; on spheres it is map (23). CPU engine only.
    #[serde(rename = "lgvi")]
    Lgvi,
}

impl Integrator {
    /// The three RRP maps (MODEL §2), which every model and both engines run.
    pub const ALL: [Integrator; 3] = [Integrator::RrpNewmark, Integrator::RrpExact, Integrator::Campello];

    /// Every integrator: the RRP maps and the implicit schemes of MODEL §13.
    pub const EVERY: [Integrator; 6] = [
        Integrator::RrpNewmark,
        Integrator::RrpExact,
        Integrator::Campello,
        Integrator::Em,
        Integrator::Sm,
        Integrator::Lgvi,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Integrator::RrpNewmark => "rrp-newmark",
            Integrator::RrpExact => "rrp-exact",
            Integrator::Campello => "campello",
            Integrator::Em => "em",
            Integrator::Sm => "sm",
            Integrator::Lgvi => "lgvi",
        }
    }

    /// The implicit translation-only schemes of MODEL §13 (`em`, `sm`): CPU engine only, no
    /// interaction that couples rotations, no explicit stability limit on the step (the solve
    /// of each step has its own, an error when it does not converge).
    pub fn is_implicit(self) -> bool {
        matches!(self, Integrator::Em | Integrator::Sm)
    }

    /// Runs on the CPU engine only: the implicit schemes and `lgvi` (the GPU engine refuses them
    /// with an error naming the CPU engine; `backend: auto` picks the CPU for them).
    pub fn cpu_only(self) -> bool {
        self.is_implicit() || self == Integrator::Lgvi
    }

    /// Order of accuracy (2 for maps 23/25, 1 for map 27).
    pub fn order(self) -> u32 {
        match self {
            Integrator::Campello => 1,
            _ => 2,
        }
    }

    /// Integer code shared with the WGSL kernels (the GPU engine refuses `em`, `sm` and `lgvi` before it
    /// uploads one; their codes exist only to keep the mapping total).
    pub fn code(self) -> u32 {
        match self {
            Integrator::RrpNewmark => 0,
            Integrator::RrpExact => 1,
            Integrator::Campello => 2,
            Integrator::Em => 3,
            Integrator::Sm => 4,
            Integrator::Lgvi => 5,
        }
    }
}

impl fmt::Display for Integrator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Integrator {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Integrator::EVERY.into_iter().find(|i| i.as_str() == s).ok_or_else(|| {
            format!("unknown integrator `{s}` (expected rrp-newmark, rrp-exact, campello, em, sm or lgvi)")
        })
    }
}

/// Translational and rotational state of one integrated particle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Kinematics {
    pub x: DVec3,
    pub v: DVec3,
    pub q: DQuat,
    pub w: DVec3,
}

/// The rotation increment of one step, or `Err(h²|Ω_h|²)` when `rrp-exact`'s condition fails.
///
/// `rrp-newmark` and `campello`: `Δα = h Ω`. `rrp-exact`: `Δα = 2h/(1 + sqrt(1 − h²|Ω|²)) Ω`.
#[inline]
pub fn rotation_increment(integrator: Integrator, h: f64, w: DVec3) -> Result<DVec3, f64> {
    match integrator {
        Integrator::RrpExact => {
            let s = h * h * w.length_squared();
            if s.is_nan() || s >= 1.0 {
                return Err(s);
            }
            Ok(w * (2.0 * h / (1.0 + (1.0 - s).sqrt())))
        }
        _ => Ok(w * h),
    }
}

/// First part of a step, with `f`, `m` the force and spatial moment at step k.
///
/// Maps 23/25: half kick `v_h = v + h/(2m) F`, `Ω_h = Ω + h/(2J) RM`, then `x += h v_h` and
/// `q ← q(Δα) ⊗ q`. Map 27: full kick, then drift with the new velocities.
/// Returns `Err(h²|Ω_h|²)` when `rrp-exact` cannot take the step.
#[inline(always)]
pub fn pre_force(
    integrator: Integrator,
    h: f64,
    inv_m: f64,
    inv_j: f64,
    k: &mut Kinematics,
    f: DVec3,
    m: DVec3,
) -> Result<(), f64> {
    let dalpha = pre_force_kick_drift(integrator, h, inv_m, inv_j, k, f, m)?;
    k.q = rrp::apply_increment(k.q, dalpha);
    Ok(())
}

/// `pre_force` up to the rotation update: kick and drift, and the increment `Δα` that
/// `rrp::apply_increment` then applies to `q` (an engine may apply those of many particles
/// together). On `Err` nothing but the kick is done, as in `pre_force`.
#[inline(always)]
pub fn pre_force_kick_drift(
    integrator: Integrator,
    h: f64,
    inv_m: f64,
    inv_j: f64,
    k: &mut Kinematics,
    f: DVec3,
    m: DVec3,
) -> Result<DVec3, f64> {
    let kick = match integrator {
        Integrator::Campello => h,
        _ => 0.5 * h,
    };
    k.v += f * (kick * inv_m);
    k.w += m * (kick * inv_j);
    let dalpha = rotation_increment(integrator, h, k.w)?;
    k.x += k.v * h;
    Ok(dalpha)
}

/// Closing half kick of maps 23/25 with the force and moment at step k+1 (nothing for map 27).
#[inline(always)]
pub fn post_force(integrator: Integrator, h: f64, inv_m: f64, inv_j: f64, k: &mut Kinematics, f: DVec3, m: DVec3) {
    if integrator != Integrator::Campello {
        k.v += f * (0.5 * h * inv_m);
        k.w += m * (0.5 * h * inv_j);
    }
}
