//! `rrpdem._native`: the Python package's native module, thin bindings over the rrpdem library
//! crate (the same scenario parser, run driver, study runner, bench and engines as the CLI; no
//! second implementation). The pure-Python layer (`python/rrpdem/`) builds the public API on it.
//!
//! Rooms: this file holds the module, its exception classes, the conversion of the library's
//! errors into them and the interruptible call (`interruptible`); `scenario` the scenario class,
//! `drivers` run/resume/study/bench, `stepper` the step-wise engine, `tables` the reading of
//! the output files into numpy arrays.

mod drivers;
mod scenario;
mod stepper;
mod tables;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyboardInterrupt};
use pyo3::prelude::*;
use rrpdem::error::ScenarioError as LibScenarioError;
use rrpdem::run::{INTERRUPT, RunError as LibRunError};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

create_exception!(rrpdem, Error, PyException, "Base class of the errors rrpdem raises.");
create_exception!(
    rrpdem,
    ScenarioError,
    Error,
    "A scenario that cannot be read, parsed or validated: `path`, `field` (a JSON path such as \
     `bodies[0].n`, or None) and `line` (of a CSV file, or None) say where."
);
create_exception!(
    rrpdem,
    StudyError,
    Error,
    "A study that cannot be resolved or whose output folder cannot be used: `path`, and `variant` \
     where one variant is at fault."
);
create_exception!(
    rrpdem,
    RunError,
    Error,
    "A run that failed (engine error, energy guard, output error): `out` is the folder holding \
     the outputs up to the last good step (None where nothing was written), `step` that step."
);
create_exception!(
    rrpdem,
    RunInterrupted,
    PyKeyboardInterrupt,
    "Ctrl-C stopped a run after its current chunk of steps; every output is written, with a \
     checkpoint: `out`, `step` and `t` say where (continue with rrpdem.resume(out))."
);

/// The command line's options that library messages name, as the Python arguments and
/// scenario fields that do the same (longest first, so that `--out` is not taken from
/// `--overwrite`).
const PYTHON_WORDS: [(&str, &str); 9] = [
    ("`rrpdem resume` takes", "rrpdem.resume takes"),
    ("--max-energy-error", "the scenario's max_energy_error"),
    ("--overwrite", "overwrite=True"),
    ("--resume", "resume=True"),
    ("--t-end", "t_end="),
    ("pass --force", "set the scenario's force_dt=True"),
    ("--force", "force_dt=True"),
    ("(--out)", "(out=)"),
    ("--out", "out="),
];

/// A library message in Python's words: the options it names as `PYTHON_WORDS` says (a Python
/// caller has no `--overwrite` to pass).
pub(crate) fn python_words(message: &str) -> String {
    let mut s = message.to_string();
    for (cli, py) in PYTHON_WORDS {
        s = s.replace(cli, py);
    }
    s
}

/// The source a scenario given as a dict is named by (`Scenario({...})`).
pub(crate) const DICT_SOURCE: &str = "<dict>";

