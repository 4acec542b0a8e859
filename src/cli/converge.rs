//! `rrpdem converge`: error norms and observed orders over several time steps.

use anyhow::{Context, Result, bail};
use rrpdem::converge::{self, CONVERGE_HEADER};
use rrpdem::integrator::Integrator;
use rrpdem::scenario::{MAX_STEPS, Scenario};
use rrpdem::stability;
use std::path::{Path, PathBuf};

/// Options of `rrpdem converge`.
#[derive(clap::Args)]
pub(super) struct ConvergeArgs {
    scenario: PathBuf,
    /// Comma-separated time steps; default: the scenario's dt halved `--levels − 1` times.
    #[arg(long, value_delimiter = ',')]
    dt: Option<Vec<f64>>,
    /// Number of step sizes when `--dt` is not given.
    #[arg(long, default_value_t = 5)]
    levels: u32,
    /// Integrators to study (comma-separated) [default: the three RRP maps, and `em` and `sm`
    /// where the model is translation only (MODEL §13); `lgvi` alone for a model with clumps
    /// (MODEL §12)].
    #[arg(long, value_delimiter = ',')]
    integrator: Option<Vec<Integrator>>,
    /// End time of the study [default: the scenario's].
    #[arg(long)]
    t_end: Option<f64>,
    /// The reference solution uses min(dt) / this factor.
    #[arg(long, default_value_t = 64)]
    ref_factor: u32,
    /// Output folder for converge.csv [default: out/<scenario name>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Draw convergence.png (log–log error versus step, reference slopes 1 and 2).
    #[arg(long)]
    plots: bool,
}

pub(super) fn cmd_converge(args: ConvergeArgs) -> Result<()> {
    let ConvergeArgs { scenario: path, dt, levels, integrator: integrators, t_end, ref_factor, out, plots } = args;
    let scenario = Scenario::load(&path)?;
    let model = scenario.build_model()?;
    if dt.is_none() && !(1..=40).contains(&levels) {
        bail!("--levels {levels}: use 1 to 40 (each level halves dt and doubles the work)");
    }
    let dts = dt.unwrap_or_else(|| (0..levels).map(|k| scenario.dt / 2f64.powi(k as i32)).collect());
    if let Some(bad) = dts.iter().find(|d| !(d.is_finite() && **d > 0.0)) {
        bail!("--dt {bad}: every step must be a finite number > 0");
    }
    let integrators = integrators.unwrap_or_else(|| {
        // Clumps move by `lgvi` alone (MODEL §12); `lgvi` on spheres is map (23) and is studied
        // when asked for (`--integrators lgvi`).
        if !model.clumps.is_empty() {
            return vec![Integrator::Lgvi];
        }
        let implicit = rrpdem::engine::cpu::check_translation_only(&model, Integrator::Em).is_ok();
        Integrator::EVERY.into_iter().filter(|&i| i != Integrator::Lgvi && (implicit || !i.is_implicit())).collect()
    });
    let t_end = t_end.unwrap_or(scenario.t_end);
    if ref_factor < 2 {
        bail!(
            "--ref-factor {ref_factor}: it must be at least 2, so that the reference solution (min dt / factor) is \
             finer than every step studied (at 1 the finest step is its own reference and its trajectory order means \
             nothing)"
        );
    }
    // The steps, the reference factor and the end time, checked before any work.
    converge::plan(&dts, t_end, ref_factor).context("rrpdem converge")?;
    // The reference solution is the longest run: min(dt)/ref_factor to t_end.
    let finest = dts.iter().copied().fold(f64::INFINITY, f64::min) / ref_factor as f64;
    let ref_steps = t_end / finest;
    if ref_steps.is_nan() || ref_steps > MAX_STEPS as f64 {
        bail!(
            "the reference solution would take {ref_steps:.3e} steps (t_end {t_end} / (min dt / {ref_factor})); at most \
             {MAX_STEPS:.0e} are allowed: use fewer levels, a shorter t_end or a smaller --ref-factor"
        );
    }
    // The explicit maps' stability limit; the implicit schemes' solve has its own (an error
    // naming the step when it does not converge).
    let est = stability::estimate(&model);
    if let Some(big) = dts.iter().find(|&&d| d > est.h_max)
        && integrators.iter().any(|i| !i.is_implicit())
    {
        bail!(
            "dt = {big} exceeds the stability estimate {:.3e} ({}) of the RRP maps (choose --integrator em,sm to \
             study only the implicit schemes there)",
            est.h_max,
            est.limiting
        );
    }
    eprintln!("rrpdem converge: {} to t = {t_end}, reference dt = min/{ref_factor}", scenario.name);
    let rows = converge::converge(&model, &integrators, &dts, t_end, ref_factor)?;
    let o = |v: Option<f64>| v.map(|v| format!("{v:6.3}")).unwrap_or_else(|| "     -".into());
    outln!(
        "{:<12} {:>10} {:>8} {:>11} {:>6} {:>11} {:>6} {:>11} {:>6} {:>10} {:>10} {:>10}",
        "integrator",
        "dt",
        "steps",
        "E-error",
        "order",
        "traj(37)",
        "order",
        "|q_h-q|",
        "order",
        "inv.drift",
        "max|dE|/E",
        "s/step"
    );
    for r in &rows {
        outln!(
            "{:<12} {:>10.3e} {:>8} {:>11.4e} {} {:>11.4e} {} {:>11.4e} {} {:>10.2e} {:>10.2e} {:>10.2e}",
            r.integrator.as_str(),
            r.dt,
            r.steps,
            r.e_error,
            o(r.e_order),
            r.traj_error_paper,
            o(r.traj_order_paper),
            r.traj_error_norm,
            o(r.traj_order_norm),
            r.invariant_drift,
            r.e_max,
            r.step_seconds
        );
    }
    let out_dir = out.unwrap_or_else(|| Path::new("out").join(&scenario.name));
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let file = out_dir.join("converge.csv");
    // The scenario's name first, so that `rrpdem plot DIR` titles the figure with it.
    let mut text = format!("scenario,{CONVERGE_HEADER}\n");
    for r in &rows {
        text.push_str(&format!("{},{}\n", scenario.name, r.csv_row()));
    }
    std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    eprintln!("wrote {}", file.display());
    if plots {
        let png = rrpdem::plot::plot_converge_named(&file, &out_dir, Some(&scenario.name))?;
        eprintln!("wrote {}", png.display());
    }
    Ok(())
}
