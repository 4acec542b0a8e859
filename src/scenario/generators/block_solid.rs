//! The `block_solid` body: a box filled with lattice spheres by the same code as the solid torus
//! (for benchmarks and specimens).

use super::{Fill, LatticeKind, Region, SolidFields};
use crate::error::ScenarioError;
use crate::scenario::{Scenario, positive};
use glam::DVec3;
use serde::{Deserialize, Serialize};

/// A solid particle-binder box (see `docs/SCENARIOS.md` for every field and default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockSolid {
    /// Edge lengths along the local x, y, z axes.
    pub size: DVec3,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub particle_diameter: Option<f64>,
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
    /// Box centre; default: the leftmost sphere touches the plane x = gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub center: Option<DVec3>,
    #[serde(default)]
    pub gap: f64,
    /// Direction of the box's local z edge (default z: edges along the global axes).
    #[serde(default = "crate::scenario::default_z")]
    pub axis: DVec3,
    #[serde(default)]
    pub velocity: DVec3,
    #[serde(default)]
    pub angular_velocity: DVec3,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mass: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inertia: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub density: Option<f64>,
}

impl BlockSolid {
    /// Its shape's own fields (the size), which cost nothing to check (`Scenario::validate`).
    pub(crate) fn check_shape(&self, s: &Scenario, field: &str) -> Result<(), ScenarioError> {
        for (a, v) in self.size.to_array().into_iter().enumerate() {
            positive(s, &format!("{field}.size[{a}]"), v)?;
        }
        Ok(())
    }

    pub(crate) fn resolve(&self, s: &Scenario, field: &str) -> Result<Fill, ScenarioError> {
        self.check_shape(s, field)?;
        let fields = SolidFields {
            kind: "block_solid",
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
        fields.resolve(s, field, Region::block(self.size), self.size.min_element(), "size")
    }
}
