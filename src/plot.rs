//! Figures as PNG from the output files: the energy budget, the relative energy error and the
//! momentum drift of a run (`series.csv`, `summary.json`), error versus time step of a
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

use plotters::coord::Shift;
use plotters::coord::ranged1d::{KeyPointHint, KeyPointWeight, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;
use std::ops::Range;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Width of every figure in pixels.
pub const WIDTH: u32 = 1200;
/// Height of every figure in pixels.
pub const HEIGHT: u32 = 800;

const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");

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
    #[error("{dir}: nothing to plot (no series.csv or converge.csv)")]
    NothingToPlot { dir: PathBuf },
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

// ---------------------------------------------------------------------------------------------
// Tables

/// A CSV file as text cells, looked up by column name.
#[derive(Clone, Debug)]
pub struct Table {
    pub path: PathBuf,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn read(path: &Path) -> Result<Table, PlotError> {
        let text = std::fs::read_to_string(path).map_err(|source| PlotError::Read { path: path.to_owned(), source })?;
        Table::parse(path, &text)
    }

    /// Parses CSV text; `path` only names the source in errors. A last line without its newline
    /// and with too few fields is dropped: it is a row cut short by a run that was killed.
    pub fn parse(path: &Path, text: &str) -> Result<Table, PlotError> {
        let csv_err = |line: usize, message: String| PlotError::Csv { path: path.to_owned(), line, message };
        let mut lines = text.split_inclusive('\n').enumerate();
        let header = match lines.next() {
            Some((_, l)) if !l.trim().is_empty() => split_csv(l.trim_end_matches(['\n', '\r'])),
            _ => return Err(csv_err(1, "no header line".into())),
        };
        let mut rows = Vec::new();
        for (i, raw) in lines {
            let line = raw.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                continue;
            }
            let cells = split_csv(line);
            if cells.len() != header.len() {
                if !raw.ends_with('\n') && cells.len() < header.len() {
                    break;
                }
                return Err(csv_err(i + 1, format!("{} fields, the header has {}", cells.len(), header.len())));
            }
            rows.push(cells);
        }
        Ok(Table { path: path.to_owned(), header, rows })
    }

    pub fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    pub fn has(&self, name: &str) -> bool {
        self.column(name).is_some()
    }

    /// The column as numbers; an empty cell is a missing value (NaN), any other cell that is not
    /// a number is an error naming its line.
    pub fn numbers(&self, name: &str) -> Result<Vec<f64>, PlotError> {
        let c = self.require(name)?;
        self.rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let cell = r[c].trim();
                if cell.is_empty() {
                    return Ok(f64::NAN);
                }
                cell.parse().map_err(|_| PlotError::Csv {
                    path: self.path.clone(),
                    line: i + 2,
                    message: format!("column `{name}`: `{cell}` is not a number"),
                })
            })
            .collect()
    }

    pub fn texts(&self, name: &str) -> Result<Vec<&str>, PlotError> {
        let c = self.require(name)?;
        Ok(self.rows.iter().map(|r| r[c].as_str()).collect())
    }

    fn require(&self, name: &str) -> Result<usize, PlotError> {
        self.column(name).ok_or_else(|| PlotError::MissingColumn { path: self.path.clone(), column: name.into() })
    }
}

/// Splits one CSV line; a double-quoted field may hold commas, and `""` inside it is a quote.
fn split_csv(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cell.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => cells.push(std::mem::take(&mut cell)),
            _ => cell.push(ch),
        }
    }
    cells.push(cell);
    cells
}

// ---------------------------------------------------------------------------------------------
// Figure description

/// How a curve's line is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stroke {
    Solid,
    Dashed,
    Dotted,
    /// Markers only.
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Triangle,
    Square,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    pub color: (u8, u8, u8),
    pub stroke: Stroke,
    /// Line width in pixels.
    pub width: u32,
    pub marker: Option<Marker>,
}

impl Style {
    pub fn line(color: (u8, u8, u8)) -> Style {
        Style { color, stroke: Stroke::Solid, width: 2, marker: None }
    }

    pub fn points(color: (u8, u8, u8), marker: Marker) -> Style {
        Style { color, stroke: Stroke::None, width: 2, marker: Some(marker) }
    }
}

/// One data series; curves with an empty label stay out of the legend.
#[derive(Clone, Debug)]
pub struct Curve {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub style: Style,
}

