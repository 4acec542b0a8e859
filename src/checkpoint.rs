//! Binary checkpoints: everything a run needs to continue bit-identically (`rrpdem resume`).
//!
//! Layout (little-endian), version 4 (versions 1 to 3 are still read: 3 and earlier have a hash
//! of a re-serialised scenario in the header, which is not checked; 2 and 1 have no particle
//! order; 1 has no reference positions either):
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `RRPDEMCK` |
//! | 4 | format version (u32) |
//! | 8 | FNV-1a 64 of the JSON block's bytes as stored (version 4) |
//! | 8 | payload length (u64) |
//! | … | payload |
//! | 4 | CRC-32 of everything before it |
//!
//! Payload: a length-prefixed JSON block (the resolved scenario, the digests of the files it
//! reads, the engine kind, the run's bookkeeping: energy/momentum budget, first and last
//! diagnostics, wall time), then the particles
//! (count, then x, v, q, Ω, mass, inertia, radius as f64 and `fixed` as one byte each), the bonds
//! (count, then per bond i, j as u32 and d̂0, L0, q_i0, q_j0 as f64), the particles' reference
//! positions (one byte, 1 if present, then x as f64 per particle: where they were when the
//! bonds were made, from which the GPU engine forms each bond's d0), the order the engine runs
//! them in (one byte, 1 if not the user's, then the engine's particles' and bonds' user indices
//! as u32: `crate::order`; the engine state is in that order), and the engine's own state
//! (its kind, step and raw bytes, [`EngineState`]). The particles' kinematics are the f64
//! snapshot (to rebuild the engine); the engine state carries the exact raw values.
//!
//! Files are written to a temporary name, synced, then renamed over the previous checkpoint, so
//! an interruption while writing leaves the previous checkpoint intact.
//!
//! # What a checkpoint is checked against
//! The CRC and the header's hash catch damage; they do not catch a checkpoint that was edited
//! and re-sealed, nor one that belongs elsewhere. So a checkpoint is held to three more things:
//!
//! 1. **Its own rules** (`from_bytes`, always): every particle's kinematics finite, its mass,
//!    moment of inertia and radius finite and > 0, its attitude a unit quaternion; every bond
//!    joining two different existing particles, once, with a finite reference length > 0, a
//!    unit reference direction and unit reference attitudes; the engine's step that of the last
//!    diagnostics. An error names the particle or bond and the field.
//! 2. **Its scenario** (`check_model`, before a resume): the model's constants are a function of
//!    the scenario (and the files it reads), so the scenario is built again and the checkpoint's
//!    masses, moments of inertia, radii, fixed flags, bonds and the bonds' reference data (from
//!    the positions at t = 0) must equal the rebuilt ones bit for bit. Only the kinematics may
//!    differ: they are the run's progress. A mass multiplied by 10⁶ is refused naming the
//!    particle, whatever the CRC says. The rebuild holds the geometry (about 130 bytes per
//!    particle and 8 per bond) beside the checkpoint's model, before the engine exists: less
//!    than the run itself needs. The files a scenario reads are hashed where it reads them (the
//!    digests travel in the JSON block), so an input edited since the run started is named.
//! 3. **The folder's run** (`check_folder`): the checkpoint's diagnostics at step 0 must be
//!    the first row of the folder's `series.csv`, bit for bit (both are the same numbers, written
//!    with 17 digits); the next row must lie at `t = step·dt` of the checkpoint's time step; the
//!    row of the checkpoint's step, where the run recorded one, must be its last diagnostics; and
//!    where the folder has a `summary.json` its scenario must be the checkpoint's. So another
//!    run's checkpoint copied into the folder is refused instead of splicing two runs into one
//!    `series.csv` (or keeping another run's frames). What no check can see: a run of the same
//!    scenario and time step on the same engine, which is the same run (deterministic), and a
//!    run of another scenario with the same start and time step whose folder has neither a
//!    `summary.json` nor a row at the checkpoint's step.
//!
//! Identities are compared by re-serialising both scenarios with the running code (never a
//! stored hash against a re-serialisation), so a change of the serialised form does not make
//! older checkpoints unreadable; `tests/data/checkpoint_v3` is a version-3 folder that must
//! keep resuming.

