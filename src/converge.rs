//! Convergence study (paper §2.5, MODEL §4): energy error (38), the paper's trajectory error
//! (37) and the norm of the trajectory difference, with observed orders between step sizes; the
//! largest energy error and the cost per step, to set the implicit schemes of MODEL §13 (`em`,
//! `sm`) beside the RRP maps.

use crate::diagnostics::Conserved;
use crate::engine::{CpuEngine, Engine};
use crate::error::EngineError;
use crate::guard::Budget;
use crate::integrator::{Integrator, Kinematics};
use crate::model::Model;
use crate::rrp;
use crate::scenario::STEP_ROUNDING;
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ConvergeError {
    #[error("{0}")]
    Setup(String),
    #[error("{integrator} at dt = {dt}: {source}")]
    Engine {
        integrator: Integrator,
        dt: f64,
        #[source]
        source: EngineError,
    },
}

/// One line of the convergence table.
#[derive(Clone, Debug, Serialize)]
pub struct ConvergenceRow {
    pub integrator: Integrator,
    pub dt: f64,
    pub steps: u64,
    /// Eq. (38): `‖E_h − E0‖_{L²(0,T)} / (|E0| sqrt(T))`.
    pub e_error: f64,
    pub e_order: Option<f64>,
    /// Eq. (37) as printed: `|‖q_h‖² − ‖q‖²|^{1/2} / ‖q‖`.
    pub traj_error_paper: f64,
    pub traj_order_paper: Option<f64>,
    /// `‖q_h − q‖ / ‖q‖`.
    pub traj_error_norm: f64,
    pub traj_order_norm: Option<f64>,
    /// Largest drift of P, S, L along the directions the model conserves.
    pub invariant_drift: f64,
    /// Largest `|E_k − E0| / |E0|` over the run's steps (printed; `converge.csv` keeps the
    /// columns the figure reads).
    pub e_max: f64,
    /// Wall-clock seconds per step of the run (printed, not written: it is not reproducible).
    #[serde(skip)]
    pub step_seconds: f64,
}

/// CSV header of a convergence table's rows (`csv_row`); `converge.csv` puts a `scenario`
/// column before them.
pub const CONVERGE_HEADER: &str = "integrator,dt,steps,E_error,E_order,traj_error_paper,traj_order_paper,traj_error_norm,traj_order_norm,invariant_drift";

impl ConvergenceRow {
    pub fn csv_row(&self) -> String {
        let o = |v: Option<f64>| v.map(|v| format!("{v:.6}")).unwrap_or_default();
        format!(
            "{},{:e},{},{:.16e},{},{:.16e},{},{:.16e},{},{:.16e}",
            self.integrator,
            self.dt,
            self.steps,
            self.e_error,
            o(self.e_order),
            self.traj_error_paper,
            o(self.traj_order_paper),
            self.traj_error_norm,
            o(self.traj_order_norm),
            self.invariant_drift
        )
    }
}

/// A run sampled for the study.
struct Sampled {
    /// The energy ledger `E + E_released + E_dissipated` at every step (what the run keeps:
    /// a break or a dashpot moves energy out of `E`, not out of the ledger).
    energy: Vec<f64>,
    /// State at each sample time (every `sample_dt`).
    samples: Vec<Vec<Kinematics>>,
    invariant_drift: f64,
    /// Wall-clock seconds per step.
    step_seconds: f64,
}

fn sampled_run(
    model: &Model,
    integ: Integrator,
    dt: f64,
    per_sample: u64,
    n_samples: u64,
) -> Result<Sampled, ConvergeError> {
    let wrap = |source| ConvergeError::Engine { integrator: integ, dt, source };
    let mut e = CpuEngine::new(model, integ, dt).map_err(wrap)?;
    let d0 = e.diagnostics().map_err(wrap)?;
    let mut budget = Budget::new(&d0, Conserved::for_model(model));
    let mut energy = vec![d0.budget_total()];
    let mut samples = vec![e.snapshot().map_err(wrap)?];
    let started = std::time::Instant::now();
    for _ in 0..n_samples {
        for _ in 0..per_sample {
            e.advance(1).map_err(wrap)?;
            let d = e.diagnostics().map_err(wrap)?;
            budget.update(&d);
            energy.push(d.budget_total());
        }
        samples.push(e.snapshot().map_err(wrap)?);
    }
    let drift = [budget.conserved_drift_p, budget.conserved_drift_s, budget.conserved_drift_l]
        .into_iter()
        .flatten()
        .fold(0.0, f64::max);
    let step_seconds = started.elapsed().as_secs_f64() / (n_samples * per_sample).max(1) as f64;
    Ok(Sampled { energy, samples, invariant_drift: drift, step_seconds })
}

/// Trapezoid rule of equally spaced values.
fn trapezoid(values: impl ExactSizeIterator<Item = f64>, h: f64) -> f64 {
    let n = values.len();
    values.enumerate().map(|(k, v)| if k == 0 || k + 1 == n { 0.5 * v } else { v }).sum::<f64>() * h
}

fn sq_norm(state: &[Kinematics]) -> f64 {
    state
        .iter()
        .map(|k| k.x.length_squared() + k.v.length_squared() + rrp::angle(k.q).powi(2) + k.w.length_squared())
        .sum()
}

fn sq_diff(a: &[Kinematics], b: &[Kinematics]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(p, q)| {
            (p.x - q.x).length_squared()
                + (p.v - q.v).length_squared()
                + rrp::distance(p.q, q.q).powi(2)
                + (p.w - q.w).length_squared()
        })
        .sum()
}

