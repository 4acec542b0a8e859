//! `convergence.png`: error versus time step of a convergence study (`converge.csv`).
use super::figure::{AxisSpec, Curve, Figure, Marker, Panel, Stroke, Style};
use super::render::render;
use super::table::Table;
use super::{GREY, PALETTE, PlotError, create_dir};
use std::path::{Path, PathBuf};

const INTEGRATOR_STYLES: [(&str, usize, Marker); 3] =
    [("rrp-newmark", 0, Marker::Circle), ("rrp-exact", 1, Marker::Triangle), ("campello", 2, Marker::Square)];

/// `convergence.png` from a `converge.csv` into `out`: error versus time step on log–log axes
/// per integrator, one panel per error measure, with reference slopes 1 and 2. The title names
/// the scenario as [`converge_figure`] finds it.
pub fn plot_converge(csv: &Path, out: &Path) -> Result<PathBuf, PlotError> {
    plot_converge_named(csv, out, None)
}

/// [`plot_converge`] with the scenario's name given by the caller (who ran the study).
pub fn plot_converge_named(csv: &Path, out: &Path, scenario: Option<&str>) -> Result<PathBuf, PlotError> {
    let fig = converge_figure(csv, scenario)?;
    create_dir(out)?;
    let path = out.join("convergence.png");
    render(&fig, &path)?;
    Ok(path)
}

/// The figure of [`plot_converge`], undrawn. Its title names the scenario: `scenario` when
/// given, else the first cell of a `scenario` column of the file, else `scenario.name` of a
/// `summary.json` or `name` of a `scenario.json` beside it; with none of them, no name (the
/// folder's name may be anything).
pub fn converge_figure(csv: &Path, scenario: Option<&str>) -> Result<Figure, PlotError> {
    let table = Table::read(csv)?;
    let name = match scenario {
        Some(s) => Some(s.to_string()),
        None => scenario_name(&table),
    };
    let mut fig = convergence_figure(&table)?;
    fig.title = match name {
        Some(n) => format!("{n}: convergence, error versus time step"),
        None => "convergence: error versus time step".into(),
    };
    Ok(fig)
}

/// The scenario a converge.csv is of, from its own column or the files beside it. A JSON file
/// that cannot be read only leaves the name out: it names the figure, nothing is computed from it.
fn scenario_name(table: &Table) -> Option<String> {
    if let Ok(cells) = table.texts("scenario")
        && let Some(n) = cells.into_iter().find(|c| !c.trim().is_empty())
    {
        return Some(n.to_string());
    }
    let dir = table.path.parent()?;
    let json = |file: &str| -> Option<serde_json::Value> {
        serde_json::from_str(&std::fs::read_to_string(dir.join(file)).ok()?).ok()
    };
    let from_summary = json("summary.json").and_then(|v| v["scenario"]["name"].as_str().map(str::to_string));
    from_summary.or_else(|| json("scenario.json").and_then(|v| v["name"].as_str().map(str::to_string)))
}

fn convergence_figure(table: &Table) -> Result<Figure, PlotError> {
    let names = table.texts("integrator")?;
    let dt = table.numbers("dt")?;
    let mut groups: Vec<&str> = Vec::new();
    for n in &names {
        if !groups.contains(n) {
            groups.push(n);
        }
    }
    let style_of = |g: &str, k: usize| {
        let (colour, marker) = INTEGRATOR_STYLES
            .iter()
            .find(|s| s.0 == g)
            .map_or((PALETTE[(3 + k) % 10], Marker::Circle), |s| (PALETTE[s.1], s.2));
        Style { color: colour, stroke: Stroke::Solid, width: 2, marker: Some(marker) }
    };
    let measures = [
        ("E_error", "E_order", "energy error (38)"),
        ("traj_error_norm", "traj_order_norm", "trajectory error ‖q_h − q‖ / ‖q‖"),
        ("traj_error_paper", "traj_order_paper", "paper's trajectory error (37)"),
    ];
    let dt_lo = dt.iter().copied().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
    let dt_hi = dt.iter().copied().filter(|v| v.is_finite()).fold(0.0, f64::max);
    let mut panels = Vec::new();
    let mut orders: Vec<Vec<String>> = vec![Vec::new(); groups.len()];
    for (col, order_col, title) in measures {
        if !table.has(col) {
            continue;
        }
        let err = table.numbers(col)?;
        let order = if table.has(order_col) { table.numbers(order_col)? } else { vec![f64::NAN; err.len()] };
        let mut curves = Vec::new();
        for (k, g) in groups.iter().enumerate() {
            let mut pts: Vec<(f64, f64)> =
                (0..names.len()).filter(|&r| names[r] == *g).map(|r| (dt[r], err[r])).collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            // The observed order between the two finest steps.
            let finest = (0..names.len())
                .filter(|&r| names[r] == *g && order[r].is_finite())
                .min_by(|&a, &b| dt[a].total_cmp(&dt[b]))
                .map_or("–".to_string(), |r| format!("{:.2}", order[r]));
            orders[k].push(finest);
            curves.push(Curve { label: g.to_string(), points: pts, style: style_of(g, k) });
        }
        // Each reference slope runs a factor 2 below every data point, so that it never
        // crosses or hides a curve.
        let data: Vec<(f64, f64)> = curves
            .iter()
            .flat_map(|c| c.points.iter().copied())
            .filter(|&(d, e)| d > 0.0 && e > 0.0 && e.is_finite())
            .collect();
        if !data.is_empty() && dt_lo < dt_hi {
            for (p, stroke) in [(1, Stroke::Dotted), (2, Stroke::Dashed)] {
                let anchor = 0.5 * data.iter().map(|&(d, e)| e / (d / dt_hi).powi(p)).fold(f64::INFINITY, f64::min);
                let line = |d: f64| anchor * (d / dt_hi).powi(p);
                curves.push(Curve {
                    label: String::new(),
                    points: vec![(dt_lo, line(dt_lo)), (dt_hi, line(dt_hi))],
                    style: Style { color: GREY, stroke, width: 2, marker: None },
                });
            }
        }
        panels.push(Panel {
            title: title.into(),
            x: AxisSpec { label: "time step h".into(), log: true, pad: true, range: None },
            y: AxisSpec { label: "error".into(), log: true, pad: true, range: None },
            curves,
            legend: false,
            notes: vec![],
        });
    }
    if panels.is_empty() {
        return Err(PlotError::MissingColumn { path: table.path.clone(), column: "E_error".into() });
    }
    let mut legend: Vec<(String, Style)> =
        groups.iter().enumerate().map(|(k, g)| (g.to_string(), style_of(g, k))).collect();
    legend.push(("slope 1".into(), Style { color: GREY, stroke: Stroke::Dotted, width: 2, marker: None }));
    legend.push(("slope 2".into(), Style { color: GREY, stroke: Stroke::Dashed, width: 2, marker: None }));
    let mut notes = vec!["observed order at the".into(), "finest step, by panel:".into()];
    for (k, g) in groups.iter().enumerate() {
        notes.push(format!("{g}: {}", orders[k].join(" / ")));
    }
    let cols = panels.len();
    Ok(Figure { title: String::new(), rows: 1, cols, panels, legend, notes })
}
