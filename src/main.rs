//! The `rrpdem` command line: run a scenario or a study, resume, generate geometry, converge,
//! compare engines, benchmark, plot.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use rrpdem::converge::{self, CONVERGE_HEADER};
use rrpdem::diagnostics::Diagnostics;
use rrpdem::engine::{self, CpuEngine, Precision};
use rrpdem::integrator::Integrator;
use rrpdem::output::OutputDir;
use rrpdem::run::{self, EngineChoice, RunOptions, Summary};
use rrpdem::scenario::Backend;
use rrpdem::scenario::{MAX_STEPS, Scenario};
use rrpdem::stability;
use rrpdem::study::{self, Study};
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
    /// Run a scenario and write series.csv, final_state.csv and summary.json (and checkpoints).
    Run {
        /// Scenario file (JSON).
        scenario: PathBuf,
        /// Output folder [default: out/<scenario name>].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Replace the outputs of an earlier run in the output folder (refused without it).
        #[arg(long)]
        overwrite: bool,
        /// Print the model's size, coordination, stability estimate and memory needs, and stop.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        over: Overrides,
        #[command(flatten)]
        ctl: RunControl,
    },
    /// Continue an interrupted or checkpointed run from DIR/checkpoint.bin, bit-identically.
    Resume {
        /// The run's output folder.
        dir: PathBuf,
        /// New end time [default: the run's].
        #[arg(long)]
        t_end: Option<f64>,
        /// Refuse unless the checkpoint belongs to this scenario file (all fields but t_end equal).
        #[arg(long)]
        scenario: Option<PathBuf>,
        #[command(flatten)]
        ctl: RunControl,
    },
    /// Run a study (a base scenario and its variants): out/<study>/variants/<k>/ and study.csv.
    Study {
        /// Study file (JSON); not needed with --merge.
        #[arg(required_unless_present = "merge")]
        study: Option<PathBuf>,
        /// Output folder [default: out/<study name>].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Run only the variants k ≡ i (mod n), as task i of n on a cluster (e.g. 0/4).
        #[arg(long, value_name = "i/n")]
        shard: Option<String>,
        /// Assemble DIR/study.csv from the variants' outputs (after sharded runs) and report
        /// missing or failed variants.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["shard", "out"])]
        merge: Option<PathBuf>,
        /// Replace the outputs of an earlier run of a variant.
        #[arg(long)]
        overwrite: bool,
        /// Engine for every variant [default: each variant's backend].
        #[arg(long, value_enum)]
        backend: Option<BackendArg>,
        /// GPU precision for every variant.
        #[arg(long, value_enum)]
        precision: Option<PrecisionArg>,
        /// Bytes of GPU memory one batch of replicas may take (leaves room for other work on a
        /// shared device; larger batches are split) [default: what the adapter's buffers allow].
        #[arg(long, value_name = "BYTES")]
        gpu_memory: Option<u64>,
        /// Draw study.png: each outcome against each varied parameter.
        #[arg(long)]
        plots: bool,
        #[command(flatten)]
        vtk: VtkArg,
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
    /// Throughput of the standard cases (particle-steps/s, bond-steps/s) on chosen engines.
    Bench {
        /// Cases: torus, rings-N, fcc-N, solid-torus-N, solid-torus-rupture-N, tori-N (N a particle
        /// count such as 1e5), or `standard` for the set docs/BENCHMARKS.md reports (torus,
        /// rings-1e5, rings-1e6, fcc-1e5, fcc-1e6, solid-torus-1e5).
        #[arg(long, value_delimiter = ',', default_value = "torus,rings-1e5,fcc-1e5")]
        cases: Vec<String>,
        /// Engines: cpu, gpu-f32, gpu-f64.
        #[arg(long, value_delimiter = ',', default_value = "cpu")]
        engines: Vec<String>,
        /// Rayon thread counts to measure with.
        #[arg(long, value_delimiter = ',', default_value = "1")]
        threads: Vec<usize>,
        /// Steps per timed batch.
        #[arg(long, default_value_t = 100)]
        steps: u64,
        /// Repeat batches until this much time has passed.
        #[arg(long, default_value_t = 2.0)]
        min_seconds: f64,
        /// Write the report as JSON here (date, machine, command, every measurement; rewritten
        /// after each measurement).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Replace the generated section of this Markdown file (between its `<!-- rrpdem bench:
        /// begin … -->` and `<!-- rrpdem bench: end -->` lines, e.g. docs/BENCHMARKS.md) with
        /// the report's tables once every measurement is made.
        #[arg(long)]
        markdown: Option<PathBuf>,
        /// Measure nothing: take the report from this JSON file (written by --json) and write
        /// its --markdown section.
        #[arg(long, requires = "markdown")]
        from: Option<PathBuf>,
        /// Memory bandwidth of the device in GB/s: also print the fraction of it that the
        /// estimated bytes per step imply.
        #[arg(long)]
        bandwidth: Option<f64>,
        /// Also time each stage of a GPU step (integrate, grid, bonds, particle) on the device,
        /// with timestamp queries where the adapter offers them (one-model GPU cases).
        #[arg(long)]
        stages: bool,
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
    Converge(ConvergeArgs),
    /// Draw the figures (PNG) of the outputs in DIR: series.csv (+ summary.json), converge.csv.
    Plot {
        dir: PathBuf,
        /// Folder for the PNG files [default: DIR].
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// Options of `rrpdem converge`.
#[derive(clap::Args)]
struct ConvergeArgs {
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
    /// Draw convergence.png (log–log error versus step, reference slopes 1 and 2).
    #[arg(long)]
    plots: bool,
}

/// How a run is checkpointed and what it writes beyond the standard files.
#[derive(clap::Args)]
struct RunControl {
    /// Write DIR/checkpoint.bin every N steps (atomically; the previous one is kept until the
    /// new one is complete). An interrupt (Ctrl-C, SIGTERM) always writes one.
    #[arg(long, value_name = "N")]
    checkpoint_every: Option<u64>,
    /// Draw the run's figures (energy budget, energy error, momentum drift) into DIR as PNG.
    #[arg(long)]
    plots: bool,
    #[command(flatten)]
    vtk: VtkArg,
}

/// VTK output.
#[derive(clap::Args)]
struct VtkArg {
    /// Write a ParaView frame (DIR/vtk/particles_NNNNNN.vtp, listed in DIR/particles.pvd) every
    /// N steps, at step 0 and at the last step [default: the scenario's output.vtk_every].
    #[arg(long, value_name = "N")]
    vtk_every: Option<u64>,
}

impl VtkArg {
    fn options(&self) -> Result<run::VtkOptions> {
        if self.vtk_every == Some(0) {
            bail!("--vtk-every must be at least 1");
        }
        Ok(run::VtkOptions { every: self.vtk_every, replica: 0 })
    }
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
    /// Stop when |E + E_released - E0|/|E0| exceeds this [default: the scenario's, 0.05].
    #[arg(long)]
    max_energy_error: Option<f64>,
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

impl From<BackendArg> for Backend {
    fn from(b: BackendArg) -> Backend {
        match b {
            BackendArg::Auto => Backend::Auto,
            BackendArg::Cpu => Backend::Cpu,
            BackendArg::Gpu => Backend::Gpu,
        }
    }
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
        let interrupted =
            e.downcast_ref::<run::RunError>().is_some_and(|r| matches!(r, run::RunError::Interrupted { .. }));
        // 130 = 128 + SIGINT, what shells report for a program stopped by Ctrl-C.
        std::process::exit(if interrupted { 130 } else { 1 });
    }
}

/// SIGINT/SIGTERM/SIGHUP: the first asks the run to stop after the current chunk of steps and
/// write everything (with a checkpoint); a second one ends the process at once.
fn install_interrupt_handler() -> Result<()> {
    ctrlc::set_handler(|| {
        if run::INTERRUPT.swap(true, std::sync::atomic::Ordering::SeqCst) {
            eprintln!("\nrrpdem: second interrupt, stopping now without writing");
            std::process::exit(130);
        }
        eprintln!("\nrrpdem: interrupt received, finishing the current steps and writing the outputs (again to abort)");
    })
    .context("installing the interrupt handler")
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { scenario, out, overwrite, dry_run: true, over, .. } => {
            let _ = (out, overwrite);
            cmd_dry_run(&scenario, &over)
        }
        Command::Run { scenario, out, overwrite, dry_run: false, over, ctl } => {
            cmd_run(&scenario, out, overwrite, &over, &ctl)
        }
        Command::Resume { dir, t_end, scenario, ctl } => cmd_resume(&dir, t_end, scenario.as_deref(), &ctl),
        Command::Compare { scenario, steps, precision, integrator } => {
            cmd_compare(&scenario, steps, precision.into(), integrator)
        }
        Command::Info => cmd_info(),
        Command::Bench { cases, engines, threads, steps, min_seconds, json, markdown, from, bandwidth, stages } => {
            match from {
                Some(from) => {
                    let report = rrpdem::bench::report::Report::read(&from)?;
                    let md = markdown.expect("clap requires --markdown with --from");
                    rrpdem::bench::report::update_markdown(&md, &report)?;
                    eprintln!("wrote the generated section of {} from {}", md.display(), from.display());
                    Ok(())
                }
                None => cmd_bench(
                    &cases,
                    &engines,
                    &threads,
                    steps,
                    min_seconds,
                    json.as_deref(),
                    markdown.as_deref(),
                    bandwidth,
                    stages,
                ),
            }
        }
        Command::Study { study, out, shard, merge, overwrite, backend, precision, gpu_memory, plots, vtk } => {
            match merge {
                Some(dir) => cmd_study_merge(&dir, plots),
                None => {
                    let choice = EngineChoice {
                        backend: backend.map(Backend::from),
                        precision: precision.map(Precision::from),
                        gpu_memory,
                    };
                    let study = study.expect("clap requires it without --merge");
                    cmd_study(&study, out, shard.as_deref(), overwrite, &choice, plots, vtk.options()?)
                }
            }
        }
        Command::Generate { scenario, out } => cmd_generate(&scenario, &out),
        Command::Converge(args) => cmd_converge(args),
        Command::Plot { dir, out } => cmd_plot(&dir, out),
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
    if let Some(m) = over.max_energy_error {
        s.max_energy_error = m;
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

fn cmd_run(path: &Path, out: Option<PathBuf>, overwrite: bool, over: &Overrides, ctl: &RunControl) -> Result<()> {
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
fn finish_run(result: Result<Summary, run::RunError>, out_dir: &Path, plots: bool) -> Result<()> {
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

fn cmd_dry_run(path: &Path, over: &Overrides) -> Result<()> {
    let scenario = load(path, over)?;
    let geometry = scenario.build_geometry()?;
    println!("{}", rrpdem::generate::report(&scenario, &geometry));
    println!("steps           {} of {} to t = {}", scenario.total_steps(), scenario.dt, scenario.t_end);
    let est = stability::estimate(&geometry.into_model());
    match stability::check_step(scenario.dt, scenario.force_dt, &est) {
        Ok(None) => {
            println!("time step       ok (dt = {} ≤ {:.0}% of h_max)", scenario.dt, 100.0 * stability::WARN_FRACTION)
        }
        Ok(Some(w)) => println!("time step       warning: {w}"),
        Err(e) => println!("time step       refused: {e}"),
    }
    println!("dry run         nothing was run or written");
    Ok(())
}

fn cmd_study(
    path: &Path,
    out: Option<PathBuf>,
    shard: Option<&str>,
    overwrite: bool,
    choice: &EngineChoice,
    plots: bool,
    vtk: run::VtkOptions,
) -> Result<()> {
    let study = Study::load(path)?;
    let shard = shard.map(study::parse_shard).transpose().map_err(|e| anyhow::anyhow!("--shard {e}"))?;
    let which = study::shard_variants(study.variants.len(), shard);
    let out_dir = out.unwrap_or_else(|| Path::new("out").join(&study.name));
    study::write_resolved(&study, &out_dir)?;
    install_interrupt_handler()?;
    eprintln!(
        "rrpdem study: {} — {} variants{}, outputs in {}",
        study.name,
        study.variants.len(),
        shard.map_or(String::new(), |(i, n)| format!(", shard {i}/{n}: {} of them", which.len())),
        out_dir.display()
    );
    // The bar over variants, and below it while a batch runs the batch's bar over its steps.
    let bars = std::io::stderr().is_terminal().then(indicatif::MultiProgress::new);
    let bar = match &bars {
        Some(m) => m.add(indicatif::ProgressBar::new(which.len() as u64)),
        None => indicatif::ProgressBar::hidden(),
    };
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} variants, ETA {eta}  {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let work = std::sync::atomic::AtomicU64::new(0);
    let start = std::time::Instant::now();
    let tick = |k: usize, r: &Result<Summary, String>| {
        match r {
            Ok(s) => {
                let done = work.fetch_add(s.steps * s.particles as u64, std::sync::atomic::Ordering::Relaxed);
                let rate = (done + s.steps * s.particles as u64) as f64 / start.elapsed().as_secs_f64().max(1e-9);
                bar.set_message(format!("{rate:.3e} particle-steps/s"));
            }
            Err(e) => bar.println(format!("variant {k}: {e}")),
        }
        bar.inc(1);
    };
    let report = study::run_variants(&study, path, &which, &out_dir, choice, vtk, overwrite, bars, &tick)?;
    bar.finish_and_clear();
    if run::INTERRUPT.load(std::sync::atomic::Ordering::SeqCst) {
        // The running batch stopped with a checkpoint per variant; later batches never started.
        let (csv, missing, _) = study::table(&study, &out_dir);
        if shard.is_none() {
            let file = out_dir.join("study.csv");
            std::fs::write(&file, &csv).with_context(|| format!("writing {}", file.display()))?;
        }
        let stopped: Vec<usize> = report
            .ran
            .iter()
            .filter(|(_, r)| r.as_ref().is_err_and(|e| e.starts_with("interrupted")))
            .map(|(k, _)| *k)
            .collect();
        eprintln!(
            "rrpdem study: interrupted. {} variant(s) stopped with a checkpoint ({stopped:?}: continue one with \
             `rrpdem resume {}/variants/<k>`); {} not started: {missing:?}",
            stopped.len(),
            out_dir.display(),
            missing.len()
        );
        std::process::exit(130);
    }
    let failed: Vec<usize> = report
        .ran
        .iter()
        .filter(|(_, r)| r.as_ref().map_or(true, |s| s.status != "completed"))
        .map(|(k, _)| *k)
        .collect();
    if shard.is_none() {
        let (csv, missing, _) = study::table(&study, &out_dir);
        let file = out_dir.join("study.csv");
        std::fs::write(&file, &csv).with_context(|| format!("writing {}", file.display()))?;
        print_study_table(&csv);
        if !missing.is_empty() {
            bail!("variants without a summary: {missing:?}");
        }
        eprintln!("wrote {}", file.display());
        if plots {
            eprintln!("wrote {}", study::plot(&study, &out_dir)?.display());
        }
    } else {
        eprintln!(
            "shard done; assemble study.csv with `rrpdem study --merge {}` once every shard has run",
            out_dir.display()
        );
    }
    if !failed.is_empty() {
        eprintln!("note: {} variant(s) did not complete: {failed:?} (see their summary.json)", failed.len());
    }
    Ok(())
}

fn cmd_study_merge(dir: &Path, plots: bool) -> Result<()> {
    let study = study::read_resolved(dir)?;
    let (csv, missing, failed) = study::table(&study, dir);
    let file = dir.join("study.csv");
    std::fs::write(&file, &csv).with_context(|| format!("writing {}", file.display()))?;
    print_study_table(&csv);
    eprintln!("wrote {} ({} variants)", file.display(), study.variants.len());
    for (k, status) in &failed {
        eprintln!("variant {k} did not complete: {status}");
    }
    if plots {
        eprintln!("wrote {}", study::plot(&study, dir)?.display());
    }
    if !missing.is_empty() {
        bail!("{} variant(s) have no outputs yet (missing or still running): {missing:?}", missing.len());
    }
    Ok(())
}

/// Prints the study table's main columns, aligned.
fn print_study_table(csv: &str) {
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let Some(header) = rows.first() else { return };
    let keep = |name: &str| {
        !matches!(
            name,
            "steps"
                | "t_final"
                | "conserved_drift_s"
                | "conserved_drift_l"
                | "first_contact_t"
                | "wall_time_s"
                | "particle_steps_per_s"
        )
    };
    let cols: Vec<usize> = (0..header.len()).filter(|&c| keep(header[c])).collect();
    let show = |v: &str| match v.parse::<f64>() {
        Ok(x) if v.contains('.') || v.contains('e') => format!("{x:.4e}"),
        _ => v.to_string(),
    };
    let cells: Vec<Vec<String>> =
        rows.iter().map(|r| cols.iter().map(|&c| show(r.get(c).copied().unwrap_or(""))).collect()).collect();
    let width: Vec<usize> =
        (0..cols.len()).map(|c| cells.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    for r in &cells {
        let line: Vec<String> = r.iter().zip(&width).map(|(v, w)| format!("{v:>w$}")).collect();
        println!("{}", line.join("  "));
    }
}

fn checkpoint_every(ctl: &RunControl) -> Result<Option<u64>> {
    match ctl.checkpoint_every {
        Some(0) => bail!("--checkpoint-every must be at least 1"),
        c => Ok(c),
    }
}

fn cmd_resume(dir_path: &Path, t_end: Option<f64>, check: Option<&Path>, ctl: &RunControl) -> Result<()> {
    let dir = OutputDir::reopen(dir_path)?;
    let check = check.map(Scenario::load).transpose()?;
    install_interrupt_handler()?;
    let opts = RunOptions {
        progress: std::io::stderr().is_terminal(),
        checkpoint_every: checkpoint_every(ctl)?,
        stop_at: None,
        vtk: ctl.vtk.options()?,
        bars: None,
    };
    let result = run::resume(&dir, t_end, check.as_ref(), opts, |what| eprintln!("rrpdem: {what}"));
    drop(dir);
    finish_run(result, dir_path, ctl.plots)
}

/// Warns above a safe fraction of the stability estimate, refuses above it unless forced.
fn check_step(s: &Scenario, est: &stability::StabilityEstimate) -> Result<()> {
    if let Some(warning) = stability::check_step(s.dt, s.force_dt, est)? {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

fn print_summary(s: &Summary, out: &Path) {
    for w in &s.warnings {
        eprintln!("warning: {w}");
    }
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
    if s.scenario.rupture.is_some() {
        println!(
            "rupture         {} of {} bonds broken, E_released = {:.6e} (the energy error above is of E + E_released)",
            d.n_broken, s.bonds, d.e_released
        );
    }
    if let Some(i) = &s.impact {
        let o = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
        println!(
            "impact          contact t = {} … {}  peak |F_wall| = {:.4e}  speed in {} out {}  restitution {}",
            o(i.first_contact_t),
            o(i.last_contact_t),
            i.peak_wall_force,
            o(i.impact_speed),
            o(i.rebound_speed),
            o(i.restitution)
        );
    }
    let mut extra = if s.scenario.rupture.is_some() { ", breaks.csv" } else { "" }.to_string();
    if out.join(rrpdem::vtk::COLLECTION).is_file() {
        extra.push_str(", particles.pvd, vtk/");
    }
    println!("outputs         {}/{{series.csv, final_state.csv, summary.json{extra}}}", out.display());
}

#[allow(clippy::too_many_arguments)]
fn cmd_bench(
    cases: &[String],
    engines: &[String],
    threads: &[usize],
    steps: u64,
    min_seconds: f64,
    json: Option<&Path>,
    markdown: Option<&Path>,
    bandwidth: Option<f64>,
    stages: bool,
) -> Result<()> {
    use rrpdem::bench;
    // The Markdown file is checked before anything is measured: a long bench should not end in
    // a missing marker.
    if let Some(md) = markdown {
        let doc = std::fs::read_to_string(md).with_context(|| format!("reading {}", md.display()))?;
        bench::report::splice(&doc, "", md)?;
    }
    let cases: Vec<String> = cases
        .iter()
        .flat_map(|c| match c.as_str() {
            "standard" => bench::STANDARD.iter().map(|s| s.to_string()).collect(),
            _ => vec![c.clone()],
        })
        .collect();
    let mut report = bench::report::Report::start(std::env::args().collect());
    let engines: Vec<bench::EngineKind> =
        engines.iter().map(|e| bench::EngineKind::parse(e)).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    if steps == 0 || threads.contains(&0) {
        bail!("--steps and --threads must be at least 1");
    }
    if bandwidth.is_some_and(|b| b.is_nan() || b <= 0.0) {
        bail!("--bandwidth must be positive (GB/s)");
    }
    let mut failed: Vec<String> = Vec::new();
    println!(
        "{:<16} {:<8} {:>7} {:>10} {:>9} {:>14} {:>14} {:>8} {:>8} {:>9} {:>9}",
        "case",
        "engine",
        "threads",
        "particles",
        "bonds",
        "particle-st/s",
        "bond-steps/s",
        "B/p-step",
        "of b/w",
        "setup s",
        "peak MB"
    );
    for name in &cases {
        let case = bench::case(name).map_err(anyhow::Error::msg)?;
        eprintln!("building {name} …");
        let start = std::time::Instant::now();
        let mut model = Some((case.model)().map_err(anyhow::Error::msg)?);
        let only_one = engines.len() * threads.len() == 1 && !name.starts_with("tori-");
        let built = model.as_ref().expect("built above");
        eprintln!(
            "built {name} in {:.2} s ({} particles, {} bonds; peak memory so far {:.0} MB)",
            start.elapsed().as_secs_f64(),
            built.particles.len(),
            built.bonds.len(),
            bench::peak_rss().unwrap_or(0) as f64 / 1e6
        );
        for &e in &engines {
            for &t in threads {
                // With one measurement the model is handed over and dropped once the engine is
                // built (the peak memory is then the engine's, as in a run without the model).
                let m = if only_one {
                    let owned = model.take().expect("one measurement");
                    bench::measure(&case, std::borrow::Cow::Owned(owned), e, t, stages, steps, min_seconds, bandwidth)
                } else {
                    let m = model.as_ref().expect("kept for every measurement");
                    bench::measure(&case, std::borrow::Cow::Borrowed(m), e, t, stages, steps, min_seconds, bandwidth)
                };
                // A failing measurement (a device error, a blow-up) is reported and the others
                // go on; the JSON holds every measurement made, and the exit status says so.
                let m = match m {
                    Ok(m) => m,
                    Err(err) => {
                        eprintln!("error: {name} on {e:?} with {t} threads: {err}");
                        failed.push(format!("{name} {e:?} {t}"));
                        continue;
                    }
                };
                println!(
                    "{:<16} {:<8} {:>7} {:>10} {:>9} {:>14.4e} {:>14.4e} {:>8.0} {:>8} {:>9.2} {:>9.0}",
                    m.case,
                    format!("{:?}", m.engine),
                    m.threads,
                    m.particles,
                    m.bonds,
                    m.particle_steps_per_s,
                    m.bond_steps_per_s,
                    m.bytes_per_particle_step,
                    m.bandwidth_fraction.map_or("-".into(), |f| format!("{:.1} %", 100.0 * f)),
                    m.engine_setup_s,
                    m.peak_rss.unwrap_or(0) as f64 / 1e6
                );
                if let Some(b) = m.engine_bytes {
                    let parts: Vec<String> =
                        m.engine_parts.iter().map(|(k, v)| format!("{k} {:.1}", *v as f64 / 1e6)).collect();
                    eprintln!("  engine arrays {:.1} MB: {}", b as f64 / 1e6, parts.join(", "));
                }
                match &m.stage_seconds {
                    Some(s) if s.is_empty() => {
                        eprintln!("  stages: {} offers no timestamp queries", m.device)
                    }
                    Some(s) => {
                        let total: f64 = s.iter().map(|x| x.1).sum();
                        let parts: Vec<String> = s
                            .iter()
                            .map(|(k, v)| {
                                format!("{k} {:.3} ms ({:.0} %)", v * 1e3, 100.0 * v / total.max(f64::MIN_POSITIVE))
                            })
                            .collect();
                        eprintln!("  device time per step {:.3} ms: {}", total * 1e3, parts.join(", "));
                    }
                    None => {}
                }
                report.measurements.push(m);
                // Written after every measurement, so that an interrupted bench keeps what it
                // measured.
                if let Some(p) = json {
                    report.write(p)?;
                }
            }
        }
    }
    if !failed.is_empty() {
        // A partial table does not replace the generated section; the JSON keeps what was made.
        let kept = match (markdown, json) {
            (Some(md), Some(j)) => format!(
                "; {} was left as it was (`rrpdem bench --from {} --markdown {}` writes what was measured)",
                md.display(),
                j.display(),
                md.display()
            ),
            (Some(md), None) => format!("; {} was left as it was", md.display()),
            _ => String::new(),
        };
        bail!("{} measurement(s) failed (reported above): {}{kept}", failed.len(), failed.join(", "));
    }
    if let Some(md) = markdown {
        bench::report::update_markdown(md, &report)?;
        eprintln!("wrote the generated section of {}", md.display());
    }
    Ok(())
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
    // What `--backend gpu` computes with, operation by operation, against IEEE 754 (the CPU).
    if !adapters.is_empty() {
        for p in [Precision::F32, Precision::F64] {
            match rrpdem::gpu::arithmetic_on_device(p) {
                Ok(r) if r.ieee() => {
                    println!("GPU {} ops     a/b, sqrt, a*b+c as IEEE 754 on all {} inputs", p.as_str(), r.cases)
                }
                Ok(r) => {
                    let op = |name: &str, differ: usize, ulps: u64| {
                        if differ == 0 {
                            format!("{name} as IEEE")
                        } else {
                            format!("{name} {differ} (≤ {ulps} ulp)")
                        }
                    };
                    let mul_add = if r.mul_add_as_fused == r.cases {
                        "a*b+c fused".to_string()
                    } else {
                        op("a*b+c", r.mul_add_differ, r.mul_add_max_ulps)
                    };
                    println!(
                        "GPU {} ops     differ from IEEE 754 on {} inputs: {}, {}, {}",
                        p.as_str(),
                        r.cases,
                        op("a/b", r.div_differ, r.div_max_ulps),
                        op("sqrt", r.sqrt_differ, r.sqrt_max_ulps),
                        mul_add
                    )
                }
                Err(e) => println!("GPU {} ops     not checked: {e}", p.as_str()),
            }
        }
    }
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

fn cmd_converge(args: ConvergeArgs) -> Result<()> {
    let ConvergeArgs { scenario: path, dt, levels, integrator: integrators, t_end, ref_factor, out, plots } = args;
    let scenario = Scenario::load(&path)?;
    let model = scenario.build_model()?;
    if dt.is_none() && !(1..=40).contains(&levels) {
        bail!("--levels {levels}: use 1 to 40 (each level halves dt and doubles the work)");
    }
    if ref_factor == 0 {
        bail!("--ref-factor must be at least 1");
    }
    let dts = dt.unwrap_or_else(|| (0..levels).map(|k| scenario.dt / 2f64.powi(k as i32)).collect());
    if let Some(bad) = dts.iter().find(|d| !(d.is_finite() && **d > 0.0)) {
        bail!("--dt {bad}: every step must be a finite number > 0");
    }
    let integrators = integrators.unwrap_or_else(|| Integrator::ALL.to_vec());
    let t_end = t_end.unwrap_or(scenario.t_end);
    // The reference solution is the longest run: min(dt)/ref_factor to t_end.
    let finest = dts.iter().copied().fold(f64::INFINITY, f64::min) / ref_factor as f64;
    let ref_steps = t_end / finest;
    if ref_steps.is_nan() || ref_steps > MAX_STEPS as f64 {
        bail!(
            "the reference solution would take {ref_steps:.3e} steps (t_end {t_end} / (min dt / {ref_factor})); at most \
             {MAX_STEPS:.0e} are allowed: use fewer levels, a shorter t_end or a smaller --ref-factor"
        );
    }
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
    if plots {
        let png = rrpdem::plot::plot_converge(&file, &out_dir)?;
        eprintln!("wrote {}", png.display());
    }
    Ok(())
}

fn cmd_plot(dir: &Path, out: Option<PathBuf>) -> Result<()> {
    let out = out.unwrap_or_else(|| dir.to_owned());
    if dir.join(study::STUDY_FILE).is_file() && dir.join("study.csv").is_file() {
        let s = study::read_resolved(dir)?;
        let png = study::plot(&s, dir)?;
        let dest = out.join("study.png");
        if dest != png {
            std::fs::create_dir_all(&out)?;
            std::fs::rename(&png, &dest)?;
        }
        println!("wrote {}", dest.display());
        return Ok(());
    }
    for file in rrpdem::plot::plot_dir(dir, &out)? {
        println!("wrote {}", file.display());
    }
    Ok(())
}
