//! What a figure is made of (panels, curves, styles, axis specifications) and where a panel's
//! data landed ([`PlotArea`]).

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

    /// A legend heading: a legend entry with this style is its text alone, from the strip's
    /// left edge.
    pub fn heading() -> Style {
        Style { color: (0, 0, 0), stroke: Stroke::None, width: 0, marker: None }
    }

    pub(super) fn is_heading(&self) -> bool {
        self.stroke == Stroke::None && self.marker.is_none()
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
    /// How many labelled (major) ticks each axis carries.
    pub x_ticks: usize,
    pub y_ticks: usize,
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

pub(super) fn fraction(v: f64, (lo, hi): (f64, f64), log: bool) -> f64 {
    let u = |v: f64| if log { v.log10() } else { v };
    (u(v) - u(lo)) / (u(hi) - u(lo))
}
