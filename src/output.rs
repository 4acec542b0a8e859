//! Output files: `series.csv` (one row per recorded step), `final_state.csv` and `summary.json`.

use crate::diagnostics::{Diagnostics, SERIES_HEADER, fmt17};
use crate::integrator::Kinematics;
use crate::rrp;
use std::fs::File;
use std::io::{self, BufWriter, Write};
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

/// Header of `final_state.csv`.
pub const FINAL_STATE_HEADER: &str = "id,x,y,z,vx,vy,vz,qw,qx,qy,qz,wx,wy,wz";

/// Streams `series.csv`; rows are flushed as they are written so none is lost on an error.
pub struct SeriesWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl SeriesWriter {
    pub fn create(path: &Path) -> Result<SeriesWriter, OutputError> {
        let file = File::create(path).map_err(wrap(path))?;
        let mut w = SeriesWriter { path: path.to_owned(), out: BufWriter::new(file) };
        writeln!(w.out, "{SERIES_HEADER}").map_err(wrap(path))?;
        Ok(w)
    }

    pub fn write(&mut self, d: &Diagnostics) -> Result<(), OutputError> {
        writeln!(self.out, "{}", d.csv_row()).map_err(wrap(&self.path))
    }

    pub fn flush(&mut self) -> Result<(), OutputError> {
        self.out.flush().map_err(wrap(&self.path))
    }
}

/// Writes `final_state.csv`: q with `qw ≥ 0`, w the spatial angular velocity, 17 digits.
pub fn write_final_state(path: &Path, state: &[Kinematics]) -> Result<(), OutputError> {
    let file = File::create(path).map_err(wrap(path))?;
    let mut out = BufWriter::new(file);
    writeln!(out, "{FINAL_STATE_HEADER}").map_err(wrap(path))?;
    for (i, k) in state.iter().enumerate() {
        let q = rrp::canonical(k.q);
        let vals = [k.x.x, k.x.y, k.x.z, k.v.x, k.v.y, k.v.z, q.w, q.x, q.y, q.z, k.w.x, k.w.y, k.w.z];
        let mut line = i.to_string();
        for v in vals {
            line.push(',');
            line.push_str(&fmt17(v));
        }
        writeln!(out, "{line}").map_err(wrap(path))?;
    }
    out.flush().map_err(wrap(path))
}

/// Writes any serialisable value as pretty JSON.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), OutputError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| OutputError { path: path.to_owned(), source: io::Error::other(e) })?;
    std::fs::write(path, text + "\n").map_err(wrap(path))
}
