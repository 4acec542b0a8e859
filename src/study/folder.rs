//! A study's output folder: which study it holds (`study.json`), what each variant's folder
//! holds (read from its files and checked against the study, never taken on trust), the checks
//! made before a study runs into a folder, so that two studies never mix, and what `--resume`
//! runs (`resume.rs` continues the interrupted variants).

use super::{STUDY_FILE, Study, StudyError, read_resolved, variant_dir, write_resolved};
use crate::checkpoint::{self, Checkpoint};
pub use crate::json_diff::Difference;
use crate::json_diff::first_difference;
use crate::output::RUN_OUTPUTS;
use crate::scenario::Scenario;
use serde_json::Value;
use std::fmt;
use std::path::Path;

/// What a variant's folder holds, checked against the scenario study.json gives the variant.
#[derive(Clone, Debug, PartialEq)]
pub enum VariantState {
    /// No summary and no checkpoint: not run yet, still running, or killed before it wrote
    /// either (`partial`: some of a run's files are there).
    Missing {
        partial: bool,
    },
    Completed,
    /// Ran and stopped on an error: the summary's status.
    Failed {
        status: String,
    },
    /// Stopped by an interrupt, or killed after a checkpoint; `checkpoint`: its
    /// `checkpoint.bin` is there to continue from.
    Interrupted {
        checkpoint: bool,
    },
    /// `summary.json` (or `checkpoint.bin`, or an output it names) cannot be read.
    Corrupt {
        message: String,
    },
    /// The outputs of another scenario than the variant's: another study's.
    OtherStudy {
        difference: String,
    },
}

impl VariantState {
    /// The `status` cell of `study.csv`.
    pub fn label(&self) -> &'static str {
        match self {
            VariantState::Missing { .. } => "missing",
            VariantState::Completed => "completed",
            VariantState::Failed { .. } => "failed",
            VariantState::Interrupted { .. } => "interrupted",
            VariantState::Corrupt { .. } => "corrupt",
            VariantState::OtherStudy { .. } => "other-study",
        }
    }
}

impl fmt::Display for VariantState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VariantState::Missing { partial: false } => write!(f, "missing (not run, or still running)"),
            VariantState::Missing { partial: true } => {
                write!(f, "missing (a run started but wrote neither a summary nor a checkpoint; still running?)")
            }
            VariantState::Completed => write!(f, "completed"),
            VariantState::Failed { status } => write!(f, "failed: {status}"),
            VariantState::Interrupted { checkpoint: true } => write!(f, "interrupted (its checkpoint.bin is there)"),
            VariantState::Interrupted { checkpoint: false } => write!(f, "interrupted, without a checkpoint.bin"),
            VariantState::Corrupt { message } => write!(f, "corrupt: {message}"),
            VariantState::OtherStudy { difference } => write!(f, "outputs of another study: {difference}"),
        }
    }
}

/// A scenario as compared with a variant's: its JSON without `output` (which frames a run
/// writes is not what it computes, and `--vtk-every` changes it); `t_end` included.
fn scenario_json(s: &Scenario) -> Value {
    let mut v = serde_json::to_value(s).expect("a scenario serialises");
    if let Some(o) = v.as_object_mut() {
        o.remove("output");
    }
    v
}

/// Where the study `found` (an output folder's study.json) differs from `expected`, if it does:
/// its name, its base scenario (after `set`), its columns and its variants. Not the folder the
/// base was read from (study.json keeps it relative to where the study was started, which a
/// later command need not share); CSV files a base reads are compared by name only, as
/// `rrpdem resume` compares scenarios.
pub fn study_difference(found: &Study, expected: &Study) -> Option<Difference> {
    let json = |s: &Study| {
        let mut v = serde_json::to_value(s).expect("a study serialises");
        if let Some(o) = v.as_object_mut() {
            o.remove("base_dir");
        }
        v
    };
    first_difference(&json(found), &json(expected), "this study")
}

/// Which study an output folder holds.
#[derive(Debug)]
pub enum Holder {
    /// No study.json.
    Nothing,
    /// This study.
    Same,
    /// Another study (its name and where its study.json differs).
    Other { name: String, difference: Difference },
    /// A study.json that cannot be read (the error).
    Unreadable(String),
}

/// Which study the folder `out` holds, compared with `study`.
pub fn holder(study: &Study, out: &Path) -> Holder {
    if std::fs::symlink_metadata(out.join(STUDY_FILE)).is_err() {
        return Holder::Nothing;
    }
    match read_resolved(out) {
        Err(e) => Holder::Unreadable(e.to_string()),
        Ok(found) => match study_difference(&found, study) {
            None => Holder::Same,
            Some(difference) => Holder::Other { name: found.name, difference },
        },
    }
}

