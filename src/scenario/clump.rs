//! Rigid bodies in a scenario (MODEL §12): the `clump` body (spheres moving as one body with a
//! full inertia tensor), the pendulum's optional tensor, mutual gravitation's field, and the
//! checks that tie them to the integrator `lgvi`.

use super::{Body, PendulumBody, RawParticle, Scenario, ScenarioError, finite_vec, num};
use crate::integrator::Integrator;
use crate::model::Clump;
use glam::{DMat3, DQuat, DVec3};
use serde::{Deserialize, Serialize};

/// Most particles a scenario with mutual gravitation may have: every pair is evaluated at every
/// step (5·10⁷ pairs, about a tenth of a second per step on one core).
pub const MAX_GRAVITATION_PARTICLES: usize = 10_000;

/// A rigid clump of spheres (MODEL §12). Positions are at t = 0 in the scenario frame, which is
/// the body frame (the clump starts unrotated).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClumpBody {
    pub spheres: Vec<ClumpSphere>,
    /// The clump's mass; default the spheres' masses summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mass: Option<f64>,
    /// Inertia tensor about `center` (rows; symmetric positive definite); default the spheres as
    /// solid spheres (`2/5 m r²`) with their parallel-axis terms about `center`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inertia: Option<[[f64; 3]; 3]>,
    /// The body's centre (its position `x`); default the spheres' centre of mass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub center: Option<DVec3>,
    #[serde(default)]
    pub velocity: DVec3,
    /// Spatial angular velocity Ω at t = 0.
    #[serde(default)]
    pub angular_velocity: DVec3,
}

/// One sphere of a clump: centre at t = 0, diameter and mass (defaults `particle.diameter` and
/// `particle.mass`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClumpSphere {
    pub x: DVec3,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diameter: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mass: Option<f64>,
}

/// Mutual gravitation between the spheres of different clumps (MODEL §12).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GravitationSpec {
    #[serde(rename = "G")]
    pub g: f64,
}

/// The inertia tensor of a solid sphere of mass `m` and radius `r` about its centre, as the
/// scalar every sphere of rrpdem has: `2/5 m r²`.
pub fn sphere_inertia(m: f64, r: f64) -> f64 {
    0.4 * m * r * r
}

/// Rows `[[…], […], […]]` as a matrix (the rows are the matrix's rows).
pub fn tensor(rows: &[[f64; 3]; 3]) -> DMat3 {
    DMat3::from_cols_array_2d(rows).transpose()
}

/// `½(J + Jᵀ)`: a tensor given symmetric to rounding, made exactly symmetric.
pub fn symmetric(j: DMat3) -> DMat3 {
    (j + j.transpose()) * 0.5
}

/// What is wrong with an inertia tensor, if anything: finite, symmetric (to 1e-12 of its
/// largest entry) and positive definite (its leading minors > 0).
pub fn tensor_fault(j: &DMat3) -> Option<String> {
    let a = j.to_cols_array();
    if a.iter().any(|v| !v.is_finite()) {
        return Some("must hold finite numbers".into());
    }
    let scale = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let asym = (*j - j.transpose()).to_cols_array().iter().fold(0.0f64, |m, v| m.max(v.abs()));
    if asym > 1e-12 * scale {
        return Some(format!("must be symmetric (rows and columns differ by up to {asym:e})"));
    }
    let m1 = j.x_axis.x;
    let m2 = j.x_axis.x * j.y_axis.y - j.x_axis.y * j.y_axis.x;
    let m3 = j.determinant();
    if !(m1 > 0.0 && m2 > 0.0 && m3 > 0.0) {
        return Some(format!(
            "must be positive definite (leading minors {}, {}, {}; all must be > 0)",
            num(m1),
            num(m2),
            num(m3)
        ));
    }
    None
}

