//! Axes: fitted ranges, tick positions and tick labels, linear or logarithmic.
use super::figure::{AxisSpec, fraction};
use plotters::coord::ranged1d::{KeyPointHint, KeyPointWeight, NoDefaultFormatting, Ranged, ValueFormatter};
use std::ops::Range;

/// A linear or logarithmic axis with its own ticks and label format.
#[derive(Clone, Debug)]
pub(super) struct Axis {
    pub(super) lo: f64,
    pub(super) hi: f64,
    pub(super) log: bool,
    pub(super) major: Vec<f64>,
    minor: Vec<f64>,
    /// Linear axes with very small or large values label `v / 10^e` and name `×10^e` once.
    scale_exp: Option<i32>,
    decimals: usize,
    /// Log axes label plain decimals when every tick is moderate, powers of ten otherwise.
    log_plain: bool,
}

impl Axis {
    pub(super) fn new(spec: &AxisSpec, values: impl Iterator<Item = f64>, target: usize) -> Axis {
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
        if self.major.len() < MIN_TICKS {
            // Too narrow a range for three of 1, 2, 5 × 10ᵏ: fall back to linear steps.
            self.major = linear_major(self.lo, self.hi, target).0;
        }
        self.log_plain = self.major.iter().all(|v| (1e-3..1e4).contains(v));
    }

    pub(super) fn label(&self, v: f64) -> String {
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
    pub(super) fn title(&self, label: &str) -> String {
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

/// Fewest labelled ticks on an axis: three show its scale and direction at a glance.
const MIN_TICKS: usize = 3;

/// Ticks at multiples of a step of 1, 2 or 5 times a power of ten: the step whose tick count in
/// `[lo, hi]` is nearest `target + 1` (the larger step on a tie), with at least `MIN_TICKS`.
fn linear_major(lo: f64, hi: f64, target: usize) -> (Vec<f64>, f64) {
    let want = target.max(2) as f64 + 1.0;
    let e = (hi - lo).log10().floor() as i32;
    let mut best: Option<(f64, Vec<f64>, f64)> = None;
    for k in e - 2..=e + 1 {
        for m in [1.0, 2.0, 5.0] {
            let step = m * 10f64.powi(k);
            let ticks = steps_within(lo, hi, step);
            let score = (ticks.len() as f64 - want).abs();
            if ticks.len() >= MIN_TICKS && best.as_ref().is_none_or(|b| score <= b.0) {
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
pub(super) fn significant(v: f64) -> String {
    let decimals = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

/// `10⁻³` for a power of ten, `2·10⁻³` otherwise.
pub(super) fn power_of_ten(v: f64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
