//! Output files: `series.csv` (one row per recorded step), `final_state.csv` and `summary.json`,
//! and the output folder itself (one run at a time, never a mix of two runs' files).

use crate::diagnostics::{
    Diagnostics, FRAGMENT_SERIES_HEADER, LEGACY_SERIES_HEADER, SCALE_SERIES_HEADER, SERIES_HEADER, fmt17,
};
use crate::fragments::{Counts, Fragment};
use crate::integrator::Kinematics;
use crate::interactions::BreakEvent;
use crate::model::Particles;
use crate::rrp;
use std::fs::File;
use std::io::{self, BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// An output file that could not be written.
#[derive(Debug, Error)]
#[error("{path}: cannot write: {source}")]
pub struct OutputError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

fn wrap(path: &Path) -> impl Fn(io::Error) -> OutputError + '_ {
    move |source| OutputError { path: path.to_owned(), source }
}

/// Header of `final_state.csv`: every column a `csv` body reads, then the fragment label
/// (`crate::fragments`; a `csv` body ignores it).
pub const FINAL_STATE_HEADER: &str = "id,x,y,z,vx,vy,vz,qw,qx,qy,qz,wx,wy,wz,mass,inertia,diameter,fixed,fragment";

/// Header of `fragments.csv` (one row per fragment of more than one particle, MODEL §11).
pub const FRAGMENTS_HEADER: &str = "label,particles,mass,volume,diameter,x,y,z,vx,vy,vz,bonds";

/// What a run writes into its folder (files and folders); a new run replaces all of them.
pub const RUN_OUTPUTS: [&str; 14] = [
    "series.csv",
    "final_state.csv",
    "fragments.csv",
    "fragments.png",
    "summary.json",
    "checkpoint.bin",
    "checkpoint.bin.tmp",
    "breaks.csv",
    "vtk",
    "energy.png",
    "energy_error.png",
    "momentum_drift.png",
    "particles.pvd",
    "particles.pvd.tmp",
];

/// The file that marks a study's output folder (`crate::study` writes it; a run refuses the
/// folder).
pub const STUDY_FILE: &str = "study.json";

/// Name of the lock file that keeps a second run out of a folder in use.
pub const LOCK_FILE: &str = ".rrpdem.lock";

/// Why an output folder cannot be used.
#[derive(Debug, Error)]
pub enum OutputDirError {
    #[error(transparent)]
    Io(#[from] OutputError),
    #[error(
        "{path}: another rrpdem process is writing into this folder (it holds {LOCK_FILE}); wait for it or use --out"
    )]
    Busy { path: PathBuf },
    #[error(
        "{path} holds the outputs of an earlier run ({files}); pass --overwrite to replace them, or choose another \
         folder with --out"
    )]
    Occupied { path: PathBuf, files: String },
    #[error(
        "{path} holds a study (study.json); a run's outputs go into a folder of their own: choose another with --out"
    )]
    StudyFolder { path: PathBuf },
    #[error("{path} holds no run to resume ({missing} is missing)")]
    NothingToResume { path: PathBuf, missing: String },
    #[error("{path}: {problem}: `rrpdem resume` takes the output folder of a run")]
    NoRunFolder { path: PathBuf, problem: &'static str },
    #[error("{path}: {file} is a file, not a folder; an output folder (--out) must be a folder or not exist yet")]
    NotAFolder { path: PathBuf, file: PathBuf },
}

/// An output folder held by this process for one run: a lock file (an OS advisory lock,
/// released when the process ends, even by a crash) keeps other runs out.
#[derive(Debug)]
pub struct OutputDir {
    pub path: PathBuf,
    _lock: File,
}

