//! The figures of a run: energy budget, relative energy error and momentum drift, from
//! `series.csv` and `summary.json` (and the fragments, `super::fragments`).
use super::axis::significant;
use super::figure::{AxisSpec, Curve, Figure, Panel, Stroke, Style};
use super::render::render;
use super::table::Table;
use super::{BLACK_RGB, GREY, PALETTE, PlotError, create_dir};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The energy terms of `series.csv` with a fixed colour each, so figures of different runs match.
const ENERGY_TERMS: [(&str, &str, usize); 10] = [
    ("E_trans", "translational kinetic", 0),
    ("E_rot", "rotational kinetic", 1),
    ("U_bend", "bending + torsion", 2),
    ("U_axial", "axial", 3),
    ("U_shear", "shear", 4),
    ("U_contact", "particle contact", 5),
    ("U_wall", "wall contact", 6),
    ("U_gravity", "gravity / pendulum", 8),
    ("E_released", "released (broken bonds)", 9),
    ("E_dissipated", "dissipated (damping, friction)", 7),
];

/// The colour `energy.png` draws an energy term of `series.csv` with (`E` is black).
pub fn energy_colour(term: &str) -> Option<(u8, u8, u8)> {
    if term == "E" {
        return Some(BLACK_RGB);
    }
    ENERGY_TERMS.iter().find(|t| t.0 == term).map(|t| PALETTE[t.2])
}

/// What `summary.json` tells the plots; every field is optional so older or partial files work.
#[derive(Clone, Debug, Default)]
struct RunInfo {
    name: Option<String>,
    integrator: Option<String>,
    dt: Option<f64>,
    status: Option<String>,
    /// `energy_and_momenta.max_rel_energy_deviation`: the guard's largest error over every step.
    max_rel_energy_deviation: Option<f64>,
    /// `impact.first_contact_t` and `impact.last_contact_t`: the wall contact interval.
    contact: Option<(f64, f64)>,
    /// Exactly conserved directions of P, S and L.
    conserved: Option<[Vec<[f64; 3]>; 3]>,
}

impl RunInfo {
    fn read(path: &Path) -> Result<Option<RunInfo>, PlotError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(PlotError::Read { path: path.to_owned(), source }),
        };
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| PlotError::Json { path: path.to_owned(), message: e.to_string() })?;
        let dirs = |key: &str| -> Option<Vec<[f64; 3]>> {
            v["energy_and_momenta"]["conserved"][key]
                .as_array()?
                .iter()
                .map(|d| {
                    let a = d.as_array()?;
                    Some([a.first()?.as_f64()?, a.get(1)?.as_f64()?, a.get(2)?.as_f64()?])
                })
                .collect()
        };
        let conserved = match (dirs("p"), dirs("s"), dirs("l")) {
            (Some(p), Some(s), Some(l)) => Some([p, s, l]),
            _ => None,
        };
        Ok(Some(RunInfo {
            name: v["scenario"]["name"].as_str().map(str::to_string),
            integrator: v["scenario"]["integrator"].as_str().map(str::to_string),
            dt: v["scenario"]["dt"].as_f64(),
            status: v["status"].as_str().map(str::to_string),
            max_rel_energy_deviation: v["energy_and_momenta"]["max_rel_energy_deviation"].as_f64(),
            contact: v["impact"]["first_contact_t"].as_f64().zip(v["impact"]["last_contact_t"].as_f64()),
            conserved,
        }))
    }

    fn title(&self, what: &str) -> String {
        let mut t = match &self.name {
            Some(n) => format!("{n}: {what}"),
            None => what.to_string(),
        };
        if let (Some(i), Some(dt)) = (&self.integrator, self.dt) {
            t.push_str(&format!("  ({i}, h = {dt})"));
        }
        t
    }

    /// Notes saying that the run did not complete, for every figure of it.
    fn status_notes(&self) -> Vec<String> {
        match &self.status {
            Some(s) if s != "completed" => {
                let mut notes = vec![String::new(), "run stopped early:".into()];
                notes.extend(wrap(s, 34, 4));
                notes
            }
            _ => vec![],
        }
    }
}