impl Scenario {
    /// A clump's spheres (as particles moving with it) and the clump over them (members counted
    /// from 0; the caller offsets them).
    pub(super) fn clump(&self, c: &ClumpBody, field: &str) -> Result<(Vec<RawParticle>, Clump), ScenarioError> {
        if c.spheres.is_empty() {
            return Err(self.invalid(format!("{field}.spheres"), "is empty: a clump needs at least one sphere"));
        }
        let d = &self.particle;
        let mut spheres = Vec::with_capacity(c.spheres.len());
        for (k, s) in c.spheres.iter().enumerate() {
            let sf = format!("{field}.spheres[{k}]");
            finite_vec(self, &format!("{sf}.x"), s.x)?;
            let diameter = s.diameter.or(d.diameter).ok_or_else(|| {
                self.invalid(format!("{sf}.diameter"), "missing: give it here or as `particle.diameter`")
            })?;
            let mass = s.mass.unwrap_or(d.mass);
            for (name, v) in [("diameter", diameter), ("mass", mass)] {
                if !(v.is_finite() && v > 0.0) {
                    return Err(
                        self.invalid(format!("{sf}.{name}"), format!("must be a finite number > 0, got {}", num(v)))
                    );
                }
            }
            spheres.push((s.x, 0.5 * diameter, mass));
        }
        finite_vec(self, &format!("{field}.velocity"), c.velocity)?;
        finite_vec(self, &format!("{field}.angular_velocity"), c.angular_velocity)?;
        let m_spheres: f64 = spheres.iter().map(|s| s.2).sum();
        let mass = c.mass.unwrap_or(m_spheres);
        if !(mass.is_finite() && mass > 0.0) {
            return Err(
                self.invalid(format!("{field}.mass"), format!("must be a finite number > 0, got {}", num(mass)))
            );
        }
        let com = spheres.iter().map(|s| s.2 * s.0).sum::<DVec3>() / m_spheres;
        let center = match c.center {
            Some(x) => {
                finite_vec(self, &format!("{field}.center"), x)?;
                x
            }
            None => com,
        };
        // The body's kinetic energy is ½ M|v|² + ½ Ω·J Ω about `center`, which holds only where
        // `center` is the centre of mass of the body (M, J) describes: a body other than its
        // spheres' mass distribution must be given whole (the spheres then only carry its
        // contacts and, with their masses, the fields).
        let extent = spheres.iter().map(|s| (s.0 - com).length() + s.1).fold(0.0, f64::max);
        if c.mass.is_none() || c.inertia.is_none() {
            if (center - com).length() > 1e-12 * extent {
                return Err(self.invalid(
                    format!("{field}.center"),
                    format!(
                        "{} is not the spheres' centre of mass {}: a centre elsewhere needs the body's `mass` and \
                         `inertia` too (about that centre)",
                        super::vec3(center),
                        super::vec3(com)
                    ),
                ));
            }
            if c.inertia.is_none() && (mass - m_spheres).abs() > 1e-12 * m_spheres {
                return Err(self.invalid(
                    format!("{field}.mass"),
                    format!(
                        "{} is not the spheres' {}: a mass other than theirs needs the body's `inertia` too",
                        num(mass),
                        num(m_spheres)
                    ),
                ));
            }
        }
        let given = match &c.inertia {
            Some(rows) => tensor(rows),
            None => spheres.iter().fold(DMat3::ZERO, |j, &(x, r, m)| {
                let rho = x - center;
                let parallel = DMat3::from_diagonal(DVec3::splat(rho.length_squared()))
                    - DMat3::from_cols(rho * rho.x, rho * rho.y, rho * rho.z);
                j + DMat3::from_diagonal(DVec3::splat(sphere_inertia(m, r))) + m * parallel
            }),
        };
        if let Some(m) = tensor_fault(&given) {
            let hint = if c.inertia.is_none() { " (the default from the spheres; give `inertia`)" } else { "" };
            return Err(self.invalid(format!("{field}.inertia"), format!("{m}{hint}")));
        }
        // Symmetric to 1e-12 (checked); made exactly so.
        let inertia = symmetric(given);
        let (v, w) = (c.velocity, c.angular_velocity);
        let raw = spheres
            .iter()
            .map(|&(x, r, m)| RawParticle {
                x,
                v: v + w.cross(x - center),
                q: DQuat::IDENTITY,
                w,
                mass: m,
                inertia: sphere_inertia(m, r),
                diameter: 2.0 * r,
                fixed: false,
            })
            .collect::<Vec<_>>();
        let clump = Clump {
            members: 0..raw.len() as u32,
            mass,
            inertia,
            rho: spheres.iter().map(|s| s.0 - center).collect(),
            q_body: vec![DQuat::IDENTITY; raw.len()],
            x: center,
            v,
            q: DQuat::IDENTITY,
            w,
        };
        Ok((raw, clump))
    }