impl OutputDir {
    fn lock(path: &Path) -> Result<OutputDir, OutputDirError> {
        // `create_dir_all` would only say "File exists" (or "Not a directory" for a file above).
        if let Some(file) = file_in_the_way(path) {
            return Err(OutputDirError::NotAFolder { path: path.to_owned(), file: file.to_owned() });
        }
        std::fs::create_dir_all(path).map_err(wrap(path))?;
        let lock_path = path.join(LOCK_FILE);
        let lock =
            File::options().create(true).truncate(false).write(true).open(&lock_path).map_err(wrap(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => Ok(OutputDir { path: path.to_owned(), _lock: lock }),
            Err(std::fs::TryLockError::WouldBlock) => Err(OutputDirError::Busy { path: path.to_owned() }),
            Err(std::fs::TryLockError::Error(e)) => Err(OutputError { path: lock_path, source: e }.into()),
        }
    }

    /// Takes a folder for a new run. Earlier outputs are removed with `overwrite`, refused without.
    pub fn create(path: &Path, overwrite: bool) -> Result<OutputDir, OutputDirError> {
        // A study's folder holds its variants' runs below it, never a run of its own.
        if path.join(STUDY_FILE).is_file() {
            return Err(OutputDirError::StudyFolder { path: path.to_owned() });
        }
        let dir = OutputDir::lock(path)?;
        let present: Vec<&str> = RUN_OUTPUTS.iter().copied().filter(|f| path.join(f).exists()).collect();
        if !present.is_empty() {
            if !overwrite {
                return Err(OutputDirError::Occupied { path: path.to_owned(), files: present.join(", ") });
            }
            for f in present {
                let p = path.join(f);
                let r = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
                r.map_err(wrap(&p))?;
            }
        }
        Ok(dir)
    }

    /// Takes the folder of an earlier run to continue it (`resume`). A folder another process
    /// holds is reported as such first (a run still writing may have no checkpoint yet).
    pub fn reopen(path: &Path) -> Result<OutputDir, OutputDirError> {
        if let Some(problem) = not_a_folder(path) {
            return Err(OutputDirError::NoRunFolder { path: path.to_owned(), problem });
        }
        // (Only a folder with a lock file can be held: none is made in one that is not a run's.)
        let dir = if path.join(LOCK_FILE).is_file() { Some(OutputDir::lock(path)?) } else { None };
        for f in ["series.csv", crate::checkpoint::FILE_NAME] {
            if !path.join(f).is_file() {
                return Err(OutputDirError::NothingToResume { path: path.to_owned(), missing: f.into() });
            }
        }
        match dir {
            Some(dir) => Ok(dir),
            None => OutputDir::lock(path),
        }
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

/// The first of `path` and its ancestors that exists and is not a folder: what keeps `path`
/// from being made an output folder (`create_dir_all` would only say "File exists").
pub fn file_in_the_way(path: &Path) -> Option<&Path> {
    path.ancestors().find(|a| !a.as_os_str().is_empty() && a.exists() && !a.is_dir())
}

/// What keeps `path` from being a folder to read outputs from, if anything: that it does not
/// exist, or is a file.
pub fn not_a_folder(path: &Path) -> Option<&'static str> {
    match std::fs::metadata(path) {
        Err(_) => Some("no such folder"),
        Ok(m) if !m.is_dir() => Some("a file, not a folder"),
        Ok(_) => None,
    }
}

/// Header of `breaks.csv` (one row per broken bond, MODEL §6).
pub const BREAKS_HEADER: &str = "step,t,bond,i,j,mode,x,y,z,energy";

/// Streams a CSV log whose rows start with a step number (`series.csv`, `breaks.csv`). Rows are
/// buffered and flushed at checkpoints and at the end; an interrupted run flushes them too.
/// No file stays open between flushes (each appends and closes): a batch of 10⁴ replicas keeps
/// 2·10⁴ logs going without running into the process's limit on open files.
pub struct SeriesWriter {
    path: PathBuf,
    out: Vec<u8>,
    /// The columns after the diagnostics, as the file's header has them.
    columns: SeriesColumns,
}

/// What a `series.csv` row holds after the diagnostics: each version added its columns last, so
/// that a run resumed from a folder of an earlier version goes on in that folder's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SeriesColumns {
    /// Nothing (before `E_scale`; and every log that is not `series.csv`).
    Legacy,
    /// `E_scale`.
    Scale,
    /// `E_scale,n_fragments,largest_fragment_fraction,debris_fraction`.
    Fragments,
    /// The fragments' columns, then `E_dissipated`.
    Dissipated,
}

impl SeriesColumns {
    fn of(header: &str) -> SeriesColumns {
        match header {
            SERIES_HEADER => SeriesColumns::Dissipated,
            FRAGMENT_SERIES_HEADER => SeriesColumns::Fragments,
            SCALE_SERIES_HEADER => SeriesColumns::Scale,
            _ => SeriesColumns::Legacy,
        }
    }
}

/// Header of `clumps.csv` (`SeriesWriter::write_clumps`): one row per clump per recorded step.
pub const CLUMPS_HEADER: &str = "step,t,clump,x,y,z,v_x,v_y,v_z,q_w,q_x,q_y,q_z,omega_x,omega_y,omega_z";

/// Rows kept in memory before they are appended to the file.
const SERIES_BUFFER: usize = 64 * 1024;

impl SeriesWriter {
    /// `series.csv`.
    pub fn create(path: &Path) -> Result<SeriesWriter, OutputError> {
        SeriesWriter::with_header(path, SERIES_HEADER)
    }

