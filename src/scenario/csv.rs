//! Reading particles and bonds from CSV files (user geometry). The particle columns are those
//! of `final_state.csv`, so a final state can seed a new run.

use super::{ParticleDefaults, RawParticle};
use crate::error::ScenarioError;
use glam::{DQuat, DVec3};
use std::path::Path;

const PARTICLE_COLUMNS: [&str; 18] = [
    "id", "x", "y", "z", "vx", "vy", "vz", "qw", "qx", "qy", "qz", "wx", "wy", "wz", "mass", "inertia", "diameter",
    "fixed",
];

/// Rows of a CSV file with their 1-based line numbers; blank lines and `#` comments skipped.
/// A CSV file's header and its rows, each with its 1-based line number.
type Table = (Vec<String>, Vec<(usize, Vec<String>)>);

fn rows(path: &Path) -> Result<Table, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io { path: path.to_owned(), source })?;
    let mut lines =
        text.lines().enumerate().map(|(n, l)| (n + 1, l.trim())).filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let header = match lines.next() {
        Some((_, h)) => h.split(',').map(|c| c.trim().to_string()).collect::<Vec<_>>(),
        None => {
            return Err(ScenarioError::Csv {
                path: path.to_owned(),
                line: 1,
                message: "empty file: expected a header line".into(),
            });
        }
    };
    let body = lines.map(|(n, l)| (n, l.split(',').map(|c| c.trim().to_string()).collect())).collect();
    Ok((header, body))
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
/// `diameter`, `fixed` (0/1/true/false) optional, defaults from the scenario.
pub(crate) fn read_particles(path: &Path, d: &ParticleDefaults) -> Result<Vec<RawParticle>, ScenarioError> {
    let (header, body) = rows(path)?;
    let err = |line: usize, message: String| ScenarioError::Csv { path: path.to_owned(), line, message };
    for h in &header {
        if !PARTICLE_COLUMNS.contains(&h.as_str()) {
            return Err(err(1, format!("unknown column `{h}` (expected some of {})", PARTICLE_COLUMNS.join(","))));
        }
    }
    let idx = |name: &str| header.iter().position(|h| h == name);
    for req in ["x", "y", "z"] {
        if idx(req).is_none() {
            return Err(err(1, format!("missing column `{req}`")));
        }
    }
    let mut out = Vec::with_capacity(body.len());
    for (row, (line, cells)) in body.iter().enumerate() {
        if cells.len() != header.len() {
            return Err(err(*line, format!("expected {} values, found {}", header.len(), cells.len())));
        }
        let get = |name: &str, default: f64| -> Result<f64, ScenarioError> {
            match idx(name) {
                Some(c) => number(path, *line, name, &cells[c]),
                None => Ok(default),
            }
        };
        if let Some(c) = idx("id")
            && cells[c].parse::<usize>().ok() != Some(row)
        {
            return Err(err(
                *line,
                format!("column `id`: expected {row} (ids must count rows from 0), got `{}`", cells[c]),
            ));
        }
        let v3 = |a: &str, b: &str, c: &str| -> Result<DVec3, ScenarioError> {
            Ok(DVec3::new(get(a, 0.0)?, get(b, 0.0)?, get(c, 0.0)?))
        };
        let q = DQuat::from_xyzw(get("qx", 0.0)?, get("qy", 0.0)?, get("qz", 0.0)?, get("qw", 1.0)?);
        if q.length() < 1e-12 {
            return Err(err(*line, "attitude quaternion (qw,qx,qy,qz) is zero".into()));
        }
        let diameter = match (idx("diameter"), d.diameter) {
            (Some(_), _) => get("diameter", 0.0)?,
            (None, Some(dd)) => dd,
            (None, None) => return Err(err(1, "no `diameter` column and no `particle.diameter` default".into())),
        };
        let fixed = match idx("fixed").map(|c| cells[c].as_str()) {
            None | Some("0") | Some("false") => false,
            Some("1") | Some("true") => true,
            Some(other) => {
                return Err(err(*line, format!("column `fixed`: expected 0, 1, true or false, got `{other}`")));
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
    Ok(out)
}

/// Reads bonds: header `i,j`, one bond per row (particle indices from 0).
pub(crate) fn read_bonds(path: &Path) -> Result<Vec<(u32, u32)>, ScenarioError> {
    let (header, body) = rows(path)?;
    if header != ["i", "j"] {
        return Err(ScenarioError::Csv {
            path: path.to_owned(),
            line: 1,
            message: format!("expected header `i,j`, got `{}`", header.join(",")),
        });
    }
    body.iter()
        .map(|(line, cells)| {
            let parse = |c: Option<&String>| c.and_then(|s| s.parse::<u32>().ok());
            match (cells.len(), parse(cells.first()), parse(cells.get(1))) {
                (2, Some(i), Some(j)) => Ok((i, j)),
                _ => Err(ScenarioError::Csv {
                    path: path.to_owned(),
                    line: *line,
                    message: format!("expected two particle indices `i,j`, got `{}`", cells.join(",")),
                }),
            }
        })
        .collect()
}