#[derive(Clone, Debug, Default)]
pub struct AxisSpec {
    /// Axis title with its unit; empty leaves the axis untitled (and its label area smaller).
    pub label: String,
    pub log: bool,
    /// Fixed range; `None` fits the data (on a log axis, its positive values).
    pub range: Option<(f64, f64)>,
    /// Adds a 5 % margin to a fitted range.
    pub pad: bool,
}

/// One chart of a figure.
#[derive(Clone, Debug, Default)]
pub struct Panel {
    pub title: String,
    pub x: AxisSpec,
    pub y: AxisSpec,
    pub curves: Vec<Curve>,
    /// Draws this panel's own legend on its right.
    pub legend: bool,
    /// Short lines of text under the panel's legend.
    pub notes: Vec<String>,
}

/// A grid of panels filled row by row, with an optional legend shared by all panels at the right.
#[derive(Clone, Debug, Default)]
pub struct Figure {
    pub title: String,
    pub rows: usize,
    pub cols: usize,
    pub panels: Vec<Panel>,
    pub legend: Vec<(String, Style)>,
    pub notes: Vec<String>,
}

/// Where a panel's data landed: the plotting rectangle in pixels (edges inclusive) and the axis
/// ranges. See the module documentation for the mapping.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlotArea {
    pub left: i32,
    pub top: i32,
    pub right: i32,
    pub bottom: i32,
    pub x: (f64, f64),
    pub y: (f64, f64),
    pub x_log: bool,
    pub y_log: bool,
}

impl PlotArea {
    /// The pixel of the data point `(x, y)`.
    pub fn pixel(&self, x: f64, y: f64) -> (i32, i32) {
        let fx = fraction(x, self.x, self.x_log);
        let fy = fraction(y, self.y, self.y_log);
        (
            (self.left as f64 + fx * (self.right - self.left) as f64).round() as i32,
            (self.bottom as f64 - fy * (self.bottom - self.top) as f64).round() as i32,
        )
    }
}

fn fraction(v: f64, (lo, hi): (f64, f64), log: bool) -> f64 {
    let u = |v: f64| if log { v.log10() } else { v };
    (u(v) - u(lo)) / (u(hi) - u(lo))
}

// ---------------------------------------------------------------------------------------------
// Axes: ranges, ticks and labels

/// A linear or logarithmic axis with its own ticks and label format.
#[derive(Clone, Debug)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    major: Vec<f64>,
    minor: Vec<f64>,
    /// Linear axes with very small or large values label `v / 10^e` and name `×10^e` once.
    scale_exp: Option<i32>,
    decimals: usize,
    /// Log axes label plain decimals when every tick is moderate, powers of ten otherwise.
    log_plain: bool,
}

impl Axis {
    fn new(spec: &AxisSpec, values: impl Iterator<Item = f64>, target: usize) -> Axis {
        let (lo, hi) = spec.range.unwrap_or_else(|| fit_range(values, spec.log, spec.pad));
        let mut axis =
            Axis { lo, hi, log: spec.log, major: vec![], minor: vec![], scale_exp: None, decimals: 0, log_plain: true };
        if spec.log {
            axis.log_ticks(target);
        } else {
            axis.linear_ticks(target);
        }
        axis
    }

    fn linear_ticks(&mut self, target: usize) {
        let (major, step) = linear_major(self.lo, self.hi, target);
        self.major = major;
        let largest = self.major.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let mut unit = 1.0;
        if largest > 0.0 && !(1e-2..1e5).contains(&largest) {
            let e = largest.log10().floor() as i32;
            self.scale_exp = Some(e);
            unit = 10f64.powi(e);
        }
        self.decimals = (-(step / unit).log10().floor()).max(0.0) as usize;
    }

    fn log_ticks(&mut self, target: usize) {
        let (l0, l1) = (self.lo.log10(), self.hi.log10());
        let (d0, d1) = (l0.floor() as i32, l1.ceil() as i32);
        let within = |v: f64| v >= self.lo * (1.0 - 1e-9) && v <= self.hi * (1.0 + 1e-9);
        // Fewer than three powers of ten in range are too few labels: label 2 and 5 times them too.
        let powers = (d0..=d1).filter(|&d| within(10f64.powi(d))).count();
        let mantissas: &[f64] = if powers < 3 { &[1.0, 2.0, 5.0] } else { &[1.0] };
        let every = ((d1 - d0 + 1) as usize).div_ceil(target.max(1)).max(1) as i32;
        for d in d0..=d1 {
            let p = 10f64.powi(d);
            if mantissas.len() > 1 || (d - d0) % every == 0 {
                self.major.extend(mantissas.iter().map(|m| m * p).filter(|&v| within(v)));
            }
            if l1 - l0 <= 12.0 {
                self.minor.extend((2..10).map(|j| j as f64 * p).filter(|&v| within(v)));
            }
        }
        if self.major.len() < 2 {
            // Less than a decade between two labelled values: fall back to linear steps.
            self.major = linear_major(self.lo, self.hi, target).0;
        }
        self.log_plain = self.major.iter().all(|v| (1e-3..1e4).contains(v));
    }