/// The study's sampling: the number of samples and their interval (the largest step), after
/// checking what `converge` needs of its arguments: distinct finite positive steps, each
/// dividing the largest into whole steps, a reference factor of at least 1 (1 where only the
/// energy error is wanted, which needs no reference: the trajectory errors are then against
/// the finest step itself; `rrpdem converge` asks for 2 or more), and an end time that is a
/// whole number of the largest step (within `scenario::STEP_ROUNDING`, as a run's end time).
pub fn plan(dts: &[f64], t_end: f64, ref_factor: u32) -> Result<(u64, f64), ConvergeError> {
    let setup = |m: String| Err(ConvergeError::Setup(m));
    if dts.is_empty() || dts.iter().any(|d| !(d.is_finite() && *d > 0.0)) {
        return setup("time steps must be finite and positive".into());
    }
    if ref_factor == 0 {
        return setup("the reference factor is 0: it must be at least 1 (2 or more for trajectory errors)".into());
    }
    let mut sorted = dts.to_vec();
    sorted.sort_by(f64::total_cmp);
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return setup(format!("dt = {} is given twice: each step is studied once", w[0]));
    }
    let coarse = sorted[sorted.len() - 1];
    for &dt in dts {
        if whole_steps(coarse, dt).is_none() {
            return setup(format!("dt = {dt} does not divide the largest step {coarse} into whole steps"));
        }
    }
    let fine = sorted[0] / ref_factor as f64;
    if whole_steps(coarse, fine).is_none() {
        return setup(format!(
            "the reference step min dt / {ref_factor} = {fine} does not divide the largest step {coarse} into whole \
             steps: choose steps that are whole multiples of the smallest"
        ));
    }
    if !(t_end.is_finite() && t_end > 0.0) {
        return setup(format!("t_end = {t_end}: it must be a finite time > 0"));
    }
    let n_samples = (t_end / coarse).round() as u64;
    if n_samples == 0 || (n_samples as f64 * coarse - t_end).abs() > STEP_ROUNDING * t_end {
        let below = (t_end / coarse).floor().max(1.0);
        let above = (t_end / coarse).ceil().max(1.0);
        let also = if above != below { format!(" or {} ({above} of them)", above * coarse) } else { String::new() };
        return setup(format!(
            "t_end = {t_end} is not a whole number of the largest step {coarse} (the sampling interval): give t_end = \
             {} ({below} of them){also}",
            below * coarse
        ));
    }
    Ok((n_samples, coarse))
}

/// `coarse / dt` where it is a whole number (within 10⁻⁹ of it).
fn whole_steps(coarse: f64, dt: f64) -> Option<u64> {
    let r = coarse / dt;
    ((r - r.round()).abs() <= 1e-9 * r).then(|| r.round() as u64)
}

/// Runs the study (`plan` checks its arguments). Every `dt` divides the largest one (the
/// sampling interval) into an integer number of steps; the reference is the same scheme at
/// `min(dt)/ref_factor`.
pub fn converge(
    model: &Model,
    integrators: &[Integrator],
    dts: &[f64],
    t_end: f64,
    ref_factor: u32,
) -> Result<Vec<ConvergenceRow>, ConvergeError> {
    let (n_samples, coarse) = plan(dts, t_end, ref_factor)?;
    let fine = dts.iter().copied().fold(f64::INFINITY, f64::min) / ref_factor as f64;
    let ratio = |dt: f64| -> Result<u64, ConvergeError> {
        whole_steps(coarse, dt).ok_or_else(|| ConvergeError::Setup(format!("dt = {dt} does not divide {coarse}")))
    };
    let t = n_samples as f64 * coarse;
    let mut rows = Vec::new();
    for &integ in integrators {
        let reference = sampled_run(model, integ, fine, ratio(fine)?, n_samples)?;
        let ref_norm2 = trapezoid(reference.samples.iter().map(|s| sq_norm(s)), coarse);
        let mut prev: Option<ConvergenceRow> = None;
        for &dt in dts {
            let per = ratio(dt)?;
            let run = sampled_run(model, integ, dt, per, n_samples)?;
            let e0 = run.energy[0];
            let scale = if e0 != 0.0 { e0.abs() } else { 1.0 };
            let e_l2 = trapezoid(run.energy.iter().map(|e| (e - e0).powi(2)), dt).sqrt();
            let h_norm2 = trapezoid(run.samples.iter().map(|s| sq_norm(s)), coarse);
            let diff2 = trapezoid(run.samples.iter().zip(&reference.samples).map(|(a, b)| sq_diff(a, b)), coarse);
            let mut row = ConvergenceRow {
                integrator: integ,
                dt,
                steps: per * n_samples,
                e_error: e_l2 / (scale * t.sqrt()),
                e_order: None,
                traj_error_paper: (h_norm2 - ref_norm2).abs().sqrt() / ref_norm2.sqrt(),
                traj_order_paper: None,
                traj_error_norm: diff2.sqrt() / ref_norm2.sqrt(),
                traj_order_norm: None,
                invariant_drift: run.invariant_drift,
                e_max: run.energy.iter().map(|e| (e - e0).abs()).fold(0.0, f64::max) / scale,
                step_seconds: run.step_seconds,
            };
            if let Some(p) = &prev {
                let lr = (p.dt / dt).ln();
                let order = |a: f64, b: f64| if a > 0.0 && b > 0.0 { Some((a / b).ln() / lr) } else { None };
                row.e_order = order(p.e_error, row.e_error);
                row.traj_order_paper = order(p.traj_error_paper, row.traj_error_paper);
                row.traj_order_norm = order(p.traj_error_norm, row.traj_error_norm);
            }
            prev = Some(row.clone());
            rows.push(row);
        }
    }
    Ok(rows)
}
