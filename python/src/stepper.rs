//! The step-wise engine (`rrpdem.Engine`): a scenario's model on the engine `rrpdem run` would
//! build for it, stepped from Python (`advance`), its state and diagnostics read back as numpy
//! arrays in the scenario's particle numbering, so that a user can couple it into a loop of
//! their own. Stepped as the run driver steps an engine (same model, same particle order, the
//! same re-sorts at the same steps), it reproduces `rrpdem run`'s series and final state bit
//! for bit; it keeps no energy guard and writes nothing.

use crate::scenario::{PyScenario, with_engine};
use crate::{interruptible, run_error_text, scenario_error};
use numpy::PyArray1;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rrpdem::engine::{BatchEngine, Engine, Reordered, Single};
use rrpdem::error::EngineError;
use rrpdem::interactions::BreakEvent;
use rrpdem::model::Model;
use rrpdem::order::{Order, error_to_user};
use rrpdem::run::{EngineChoice, INTERRUPT};
use rrpdem::scenario::{Backend, Scenario};
use std::sync::Mutex;
use std::sync::atomic::Ordering;

/// What an engine holds beside the library's engine: the model in the user's numbering, the
/// order the engine runs it in, and the breaks not yet handed out.
struct Inner {
    scenario: Scenario,
    model: Model,
    engine: Box<dyn Engine + Send>,
    order: Option<Order>,
    /// Steps between checks of the particle order (as `rrpdem run` checks it), if any.
    order_check: Option<u64>,
    /// Per bond of the user's numbering: broken so far (for the fragment labels).
    broken: Vec<bool>,
    breaks: Vec<BreakEvent>,
    resorts: Vec<(u64, f64)>,
    warnings: Vec<String>,
}

#[pyclass(name = "_Engine", module = "rrpdem._native", frozen)]
pub struct PyEngine {
    inner: Mutex<Inner>,
}

/// Why an engine could not be built.
enum StartError {
    Scenario(rrpdem::error::ScenarioError),
    Engine(EngineError),
}

/// Builds what `rrpdem run` builds for `s` before its first step (`run::prepare` without the
/// output folder): the model, the time-step check, the engine kind (with its f32 fallback) and
/// the particle order; then the engine. The steps of `prepare` are repeated here because that
/// function also takes the output folder, which a step-wise engine has none of.
fn start(s: &Scenario) -> Result<Inner, StartError> {
    let model = s.build_model().map_err(StartError::Scenario)?;
    let est = rrpdem::stability::estimate(&model);
    let mut warnings = Vec::new();
    if let Some(w) = rrpdem::stability::check_step(s.dt, s.force_dt, &est).map_err(StartError::Engine)? {
        warnings.push(w.to_string());
    }
    let (backend, mut precision) = EngineChoice::default().resolve(s);
    if backend == Backend::Cpu && s.backend == Backend::Auto && precision == Some(rrpdem::engine::Precision::F32) {
        warnings.push("precision f32 asked for, but no hardware GPU was found: running the CPU engine in f64".into());
        precision = None;
    }
    let (order, _) = Order::choose(&model, s.particle_order);
    let engine_model = order.as_ref().map(|o| o.apply(&model));
    let engine =
        rrpdem::engine::create(engine_model.as_ref().unwrap_or(&model), s.integrator, s.dt, backend, precision)
            .map_err(|e| StartError::Engine(error_to_user(order.as_ref(), e)))?;
    drop(engine_model);
    // As the run driver decides it for a fresh run (`run::replica`'s order checks).
    let order_check = match s.particle_order.checks_during_run(model.particles.len()) {
        true => engine.order_check_interval().map(|c| s.order_check_every.unwrap_or(c)).filter(|&c| c > 0),
        false => None,
    };
    let broken = vec![false; model.bonds.len()];
    Ok(Inner {
        scenario: s.clone(),
        model,
        engine,
        order,
        order_check,
        broken,
        breaks: Vec::new(),
        resorts: Vec::new(),
        warnings,
    })
}

impl Inner {
    fn to_user(&self, e: EngineError) -> EngineError {
        error_to_user(self.order.as_ref(), e)
    }

    /// Takes the engine's new breaks, in the user's numbering and order (as a run logs them).
    fn take_breaks(&mut self) {
        let events = view(self.engine.as_mut(), self.order.as_ref(), |re| re.take_breaks());
        for (_, e) in events {
            self.broken[e.bond as usize] = true;
            self.breaks.push(e);
        }
    }

