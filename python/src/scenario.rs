//! The scenario class: a validated `rrpdem::scenario::Scenario` (parsed by the library's own
//! parser, so errors name the field as the CLI's do), its JSON, and its resolved model as numpy
//! arrays.

use crate::scenario_error;
use numpy::ndarray::Array2;
use numpy::{PyArray1, PyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rrpdem::scenario::Scenario;
use std::path::PathBuf;

#[pyclass(name = "_Scenario", module = "rrpdem._native", frozen)]
pub struct PyScenario {
    pub inner: Scenario,
}

/// `n` rows of 3 (or 4) values as an (n, k) array.
pub(crate) fn rows<'py, const K: usize>(py: Python<'py>, v: Vec<[f64; K]>) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let n = v.len();
    let flat: Vec<f64> = v.into_iter().flatten().collect();
    let a = Array2::from_shape_vec((n, K), flat).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyArray2::from_owned_array(py, a))
}

/// A setting named as in a scenario file (`"gpu"`, `"f64"`), read by the scenario's own serde.
pub(crate) fn parse_enum<T: serde::de::DeserializeOwned>(v: &str, what: &str, expected: &str) -> PyResult<T> {
    serde_json::from_value(serde_json::Value::String(v.into()))
        .map_err(|_| PyValueError::new_err(format!("{what} `{v}`: expected {expected}")))
}

/// Applies the engine a caller asked for (`backend`: auto|cpu|gpu, `precision`: f32|f64) to
/// the scenario as the CLI's `--backend`/`--precision` do, and validates the result.
pub(crate) fn with_engine(
    py: Python<'_>,
    s: &Scenario,
    backend: Option<&str>,
    precision: Option<&str>,
) -> PyResult<Scenario> {
    let mut s = s.clone();
    if let Some(b) = backend {
        s.backend = parse_enum(b, "backend", "auto, cpu or gpu")?;
    }
    if let Some(p) = precision {
        s.precision = Some(parse_enum(p, "precision", "f32 or f64")?);
    }
    s.validate().map_err(|e| scenario_error(py, &e))?;
    Ok(s)
}

#[pymethods]
impl PyScenario {
    /// Parses and validates scenario JSON; `path` names it in errors and anchors CSV paths.
    #[staticmethod]
    fn from_json(py: Python<'_>, text: &str, path: PathBuf) -> PyResult<PyScenario> {
        Scenario::from_json(text, &path).map(|inner| PyScenario { inner }).map_err(|e| scenario_error(py, &e))
    }

    /// Reads and validates a scenario file.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<PyScenario> {
        Scenario::load(&path).map(|inner| PyScenario { inner }).map_err(|e| scenario_error(py, &e))
    }

    /// The scenario as JSON, every field resolved (defaults written out).
    fn to_json(&self) -> PyResult<String> {
        serde_json::to_string_pretty(&self.inner).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    #[getter]
    fn source(&self) -> PathBuf {
        self.inner.source.clone()
    }

    #[getter]
    fn dt(&self) -> f64 {
        self.inner.dt
    }

    #[getter]
    fn t_end(&self) -> f64 {
        self.inner.t_end
    }

    #[getter]
    fn total_steps(&self) -> u64 {
        self.inner.total_steps()
    }

    #[getter]
    fn record_interval(&self) -> u64 {
        self.inner.record_interval()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyScenario>().is_ok_and(|o| o.get().inner == self.inner)
    }

    /// Builds the model (every body generated and checked, as a run does) and returns its
    /// arrays in the scenario's particle numbering.
    fn generate<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let model = py.detach(|| self.inner.build_model()).map_err(|e| scenario_error(py, &e))?;
        let p = &model.particles;
        let d = PyDict::new(py);
        let v3 = |v: &[glam::DVec3]| v.iter().map(|x| x.to_array()).collect::<Vec<_>>();
        d.set_item("positions", rows(py, v3(&p.x))?)?;
        d.set_item("velocities", rows(py, v3(&p.v))?)?;
        d.set_item("attitudes", rows(py, p.q.iter().map(|q| [q.w, q.x, q.y, q.z]).collect())?)?;
        d.set_item("angular_velocities", rows(py, v3(&p.w))?)?;
        d.set_item("masses", PyArray1::from_slice(py, &p.mass))?;
        d.set_item("inertias", PyArray1::from_slice(py, &p.inertia))?;
        d.set_item("diameters", PyArray1::from_vec(py, p.radius.iter().map(|r| 2.0 * r).collect()))?;
        d.set_item("fixed", PyArray1::from_slice(py, &p.fixed))?;
        let pairs: Vec<i64> = model.bonds.iter().flat_map(|b| [b.i as i64, b.j as i64]).collect();
        let bonds =
            Array2::from_shape_vec((model.bonds.len(), 2), pairs).map_err(|e| PyValueError::new_err(e.to_string()))?;
        d.set_item("bonds", PyArray2::from_owned_array(py, bonds))?;
        d.set_item("bond_rest_lengths", PyArray1::from_vec(py, model.bonds.iter().map(|b| b.l0).collect()))?;
        Ok(d)
    }
}
