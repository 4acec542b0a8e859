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
