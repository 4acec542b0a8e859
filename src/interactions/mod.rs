//! Interactions of MODEL §3: each is a pure function returning its energy and its exact force
//! and spatial moment (`F = −∂U/∂x`, `RM = −∂U/∂θ` for a left perturbation `R → exp(S(δθ)) R`).
//!
//! Each function has a WGSL twin of the same name and argument order in `shaders/`.

pub mod axial;
pub mod bending;
pub mod contact;
pub mod damping;
pub mod gravitation;
pub mod gravity;
pub mod pendulum;
pub mod rupture;
pub mod shear;
pub mod wall;

pub use axial::axial;
pub use bending::bending;
pub use contact::contact;
pub use damping::{
    BondDamping, ContactLoad, DashpotConsts, Dissipation, binder_damping, contact_dissipation,
    contact_dissipation_with, dashpot_eta0, hertz_constant, restitution_beta,
};
pub use gravitation::gravitation;
pub use gravity::gravity;
pub use pendulum::{Pendulum, pendulum};
pub use rupture::{BreakEvent, Rupture, RuptureRule, rupture, rupture_measures};
pub use shear::{ShearVariant, shear};
pub use wall::{Wall, wall};

use glam::DVec3;

/// What a bond contributes to its two ends: force on `i` (the force on `j` is `−f_i`), spatial
/// moments on `i` and `j`, and its energies split by term.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BondOut {
    pub f_i: DVec3,
    pub m_i: DVec3,
    pub m_j: DVec3,
    pub u_bend: f64,
    pub u_axial: f64,
    pub u_shear: f64,
}

/// Energy and force of a central or one-body term.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ForceOut {
    pub energy: f64,
    pub force: DVec3,
}

/// Energy and spatial moment of a torque-only term.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MomentOut {
    pub energy: f64,
    pub moment: DVec3,
}