/// What variant `k`'s folder in `out` holds, checked against `study` (read from the study file
/// `path`, named in messages), and its summary where it has a readable one of this variant.
pub fn inspect(study: &Study, path: &Path, out: &Path, k: usize) -> (VariantState, Option<Value>) {
    let expected = match study.scenario(k, path) {
        Ok(s) => s,
        Err(e) => return (VariantState::Corrupt { message: format!("the study does not resolve it: {e}") }, None),
    };
    let dir = variant_dir(out, k);
    let text = match std::fs::read_to_string(dir.join("summary.json")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (without_summary(&dir, &expected), None),
        Err(e) => return (VariantState::Corrupt { message: format!("summary.json cannot be read: {e}") }, None),
    };
    let summary: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return (VariantState::Corrupt { message: format!("summary.json: {e}") }, None),
    };
    let found: Scenario = match serde_json::from_value(summary["scenario"].clone()) {
        Ok(s) => s,
        Err(e) => return (VariantState::Corrupt { message: format!("summary.json: field `scenario`: {e}") }, None),
    };
    if let Some(d) = first_difference(&scenario_json(&found), &scenario_json(&expected), "this study") {
        let difference = format!("its summary.json is of another scenario ({d})");
        return (VariantState::OtherStudy { difference }, None);
    }
    let state = match summary["status"].as_str() {
        None => VariantState::Corrupt { message: "summary.json: no `status`".into() },
        Some("completed") => match summary["final_state"].as_str() {
            _ if !dir.join("series.csv").is_file() => {
                VariantState::Corrupt { message: "summary.json says completed, but series.csv is not there".into() }
            }
            Some(f) if !dir.join(f).is_file() => {
                VariantState::Corrupt { message: format!("summary.json says completed, but {f} is not there") }
            }
            _ => VariantState::Completed,
        },
        Some("interrupted") => VariantState::Interrupted { checkpoint: dir.join(checkpoint::FILE_NAME).is_file() },
        Some(status) => VariantState::Failed { status: status.to_string() },
    };
    (state, Some(summary))
}

/// A variant folder without a summary: a checkpoint of the variant (a run killed after one),
/// or missing.
fn without_summary(dir: &Path, expected: &Scenario) -> VariantState {
    let cp_path = dir.join(checkpoint::FILE_NAME);
    if !cp_path.is_file() {
        let partial = RUN_OUTPUTS.iter().any(|f| dir.join(f).exists());
        return VariantState::Missing { partial };
    }
    match checkpoint_state(&cp_path, expected) {
        VariantState::Corrupt { message } => {
            VariantState::Corrupt { message: format!("no summary.json, and {message}") }
        }
        state => state,
    }
}

/// What a variant's `checkpoint.bin` allows: `Interrupted` (to continue from it) if it can be
/// read and is of the variant's scenario, else `Corrupt` or `OtherStudy`, saying why.
fn checkpoint_state(cp_path: &Path, expected: &Scenario) -> VariantState {
    match Checkpoint::read(cp_path) {
        Err(e) => VariantState::Corrupt { message: e.to_string() },
        Ok(cp) => match first_difference(&scenario_json(&cp.scenario), &scenario_json(expected), "this study") {
            Some(d) => {
                VariantState::OtherStudy { difference: format!("its checkpoint.bin is of another scenario ({d})") }
            }
            None => VariantState::Interrupted { checkpoint: true },
        },
    }
}

/// `[0, 3, 7]`, shortened past 20 entries.
pub fn list(ks: &[usize]) -> String {
    if ks.len() <= 20 {
        return format!("{ks:?}");
    }
    let head: Vec<String> = ks[..20].iter().map(usize::to_string).collect();
    format!("[{}, … ({} in all)]", head.join(", "), ks.len())
}

fn folder_error(out: &Path, message: String) -> StudyError {
    StudyError::Folder { path: out.to_owned(), message }
}

