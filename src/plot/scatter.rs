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
    /// Axis and legend names by column; a column without one is named by [`readable`].
    pub labels: Vec<(String, String)>,
    /// The varied columns (of a grid study). In the panels of x column `X`, rows equal in every
    /// other column listed here and in `group_by` are joined by a line in order of `X`: one
    /// line, colour and legend entry per combination of those values. An x column where no two
    /// rows share a combination (a random study) gets points coloured by `group_by`.
    pub connect: Vec<String>,
}

/// Most panels one scatter figure holds while staying readable at `WIDTH × HEIGHT`.
pub const SCATTER_MAX_PANELS: usize = 16;

/// Most legend rows that fit the figure's height (24 pixels a row under the title).
const LEGEND_ROWS: usize = 28;

const MARKERS: [Marker; 3] = [Marker::Circle, Marker::Triangle, Marker::Square];

/// Draws `spec` from `table` into the PNG `path`; returns the panels' plotting areas, row by row.
/// Rows with a missing (empty) value are left out of the panels that need it.
pub fn scatter(table: &Table, spec: &ScatterSpec, path: &Path) -> Result<Vec<PlotArea>, PlotError> {
    render(&scatter_figure(table, spec)?, path)
}

/// [`scatter`] of a CSV file.
pub fn scatter_csv(csv: &Path, spec: &ScatterSpec, path: &Path) -> Result<Vec<PlotArea>, PlotError> {
    scatter(&Table::read(csv)?, spec, path)
}

