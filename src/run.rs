//! Runs a scenario to its end: steps an engine, records diagnostics, shows progress and writes
//! the outputs. On an engine error everything recorded so far is still written.

use crate::diagnostics::{Conserved, Diagnostics};
use crate::engine::{Engine, EngineInfo};
use crate::error::EngineError;
use crate::model::Model;
use crate::output::{self, OutputError, SeriesWriter};
use crate::scenario::Scenario;
use crate::stability::StabilityEstimate;
use glam::DVec3;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error("{source}\n(what was recorded up to then is in {})", out_dir.display())]
    Engine {
        #[source]
        source: EngineError,
        out_dir: PathBuf,
    },
}

/// Running record of the energy budget and of the momenta's drift.
#[derive(Clone, Debug, Serialize)]
pub struct Budget {
    pub e0: f64,
    /// `max |E − E0| / |E0|` over the recorded steps.
    pub max_rel_energy_deviation: f64,
    pub final_rel_energy_deviation: f64,
    /// `max_t |Q(t) − Q(0)|` per component for P, S and L.
    pub drift_p: [f64; 3],
    pub drift_s: [f64; 3],
    pub drift_l: [f64; 3],
    /// Directions along which the model conserves P, S, L exactly, and the largest drift along
    /// them (each direction's drift is `|(Q(t) − Q(0))·e|`).
    pub conserved: Conserved,
    pub conserved_drift_p: f64,
    pub conserved_drift_s: f64,
    pub conserved_drift_l: f64,
    #[serde(skip)]
    first: Diagnostics,
}

impl Budget {
    pub fn new(first: &Diagnostics, conserved: Conserved) -> Budget {
        Budget {
            e0: first.total(),
            max_rel_energy_deviation: 0.0,
            final_rel_energy_deviation: 0.0,
            drift_p: [0.0; 3],
            drift_s: [0.0; 3],
            drift_l: [0.0; 3],
            conserved,
            conserved_drift_p: 0.0,
            conserved_drift_s: 0.0,
            conserved_drift_l: 0.0,
            first: *first,
        }
    }

    pub fn update(&mut self, d: &Diagnostics) {
        let scale = if self.e0 != 0.0 { self.e0.abs() } else { 1.0 };
        let dev = (d.total() - self.e0).abs() / scale;
        self.max_rel_energy_deviation = self.max_rel_energy_deviation.max(dev);
        self.final_rel_energy_deviation = dev;
        let f = self.first;
        for (drift, now, then) in
            [(&mut self.drift_p, d.p, f.p), (&mut self.drift_s, d.s, f.s), (&mut self.drift_l, d.l, f.l)]
        {
            let diff = (now - then).abs().to_array();
            for k in 0..3 {
                drift[k] = drift[k].max(diff[k]);
            }
        }
        let along = |basis: &[DVec3], now: DVec3, then: DVec3| {
            basis.iter().map(|e| (now - then).dot(*e).abs()).fold(0.0, f64::max)
        };
        self.conserved_drift_p = self.conserved_drift_p.max(along(&self.conserved.p, d.p, f.p));
        self.conserved_drift_s = self.conserved_drift_s.max(along(&self.conserved.s, d.s, f.s));
        self.conserved_drift_l = self.conserved_drift_l.max(along(&self.conserved.l, d.l, f.l));
    }
}

/// Contents of `summary.json`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// `completed`, or the error that stopped the run.
    pub status: String,
    pub scenario: Scenario,
    pub engine: EngineInfo,
    pub particles: usize,
    pub bonds: usize,
    pub steps: u64,
    pub t_final: f64,
    pub wall_time_s: f64,
    pub particle_steps_per_s: f64,
    pub stability: StabilityEstimate,
    pub energy_and_momenta: Budget,
    pub final_diagnostics: Diagnostics,
}

/// Runs `scenario` (already resolved into `model`) on `engine`, writing into `out_dir`.
pub fn run(
    scenario: &Scenario,
    model: &Model,
    engine: &mut dyn Engine,
    stability: StabilityEstimate,
    out_dir: &Path,
    progress: bool,
) -> Result<Summary, RunError> {
    std::fs::create_dir_all(out_dir).map_err(|source| OutputError { path: out_dir.to_owned(), source })?;
    let total = scenario.total_steps();
    let mut series = SeriesWriter::create(&out_dir.join("series.csv"))?;
    let n = engine.n_particles();
    let bar = progress_bar(total, progress);

    let engine_err = |source| RunError::Engine { source, out_dir: out_dir.to_owned() };
    let first = engine.diagnostics().map_err(engine_err)?;
    series.write(&first)?;
    let mut budget = Budget::new(&first, Conserved::for_model(model));
    let mut last = first;
    let start = Instant::now();
    let mut failure = None;
    let start_steps = engine.steps_done();
    while engine.steps_done() - start_steps < total {
        let chunk = scenario.record_every.min(total - (engine.steps_done() - start_steps));
        if let Err(e) = engine.advance(chunk) {
            failure = Some(e);
            break;
        }
        match engine.diagnostics() {
            Ok(d) => {
                series.write(&d)?;
                budget.update(&d);
                last = d;
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
        bar.set_position(engine.steps_done() - start_steps);
        let secs = start.elapsed().as_secs_f64();
        if secs > 0.0 {
            let rate = (engine.steps_done() - start_steps) as f64 * n as f64 / secs;
            bar.set_message(format!(
                "{rate:.3e} particle-steps/s  E/E0-1 = {:+.2e}",
                budget.final_rel_energy_deviation
            ));
        }
    }
    bar.finish_and_clear();
    series.flush()?;
    let wall = start.elapsed().as_secs_f64();
    let steps = engine.steps_done() - start_steps;
    let snapshot = engine.snapshot();
    if let Ok(state) = &snapshot {
        output::write_final_state(&out_dir.join("final_state.csv"), state)?;
    }
    let summary = Summary {
        status: match &failure {
            None => "completed".into(),
            Some(e) => format!("error: {e}"),
        },
        scenario: scenario.clone(),
        engine: engine.info(),
        particles: n,
        bonds: model.bonds.len(),
        steps,
        t_final: last.t,
        wall_time_s: wall,
        particle_steps_per_s: if wall > 0.0 { steps as f64 * n as f64 / wall } else { 0.0 },
        stability,
        energy_and_momenta: budget,
        final_diagnostics: last,
    };
    output::write_json(&out_dir.join("summary.json"), &summary)?;
    match (failure, snapshot) {
        (Some(e), _) | (None, Err(e)) => Err(engine_err(e)),
        (None, Ok(_)) => Ok(summary),
    }
}

fn progress_bar(total: u64, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} steps, ETA {eta}  {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
