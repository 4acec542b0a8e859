//! Scenarios as data: the JSON schema (serde, unknown fields rejected), validation with errors
//! naming the file and field, and the geometry generators that turn a scenario into a `Model`.

mod bonds;
mod checks;
pub mod clump;
mod csv;
pub mod dissipation;
mod estimate;
pub use dissipation::{BinderDampingSpec, DEFAULT_STIFFNESS_RATIO, DampingSpec, FrictionSpec};
pub use estimate::memory_total;
pub mod generators;
pub mod inputs;
mod parse;
pub(crate) use parse::unfinished;

pub use crate::engine::Backend;
use crate::error::ScenarioError;
use crate::integrator::Integrator;
use crate::interactions::{Pendulum, Rupture, RuptureRule, ShearVariant, Wall};
use crate::model::{Clump, Model, Params, Particles};
use crate::rrp;
pub use bonds::BondSpec;
pub use checks::{MAX_BOND_REACH, MAX_WALL_OVERLAP};
pub use clump::{ClumpBody, ClumpSphere, GravitationSpec, MAX_GRAVITATION_PARTICLES};
pub use estimate::{BodySize, MAX_BONDS, SizeEstimate};
pub use generators::{BlockSolid, LatticeKind, MAX_BOND_TOLERANCE, Region, SolidInfo, TorusSolid};
use glam::{DQuat, DVec3};
use inputs::{InputFile, Inputs};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Below this many items validation runs on the calling thread (rayon's dispatch costs more).
const PAR_MIN: usize = 4096;

/// A scenario file (see `docs/SCENARIOS.md` for every field, its unit and default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub integrator: Integrator,
    /// Time step h.
    pub dt: f64,
    /// End time; the run takes `round(t_end/dt)` steps.
    pub t_end: f64,
    /// Record diagnostics every this many steps; 0 (the default): about `AUTO_RECORDS` rows per
    /// run (`record_interval`). Every record costs a GPU run a host wait and a readback.
    #[serde(default)]
    pub record_every: u64,
    /// Run even when `dt` exceeds the stability estimate.
    #[serde(default)]
    pub force_dt: bool,
    /// The energy guard: a run stops with an error when `|E + E_released + E_dissipated − E0| / E_scale` exceeds
    /// this at any checked step.
    #[serde(default = "default_max_energy_error")]
    pub max_energy_error: f64,
    #[serde(default)]
    pub backend: Backend,
    /// Precision of the GPU engine (the CPU engine is always f64); default f32 on a GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<crate::engine::Precision>,
    pub particle: ParticleDefaults,
    #[serde(default)]
    pub stiffness: Stiffness,
    #[serde(default)]
    pub shear: ShearVariant,
    #[serde(default)]
    pub walls: Vec<Wall>,
    #[serde(default)]
    pub gravity: DVec3,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pendulum: Option<Pendulum>,
    /// Binder rupture thresholds (MODEL §6); without it bonds never break.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rupture: Option<RuptureSpec>,
    /// Contact and binder damping (MODEL §10); without it nothing dissipates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damping: Option<DampingSpec>,
    /// Coulomb friction at contacts (MODEL §10); without it contacts are frictionless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub friction: Option<FrictionSpec>,
    /// Mutual gravitation between spheres of different clumps (MODEL §12); none without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gravitation: Option<GravitationSpec>,
    pub bodies: Vec<Body>,
    /// The order the engine runs the particles in (`crate::order`): `auto` (default) sorts
    /// them along a Morton curve when the input's numbering scatters neighbours through memory,
    /// `spatial` always, `input` never. Outputs keep the input's numbering either way.
    #[serde(default, skip_serializing_if = "crate::order::OrderChoice::is_auto")]
    pub particle_order: crate::order::OrderChoice,
    /// Steps between checks of the engine's particle order during the run (`auto` and
    /// `spatial`; `crate::order`); by default the engine's interval (CPU 1000, GPU 20 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_check_every: Option<u64>,
    /// Verlet skin of both engines' contact lists in units of the largest radius (`Params::skin`;
    /// docs/SCENARIOS.md). Part of the identity for `resume` (in GPU f32 it moves round-off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbour_skin: Option<f64>,
    /// Optional outputs beyond the standard files (VTK frames for ParaView). Not part of the
    /// scenario's identity for `resume` (it does not change the trajectory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSpec>,
    /// The file this scenario came from (CSV paths are relative to its folder).
    #[serde(skip)]
    pub source: PathBuf,
    /// Digests of the files the scenario reads (`csv` bodies), once its model was built or its
    /// checkpoint read (`inputs`); part of its identity for `resume`.
    #[serde(skip)]
    pub inputs: Inputs,
}

