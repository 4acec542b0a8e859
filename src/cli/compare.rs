//! `rrpdem compare`: the CPU reference and a GPU engine side by side, with a verdict against a
//! tolerance (exit status 1 when they differ by more), so that agreement can be checked in CI;
//! with `--against`, two integrators on the CPU engine (MODEL §13: `em`, `sm` and the RRP maps
//! on the same system).

use super::check_step;
use anyhow::{Result, bail};
use rrpdem::compare::{Difference, compare, compare_tracked, default_tolerance, exceeding};
use rrpdem::engine::{self, CpuEngine, Precision};
use rrpdem::integrator::Integrator;
use rrpdem::scenario::{Backend, MAX_STEPS, Scenario};
use rrpdem::stability;
use std::path::Path;

pub(super) fn cmd_compare(
    path: &Path,
    steps: u64,
    precision: Precision,
    integrator: Option<Integrator>,
    tolerance: Option<f64>,
) -> Result<()> {
    if steps == 0 || steps > MAX_STEPS {
        bail!("--steps {steps}: use 1 to {MAX_STEPS:.0e}");
    }
    let tolerance = tolerance.unwrap_or_else(|| default_tolerance(precision));
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        bail!("--tolerance {tolerance}: expected a finite relative difference ≥ 0, such as 1e-10");
    }
    let mut scenario = Scenario::load(path)?;
    if let Some(i) = integrator {
        scenario.integrator = i;
    }
    let model = scenario.build_model()?;
    check_step(&scenario, &stability::estimate(&model))?;
    // The GPU engine's refusal says "use backend `cpu`", which `compare` has no option for.
    let cpu_only = if scenario.integrator.cpu_only() {
        Some(format!("integrator `{}`", scenario.integrator))
    } else {
        model.cpu_only_feature().map(|w| w.to_string())
    };
    if let Some(what) = cpu_only {
        // Clumps move with `lgvi` alone: no second integrator to hold them against.
        let instead = if model.clumps.is_empty() {
            "compare two integrators on the CPU engine with --against (e.g. --against rrp-exact)"
        } else {
            "nor another integrator that moves clumps (`lgvi` alone does); `rrpdem converge` checks it against \
             itself at smaller steps"
        };
        bail!("{}: {what} (CPU engine only): there is no GPU engine to compare with; {instead}", path.display());
    }
    let mut cpu = CpuEngine::new(&model, scenario.integrator, scenario.dt)?;
    let mut gpu = engine::create(&model, scenario.integrator, scenario.dt, Backend::Gpu, Some(precision))?;
    let info = gpu.info();
    eprintln!("rrpdem compare: {} — {} steps of {} with {}", scenario.name, steps, scenario.dt, scenario.integrator);
    let diffs = compare(&mut cpu, gpu.as_mut(), steps)?;
    outln!("CPU f64 reference vs GPU {} on {}", info.precision.as_str(), info.device);
    print_differences(&diffs, Some(tolerance), "engines")
}

/// `rrpdem compare --against B`: the scenario's integrator (or `integrator`) and `b` on the CPU
/// engine, their differences after `steps` steps and each one's energy error over them (largest
/// `|E + E_released + E_dissipated − E0|/|E0|` at the steps); a verdict only when `tolerance` is
/// given.
pub(super) fn cmd_compare_integrators(
    path: &Path,
    steps: u64,
    integrator: Option<Integrator>,
    b: Integrator,
    tolerance: Option<f64>,
) -> Result<()> {
    if steps == 0 || steps > MAX_STEPS {
        bail!("--steps {steps}: use 1 to {MAX_STEPS:.0e}");
    }
    let mut scenario = Scenario::load(path)?;
    if let Some(i) = integrator {
        scenario.integrator = i;
    }
    let a = scenario.integrator;
    let model = scenario.build_model()?;
    check_step(&scenario, &stability::estimate(&model))?;
    eprintln!("rrpdem compare: {} — {steps} steps of {} with {a} against {b}", scenario.name, scenario.dt);
    let mut ea = CpuEngine::new(&model, a, scenario.dt)?;
    let mut eb = CpuEngine::new(&model, b, scenario.dt)?;
    // One run per integrator gives its energy errors step by step and the end state compared.
    let (diffs, tracked) = compare_tracked(&mut ea, &mut eb, steps)?;
    let errors = tracked.map(|t| (t.energy_error, t.seconds_per_step));
    outln!("{a} vs {b} on the CPU engine, dt = {}", scenario.dt);
    for (name, (err, cost)) in [a, b].iter().zip(&errors) {
        outln!("{:<18} energy error {:>10.3e}  {:>10.3e} s/step", name.as_str(), err, cost);
    }
    print_differences(&diffs, tolerance, "integrators")
}

/// Prints the table of differences and, with a tolerance, the verdict; an error (exit status 1)
/// when some difference exceeds it. `what` names the two sides compared.
fn print_differences(diffs: &[Difference], tolerance: Option<f64>, what: &str) -> Result<()> {
    outln!("{:<18} {:>12} {:>12} {:>12}  where", "quantity", "max |diff|", "scale", "relative");
    for d in diffs {
        outln!("{:<18} {:>12.3e} {:>12.4e} {:>12.3e}  {}", d.quantity, d.max_abs, d.scale, d.max_rel, d.at);
    }
    let Some(tolerance) = tolerance else { return Ok(()) };
    let over = exceeding(diffs, tolerance);
    if over.is_empty() {
        outln!("verdict           agree within {tolerance:e} (relative)");
        return Ok(());
    }
    let names: Vec<String> = over.iter().map(|d| format!("{} ({:.3e})", d.quantity, d.max_rel)).collect();
    outln!("verdict           DIFFER beyond {tolerance:e}: {}", names.join(", "));
    bail!("the {what} differ beyond the tolerance {tolerance:e}: {}", names.join(", "))
}
