//! The library's drivers, called as the CLI calls them (`src/cli/run.rs`, `resume.rs`,
//! `study.rs`, `bench.rs`), each on a thread of its own with the interpreter lock released and
//! Ctrl-C turned into the library's interrupt (`interruptible`). Outputs go to folders exactly
//! as the CLI's do; the Python layer reads them back.

use crate::scenario::{PyScenario, parse_enum, with_engine};
use crate::{DICT_SOURCE, Error, interruptible, python_words, run_error, run_error_text, study_error};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rrpdem::output::OutputDir;
use rrpdem::run::{self as lib_run, EngineChoice, INTERRUPT, RunOptions, VtkOptions};
use rrpdem::study::{self as lib_study, ResumePlan, Study};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

/// The options of a run beside the scenario, checked as the CLI checks them.
fn options(progress: bool, checkpoint_every: Option<u64>, vtk_every: Option<u64>) -> PyResult<RunOptions> {
    if checkpoint_every == Some(0) {
        return Err(PyValueError::new_err("checkpoint_every must be at least 1"));
    }
    if vtk_every == Some(0) {
        return Err(PyValueError::new_err("vtk_every must be at least 1"));
    }
    Ok(RunOptions {
        progress,
        checkpoint_every,
        stop_at: None,
        vtk: VtkOptions { every: vtk_every, replica: 0 },
        bars: None,
    })
}

/// What a run ended with, as the caller should see it: the interrupt first where Ctrl-C was
/// pressed (the outputs are written by then), else the run's own error.
fn finish<T>(py: Python<'_>, result: Result<T, lib_run::RunError>, pending: Option<PyErr>) -> PyResult<T> {
    match (result, pending) {
        (Err(e), Some(interrupt)) => {
            let err = run_error(py, &e);
            err.set_cause(py, Some(interrupt));
            Err(err)
        }
        (Err(e), None) => Err(run_error(py, &e)),
        (Ok(_), Some(interrupt)) => Err(interrupt),
        (Ok(v), None) => Ok(v),
    }
}

/// Runs `scenario` from t = 0 into the folder `out` as `rrpdem run` does. Returns what the run
/// announced (the CLI's `rrpdem: …` lines: warnings, notes, what ran).
#[pyfunction]
#[pyo3(signature = (scenario, out, overwrite = false, backend = None, precision = None, progress = false,
    checkpoint_every = None, vtk_every = None))]
#[allow(clippy::too_many_arguments)]
pub fn run(
    py: Python<'_>,
    scenario: &PyScenario,
    out: PathBuf,
    overwrite: bool,
    backend: Option<&str>,
    precision: Option<&str>,
    progress: bool,
    checkpoint_every: Option<u64>,
    vtk_every: Option<u64>,
) -> PyResult<Vec<String>> {
    let s = with_engine(py, &scenario.inner, backend, precision)?;
    let opts = options(progress, checkpoint_every, vtk_every)?;
    let said = Mutex::new(Vec::new());
    let say = |what: &str| said.lock().map(|mut v| v.push(python_words(what))).unwrap_or_default();
    let (result, pending) =
        interruptible(py, || lib_run::run_scenario(&s, &out, overwrite, &EngineChoice::default(), opts, &say));
    let said = said.into_inner().unwrap_or_default();
    finish(py, result, pending).map_err(|e| with_messages(py, e, &said))?;
    Ok(said)
}

/// A failed or interrupted run's error with what the run announced before (`messages`): its
/// warnings (a time step near the stability limit) are often what explains the failure.
fn with_messages(py: Python<'_>, err: PyErr, said: &[String]) -> PyErr {
    // An exception instance always takes attributes; a failure here would only lose detail.
    let _ = err.value(py).setattr("messages", said.to_vec());
    err
}

/// Continues the run in `dir` from its checkpoint as `rrpdem resume` does (to `t_end`, or the
/// run's end; refused unless the checkpoint is `scenario`'s, where one is given).
#[pyfunction]
#[pyo3(signature = (dir, t_end = None, scenario = None, progress = false, checkpoint_every = None, vtk_every = None))]
pub fn resume(
    py: Python<'_>,
    dir: PathBuf,
    t_end: Option<f64>,
    scenario: Option<&PyScenario>,
    progress: bool,
    checkpoint_every: Option<u64>,
    vtk_every: Option<u64>,
) -> PyResult<Vec<String>> {
    let opts = options(progress, checkpoint_every, vtk_every)?;
    let od = OutputDir::reopen(&dir).map_err(|e| run_error_text(py, e.to_string(), None, None))?;
    let check = scenario.map(|s| &s.inner);
    let said = Mutex::new(Vec::new());
    let (result, pending) = interruptible(py, || {
        lib_run::resume(&od, t_end, check, opts, |what| {
            said.lock().map(|mut v| v.push(python_words(what))).unwrap_or_default()
        })
    });
    drop(od);
    let said = said.into_inner().unwrap_or_default();
    finish(py, result, pending).map_err(|e| with_messages(py, e, &said))?;
    Ok(said)
}

/// Runs a study into `out` as `rrpdem study` does (a whole study, no shards): the folder's
/// checks, then the variants to continue (`resume`) and those to run from t = 0, then
/// study.csv. `source` is a file name, or with `text` the study's JSON (named `<dict>`, its
/// relative paths taken from the working folder). Returns, per variant that ran, its index and
/// None or why it did not complete; raises `RunInterrupted` (after study.csv is written) on
/// Ctrl-C.
#[pyfunction]
#[pyo3(signature = (source, out, text = false, overwrite = false, resume = false, backend = None, precision = None,
    gpu_memory = None, progress = false, vtk_every = None))]