use crate::diagnostics::Diagnostics;
use crate::engine::EngineState;
use crate::guard::Budget;
use crate::model::{Bond, Model, Particles};
use crate::scenario::Scenario;
use crate::scenario::inputs::{self, InputFile};
use crate::stability::StabilityEstimate;
use glam::{DQuat, DVec3};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;

const MAGIC: &[u8; 8] = b"RRPDEMCK";
/// Version of the layout above.
pub const FORMAT_VERSION: u32 = 4;
/// Versions a reader accepts: this one, version 3 (header hash of a re-serialisation), version 2
/// (without particle order) and version 1 (without reference positions either).
const READABLE: [u32; 4] = [1, 2, 3, 4];
/// Name of the checkpoint file in an output folder.
pub const FILE_NAME: &str = "checkpoint.bin";

#[derive(Debug, Error)]
pub enum CheckpointError {
    #[error("{path}: cannot read or write the checkpoint: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not an rrpdem checkpoint (the file does not start with RRPDEMCK)")]
    NotACheckpoint { path: PathBuf },
    #[error("{path}: checkpoint format version {found}; this rrpdem reads versions 1 to {FORMAT_VERSION}")]
    Version { path: PathBuf, found: u32 },
    #[error("{path}: the checkpoint is truncated ({have} bytes, {need} expected); was it copied while being written?")]
    Truncated { path: PathBuf, have: u64, need: u64 },
    #[error(
        "{path}: the checkpoint has {extra} bytes after its end ({need} bytes expected); were bytes appended to it, or \
         two files joined?"
    )]
    TrailingBytes { path: PathBuf, extra: u64, need: u64 },
    #[error("{path}: the checkpoint is corrupted (checksum {found:08x}, expected {expected:08x})")]
    Corrupted { path: PathBuf, found: u32, expected: u32 },
    #[error("{path}: the checkpoint is malformed: {message}")]
    Malformed { path: PathBuf, message: String },
    #[error(
        "{path}: the checkpoint belongs to another scenario: {difference} (hash {found:016x}; {what} has \
         {expected:016x}); resume only continues the run that wrote it"
    )]
    OtherScenario { path: PathBuf, found: u64, expected: u64, what: String, difference: String },
    /// A file the checkpoint's scenario reads is not the one its run read (`message` names
    /// the field, the file and both digests).
    #[error("{path}: {message}; resume only continues the run that read it")]
    InputChanged { path: PathBuf, message: String },
    #[error("{path}: the checkpoint's model cannot be checked against its scenario: {source}")]
    Rebuild {
        path: PathBuf,
        #[source]
        source: Box<crate::error::ScenarioError>,
    },
    #[error("{path}: the checkpoint's model is not the one its scenario builds: {message}; was the checkpoint edited?")]
    ModelMismatch { path: PathBuf, message: String },
    #[error(
        "{path}: this checkpoint is not the run of the folder it is in: {reason}; resume continues only the run that \
         wrote the folder (was a checkpoint copied from another run?)"
    )]
    OtherRun { path: PathBuf, reason: String },
}

/// The run's bookkeeping carried across a restart (the JSON block).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunProgress {
    pub budget: Budget,
    /// Diagnostics at step 0 (the budget's reference).
    pub first: Diagnostics,
    /// Diagnostics at the checkpoint's step.
    pub last: Diagnostics,
    pub stability: StabilityEstimate,
    /// Wall time spent stepping before the checkpoint.
    pub wall_time_s: f64,
    /// The impact measures so far (MODEL §9; a checkpoint of an earlier version holds the
    /// record-cadence tracker, which loads into it: `ImpactWatch::upgrade`).
    pub impact: crate::impact::ImpactWatch,
    /// The energy guard so far (absent in checkpoints written before it watched every step:
    /// the resumed run rebuilds it from `budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_watch: Option<crate::guard::EnergyWatch>,
    /// Re-sorts of the particle order so far (absent in checkpoints written before them).
    #[serde(default)]
    pub resorts: Vec<crate::order::Resort>,
    /// Steps between the run's checks of its particle order (`None`: it makes none; also for
    /// checkpoints written before the checks existed), and why they were turned off if a
    /// renumbering failed: a resumed run keeps both.
    #[serde(default)]
    pub order_check: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_warning: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Meta {
    scenario: Scenario,
    scenario_source: PathBuf,
    /// Digests of the files the scenario reads, as its run read them (absent before version 4,
    /// or when the writer did not know them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inputs: Option<Vec<InputFile>>,
    engine_kind: String,
    progress: RunProgress,
}