    /// Advances `steps` steps in chunks of the engine's guard interval (where an interrupt is
    /// noticed, as in a run), checking the particle order where a run checks it. Returns the
    /// steps taken (fewer on an interrupt).
    fn advance(&mut self, steps: u64) -> Result<u64, EngineError> {
        let first = self.engine.steps_done();
        let target = first + steps;
        let chunk = self.engine.guard_interval().max(1);
        let next_multiple = |s: u64, every: u64| (s / every + 1) * every;
        let mut step = first;
        while step < target {
            if INTERRUPT.load(Ordering::SeqCst) {
                break;
            }
            let mut next = target.min(step + chunk);
            if let Some(c) = self.order_check {
                next = next.min(next_multiple(step, c));
            }
            self.engine.advance(next - step).map_err(|e| self.to_user(e))?;
            step = next;
            self.take_breaks();
            if self.order_check.is_some_and(|c| step.is_multiple_of(c)) {
                self.check_order(step);
            }
        }
        Ok(step - first)
    }

    /// The run driver's check of the particle order at `step` (`Reordered::resort`).
    fn check_order(&mut self, step: u64) {
        let mut single = Single::new(self.engine.as_mut());
        let mut re = Reordered::new(&mut single, vec![self.order.as_ref()]);
        match re.resort(0, &self.model) {
            Ok((scatter, true)) => {
                let new = re.order(0).cloned();
                drop(re);
                self.order = new;
                self.resorts.push((step, scatter));
            }
            Ok((_, false)) => {}
            Err(e) => {
                drop(re);
                // As in a run: the engine is as it was and goes on in its order.
                self.warnings.push(format!(
                    "the particle order could not be renewed at step {step} ({e}); the engine went on in its order"
                ));
                self.order_check = None;
            }
        }
    }

    fn snapshot(&mut self) -> Result<Vec<rrpdem::integrator::Kinematics>, EngineError> {
        view(self.engine.as_mut(), self.order.as_ref(), |re| re.snapshot(0))
    }

    fn tangential_displacement(&mut self) -> Result<Option<Vec<f64>>, EngineError> {
        view(self.engine.as_mut(), self.order.as_ref(), |re| re.tangential_displacement(0))
    }
}

/// `f` on the engine as the run driver sees it: through `Reordered`, in the user's numbering.
fn view<R>(engine: &mut (dyn Engine + Send), order: Option<&Order>, f: impl FnOnce(&mut Reordered<'_>) -> R) -> R {
    let mut single = Single::new(engine);
    let mut re = Reordered::new(&mut single, vec![order]);
    f(&mut re)
}

/// Sets `final_state.csv`'s kinematic columns (x … wz) on `d`.
pub(crate) fn set_state_columns(
    py: Python<'_>,
    d: &Bound<'_, PyDict>,
    x: &[glam::DVec3],
    v: &[glam::DVec3],
    q: &[glam::DQuat],
    w: &[glam::DVec3],
) -> PyResult<()> {
    let col = |v: &[glam::DVec3], k: usize| PyArray1::from_vec(py, v.iter().map(|e| e[k]).collect());
    let vectors = |d: &Bound<'_, PyDict>, names: [&str; 3], vals: &[glam::DVec3]| -> PyResult<()> {
        names.iter().enumerate().try_for_each(|(k, name)| d.set_item(*name, col(vals, k)))
    };
    vectors(d, ["x", "y", "z"], x)?;
    vectors(d, ["vx", "vy", "vz"], v)?;
    for (name, f) in [("qw", 0), ("qx", 1), ("qy", 2), ("qz", 3)] {
        let vals: Vec<f64> = q.iter().map(|q| [q.w, q.x, q.y, q.z][f]).collect();
        d.set_item(name, PyArray1::from_vec(py, vals))?;
    }
    vectors(d, ["wx", "wy", "wz"], w)?;
    Ok(())
}

impl PyEngine {
    /// The engine, unless another Python thread is using it: waiting for it here, with the
    /// interpreter lock held, would deadlock with that thread's `advance` (which takes the
    /// interpreter lock back to check for Ctrl-C).
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Inner>> {
        self.inner.try_lock().map_err(|e| match e {
            std::sync::TryLockError::WouldBlock => {
                PyRuntimeError::new_err("the engine is busy in another thread (one call at a time)")
            }
            std::sync::TryLockError::Poisoned(_) => PyRuntimeError::new_err("the engine failed in an earlier call"),
        })
    }
}