#[allow(clippy::too_many_arguments)]
pub fn study(
    py: Python<'_>,
    source: &str,
    out: PathBuf,
    text: bool,
    overwrite: bool,
    resume: bool,
    backend: Option<&str>,
    precision: Option<&str>,
    gpu_memory: Option<u64>,
    progress: bool,
    vtk_every: Option<u64>,
) -> PyResult<Vec<(usize, Option<String>)>> {
    if overwrite && resume {
        return Err(PyValueError::new_err("overwrite and resume exclude each other"));
    }
    let vtk = options(false, None, vtk_every)?.vtk;
    let path = if text { PathBuf::from(DICT_SOURCE) } else { PathBuf::from(source) };
    let loaded = py.detach(|| if text { Study::from_json(source, &path) } else { Study::load(&path) });
    let st = loaded.map_err(|e| study_error(py, &e))?;
    // The engine choice as `--backend`/`--precision` give it.
    let choice = EngineChoice {
        backend: backend.map(|b| parse_enum(b, "backend", "auto, cpu or gpu")).transpose()?,
        precision: precision.map(|p| parse_enum(p, "precision", "f32 or f64")).transpose()?,
        gpu_memory,
    };
    let which: Vec<usize> = (0..st.variants.len()).collect();
    let plan = if resume {
        lib_study::plan_resume(&st, &path, &out, &which).map_err(|e| study_error(py, &e))?
    } else {
        lib_study::prepare_folder(&st, &path, &out, &which, true, overwrite).map_err(|e| study_error(py, &e))?;
        ResumePlan { fresh: which.clone(), ..Default::default() }
    };
    let bars = progress.then(indicatif::MultiProgress::new);
    let (result, pending) = interruptible(py, || -> Result<_, String> {
        let mut ran = lib_study::resume_variants(
            &st,
            &path,
            &out,
            &plan.resume,
            gpu_memory,
            vtk,
            bars.as_ref(),
            // Said where progress is shown, as the bars are.
            &|line| {
                if let Some(b) = &bars
                    && b.println(&line).is_err()
                {
                    eprintln!("{line}")
                }
            },
            &|_, _| {},
        );
        let over = overwrite || resume;
        let report =
            lib_study::run_variants(&st, &path, &plan.fresh, &out, &choice, vtk, over, bars.clone(), &|_, _| {})
                .map_err(|e| e.to_string())?;
        ran.extend(report.ran);
        let table = lib_study::table(&st, &path, &out);
        let file = out.join("study.csv");
        std::fs::write(&file, &table.csv).map_err(|e| format!("writing {}: {e}", file.display()))?;
        Ok(ran)
    });
    let ran = result.map_err(|e| Error::new_err(python_words(&e)))?;
    if let Some(interrupt) = pending {
        return Err(interrupt);
    }
    Ok(ran
        .into_iter()
        .map(|(k, r)| {
            let why = match r {
                Ok(s) if s.status == "completed" => None,
                Ok(s) => Some(s.status),
                Err(e) => Some(e.message),
            };
            (k, why)
        })
        .collect())
}

/// Measures the bench cases as `rrpdem bench` does; returns its report (JSON: date, machine,
/// every measurement). Ctrl-C stops between measurements.
#[pyfunction]
#[pyo3(signature = (cases, engines, threads, steps = 100, min_seconds = 2.0, bandwidth = None, stages = false))]
#[allow(clippy::too_many_arguments)]
pub fn bench(
    py: Python<'_>,
    cases: Vec<String>,
    engines: Vec<String>,
    threads: Vec<usize>,
    steps: u64,
    min_seconds: f64,
    bandwidth: Option<f64>,
    stages: bool,
) -> PyResult<String> {
    use rrpdem::bench as b;
    b::check_options(steps, &threads, min_seconds, bandwidth).map_err(PyValueError::new_err)?;
    let engines: Vec<b::EngineKind> =
        engines.iter().map(|e| b::EngineKind::parse(e)).collect::<Result<_, _>>().map_err(PyValueError::new_err)?;
    let cases = b::expand_cases(&cases);
    let built: Vec<b::Case> =
        cases.iter().map(|c| b::case(c)).collect::<Result<_, _>>().map_err(PyValueError::new_err)?;
    let command = vec!["rrpdem.bench".to_string(), format!("cases={}", cases.join(","))];
    let (result, pending) = interruptible(py, || -> Result<_, String> {
        let mut report = b::report::Report::start(command);
        'cases: for case in &built {
            let model = (case.model)()?;
            for &e in &engines {
                for &t in &threads {
                    if INTERRUPT.load(Ordering::SeqCst) {
                        break 'cases;
                    }
                    let m = std::borrow::Cow::Borrowed(&model);
                    let m = b::measure(case, m, e, t, stages, steps, min_seconds, bandwidth)
                        .map_err(|err| format!("{} on {e:?} with {t} threads: {err}", case.name))?;
                    report.measurements.push(m);
                }
            }
        }
        serde_json::to_string(&report).map_err(|e| e.to_string())
    });
    if let Some(interrupt) = pending {
        return Err(interrupt);
    }
    result.map_err(Error::new_err)
}

/// Draws a run folder's figures (energy budget, energy error, momentum drift) as `--plots`
/// does; returns the files written.
#[pyfunction]
pub fn plot_run(py: Python<'_>, dir: PathBuf) -> PyResult<Vec<PathBuf>> {
    py.detach(|| rrpdem::plot::plot_run_dir(&dir, &dir)).map_err(|e| Error::new_err(e.to_string()))
}