/// `text` in lines of at most about `width` characters, broken at spaces, at most `lines` of
/// them (the last ending in `…` when text was left out).
fn wrap(text: &str, width: usize, lines: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push(line);
    }
    if out.len() > lines {
        out.truncate(lines);
        out[lines - 1].push('…');
    }
    out
}

fn time_axis() -> AxisSpec {
    AxisSpec { label: "time t".into(), log: false, range: None, pad: false }
}

fn zip(t: &[f64], v: &[f64]) -> Vec<(f64, f64)> {
    t.iter().copied().zip(v.iter().copied()).collect()
}

/// The figures of the run in `dir`, each with the file name it is written under:
/// `energy.png`, `energy_error.png` and `momentum_drift.png` from `dir/series.csv` (and
/// `dir/summary.json` when there is one), and `fragments.png` where the run broke its bodies
/// into more than one fragment (`super::fragments`).
pub fn run_figures(dir: &Path) -> Result<Vec<(&'static str, Figure)>, PlotError> {
    let series = Table::read(&dir.join("series.csv"))?;
    let info = RunInfo::read(&dir.join("summary.json"))?;
    let mut figures = vec![
        ("energy.png", energy_figure(&series, info.as_ref())?),
        ("energy_error.png", energy_error_figure(&series, info.as_ref())?),
        ("momentum_drift.png", momentum_figure(&series, info.as_ref())?),
    ];
    if let Some(f) = super::fragments::fragments_figure(dir)? {
        figures.push(("fragments.png", f));
    }
    if let Some(f) = super::clumps::clumps_figure(dir)? {
        figures.push(("clumps.png", f));
    }
    Ok(figures)
}

/// [`run_figures`] of `dir` drawn into `out`; returns the files written.
pub fn plot_run_dir(dir: &Path, out: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let figures = run_figures(dir)?;
    create_dir(out)?;
    let mut written = Vec::new();
    for (name, fig) in figures {
        let path = out.join(name);
        render(&fig, &path)?;
        written.push(path);
    }
    Ok(written)
}

fn energy_figure(series: &Table, info: Option<&RunInfo>) -> Result<Figure, PlotError> {
    let t = series.numbers("t")?;
    let mut curves =
        vec![Curve { label: "E  total".into(), points: zip(&t, &series.numbers("E")?), style: Style::line(BLACK_RGB) }];
    curves[0].style.width = 3;
    let mut zero = Vec::new();
    for (name, what, colour) in ENERGY_TERMS {
        if !series.has(name) {
            continue;
        }
        let v = series.numbers(name)?;
        if v.iter().all(|x| *x == 0.0 || x.is_nan()) {
            zero.push(name);
            continue;
        }
        curves.push(Curve {
            label: format!("{name}  {what}"),
            points: zip(&t, &v),
            style: Style::line(PALETTE[colour]),
        });
    }
    let mut notes = Vec::new();
    if series.rows.is_empty() {
        notes.push("series.csv has no rows yet".into());
    } else if !zero.is_empty() {
        notes.push("zero throughout, not drawn:".into());
        notes.extend(zero.chunks(3).map(|c| c.join(", ")));
    }
    notes.extend(info.map(RunInfo::status_notes).unwrap_or_default());
    let title = info.map_or("energy budget".into(), |i| i.title("energy budget"));
    let energy = || AxisSpec { label: "energy".into(), pad: true, ..AxisSpec::default() };
    let contact = info.and_then(|i| i.contact);
    let Some((a, b)) = contact.and_then(|c| zoom_window(c, &t)) else {
        let panel = Panel { title: String::new(), x: time_axis(), y: energy(), curves, legend: true, notes };
        return Ok(Figure { title, rows: 1, cols: 1, panels: vec![panel], ..Figure::default() });
    };
    // A short impact in a long run: the whole run above, the contact interval below on its own
    // axes, the window marked on the whole run by two dashed lines.
    let zoomed: Vec<Curve> = curves
        .iter()
        .map(|c| Curve { points: c.points.iter().copied().filter(|p| (a..=b).contains(&p.0)).collect(), ..c.clone() })
        .collect();
    let legend = curves.iter().map(|c| (c.label.clone(), c.style)).collect();
    let (lo, hi) = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let mut whole = curves;
    if lo <= hi {
        for x in [a, b] {
            whole.push(Curve {
                label: String::new(),
                points: vec![(x, lo), (x, hi)],
                style: Style { stroke: Stroke::Dashed, width: 1, ..Style::line(GREY) },
            });
        }
    }
    let (c0, c1) = contact.unwrap_or((a, b));
    let panels = vec![
        Panel {
            title: "whole run (dashed: the window below)".into(),
            x: AxisSpec { label: String::new(), ..time_axis() },
            y: energy(),
            curves: whole,
            ..Panel::default()
        },
        Panel {
            title: format!("impact: wall contact t = {} … {} (summary.json)", significant(c0), significant(c1)),
            x: AxisSpec { range: Some((a, b)), ..time_axis() },
            y: energy(),
            curves: zoomed,
            ..Panel::default()
        },
    ];
    Ok(Figure { title, rows: 2, cols: 1, panels, legend, notes })
}

