//! V3: the 3-D pendulum — exact invariants for all three maps and the observed orders of the
//! energy error (38) and of the trajectory error.

mod common;
use common::{engines, scenario};
use glam::DVec3;
use rrpdem::converge::converge;
use rrpdem::integrator::Integrator;

#[test]
fn pendulum_invariants_are_exact_for_every_map() {
    let s = scenario("pendulum.json");
    let model = s.build_model().unwrap();
    let e0 = 0.7471067811865475;
    for integ in Integrator::ALL {
        for h in [0.1, 0.00625] {
            for (name, mut e) in engines(&model, integ, h) {
                assert!((e.diagnostics().unwrap().total() - e0).abs() < 1e-15, "E0");
                let steps = (10.0 / h).round() as u64;
                let mut worst = [0.0f64; 3];
                for _ in 0..steps {
                    e.advance(1).unwrap();
                    let k = e.snapshot().unwrap()[0];
                    let b = k.q * DVec3::Z;
                    worst[0] = worst[0].max(b.dot(k.w).abs());
                    worst[1] = worst[1].max((b.length() - 1.0).abs());
                    worst[2] = worst[2].max((k.w.z - 0.2).abs());
                }
                // Each step adds O(ε |Ω|) rounding to these products; ≤ 1600 steps with
                // |Ω| ≤ 2 gives ≤ 1600 · 2 · 2.2e-16 ≈ 7e-13 in the worst (linear) case.
                for (what, v) in ["(Rρ0)·Ω", "|Rρ0| − 1", "e3·Ω − 0.2"].iter().zip(worst) {
                    assert!(v < 1e-12, "{name} {integ} h = {h}: {what} drifted by {v:e}");
                }
            }
        }
    }
}

#[test]
fn pendulum_orders_are_two_two_one() {
    let s = scenario("pendulum.json");
    let model = s.build_model().unwrap();
    let dts: Vec<f64> = (0..5).map(|k| 0.1 / 2f64.powi(k)).collect();
    let rows = converge(&model, &Integrator::ALL, &dts, 10.0, 64).unwrap();
    for r in &rows {
        let expected = r.integrator.order() as f64;
        if let Some(o) = r.e_order {
            assert!((o - expected).abs() <= 0.15, "{} dt = {}: energy order {o}", r.integrator, r.dt);
        }
        // The norm of the difference shows the method's order; the paper's (37), a difference
        // of squared norms, shows half of it (MODEL §4).
        if let (Some(o), Some(p)) = (r.traj_order_norm, r.traj_order_paper) {
            assert!((o - expected).abs() <= 0.15, "{} dt = {}: trajectory order {o}", r.integrator, r.dt);
            assert!((p - expected / 2.0).abs() <= 0.2, "{} dt = {}: (37) order {p}", r.integrator, r.dt);
        }
        assert!(r.invariant_drift < 1e-12, "{} dt = {}: e3·S drifted by {}", r.integrator, r.dt, r.invariant_drift);
    }
}