    pub fn with_header(path: &Path, header: &str) -> Result<SeriesWriter, OutputError> {
        File::create(path).map_err(wrap(path))?;
        let mut w = SeriesWriter { path: path.to_owned(), out: Vec::new(), columns: SeriesColumns::of(header) };
        writeln!(w.out, "{header}").map_err(wrap(path))?;
        w.flush()?;
        Ok(w)
    }

    /// The rows of `clumps.csv` at one recorded step: per clump (in the scenario's order) its
    /// centre, velocity, attitude as a unit quaternion `(w, x, y, z)` with `w ≥ 0`, and spatial Ω.
    pub fn write_clumps(&mut self, step: u64, t: f64, clumps: &[crate::engine::ClumpState]) -> Result<(), OutputError> {
        for (k, c) in clumps.iter().enumerate() {
            let q = crate::rrp::canonical(c.q);
            let v = [c.x.x, c.x.y, c.x.z, c.v.x, c.v.y, c.v.z, q.w, q.x, q.y, q.z, c.w.x, c.w.y, c.w.z];
            let cols: Vec<String> = v.iter().map(|&x| fmt17(x)).collect();
            writeln!(self.out, "{step},{},{k},{}", fmt17(t), cols.join(",")).map_err(wrap(&self.path))?;
        }
        self.flush_if_full()
    }

    /// One row of breaks.csv.
    pub fn write_break(&mut self, e: &BreakEvent) -> Result<(), OutputError> {
        let mode = crate::interactions::rupture::CHANNELS[e.mode as usize];
        writeln!(
            self.out,
            "{},{},{},{},{},{mode},{},{},{},{}",
            e.step,
            fmt17(e.t),
            e.bond,
            e.i,
            e.j,
            fmt17(e.x.x),
            fmt17(e.x.y),
            fmt17(e.x.z),
            fmt17(e.energy)
        )
        .map_err(wrap(&self.path))?;
        self.flush_if_full()
    }

    /// Reopens `series.csv` to continue a run from `step`: rows after `step` (written after
    /// the checkpoint, before the run stopped) are dropped, and a torn last line with them. A
    /// `series.csv` of an earlier version (without `E_dissipated`, or also without the fragment
    /// columns, or also without `E_scale`) goes on in its own columns.
    pub fn resume(path: &Path, step: u64) -> Result<SeriesWriter, OutputError> {
        SeriesWriter::resume_with_header(path, SERIES_HEADER, step).or_else(|e| {
            [FRAGMENT_SERIES_HEADER, SCALE_SERIES_HEADER, LEGACY_SERIES_HEADER]
                .into_iter()
                .find_map(|h| SeriesWriter::resume_with_header(path, h, step).ok())
                .ok_or(e)
        })
    }

    /// The columns this log's rows hold after the diagnostics.
    pub fn columns(&self) -> SeriesColumns {
        self.columns
    }

    /// `resume` for a log with another header.
    pub fn resume_with_header(path: &Path, header: &str, step: u64) -> Result<SeriesWriter, OutputError> {
        let file = File::open(path).map_err(wrap(path))?;
        let mut keep = 0u64;
        let mut reader = io::BufReader::new(file);
        let mut line = String::new();
        let mut first = true;
        loop {
            line.clear();
            let n = reader.read_line(&mut line).map_err(wrap(path))?;
            if n == 0 || !line.ends_with('\n') {
                break;
            }
            if !first {
                match line.split(',').next().and_then(|v| v.parse::<u64>().ok()) {
                    Some(s) if s <= step => {}
                    _ => break,
                }
            } else if line.trim_end() != header {
                return Err(OutputError {
                    path: path.to_owned(),
                    source: io::Error::other("not this version's series.csv (its header differs)"),
                });
            }
            first = false;
            keep += n as u64;
        }
        let file = File::options().write(true).open(path).map_err(wrap(path))?;
        file.set_len(keep).map_err(wrap(path))?;
        Ok(SeriesWriter { path: path.to_owned(), out: Vec::new(), columns: SeriesColumns::of(header) })
    }

