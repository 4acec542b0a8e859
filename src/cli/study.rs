//! `rrpdem study`: run a study's variants (whole or one shard) or merge the shards' outputs.

use super::install_interrupt_handler;
use anyhow::{Context, Result, bail};
use rrpdem::run::{self, EngineChoice, Summary};
use rrpdem::study::{self, Study};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

pub(super) fn cmd_study(
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

pub(super) fn cmd_study_merge(dir: &Path, plots: bool) -> Result<()> {
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
pub(super) fn print_study_table(csv: &str) {
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