/// A checkpoint in memory.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// The resolved scenario (overrides applied).
    pub scenario: Scenario,
    /// The model with its constants and bond reference data; its kinematics are those at the
    /// checkpoint's step (f64).
    pub model: Model,
    pub engine: EngineState,
    /// The order the engine ran the model in (its state is in that order); `None`: the user's.
    pub order: Option<crate::order::Order>,
    pub progress: RunProgress,
}

/// FNV-1a 64 of the scenario's JSON as the running code serialises it, with `t_end` (a resumed
/// run may go further) and `output` left out. Compare two scenarios with it, never a stored value
/// (another version may serialise differently).
pub fn scenario_json_hash(s: &Scenario) -> u64 {
    let text = serde_json::to_string(&hashed(s)).expect("a scenario serialises");
    inputs::fnv1a(inputs::fnv1a_start(), text.as_bytes())
}

/// What of a scenario `scenario_json_hash` hashes: all but its end time and its outputs.
fn hashed(s: &Scenario) -> Scenario {
    let mut s = s.clone();
    s.t_end = 0.0;
    s.output = None;
    s
}

/// The scenario's identity: `scenario_json_hash`, continued over the digests of the files it
/// reads where they are known (once its model was built: `Scenario::inputs`), so an edited
/// particle file makes another scenario.
pub fn scenario_hash(s: &Scenario) -> u64 {
    let mut h = scenario_json_hash(s);
    for f in s.inputs.get().unwrap_or_default() {
        h = inputs::fnv1a(h, f.field.as_bytes());
        h = inputs::fnv1a(h, &f.digest.bytes.to_le_bytes());
        h = inputs::fnv1a(h, &f.digest.fnv1a.to_le_bytes());
    }
    h
}

struct Out(Vec<u8>);

impl Out {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f64s(&mut self, vs: &[f64]) {
        for v in vs {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
}

fn vec3(v: DVec3) -> [f64; 3] {
    v.to_array()
}

fn quat(q: DQuat) -> [f64; 4] {
    [q.x, q.y, q.z, q.w]
}

impl Checkpoint {
    /// Encodes the checkpoint (header, payload, checksum).
    pub fn to_bytes(&self) -> Vec<u8> {
        let meta = Meta {
            scenario: self.scenario.clone(),
            scenario_source: self.scenario.source.clone(),
            inputs: self.scenario.inputs.get().map(<[InputFile]>::to_vec),
            engine_kind: self.engine.kind.clone(),
            progress: self.progress.clone(),
        };
        let p = &self.model.particles;
        let n = p.len();
        let mut body = Out(Vec::with_capacity(256 + n * 130 + self.model.bonds.len() * 96 + self.engine.data.len()));
        let meta = serde_json::to_vec(&meta).expect("checkpoint metadata serialises");
        body.bytes(&meta);
        body.u64(n as u64);
        for i in 0..n {
            body.f64s(&vec3(p.x[i]));
            body.f64s(&vec3(p.v[i]));
            body.f64s(&quat(p.q[i]));
            body.f64s(&vec3(p.w[i]));
            body.f64s(&[p.mass[i], p.inertia[i], p.radius[i]]);
            body.0.push(p.fixed[i] as u8);
        }
        body.u64(self.model.bonds.len() as u64);
        for b in &self.model.bonds {
            body.u32(b.i);
            body.u32(b.j);
            body.f64s(&vec3(b.dhat0));
            body.f64s(&[b.l0]);
            body.f64s(&quat(b.q_i0));
            body.f64s(&quat(b.q_j0));
        }
        match &self.model.reference_x {
            Some(x) => {
                debug_assert_eq!(x.len(), n, "a reference position per particle");
                body.0.push(1);
                for v in x {
                    body.f64s(&vec3(*v));
                }
            }
            None => body.0.push(0),
        }
        match &self.order {
            Some(o) => {
                body.0.push(1);
                for &k in o.particles.iter().chain(&o.bonds) {
                    body.u32(k);
                }
            }
            None => body.0.push(0),
        }
        body.bytes(self.engine.kind.as_bytes());
        body.u64(self.engine.step);
        body.bytes(&self.engine.data);

        let mut out = Out(Vec::with_capacity(body.0.len() + 40));
        out.0.extend_from_slice(MAGIC);
        out.u32(FORMAT_VERSION);
        out.u64(inputs::fnv1a(inputs::fnv1a_start(), &meta));
        out.u64(body.0.len() as u64);
        out.0.extend_from_slice(&body.0);
        let crc = crc32fast::hash(&out.0);
        out.u32(crc);
        out.0
    }