/// The time window `energy.png` zooms on for a wall contact `[c0, c1]` in a run recorded at
/// times `t`: the contact with a margin of a quarter of its duration or five record
/// intervals, whichever is more, within the run. `None` when the window would cover a third of
/// the run or more (the whole run shows it well) or hold fewer than five records.
fn zoom_window((c0, c1): (f64, f64), t: &[f64]) -> Option<(f64, f64)> {
    let (t0, t1) = (*t.first()?, *t.last()?);
    let span = t1 - t0;
    if !(span > 0.0 && c0.is_finite() && c1.is_finite() && c0 <= c1) {
        return None;
    }
    let margin = (0.25 * (c1 - c0)).max(5.0 * span / (t.len() - 1) as f64);
    let (a, b) = ((c0 - margin).max(t0), (c1 + margin).min(t1));
    let records = t.iter().filter(|v| (a..=b).contains(*v)).count();
    (b > a && b - a < span / 3.0 && records >= 5).then_some((a, b))
}

/// Columns added to `E` in the energy budget the guard watches, when the file has them.
const BUDGET_TERMS: [&str; 2] = ["E_released", "E_dissipated"];

/// `energy_error.png`: the error the energy guard watches, `(B − B₀)/E_scale` with the budget
/// `B = E + E_released + E_dissipated` (a term the file lacks counts 0), `B₀` its first row and
/// `E_scale` the guard's scale at each row; files from before `E_scale` existed fall back to
/// `|B₀|` (the guard of that time), said on the figure.
fn energy_error_figure(series: &Table, info: Option<&RunInfo>) -> Result<Figure, PlotError> {
    let t = series.numbers("t")?;
    let mut budget = series.numbers("E")?;
    let mut expr = String::from("E");
    for term in BUDGET_TERMS.into_iter().filter(|c| series.has(c)) {
        for (b, v) in budget.iter_mut().zip(series.numbers(term)?) {
            *b += v;
        }
        expr.push_str(&format!(" + {term}"));
    }
    let (t0, t1) = (t.first().copied().unwrap_or(0.0), t.last().copied().unwrap_or(1.0));
    let b0 = budget.first().copied().unwrap_or(0.0);
    let mut notes = vec![format!("E₀: {expr}"), format!("  at t = {}: {}", significant(t0), significant(b0))];
    let (err, label): (Vec<f64>, String) = if series.has("E_scale") {
        let scale = series.numbers("E_scale")?;
        notes.extend(wrap(
            "E_scale: running max over the steps of E_trans + E_rot + U_bend + U_axial + U_shear + U_contact + U_wall",
            34,
            4,
        ));
        if let Some(last) = scale.iter().rev().find(|s| s.is_finite()) {
            notes.push(format!("  (last row: {})", significant(*last)));
        }
        let unusable = scale.iter().filter(|s| !(**s > 0.0 && s.is_finite())).count();
        if unusable > 0 {
            notes.push(format!("E_scale ≤ 0 at {unusable} rows: gaps"));
        }
        let err = budget.iter().zip(&scale).map(|(b, s)| if *s > 0.0 { (b - b0) / s } else { f64::NAN }).collect();
        (err, format!("({expr} − E₀) / E_scale"))
    } else if b0 != 0.0 && b0.is_finite() {
        notes.extend(["no E_scale column (older run):".into(), "relative to |E₀| instead".into()]);
        (budget.iter().map(|b| (b - b0) / b0.abs()).collect(), format!("({expr} − E₀) / |E₀|"))
    } else {
        // A zero initial energy has no relative error: show the absolute one.
        notes.extend(["no E_scale column and E₀ = 0:".into(), "absolute error".into()]);
        (budget.iter().map(|b| b - b0).collect(), format!("{expr} − E₀"))
    };
    notes.push(String::new());
    if let Some(max) = info.and_then(|i| i.max_rel_energy_deviation) {
        notes.push(format!("largest |error| {max:.3e}"));
        notes.push("  (summary.json: every step)".into());
    }
    let worst = t.iter().zip(&err).filter(|(_, v)| v.is_finite()).max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()));
    if let Some((tw, w)) = worst {
        notes.push(format!("recorded rows: largest {:.3e}", w.abs()));
        notes.push(format!("  at t = {}", significant(*tw)));
    }
    if let Some(last) = err.iter().rev().find(|v| v.is_finite()) {
        notes.push(format!("final error {last:.3e}"));
    }
    notes.extend(info.map(RunInfo::status_notes).unwrap_or_default());
    let curves = vec![
        Curve {
            label: String::new(),
            points: vec![(t0, 0.0), (t1, 0.0)],
            style: Style { width: 1, ..Style::line(GREY) },
        },
        Curve { label: label.clone(), points: zip(&t, &err), style: Style::line(PALETTE[0]) },
    ];
    let panel = Panel {
        title: String::new(),
        x: time_axis(),
        y: AxisSpec { label, pad: true, ..AxisSpec::default() },
        curves,
        legend: false,
        notes,
    };
    let what = "energy error watched by the guard";
    let title = info.map_or(what.into(), |i| i.title(what));
    Ok(Figure { title, rows: 1, cols: 1, panels: vec![panel], ..Figure::default() })
}

