//! `rrpdem compare`: the CPU reference and a GPU engine side by side.

use super::check_step;
use anyhow::Result;
use rrpdem::engine::{self, CpuEngine, Precision};
use rrpdem::integrator::Integrator;
use rrpdem::scenario::{Backend, Scenario};
use rrpdem::stability;
use std::path::Path;

pub(super) fn cmd_compare(path: &Path, steps: u64, precision: Precision, integrator: Option<Integrator>) -> Result<()> {
    let mut scenario = Scenario::load(path)?;
    if let Some(i) = integrator {
        scenario.integrator = i;
    }
    let model = scenario.build_model()?;
    check_step(&scenario, &stability::estimate(&model))?;
    let mut cpu = CpuEngine::new(&model, scenario.integrator, scenario.dt)?;
    let mut gpu = engine::create(&model, scenario.integrator, scenario.dt, Backend::Gpu, Some(precision))?;
    let info = gpu.info();
    eprintln!("rrpdem compare: {} — {} steps of {} with {}", scenario.name, steps, scenario.dt, scenario.integrator);
    let diffs = rrpdem::compare::compare(&mut cpu, gpu.as_mut(), steps)?;
    println!("CPU f64 reference vs GPU {} on {}", info.precision.as_str(), info.device);
    println!("{:<18} {:>12} {:>12} {:>12}  where", "quantity", "max |diff|", "scale", "relative");
    for d in &diffs {
        println!("{:<18} {:>12.3e} {:>12.4e} {:>12.3e}  {}", d.quantity, d.max_abs, d.scale, d.max_rel, d.at);
    }
    Ok(())
}