    /// Decodes a checkpoint, checking magic, version, length, checksum, the JSON block's hash
    /// (version 4) and the model's own rules (`validate`; see the module's documentation).
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Checkpoint, CheckpointError> {
        let path = path.to_owned();
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            return Err(CheckpointError::NotACheckpoint { path });
        }
        const HEADER: usize = 8 + 4 + 8 + 8;
        if bytes.len() < HEADER {
            return Err(CheckpointError::Truncated { path, have: bytes.len() as u64, need: HEADER as u64 + 4 });
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if !READABLE.contains(&version) {
            return Err(CheckpointError::Version { path, found: version });
        }
        let hash = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(bytes[20..28].try_into().expect("8 bytes"));
        let need = (HEADER as u64).saturating_add(len).saturating_add(4);
        if (bytes.len() as u64) < need {
            return Err(CheckpointError::Truncated { path, have: bytes.len() as u64, need });
        }
        if bytes.len() as u64 > need {
            return Err(CheckpointError::TrailingBytes { path, extra: bytes.len() as u64 - need, need });
        }
        let end = bytes.len() - 4;
        let expected = u32::from_le_bytes(bytes[end..].try_into().expect("4 bytes"));
        let found = crc32fast::hash(&bytes[..end]);
        if found != expected {
            return Err(CheckpointError::Corrupted { path, found, expected });
        }
        let mut r = Reader { b: &bytes[HEADER..end], at: 0, path: &path };
        let meta_bytes = r.bytes()?;
        if version >= 4 && inputs::fnv1a(inputs::fnv1a_start(), meta_bytes) != hash {
            return Err(r.bad("the JSON block does not match the header's hash".into()));
        }
        let meta: Meta = {
            let mut de = serde_json::Deserializer::from_slice(meta_bytes);
            serde_path_to_error::deserialize(&mut de)
                .map_err(|e| r.bad(format!("JSON block, field `{}`: {}", e.path(), e.inner())))?
        };
        let n = r.count(130)?;
        let mut particles = Particles::default();
        for _ in 0..n {
            let x = r.vec3()?;
            let v = r.vec3()?;
            let q = r.quat()?;
            let w = r.vec3()?;
            let [m, j, rad] = [r.f64()?, r.f64()?, r.f64()?];
            let fixed = r.take(1)?[0] != 0;
            particles.push(x, v, q, w, m, j, rad, fixed);
        }
        let nb = r.count(96)?;
        let mut bonds = Vec::with_capacity(nb);
        for k in 0..nb {
            let (i, j) = (r.u32()?, r.u32()?);
            if i as usize >= n || j as usize >= n {
                return Err(r.bad(format!("bond {k} joins particles {i} and {j}, but there are {n}")));
            }
            bonds.push(Bond { i, j, dhat0: r.vec3()?, l0: r.f64()?, q_i0: r.quat()?, q_j0: r.quat()? });
        }
        let reference_x = if version >= 2 && r.take(1)?[0] != 0 {
            Some((0..n).map(|_| r.vec3()).collect::<Result<Vec<_>, _>>()?)
        } else {
            None
        };
        let order = if version >= 3 && r.take(1)?[0] != 0 {
            let (particles, bonds) = (r.u32s(n)?, r.u32s(nb)?);
            Some(crate::order::Order::from_parts(particles, bonds, n, nb).map_err(|m| r.bad(m))?)
        } else {
            None
        };
        let kind = String::from_utf8(r.bytes()?.to_vec()).map_err(|_| r.bad("engine kind is not UTF-8".into()))?;
        let step = r.u64()?;
        let data = r.bytes()?.to_vec();
        if r.at != r.b.len() {
            return Err(r.bad(format!("{} bytes left over after the engine state", r.b.len() - r.at)));
        }
        let mut scenario = meta.scenario;
        scenario.source = meta.scenario_source;
        // The scenario is checked as a loaded one is (its numbers; the model is checked below).
        scenario.validate().map_err(|e| r.bad(format!("its scenario: {e}")))?;
        if let Some(files) = meta.inputs {
            scenario.inputs.set(files);
        }
        let params = scenario.params();
        let cp = Checkpoint {
            scenario,
            model: Model { particles, bonds, params, reference_x, user_ids: None, clumps: Vec::new() },
            engine: EngineState { kind, step, data },
            order,
            progress: meta.progress,
        };
        cp.validate().map_err(|m| r.bad(m))?;
        Ok(cp)
    }