/// Rows of `series.csv` a run gets when `record_every` is not given.
pub const AUTO_RECORDS: u64 = 1000;

fn default_max_energy_error() -> f64 {
    DEFAULT_MAX_ENERGY_ERROR
}

/// Default limit of the energy guard (5 %): far above the error of any stable run (the paper's
/// torus stays below 3e-3), far below what a blow-up gives.
pub const DEFAULT_MAX_ENERGY_ERROR: f64 = 0.05;

/// `t_end` must be a whole number of steps within this fraction of `t_end`: a run takes
/// `round(t_end/dt)` steps, and an end time that far from `t_end` is not what was asked for.
pub const STEP_ROUNDING: f64 = 1e-3;

/// Smallest Weibull modulus of the rupture thresholds' scatter. Below 1 the scatter is wider
/// than an exponential distribution's (coefficient of variation above 1; at 0.1 the factors span
/// 10⁻¹⁶⁷ to 10⁹), and near 0.006 `Γ(1 + 1/m)` overflows, so that every scale is 0 or NaN.
/// Brittle materials have moduli of about 2 to 50.
pub const MIN_WEIBULL_MODULUS: f64 = 1.0;

/// Most steps a run may take: beyond it a run would not finish in a lifetime on any machine,
/// so a larger count is a typo (say `t_end` in the wrong unit), not a plan.
pub const MAX_STEPS: u64 = 1_000_000_000_000;

/// The `rupture` block: a threshold per channel (a channel without one never breaks a bond).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuptureSpec {
    /// Tensile strain `L/L0 − 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tension: Option<f64>,
    /// Shear angle (radians).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shear: Option<f64>,
    /// Bending angle (radians).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bending: Option<f64>,
    /// Twist angle (radians).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub twist: Option<f64>,
    #[serde(default)]
    pub rule: RuptureRule,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weibull: Option<WeibullSpec>,
}

/// The `output` block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    /// A VTK frame every this many steps (and at step 0 and the last step); `--vtk-every`
    /// overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtk_every: Option<u64>,
    #[serde(default)]
    pub vtk_precision: crate::vtk::VtkPrecision,
}

/// Per-bond scatter of the thresholds: a Weibull factor of unit mean.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeibullSpec {
    pub modulus: f64,
    #[serde(default)]
    pub seed: u64,
}

/// Defaults for every particle (a body or a particle may override them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParticleDefaults {
    pub mass: f64,
    pub inertia: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diameter: Option<f64>,
}

/// Stiffnesses K^m, K^a, K^s, K^pp, K^pw (`wall` defaults to `contact`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Stiffness {
    #[serde(default)]
    pub bending: f64,
    #[serde(default)]
    pub axial: f64,
    #[serde(default)]
    pub shear: f64,
    #[serde(default)]
    pub contact: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall: Option<f64>,
}

/// A group of particles (and bonds) made by a generator or listed explicitly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Body {
    TorusRing(TorusRing),
    TorusSolid(TorusSolid),
    BlockSolid(BlockSolid),
    Pendulum(PendulumBody),
    Particles(ParticleList),
    Csv(CsvBody),
    /// A rigid clump of spheres (MODEL §12; needs the integrator `lgvi`).
    Clump(ClumpBody),
}

/// A ring of `n` touching spheres in a plane, neighbours bonded (MODEL §5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorusRing {
    pub n: usize,
    /// Ring (torus) diameter D_t; give this or `particle_diameter` (`D_p = D_t sin(π/n)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torus_diameter: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub particle_diameter: Option<f64>,
    /// Ring centre; default `(D_t/2 + D_p/2 + gap, 0, 0)` (touching a wall at x = 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub center: Option<DVec3>,
    #[serde(default)]
    pub gap: f64,
    /// Unit normal of the ring's plane (default z: the ring lies in the x–y plane).
    #[serde(default = "default_z")]
    pub axis: DVec3,
    #[serde(default)]
    pub velocity: DVec3,
    #[serde(default)]
    pub angular_velocity: DVec3,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mass: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inertia: Option<f64>,
    #[serde(default = "yes")]
    pub bonded: bool,
}