    fn label(&self, v: f64) -> String {
        let s = if self.log {
            if self.log_plain { significant(v) } else { power_of_ten(v) }
        } else {
            let unit = self.scale_exp.map_or(1.0, |e| 10f64.powi(e));
            let x = v / unit;
            if x.abs() < 0.5 * 10f64.powi(-(self.decimals as i32)) {
                "0".to_string()
            } else {
                format!("{:.*}", self.decimals, x)
            }
        };
        s.replace('-', "−")
    }

    /// The axis title, with the common factor of the tick labels when there is one.
    fn title(&self, label: &str) -> String {
        match self.scale_exp {
            Some(e) if !label.is_empty() => format!("{label}  (×10{})", superscript(e)),
            _ => label.to_string(),
        }
    }
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let f = fraction(*v, (self.lo, self.hi), self.log);
        // Clamped so that a far-off or non-positive value on a log axis stays a valid pixel.
        (limit.0 as f64 + f * (limit.1 - limit.0) as f64).round().clamp(-1e6, 1e6) as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        match hint.weight() {
            KeyPointWeight::Bold => self.major.clone(),
            KeyPointWeight::Any => self.major.iter().chain(&self.minor).copied().collect(),
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Axis {
    fn format_ext(&self, v: &f64) -> String {
        self.label(*v)
    }
}

fn fit_range(values: impl Iterator<Item = f64>, log: bool, pad: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if log {
        if lo > hi {
            return (0.1, 1.0);
        }
        let (mut l0, mut l1) = (lo.log10(), hi.log10());
        if l1 - l0 < 1e-9 {
            (l0, l1) = (l0 - 0.3, l1 + 0.3);
        } else if pad {
            let m = 0.05 * (l1 - l0);
            (l0, l1) = (l0 - m, l1 + m);
        }
        return (10f64.powf(l0), 10f64.powf(l1));
    }
    if lo > hi {
        return (0.0, 1.0);
    }
    let span = hi - lo;
    if span <= 1e-12 * lo.abs().max(hi.abs()) || span == 0.0 {
        let half = if lo != 0.0 { 0.1 * lo.abs() } else { 1.0 };
        return (lo - half, hi + half);
    }
    if pad { (lo - 0.05 * span, hi + 0.05 * span) } else { (lo, hi) }
}

/// Ticks at multiples of a step of 1, 2 or 5 times a power of ten: the step whose tick count in
/// `[lo, hi]` is nearest `target + 1` (the larger step on a tie), with at least two ticks.
fn linear_major(lo: f64, hi: f64, target: usize) -> (Vec<f64>, f64) {
    let want = target.max(2) as f64 + 1.0;
    let e = (hi - lo).log10().floor() as i32;
    let mut best: Option<(f64, Vec<f64>, f64)> = None;
    for k in e - 2..=e + 1 {
        for m in [1.0, 2.0, 5.0] {
            let step = m * 10f64.powi(k);
            let ticks = steps_within(lo, hi, step);
            let score = (ticks.len() as f64 - want).abs();
            if ticks.len() >= 2 && best.as_ref().is_none_or(|b| score <= b.0) {
                best = Some((score, ticks, step));
            }
        }
    }
    best.map_or_else(|| (vec![lo, hi], hi - lo), |(_, t, s)| (t, s))
}

fn steps_within(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let k0 = (lo / step - 1e-9).ceil() as i64;
    let k1 = (hi / step + 1e-9).floor() as i64;
    (k0..=k1).map(|k| k as f64 * step).collect()
}

/// Three significant digits without trailing zeros: `0.02`, `0.125`, `40`.
fn significant(v: f64) -> String {
    let decimals = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

/// `10⁻³` for a power of ten, `2·10⁻³` otherwise.
fn power_of_ten(v: f64) -> String {
    let e = v.abs().log10().floor() as i32;
    let m = v / 10f64.powi(e);
    if (m - 1.0).abs() < 1e-6 {
        format!("10{}", superscript(e))
    } else {
        format!("{}·10{}", significant(m), superscript(e))
    }
}

fn superscript(e: i32) -> String {
    e.to_string()
        .chars()
        .map(|c| match c {
            '-' => '⁻',
            d => ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'][d.to_digit(10).unwrap_or(0) as usize],
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Rendering

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

fn de<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn font(size: f64) -> TextStyle<'static> {
    (FONT, size).into_font().color(&BLACK)
}

fn rgb((r, g, b): (u8, u8, u8)) -> RGBColor {
    RGBColor(r, g, b)
}

/// Registers the embedded font once per process (plotters keeps it in a global table).
fn ensure_font() -> Result<(), PlotError> {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok());
    if ok { Ok(()) } else { Err(PlotError::Font) }
}

/// Draws `fig` and writes it to `path` as a PNG; returns each panel's plotting area.
pub fn render(fig: &Figure, path: &Path) -> Result<Vec<PlotArea>, PlotError> {
    let (pixels, areas) = render_rgb(fig).map_err(|e| match e {
        RenderError::Plot(e) => e,
        RenderError::Draw(message) => PlotError::Draw { path: path.to_owned(), message },
    })?;
    write_png(path, &pixels)?;
    Ok(areas)
}

enum RenderError {
    Plot(PlotError),
    Draw(String),
}

impl From<String> for RenderError {
    fn from(s: String) -> RenderError {
        RenderError::Draw(s)
    }
}

/// Draws `fig` into an RGB buffer (3 bytes a pixel, row by row).
fn render_rgb(fig: &Figure) -> Result<(Vec<u8>, Vec<PlotArea>), RenderError> {
    ensure_font().map_err(RenderError::Plot)?;
    validate(fig).map_err(RenderError::Plot)?;
    let mut pixels = vec![255u8; (WIDTH * HEIGHT * 3) as usize];
    let mut areas = Vec::new();
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(de)?;
        let mut body = root.clone();
        if !fig.title.is_empty() {
            body = body.titled(&fig.title, font(26.0)).map_err(de)?;
        }
        if !fig.legend.is_empty() || !fig.notes.is_empty() {
            let w = strip_width(&body, &fig.legend, &fig.notes)?;
            let (main, strip) = body.split_horizontally(body.dim_in_pixel().0 as i32 - w);
            draw_legend(&strip, &fig.legend, &fig.notes, 40)?;
            body = main;
        }
        let cells = body.split_evenly((fig.rows.max(1), fig.cols.max(1)));
        for (cell, panel) in cells.iter().zip(&fig.panels) {
            areas.push(draw_panel(cell, panel)?);
        }
        root.present().map_err(de)?;
    }
    Ok((pixels, areas))
}

fn validate(fig: &Figure) -> Result<(), PlotError> {
    if fig.panels.len() > fig.rows.max(1) * fig.cols.max(1) {
        return Err(PlotError::Spec(format!(
            "{} panels do not fit a {}×{} grid",
            fig.panels.len(),
            fig.rows,
            fig.cols
        )));
    }
    for p in &fig.panels {
        for a in [&p.x, &p.y] {
            if let Some((lo, hi)) = a.range
                && !(lo.is_finite() && hi.is_finite() && lo < hi && (!a.log || lo > 0.0))
            {
                return Err(PlotError::Spec(format!("axis `{}`: range [{lo}, {hi}] is not usable", a.label)));
            }
        }
    }
    Ok(())
}

fn write_png(path: &Path, pixels: &[u8]) -> Result<(), PlotError> {
    let werr = |e: png::EncodingError| PlotError::Write { path: path.to_owned(), source: std::io::Error::other(e) };
    let file = std::fs::File::create(path).map_err(|source| PlotError::Write { path: path.to_owned(), source })?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), WIDTH, HEIGHT);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(werr)?;
    w.write_image_data(pixels).map_err(werr)?;
    w.finish().map_err(werr)
}

const LEGEND_FONT: f64 = 16.0;
const NOTE_FONT: f64 = 15.0;
const LEGEND_ROW: i32 = 24;

fn text_width(area: &Area, text: &str, size: f64) -> Result<i32, String> {
    Ok(area.estimate_text_size(text, &font(size)).map_err(de)?.0 as i32)
}

fn strip_width(area: &Area, entries: &[(String, Style)], notes: &[String]) -> Result<i32, String> {
    let mut w = 0;
    for (label, _) in entries {
        w = w.max(50 + text_width(area, label, LEGEND_FONT)?);
    }
    for n in notes {
        w = w.max(8 + text_width(area, n, NOTE_FONT)?);
    }
    // ab_glyph's width estimate runs a little short of the drawn text.
    Ok(w + 30)
}

fn draw_legend(strip: &Area, entries: &[(String, Style)], notes: &[String], top: i32) -> Result<(), String> {
    let mut y = top;
    for (label, style) in entries {
        draw_sample(strip, y, style)?;
        strip.draw_text(label, &font(LEGEND_FONT).pos(Pos::new(HPos::Left, VPos::Center)), (50, y)).map_err(de)?;
        y += LEGEND_ROW;
    }
    if !entries.is_empty() {
        y += 10;
    }
    let note_style = font(NOTE_FONT).color(&RGBColor(60, 60, 60)).pos(Pos::new(HPos::Left, VPos::Center));
    for n in notes {
        strip.draw_text(n, &note_style, (8, y)).map_err(de)?;
        y += 20;
    }
    Ok(())
}

/// A short stretch of a curve's line (and marker) as the legend shows it.
fn draw_sample(strip: &Area, y: i32, style: &Style) -> Result<(), String> {
    let s = ShapeStyle { color: rgb(style.color).to_rgba(), filled: false, stroke_width: style.width };
    let segs: &[(i32, i32)] = match style.stroke {
        Stroke::Solid => &[(6, 42)],
        Stroke::Dashed => &[(6, 16), (22, 32), (38, 42)],
        Stroke::Dotted => &[(6, 8), (13, 15), (20, 22), (27, 29), (34, 36), (41, 42)],
        Stroke::None => &[],
    };
    for &(a, b) in segs {
        strip.draw(&PathElement::new(vec![(a, y), (b, y)], s)).map_err(de)?;
    }
    if let Some(m) = style.marker {
        draw_marker(strip, (24, y), m, style.color)?;
    }
    Ok(())
}

fn draw_marker<DB: DrawingBackend, CT: CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    at: CT::From,
    m: Marker,
    color: (u8, u8, u8),
) -> Result<(), String>
where
    CT::From: Clone,
{
    let fill = rgb(color).filled();
    match m {
        Marker::Circle => area.draw(&Circle::new(at, 5, fill)).map_err(de),
        Marker::Triangle => area.draw(&TriangleMarker::new(at, 7, fill)).map_err(de),
        Marker::Square => area.draw(&(EmptyElement::at(at) + Rectangle::new([(-4, -4), (4, 4)], fill))).map_err(de),
    }
}