    /// Reads and checks a checkpoint file.
    pub fn read(path: &Path) -> Result<Checkpoint, CheckpointError> {
        let bytes = std::fs::read(path).map_err(|source| CheckpointError::Io { path: path.to_owned(), source })?;
        Checkpoint::from_bytes(&bytes, path)
    }

    /// Writes the checkpoint atomically: a temporary file beside `path`, synced, then renamed.
    pub fn write(&self, path: &Path) -> Result<(), CheckpointError> {
        let io = |source| CheckpointError::Io { path: path.to_owned(), source };
        let tmp = path.with_extension("bin.tmp");
        {
            let mut f = std::fs::File::create(&tmp).map_err(io)?;
            f.write_all(&self.to_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Checks that this checkpoint belongs to `scenario`: everything but `t_end` and `output`
    /// equal, and the files it reads (as they are now) those the run read.
    pub fn check_scenario(&self, scenario: &Scenario, path: &Path, what: &str) -> Result<(), CheckpointError> {
        let (found, expected) = (scenario_json_hash(&self.scenario), scenario_json_hash(scenario));
        if found != expected {
            let json = |s: &Scenario| serde_json::to_value(hashed(s)).expect("a scenario serialises");
            let difference = crate::json_diff::first_difference(&json(&self.scenario), &json(scenario), what)
                .map_or_else(|| "the same fields, serialised differently".into(), |d| d.to_string());
            return Err(CheckpointError::OtherScenario {
                path: path.to_owned(),
                found,
                expected,
                what: what.into(),
                difference,
            });
        }
        let Some(then) = self.scenario.inputs.get() else { return Ok(()) };
        let now = scenario
            .input_digests()
            .map_err(|e| CheckpointError::Rebuild { path: path.to_owned(), source: Box::new(e) })?;
        for (t, n) in then.iter().zip(&now) {
            if t.digest != n.digest {
                return Err(CheckpointError::InputChanged {
                    path: path.to_owned(),
                    message: format!(
                        "field `{}` of the checkpoint's scenario reads `{}`, which is not the file its run started \
                         from ({} then; {} in {what})",
                        t.field, t.file, t.digest, n.digest
                    ),
                });
            }
        }
        Ok(())
    }
}

impl Checkpoint {
    /// The model's own rules (see the module's documentation, point 1): the first fault, naming
    /// the particle or bond and the field.
    fn validate(&self) -> Result<(), String> {
        use rayon::prelude::*;
        let p = &self.model.particles;
        let unit = |q: DQuat| q.is_finite() && (q.length() - 1.0).abs() <= UNIT_TOLERANCE;
        let fault = |i: usize| -> Option<String> {
            let vec =
                |name: &str, v: DVec3| (!v.is_finite()).then(|| format!("particle {i}: {name} {v} is not finite"));
            let pos = |name: &str, v: f64| {
                (!(v.is_finite() && v > 0.0)).then(|| format!("particle {i}: {name} {v:e} is not a finite number > 0"))
            };
            vec("x", p.x[i])
                .or_else(|| vec("v", p.v[i]))
                .or_else(|| vec("omega", p.w[i]))
                .or_else(|| {
                    (!unit(p.q[i])).then(|| format!("particle {i}: attitude {:?} is not a unit quaternion", p.q[i]))
                })
                .or_else(|| pos("mass", p.mass[i]))
                .or_else(|| pos("inertia", p.inertia[i]))
                .or_else(|| pos("radius", p.radius[i]))
                .or_else(|| {
                    let x = self.model.reference_x.as_ref()?[i];
                    vec("reference position", x)
                })
        };
        if let Some(m) = (0..p.len()).into_par_iter().with_min_len(4096).find_map_first(fault) {
            return Err(m);
        }
        let bonds = &self.model.bonds;
        let bond_fault = |k: usize| -> Option<String> {
            let b = &bonds[k];
            if b.i == b.j {
                return Some(format!("bond {k} joins particle {} to itself", b.i));
            }
            if !(b.l0.is_finite() && b.l0 > 0.0) {
                return Some(format!("bond {k}: reference length L0 = {:e} is not a finite number > 0", b.l0));
            }
            if !(b.dhat0.is_finite() && (b.dhat0.length() - 1.0).abs() <= UNIT_TOLERANCE) {
                return Some(format!("bond {k}: reference direction {} is not a unit vector", b.dhat0));
            }
            if !unit(b.q_i0) || !unit(b.q_j0) {
                return Some(format!("bond {k}: a reference attitude is not a unit quaternion"));
            }
            None
        };
        if let Some(m) = (0..bonds.len()).into_par_iter().with_min_len(4096).find_map_first(bond_fault) {
            return Err(m);
        }
        let mut keyed: Vec<(u32, u32, u32)> =
            bonds.iter().enumerate().map(|(k, b)| (b.i.min(b.j), b.i.max(b.j), k as u32)).collect();
        keyed.par_sort_unstable();
        if let Some(w) = keyed.windows(2).filter(|w| (w[0].0, w[0].1) == (w[1].0, w[1].1)).min_by_key(|w| w[1].2) {
            return Err(format!("bond {} joins particles {} and {} again (bond {})", w[1].2, w[0].0, w[0].1, w[0].2));
        }
        if self.engine.step != self.progress.last.step {
            return Err(format!(
                "the engine state is at step {}, its diagnostics at step {}",
                self.engine.step, self.progress.last.step
            ));
        }
        Ok(())
    }

    /// Checks the model against the one its scenario builds (the module's documentation, point
    /// 2): constants, bonds and the bonds' reference data bit for bit; the first difference is
    /// named. Builds the scenario's geometry (reading its files). Returns the scenario's clumps
    /// (MODEL §12: constants of the model that the checkpoint does not store; a clump's state is
    /// in the engine's).
    pub fn check_model(&self, path: &Path) -> Result<Vec<crate::model::Clump>, CheckpointError> {
        use rayon::prelude::*;
        let g = self
            .scenario
            .build_geometry()
            .map_err(|e| CheckpointError::Rebuild { path: path.to_owned(), source: Box::new(e) })?;
        let bad = |message: String| CheckpointError::ModelMismatch { path: path.to_owned(), message };
        let (p, q) = (&self.model.particles, &g.particles);
        if p.len() != q.len() || self.model.bonds.len() != g.pairs.len() {
            return Err(bad(format!(
                "{} particles and {} bonds; the scenario builds {} and {}",
                p.len(),
                self.model.bonds.len(),
                q.len(),
                g.pairs.len()
            )));
        }
        let same = |a: f64, b: f64| a.to_bits() == b.to_bits();
        let same3 = |a: DVec3, b: DVec3| same(a.x, b.x) && same(a.y, b.y) && same(a.z, b.z);
        let same4 = |a: DQuat, b: DQuat| same3(a.xyz(), b.xyz()) && same(a.w, b.w);
        let particle = |i: usize| -> Option<String> {
            let differs = |name: &str, a: f64, b: f64| {
                (!same(a, b)).then(|| format!("particle {i} has {name} {a:e}, its scenario gives {b:e}"))
            };
            differs("mass", p.mass[i], q.mass[i])
                .or_else(|| differs("moment of inertia", p.inertia[i], q.inertia[i]))
                .or_else(|| differs("radius", p.radius[i], q.radius[i]))
                .or_else(|| (p.fixed[i] != q.fixed[i]).then(|| format!("particle {i} has another `fixed` flag")))
                .or_else(|| {
                    let x = self.model.reference_x.as_ref()?[i];
                    (!same3(x, q.x[i]))
                        .then(|| format!("particle {i} started at {x}, its scenario puts it at {}", q.x[i]))
                })
        };
        if let Some(m) = (0..p.len()).into_par_iter().with_min_len(4096).find_map_first(particle) {
            return Err(bad(m));
        }
        let bond = |k: usize| -> Option<String> {
            let b = &self.model.bonds[k];
            let (i, j) = g.pairs[k];
            if (b.i, b.j) != (i, j) {
                return Some(format!("bond {k} joins particles {} and {}, its scenario's joins {i} and {j}", b.i, b.j));
            }
            let (dhat0, l0) = crate::model::bond_reference(q.x[i as usize] - q.x[j as usize]);
            let l0 = g.rest_length(k).unwrap_or(l0);
            let made_here = same3(b.dhat0, dhat0)
                && same(b.l0, l0)
                && same4(b.q_i0, q.q[i as usize])
                && same4(b.q_j0, q.q[j as usize]);
            (!made_here).then(|| {
                format!("bond {k}'s reference data (L0 = {:e}) is not that of its scenario (L0 = {l0:e})", b.l0)
            })
        };
        match (0..g.pairs.len()).into_par_iter().with_min_len(4096).find_map_first(bond) {
            Some(m) => Err(bad(m)),
            None => Ok(g.clumps),
        }
    }

    /// Checks that the checkpoint is the run of the folder `dir` (the module's documentation,
    /// point 3). A `series.csv` of another version's format is left to the series writer, which
    /// refuses it by its header.
    pub fn check_folder(&self, dir: &Path, path: &Path) -> Result<(), CheckpointError> {
        use std::io::{BufRead, Read};
        let other = |reason: String| CheckpointError::OtherRun { path: path.to_owned(), reason };
        let series = dir.join("series.csv");
        let io = |source| CheckpointError::Io { path: series.clone(), source };
        let mut reader = std::io::BufReader::new(std::fs::File::open(&series).map_err(io)?);
        let (mut header, mut first, mut second) = (String::new(), String::new(), String::new());
        // Lines of at most a few kB each: a longer one is not a series.csv this code wrote.
        reader.by_ref().take(1 << 16).read_line(&mut header).map_err(io)?;
        reader.by_ref().take(1 << 16).read_line(&mut first).map_err(io)?;
        reader.by_ref().take(1 << 16).read_line(&mut second).map_err(io)?;
        let h = header.trim_end();
        use crate::diagnostics::{FRAGMENT_SERIES_HEADER, LEGACY_SERIES_HEADER, SCALE_SERIES_HEADER, SERIES_HEADER};
        if ![SERIES_HEADER, FRAGMENT_SERIES_HEADER, SCALE_SERIES_HEADER, LEGACY_SERIES_HEADER].contains(&h) {
            return Ok(());
        }
        // A row is the diagnostics' columns, then (but in a legacy series.csv) the guard's scale,
        // then the three fragment columns, then (in this version's) `E_dissipated`.
        let row_is = |line: &str, d: &crate::diagnostics::Diagnostics| {
            let line = line.trim_end();
            let cols = d.csv_row();
            line == cols
                || line
                    .strip_prefix(&cols)
                    .is_some_and(|rest| rest.starts_with(',') && matches!(rest[1..].split(',').count(), 1 | 4 | 5))
        };
        if !row_is(&first, &self.progress.first) {
            return Err(other(format!(
                "its state at step 0 is not the first row of {} (another run started there)",
                series.display()
            )));
        }
        // The next row, if the checkpoint's run wrote it, is at t = step·dt of its time step
        // (both engines compute t so): another run of the same start with another dt is not.
        let mut cells = second.trim_end().split(',');
        let row = (cells.next().and_then(|c| c.parse::<u64>().ok()), cells.next().and_then(|c| c.parse::<f64>().ok()));
        if let (Some(step), Some(t)) = row
            && second.ends_with('\n')
            && step <= self.engine.step
            && t.to_bits() != (step as f64 * self.scenario.dt).to_bits()
        {
            return Err(other(format!(
                "{} has step {step} at t = {t:e}; the checkpoint's run, with dt = {:e}, was at {:e}",
                series.display(),
                self.scenario.dt,
                step as f64 * self.scenario.dt
            )));
        }
        // The row of the checkpoint's step, where the run recorded one, is its last diagnostics.
        let last = &self.progress.last;
        let mut line = second;
        loop {
            if !line.ends_with('\n') {
                break;
            }
            match line.split(',').next().and_then(|c| c.parse::<u64>().ok()) {
                Some(step) if step == self.engine.step => {
                    if !row_is(&line, last) {
                        return Err(other(format!(
                            "its state at step {step} is not the row of that step in {}",
                            series.display()
                        )));
                    }
                    break;
                }
                Some(step) if step < self.engine.step => {}
                _ => break,
            }
            line.clear();
            reader.by_ref().take(1 << 16).read_line(&mut line).map_err(io)?;
        }
        let summary = dir.join("summary.json");
        let text = match std::fs::read_to_string(&summary) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(CheckpointError::Io { path: summary, source }),
        };
        // A summary this version cannot read (another version's fields) says nothing either way.
        let scenario = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|mut v| v.get_mut("scenario").map(serde_json::Value::take))
            .and_then(|v| serde_json::from_value::<Scenario>(v).ok());
        match scenario {
            Some(s) if scenario_json_hash(&s) != scenario_json_hash(&self.scenario) => {
                Err(other(format!("{} describes another scenario", summary.display())))
            }
            _ => Ok(()),
        }
    }
}

/// How far from 1 the length of a stored unit quaternion or direction may be: the engines keep
/// attitudes normalised to round-off (f64), or to f32 round-off on a GPU in f32 (about 1e-7).
const UNIT_TOLERANCE: f64 = 1e-5;

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl Reader<'_> {
    fn bad(&self, message: String) -> CheckpointError {
        CheckpointError::Malformed { path: self.path.to_owned(), message }
    }
    fn take(&mut self, n: usize) -> Result<&[u8], CheckpointError> {
        if self.b.len() - self.at < n {
            return Err(self.bad(format!("payload ends early at byte {}", self.at)));
        }
        self.at += n;
        Ok(&self.b[self.at - n..self.at])
    }
    fn u32(&mut self) -> Result<u32, CheckpointError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u32s(&mut self, n: usize) -> Result<Vec<u32>, CheckpointError> {
        let bytes = self.take(n.saturating_mul(4))?;
        Ok(bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }
    fn u64(&mut self) -> Result<u64, CheckpointError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn f64(&mut self) -> Result<f64, CheckpointError> {
        Ok(f64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn vec3(&mut self) -> Result<DVec3, CheckpointError> {
        Ok(DVec3::new(self.f64()?, self.f64()?, self.f64()?))
    }
    fn quat(&mut self) -> Result<DQuat, CheckpointError> {
        Ok(DQuat::from_xyzw(self.f64()?, self.f64()?, self.f64()?, self.f64()?))
    }
    fn bytes(&mut self) -> Result<&[u8], CheckpointError> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| self.bad(format!("block of {n} bytes")))?;
        self.take(n)
    }
    /// A count of items of at least `item` bytes each, checked against what is left.
    fn count(&mut self, item: usize) -> Result<usize, CheckpointError> {
        let n = self.u64()?;
        if n > ((self.b.len() - self.at) / item) as u64 {
            return Err(self.bad(format!("{n} items cannot fit in the {} bytes left", self.b.len() - self.at)));
        }
        Ok(n as usize)
    }
}
