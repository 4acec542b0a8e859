//! The scenario's `damping` and `friction` blocks (MODEL §10): their fields, their checks with
//! field-named errors, and the coefficients the engines use.

use super::{Scenario, ScenarioError, non_negative, num, positive};
use crate::interactions::{Dissipation, restitution_beta};
use serde::{Deserialize, Serialize};

/// The `damping` block (MODEL §10): every field optional, every default dissipation-free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DampingSpec {
    /// Coefficient of restitution of particle–particle impacts, in (0, 1] (1: no dashpot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restitution: Option<f64>,
    /// Coefficient of restitution against the walls (default: `restitution`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_restitution: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binder: Option<BinderDampingSpec>,
}

/// The `damping.binder` block: viscous coefficients of the binder (force per velocity for
/// `axial` and `shear`, moment per angular velocity for `bending` and `twist`), each ≥ 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BinderDampingSpec {
    #[serde(default)]
    pub axial: f64,
    #[serde(default)]
    pub shear: f64,
    #[serde(default)]
    pub bending: f64,
    #[serde(default)]
    pub twist: f64,
}

/// The `friction` block (MODEL §10).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrictionSpec {
    /// Coulomb coefficient μ between particles (≥ 0; 0: frictionless).
    #[serde(default)]
    pub coefficient: f64,
    /// Coulomb coefficient against the walls (default: `coefficient`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_coefficient: Option<f64>,
    /// Tangential to normal stiffness ratio κ (> 0; default 2/7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stiffness_ratio: Option<f64>,
}

/// Default tangential to normal stiffness ratio (MODEL §10).
pub const DEFAULT_STIFFNESS_RATIO: f64 = 2.0 / 7.0;

impl Scenario {
    /// The `damping` and `friction` blocks: restitutions in (0, 1], coefficients ≥ 0, κ > 0.
    pub(super) fn check_dissipation(&self) -> Result<(), ScenarioError> {
        if let Some(d) = &self.damping {
            for (f, v) in [("damping.restitution", d.restitution), ("damping.wall_restitution", d.wall_restitution)] {
                if let Some(e) = v
                    && !(e > 0.0 && e <= 1.0)
                {
                    return Err(self.invalid(
                        f,
                        format!("must be a coefficient of restitution in (0, 1] (1: no damping), got {}", num(e)),
                    ));
                }
            }
            if let Some(b) = &d.binder {
                for (f, v) in [("axial", b.axial), ("shear", b.shear), ("bending", b.bending), ("twist", b.twist)] {
                    non_negative(self, &format!("damping.binder.{f}"), v)?;
                }
            }
        }
        if let Some(f) = &self.friction {
            non_negative(self, "friction.coefficient", f.coefficient)?;
            if let Some(m) = f.wall_coefficient {
                non_negative(self, "friction.wall_coefficient", m)?;
            }
            if let Some(k) = f.stiffness_ratio {
                positive(self, "friction.stiffness_ratio", k)?;
            }
        }
        if self.integrator.is_implicit() && self.dissipation().is_some() {
            return Err(self.invalid(
                "integrator",
                format!(
                    "`{}` is a conservative scheme (MODEL §13); damping and friction run with rrp-newmark, rrp-exact \
                     or campello",
                    self.integrator
                ),
            ));
        }
        Ok(())
    }

    /// The dissipation coefficients of this scenario, `None` when nothing dissipates (every
    /// field absent, restitutions 1, coefficients 0): such a run is the conservative one, bit
    /// for bit.
    pub fn dissipation(&self) -> Option<Dissipation> {
        let d = self.damping.unwrap_or_default();
        let f = self.friction.unwrap_or_default();
        let e = d.restitution.unwrap_or(1.0);
        let b = d.binder.unwrap_or_default();
        let out = Dissipation {
            beta: restitution_beta(e),
            beta_wall: restitution_beta(d.wall_restitution.unwrap_or(e)),
            mu: f.coefficient,
            mu_wall: f.wall_coefficient.unwrap_or(f.coefficient),
            stiffness_ratio: f.stiffness_ratio.unwrap_or(DEFAULT_STIFFNESS_RATIO),
            binder: [b.axial, b.shear, b.bending, b.twist],
        };
        out.any().then_some(out)
    }
}