fn draw_panel(cell: &Area, panel: &Panel) -> Result<PlotArea, String> {
    let (cw, ch) = cell.dim_in_pixel();
    let entries: Vec<(String, Style)> = if panel.legend {
        panel.curves.iter().filter(|c| !c.label.is_empty()).map(|c| (c.label.clone(), c.style)).collect()
    } else {
        vec![]
    };
    let (chart_cell, strip) = if entries.is_empty() && panel.notes.is_empty() {
        (cell.clone(), None)
    } else {
        let (a, b) = cell.split_horizontally(cw as i32 - strip_width(cell, &entries, &panel.notes)?);
        (a, Some(b))
    };
    let caption_h = if panel.title.is_empty() { 0 } else { 34 };
    let x_area = if panel.x.label.is_empty() { 34 } else { 62 };
    let y_desc = if panel.y.label.is_empty() { 0 } else { 32 };
    let ys = panel.curves.iter().flat_map(|c| c.points.iter().map(|p| p.1));
    let plot_h = ch as i32 - caption_h - x_area - 16;
    let ya = Axis::new(&panel.y, ys, (plot_h / 45).clamp(2, 10) as usize);
    let mut tick_w = 0;
    for v in &ya.major {
        tick_w = tick_w.max(text_width(cell, &ya.label(*v), 16.0)?);
    }
    let y_area = tick_w + 16 + y_desc;
    let plot_w = chart_cell.dim_in_pixel().0 as i32 - y_area - 26;
    let xs = panel.curves.iter().flat_map(|c| c.points.iter().map(|p| p.0));
    let xa = Axis::new(&panel.x, xs, (plot_w / 110).clamp(2, 10) as usize);

    let mut builder = ChartBuilder::on(&chart_cell);
    builder.margin_top(8).margin_bottom(8).margin_left(6).margin_right(20);
    builder.x_label_area_size(x_area).y_label_area_size(y_area);
    if !panel.title.is_empty() {
        builder.caption(&panel.title, font(20.0));
    }
    let mut chart = builder.build_cartesian_2d(xa.clone(), ya.clone()).map_err(de)?;
    chart
        .configure_mesh()
        .x_desc(xa.title(&panel.x.label))
        .y_desc(ya.title(&panel.y.label))
        .label_style(font(16.0))
        .axis_desc_style(font(18.0))
        .x_labels(xa.major.len().max(1))
        .y_labels(ya.major.len().max(1))
        .bold_line_style(RGBColor(0, 0, 0).mix(0.12))
        .light_line_style(RGBColor(0, 0, 0).mix(0.04))
        .draw()
        .map_err(de)?;
    for c in &panel.curves {
        draw_curve(&mut chart, c, &xa, &ya)?;
    }
    if let Some(strip) = strip {
        draw_legend(&strip, &entries, &panel.notes, caption_h + 20)?;
    }
    let (xr, yr) = chart.plotting_area().get_pixel_range();
    Ok(PlotArea {
        left: xr.start,
        top: yr.start,
        right: xr.end - 1,
        bottom: yr.end - 1,
        x: (xa.lo, xa.hi),
        y: (ya.lo, ya.hi),
        x_log: xa.log,
        y_log: ya.log,
    })
}