#[pymethods]
impl PyEngine {
    #[new]
    #[pyo3(signature = (scenario, backend = None, precision = None))]
    fn new(py: Python<'_>, scenario: &PyScenario, backend: Option<&str>, precision: Option<&str>) -> PyResult<Self> {
        let s = with_engine(py, &scenario.inner, backend, precision)?;
        match py.detach(|| start(&s)) {
            Ok(inner) => Ok(PyEngine { inner: Mutex::new(inner) }),
            Err(StartError::Scenario(e)) => Err(scenario_error(py, &e)),
            Err(StartError::Engine(e)) => Err(run_error_text(py, format!("cannot start the engine: {e}"), None, None)),
        }
    }

    /// Advances `steps` steps with the interpreter lock released. Ctrl-C stops it after the
    /// current chunk (the engine is then at a whole step) and raises KeyboardInterrupt. Returns
    /// the steps taken.
    fn advance(&self, py: Python<'_>, steps: u64) -> PyResult<u64> {
        let mut guard = self.lock()?;
        let inner: &mut Inner = &mut guard;
        let (result, pending) = interruptible(py, || inner.advance(steps));
        let step = inner.engine.steps_done();
        match (result, pending) {
            (Err(e), _) => Err(run_error_text(py, e.to_string(), None, Some(step))),
            (Ok(_), Some(interrupt)) => Err(interrupt),
            (Ok(n), None) => Ok(n),
        }
    }

    /// Steps taken since t = 0.
    #[getter]
    fn steps(&self) -> PyResult<u64> {
        Ok(self.lock()?.engine.steps_done())
    }

    #[getter]
    fn n_particles(&self) -> PyResult<usize> {
        Ok(self.lock()?.model.particles.len())
    }

    #[getter]
    fn n_bonds(&self) -> PyResult<usize> {
        Ok(self.lock()?.model.bonds.len())
    }

    /// backend, device, precision.
    fn info(&self) -> PyResult<(String, String, String)> {
        let i = self.lock()?.engine.info();
        Ok((i.backend, i.device, i.precision.as_str().to_string()))
    }

    /// What the user should know that is not an error (time-step warning, fallbacks, …).
    fn warnings(&self) -> PyResult<Vec<String>> {
        let g = self.lock()?;
        let mut w = g.warnings.clone();
        w.extend(g.engine.warnings());
        Ok(w)
    }

    /// The re-sorts of the particle order so far: (step, scatter of the order left).
    fn resorts(&self) -> PyResult<Vec<(u64, f64)>> {
        Ok(self.lock()?.resorts.clone())
    }

    /// The scenario as it runs (JSON), with the backend and precision asked for.
    fn scenario_json(&self) -> PyResult<String> {
        serde_json::to_string_pretty(&self.lock()?.scenario).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// The diagnostics at the current step as `series.csv` writes them: `(header, row)`, the
    /// library's own row text (17 significant digits, which parse back to the same f64): the
    /// columns before `E_scale` (the run's guard scale) and `E_dissipated` (MODEL §10).
    fn diagnostics_row(&self, py: Python<'_>) -> PyResult<(String, String)> {
        let mut g = self.lock()?;
        let inner: &mut Inner = &mut g;
        let d = py.detach(|| inner.engine.diagnostics().map_err(|e| inner.to_user(e)));
        let step = inner.engine.steps_done();
        let d = d.map_err(|e| run_error_text(py, e.to_string(), None, Some(step)))?;
        let header = rrpdem::diagnostics::SERIES_HEADER.split(",E_scale").next().unwrap_or_default();
        let row = format!("{},{}", d.csv_row(), rrpdem::diagnostics::fmt17(d.e_dissipated));
        Ok((format!("{header},E_dissipated"), row))
    }

    /// The state at the current step in `final_state.csv`'s columns (copies; q with qw ≥ 0).
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut g = self.lock()?;
        let inner: &mut Inner = &mut g;
        let state = py.detach(|| inner.snapshot());
        let step = inner.engine.steps_done();
        let state = state.map_err(|e| run_error_text(py, e.to_string(), None, Some(step)))?;
        let p = &inner.model.particles;
        let d = PyDict::new(py);
        d.set_item("id", PyArray1::from_vec(py, (0..p.len() as i64).collect()))?;
        let x: Vec<_> = state.iter().map(|k| k.x).collect();
        let v: Vec<_> = state.iter().map(|k| k.v).collect();
        let q: Vec<_> = state.iter().map(|k| rrpdem::rrp::canonical(k.q)).collect();
        let w: Vec<_> = state.iter().map(|k| k.w).collect();
        set_state_columns(py, &d, &x, &v, &q, &w)?;
        d.set_item("mass", PyArray1::from_slice(py, &p.mass))?;
        d.set_item("inertia", PyArray1::from_slice(py, &p.inertia))?;
        d.set_item("diameter", PyArray1::from_vec(py, p.radius.iter().map(|r| 2.0 * r).collect()))?;
        d.set_item("fixed", PyArray1::from_vec(py, p.fixed.iter().map(|&f| f as i64).collect()))?;
        let labels = rrpdem::fragments::label_model(&inner.model, &inner.broken);
        d.set_item("fragment", PyArray1::from_vec(py, labels.into_iter().map(i64::from).collect()))?;
        Ok(d)
    }

