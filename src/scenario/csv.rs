//! Reading particles and bonds from CSV files (user geometry). The particle columns are those
//! of `final_state.csv`, so a final state can seed a new run.

use super::inputs::Digest;
use super::{ParticleDefaults, RawParticle};
use crate::error::ScenarioError;
use glam::{DQuat, DVec3};
use std::path::Path;

// `fragment` (a label of `final_state.csv`) is accepted and not read: a final state seeds a run.
const PARTICLE_COLUMNS: [&str; 19] = [
    "id", "x", "y", "z", "vx", "vy", "vz", "qw", "qx", "qy", "qz", "wx", "wy", "wz", "mass", "inertia", "diameter",
    "fixed", "fragment",
];

/// A CSV file's text and the position of its header line. Blank lines and `#` comments are
/// skipped; cells are borrowed from the text (no allocation per cell), so files of millions of
/// rows read quickly.
struct Table {
    text: String,
    header: Vec<String>,
    /// 1-based number of the header line.
    header_line: usize,
    /// Byte offset just past the header line and its 1-based number.
    body_start: (usize, usize),
    /// The file's bytes as read (a scenario's identity covers them).
    digest: Digest,
}

impl Table {
    /// Reads a table. A UTF-8 byte-order mark (spreadsheets write one) is skipped; a header
    /// naming a column twice is an error.
    fn read(path: &Path) -> Result<Table, ScenarioError> {
        let bytes = std::fs::read(path).map_err(|source| ScenarioError::Io { path: path.to_owned(), source })?;
        let digest = Digest::of(&bytes);
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
            ScenarioError::Csv { path: path.to_owned(), line, message: "not UTF-8 text".into() }
        })?;
        let bom = if text.starts_with('\u{feff}') { '\u{feff}'.len_utf8() } else { 0 };
        let mut offset = bom;
        for (n, line) in text[bom..].split_inclusive('\n').enumerate() {
            offset += line.len();
            let l = line.trim();
            if !l.is_empty() && !l.starts_with('#') {
                let header: Vec<String> = l.split(',').map(|c| c.trim().to_string()).collect();
                for (k, h) in header.iter().enumerate() {
                    if header[..k].contains(h) {
                        return Err(ScenarioError::Csv {
                            path: path.to_owned(),
                            line: n + 1,
                            message: format!("column `{h}` appears twice in the header"),
                        });
                    }
                }
                return Ok(Table { header, header_line: n + 1, body_start: (offset, n + 2), text, digest });
            }
        }
        Err(ScenarioError::Csv { path: path.to_owned(), line: 1, message: "empty file: expected a header line".into() })
    }

    /// The data rows: 1-based line number and the trimmed line.
    fn rows(&self) -> impl Iterator<Item = (usize, &str)> {
        let (offset, first) = self.body_start;
        self.text[offset..]
            .lines()
            .enumerate()
            .map(move |(k, l)| (first + k, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
    }
}

fn number(path: &Path, line: usize, col: &str, text: &str) -> Result<f64, ScenarioError> {
    let v: f64 = text.parse().map_err(|_| ScenarioError::Csv {
        path: path.to_owned(),
        line,
        message: format!("column `{col}`: `{text}` is not a number"),
    })?;
    if !v.is_finite() {
        return Err(ScenarioError::Csv {
            path: path.to_owned(),
            line,
            message: format!("column `{col}`: must be finite, got {text}"),
        });
    }
    Ok(v)
}

/// Reads particles: columns `x,y,z` required; `vx..wz`, `qw..qz`, `mass`, `inertia`,
/// `diameter`, `fixed` (0/1/true/false) optional, defaults from the scenario. Also returns the
/// digest of the file's bytes. A file without particles is an error.
pub(crate) fn read_particles(path: &Path, d: &ParticleDefaults) -> Result<(Vec<RawParticle>, Digest), ScenarioError> {
    let table = Table::read(path)?;
    let header = &table.header;
    let hl = table.header_line;
    let err = |line: usize, message: String| ScenarioError::Csv { path: path.to_owned(), line, message };
    for h in header {
        if !PARTICLE_COLUMNS.contains(&h.as_str()) {
            return Err(err(hl, format!("unknown column `{h}` (expected some of {})", PARTICLE_COLUMNS.join(","))));
        }
    }
    let idx = |name: &str| header.iter().position(|h| h == name);
    for req in ["x", "y", "z"] {
        if idx(req).is_none() {
            return Err(err(hl, format!("missing column `{req}`")));
        }
    }
    let mut out = Vec::new();
    let mut cells: Vec<&str> = Vec::with_capacity(header.len());
    for (row, (line, text)) in table.rows().enumerate() {
        cells.clear();
        cells.extend(text.split(',').map(str::trim));
        if cells.len() != header.len() {
            return Err(err(line, format!("expected {} values, found {}", header.len(), cells.len())));
        }
        let get = |name: &str, default: f64| -> Result<f64, ScenarioError> {
            match idx(name) {
                Some(c) => number(path, line, name, cells[c]),
                None => Ok(default),
            }
        };
        if let Some(c) = idx("id")
            && cells[c].parse::<usize>().ok() != Some(row)
        {
            return Err(err(
                line,
                format!("column `id`: expected {row} (ids must count rows from 0), got `{}`", cells[c]),
            ));
        }
        let v3 = |a: &str, b: &str, c: &str| -> Result<DVec3, ScenarioError> {
            Ok(DVec3::new(get(a, 0.0)?, get(b, 0.0)?, get(c, 0.0)?))
        };
        let q = DQuat::from_xyzw(get("qx", 0.0)?, get("qy", 0.0)?, get("qz", 0.0)?, get("qw", 1.0)?);
        if q.length() < 1e-12 {
            return Err(err(line, "attitude quaternion (qw,qx,qy,qz) is zero".into()));
        }
        let diameter = match (idx("diameter"), d.diameter) {
            (Some(_), _) => get("diameter", 0.0)?,
            (None, Some(dd)) => dd,
            (None, None) => return Err(err(hl, "no `diameter` column and no `particle.diameter` default".into())),
        };
        let fixed = match idx("fixed").map(|c| cells[c]) {
            None | Some("0") | Some("false") => false,
            Some("1") | Some("true") => true,
            Some(other) => {
                return Err(err(line, format!("column `fixed`: expected 0, 1, true or false, got `{other}`")));
            }
        };
        out.push(RawParticle {
            x: v3("x", "y", "z")?,
            v: v3("vx", "vy", "vz")?,
            q: q.normalize(),
            w: v3("wx", "wy", "wz")?,
            mass: get("mass", d.mass)?,
            inertia: get("inertia", d.inertia)?,
            diameter,
            fixed,
        });
    }
    if out.is_empty() {
        return Err(err(hl, "no particles below the header: a body needs at least one".into()));
    }
    Ok((out, table.digest))
}

/// Reads bonds: header `i,j` or `i,j,rest_length`, one bond per row (particle indices from 0;
/// with the third column, the bond's rest length, a finite number > 0, or empty: its initial
/// distance, as `[i, j]`). Returns the pairs, the rest lengths given by bond index, and the
/// digest of the file's bytes.
#[allow(clippy::type_complexity)]
pub(crate) fn read_bonds(path: &Path) -> Result<(Vec<(u32, u32)>, Vec<(u32, f64)>, Digest), ScenarioError> {
    let table = Table::read(path)?;
    let with_rest = match table.header.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["i", "j"] => false,
        ["i", "j", "rest_length"] => true,
        _ => {
            return Err(ScenarioError::Csv {
                path: path.to_owned(),
                line: table.header_line,
                message: format!("expected header `i,j` or `i,j,rest_length`, got `{}`", table.header.join(",")),
            });
        }
    };
    let mut bonds = Vec::new();
    let mut rest = Vec::new();
    for (line, text) in table.rows() {
        let err = |message: String| ScenarioError::Csv { path: path.to_owned(), line, message };
        let mut cells = text.split(',').map(str::trim);
        let parse = |c: Option<&str>| c.and_then(|s| s.parse::<u32>().ok());
        let (i, j) = match (parse(cells.next()), parse(cells.next())) {
            (Some(i), Some(j)) => (i, j),
            _ => {
                let want = if with_rest { "`i,j,rest_length`" } else { "two particle indices `i,j`" };
                return Err(err(format!("expected {want}, got `{text}`")));
            }
        };
        if with_rest {
            let Some(cell) = cells.next() else {
                return Err(err(format!("expected `i,j,rest_length`, got `{text}`")));
            };
            if !cell.is_empty() {
                let l0 = number(path, line, "rest_length", cell)?;
                if let Some(m) = super::bonds::rest_length_fault(l0) {
                    return Err(err(format!("column `rest_length`: {m}")));
                }
                rest.push((bonds.len() as u32, l0));
            }
        }
        if cells.next().is_some() {
            return Err(err(format!("expected {} values, got `{text}`", 2 + with_rest as usize)));
        }
        bonds.push((i, j));
    }
    Ok((bonds, rest, table.digest))
}

/// The digest of a file's bytes, without parsing it (`resume --scenario` compares a scenario's
/// inputs with those of the checkpoint's run).
pub(crate) fn digest(path: &Path) -> Result<Digest, ScenarioError> {
    let bytes = std::fs::read(path).map_err(|source| ScenarioError::Io { path: path.to_owned(), source })?;
    Ok(Digest::of(&bytes))
}