/// Makes the folder `out` ready for a run from t = 0 of the variants `which` of `study` (read
/// from `path`; `whole`: every variant, not a shard), before anything runs. Refuses a folder
/// that holds another study, or a study.json that cannot be read, or outputs of any variant in
/// `which`, unless `overwrite`: then the other study is replaced (its study.csv and figures
/// removed, and in a whole run its variant folders past this study's count); each variant that
/// runs replaces its folder's outputs itself. Writes study.json.
pub fn prepare_folder(
    study: &Study,
    path: &Path,
    out: &Path,
    which: &[usize],
    whole: bool,
    overwrite: bool,
) -> Result<(), StudyError> {
    if let Some(file) = crate::output::file_in_the_way(out) {
        return Err(folder_error(
            out,
            format!(
                "{} is a file, not a folder; an output folder (--out) must be a folder or not exist yet",
                file.display()
            ),
        ));
    }
    // A run's own outputs (and its lock) are not a study's: refused with or without
    // --overwrite, which replaces a study's files, not a run's.
    let run: Vec<&str> = crate::output::RUN_OUTPUTS
        .iter()
        .chain([&crate::output::LOCK_FILE])
        .copied()
        .filter(|f| out.join(f).exists())
        .collect();
    if !run.is_empty() {
        return Err(folder_error(
            out,
            format!(
                "holds the outputs of a run ({}), not of a study; a study's outputs go into a folder of their own: \
                 choose another with --out",
                run.join(", ")
            ),
        ));
    }
    let held = holder(study, out);
    if !overwrite {
        match &held {
            Holder::Other { name, difference } => {
                return Err(folder_error(
                    out,
                    format!(
                        "holds another study, `{name}` (its {STUDY_FILE} differs from {}: {difference}); running \
                         this study there would mix the two. Pass --overwrite to replace that study, or choose \
                         another folder with --out",
                        path.display()
                    ),
                ));
            }
            Holder::Unreadable(e) => {
                return Err(folder_error(
                    out,
                    format!(
                        "holds a {STUDY_FILE} that cannot be read ({e}), so whose variants are there is unknown; pass \
                         --overwrite to replace it, or choose another folder with --out"
                    ),
                ));
            }
            Holder::Nothing | Holder::Same => {}
        }
        let used: Vec<usize> = which.iter().copied().filter(|&k| has_outputs(&variant_dir(out, k))).collect();
        if !used.is_empty() {
            let message = match held {
                Holder::Same => {
                    let mut tally: Vec<(&str, usize)> = Vec::new();
                    for &k in &used {
                        let label = inspect(study, path, out, k).0.label();
                        match tally.iter_mut().find(|t| t.0 == label) {
                            Some(t) => t.1 += 1,
                            None => tally.push((label, 1)),
                        }
                    }
                    let tally: Vec<String> = tally.iter().map(|(l, n)| format!("{n} {l}")).collect();
                    format!(
                        "already holds outputs of variants {} of this study ({}); pass --resume to run only the \
                         missing, failed or interrupted ones (the completed ones are checked and kept), or \
                         --overwrite to run them all again",
                        list(&used),
                        tally.join(", ")
                    )
                }
                _ => format!(
                    "holds outputs of variants {} but no {STUDY_FILE}, so whose they are is unknown; pass \
                     --overwrite to replace them, or choose another folder with --out",
                    list(&used)
                ),
            };
            return Err(folder_error(out, message));
        }
    }
    let replaced = matches!(held, Holder::Other { .. } | Holder::Unreadable(_));
    claim(study, out, replaced)?;
    if replaced {
        for f in ["study.csv", "study.png", "study_fragments.png"] {
            remove_if_there(&out.join(f))?;
        }
    }
    if whole && overwrite && !matches!(held, Holder::Same) {
        // Variant folders past this study's count belong to what was replaced.
        let variants = out.join("variants");
        if let Ok(entries) = std::fs::read_dir(&variants) {
            for e in entries.flatten() {
                // Only the names this program gives (`7`, not `07` or `seven`).
                let name = e.file_name();
                let stale = name.to_str().and_then(|n| n.parse::<usize>().ok().filter(|k| k.to_string() == n));
                let stale = stale.is_some_and(|k| k >= study.variants.len());
                if stale {
                    remove_if_there(&e.path())?;
                }
            }
        }
    }
    Ok(())
}

/// Whether a variant's folder holds any of a run's outputs.
fn has_outputs(dir: &Path) -> bool {
    RUN_OUTPUTS.iter().any(|f| dir.join(f).exists())
}

fn remove_if_there(p: &Path) -> Result<(), StudyError> {
    let r = if p.is_dir() { std::fs::remove_dir_all(p) } else { std::fs::remove_file(p) };
    match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StudyError::Io { path: p.to_owned(), error: e }),
        _ => Ok(()),
    }
}

