//! Scatter grids of a table's columns (`study.png`).
use super::figure::{AxisSpec, Curve, Figure, Marker, Panel, PlotArea, Style};
use super::render::render;
use super::table::Table;
use super::{PALETTE, PlotError};
use std::path::Path;

/// A grid of scatter plots of a table: one row of panels per `y` column, one column of panels
/// per `x` column.
#[derive(Clone, Debug, Default)]
pub struct ScatterSpec {
    pub title: String,
    /// Parameter columns (horizontal axes).
    pub x: Vec<String>,
    /// Outcome columns (vertical axes).
    pub y: Vec<String>,
    /// A column whose distinct values get their own colour and marker, with a legend.
    pub group_by: Option<String>,
    /// Columns drawn on a logarithmic axis.
    pub log: Vec<String>,
}

/// Most panels one scatter figure holds while staying readable at `WIDTH × HEIGHT`.
pub const SCATTER_MAX_PANELS: usize = 16;

/// Draws `spec` from `table` into the PNG `path`; returns the panels' plotting areas, row by row.
/// Rows with a missing (empty) value are left out of the panels that need it.
pub fn scatter(table: &Table, spec: &ScatterSpec, path: &Path) -> Result<Vec<PlotArea>, PlotError> {
    if spec.x.is_empty() || spec.y.is_empty() {
        return Err(PlotError::Spec("a scatter needs at least one x and one y column".into()));
    }
    if spec.x.len() * spec.y.len() > SCATTER_MAX_PANELS {
        return Err(PlotError::Spec(format!(
            "{} × {} panels: at most {SCATTER_MAX_PANELS} fit one figure",
            spec.y.len(),
            spec.x.len()
        )));
    }
    let groups: Vec<String> = match &spec.group_by {
        Some(g) => table.texts(g)?.into_iter().map(str::to_string).collect(),
        None => vec![String::new(); table.rows.len()],
    };
    let mut distinct: Vec<&str> = Vec::new();
    for g in &groups {
        if !distinct.contains(&g.as_str()) {
            distinct.push(g);
        }
    }
    const MARKERS: [Marker; 3] = [Marker::Circle, Marker::Triangle, Marker::Square];
    let style = |k: usize| Style::points(PALETTE[k % 10], MARKERS[(k / 10) % 3]);
    let mut panels = Vec::new();
    for (r, ycol) in spec.y.iter().enumerate() {
        let yv = table.numbers(ycol)?;
        for (c, xcol) in spec.x.iter().enumerate() {
            let xv = table.numbers(xcol)?;
            let curves = distinct
                .iter()
                .enumerate()
                .map(|(k, g)| Curve {
                    label: g.to_string(),
                    points: (0..table.rows.len()).filter(|&i| groups[i] == *g).map(|i| (xv[i], yv[i])).collect(),
                    style: style(k),
                })
                .collect();
            let axis = |name: &str, titled: bool| AxisSpec {
                label: if titled { name.to_string() } else { String::new() },
                log: spec.log.iter().any(|l| l == name),
                range: None,
                pad: true,
            };
            panels.push(Panel {
                title: String::new(),
                x: axis(xcol, r + 1 == spec.y.len()),
                y: axis(ycol, c == 0),
                curves,
                legend: false,
                notes: vec![],
            });
        }
    }
    let legend = match &spec.group_by {
        Some(g) => distinct.iter().enumerate().map(|(k, v)| (format!("{g} = {v}"), style(k))).collect(),
        None => vec![],
    };
    let fig =
        Figure { title: spec.title.clone(), rows: spec.y.len(), cols: spec.x.len(), panels, legend, notes: vec![] };
    render(&fig, path)
}

/// [`scatter`] of a CSV file.
pub fn scatter_csv(csv: &Path, spec: &ScatterSpec, path: &Path) -> Result<Vec<PlotArea>, PlotError> {
    scatter(&Table::read(csv)?, spec, path)
}
