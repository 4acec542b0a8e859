//! Figures as PNG from the output files: the energy budget, the relative energy error and the
//! momentum drift of a run (`series.csv`, `summary.json`), the fragments it broke into, its
//! clumps' spin (`clumps.csv`), error
//! versus time step of a
//! convergence study (`converge.csv`), and a scatter of any table's columns (studies).
//!
//! Every figure is `WIDTH × HEIGHT` pixels, drawn by plotters into memory and encoded with
//! `png`. Text uses DejaVu Sans embedded in the binary (`assets/fonts`), so no system font is
//! needed. CSV columns are looked up by name: columns a plot does not know are ignored.
//!
//! Axis mapping (documented so that tests can check where a curve lands): a panel's plotting
//! rectangle is [`PlotArea`]; a value `v` on an axis `[lo, hi]` goes to the fraction
//! `f = (u(v) − u(lo)) / (u(hi) − u(lo))` of it, with `u = log10` on a log axis and the identity
//! otherwise, and to pixel `left + f·(right − left)` across, `bottom − f·(bottom − top)` up,
//! rounded to the nearest pixel.

mod axis;
mod clumps;
mod converge;
mod figure;
mod fragments;
mod render;
mod run;
mod scatter;
mod table;

pub use clumps::clumps_figure;
pub use converge::{converge_figure, plot_converge, plot_converge_named};
pub use figure::{AxisSpec, Curve, Figure, Marker, Panel, PlotArea, Stroke, Style};
pub use fragments::fragments_figure;
pub use render::render;
pub use run::{energy_colour, plot_run_dir, run_figures};
pub use scatter::{SCATTER_MAX_PANELS, ScatterSpec, readable, scatter, scatter_csv, scatter_figure};
pub use table::Table;

use std::path::{Path, PathBuf};
use thiserror::Error;

/// Width of every figure in pixels.
pub const WIDTH: u32 = 1200;
/// Height of every figure in pixels.
pub const HEIGHT: u32 = 800;

/// A figure that could not be made: unreadable or malformed input, a bad specification, or a
/// file that could not be written.
#[derive(Debug, Error)]
pub enum PlotError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Csv { path: PathBuf, line: usize, message: String },
    #[error("{path}: no column `{column}`")]
    MissingColumn { path: PathBuf, column: String },
    #[error("{path}: {message}")]
    Json { path: PathBuf, message: String },
    #[error(
        "{dir}: nothing to plot (no series.csv of a run, converge.csv of `rrpdem converge`, or study.csv with study.json of a study)"
    )]
    NothingToPlot { dir: PathBuf },
    #[error("{dir}: {problem}: `rrpdem plot` takes the output folder of a run, a study or `rrpdem converge`")]
    NotAFolder { dir: PathBuf, problem: &'static str },
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: drawing failed: {message}")]
    Draw { path: PathBuf, message: String },
    #[error("the embedded font cannot be loaded")]
    Font,
    #[error("plot specification: {0}")]
    Spec(String),
}

/// Tableau's ten colours: distinct, and readable on white.
pub(super) const PALETTE: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];
pub(super) const BLACK_RGB: (u8, u8, u8) = (0, 0, 0);
pub(super) const GREY: (u8, u8, u8) = (110, 110, 110);

pub(super) fn create_dir(out: &Path) -> Result<(), PlotError> {
    std::fs::create_dir_all(out).map_err(|source| PlotError::Write { path: out.to_owned(), source })
}
// ---------------------------------------------------------------------------------------------
// A whole output folder

/// Every figure the files in `dir` allow, written into `out`: the run figures when there is a
/// `series.csv`, `convergence.png` when there is a `converge.csv`.
pub fn plot_dir(dir: &Path, out: &Path) -> Result<Vec<PathBuf>, PlotError> {
    if let Some(problem) = crate::output::not_a_folder(dir) {
        return Err(PlotError::NotAFolder { dir: dir.to_owned(), problem });
    }
    let mut written = Vec::new();
    if dir.join("series.csv").is_file() {
        written.extend(plot_run_dir(dir, out)?);
    }
    if dir.join("converge.csv").is_file() {
        written.push(plot_converge(&dir.join("converge.csv"), out)?);
    }
    if written.is_empty() {
        return Err(PlotError::NothingToPlot { dir: dir.to_owned() });
    }
    Ok(written)
}
