//! Fixed particles are not integrated but still push back; gravity's energy is accounted for.

mod common;
use common::{engines, scenario_from};
use rrpdem::integrator::Integrator;

#[test]
fn sphere_bounces_on_a_fixed_sphere_under_gravity() {
    let json = r#"{"name": "bounce", "dt": 1e-4, "t_end": 1,
        "particle": {"mass": 1, "inertia": 0.1, "diameter": 1},
        "stiffness": {"contact": 1e5},
        "gravity": [0, 0, -9.81],
        "bodies": [{"type": "particles", "particles": [
            {"x": [0, 0, 0], "fixed": true, "omega": [0, 0, 1]},
            {"x": [0, 0, 1.5], "omega": [0, 3, 0]}]}]}"#;
    let model = scenario_from(json).build_model().unwrap();
    for (name, mut e) in engines(&model, Integrator::RrpNewmark, 1e-4) {
        let s0 = e.snapshot().unwrap();
        let e0 = e.diagnostics().unwrap().total();
        let (mut min_z, mut late_max_z, mut max_dev) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
        // Free fall from z = 1.5 touches at z = 1 after sqrt(2·0.5/9.81) ≈ 0.32; an elastic
        // bounce is back near the top at ≈ 0.64.
        for k in 1..=700 {
            e.advance(10).unwrap();
            let s = e.snapshot().unwrap();
            min_z = min_z.min(s[1].x.z);
            if k > 550 {
                late_max_z = late_max_z.max(s[1].x.z);
            }
            max_dev = max_dev.max((e.diagnostics().unwrap().total() - e0).abs() / e0.abs());
            // The fixed particle keeps its whole state, bit for bit (even its spin).
            assert_eq!(s[0], s0[0], "{name}: fixed particle moved");
        }
        // Peak overlap: m g Δh = (2/5) K δ^{5/2} with Δh = 0.5 → δ = (5·4.9/(2·1e5))^{0.4} ≈ 0.027,
        // i.e. the centre stops at 1 − 0.027 ≈ 0.973.
        assert!((0.96..0.985).contains(&min_z), "{name}: lowest centre {min_z}");
        assert!(late_max_z > 1.45, "{name}: the sphere bounced back up only to {late_max_z}");
        // Second-order energy error ~ (h ω)² with ω ≈ sqrt(1.5 K δ^{1/2} / r_sum²) ≈ 200 at the
        // peak: (2e-2)² ≈ 4e-4 at worst during the impact.
        assert!(max_dev < 1e-3, "{name}: energy deviation {max_dev:e}");
    }
}

#[test]
fn gravity_keeps_momentum_orthogonal_to_g_and_angular_momentum_along_g() {
    // Two colliding rings (objective shear, contacts through the search) falling under g = −2 ẑ.
    let mut s = common::scenario("two_rings.json");
    s.gravity = glam::DVec3::new(0.0, 0.0, -2.0);
    let model = s.build_model().unwrap();
    let conserved = rrpdem::diagnostics::Conserved::for_model(&model);
    assert_eq!(conserved.p.len(), 2, "P exact in the plane orthogonal to g");
    assert_eq!(conserved.l, vec![glam::DVec3::NEG_Z], "L exact along g");
    for (name, mut e) in engines(&model, Integrator::RrpNewmark, 1e-3) {
        let d0 = e.diagnostics().unwrap();
        for _ in 0..20 {
            e.advance(100).unwrap();
            let d = e.diagnostics().unwrap();
            // 2000 steps of sums of 80 O(1) terms: round-off ≤ 2000 · 80 · ε ≈ 4e-11 (linear bound).
            assert!((d.p.x - d0.p.x).abs() < 4e-11 && (d.p.y - d0.p.y).abs() < 4e-11, "{name}: P = {}", d.p);
            assert!((d.l.z - d0.l.z).abs() < 4e-11, "{name}: L_z {} → {}", d0.l.z, d.l.z);
            assert!(d.p.z < d0.p.z - 1.0 || d.step < 1000, "{name}: gravity acts");
        }
    }
}