const AXIS_NAMES: [&str; 3] = ["x", "y", "z"];
const AXIS_COLOURS: [(u8, u8, u8); 3] = [PALETTE[3], PALETTE[2], PALETTE[0]];

/// Tells apart, in a legend, a drift that is exactly zero from one at round-off.
fn zero_mark(v: &[f64]) -> &'static str {
    if !v.is_empty() && v.iter().all(|x| *x == 0.0) { "  (≡ 0)" } else { "" }
}

/// The coordinate axis that `d` lies along, if any.
fn direction_name(d: [f64; 3]) -> Option<usize> {
    (0..3).find(|&i| (d[i].abs() - 1.0).abs() < 1e-9)
}

fn momentum_figure(series: &Table, info: Option<&RunInfo>) -> Result<Figure, PlotError> {
    let t = series.numbers("t")?;
    let (t0, t1) = (t.first().copied().unwrap_or(0.0), t.last().copied().unwrap_or(1.0));
    let conserved = info.and_then(|i| i.conserved.clone());
    let mut panels = Vec::new();
    for (q, name) in ["P", "S", "L"].into_iter().enumerate() {
        let mut drift: [Option<Vec<f64>>; 3] = [None, None, None];
        for (i, slot) in drift.iter_mut().enumerate() {
            let col = format!("{name}_{}", AXIS_NAMES[i]);
            if series.has(&col) {
                let v = series.numbers(&col)?;
                let v0 = v.first().copied().unwrap_or(0.0);
                *slot = Some(v.iter().map(|x| x - v0).collect());
            }
        }
        let dirs = conserved.as_ref().map(|c| c[q].clone());
        let exact = |i: usize| dirs.as_ref().is_some_and(|ds| ds.iter().map(|d| d[i] * d[i]).sum::<f64>() > 1.0 - 1e-9);
        let bottom = q == 2;
        let x = AxisSpec {
            label: if bottom { "time t".into() } else { String::new() },
            range: Some((t0, t1)),
            ..time_axis()
        };
        let x = if t1 > t0 { x } else { AxisSpec { range: None, ..x } };
        let mut all = Vec::new();
        for (i, d) in drift.iter().enumerate() {
            if let Some(d) = d {
                let mark = if exact(i) { "  exact" } else { "" };
                all.push(Curve {
                    label: format!("Δ{name}_{}{mark}{}", AXIS_NAMES[i], zero_mark(d)),
                    points: zip(&t, d),
                    style: Style::line(AXIS_COLOURS[i]),
                });
            }
        }
        panels.push(Panel {
            title: format!("{name}(t) − {name}(0)"),
            x: x.clone(),
            y: AxisSpec { label: format!("Δ{name}"), pad: true, ..AxisSpec::default() },
            curves: all,
            legend: true,
            notes: vec![],
        });
        let Some(dirs) = dirs else { continue };
        let mut along = Vec::new();
        let mut extra = 4;
        for d in &dirs {
            let v: Vec<f64> =
                (0..t.len()).map(|k| (0..3).map(|i| drift[i].as_ref().map_or(0.0, |c| c[k]) * d[i]).sum()).collect();
            let (label, colour) = match direction_name(*d) {
                Some(i) => (format!("Δ{name}_{}", AXIS_NAMES[i]), AXIS_COLOURS[i]),
                None => {
                    extra += 1;
                    (format!("Δ{name}·({:.2}, {:.2}, {:.2})", d[0], d[1], d[2]), PALETTE[extra % 10])
                }
            };
            along.push(Curve { label: label + zero_mark(&v), points: zip(&t, &v), style: Style::line(colour) });
        }
        let notes = if along.is_empty() { vec!["none: no exact".into(), "balance holds".into()] } else { vec![] };
        panels.push(Panel {
            title: format!("{name} along its exactly conserved directions"),
            x,
            y: if along.is_empty() {
                AxisSpec { label: format!("Δ{name}"), range: Some((-1.0, 1.0)), ..AxisSpec::default() }
            } else {
                AxisSpec { label: format!("Δ{name}"), pad: true, ..AxisSpec::default() }
            },
            curves: along,
            legend: true,
            notes,
        });
    }
    let cols = if conserved.is_some() { 2 } else { 1 };
    let mut notes = info.map(RunInfo::status_notes).unwrap_or_default();
    if conserved.is_none() {
        notes.push("no summary.json: exactly".into());
        notes.push("conserved directions unknown".into());
    }
    let title = info.map_or("momentum drift".into(), |i| i.title("momentum drift"));
    Ok(Figure { title, rows: 3, cols, panels, legend: vec![], notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_wrapped_not_cut() {
        let w = wrap("rrp-exact cannot take step 12 (t = 0.012): particle 3 has h²|Ω_h|² = 1.2 ≥ 1", 34, 4);
        assert!(w.len() > 1 && w.iter().all(|l| l.chars().count() <= 34), "{w:?}");
        assert_eq!(w.join(" "), "rrp-exact cannot take step 12 (t = 0.012): particle 3 has h²|Ω_h|² = 1.2 ≥ 1");
        assert_eq!(wrap("a b c d", 1, 2), ["a", "b…"]);
    }
}
