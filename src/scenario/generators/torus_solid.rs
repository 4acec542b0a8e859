//! The `torus_solid` body (MODEL §7): a torus of centreline diameter D_t and tube diameter D_c
//! filled with lattice spheres, bonded to their neighbours.

use super::{Fill, LatticeKind, Region, SolidFields};
use crate::error::ScenarioError;
use crate::scenario::{Scenario, positive};
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// A solid particle-binder torus (see `docs/SCENARIOS.md` for every field and default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorusSolid {
    /// Centreline (torus) diameter D_t.
    pub torus_diameter: f64,
    /// Tube (cross-section) diameter D_c > D_p.
    pub tube_diameter: f64,
    /// Particle diameter D_p; or give `particles` (falls back to `particle.diameter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub particle_diameter: Option<f64>,
    /// Approximate particle count, from which D_p is solved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub particles: Option<u64>,
    #[serde(default)]
    pub lattice: LatticeKind,
    #[serde(default)]
    pub jitter: f64,
    #[serde(default)]
    pub polydispersity: f64,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "super::default_bond_tolerance")]
    pub bond_tolerance: f64,
    #[serde(default = "crate::scenario::yes")]
    pub bonded: bool,
    /// Torus centre; default: the leftmost sphere touches the plane x = gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub center: Option<DVec3>,
    #[serde(default)]
    pub gap: f64,
    /// Symmetry axis of the torus (default z: the torus lies in the x–y plane).
    #[serde(default = "crate::scenario::default_z")]
    pub axis: DVec3,
    #[serde(default)]
    pub velocity: DVec3,
    /// Rigid spin about the centre: `v_i = v + ω × (x_i − c)`, `Ω_i = ω`.
    #[serde(default)]
    pub angular_velocity: DVec3,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mass: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inertia: Option<f64>,
    /// Density ρ: `m = ρπD³/6`, `J = mD²/10` per particle (instead of `mass`/`inertia`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub density: Option<f64>,
}

impl TorusSolid {
    /// Its shape's own fields (diameters), which cost nothing to check (`Scenario::validate`).
    pub(crate) fn check_shape(&self, s: &Scenario, field: &str) -> Result<(), ScenarioError> {
        positive(s, &format!("{field}.torus_diameter"), self.torus_diameter)?;
        positive(s, &format!("{field}.tube_diameter"), self.tube_diameter)?;
        if self.tube_diameter > self.torus_diameter {
            return Err(s.invalid(
                format!("{field}.tube_diameter"),
                format!(
                    "{} exceeds torus_diameter {}: the tube would overlap itself",
                    self.tube_diameter, self.torus_diameter
                ),
            ));
        }
        Ok(())
    }

    pub(crate) fn resolve(&self, s: &Scenario, field: &str) -> Result<Fill, ScenarioError> {
        self.check_shape(s, field)?;
        let region = Region::torus(self.torus_diameter, self.tube_diameter);
        let fields = SolidFields {
            kind: "torus_solid",
            particle_diameter: self.particle_diameter,
            particles: self.particles,
            lattice: self.lattice,
            jitter: self.jitter,
            polydispersity: self.polydispersity,
            seed: self.seed,
            bond_tolerance: self.bond_tolerance,
            bonded: self.bonded,
            center: self.center,
            gap: self.gap,
            axis: self.axis,
            velocity: self.velocity,
            angular_velocity: self.angular_velocity,
            mass: self.mass,
            inertia: self.inertia,
            density: self.density,
        };
        fields.resolve(s, field, region, self.tube_diameter, "tube_diameter")
    }
}