fn draw_curve(
    chart: &mut ChartContext<BitMapBackend, Cartesian2d<Axis, Axis>>,
    c: &Curve,
    xa: &Axis,
    ya: &Axis,
) -> Result<(), String> {
    let usable = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!xa.log || x > 0.0) && (!ya.log || y > 0.0);
    let screen = chart.plotting_area().use_screen_coord();
    let (xr, yr) = chart.plotting_area().get_pixel_range();
    let colour = rgb(c.style.color);
    // Lines are rasterised here, not by plotters: its wide lines leave spikes at the sharp
    // corners of noisy series and its thin ones drop the last pixel of some segments. This
    // gives solid pixels of exactly the curve's colour, clipped to the plotting rectangle.
    let w = c.style.width.max(1) as i32;
    let brush: Vec<(i32, i32)> =
        ((1 - w) / 2..=w / 2).flat_map(|dx| ((1 - w) / 2..=w / 2).map(move |dy| (dx, dy))).collect();
    let (on, period) = match c.style.stroke {
        Stroke::Solid => (1, 1),
        Stroke::Dashed => (10, 16),
        Stroke::Dotted => (2, 6),
        Stroke::None => (0, 1),
    };
    // A missing value breaks the line rather than bridging the gap.
    for segment in c.points.split(|p| !usable(p)).filter(|s| s.len() > 1 && on > 0) {
        let px: Vec<(i32, i32)> = segment.iter().map(|p| chart.backend_coord(p)).collect();
        for (k, (x, y)) in raster(&decimate(&px)).into_iter().enumerate() {
            if k % period >= on {
                continue;
            }
            for &(dx, dy) in &brush {
                let p = (x + dx, y + dy);
                if xr.contains(&p.0) && yr.contains(&p.1) {
                    screen.draw_pixel(p, &colour).map_err(de)?;
                }
            }
        }
    }
    if let Some(m) = c.style.marker {
        for p in c.points.iter().filter(|p| usable(p)) {
            draw_marker(chart.plotting_area(), *p, m, c.style.color)?;
        }
    }
    Ok(())
}