pub(crate) fn default_z() -> DVec3 {
    DVec3::Z
}

pub(crate) fn yes() -> bool {
    true
}

/// The single body of the 3-D pendulum (MODEL §5): attitude `alpha` (RRP), angular velocity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendulumBody {
    #[serde(default)]
    pub alpha: DVec3,
    #[serde(default)]
    pub omega: DVec3,
    #[serde(default)]
    pub position: DVec3,
    /// Inertia tensor in the body frame (rows), making the pendulum a general rigid body moved
    /// by `lgvi` (MODEL §12); without it the sphere's scalar `particle.inertia`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inertia: Option<[[f64; 3]; 3]>,
}

/// Explicit particles and bonds (`[i, j]` or `[i, j, rest_length]`, indices into this body's
/// list).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParticleList {
    pub particles: Vec<ParticleSpec>,
    #[serde(default)]
    pub bonds: Vec<BondSpec>,
}

/// One explicit particle. The attitude is `q` = `[w, x, y, z]` or an RRP vector `alpha`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParticleSpec {
    pub x: DVec3,
    #[serde(default)]
    pub v: DVec3,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<[f64; 4]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<DVec3>,
    #[serde(default)]
    pub omega: DVec3,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mass: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inertia: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diameter: Option<f64>,
    #[serde(default)]
    pub fixed: bool,
}

/// Particles (and optionally bonds) from CSV files next to the scenario; see `docs/SCENARIOS.md`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvBody {
    pub particles: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bonds: Option<String>,
}

/// A body's particles and its bonds (indices within the body): as given (to be validated, with
/// the rest lengths given, by bond index within the body), or generated (valid by construction,
/// bonds sorted and unique).
enum BodyParts {
    Raw(Vec<RawParticle>, Vec<(u32, u32)>, Vec<(u32, f64)>),
    Generated(Box<generators::Generated>),
    /// A rigid body's spheres and the clump over them (members counted from 0).
    Rigid(Vec<RawParticle>, Box<Clump>),
}

/// The resolved geometry of a scenario before the bonds take their reference data: what
/// `rrpdem generate` writes and reports on.
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    pub particles: Particles,
    /// Bonds as particle index pairs (global indices).
    pub pairs: Vec<(u32, u32)>,
    /// The bonds given an explicit rest length: (bond index, `L0`), in bond order. The others
    /// rest at their initial distance.
    pub rest_lengths: Vec<(u32, f64)>,
    pub params: Params,
    /// Where each body's particles are, and what a solid body resolved to.
    pub bodies: Vec<BodyInfo>,
    /// The rigid clumps (MODEL §12), over global particle indices.
    pub clumps: Vec<Clump>,
}

/// One body of a `Geometry`.
#[derive(Clone, Debug, PartialEq)]
pub struct BodyInfo {
    /// Its particles' indices in the model.
    pub range: Range<usize>,
    /// For `torus_solid` and `block_solid`: the resolved shape, diameter, centre and frame.
    pub solid: Option<SolidInfo>,
}

impl Geometry {
    /// The model: every bond takes its reference data from the initial state, and its rest
    /// length where one was given (the reference direction stays the initial one).
    pub fn into_model(self) -> Model {
        let mut m = Model::new(self.particles, &self.pairs, self.params);
        for &(k, l0) in &self.rest_lengths {
            m.bonds[k as usize].l0 = l0;
        }
        m.clumps = self.clumps;
        m
    }

    /// The rest length given for bond `k`, if one was.
    pub fn rest_length(&self, k: usize) -> Option<f64> {
        let at = self.rest_lengths.binary_search_by_key(&(k as u32), |r| r.0).ok()?;
        Some(self.rest_lengths[at].1)
    }
}

