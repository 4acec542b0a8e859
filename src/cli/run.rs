//! `rrpdem run`: one scenario to its end (or `--dry-run`: what it would need), its summary and figures.

use super::{Overrides, RunControl, checkpoint_every, install_interrupt_handler, load};
use anyhow::{Result, bail};
use rrpdem::diagnostics::Diagnostics;
use rrpdem::run::{self, EngineChoice, RunOptions, Summary};
use rrpdem::stability;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

pub(super) fn cmd_run(
    path: &Path,
    out: Option<PathBuf>,
    overwrite: bool,
    over: &Overrides,
    ctl: &RunControl,
) -> Result<()> {
    let scenario = load(path, over)?;
    let out_dir = out.unwrap_or_else(|| Path::new("out").join(&scenario.name));
    install_interrupt_handler()?;
    let opts = RunOptions {
        progress: std::io::stderr().is_terminal(),
        checkpoint_every: checkpoint_every(ctl)?,
        stop_at: None,
        vtk: ctl.vtk.options()?,
        bars: None,
    };
    let result = run::run_scenario(&scenario, &out_dir, overwrite, &EngineChoice::default(), opts, &|what| {
        eprintln!("rrpdem: {what}")
    });
    finish_run(result, &out_dir, ctl.plots)
}

/// Prints the summary and draws the figures (also for a run that stopped early, from what it
/// wrote), then passes on the run's error.
pub(super) fn finish_run(result: Result<Summary, run::RunError>, out_dir: &Path, plots: bool) -> Result<()> {
    if let Ok(summary) = &result {
        print_summary(summary, out_dir);
    }
    let stopped_early = matches!(&result, Err(run::RunError::Engine { .. } | run::RunError::Interrupted { .. }));
    if plots && (result.is_ok() || stopped_early) {
        match rrpdem::plot::plot_run_dir(out_dir, out_dir) {
            Ok(files) => files.iter().for_each(|f| eprintln!("wrote {}", f.display())),
            Err(e) => eprintln!("warning: no figures: {e}"),
        }
    }
    result.map(|_| ()).map_err(Into::into)
}

/// What a run would need: exact figures from the built model up to
/// `generate::EXACT_MAX_PARTICLES` particles, above it an analytic estimate that builds nothing;
/// an error (after the report) where a run would be refused.
pub(super) fn cmd_dry_run(path: &Path, over: &Overrides) -> Result<()> {
    use rrpdem::scenario::num;
    let scenario = load(path, over)?;
    let steps = scenario.total_steps();
    let steps_line =
        format!("steps           {steps} of {} to t = {}", num(scenario.dt), num(steps as f64 * scenario.dt));
    let size = scenario.size_estimate()?;
    if size.particles > rrpdem::generate::EXACT_MAX_PARTICLES {
        let estimate = rrpdem::generate::estimate(&scenario, &size);
        outln!("{estimate}");
        outln!("{steps_line}");
        let refused = scenario.check_size(&size).err();
        if let Some(e) = &refused {
            outln!("limits          a run would be refused: {e}");
        } else if let Some(total) = rrpdem::scenario::memory_total() {
            // The model fits, but a CPU run holds its engine's arrays beside it.
            let cpu = estimate.memory.model + estimate.memory.cpu_engine;
            if cpu > total {
                outln!(
                    "limits          a CPU run needs about {:.1} GB, more than this machine's {:.1} GB of memory and swap \
                     (a GPU run holds the model and its upload on the host, the engine on the device)",
                    cpu as f64 / 1e9,
                    total as f64 / 1e9
                );
            }
        }
        outln!("dry run         nothing was built, run or written");
        return refused.map_or(Ok(()), |e| bail!("a run of {} would be refused: {e}", path.display()));
    }
    let geometry = scenario.build_geometry()?;
    outln!("{}", rrpdem::generate::report(&scenario, &geometry));
    outln!("{steps_line}");
    let est = stability::estimate(&geometry.into_model());
    let refused = match stability::check_step(scenario.dt, scenario.force_dt, &est) {
        Ok(None) => {
            outln!("time step       ok (dt = {} ≤ {:.0}% of h_max)", scenario.dt, 100.0 * stability::WARN_FRACTION);
            None
        }
        Ok(Some(w)) => {
            outln!("time step       warning: {w}");
            None
        }
        Err(e) => {
            outln!("time step       refused: {e}");
            Some(e)
        }
    };
    outln!("dry run         nothing was run or written");
    // A script checks the exit status: a run that would be refused fails the dry run too.
    refused.map_or(Ok(()), |e| bail!("a run of {} would be refused: {e}", path.display()))
}

