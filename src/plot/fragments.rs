//! `fragments.png`: what a run broke its bodies into (MODEL §11), from `summary.json`'s
//! `fragments` (the cumulative mass distribution of fragment sizes) and `series.csv`'s fragment
//! columns (their number and the largest and debris mass fractions over time).

use super::figure::{AxisSpec, Curve, Figure, Marker, Panel, Style};
use super::table::Table;
use super::{PALETTE, PlotError};
use serde_json::Value;
use std::path::Path;

/// `fragments.png` of the run in `dir`, or `None` when its `summary.json` reports no more than
/// one fragment or no more than at t = 0 (nothing broke apart: two clumps in orbit are two
/// fragments from the start), or has no `fragments` (a run of an earlier version, or a state
/// that could not be read).
pub fn fragments_figure(dir: &Path) -> Result<Option<Figure>, PlotError> {
    let path = dir.join("summary.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(PlotError::Read { path, source }),
    };
    let v: Value =
        serde_json::from_str(&text).map_err(|e| PlotError::Json { path: path.clone(), message: e.to_string() })?;
    let f = &v["fragments"];
    let at_start = f["initial_count"].as_u64().unwrap_or(1).max(1);
    if f["count"].as_u64().is_none_or(|c| c <= at_start) {
        return Ok(None);
    }
    let numbers = |key: &str| -> Result<Vec<f64>, PlotError> {
        let values = f["cumulative_mass"][key].as_array().ok_or_else(|| PlotError::Json {
            path: path.clone(),
            message: format!("fragments.cumulative_mass.{key}: expected an array of numbers"),
        })?;
        Ok(values.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect())
    };
    let (d, frac) = (numbers("diameter")?, numbers("fraction")?);
    let mut style = Style::line(PALETTE[0]);
    style.marker = Some(Marker::Circle);
    let distribution = Panel {
        title: "cumulative mass".into(),
        x: AxisSpec { label: "volume-equivalent diameter".into(), log: true, range: None, pad: true },
        y: AxisSpec { label: "mass fraction in fragments ≤ diameter".into(), log: true, range: None, pad: true },
        curves: vec![Curve { label: String::new(), points: d.into_iter().zip(frac).collect(), style }],
        legend: false,
        notes: Vec::new(),
    };
    let g = |key: &str| f[key].as_f64().unwrap_or(f64::NAN);
    let n = |key: &str| f[key].as_u64().map_or("?".to_string(), |c| c.to_string());
    let mut notes = vec![
        format!(
            "{} fragments ({} at t = 0), {} of more than one particle",
            n("count"),
            n("initial_count"),
            n("pieces")
        ),
        format!("largest: {:.4} of the mass ({} particles)", g("largest_mass_fraction"), n("largest_particles")),
        format!("debris: {} particles, {:.4} of the mass", n("debris_count"), g("debris_mass_fraction")),
        format!("mass-weighted mean diameter {:.4}", g("mean_diameter")),
    ];
    if let Some(status) = v["status"].as_str().filter(|s| *s != "completed") {
        notes.push(format!("run {status}"));
    }
    let mut panels = vec![distribution];
    let series_path = dir.join("series.csv");
    if series_path.is_file() {
        let series = Table::read(&series_path)?;
        if series.has("n_fragments") {
            panels.extend(time_panels(&series)?);
        }
    }
    let name = v["scenario"]["name"].as_str().map_or("fragments".to_string(), |s| format!("{s}: fragments"));
    let cols = panels.len();
    // The fraction panel's curves, named in the figure's legend (a panel legend squeezes it).
    let legend = panels.get(2).map_or(Vec::new(), |p| p.curves.iter().map(|c| (c.label.clone(), c.style)).collect());
    Ok(Some(Figure { title: name, rows: 1, cols, panels, legend, notes }))
}

/// The number of fragments, and the largest and debris mass fractions, against time.
fn time_panels(series: &Table) -> Result<[Panel; 2], PlotError> {
    let t = series.numbers("t")?;
    let over_t = |v: Vec<f64>| t.iter().copied().zip(v).collect::<Vec<_>>();
    let time = || AxisSpec { label: "time t".into(), log: false, range: None, pad: false };
    let count = Panel {
        title: "fragments".into(),
        x: time(),
        y: AxisSpec { label: "number of fragments".into(), log: false, range: None, pad: true },
        curves: vec![Curve {
            label: String::new(),
            points: over_t(series.numbers("n_fragments")?),
            style: Style::line(PALETTE[0]),
        }],
        legend: false,
        notes: Vec::new(),
    };
    let fractions = Panel {
        title: "mass fractions".into(),
        x: time(),
        y: AxisSpec { label: "fraction of the mass".into(), log: false, range: Some((0.0, 1.0)), pad: false },
        curves: vec![
            Curve {
                label: "largest fragment".into(),
                points: over_t(series.numbers("largest_fragment_fraction")?),
                style: Style::line(PALETTE[1]),
            },
            Curve {
                label: "debris (single particles)".into(),
                points: over_t(series.numbers("debris_fraction")?),
                style: Style::line(PALETTE[2]),
            },
        ],
        legend: false,
        notes: Vec::new(),
    };
    Ok([count, fractions])
}
