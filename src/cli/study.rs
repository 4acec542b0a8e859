//! `rrpdem study`: run a study's variants (whole or one shard: from t = 0 into a folder that holds
//! no other study and none of their outputs, or `--resume` of those missing, failed or
//! interrupted) or merge the shards' outputs; every variant that does not complete is reported
//! with its reason, and the exit code says whether all did.

use super::install_interrupt_handler;
use anyhow::{Context, Result, anyhow, bail};
use rrpdem::run::{self, EngineChoice, Summary};
use rrpdem::study::{self, ResumePlan, Study, VariantError, VariantState};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// What `rrpdem study STUDY` was asked to do.
pub(super) struct StudyArgs<'a> {
    pub path: &'a Path,
    pub out: Option<PathBuf>,
    pub shard: Option<&'a str>,
    pub overwrite: bool,
    pub resume: bool,
    pub allow_failures: bool,
    pub choice: EngineChoice,
    pub plots: bool,
    pub vtk: run::VtkOptions,
}

pub(super) fn cmd_study(a: StudyArgs<'_>) -> Result<()> {
    let study = Study::load(a.path)?;
    let shard = a.shard.map(study::parse_shard).transpose().map_err(|e| anyhow!("--shard {e}"))?;
    let which = study::shard_variants(study.variants.len(), shard);
    let out_dir = a.out.clone().unwrap_or_else(|| Path::new("out").join(&study.name));
    // Every check of the folder comes before anything runs.
    let plan = if a.resume {
        study::plan_resume(&study, a.path, &out_dir, &which)?
    } else {
        study::prepare_folder(&study, a.path, &out_dir, &which, shard.is_none(), a.overwrite)?;
        ResumePlan { fresh: which.clone(), ..Default::default() }
    };
    install_interrupt_handler()?;
    eprintln!(
        "rrpdem study: {} — {}{}, outputs in {}",
        study.name,
        variants(study.variants.len()),
        shard.map_or(String::new(), |(i, n)| format!(", shard {i}/{n}: {} of them", which.len())),
        out_dir.display()
    );
    if a.resume {
        eprintln!(
            "rrpdem study: --resume: {} completed (checked, kept) {}; {} to continue from their checkpoints {}; {} to \
             run from t = 0 {}",
            plan.kept.len(),
            study::list(&plan.kept),
            plan.resume.len(),
            study::list(&plan.resume),
            plan.fresh.len(),
            study::list(&plan.fresh)
        );
        let others = plan.kept.len() + plan.resume.len();
        if !plan.fresh.is_empty() && others > 0 {
            let options = engine_options(&a);
            eprintln!(
                "rrpdem study: the {} run from t = 0 take the engine options of this command ({}); give those of \
                 the study's first run, or the study mixes engines (the others keep the engine that wrote them)",
                study::list(&plan.fresh),
                if options.is_empty() {
                    "none: the scenario's backend, `auto` by default".to_string()
                } else {
                    options.trim().to_string()
                }
            );
        }
    }
    // The bar over variants, and below it while a batch runs the batch's bar over its steps;
    // without a terminal (a batch job's log) no bars, and every message goes to stderr as is.
    let bars = std::io::stderr().is_terminal().then(indicatif::MultiProgress::new);
    let bar = match &bars {
        Some(m) => m.add(indicatif::ProgressBar::new((plan.resume.len() + plan.fresh.len()) as u64)),
        None => indicatif::ProgressBar::hidden(),
    };
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} variants, ETA {eta}  {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let say = |line: String| match &bars {
        Some(m) => {
            if m.println(&line).is_err() {
                eprintln!("{line}");
            }
        }
        None => eprintln!("{line}"),
    };
    let work = std::sync::atomic::AtomicU64::new(0);
    let start = std::time::Instant::now();
    let tick = |k: usize, r: &Result<Summary, VariantError>| {
        match r {
            Ok(s) if s.status == "completed" => {
                let done = work.fetch_add(s.steps * s.particles as u64, std::sync::atomic::Ordering::Relaxed);
                let rate = (done + s.steps * s.particles as u64) as f64 / start.elapsed().as_secs_f64().max(1e-9);
                bar.set_message(format!("{rate:.3e} particle-steps/s"));
            }
            Ok(s) => say(format!("variant {k} failed: {}", s.status)),
            Err(e) if e.interrupted => say(format!("variant {k}: {e}")),
            Err(e) => say(format!("variant {k} failed: {e}")),
        }
        bar.inc(1);
    };
    let mut ran = study::resume_variants(
        &study,
        a.path,
        &out_dir,
        &plan.resume,
        a.choice.gpu_memory,
        a.vtk,
        bars.as_ref(),
        &|line| say(line),
        &tick,
    );
    let over = a.overwrite || a.resume;
    let report =
        study::run_variants(&study, a.path, &plan.fresh, &out_dir, &a.choice, a.vtk, over, bars.clone(), &tick)?;
    ran.extend(report.ran);
    bar.finish_and_clear();
    finish(&a, &study, shard, &plan, &out_dir, &ran)
}

