//! The `rrpdem` command line: run a scenario, run a convergence study, write a generated geometry.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use rrpdem::converge::{self, CONVERGE_HEADER};
use rrpdem::diagnostics::Diagnostics;
use rrpdem::engine::{self, CpuEngine, Precision};
use rrpdem::integrator::Integrator;
use rrpdem::run::{self, Summary};
use rrpdem::scenario::Backend;
use rrpdem::scenario::Scenario;
use rrpdem::stability;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    name = "rrpdem",
    version,
    about = "Discrete-element solver for particle-binder composites (RRP variational integrator)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario and write series.csv, final_state.csv and summary.json.
    Run {
        /// Scenario file (JSON).
        scenario: PathBuf,
        /// Output folder [default: out/<scenario name>].
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        over: Overrides,
    },
    /// Run a scenario on the CPU reference and on a GPU side by side and print their differences.
    Compare {
        scenario: PathBuf,
        /// Steps to take with both engines.
        #[arg(long, default_value_t = 1000)]
        steps: u64,
        /// GPU precision.
        #[arg(long, value_enum, default_value = "f64")]
        precision: PrecisionArg,
        /// rrp-newmark | rrp-exact | campello [default: the scenario's].
        #[arg(long)]
        integrator: Option<Integrator>,
    },
    /// List the GPU adapters wgpu finds, with backend, type, f64 support and limits.
    Info,
    /// Write a scenario's resolved geometry (particles.csv, bonds.csv and a scenario.json that
    /// reads them) and print counts, coordination, packing, stability and memory estimates.
    Generate {
        scenario: PathBuf,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
    },
    /// Convergence study: error norms and observed orders for several time steps.
    Converge {
        scenario: PathBuf,
        /// Comma-separated time steps; default: the scenario's dt halved `--levels − 1` times.
        #[arg(long, value_delimiter = ',')]
        dt: Option<Vec<f64>>,
        /// Number of step sizes when `--dt` is not given.
        #[arg(long, default_value_t = 5)]
        levels: u32,
        /// Integrators to study (comma-separated) [default: all three].
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
    },
}