    /// One row of series.csv: the diagnostics `d`, the energy guard's scale and the fragments at
    /// that step (each where the file has its columns).
    pub fn write(&mut self, d: &Diagnostics, e_scale: f64, fragments: &Counts) -> Result<(), OutputError> {
        let mut row = d.csv_row();
        if self.columns >= SeriesColumns::Scale {
            row.push(',');
            row.push_str(&fmt17(e_scale));
        }
        if self.columns >= SeriesColumns::Fragments {
            let f = fragments;
            row.push_str(&format!(",{},{},{}", f.n_fragments, fmt17(f.largest_fraction), fmt17(f.debris_fraction)));
        }
        if self.columns >= SeriesColumns::Dissipated {
            row.push(',');
            row.push_str(&fmt17(d.e_dissipated));
        }
        writeln!(self.out, "{row}").map_err(wrap(&self.path))?;
        self.flush_if_full()
    }

    fn flush_if_full(&mut self) -> Result<(), OutputError> {
        if self.out.len() >= SERIES_BUFFER { self.flush() } else { Ok(()) }
    }

    /// Appends the buffered rows to the file.
    pub fn flush(&mut self) -> Result<(), OutputError> {
        if self.out.is_empty() {
            return Ok(());
        }
        let mut file = File::options().append(true).open(&self.path).map_err(wrap(&self.path))?;
        file.write_all(&self.out).map_err(wrap(&self.path))?;
        self.out.clear();
        Ok(())
    }
}

/// Which of `n_bonds` bonds a `breaks.csv` lists as broken (what a resumed run starts with).
pub fn broken_bonds(path: &Path, n_bonds: usize) -> Result<Vec<bool>, OutputError> {
    let text = std::fs::read_to_string(path).map_err(wrap(path))?;
    let mut broken = vec![false; n_bonds];
    for (k, line) in text.lines().enumerate().skip(1) {
        let bond = line.split(',').nth(2).and_then(|b| b.parse::<usize>().ok());
        match bond.and_then(|b| broken.get_mut(b)) {
            Some(flag) => *flag = true,
            None => {
                return Err(OutputError {
                    path: path.to_owned(),
                    source: io::Error::other(format!("line {}: no bond of this model in the third column", k + 1)),
                });
            }
        }
    }
    Ok(broken)
}

/// Writes `final_state.csv`: q with `qw ≥ 0`, w the spatial angular velocity, the constants of
/// `particles` (mass, inertia, diameter, fixed), 17 digits, and each particle's fragment label
/// `fragment`. A `csv` body reads it back.
pub fn write_final_state(
    path: &Path,
    state: &[Kinematics],
    particles: &Particles,
    fragment: &[u32],
) -> Result<(), OutputError> {
    let file = File::create(path).map_err(wrap(path))?;
    let mut out = BufWriter::new(file);
    writeln!(out, "{FINAL_STATE_HEADER}").map_err(wrap(path))?;
    for (i, k) in state.iter().enumerate() {
        let q = rrp::canonical(k.q);
        let p = particles;
        let vals = [
            k.x.x,
            k.x.y,
            k.x.z,
            k.v.x,
            k.v.y,
            k.v.z,
            q.w,
            q.x,
            q.y,
            q.z,
            k.w.x,
            k.w.y,
            k.w.z,
            p.mass[i],
            p.inertia[i],
            2.0 * p.radius[i],
        ];
        let mut line = i.to_string();
        for v in vals {
            line.push(',');
            line.push_str(&fmt17(v));
        }
        line.push_str(if p.fixed[i] { ",1" } else { ",0" });
        writeln!(out, "{line},{}", fragment[i]).map_err(wrap(path))?;
    }
    out.flush().map_err(wrap(path))
}

/// Writes `fragments.csv`: one row per fragment of more than one particle, by label, 17 digits.
pub fn write_fragments(path: &Path, pieces: &[Fragment]) -> Result<(), OutputError> {
    let file = File::create(path).map_err(wrap(path))?;
    let mut out = BufWriter::new(file);
    writeln!(out, "{FRAGMENTS_HEADER}").map_err(wrap(path))?;
    for f in pieces {
        let mut line = format!("{},{}", f.label, f.particles);
        for v in [f.mass, f.volume, f.diameter, f.x.x, f.x.y, f.x.z, f.v.x, f.v.y, f.v.z] {
            line.push(',');
            line.push_str(&fmt17(v));
        }
        writeln!(out, "{line},{}", f.bonds).map_err(wrap(path))?;
    }
    out.flush().map_err(wrap(path))
}

/// Writes any serialisable value as pretty JSON.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), OutputError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| OutputError { path: path.to_owned(), source: io::Error::other(e) })?;
    std::fs::write(path, text + "\n").map_err(wrap(path))
}
