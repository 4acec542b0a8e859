//! Drawing a [`Figure`] with plotters into an RGB buffer and writing it as a PNG.
use super::axis::Axis;
use super::figure::{Curve, Figure, Marker, Panel, PlotArea, Stroke, Style};
use super::{HEIGHT, PlotError, WIDTH};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

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
    for (label, style) in entries {
        let indent = if style.is_heading() { 8 } else { 50 };
        w = w.max(indent + text_width(area, label, LEGEND_FONT)?);
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
        let indent = if style.is_heading() { 8 } else { 50 };
        draw_sample(strip, y, style)?;
        strip.draw_text(label, &font(LEGEND_FONT).pos(Pos::new(HPos::Left, VPos::Center)), (indent, y)).map_err(de)?;
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
    // A vertical title longer than the panel is high (small panels of a scatter grid) is set
    // smaller rather than cut at the figure's edge.
    let y_title = ya.title(&panel.y.label);
    let room = (ch as i32 - caption_h - 12) as f64;
    let long = text_width(cell, &y_title, 18.0)? as f64;
    let desc_size = if long > room { (18.0 * room / long).max(11.0) } else { 18.0 };
    chart
        .configure_mesh()
        .x_desc(xa.title(&panel.x.label))
        .y_desc(y_title)
        .label_style(font(16.0))
        .axis_desc_style(font(desc_size))
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
        x_ticks: xa.major.len(),
        y_ticks: ya.major.len(),
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