/// The command-line options that choose the engine (and frames) as this command got them, for
/// the hints that repeat the command: study.json does not record them, and a variant run from
/// t = 0 by `--resume` takes them from the command line.
fn engine_options(a: &StudyArgs<'_>) -> String {
    let mut out = String::new();
    if let Some(b) = a.choice.backend {
        out.push_str(match b {
            rrpdem::engine::Backend::Auto => " --backend auto",
            rrpdem::engine::Backend::Cpu => " --backend cpu",
            rrpdem::engine::Backend::Gpu => " --backend gpu",
        });
    }
    if let Some(p) = a.choice.precision {
        out.push_str(&format!(" --precision {}", p.as_str()));
    }
    if let Some(m) = a.choice.gpu_memory {
        out.push_str(&format!(" --gpu-memory {m}"));
    }
    if let Some(v) = a.vtk.every {
        out.push_str(&format!(" --vtk-every {v}"));
    }
    out
}

/// Writes study.csv (a whole study), reports what did not complete and sets the exit code.
fn finish(
    a: &StudyArgs<'_>,
    study: &Study,
    shard: Option<(usize, usize)>,
    plan: &ResumePlan,
    out_dir: &Path,
    ran: &[(usize, Result<Summary, VariantError>)],
) -> Result<()> {
    let mut which: Vec<usize> = plan.kept.iter().chain(&plan.resume).chain(&plan.fresh).copied().collect();
    which.sort_unstable();
    let table = shard.is_none().then(|| study::table(study, a.path, out_dir));
    if let Some(t) = &table {
        let file = out_dir.join("study.csv");
        std::fs::write(&file, &t.csv).with_context(|| format!("writing {}", file.display()))?;
    }
    let resume_hint = format!(
        "rrpdem study {} --resume --out {}{}{}",
        a.path.display(),
        out_dir.display(),
        shard.map_or(String::new(), |(i, n)| format!(" --shard {i}/{n}")),
        engine_options(a)
    );
    if run::INTERRUPT.load(std::sync::atomic::Ordering::SeqCst) {
        // The running batch stopped with a checkpoint per variant; those waiting to continue
        // from earlier checkpoints still have them; later ones never started.
        let stopped: Vec<usize> =
            ran.iter().filter(|(_, r)| r.as_ref().is_err_and(|e| e.interrupted)).map(|(k, _)| *k).collect();
        let left =
            |ks: &[usize]| -> Vec<usize> { ks.iter().copied().filter(|k| !ran.iter().any(|r| r.0 == *k)).collect() };
        let (waiting, not_started) = (left(&plan.resume), left(&plan.fresh));
        eprintln!(
            "rrpdem study: interrupted. {} variant(s) stopped with a checkpoint {}; {}{} not started {}. Continue the \
             study with `{resume_hint}`",
            stopped.len(),
            study::list(&stopped),
            if waiting.is_empty() {
                String::new()
            } else {
                format!("{} still at their earlier checkpoints {}; ", waiting.len(), study::list(&waiting))
            },
            not_started.len(),
            study::list(&not_started)
        );
        std::process::exit(130);
    }
    // What this run saw fail, and what the folder holds (every variant of a whole study).
    let mut failed: Vec<usize> = ran
        .iter()
        .filter(|(_, r)| r.as_ref().map_or_else(|e| !e.interrupted, |s| s.status != "completed"))
        .map(|(k, _)| *k)
        .collect();
    let states: Vec<(usize, VariantState)> = match &table {
        Some(t) => t.states.iter().cloned().enumerate().collect(),
        None => which.iter().map(|&k| (k, study::inspect(study, a.path, out_dir, k).0)).collect(),
    };
    let mut unfinished = Vec::new();
    for (k, state) in &states {
        match state {
            VariantState::Completed => {}
            VariantState::Failed { .. } => failed.push(*k),
            other => {
                if !failed.contains(k) {
                    eprintln!("variant {k}: {other}");
                }
                // One that failed before it wrote anything (its engine could not start) has no
                // outputs up to a failure: it is unfinished, whatever --allow-failures says.
                failed.retain(|f| f != k);
                unfinished.push(*k);
            }
        }
    }
    failed.sort_unstable();
    failed.dedup();
    match &table {
        Some(t) => {
            print_study_table(&t.csv);
            eprintln!("wrote {}", out_dir.join("study.csv").display());
            if a.plots {
                eprintln!("wrote {}", study::plot(study, out_dir)?.display());
                if let Some(png) = study::plot_fragments(study, out_dir)? {
                    eprintln!("wrote {}", png.display());
                }
            }
        }
        None => eprintln!(
            "shard done; assemble study.csv with `rrpdem study --merge {}` once every shard has run",
            out_dir.display()
        ),
    }
    if !unfinished.is_empty() {
        bail!(
            "{} variant(s) have no complete outputs: {} (above); `{resume_hint}` runs them",
            unfinished.len(),
            study::list(&unfinished)
        );
    }
    if !failed.is_empty() {
        let what = format!(
            "{} variant(s) did not complete: {} (their reasons above; each folder holds its outputs up to the failure)",
            failed.len(),
            study::list(&failed)
        );
        if !a.allow_failures {
            bail!("{what}; --allow-failures exits 0 anyway");
        }
        eprintln!("note: {what}");
    }
    Ok(())
}