/// Per-particle values a body resolved, before they are appended to the model.
pub(crate) struct RawParticle {
    pub x: DVec3,
    pub v: DVec3,
    pub q: DQuat,
    pub w: DVec3,
    pub mass: f64,
    pub inertia: f64,
    pub diameter: f64,
    pub fixed: bool,
}

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ScenarioError::Io { path: path.to_owned(), source })?;
        Scenario::from_json(&text, path)
    }

    /// Parses and validates scenario text; `path` names it in errors and anchors CSV paths.
    /// Errors name the field (`bodies[0].particles[3].x`) and the line.
    pub fn from_json(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let mut s = parse::parse(text, path)?;
        s.source = path.to_owned();
        s.validate()?;
        Ok(s)
    }

    pub(crate) fn invalid(&self, field: impl Into<String>, message: impl Into<String>) -> ScenarioError {
        ScenarioError::Invalid { path: self.source.clone(), field: field.into(), message: message.into() }
    }

    /// Checks every scalar setting and each generated body's own fields (the geometry itself,
    /// particle lists and files are checked when the model is built).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if !is_safe_name(&self.name) {
            return Err(self.invalid(
                "name",
                format!(
                    "`{}` cannot name the output folder: use letters, digits and `-_.+` (no path separators, not `.` \
                     or `..`, no control characters, no surrounding spaces)",
                    self.name.escape_debug()
                ),
            ));
        }
        positive(self, "dt", self.dt)?;
        positive(self, "t_end", self.t_end)?;
        let steps = self.t_end / self.dt;
        if steps.is_nan() || steps.round() > MAX_STEPS as f64 {
            return Err(self.invalid(
                "t_end",
                format!(
                    "t_end / dt = {steps:.3e} steps; at most {MAX_STEPS:.0e} are allowed (is t_end or dt in the wrong \
                     unit?)"
                ),
            ));
        }
        self.check_step_count()?;
        positive(self, "max_energy_error", self.max_energy_error)?;
        self.check_skin()?;
        if self.order_check_every == Some(0) {
            return Err(self.invalid(
                "order_check_every",
                "0 steps between checks of the particle order; give at least 1 (or leave it out for the engine's \
                 interval; particle_order \"input\" never checks)",
            ));
        }
        positive(self, "particle.mass", self.particle.mass)?;
        positive(self, "particle.inertia", self.particle.inertia)?;
        if let Some(d) = self.particle.diameter {
            positive(self, "particle.diameter", d)?;
        }
        let k = &self.stiffness;
        for (f, v) in [
            ("stiffness.bending", Some(k.bending)),
            ("stiffness.axial", Some(k.axial)),
            ("stiffness.shear", Some(k.shear)),
            ("stiffness.contact", Some(k.contact)),
            ("stiffness.wall", k.wall),
        ] {
            if let Some(v) = v {
                non_negative(self, f, v)?;
            }
        }
        for (n, w) in self.walls.iter().enumerate() {
            finite_vec(self, &format!("walls[{n}].point"), w.point)?;
            unit_direction(self, &format!("walls[{n}].normal"), w.normal)?;
        }
        finite_vec(self, "gravity", self.gravity)?;
        if let Some(p) = &self.pendulum {
            finite(self, "pendulum.g", p.g)?;
            finite_vec(self, "pendulum.rho0", p.rho0)?;
            unit_direction(self, "pendulum.up", p.up)?;
        }
        if let Some(r) = &self.rupture {
            let given = [("tension", r.tension), ("shear", r.shear), ("bending", r.bending), ("twist", r.twist)];
            for (f, v) in given {
                if let Some(v) = v {
                    positive(self, &format!("rupture.{f}"), v)?;
                }
            }
            if given.iter().all(|(_, v)| v.is_none()) {
                return Err(
                    self.invalid("rupture", "give a threshold for at least one of tension, shear, bending, twist")
                );
            }
            if let Some(w) = r.weibull
                && !(w.modulus.is_finite() && w.modulus >= MIN_WEIBULL_MODULUS)
            {
                return Err(self.invalid(
                    "rupture.weibull.modulus",
                    format!(
                        "must be a finite number ≥ {MIN_WEIBULL_MODULUS}, got {} (below 1 the thresholds' scatter is \
                         wider than an exponential distribution's; brittle materials have moduli of 2 to 50)",
                        num(w.modulus)
                    ),
                ));
            }
        }
        self.check_dissipation()?;
        self.check_rigid()?;
        if self.output.and_then(|o| o.vtk_every) == Some(0) {
            return Err(self.invalid("output.vtk_every", "must be ≥ 1"));
        }
        self.validate_bodies()
    }

    /// Refuses an end time that is not a whole number of steps (within `STEP_ROUNDING` of
    /// `t_end`), giving the step count and the nearest end times that are.
    fn check_step_count(&self) -> Result<(), ScenarioError> {
        let steps = self.total_steps();
        let end = steps as f64 * self.dt;
        if (end - self.t_end).abs() <= STEP_ROUNDING * self.t_end {
            return Ok(());
        }
        let below = (self.t_end / self.dt).floor().max(1.0);
        let above = (self.t_end / self.dt).ceil().max(1.0);
        Err(self.invalid(
            "t_end",
            format!(
                "t_end = {} is not a whole number of steps of dt = {} (t_end/dt = {}): the run would take {steps} \
                 step(s) and end at t = {}; give t_end = {} ({below} step(s)){}",
                num(self.t_end),
                num(self.dt),
                num(self.t_end / self.dt),
                num(end),
                num(below * self.dt),
                if above != below { format!(" or {} ({above} step(s))", num(above * self.dt)) } else { String::new() }
            ),
        ))
    }

    /// Steps between records: `record_every`, or for 0 the total steps over `AUTO_RECORDS`
    /// (at least 1).
    pub fn record_interval(&self) -> u64 {
        if self.record_every > 0 { self.record_every } else { self.total_steps().div_ceil(AUTO_RECORDS).max(1) }
    }

    /// Total number of steps: `t_end / dt` rounded to the nearest integer (at least 1).
    pub fn total_steps(&self) -> u64 {
        ((self.t_end / self.dt).round() as u64).max(1)
    }

    /// Builds the model: generates every body, checks particles and bonds, takes the bonds'
    /// reference data from the initial state.
    pub fn build_model(&self) -> Result<Model, ScenarioError> {
        Ok(self.build_geometry()?.into_model())
    }

    /// Generates every body and checks the particles and bonds given explicitly (generated ones
    /// are valid by construction). Checks run in parallel and format a field name only for the
    /// first failure, so millions of particles cost little. The model's size is checked first
    /// (`size_estimate`, `check_size`), so that nothing too large is allocated; the digests of
    /// the files read are recorded in `inputs` (or checked against those already there).
    pub fn build_geometry(&self) -> Result<Geometry, ScenarioError> {
        self.check_size(&self.size_estimate()?)?;
        let mut particles = Particles::default();
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        let mut rest_lengths: Vec<(u32, f64)> = Vec::new();
        let mut bodies = Vec::with_capacity(self.bodies.len());
        let mut clumps = Vec::new();
        let mut read = Vec::new();
        for (b, body) in self.bodies.iter().enumerate() {
            let field = format!("bodies[{b}]");
            let start = particles.len();
            let (count, bonds, solid) = match self.generate(body, &field, &mut read)? {
                BodyParts::Raw(raw, bonds, rest) => {
                    self.check_particles(&raw, &field)?;
                    self.check_bonds(&raw, &bonds, &field)?;
                    let first = pairs.len() as u32;
                    rest_lengths.extend(rest.iter().map(|&(k, l)| (first + k, l)));
                    for p in &raw {
                        particles.push(p.x, p.v, p.q.normalize(), p.w, p.mass, p.inertia, 0.5 * p.diameter, p.fixed);
                    }
                    (raw.len(), bonds, None)
                }
                BodyParts::Generated(g) => {
                    let g = *g;
                    let count = g.particles.len();
                    particles.append(g.particles);
                    (count, g.bonds, Some(g.solid))
                }
                BodyParts::Rigid(raw, clump) => {
                    self.check_particles(&raw, &field)?;
                    for p in &raw {
                        particles.push(p.x, p.v, p.q.normalize(), p.w, p.mass, p.inertia, 0.5 * p.diameter, p.fixed);
                    }
                    let at = start as u32;
                    clumps.push(Clump { members: clump.members.start + at..clump.members.end + at, ..*clump });
                    (raw.len(), vec![], None)
                }
            };
            if particles.len() > u32::MAX as usize / 2 {
                return Err(self.invalid("bodies", "too many particles"));
            }
            let offset = start as u32;
            if pairs.is_empty() && offset == 0 {
                pairs = bonds;
            } else {
                pairs.extend(bonds.iter().map(|&(i, j)| (i + offset, j + offset)));
            }
            bodies.push(BodyInfo { range: start..start + count, solid });
        }
        if pairs.len() as f64 > MAX_BONDS {
            return Err(self.invalid("bodies", format!("{} bonds in all; at most {MAX_BONDS:.3e}", pairs.len())));
        }
        self.check_gravitation_size(particles.len())?;
        let body_starts: Vec<usize> = bodies.iter().map(|b| b.range.start).collect();
        self.check_coincident(&particles, &body_starts)?;
        self.check_walls(&particles, &body_starts)?;
        self.check_motion(&particles, &body_starts)?;
        self.inputs.record(read, &self.source)?;
        Ok(Geometry { particles, pairs, rest_lengths, params: self.params(), bodies, clumps })
    }

    /// The digests of the files this scenario reads, as they are now (read, not parsed; the
    /// cache `inputs` is neither used nor set): what `resume --scenario` compares with the run's.
    pub fn input_digests(&self) -> Result<Vec<InputFile>, ScenarioError> {
        let dir = self.source.parent().unwrap_or(Path::new("."));
        let mut out = Vec::new();
        for (b, body) in self.bodies.iter().enumerate() {
            if let Body::Csv(c) = body {
                let digest = csv::digest(&dir.join(&c.particles))?;
                out.push(InputFile { field: format!("bodies[{b}].particles"), file: c.particles.clone(), digest });
                if let Some(f) = &c.bonds {
                    let digest = csv::digest(&dir.join(f))?;
                    out.push(InputFile { field: format!("bodies[{b}].bonds"), file: f.clone(), digest });
                }
            }
        }
        Ok(out)
    }

    /// The interaction parameters (stiffnesses, shear law, walls, fields, rupture) of this scenario.
    pub fn params(&self) -> Params {
        let k = &self.stiffness;
        Params {
            k_bend: k.bending,
            k_axial: k.axial,
            k_shear: k.shear,
            k_contact: k.contact,
            k_wall: k.wall.unwrap_or(k.contact),
            shear: self.shear,
            walls: self.walls.iter().map(|w| Wall { point: w.point, normal: w.normal.normalize() }).collect(),
            gravity: self.gravity,
            pendulum: self.pendulum.map(|p| Pendulum { up: p.up.normalize(), ..p }),
            rupture: self.rupture.as_ref().map(|r| {
                let inv = |t: Option<f64>| t.map_or(0.0, |t| 1.0 / t);
                Rupture {
                    inv_thresholds: [inv(r.tension), inv(r.shear), inv(r.bending), inv(r.twist)],
                    rule: r.rule,
                    weibull: r.weibull.map(|w| (w.modulus, w.seed)),
                }
            }),
            dissipation: self.dissipation(),
            gravitation: self.gravitation.map(|g| g.g),
            skin: self.neighbour_skin.unwrap_or(crate::grid::SKIN_FACTOR),
        }
    }

    /// A body's particles and bonds; the digests of the files it read are pushed to `read`.
    fn generate(&self, body: &Body, field: &str, read: &mut Vec<InputFile>) -> Result<BodyParts, ScenarioError> {
        let d = &self.particle;
        match body {
            Body::TorusRing(t) => self.torus_ring(t, field),
            Body::TorusSolid(t) => self.solid(&t.resolve(self, field)?, field),
            Body::BlockSolid(b) => self.solid(&b.resolve(self, field)?, field),
            Body::Pendulum(p) => {
                finite_vec(self, &format!("{field}.alpha"), p.alpha)?;
                let diameter = d.diameter.unwrap_or(1.0);
                let raw = RawParticle {
                    x: p.position,
                    v: DVec3::ZERO,
                    q: rrp::quat_from_rrp(p.alpha),
                    w: p.omega,
                    mass: d.mass,
                    inertia: d.inertia,
                    diameter,
                    fixed: false,
                };
                Ok(match self.pendulum_clump(p, &raw, field)? {
                    Some(c) => BodyParts::Rigid(vec![raw], Box::new(c)),
                    None => BodyParts::Raw(vec![raw], vec![], vec![]),
                })
            }
            Body::Clump(c) => {
                let (raw, clump) = self.clump(c, field)?;
                Ok(BodyParts::Rigid(raw, Box::new(clump)))
            }
            Body::Particles(list) => {
                let mut raw = Vec::with_capacity(list.particles.len());
                for (k, p) in list.particles.iter().enumerate() {
                    let pf = format!("{field}.particles[{k}]");
                    let q = match (p.q, p.alpha) {
                        (Some(_), Some(_)) => return Err(self.invalid(&pf, "give either `q` or `alpha`, not both")),
                        (Some([w, x, y, z]), None) => {
                            let q = DQuat::from_xyzw(x, y, z, w);
                            if !q.is_finite() || q.length() < 1e-12 {
                                return Err(self
                                    .invalid(format!("{pf}.q"), "must be a finite, non-zero quaternion [w, x, y, z]"));
                            }
                            q.normalize()
                        }
                        (None, Some(a)) => {
                            finite_vec(self, &format!("{pf}.alpha"), a)?;
                            rrp::quat_from_rrp(a)
                        }
                        (None, None) => DQuat::IDENTITY,
                    };
                    let diameter = p.diameter.or(d.diameter).ok_or_else(|| {
                        self.invalid(format!("{pf}.diameter"), "missing: give it here or as `particle.diameter`")
                    })?;
                    raw.push(RawParticle {
                        x: p.x,
                        v: p.v,
                        q,
                        w: p.omega,
                        mass: p.mass.unwrap_or(d.mass),
                        inertia: p.inertia.unwrap_or(d.inertia),
                        diameter,
                        fixed: p.fixed,
                    });
                }
                let mut rest = Vec::new();
                for (k, b) in list.bonds.iter().enumerate() {
                    if let Some(l0) = b.rest_length {
                        if let Some(m) = bonds::rest_length_fault(l0) {
                            return Err(self.invalid(format!("{field}.bonds[{k}]"), m));
                        }
                        rest.push((k as u32, l0));
                    }
                }
                Ok(BodyParts::Raw(raw, list.bonds.iter().map(|b| (b.i, b.j)).collect(), rest))
            }
            Body::Csv(c) => {
                let dir = self.source.parent().unwrap_or(Path::new("."));
                let (raw, digest) = csv::read_particles(&dir.join(&c.particles), d)?;
                read.push(InputFile { field: format!("{field}.particles"), file: c.particles.clone(), digest });
                let (bonds, rest) = match &c.bonds {
                    Some(b) => {
                        let (bonds, rest, digest) = csv::read_bonds(&dir.join(b))?;
                        read.push(InputFile { field: format!("{field}.bonds"), file: b.clone(), digest });
                        (bonds, rest)
                    }
                    None => (vec![], vec![]),
                };
                Ok(BodyParts::Raw(raw, bonds, rest))
            }
        }
    }

    /// Fills a lattice body; one that no lattice site fits into is an error.
    fn solid(&self, fill: &generators::Fill, field: &str) -> Result<BodyParts, ScenarioError> {
        let g = generators::fill(fill);
        if g.particles.is_empty() {
            return Err(self.invalid(
                field,
                format!(
                    "no {} site fits a whole sphere of D_p = {} inside the body: make it thicker or D_p smaller",
                    fill.lattice.as_str(),
                    num(fill.dp)
                ),
            ));
        }
        Ok(BodyParts::Generated(Box::new(g)))
    }

    /// Checks a ring's particle count: at least 3, at most `generators::MAX_PARTICLES`.
    pub(crate) fn ring_count(&self, t: &TorusRing, field: &str) -> Result<(), ScenarioError> {
        if t.n < 3 {
            return Err(self.invalid(format!("{field}.n"), format!("a ring needs at least 3 particles, got {}", t.n)));
        }
        if t.n as f64 > generators::MAX_PARTICLES {
            return Err(self.invalid(
                format!("{field}.n"),
                format!("{} particles; a body may have at most {:.0}", t.n, generators::MAX_PARTICLES),
            ));
        }
        Ok(())
    }

    fn torus_ring(&self, t: &TorusRing, field: &str) -> Result<BodyParts, ScenarioError> {
        self.ring_count(t, field)?;
        let s = (PI / t.n as f64).sin();
        let (dt, dp) = match (t.torus_diameter, t.particle_diameter.or(self.particle.diameter)) {
            (Some(_), Some(_)) if t.particle_diameter.is_some() => {
                return Err(self.invalid(field, "give either `torus_diameter` or `particle_diameter`, not both"));
            }
            (Some(dt), _) => {
                positive(self, &format!("{field}.torus_diameter"), dt)?;
                (dt, dt * s)
            }
            (None, Some(dp)) => {
                positive(self, &format!("{field}.particle_diameter"), dp)?;
                (dp / s, dp)
            }
            (None, None) => {
                return Err(
                    self.invalid(field, "missing `torus_diameter` or `particle_diameter` (or `particle.diameter`)")
                );
            }
        };
        finite(self, &format!("{field}.gap"), t.gap)?;
        finite_vec(self, &format!("{field}.velocity"), t.velocity)?;
        finite_vec(self, &format!("{field}.angular_velocity"), t.angular_velocity)?;
        unit_direction(self, &format!("{field}.axis"), t.axis)?;
        let center = t.center.unwrap_or(DVec3::new(0.5 * dt + 0.5 * dp + t.gap, 0.0, 0.0));
        finite_vec(self, &format!("{field}.center"), center)?;
        // An orthonormal frame (e1, e2) of the ring's plane; for axis z it is (x, y).
        let axis = t.axis.normalize();
        let e1 = if axis.abs_diff_eq(DVec3::Z, 1e-12) { DVec3::X } else { axis.any_orthonormal_vector() };
        let e2 = axis.cross(e1);
        let raw = (0..t.n)
            .map(|k| {
                let phi = 2.0 * PI * k as f64 / t.n as f64;
                RawParticle {
                    x: center + 0.5 * dt * (phi.cos() * e1 + phi.sin() * e2),
                    v: t.velocity,
                    q: DQuat::IDENTITY,
                    w: t.angular_velocity,
                    mass: t.mass.unwrap_or(self.particle.mass),
                    inertia: t.inertia.unwrap_or(self.particle.inertia),
                    diameter: dp,
                    fixed: false,
                }
            })
            .collect();
        let n = t.n as u32;
        let bonds = if t.bonded { (0..n).map(|k| (k, (k + 1) % n)).collect() } else { vec![] };
        Ok(BodyParts::Raw(raw, bonds, vec![]))
    }
}

