//! The output files as numpy columns: a CSV file (`series.csv`, `final_state.csv`,
//! `breaks.csv`, `fragments.csv`, `study.csv`) read into one array per column, and the final
//! state of a run too large for `final_state.csv` from its `checkpoint.bin`.
//!
//! Values are parsed with Rust's `str::parse`, which rounds correctly, as Python's `float()`
//! does: the 17 significant digits the writers print (`fmt17`) give back the engine's f64 bit
//! for bit.

use numpy::PyArray1;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::{Path, PathBuf};

/// One column: integers where every cell is one, else numbers (an empty cell is NaN, a column of
/// empty cells only too: a study's outcome no variant has, as `restitution` where nothing
/// rebounds), else text.
enum Column {
    Int(Vec<i64>),
    Float(Vec<f64>),
    Text(Vec<String>),
}

fn column(cells: &[&str]) -> Column {
    if cells.is_empty() {
        return Column::Float(Vec::new());
    }
    if let Ok(v) = cells.iter().map(|c| c.parse::<i64>()).collect::<Result<Vec<_>, _>>() {
        return Column::Int(v);
    }
    let float = |c: &&str| if c.is_empty() { Ok(f64::NAN) } else { c.parse::<f64>() };
    match cells.iter().map(float).collect::<Result<Vec<_>, _>>() {
        Ok(v) => Column::Float(v),
        _ => Column::Text(cells.iter().map(|c| c.to_string()).collect()),
    }
}

/// The header and the columns of CSV text. Plain files are split on commas; text holding a
/// quote (a study table's quoted cells) goes through the library's RFC 4180 reader.
fn parse(text: &str, path: &Path) -> Result<(Vec<String>, Vec<Column>), String> {
    let records: Vec<Vec<String>>;
    let rows: Vec<Vec<&str>> = if text.contains('"') {
        records = rrpdem::study::csv_records(text).map_err(|e| format!("{}: {e}", path.display()))?;
        records.iter().map(|r| r.iter().map(String::as_str).collect()).collect()
    } else {
        text.lines().map(|l| l.strip_suffix('\r').unwrap_or(l).split(',').collect()).collect()
    };
    let Some((header, body)) = rows.split_first() else {
        return Err(format!("{}: empty file (no header line)", path.display()));
    };
    let width = header.len();
    // A torn last line (a run killed while appending) is not data.
    let body: Vec<&Vec<&str>> = body.iter().filter(|r| !(r.len() == 1 && r[0].is_empty())).collect();
    if let Some((k, r)) = body.iter().enumerate().find(|(_, r)| r.len() != width) {
        return Err(format!("{}: line {}: {} cells, the header has {width}", path.display(), k + 2, r.len()));
    }
    let columns = (0..width)
        .map(|c| {
            let cells: Vec<&str> = body.iter().map(|r| r[c]).collect();
            column(&cells)
        })
        .collect();
    Ok((header.iter().map(|h| h.to_string()).collect(), columns))
}

/// Reads a CSV file into `{column name: array}` (int64, float64, or a list of str), in the
/// file's column order.
#[pyfunction]
pub fn read_csv<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let text = std::fs::read_to_string(&path).map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
    let (header, columns) = py.detach(|| parse(&text, &path)).map_err(PyValueError::new_err)?;
    let d = PyDict::new(py);
    for (name, col) in header.into_iter().zip(columns) {
        match col {
            Column::Int(v) => d.set_item(name, PyArray1::from_vec(py, v))?,
            Column::Float(v) => d.set_item(name, PyArray1::from_vec(py, v))?,
            Column::Text(v) => d.set_item(name, PyList::new(py, v)?)?,
        }
    }
    Ok(d)
}

/// The final state of the run in `dir` from its `checkpoint.bin` (runs above
/// `FINAL_STATE_CSV_MAX` particles write no `final_state.csv`), in `final_state.csv`'s columns;
/// fragment labels from the bonds `breaks.csv` lists.
#[pyfunction]
pub fn final_from_checkpoint<'py>(py: Python<'py>, dir: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let read = || -> Result<_, String> {
        let path = dir.join(rrpdem::checkpoint::FILE_NAME);
        let cp = rrpdem::checkpoint::Checkpoint::read(&path).map_err(|e| e.to_string())?;
        // A checkpoint does not store the clumps (MODEL §12): its scenario builds them, so that a
        // clump's spheres are labelled one fragment as the run labelled them.
        let clumps = match cp.scenario.has_clumps() {
            true => cp.check_model(&path).map_err(|e| e.to_string())?,
            false => Vec::new(),
        };
        let mut m = cp.model;
        m.clumps = clumps;
        let breaks = dir.join("breaks.csv");
        let broken = if breaks.is_file() {
            rrpdem::output::broken_bonds(&breaks, m.bonds.len()).map_err(|e| e.to_string())?
        } else {
            vec![false; m.bonds.len()]
        };
        let labels = rrpdem::fragments::label_model(&m, &broken);
        Ok((m.particles, labels))
    };
    let (p, labels) = py.detach(read).map_err(PyValueError::new_err)?;
    let d = PyDict::new(py);
    let n = p.len() as i64;
    d.set_item("id", PyArray1::from_vec(py, (0..n).collect()))?;
    let q: Vec<glam::DQuat> = p.q.iter().map(|&q| rrpdem::rrp::canonical(q)).collect();
    crate::stepper::set_state_columns(py, &d, &p.x, &p.v, &q, &p.w)?;
    d.set_item("mass", PyArray1::from_slice(py, &p.mass))?;
    d.set_item("inertia", PyArray1::from_slice(py, &p.inertia))?;
    d.set_item("diameter", PyArray1::from_vec(py, p.radius.iter().map(|r| 2.0 * r).collect()))?;
    d.set_item("fixed", PyArray1::from_vec(py, p.fixed.iter().map(|&f| f as i64).collect()))?;
    d.set_item("fragment", PyArray1::from_vec(py, labels.into_iter().map(i64::from).collect()))?;
    Ok(d)
}
