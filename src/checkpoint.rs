//! Binary checkpoints: everything a run needs to continue bit-identically (`rrpdem resume`).
//!
//! Layout (little-endian), version 3 (versions 1 and 2, still read, have no particle order;
//! version 1 has no reference positions either):
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `RRPDEMCK` |
//! | 4 | format version (u32) |
//! | 8 | scenario hash (u64, [`scenario_hash`]) |
//! | 8 | payload length (u64) |
//! | … | payload |
//! | 4 | CRC-32 of everything before it |
//!
//! Payload: a length-prefixed JSON block (the resolved scenario, the engine kind, the run's
//! bookkeeping: energy/momentum budget, last diagnostics, wall time), then the particles
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

use crate::diagnostics::Diagnostics;
use crate::engine::EngineState;
use crate::guard::Budget;
use crate::model::{Bond, Model, Particles};
use crate::scenario::Scenario;
use crate::stability::StabilityEstimate;
use glam::{DQuat, DVec3};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;

const MAGIC: &[u8; 8] = b"RRPDEMCK";
/// Version of the layout above; a reader refuses any other.
pub const FORMAT_VERSION: u32 = 3;
/// Versions a reader accepts: this one, version 2 (without particle order) and version 1
/// (without reference positions either).
const READABLE: [u32; 3] = [1, 2, 3];
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
    #[error("{path}: the checkpoint is corrupted (checksum {found:08x}, expected {expected:08x})")]
    Corrupted { path: PathBuf, found: u32, expected: u32 },
    #[error("{path}: the checkpoint is malformed: {message}")]
    Malformed { path: PathBuf, message: String },
    #[error(
        "{path}: the checkpoint belongs to another scenario (hash {found:016x}; {what} has {expected:016x}); resume \
         only continues the run that wrote it"
    )]
    OtherScenario { path: PathBuf, found: u64, expected: u64, what: String },
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

/// FNV-1a 64 of the scenario's JSON with `t_end` (a resumed run may go further) and `output`
/// left out, so a checkpoint can tell whether it belongs to a scenario.
pub fn scenario_hash(s: &Scenario) -> u64 {
    let mut s = s.clone();
    s.t_end = 0.0;
    s.output = None;
    let text = serde_json::to_string(&s).expect("a scenario serialises");
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
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
            engine_kind: self.engine.kind.clone(),
            progress: self.progress.clone(),
        };
        let p = &self.model.particles;
        let n = p.len();
        let mut body = Out(Vec::with_capacity(256 + n * 130 + self.model.bonds.len() * 96 + self.engine.data.len()));
        body.bytes(&serde_json::to_vec(&meta).expect("checkpoint metadata serialises"));
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
        out.u64(scenario_hash(&self.scenario));
        out.u64(body.0.len() as u64);
        out.0.extend_from_slice(&body.0);
        let crc = crc32fast::hash(&out.0);
        out.u32(crc);
        out.0
    }

    /// Decodes a checkpoint, checking magic, version, length, checksum and scenario hash.
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
        if bytes.len() as u64 != need {
            return Err(CheckpointError::Truncated { path, have: bytes.len() as u64, need });
        }
        let end = bytes.len() - 4;
        let expected = u32::from_le_bytes(bytes[end..].try_into().expect("4 bytes"));
        let found = crc32fast::hash(&bytes[..end]);
        if found != expected {
            return Err(CheckpointError::Corrupted { path, found, expected });
        }
        let mut r = Reader { b: &bytes[HEADER..end], at: 0, path: &path };
        let meta: Meta = serde_json::from_slice(r.bytes()?).map_err(|e| r.bad(format!("metadata: {e}")))?;
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
        if scenario_hash(&scenario) != hash {
            return Err(r.bad("the scenario does not match the header's scenario hash".into()));
        }
        let params = scenario.params();
        Ok(Checkpoint {
            scenario,
            model: Model { particles, bonds, params, reference_x, user_ids: None },
            engine: EngineState { kind, step, data },
            order,
            progress: meta.progress,
        })
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

    /// Checks that this checkpoint belongs to `scenario` (everything but `t_end` equal).
    pub fn check_scenario(&self, scenario: &Scenario, path: &Path, what: &str) -> Result<(), CheckpointError> {
        let (found, expected) = (scenario_hash(&self.scenario), scenario_hash(scenario));
        if found == expected {
            Ok(())
        } else {
            Err(CheckpointError::OtherScenario { path: path.to_owned(), found, expected, what: what.into() })
        }
    }
}

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