pub(super) fn print_summary(s: &Summary, out: &Path) {
    for w in &s.warnings {
        eprintln!("warning: {w}");
    }
    let b = &s.energy_and_momenta;
    let d: &Diagnostics = &s.final_diagnostics;
    outln!("scenario        {} ({} particles, {} bonds)", s.scenario.name, s.particles, s.bonds);
    outln!("engine          {} / {} / {}", s.engine.backend, s.engine.device, s.engine.precision.as_str());
    outln!("integrator      {}  dt = {}  steps = {}  t = {}", s.scenario.integrator, s.scenario.dt, s.steps, s.t_final);
    outln!("stability       h_max ≈ {:.3e} ({})", s.stability.h_max, s.stability.limiting);
    outln!("wall time       {:.2} s  ({:.3e} particle-steps/s)", s.wall_time_s, s.particle_steps_per_s);
    let observed = if b.every_step { "every step".to_string() } else { format!("{} steps checked", b.steps_observed) };
    // The guard's ledger: what its error is of (MODEL §6, §10), named once here.
    let mut ledger = "E".to_string();
    if s.scenario.rupture.is_some() {
        ledger.push_str(" + E_released");
    }
    if s.scenario.dissipation().is_some() {
        ledger.push_str(" + E_dissipated");
    }
    outln!(
        "energy          E0 = {:.10}  E_scale = {:.6e}  max |{ledger} - E0|/E_scale = {:.3e} ({observed}, step {})  final = {:.3e}",
        b.e0,
        b.energy_scale,
        b.max_rel_energy_deviation,
        b.max_rel_energy_deviation_step,
        b.final_rel_energy_deviation
    );
    outln!(
        "final energies  E_trans {:.4e}  E_rot {:.4e}  U_bend {:.4e}  U_axial {:.4e}  U_shear {:.4e}  U_contact {:.4e}  U_wall {:.4e}  U_gravity {:.4e}",
        d.e_trans,
        d.e_rot,
        d.u_bend,
        d.u_axial,
        d.u_shear,
        d.u_contact,
        d.u_wall,
        d.u_gravity
    );
    let exact = |v: &[glam::DVec3], drift: Option<f64>| {
        if let (false, Some(drift)) = (v.is_empty(), drift) {
            let dirs: Vec<String> = v.iter().map(|e| format!("{e:.3}")).collect();
            format!("exact along {}: {drift:.3e}", dirs.join(" "))
        } else {
            "conserved exactly along no direction".to_string()
        }
    };
    outln!(
        "drift P         {:.3e} {:.3e} {:.3e}  ({})",
        b.drift_p[0],
        b.drift_p[1],
        b.drift_p[2],
        exact(&b.conserved.p, b.conserved_drift_p)
    );
    outln!(
        "drift S         {:.3e} {:.3e} {:.3e}  ({})",
        b.drift_s[0],
        b.drift_s[1],
        b.drift_s[2],
        exact(&b.conserved.s, b.conserved_drift_s)
    );
    outln!(
        "drift L         {:.3e} {:.3e} {:.3e}  ({})",
        b.drift_l[0],
        b.drift_l[1],
        b.drift_l[2],
        exact(&b.conserved.l, b.conserved_drift_l)
    );
    if s.scenario.rupture.is_some() {
        outln!("rupture         {} of {} bonds broken, E_released = {:.6e}", d.n_broken, s.bonds, d.e_released);
    }
    if s.scenario.dissipation().is_some() {
        outln!("dissipation     E_dissipated = {:.6e} taken by damping and friction (MODEL §10)", d.e_dissipated);
    }
    if let Some(i) = &s.impact {
        let o = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
        let rebound = match (&i.no_rebound, i.rebound_speed, &i.no_restitution) {
            (Some(why), _, _) => format!("no rebound: {why}"),
            (None, v, Some(why)) => format!("out {}  no restitution: {why}", o(v)),
            (None, v, None) => format!("out {}  restitution {}", o(v), o(i.restitution)),
        };
        outln!(
            "impact          contact t = {} … {}  peak |F_wall| = {:.4e} (t = {})  speed in {}  {rebound}",
            o(i.first_contact_t),
            o(i.last_contact_t),
            i.peak_wall_force,
            o(i.peak_wall_force_t),
            o(i.impact_speed),
        );
    }
    if let Some(f) = &s.fragments {
        outln!(
            "fragments       {} ({} at t = 0), {} of more than one particle; largest {:.4} of the mass ({} particles); \
             debris {} particles, {:.4} of the mass",
            f.count,
            f.initial_count,
            f.pieces,
            f.largest_mass_fraction,
            f.largest_particles,
            f.debris_count,
            f.debris_mass_fraction
        );
    }
    let mut extra = if s.scenario.rupture.is_some() { ", breaks.csv" } else { "" }.to_string();
    if s.fragments.is_some() {
        extra.push_str(", fragments.csv");
    }
    if out.join("clumps.csv").is_file() {
        extra.push_str(", clumps.csv");
    }
    if out.join(rrpdem::vtk::COLLECTION).is_file() {
        extra.push_str(", particles.pvd, vtk/");
    }
    outln!("outputs         {}/{{series.csv, final_state.csv, summary.json{extra}}}", out.display());
}