/// `rrpdem study [STUDY] --merge DIR`: study.csv of the study in DIR from its variants' folders,
/// each checked against DIR/study.json.
pub(super) fn cmd_study_merge(dir: &Path, given: Option<&Path>, plots: bool, allow_failures: bool) -> Result<()> {
    let study = study::read_resolved(dir)?;
    let path = dir.join(study::STUDY_FILE);
    if let Some(p) = given {
        let mine = Study::load(p)?;
        if let Some(d) = study::study_difference(&study, &mine) {
            bail!(
                "{} is not the study in {}: {} differs from it ({d}); --merge assembles the study that the folder \
                 holds (leave the study file out, or give that study's file)",
                p.display(),
                dir.display(),
                path.display()
            );
        }
    }
    let t = study::table(&study, &path, dir);
    let file = dir.join("study.csv");
    std::fs::write(&file, &t.csv).with_context(|| format!("writing {}", file.display()))?;
    print_study_table(&t.csv);
    eprintln!("wrote {} ({})", file.display(), variants(study.variants.len()));
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (k, state) in t.states.iter().enumerate() {
        if *state == VariantState::Completed {
            continue;
        }
        eprintln!("variant {k}: {state}");
        match groups.iter_mut().find(|g| g.0 == state.label()) {
            Some(g) => g.1.push(k),
            None => groups.push((state.label(), vec![k])),
        }
    }
    if plots {
        eprintln!("wrote {}", study::plot(&study, dir)?.display());
        if let Some(png) = study::plot_fragments(&study, dir)? {
            eprintln!("wrote {}", png.display());
        }
    }
    let blocking: Vec<String> = groups
        .iter()
        .filter(|g| g.0 != "failed" || !allow_failures)
        .map(|(l, ks)| format!("{l} {}", study::list(ks)))
        .collect();
    if !blocking.is_empty() {
        bail!(
            "not every variant completed: {} (above). Run the shards that did not finish (or `rrpdem study STUDY \
             --resume --out {}` for what is missing, failed or interrupted) and merge again{}",
            blocking.join(", "),
            dir.display(),
            if groups.iter().any(|g| g.0 == "failed") { "; --allow-failures accepts failed variants" } else { "" }
        );
    }
    Ok(())
}

/// Prints the study table's main columns, aligned.
pub(super) fn print_study_table(csv: &str) {
    let Ok(rows) = study::csv_records(csv) else { return };
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
    let cols: Vec<usize> = (0..header.len()).filter(|&c| keep(&header[c])).collect();
    let show = |v: &str| match v.parse::<f64>() {
        Ok(x) if v.contains('.') || v.contains('e') => format!("{x:.4e}"),
        _ => v.to_string(),
    };
    let cells: Vec<Vec<String>> =
        rows.iter().map(|r| cols.iter().map(|&c| show(r.get(c).map_or("", String::as_str))).collect()).collect();
    let width: Vec<usize> =
        (0..cols.len()).map(|c| cells.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    for r in &cells {
        let line: Vec<String> = r.iter().zip(&width).map(|(v, w)| format!("{v:>w$}")).collect();
        outln!("{}", line.join("  "));
    }
}

/// "1 variant", "3 variants".
fn variants(n: usize) -> String {
    if n == 1 { "1 variant".into() } else { format!("{n} variants") }
}