/// The pixels of the 1-pixel polyline through `px` in drawing order (Bresenham), each joint
/// once; far-off points are clamped first so a wild value cannot stall the walk.
fn raster(px: &[(i32, i32)]) -> Vec<(i32, i32)> {
    const FAR: i32 = 20_000;
    let mut out = Vec::new();
    let clamp = |(x, y): (i32, i32)| (x.clamp(-FAR, FAR), y.clamp(-FAR, FAR));
    for pair in px.windows(2) {
        let ((mut x, mut y), (x1, y1)) = (clamp(pair[0]), clamp(pair[1]));
        let (dx, dy) = ((x1 - x).abs(), -(y1 - y).abs());
        let (sx, sy) = ((x1 - x).signum(), (y1 - y).signum());
        let mut err = dx + dy;
        loop {
            if out.last() != Some(&(x, y)) {
                out.push((x, y));
            }
            if (x, y) == (x1, y1) {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }
    if px.len() == 1 {
        out.push(clamp(px[0]));
    }
    out
}

/// Each run of points in one pixel column reduced to its first, lowest, highest and last point:
/// the same 1-pixel line, drawn from at most four points a column however dense the series.
fn decimate(px: &[(i32, i32)]) -> Vec<(i32, i32)> {
    let mut out: Vec<(i32, i32)> = Vec::with_capacity(px.len().min(4096));
    let mut i = 0;
    while i < px.len() {
        let (mut lo, mut hi, mut j) = (i, i, i);
        while j < px.len() && px[j].0 == px[i].0 {
            if px[j].1 < px[lo].1 {
                lo = j;
            }
            if px[j].1 > px[hi].1 {
                hi = j;
            }
            j += 1;
        }
        let mut keep = [i, lo, hi, j - 1];
        keep.sort_unstable();
        for k in keep {
            if out.last() != Some(&px[k]) {
                out.push(px[k]);
            }
        }
        i = j;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The figures of a run

/// Tableau's ten colours: distinct, and readable on white.
const PALETTE: [(u8, u8, u8); 10] = [
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
const BLACK_RGB: (u8, u8, u8) = (0, 0, 0);
const GREY: (u8, u8, u8) = (110, 110, 110);

/// The energy terms of `series.csv` with a fixed colour each, so figures of different runs match.
const ENERGY_TERMS: [(&str, &str, usize); 9] = [
    ("E_trans", "translational kinetic", 0),
    ("E_rot", "rotational kinetic", 1),
    ("U_bend", "bending + torsion", 2),
    ("U_axial", "axial", 3),
    ("U_shear", "shear", 4),
    ("U_contact", "particle contact", 5),
    ("U_wall", "wall contact", 6),
    ("U_gravity", "gravity / pendulum", 8),
    ("E_released", "released (broken bonds)", 9),
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
    e0: Option<f64>,
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
            e0: v["energy_and_momenta"]["e0"].as_f64(),
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

/// `energy.png`, `energy_error.png` and `momentum_drift.png` from `dir/series.csv` (and
/// `dir/summary.json` when there is one) into `out`; returns the files written.
pub fn plot_run_dir(dir: &Path, out: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let series = Table::read(&dir.join("series.csv"))?;
    let info = RunInfo::read(&dir.join("summary.json"))?;
    create_dir(out)?;
    let mut written = Vec::new();
    for (name, fig) in [
        ("energy.png", energy_figure(&series, info.as_ref())?),
        ("energy_error.png", energy_error_figure(&series, info.as_ref())?),
        ("momentum_drift.png", momentum_figure(&series, info.as_ref())?),
    ] {
        let path = out.join(name);
        render(&fig, &path)?;
        written.push(path);
    }
    Ok(written)
}

fn create_dir(out: &Path) -> Result<(), PlotError> {
    std::fs::create_dir_all(out).map_err(|source| PlotError::Write { path: out.to_owned(), source })
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
    let panel = Panel {
        title: String::new(),
        x: time_axis(),
        y: AxisSpec { label: "energy".into(), pad: true, ..AxisSpec::default() },
        curves,
        legend: true,
        notes,
    };
    let title = info.map_or("energy budget".into(), |i| i.title("energy budget"));
    Ok(Figure { title, rows: 1, cols: 1, panels: vec![panel], ..Figure::default() })
}

fn energy_error_figure(series: &Table, info: Option<&RunInfo>) -> Result<Figure, PlotError> {
    let t = series.numbers("t")?;
    let e = series.numbers("E")?;
    let from_summary = info.and_then(|i| i.e0);
    let e0 = from_summary.or(e.first().copied()).unwrap_or(0.0);
    // A zero initial energy has no relative error: show the absolute one.
    let (scale, label) =
        if e0 != 0.0 && e0.is_finite() { (e0.abs(), "(E − E₀) / |E₀|") } else { (1.0, "E − E₀") };
    let err: Vec<f64> = e.iter().map(|v| (v - e0) / scale).collect();
    let mut notes = vec![format!(
        "E₀ = {} ({})",
        significant(e0),
        if from_summary.is_some() { "summary.json" } else { "first row" }
    )];
    let worst = t.iter().zip(&err).filter(|(_, v)| v.is_finite()).max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()));
    if let Some((tw, w)) = worst {
        notes.push(format!("largest |error| {:.3e}", w.abs()));
        notes.push(format!("at t = {}", significant(*tw)));
    }
    if let Some(last) = err.iter().rev().find(|v| v.is_finite()) {
        notes.push(format!("final error {last:.3e}"));
    }
    notes.extend(info.map(RunInfo::status_notes).unwrap_or_default());
    let (t0, t1) = (t.first().copied().unwrap_or(0.0), t.last().copied().unwrap_or(1.0));
    let curves = vec![
        Curve {
            label: String::new(),
            points: vec![(t0, 0.0), (t1, 0.0)],
            style: Style { width: 1, ..Style::line(GREY) },
        },
        Curve { label: label.into(), points: zip(&t, &err), style: Style::line(PALETTE[0]) },
    ];
    let panel = Panel {
        title: String::new(),
        x: time_axis(),
        y: AxisSpec { label: label.into(), pad: true, ..AxisSpec::default() },
        curves,
        legend: false,
        notes,
    };
    let title = info.map_or("relative energy error".into(), |i| i.title("relative energy error"));
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

// ---------------------------------------------------------------------------------------------
// Convergence

const INTEGRATOR_STYLES: [(&str, usize, Marker); 3] =
    [("rrp-newmark", 0, Marker::Circle), ("rrp-exact", 1, Marker::Triangle), ("campello", 2, Marker::Square)];

/// `convergence.png` from a `converge.csv` into `out`: error versus time step on log–log axes
/// per integrator, one panel per error measure, with reference slopes 1 and 2.
pub fn plot_converge(csv: &Path, out: &Path) -> Result<PathBuf, PlotError> {
    let table = Table::read(csv)?;
    let fig = convergence_figure(&table)?;
    create_dir(out)?;
    let path = out.join("convergence.png");
    render(&fig, &path)?;
    Ok(path)
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
    let place = table.path.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned());
    let title = match place {
        Some(p) => format!("{p}: convergence, error versus time step"),
        None => "convergence: error versus time step".into(),
    };
    let cols = panels.len();
    Ok(Figure { title, rows: 1, cols, panels, legend, notes })
}

// ---------------------------------------------------------------------------------------------
// Scatter (studies)

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

// ---------------------------------------------------------------------------------------------
// A whole output folder

/// Every figure the files in `dir` allow, written into `out`: the run figures when there is a
/// `series.csv`, `convergence.png` when there is a `converge.csv`.
pub fn plot_dir(dir: &Path, out: &Path) -> Result<Vec<PathBuf>, PlotError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_quotes() {
        assert_eq!(split_csv(r#"a,"b,c",,"d""e""#), vec!["a", "b,c", "", "d\"e"]);
    }

    #[test]
    fn a_row_cut_short_at_the_end_is_dropped_but_not_in_the_middle() {
        let p = Path::new("s.csv");
        let t = Table::parse(p, "a,b\n1,2\n3").unwrap();
        assert_eq!(t.rows.len(), 1);
        let e = Table::parse(p, "a,b\n1\n3,4\n").unwrap_err();
        assert!(matches!(e, PlotError::Csv { line: 2, .. }), "{e}");
    }

    #[test]
    fn status_is_wrapped_not_cut() {
        let w = wrap("rrp-exact cannot take step 12 (t = 0.012): particle 3 has h²|Ω_h|² = 1.2 ≥ 1", 34, 4);
        assert!(w.len() > 1 && w.iter().all(|l| l.chars().count() <= 34), "{w:?}");
        assert_eq!(w.join(" "), "rrp-exact cannot take step 12 (t = 0.012): particle 3 has h²|Ω_h|² = 1.2 ≥ 1");
        assert_eq!(wrap("a b c d", 1, 2), ["a", "b…"]);
    }

    #[test]
    fn tick_labels() {
        assert_eq!(significant(0.02), "0.02");
        assert_eq!(significant(40.0), "40");
        assert_eq!(significant(0.125), "0.125");
        assert_eq!(power_of_ten(1e-5), "10⁻⁵");
        assert_eq!(power_of_ten(2e-12), "2·10⁻¹²");
        let a = Axis::new(&AxisSpec { range: Some((-7e-14, 2e-14)), ..AxisSpec::default() }, std::iter::empty(), 5);
        assert_eq!(a.scale_exp, Some(-14));
        assert_eq!(a.major.iter().map(|v| a.label(*v)).collect::<Vec<_>>(), ["−6", "−4", "−2", "0", "2"]);
        let l =
            Axis::new(&AxisSpec { log: true, range: Some((5e-3, 0.2)), ..AxisSpec::default() }, std::iter::empty(), 5);
        assert_eq!(
            l.major.iter().map(|v| l.label(*v)).collect::<Vec<_>>(),
            ["0.005", "0.01", "0.02", "0.05", "0.1", "0.2"]
        );
    }
}