    /// The pendulum body as a general rigid body when it gives an `inertia` tensor (its body
    /// frame, which `alpha` turns): a clump of its one sphere.
    pub(super) fn pendulum_clump(
        &self,
        p: &PendulumBody,
        raw: &RawParticle,
        field: &str,
    ) -> Result<Option<Clump>, ScenarioError> {
        let Some(rows) = &p.inertia else { return Ok(None) };
        let given = tensor(rows);
        if let Some(m) = tensor_fault(&given) {
            return Err(self.invalid(format!("{field}.inertia"), m));
        }
        let inertia = symmetric(given);
        Ok(Some(Clump {
            members: 0..1,
            mass: raw.mass,
            inertia,
            rho: vec![DVec3::ZERO],
            q_body: vec![DQuat::IDENTITY],
            x: raw.x,
            v: raw.v,
            q: raw.q,
            w: raw.w,
        }))
    }

    /// Whether some body is a rigid body with a tensor (a clump, or a pendulum with `inertia`).
    pub fn has_clumps(&self) -> bool {
        self.bodies.iter().any(|b| match b {
            Body::Clump(_) => true,
            Body::Pendulum(p) => p.inertia.is_some(),
            _ => false,
        })
    }

    /// The checks of MODEL §12's fields against the rest of the scenario: clumps need `lgvi`,
    /// `lgvi` does not book dissipated work, `G` is a finite number > 0.
    pub(super) fn check_rigid(&self) -> Result<(), ScenarioError> {
        if let Some(g) = &self.gravitation
            && !(g.g.is_finite() && g.g > 0.0)
        {
            return Err(self.invalid("gravitation.G", format!("must be a finite number > 0, got {}", num(g.g))));
        }
        if self.has_clumps() && self.integrator != Integrator::Lgvi {
            return Err(self.invalid(
                "integrator",
                format!(
                    "`{}` moves spheres with a scalar moment of inertia; clumps and bodies with an `inertia` tensor \
                     need `lgvi` (MODEL §12)",
                    self.integrator
                ),
            ));
        }
        if self.integrator == Integrator::Lgvi && self.dissipation().is_some() {
            return Err(self.invalid(
                "integrator",
                "`lgvi` does not book the work of damping and friction (MODEL §10 ledger) yet; run them with \
                 rrp-newmark, rrp-exact or campello",
            ));
        }
        Ok(())
    }

    /// Refuses mutual gravitation over more than `MAX_GRAVITATION_PARTICLES` particles.
    pub(super) fn check_gravitation_size(&self, n: usize) -> Result<(), ScenarioError> {
        if self.gravitation.is_some() && n > MAX_GRAVITATION_PARTICLES {
            return Err(self.invalid(
                "gravitation",
                format!(
                    "{n} particles: mutual gravitation evaluates every pair at every step, which is reasonable up to \
                     {MAX_GRAVITATION_PARTICLES} particles"
                ),
            ));
        }
        Ok(())
    }
}