/// A message without the JSON positions serde adds (" at line 1 column 540"): for a dict they
/// point into the JSON text the package made of it, which its caller never saw.
pub(crate) fn without_positions(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(" at line ") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + " at line ".len()..];
        let digits = |t: &str| t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let n = digits(tail);
        match tail[n..].strip_prefix(" column ") {
            Some(col) if n > 0 && digits(col) > 0 => rest = &col[digits(col)..],
            _ => {
                out.push_str(" at line ");
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Sets `name` on the exception `err` (attributes the Python side reads: `field`, `out`, …).
fn with_attrs<'py>(py: Python<'py>, err: PyErr, attrs: &[(&str, Option<Bound<'py, PyAny>>)]) -> PyErr {
    let value = err.value(py);
    for (name, v) in attrs {
        // An exception instance always takes attributes; a failure here would only lose detail.
        let _ = match v {
            Some(v) => value.setattr(*name, v),
            None => value.setattr(*name, py.None()),
        };
    }
    err
}

fn path_obj<'py>(py: Python<'py>, p: &Path) -> Option<Bound<'py, PyAny>> {
    p.display().to_string().into_pyobject(py).ok().map(|s| s.into_any())
}

/// The field a parse error names (`field `x`: …`, `unknown field `x``, `missing field `x``).
fn parse_error_field(message: &str) -> Option<String> {
    for lead in ["field `", "unknown field `", "missing field `"] {
        if let Some(at) = message.find(lead) {
            let rest = &message[at + lead.len()..];
            return rest.find('`').map(|end| rest[..end].to_string());
        }
    }
    None
}

/// A library scenario error as `rrpdem.ScenarioError`, with `path`, `field` and `line`.
pub(crate) fn scenario_error(py: Python<'_>, e: &LibScenarioError) -> PyErr {
    let (path, field, line) = match e {
        LibScenarioError::Io { path, .. } => (path, None, None),
        LibScenarioError::Parse { path, message } => (path, parse_error_field(message), None),
        LibScenarioError::Invalid { path, field, .. } => (path, Some(field.clone()), None),
        LibScenarioError::Csv { path, line, .. } => (path, None, Some(*line)),
    };
    let field = field.and_then(|f| f.into_pyobject(py).ok()).map(|f| f.into_any());
    let line = line.and_then(|l| l.into_pyobject(py).ok()).map(|l| l.into_any());
    let mut message = python_words(&e.to_string());
    if path.as_os_str() == DICT_SOURCE {
        message = without_positions(&message);
    }
    with_attrs(py, ScenarioError::new_err(message), &[("path", path_obj(py, path)), ("field", field), ("line", line)])
}

/// A library study error as `rrpdem.StudyError`, with `path` and `variant`.
pub(crate) fn study_error(py: Python<'_>, e: &rrpdem::study::StudyError) -> PyErr {
    use rrpdem::study::StudyError as E;
    let (path, variant) = match e {
        E::Io { path, .. } | E::Invalid { path, .. } | E::Folder { path, .. } => (path, None),
        E::Variant { path, variant, .. } => (path, Some(*variant)),
    };
    let variant = variant.and_then(|v| v.into_pyobject(py).ok()).map(|v| v.into_any());
    let mut message = python_words(&e.to_string());
    if path.as_os_str() == DICT_SOURCE {
        message = without_positions(&message);
    }
    with_attrs(py, StudyError::new_err(message), &[("path", path_obj(py, path)), ("variant", variant)])
}

/// A plain `rrpdem.RunError` (no folder), e.g. an engine that cannot start outside a run.
pub(crate) fn run_error_text(py: Python<'_>, message: String, out: Option<&Path>, step: Option<u64>) -> PyErr {
    let out = out.and_then(|p| path_obj(py, p));
    let step = step.and_then(|s| s.into_pyobject(py).ok()).map(|s| s.into_any());
    with_attrs(py, RunError::new_err(python_words(&message)), &[("out", out), ("step", step)])
}

/// A library run error as the exception a Python caller expects: `ScenarioError` for a
/// scenario, `RunInterrupted` (a `KeyboardInterrupt`) for an interrupt, `RunError` otherwise.
pub(crate) fn run_error(py: Python<'_>, e: &LibRunError) -> PyErr {
    match e {
        LibRunError::Scenario(s) => scenario_error(py, s),
        LibRunError::Interrupted { step, t, out_dir } => {
            let msg = format!("interrupted at step {step} (t = {t}); continue with rrpdem.resume({:?})", out_dir);
            let step = step.into_pyobject(py).ok().map(|s| s.into_any());
            let t = t.into_pyobject(py).ok().map(|t| t.into_any());
            with_attrs(py, RunInterrupted::new_err(msg), &[("out", path_obj(py, out_dir)), ("step", step), ("t", t)])
        }
        LibRunError::Engine { step, out_dir, .. } => run_error_text(py, e.to_string(), Some(out_dir), Some(*step)),
        LibRunError::Vtk { step, out_dir, .. } => run_error_text(py, e.to_string(), Some(out_dir), Some(*step)),
        _ => run_error_text(py, e.to_string(), None, None),
    }
}

/// Runs `work` on a thread of its own while this (the calling Python) thread waits with the
/// interpreter lock released, checking Python's signal handlers every 50 ms. When a handler
/// raises (Ctrl-C: `KeyboardInterrupt`), the library's interrupt flag is set, which the run
/// driver polls after each chunk of steps; `work` then stops and writes its outputs, and the
/// handler's exception is returned beside `work`'s result for the caller to raise once the
/// outputs are safe. The flag is cleared before and after.
pub(crate) fn interruptible<T: Send>(py: Python<'_>, work: impl FnOnce() -> T + Send) -> (T, Option<PyErr>) {
    INTERRUPT.store(false, Ordering::SeqCst);
    let (tx, rx) = std::sync::mpsc::channel();
    let out = std::thread::scope(|scope| {
        let handle = scope.spawn(move || {
            let r = work();
            let _ = tx.send(r);
        });
        let mut rx = rx;
        let mut pending = None;
        loop {
            // The receiver travels into the released section and back (it is not `Sync`).
            let (got, back) = py.detach(move || (rx.recv_timeout(Duration::from_millis(50)), rx));
            rx = back;
            match got {
                Ok(r) => return (r, pending),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    // The work panicked: pass its panic on (pyo3 raises it as PanicException).
                    match handle.join() {
                        Err(panic) => std::panic::resume_unwind(panic),
                        Ok(()) => unreachable!("a finished work sends its result"),
                    }
                }
            }
            if pending.is_none()
                && let Err(e) = py.check_signals()
            {
                INTERRUPT.store(true, Ordering::SeqCst);
                pending = Some(e);
            }
        }
    });
    INTERRUPT.store(false, Ordering::SeqCst);
    out
}

#[pymodule(gil_used = true)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("ScenarioError", py.get_type::<ScenarioError>())?;
    m.add("StudyError", py.get_type::<StudyError>())?;
    m.add("RunError", py.get_type::<RunError>())?;
    m.add("RunInterrupted", py.get_type::<RunInterrupted>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<scenario::PyScenario>()?;
    m.add_class::<stepper::PyEngine>()?;
    m.add_function(wrap_pyfunction!(drivers::run, m)?)?;
    m.add_function(wrap_pyfunction!(drivers::resume, m)?)?;
    m.add_function(wrap_pyfunction!(drivers::study, m)?)?;
    m.add_function(wrap_pyfunction!(drivers::bench, m)?)?;
    m.add_function(wrap_pyfunction!(drivers::plot_run, m)?)?;
    m.add_function(wrap_pyfunction!(tables::read_csv, m)?)?;
    m.add_function(wrap_pyfunction!(tables::final_from_checkpoint, m)?)?;
    Ok(())
}