    /// With friction (MODEL §10): each particle's largest tangential displacement |ξ| over its
    /// frictional contacts after the last force evaluation (length; 0 without one), by user
    /// index, the field VTK frames carry as `tangential_displacement`; `None` without friction.
    fn tangential_displacement<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyArray1<f64>>>> {
        let mut g = self.lock()?;
        let inner: &mut Inner = &mut g;
        let got = py.detach(|| inner.tangential_displacement());
        let step = inner.engine.steps_done();
        let got = got.map_err(|e| run_error_text(py, e.to_string(), None, Some(step)))?;
        Ok(got.map(|v| PyArray1::from_vec(py, v)))
    }

    /// Every rigid clump's state at the current step (MODEL §12) in `clumps.csv`'s columns but
    /// `step` and `t` (`clump`, centre, velocity, attitude with q_w ≥ 0, spatial Ω); empty
    /// arrays for a model without clumps.
    fn clumps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut g = self.lock()?;
        let inner: &mut Inner = &mut g;
        let step = inner.engine.steps_done();
        let clumps = inner.engine.clumps().map_err(|e| run_error_text(py, e.to_string(), None, Some(step)))?;
        let d = PyDict::new(py);
        d.set_item("clump", PyArray1::from_vec(py, (0..clumps.len() as i64).collect()))?;
        // clumps.csv's columns after `step,t,clump`, one row per clump.
        const NAMES: [&str; 13] =
            ["x", "y", "z", "v_x", "v_y", "v_z", "q_w", "q_x", "q_y", "q_z", "omega_x", "omega_y", "omega_z"];
        let rows: Vec<[f64; 13]> = clumps
            .iter()
            .map(|c| {
                let q = rrpdem::rrp::canonical(c.q);
                [c.x.x, c.x.y, c.x.z, c.v.x, c.v.y, c.v.z, q.w, q.x, q.y, q.z, c.w.x, c.w.y, c.w.z]
            })
            .collect();
        for (k, name) in NAMES.iter().enumerate() {
            d.set_item(*name, PyArray1::from_vec(py, rows.iter().map(|r| r[k]).collect()))?;
        }
        Ok(d)
    }

    /// The bonds broken since the last call, in `breaks.csv`'s columns.
    fn take_breaks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let events = std::mem::take(&mut self.lock()?.breaks);
        let d = PyDict::new(py);
        let ints = |f: &dyn Fn(&BreakEvent) -> i64| PyArray1::from_vec(py, events.iter().map(f).collect());
        let floats = |f: &dyn Fn(&BreakEvent) -> f64| PyArray1::from_vec(py, events.iter().map(f).collect());
        d.set_item("step", ints(&|e| e.step as i64))?;
        d.set_item("t", floats(&|e| e.t))?;
        d.set_item("bond", ints(&|e| e.bond.into()))?;
        d.set_item("i", ints(&|e| e.i.into()))?;
        d.set_item("j", ints(&|e| e.j.into()))?;
        let modes: Vec<&str> =
            events.iter().map(|e| rrpdem::interactions::rupture::CHANNELS[e.mode as usize]).collect();
        d.set_item("mode", modes)?;
        d.set_item("x", floats(&|e| e.x.x))?;
        d.set_item("y", floats(&|e| e.x.y))?;
        d.set_item("z", floats(&|e| e.x.z))?;
        d.set_item("energy", floats(&|e| e.energy))?;
        Ok(d)
    }
}
