//! The `rrpdem` command line: its arguments, and one module per command.

/// `println!` for the commands' reports on standard output (`out`).
macro_rules! outln {
    ($($arg:tt)*) => { $crate::cli::out(format_args!("{}\n", format_args!($($arg)*))) };
}

mod bench;
mod compare;
mod converge;
mod generate;
mod info;
mod plot;
mod resume;
mod run;
mod study;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use rrpdem::engine::Precision;
use rrpdem::integrator::Integrator;
use rrpdem::run::EngineChoice;
use rrpdem::scenario::{Backend, Scenario};
use rrpdem::stability;
use std::path::{Path, PathBuf};

/// Whether standard output has failed (`out`).
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes a report's text to standard output. Once that fails (piped into `head`, which has
/// gone), the rest of the report is dropped instead of panicking, and the command goes on with
/// its work and its files: what it was asked to write is not lost, and it exits as it would.
pub(crate) fn out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    use std::sync::atomic::Ordering::Relaxed;
    if STDOUT_CLOSED.load(Relaxed) {
        return;
    }
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        STDOUT_CLOSED.store(true, Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("warning: cannot write to standard output ({e}); the rest of the report is not printed");
        }
    }
}

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
        /// Assemble DIR/study.csv from the variants' outputs (after sharded runs), each checked
        /// against DIR/study.json, and report the variants that did not complete.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["shard", "out", "overwrite", "resume"])]
        merge: Option<PathBuf>,
        /// Replace what the output folder holds: another study, or this study's earlier
        /// variants (refused without it, as is a folder of another study).
        #[arg(long)]
        overwrite: bool,
        /// Run only the variants that are missing, failed or interrupted (those continue from
        /// their checkpoints); the completed ones are checked against the study and kept.
        #[arg(long, conflicts_with = "overwrite")]
        resume: bool,
        /// Exit 0 even when variants failed (the study is still reported in full).
        #[arg(long)]
        allow_failures: bool,
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
        /// Draw study.png (each outcome against each varied parameter) and, where bonds can
        /// break, study_fragments.png (docs/PLOTS.md).
        #[arg(long)]
        plots: bool,
        #[command(flatten)]
        vtk: VtkArg,
    },
    /// Run a scenario on the CPU reference and on a GPU side by side and print their differences.
    Compare {
        scenario: PathBuf,
        /// Steps to take with both engines [default: VALIDATION V7's windows, 1000 in f64 and
        /// with `--against`, 200 in f32].
        #[arg(long)]
        steps: Option<u64>,
        /// GPU precision.
        #[arg(long, value_enum, default_value = "f64")]
        precision: PrecisionArg,
        /// rrp-newmark | rrp-exact | campello | em | sm | lgvi [default: the scenario's].
        #[arg(long)]
        integrator: Option<Integrator>,
        /// Compare two integrators on the CPU engine instead of the CPU and GPU engines: the
        /// scenario's (or `--integrator`) against this one, with each one's energy error.
        #[arg(long)]
        against: Option<Integrator>,
        /// Largest relative difference accepted (every quantity; exit status 1 above it)
        /// [default: 1e-10 in f64, 1e-4 in f32, VALIDATION V7's bounds for the paper torus after
        /// its default steps; none with `--against`].
        #[arg(long)]
        tolerance: Option<f64>,
    },
    /// Throughput of the standard cases (particle-steps/s, bond-steps/s) on chosen engines.
    Bench {
        /// Cases: torus, rings-N, fcc-N, solid-torus-N, solid-torus-rupture-N, solid-torus-impact-N
        /// (scenarios/solid_torus_impact.json scaled to N spheres, at its own step), with N a
        /// particle count such as 1e5; tori-N (N copies of the 80-sphere torus, stepped as a
        /// study); or `standard` for the set docs/BENCHMARKS.md reports (torus, rings-1e5,
        /// rings-1e6, fcc-1e5, fcc-1e6, solid-torus-1e5). Suffixes, each at most once, in any
        /// order: `+damped` (MODEL §10 dashpots) or `+friction` (dashpots and friction), `+listed`
        /// (the contact lists keep bonded pairs, as before issue 24: for comparisons), `+skin=S`
        /// (the contact lists' Verlet skin in units of the largest radius, 0.6 by default: the
        /// scenario field `neighbour_skin`) — these three for one-model cases — and
        /// `+every-step` (the GPU records its grid stage in every step, as before quiet steps
        /// left it out: for comparisons), `+bond-refs` (the GPU reads every bond's reference
        /// data per bond: for measurements), e.g. fcc-1e5+damped, solid-torus-impact-1e5+listed,
        /// solid-torus-impact-1e6+skin=1.0, rings-1e5+damped+every-step. Every case is checked
        /// before the first is measured.
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
        #[arg(
            long,
            requires = "markdown",
            conflicts_with_all = ["cases", "engines", "threads", "steps", "min_seconds", "json", "bandwidth", "stages"]
        )]
        from: Option<PathBuf>,
        /// Memory bandwidth of the device in GB/s: also print the fraction of it that the
        /// estimated bytes per step imply.
        #[arg(long)]
        bandwidth: Option<f64>,
        /// Also time each stage of a GPU step (integrate, grid, bonds, particle, watch) on the
        /// device, with timestamp queries where the adapter offers them (one-model GPU cases),
        /// then each kernel of a step (every dispatch its own timed pass, a kernel's chunks
        /// summed: `kernel_seconds` in the JSON).
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
        /// Replace particles.csv, bonds.csv and scenario.json already in the folder (refused
        /// without it).
        #[arg(long)]
        overwrite: bool,
    },
    /// Convergence study: error norms and observed orders for several time steps.
    Converge(converge::ConvergeArgs),
    /// Draw the figures (PNG) of the outputs in DIR: series.csv (+ summary.json), converge.csv.
    Plot {
        dir: PathBuf,
        /// Folder for the PNG files [default: DIR].
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// How a run is checkpointed and what it writes beyond the standard files.
#[derive(clap::Args)]
struct RunControl {
    /// Write DIR/checkpoint.bin every N steps (atomically; the previous one is kept until the
    /// new one is complete). An interrupt (Ctrl-C, SIGTERM) always writes one.
    #[arg(long, value_name = "N")]
    checkpoint_every: Option<u64>,
    /// Draw the run's figures (energy budget, energy error, momentum drift, and fragments.png
    /// where bonds can break) into DIR as PNG (docs/PLOTS.md).
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
    fn options(&self) -> Result<rrpdem::run::VtkOptions> {
        if self.vtk_every == Some(0) {
            bail!("--vtk-every must be at least 1");
        }
        Ok(rrpdem::run::VtkOptions { every: self.vtk_every, replica: 0 })
    }
}

/// Settings that override the scenario file.
#[derive(clap::Args)]
struct Overrides {
    /// rrp-newmark | rrp-exact | campello | em | sm (translation only, CPU) | lgvi (rigid clumps, CPU).
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
    /// Stop when |E + E_released + E_dissipated - E0|/E_scale exceeds this [default: the scenario's, 0.05].
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

/// SIGINT/SIGTERM/SIGHUP: the first asks the run to stop after the current chunk of steps and
/// write everything (with a checkpoint); a second one ends the process at once, unless it
/// comes within `DUPLICATE_SIGNAL` of the first: `timeout -s INT`, a batch system or a shell
/// may deliver one request twice (to the process and to its group), which must not throw away
/// what the first asked to write.
fn install_interrupt_handler() -> Result<()> {
    static FIRST: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    const DUPLICATE_SIGNAL: std::time::Duration = std::time::Duration::from_secs(1);
    ctrlc::set_handler(|| {
        if rrpdem::run::INTERRUPT.swap(true, std::sync::atomic::Ordering::SeqCst) {
            if FIRST.get().is_some_and(|t| t.elapsed() < DUPLICATE_SIGNAL) {
                return;
            }
            eprintln!("\nrrpdem: second interrupt, stopping now without writing");
            std::process::exit(130);
        }
        let _ = FIRST.set(std::time::Instant::now());
        eprintln!(
            "\nrrpdem: interrupt received, finishing the current steps and writing the outputs (again, a second or \
             more later, to abort)"
        );
    })
    .context("installing the interrupt handler")
}

pub(crate) fn real_main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { scenario, out, overwrite, dry_run: true, over, .. } => {
            let _ = (out, overwrite);
            run::cmd_dry_run(&scenario, &over)
        }
        Command::Run { scenario, out, overwrite, dry_run: false, over, ctl } => {
            run::cmd_run(&scenario, out, overwrite, &over, &ctl)
        }
        Command::Resume { dir, t_end, scenario, ctl } => resume::cmd_resume(&dir, t_end, scenario.as_deref(), &ctl),
        Command::Compare { scenario, steps, precision: _, integrator, against: Some(b), tolerance } => {
            compare::cmd_compare_integrators(&scenario, steps.unwrap_or(1000), integrator, b, tolerance)
        }
        Command::Compare { scenario, steps, precision, integrator, against: None, tolerance } => {
            let precision = precision.into();
            let steps = steps.unwrap_or_else(|| rrpdem::compare::default_steps(precision));
            compare::cmd_compare(&scenario, steps, precision, integrator, tolerance)
        }
        Command::Info => info::cmd_info(),
        Command::Bench { cases, engines, threads, steps, min_seconds, json, markdown, from, bandwidth, stages } => {
            match from {
                Some(from) => {
                    let report = rrpdem::bench::report::Report::read(&from)?;
                    let md = markdown.expect("clap requires --markdown with --from");
                    rrpdem::bench::report::update_markdown(&md, &report)?;
                    eprintln!("wrote the generated section of {} from {}", md.display(), from.display());
                    Ok(())
                }
                None => bench::cmd_bench(
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
        Command::Study {
            study,
            out,
            shard,
            merge,
            overwrite,
            resume,
            allow_failures,
            backend,
            precision,
            gpu_memory,
            plots,
            vtk,
        } => match merge {
            Some(dir) => study::cmd_study_merge(&dir, study.as_deref(), plots, allow_failures),
            None => {
                let choice = EngineChoice {
                    backend: backend.map(Backend::from),
                    precision: precision.map(Precision::from),
                    gpu_memory,
                };
                let path = study.expect("clap requires it without --merge");
                study::cmd_study(study::StudyArgs {
                    path: &path,
                    out,
                    shard: shard.as_deref(),
                    overwrite,
                    resume,
                    allow_failures,
                    choice,
                    plots,
                    vtk: vtk.options()?,
                })
            }
        },
        Command::Generate { scenario, out, overwrite } => generate::cmd_generate(&scenario, &out, overwrite),
        Command::Converge(args) => converge::cmd_converge(args),
        Command::Plot { dir, out } => plot::cmd_plot(&dir, out),
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

fn checkpoint_every(ctl: &RunControl) -> Result<Option<u64>> {
    match ctl.checkpoint_every {
        Some(0) => bail!("--checkpoint-every must be at least 1"),
        c => Ok(c),
    }
}

/// Warns above a safe fraction of the stability estimate, refuses above it unless forced.
fn check_step(s: &Scenario, est: &stability::StabilityEstimate) -> Result<()> {
    if let Some(warning) = stability::check_step(s.dt, s.force_dt, est)? {
        eprintln!("warning: {warning}");
    }
    Ok(())
}