/// Writes `out/study.json` for `study`: over the one there with `replace`; otherwise only where
/// there is none (a hard link of a complete file, so that shards starting together never see
/// half a file, and a study.json written meanwhile by another study's shard is found).
fn claim(study: &Study, out: &Path, replace: bool) -> Result<(), StudyError> {
    if replace {
        return write_resolved(study, out);
    }
    let target = out.join(STUDY_FILE);
    let tmp = out.join(format!(".{STUDY_FILE}.{}.tmp", std::process::id()));
    let io = |p: &Path| {
        let p = p.to_owned();
        move |error| StudyError::Io { path: p, error }
    };
    std::fs::create_dir_all(out).map_err(io(out))?;
    let text = super::resolved_json(study);
    std::fs::write(&tmp, text).map_err(io(&tmp))?;
    let linked = std::fs::hard_link(&tmp, &target);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match holder(study, out) {
            Holder::Same => Ok(()),
            Holder::Nothing => Err(StudyError::Io { path: target, error: e }),
            Holder::Other { name, difference } => Err(folder_error(
                out,
                format!(
                    "another process has just started study `{name}` there ({difference}); choose another folder \
                     with --out"
                ),
            )),
            Holder::Unreadable(e) => Err(folder_error(out, format!("its {STUDY_FILE} cannot be read: {e}"))),
        },
        // A file system without hard links: the check made before the run has to do.
        Err(_) => write_resolved(study, out),
    }
}

/// What `study --resume` does with each variant of a folder.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResumePlan {
    /// Completed, checked against the study: kept as they are.
    pub kept: Vec<usize>,
    /// Interrupted with a checkpoint: continued from it.
    pub resume: Vec<usize>,
    /// Missing, failed, or interrupted without a checkpoint: run again from t = 0.
    pub fresh: Vec<usize>,
}

/// What `--resume` runs of the variants `which` of `study` in `out`. Refuses a folder without
/// study.json or with another study's, and variants whose outputs are another study's or
/// cannot be read (listing them; nothing is removed).
pub fn plan_resume(study: &Study, path: &Path, out: &Path, which: &[usize]) -> Result<ResumePlan, StudyError> {
    match holder(study, out) {
        Holder::Same => {}
        Holder::Nothing => {
            return Err(folder_error(
                out,
                format!("holds no {STUDY_FILE}: no study to resume there (run the study without --resume)"),
            ));
        }
        Holder::Unreadable(e) => {
            return Err(folder_error(
                out,
                format!("its {STUDY_FILE} cannot be read ({e}), so whose variants are there is unknown"),
            ));
        }
        Holder::Other { name, difference } => {
            return Err(folder_error(
                out,
                format!(
                    "holds another study, `{name}` (its {STUDY_FILE} differs from {}: {difference}); --resume \
                     continues only the study that wrote the folder. Pass --overwrite instead of --resume to \
                     replace that study, or choose another folder with --out",
                    path.display()
                ),
            ));
        }
    }
    let mut plan = ResumePlan::default();
    let mut bad = Vec::new();
    for &k in which {
        let (state, summary) = inspect(study, path, out, k);
        // An interrupted variant's checkpoint is read through before anything runs (once more
        // when it is continued), so that one that cannot be continued is refused here, with the
        // others, rather than failing after the rest have run. (`inspect` read it already where
        // there is no summary.)
        let state = match state {
            VariantState::Interrupted { checkpoint: true } if summary.is_some() => {
                let expected = study.scenario(k, path).map_err(|e| folder_error(out, e.to_string()))?;
                checkpoint_state(&variant_dir(out, k).join(checkpoint::FILE_NAME), &expected)
            }
            state => state,
        };
        match state {
            VariantState::Completed => plan.kept.push(k),
            VariantState::Interrupted { checkpoint: true } => plan.resume.push(k),
            VariantState::Missing { .. } | VariantState::Failed { .. } | VariantState::Interrupted { .. } => {
                plan.fresh.push(k)
            }
            state @ (VariantState::Corrupt { .. } | VariantState::OtherStudy { .. }) => {
                bad.push(format!("\n  variant {k}: {state}"))
            }
        }
    }
    if !bad.is_empty() {
        return Err(folder_error(
            out,
            format!(
                "--resume can neither continue nor check these variants:{}\nremove their folders ({}) to run them \
                 again, or run the whole study again with --overwrite",
                bad.concat(),
                variant_dir(out, 0).with_file_name("<k>").display()
            ),
        ));
    }
    Ok(plan)
}
