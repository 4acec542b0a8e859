//! The 3-D pendulum's gravity torque about a fixed pivot (paper §3, eqs. 39–40 corrected).

use super::MomentOut;
use glam::{DQuat, DVec3};
use serde::{Deserialize, Serialize};

/// A heavy body on a fixed pivot: body-frame offset `rho0` of the centre of mass from the pivot,
/// field strength `g` along the unit direction `up` (the potential decreases along `up`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pendulum {
    pub g: f64,
    #[serde(default = "default_e3")]
    pub rho0: DVec3,
    #[serde(default = "default_e3")]
    pub up: DVec3,
}

fn default_e3() -> DVec3 {
    DVec3::Z
}

/// Pendulum potential of a particle with attitude `q`, mass `m`: with `b = R ρ0`,
/// `U = −m g up·b` (39) and `RM = m g b × up` (the paper's (40) drops `m g` and misplaces an `Rᵀ`).
#[inline]
pub fn pendulum(q: DQuat, m: f64, g: f64, rho0: DVec3, up: DVec3) -> MomentOut {
    let b = q * rho0;
    MomentOut { energy: -m * g * up.dot(b), moment: (m * g) * b.cross(up) }
}
