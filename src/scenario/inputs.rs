//! The files a scenario reads besides its JSON (the particle and bond files of `csv` bodies) and
//! their digests, taken from the very bytes the model was built from. A scenario's identity
//! (`checkpoint::scenario_hash`) covers them, so that `resume --scenario S` notices an edited
//! particle file, and a checkpoint keeps them, so that a resumed run notices one too.

use crate::error::ScenarioError;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::OnceLock;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`, continuing from `h` (start with [`fnv1a_start`]). A fixed, documented
/// function of the bytes alone: digests stored by one version of rrpdem are those any other
/// computes.
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(FNV_PRIME);
    }
    h
}

/// The FNV-1a 64 offset basis.
pub const fn fnv1a_start() -> u64 {
    FNV_OFFSET
}

/// Size and FNV-1a 64 digest of a file's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    pub bytes: u64,
    pub fnv1a: u64,
}

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        Digest { bytes: bytes.len() as u64, fnv1a: fnv1a(FNV_OFFSET, bytes) }
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes, FNV-1a {:016x}", self.bytes, self.fnv1a)
    }
}

/// One file a scenario reads: the field naming it, the path as written there (relative to the
/// scenario's folder) and its digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    /// e.g. `bodies[0].particles`.
    pub field: String,
    pub file: String,
    #[serde(flatten)]
    pub digest: Digest,
}

/// The digests of a scenario's input files, once known: set when its model is first built (from
/// the bytes parsed) or from the checkpoint of its run. A cache of what the files held, so it is
/// not part of a scenario's equality.
#[derive(Clone, Debug, Default)]
pub struct Inputs(OnceLock<Vec<InputFile>>);

impl PartialEq for Inputs {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Inputs {
    /// The digests, if known.
    pub fn get(&self) -> Option<&[InputFile]> {
        self.0.get().map(Vec::as_slice)
    }

    /// Takes `files` as the digests (a checkpoint's); ignored when already known.
    pub fn set(&self, files: Vec<InputFile>) {
        let _ = self.0.set(files);
    }

    /// Records the digests of the bytes a build just read: the first build sets them; a later
    /// one must find the same bytes (the run's inputs must not change under it), else an error
    /// names the file. `source` is the scenario file (errors name it).
    pub(crate) fn record(&self, read: Vec<InputFile>, source: &Path) -> Result<(), ScenarioError> {
        let known = self.0.get_or_init(|| read.clone());
        for (then, now) in known.iter().zip(&read) {
            if then != now {
                return Err(changed(source, then, now.digest));
            }
        }
        if known.len() != read.len() {
            return Err(ScenarioError::Invalid {
                path: source.to_owned(),
                field: "bodies".into(),
                message: format!(
                    "the scenario now reads {} input file(s); its run started from {}",
                    read.len(),
                    known.len()
                ),
            });
        }
        Ok(())
    }
}

/// The error for an input file whose bytes are no longer those a run started from.
pub(crate) fn changed(source: &Path, then: &InputFile, now: Digest) -> ScenarioError {
    ScenarioError::Invalid {
        path: source.to_owned(),
        field: then.field.clone(),
        message: format!(
            "`{}` has changed since the run started from it ({} then, {} now); restore it, or start a new run",
            then.file, then.digest, now
        ),
    }
}