/// Settings that override the scenario file.
#[derive(clap::Args)]
struct Overrides {
    /// rrp-newmark | rrp-exact | campello.
    #[arg(long)]
    integrator: Option<Integrator>,
    /// Time step.
    #[arg(long)]
    dt: Option<f64>,
    /// End time.
    #[arg(long)]
    t_end: Option<f64>,
    /// Record diagnostics every N steps.
    #[arg(long)]
    record_every: Option<u64>,
    /// Run even when dt exceeds the stability estimate.
    #[arg(long)]
    force: bool,
    /// Engine: auto (a hardware GPU if there is one, else the CPU), cpu, gpu (software adapters too).
    #[arg(long, value_enum)]
    backend: Option<BackendArg>,
    /// GPU precision (the CPU engine is always f64) [default: f32 on a GPU].
    #[arg(long, value_enum)]
    precision: Option<PrecisionArg>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BackendArg {
    Auto,
    Cpu,
    Gpu,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PrecisionArg {
    F32,
    F64,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Precision {
        match p {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F64 => Precision::F64,
        }
    }
}

fn main() {
    // Mesa's device-select Vulkan layer prints a harmless XDG_RUNTIME_DIR complaint per instance
    // on headless machines; the engine enumerates adapters itself, so the layer is not needed.
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: set before any other thread exists (first statement of main).
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { scenario, out, over } => cmd_run(&scenario, out, &over),
        Command::Compare { scenario, steps, precision, integrator } => {
            cmd_compare(&scenario, steps, precision.into(), integrator)
        }
        Command::Info => cmd_info(),
        Command::Generate { scenario, out } => cmd_generate(&scenario, &out),
        Command::Converge { scenario, dt, levels, integrator, t_end, ref_factor, out } => {
            cmd_converge(&scenario, dt, levels, integrator, t_end, ref_factor, out)
        }
    }
}

/// Loads a scenario and applies the command-line overrides, re-validating the result.
fn load(path: &Path, over: &Overrides) -> Result<Scenario> {
    let mut s = Scenario::load(path)?;
    if let Some(i) = over.integrator {
        s.integrator = i;
    }
    if let Some(dt) = over.dt {
        s.dt = dt;
    }
    if let Some(t) = over.t_end {
        s.t_end = t;
    }
    if let Some(r) = over.record_every {
        s.record_every = r;
    }
    s.force_dt |= over.force;
    if let Some(b) = over.backend {
        s.backend = match b {
            BackendArg::Auto => Backend::Auto,
            BackendArg::Cpu => Backend::Cpu,
            BackendArg::Gpu => Backend::Gpu,
        };
    }
    if let Some(p) = over.precision {
        s.precision = Some(p.into());
    }
    s.validate().context("after applying the command-line overrides")?;
    Ok(s)
}

fn cmd_run(path: &Path, out: Option<PathBuf>, over: &Overrides) -> Result<()> {
    let scenario = load(path, over)?;
    let model = scenario.build_model()?;
    let est = stability::estimate(&model);
    check_step(&scenario, &est)?;
    let out_dir = out.unwrap_or_else(|| Path::new("out").join(&scenario.name));
    let mut engine = engine::create(&model, scenario.integrator, scenario.dt, scenario.backend, scenario.precision)?;
    if scenario.precision == Some(Precision::F32) && engine.info().precision == Precision::F64 {
        eprintln!("note: precision f32 asked for, but no hardware GPU was found: running the CPU engine in f64");
    }
    eprintln!(
        "rrpdem: {} — {} particles, {} bonds, {} steps of {} with {} on {}",
        scenario.name,
        model.particles.len(),
        model.bonds.len(),
        scenario.total_steps(),
        scenario.dt,
        scenario.integrator,
        engine.info().device
    );
    let summary = run::run(&scenario, &model, engine.as_mut(), est, &out_dir, std::io::stderr().is_terminal())?;
    print_summary(&summary, &out_dir);
    Ok(())
}

/// Warns above a safe fraction of the stability estimate, refuses above it unless forced.
fn check_step(s: &Scenario, est: &stability::StabilityEstimate) -> Result<()> {
    if let Some(warning) = stability::check_step(s.dt, s.force_dt, est)? {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

fn print_summary(s: &Summary, out: &Path) {
    let b = &s.energy_and_momenta;
    let d: &Diagnostics = &s.final_diagnostics;
    println!("scenario        {} ({} particles, {} bonds)", s.scenario.name, s.particles, s.bonds);
    println!("engine          {} / {} / {}", s.engine.backend, s.engine.device, s.engine.precision.as_str());
    println!(
        "integrator      {}  dt = {}  steps = {}  t = {}",
        s.scenario.integrator, s.scenario.dt, s.steps, s.t_final
    );
    println!("stability       h_max ≈ {:.3e} ({})", s.stability.h_max, s.stability.limiting);
    println!("wall time       {:.2} s  ({:.3e} particle-steps/s)", s.wall_time_s, s.particle_steps_per_s);
    println!(
        "energy          E0 = {:.10}  max |E-E0|/|E0| = {:.3e}  final = {:.3e}",
        b.e0, b.max_rel_energy_deviation, b.final_rel_energy_deviation
    );
    println!(
        "final energies  E_trans {:.4e}  E_rot {:.4e}  U_bend {:.4e}  U_axial {:.4e}  U_shear {:.4e}  U_contact {:.4e}  U_wall {:.4e}  U_gravity {:.4e}",
        d.e_trans, d.e_rot, d.u_bend, d.u_axial, d.u_shear, d.u_contact, d.u_wall, d.u_gravity
    );
    let dirs = |v: &[glam::DVec3]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.iter().map(|e| format!("{:.3}", e)).collect::<Vec<_>>().join(" ")
        }
    };
    println!(
        "drift P         {:.3e} {:.3e} {:.3e}  (exact along {}: {:.3e})",
        b.drift_p[0],
        b.drift_p[1],
        b.drift_p[2],
        dirs(&b.conserved.p),
        b.conserved_drift_p
    );
    println!(
        "drift S         {:.3e} {:.3e} {:.3e}  (exact along {}: {:.3e})",
        b.drift_s[0],
        b.drift_s[1],
        b.drift_s[2],
        dirs(&b.conserved.s),
        b.conserved_drift_s
    );
    println!(
        "drift L         {:.3e} {:.3e} {:.3e}  (exact along {}: {:.3e})",
        b.drift_l[0],
        b.drift_l[1],
        b.drift_l[2],
        dirs(&b.conserved.l),
        b.conserved_drift_l
    );
    println!("outputs         {}/{{series.csv, final_state.csv, summary.json}}", out.display());
}

fn cmd_generate(path: &Path, out: &Path) -> Result<()> {
    let scenario = Scenario::load(path)?;
    let geometry = scenario.build_geometry()?;
    println!("{}", rrpdem::generate::report(&scenario, &geometry));
    let files = rrpdem::generate::write(&scenario, &geometry, out)?;
    println!("wrote           {}, {}, {}", files.particles.display(), files.bonds.display(), files.scenario.display());
    Ok(())
}

fn cmd_info() -> Result<()> {
    let adapters = rrpdem::gpu::list_adapters();
    println!("CPU engine      f64, {} rayon threads", rayon::current_num_threads());
    if adapters.is_empty() {
        println!("GPU adapters    none ({})", rrpdem::gpu::error::INSTALL_HINT);
    }
    for (k, a) in adapters.iter().enumerate() {
        println!("GPU adapter {k}   {} ({}, {}, driver {})", a.name, a.backend, a.device_type, a.driver);
        println!(
            "                f64: {}  max buffer {} MiB  max storage binding {} MiB  storage buffers/stage {}  workgroups/dim {}",
            if a.f64 { "yes" } else { "no" },
            a.max_buffer_size >> 20,
            a.max_storage_buffer_binding_size >> 20,
            a.max_storage_buffers_per_stage,
            a.max_workgroups_per_dimension
        );
    }
    println!(
        "--backend auto  would use {}",
        if rrpdem::gpu::hardware_adapter_available() { "the hardware GPU" } else { "the CPU engine (no hardware GPU)" }
    );
    Ok(())
}

fn cmd_compare(path: &Path, steps: u64, precision: Precision, integrator: Option<Integrator>) -> Result<()> {
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

fn cmd_converge(
    path: &Path,
    dt: Option<Vec<f64>>,
    levels: u32,
    integrators: Option<Vec<Integrator>>,
    t_end: Option<f64>,
    ref_factor: u32,
    out: Option<PathBuf>,
) -> Result<()> {
    let scenario = Scenario::load(path)?;
    let model = scenario.build_model()?;
    let dts = dt.unwrap_or_else(|| (0..levels.max(1)).map(|k| scenario.dt / 2f64.powi(k as i32)).collect());
    let integrators = integrators.unwrap_or_else(|| Integrator::ALL.to_vec());
    let t_end = t_end.unwrap_or(scenario.t_end);
    let est = stability::estimate(&model);
    if let Some(big) = dts.iter().find(|&&d| d > est.h_max) {
        bail!("dt = {big} exceeds the stability estimate {:.3e} ({})", est.h_max, est.limiting);
    }
    eprintln!("rrpdem converge: {} to t = {t_end}, reference dt = min/{ref_factor}", scenario.name);
    let rows = converge::converge(&model, &integrators, &dts, t_end, ref_factor)?;
    let o = |v: Option<f64>| v.map(|v| format!("{v:6.3}")).unwrap_or_else(|| "     -".into());
    println!(
        "{:<12} {:>10} {:>8} {:>11} {:>6} {:>11} {:>6} {:>11} {:>6} {:>10}",
        "integrator", "dt", "steps", "E-error", "order", "traj(37)", "order", "|q_h-q|", "order", "inv.drift"
    );
    for r in &rows {
        println!(
            "{:<12} {:>10.3e} {:>8} {:>11.4e} {} {:>11.4e} {} {:>11.4e} {} {:>10.2e}",
            r.integrator.as_str(),
            r.dt,
            r.steps,
            r.e_error,
            o(r.e_order),
            r.traj_error_paper,
            o(r.traj_order_paper),
            r.traj_error_norm,
            o(r.traj_order_norm),
            r.invariant_drift
        );
    }
    let out_dir = out.unwrap_or_else(|| Path::new("out").join(&scenario.name));
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let file = out_dir.join("converge.csv");
    let mut text = String::from(CONVERGE_HEADER);
    text.push('\n');
    for r in &rows {
        text.push_str(&r.csv_row());
        text.push('\n');
    }
    std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    eprintln!("wrote {}", file.display());
    Ok(())
}
