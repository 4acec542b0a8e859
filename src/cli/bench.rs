//! `rrpdem bench`: throughput of the benchmark cases, printed and written as a dated report.

use anyhow::{Context, Result, bail};
use std::path::Path;

#[allow(clippy::too_many_arguments)]
pub(super) fn cmd_bench(
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
    check_report_paths(json, markdown)?;
    let cases = bench::expand_cases(cases);
    let mut report = bench::report::Report::start(std::env::args().collect());
    let engines: Vec<bench::EngineKind> =
        engines.iter().map(|e| bench::EngineKind::parse(e)).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    bench::check_options(steps, threads, min_seconds, bandwidth)
        .map_err(|e| anyhow::anyhow!("--steps, --threads, --min-seconds, --bandwidth: {e}"))?;
    // Every name checked before anything is measured: a typo in the last case must not
    // surface after the others have run.
    for name in &cases {
        bench::case(name).map_err(anyhow::Error::msg)?;
    }
    let mut failed: Vec<String> = Vec::new();
    print_header();
    for name in &cases {
        let case = bench::case(name).map_err(anyhow::Error::msg)?;
        eprintln!("building {name} …");
        let start = std::time::Instant::now();
        let mut model = Some((case.model)().map_err(anyhow::Error::msg)?);
        let only_one = engines.len() * threads.len() == 1 && !name.starts_with("tori-");
        let built = model.as_ref().expect("built above");
        // `tori-N` builds the one torus its N copies are made of.
        let copies = bench::copies(name).map_or(String::new(), |c| format!("{c} copies of "));
        eprintln!(
            "built {name} in {:.2} s ({copies}{} particles, {} bonds; peak memory so far {:.0} MB)",
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
                print_measurement(&m);
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

/// Checks the report files' places before anything is measured: a long bench should not end in
/// a missing marker or folder.
fn check_report_paths(json: Option<&Path>, markdown: Option<&Path>) -> Result<()> {
    use rrpdem::bench;
    // The Markdown file is checked before anything is measured: a long bench should not end in
    // a missing marker.
    if let Some(md) = markdown {
        let doc = std::fs::read_to_string(md).with_context(|| format!("reading {}", md.display()))?;
        bench::report::splice(&doc, "", md)?;
    }
    // So is the JSON file's place: it is written after the first measurement.
    if let Some(j) = json {
        if j.is_dir() {
            bail!(
                "--json {}: is a folder; give the report's file name (e.g. {})",
                j.display(),
                j.join("bench.json").display()
            );
        }
        if let Some(dir) = j.parent().filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
            bail!("--json {}: the folder {} does not exist", j.display(), dir.display());
        }
    }
    Ok(())
}

/// The table's header line (stdout).
fn print_header() {
    outln!(
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
}

/// One measurement's table line (stdout) and its details (stderr).
fn print_measurement(m: &rrpdem::bench::Measurement) {
    outln!(
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
    if let (Some(r), Some(l)) = (m.rebuilds_per_1000_steps, m.list_entries_per_particle) {
        eprintln!("  contact lists: {r:.1} rebuilds per 1000 steps, {l:.2} entries per particle");
    }
    if let Some((lo, hi)) = m.replica_rebuilds_per_1000_steps {
        eprintln!("  each replica: {lo:.1} to {hi:.1} rebuilds per 1000 steps");
    }
    if let (Some((all, grid)), Some(mean), Some(quiet), Some(w)) =
        (m.recorded_dispatches_per_step, m.dispatches_per_step, m.dispatches_per_quiet_step, m.host_waits_per_step)
    {
        eprintln!(
            "  per step: a full step records {all} dispatches ({grid} of them the grid's, empty unless rebuilding); {mean:.1} launched \
             on average, {quiet} in a step without a rebuild; {w:.4} host waits"
        );
    }
    if let (Some(q), Some(miss)) = (m.recorded_dispatches_per_quiet_step, m.grid_misses_per_1000_steps) {
        eprintln!("  quiet steps: {q:.2} dispatches recorded on average; {miss:.2} missed rebuilds per 1000 steps");
    }
    if let Some(dt) = m.dt.filter(|&dt| dt != rrpdem::bench::BENCH_DT) {
        eprintln!("  dt = {dt:e} (the scenario's step, halved to below half the stable-step estimate where needed)");
    }
    if let Some(b) = m.engine_bytes {
        let mut largest = m.engine_parts.clone();
        largest.sort_by_key(|p| std::cmp::Reverse(p.1));
        let mut parts: Vec<String> =
            largest.iter().take(8).map(|(k, v)| format!("{k} {:.1}", *v as f64 / 1e6)).collect();
        if largest.len() > 8 {
            parts.push(format!("{} more (--json has every part)", largest.len() - 8));
        }
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
                .map(|(k, v)| format!("{k} {:.3} ms ({:.0} %)", v * 1e3, 100.0 * v / total.max(f64::MIN_POSITIVE)))
                .collect();
            eprintln!("  device time per step {:.3} ms: {}", total * 1e3, parts.join(", "));
        }
        None => {}
    }
    if let Some(k) = m.kernel_seconds.as_ref().filter(|k| !k.is_empty()) {
        let total: f64 = k.iter().map(|x| x.2).sum();
        let parts: Vec<String> = k.iter().map(|(_, name, v)| format!("{name} {:.3}", v * 1e3)).collect();
        eprintln!("  by kernel (each its own pass, {:.3} ms in all): {}", total * 1e3, parts.join(", "));
    }
}
