//! `clumps.png`: the rigid clumps of a run (MODEL §12, `clumps.csv`): each clump's angular
//! velocity in its own body frame, `Rᵀ Ω`, against time (a free body's flip about its
//! intermediate axis, a dumbbell's spin-orbit exchange), up to `MAX_PANELS` clumps.

use super::figure::{AxisSpec, Curve, Figure, Panel, Style};
use super::table::Table;
use super::{PALETTE, PlotError};
use glam::{DQuat, DVec3};
use std::path::Path;

/// Most clumps drawn (one panel each); the others are named in a note.
const MAX_PANELS: usize = 4;

/// `clumps.png` of the run in `dir`, or `None` when it has no `clumps.csv`.
pub fn clumps_figure(dir: &Path) -> Result<Option<Figure>, PlotError> {
    let path = dir.join("clumps.csv");
    if !path.is_file() {
        return Ok(None);
    }
    let table = Table::read(&path)?;
    let col = |name: &str| table.numbers(name);
    let (t, clump) = (col("t")?, col("clump")?);
    let q = [col("q_w")?, col("q_x")?, col("q_y")?, col("q_z")?];
    let w = [col("omega_x")?, col("omega_y")?, col("omega_z")?];
    let count = clump.iter().fold(0.0f64, |a, &c| a.max(c + 1.0)) as usize;
    let mut panels = Vec::new();
    for c in 0..count.min(MAX_PANELS) {
        let mut series: [Vec<(f64, f64)>; 3] = Default::default();
        for r in (0..t.len()).filter(|&r| clump[r] == c as f64) {
            let attitude = DQuat::from_xyzw(q[1][r], q[2][r], q[3][r], q[0][r]);
            let body = attitude.conjugate() * DVec3::new(w[0][r], w[1][r], w[2][r]);
            for (k, s) in series.iter_mut().enumerate() {
                s.push((t[r], body[k]));
            }
        }
        let curves = series
            .into_iter()
            .zip(["x", "y", "z"])
            .zip([PALETTE[3], PALETTE[2], PALETTE[0]])
            .map(|((points, axis), colour)| Curve { label: format!("body {axis}"), points, style: Style::line(colour) })
            .collect();
        panels.push(Panel {
            title: format!("clump {c}"),
            x: AxisSpec { label: "time t".into(), log: false, range: None, pad: false },
            y: AxisSpec {
                label: "angular velocity in the body frame, Rᵀ Ω".into(),
                log: false,
                range: None,
                pad: true,
            },
            curves,
            legend: true,
            notes: Vec::new(),
        });
    }
    let notes = if count > MAX_PANELS {
        vec![format!("{count} clumps; the first {MAX_PANELS} drawn (all are in clumps.csv)")]
    } else {
        Vec::new()
    };
    let cols = panels.len().clamp(1, 2);
    let rows = panels.len().div_ceil(2).max(1);
    Ok(Some(Figure {
        title: "clumps: body-frame angular velocity".into(),
        rows,
        cols,
        panels,
        legend: Vec::new(),
        notes,
    }))
}