/// A name that can be one path component of the output folder and nothing else.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.trim() == name
        && !name.chars().any(|c| c == '/' || c == '\\' || c == ':' || c.is_control())
}

/// A number as messages show it: the shortest text that reads back as the same f64, in
/// scientific notation when very large or small (`1e300`, not 301 digits).
pub fn num(v: f64) -> String {
    let t = format!("{v:?}");
    t.strip_suffix(".0").map(str::to_owned).unwrap_or(t)
}

/// A vector as messages show it: `[x, y, z]` with `num`.
pub fn vec3(v: DVec3) -> String {
    format!("[{}, {}, {}]", num(v.x), num(v.y), num(v.z))
}

pub(crate) fn finite(s: &Scenario, field: &str, v: f64) -> Result<(), ScenarioError> {
    if v.is_finite() { Ok(()) } else { Err(s.invalid(field, format!("must be a finite number, got {}", num(v)))) }
}

pub(crate) fn positive(s: &Scenario, field: &str, v: f64) -> Result<(), ScenarioError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(s.invalid(field, format!("must be a finite number > 0, got {}", num(v))))
    }
}

pub(crate) fn non_negative(s: &Scenario, field: &str, v: f64) -> Result<(), ScenarioError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(s.invalid(field, format!("must be a finite number ≥ 0, got {}", num(v))))
    }
}

pub(crate) fn finite_vec(s: &Scenario, field: &str, v: DVec3) -> Result<(), ScenarioError> {
    if v.is_finite() { Ok(()) } else { Err(s.invalid(field, format!("must be a finite vector, got {}", vec3(v)))) }
}

pub(crate) fn unit_direction(s: &Scenario, field: &str, v: DVec3) -> Result<(), ScenarioError> {
    finite_vec(s, field, v)?;
    if v.length() > 1e-12 { Ok(()) } else { Err(s.invalid(field, "must be a non-zero direction")) }
}