/// The figure [`scatter`] draws.
pub fn scatter_figure(table: &Table, spec: &ScatterSpec) -> Result<Figure, PlotError> {
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
    let names = Names::new(spec);
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
    let point_style = |k: usize| Style::points(PALETTE[k % 10], MARKERS[(k / 10) % 3]);
    let lines: Vec<Option<Lines>> =
        spec.x.iter().map(|x| Lines::of(table, spec, x, &names)).collect::<Result<_, _>>()?;
    let mut panels = Vec::new();
    for (r, ycol) in spec.y.iter().enumerate() {
        let yv = table.numbers(ycol)?;
        for (c, xcol) in spec.x.iter().enumerate() {
            let xv = table.numbers(xcol)?;
            let curves = match &lines[c] {
                Some(l) => l.curves(&xv, &yv),
                None => distinct
                    .iter()
                    .enumerate()
                    .map(|(k, g)| Curve {
                        label: g.to_string(),
                        points: (0..table.rows.len()).filter(|&i| groups[i] == *g).map(|i| (xv[i], yv[i])).collect(),
                        style: point_style(k),
                    })
                    .collect(),
            };
            let axis = |name: &str, titled: bool| AxisSpec {
                label: if titled { names.get(name) } else { String::new() },
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
    let mut group_entries = Vec::new();
    if let Some(g) = &spec.group_by
        && lines.iter().any(Option::is_none)
    {
        let g = names.get(g);
        group_entries =
            distinct.iter().enumerate().map(|(k, v)| (format!("{g} = {}", shown(v)), point_style(k))).collect();
    }
    let joined: Vec<(&String, &Lines)> =
        spec.x.iter().zip(&lines).filter_map(|(x, l)| Some((x, l.as_ref()?))).collect();
    let room = LEGEND_ROWS.saturating_sub(group_entries.len() + joined.len());
    let per_column = (room / joined.len().max(1)).max(2);
    let mut legend = Vec::new();
    for (x, l) in joined {
        legend.push((format!("against {}:", names.get(x)), Style::heading()));
        let shown = if l.combos.len() > per_column { per_column - 1 } else { per_column };
        legend.extend(l.combos.iter().take(shown).enumerate().map(|(k, (label, _))| (label.clone(), Lines::style(k))));
        if l.combos.len() > shown {
            legend.push((format!("… and {} more lines", l.combos.len() - shown), Style::heading()));
        }
    }
    legend.extend(group_entries);
    Ok(Figure { title: spec.title.clone(), rows: spec.y.len(), cols: spec.x.len(), panels, legend, notes: vec![] })
}

/// The lines of the panels of one x column: each combination of the other varied values
/// with its rows, in order of first appearance.
struct Lines {
    combos: Vec<(String, Vec<usize>)>,
}

impl Lines {
    /// `None` when no two rows share a combination (nothing to join) or `connect` is empty.
    fn of(table: &Table, spec: &ScatterSpec, xcol: &str, names: &Names) -> Result<Option<Lines>, PlotError> {
        if spec.connect.is_empty() {
            return Ok(None);
        }
        let mut others: Vec<&String> = spec.connect.iter().filter(|c| *c != xcol).collect();
        if let Some(g) = &spec.group_by
            && g != xcol
            && !others.contains(&g)
        {
            others.push(g);
        }
        let cells: Vec<Vec<&str>> = others.iter().map(|c| table.texts(c)).collect::<Result<_, _>>()?;
        let mut keys: Vec<Vec<&str>> = Vec::new();
        let mut rows: Vec<Vec<usize>> = Vec::new();
        for i in 0..table.rows.len() {
            let key: Vec<&str> = cells.iter().map(|col| col[i]).collect();
            match keys.iter().position(|k| *k == key) {
                Some(k) => rows[k].push(i),
                None => {
                    keys.push(key);
                    rows.push(vec![i]);
                }
            }
        }
        if rows.iter().all(|r| r.len() < 2) {
            return Ok(None);
        }
        let label = |key: &[&str]| {
            let parts: Vec<String> =
                others.iter().zip(key).map(|(c, v)| format!("{} = {}", names.get(c), shown(v))).collect();
            if parts.is_empty() { "all variants".to_string() } else { parts.join(", ") }
        };
        Ok(Some(Lines { combos: keys.iter().map(|k| label(k)).zip(rows).collect() }))
    }

    fn style(k: usize) -> Style {
        Style { marker: Some(MARKERS[(k / 10) % 3]), ..Style::line(PALETTE[k % 10]) }
    }

    /// One curve per combination through its rows in order of x.
    fn curves(&self, xv: &[f64], yv: &[f64]) -> Vec<Curve> {
        self.combos
            .iter()
            .enumerate()
            .map(|(k, (label, rows))| {
                let mut points: Vec<(f64, f64)> = rows.iter().map(|&i| (xv[i], yv[i])).collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                Curve { label: label.clone(), points, style: Lines::style(k) }
            })
            .collect()
    }
}

/// The names axes and legends give columns: the spec's labels, else [`readable`], else (where
/// two columns would read alike) the column's own name.
struct Names(Vec<(String, String)>);

impl Names {
    fn new(spec: &ScatterSpec) -> Names {
        let mut columns: Vec<&String> =
            spec.x.iter().chain(&spec.y).chain(&spec.connect).chain(&spec.group_by).collect();
        columns.dedup();
        let mut named: Vec<(String, String)> = Vec::new();
        for c in columns {
            if named.iter().any(|(n, _)| n == c) {
                continue;
            }
            let given = spec.labels.iter().find(|(n, _)| n == c).map(|(_, l)| l.clone());
            named.push((c.clone(), given.unwrap_or_else(|| readable(c))));
        }
        let clash: Vec<bool> = named.iter().map(|(c, l)| named.iter().any(|(c2, l2)| c2 != c && l2 == l)).collect();
        for ((c, l), clash) in named.iter_mut().zip(clash) {
            if clash {
                *l = c.clone();
            }
        }
        Names(named)
    }

    fn get(&self, column: &str) -> String {
        self.0.iter().find(|(c, _)| c == column).map_or_else(|| column.to_string(), |(_, l)| l.clone())
    }
}

/// A readable name for a column: a JSON pointer becomes its last one or two named segments
/// with `@` and `_` dropped (`/@impact_speed` → `impact speed`, `/stiffness/wall` →
/// `stiffness wall`), a last index into a vector its component (`/gravity/2` → `gravity z`)
/// and an index into a list the item (`/bodies/0/velocity/0` → `velocity x (body 0)`). Other
/// names stay as they are.
pub fn readable(column: &str) -> String {
    let Some(pointer) = column.strip_prefix('/') else { return column.to_string() };
    let segments: Vec<String> = pointer.split('/').map(|s| s.replace("~1", "/").replace("~0", "~")).collect();
    let mut named: Vec<String> = Vec::new();
    let mut items: Vec<String> = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        let Ok(n) = seg.parse::<usize>() else {
            named.push(seg.trim_start_matches('@').replace('_', " "));
            continue;
        };
        let last = i + 1 == segments.len();
        match named.pop() {
            Some(field) if last => {
                let part = ["x", "y", "z"].get(n).map_or(format!("[{n}]"), |c| c.to_string());
                named.push(format!("{field} {part}"));
            }
            Some(list) => items.push(format!("{} {n}", singular(&list))),
            None => named.push(format!("[{n}]")),
        }
    }
    let mut name = named[named.len().saturating_sub(2)..].join(" ");
    if !items.is_empty() {
        name = format!("{name} ({})", items.join(", "));
    }
    if name.trim().is_empty() { column.to_string() } else { name }
}

/// `bodies` → `body`, `walls` → `wall`: the name of one item of a list.
fn singular(list: &str) -> String {
    if let Some(stem) = list.strip_suffix("ies") {
        format!("{stem}y")
    } else {
        list.strip_suffix('s').unwrap_or(list).to_string()
    }
}

/// A varied value as a legend shows it: an empty cell is a variant that does not set the
/// parameter, which keeps the base scenario's value.
fn shown(v: &str) -> &str {
    if v.trim().is_empty() { "(base)" } else { v }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_pointer_names() {
        for (pointer, name) in [
            ("/@impact_speed", "impact speed"),
            ("/stiffness/wall", "stiffness wall"),
            ("/bodies/0/velocity/0", "velocity x (body 0)"),
            ("/walls/1/normal/2", "normal z (wall 1)"),
            ("/gravity/2", "gravity z"),
            ("/dt", "dt"),
            ("/a~1b/c_d", "a/b c d"),
            ("/particle/lattice/spacing", "lattice spacing"),
            ("/list/7", "list [7]"),
            ("max_rel_energy_error", "max_rel_energy_error"),
        ] {
            assert_eq!(readable(pointer), name, "{pointer}");
        }
    }
}
