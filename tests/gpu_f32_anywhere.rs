//! f32 that holds anywhere (issue 10): GPU f32 positions are a block of the grid plus an offset
//! inside it (src/gpu/frame.rs), so a model behaves the same at any distance from the origin.
//! Checked against the f64 CPU reference of the model at the origin: the paper's torus
//! translated by 10⁰ … 10⁶ particle diameters (with the frame's origin pinned at 0, so that the
//! translation is not absorbed by the box centre), and two pairs of colliding rings 2·10⁵ apart
//! in one model (half of it necessarily 10⁵ from any origin).

mod common;

use common::gpu::*;
use glam::DVec3;
use rrpdem::engine::{Engine, Precision};
use rrpdem::gpu::{AdapterChoice, GpuEngine, GpuOptions};
use rrpdem::integrator::Integrator;
use rrpdem::model::Model;

/// The model moved by `t` (particles and walls).
fn translated(m: &Model, t: DVec3) -> Model {
    let mut m = m.clone();
    for x in m.particles.x.iter_mut() {
        *x += t;
    }
    for w in m.params.walls.iter_mut() {
        w.point += t;
    }
    m
}

fn gpu_f32_at_zero(m: &Model, dt: f64) -> GpuEngine {
    let options = GpuOptions { origin_at_zero: true, ..Default::default() };
    GpuEngine::with_options(m, Integrator::RrpNewmark, dt, Precision::F32, AdapterChoice::Any, options)
        .unwrap_or_else(|e| panic!("GPU engine unavailable: {e} (apt-get install mesa-vulkan-drivers libvulkan1)"))
}

/// Largest difference of the energy components and of P and S (L is not translation-invariant).
fn energy_diff(a: &rrpdem::diagnostics::Diagnostics, b: &rrpdem::diagnostics::Diagnostics) -> f64 {
    let e = a.components().iter().zip(b.components()).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    e.max((a.p - b.p).abs().max_element()).max((a.s - b.s).abs().max_element())
}

#[test]
fn the_torus_runs_the_same_translated_by_up_to_a_million_diameters_f32() {
    let (s, m) = scenario_model("torus_impact.json");
    let d = 2.0 * m.max_radius();
    let e0 = 40.0;
    // The ring is in contact with the wall from the start (gap 0, v0 = 1): the steps of the
    // 200-step f32 test of gpu_torus.rs, walls and bonds both loaded.
    let steps = 200;
    let mut c = cpu(&m, Integrator::RrpNewmark, s.dt);
    c.advance(steps).unwrap();
    let (xc, dc) = (c.snapshot().unwrap(), c.diagnostics().unwrap());
    // A direction with no zero component, so that every axis's blocks move.
    let u = DVec3::new(0.6, -0.48, 0.64);
    let mut worst = Vec::new();
    for k in [0.0, 1.0, 1e2, 1e4, 1e6] {
        let t = u * (k * d);
        let mut g = gpu_f32_at_zero(&translated(&m, t), s.dt);
        g.advance(steps).unwrap();
        let xg = g.snapshot().unwrap();
        let dx = xg.iter().zip(&xc).map(|(a, b)| (a.x - t - b.x).abs().max_element()).fold(0.0, f64::max);
        let dm = max_motion_diff(&xg, &xc);
        let de = energy_diff(&g.diagnostics().unwrap(), &dc);
        eprintln!("torus f32 at {k:e} D: max |Δx| = {dx:.2e}, max |Δv,Ω,q| = {dm:.2e}, max |ΔE,P,S| = {de:.2e}");
        worst.push((k, dx, de));
        // Offsets are below one cell edge (2.3 r = 1.15 D) wherever the model is, so f32 drift
        // round-off is ≤ ½ ulp(edge) = 2^-27 ≈ 7.5e-9 per step and per rounding (the drift
        // add, and a block change at most once a step): a systematic worst case over 200 steps
        // is 2 · 200 · 7.5e-9 = 3e-6 = 2.5e-5 D, within 1e-4 D (the bound of the 200-step torus
        // f32 test, which the origin-centred storage met at |x| ≤ 1.5, measured 3e-6). Without blocks,
        // at 10⁶ D (|x| ≈ 1.2e5) f32 values are 7.8e-3 = 0.07 D apart: far outside. Energies:
        // each of ~80 terms ~10 carries ~1e-6 relative f32 error: ~1e-3 ≤ 1e-4 E0 = 4e-3.
        assert!(dx <= 1e-4 * d, "translated by {k:e} D: positions differ by {dx:e} (D = {d})");
        assert!(de <= 1e-4 * e0, "translated by {k:e} D: energies differ by {de:e}");
    }
    // The error does not grow with the distance: the farthest is within a small factor of the
    // error at the origin (both are f32 round-off of offsets of the same size).
    let (dx0, dx_far) = (worst[0].1, worst.last().map_or(0.0, |w| w.1));
    assert!(dx_far <= 10.0 * dx0.max(1e-7 * d), "error at 1e6 D {dx_far:e} vs at the origin {dx0:e}");
}

/// Two pairs of rings colliding head-on (as scenarios/two_rings.json), the second pair `far`
/// away along x.
fn two_pairs(far: f64) -> (rrpdem::scenario::Scenario, Model) {
    let ring = |cx: f64, cy: f64, v: f64| {
        format!(
            r#"{{ "type": "torus_ring", "n": 40, "torus_diameter": 1.5, "center": [{cx}, {cy}, 0], "velocity": [{v}, 0, 0] }}"#
        )
    };
    let bodies = [ring(-0.9, 0.0, 0.5), ring(0.9, 0.3, -0.5), ring(far - 0.9, 0.0, 0.5), ring(far + 0.9, 0.3, -0.5)];
    model_from_json(&format!(
        r#"{{ "name": "two_pairs", "integrator": "rrp-newmark", "dt": 1e-3, "t_end": 1,
             "particle": {{ "mass": 1, "inertia": 1 }},
             "stiffness": {{ "bending": 10, "axial": 200, "shear": 200, "contact": 2100 }},
             "shear": "objective", "bodies": [{}] }}"#,
        bodies.join(", ")
    ))
}

#[test]
fn two_ring_pairs_far_apart_conserve_energy_as_at_the_origin_f32() {
    // E0 = 2 · ½ · 80 · 0.5² = 20 for both layouts (with positions rounded at 7.8e-3, as the
    // single-origin f32 storage did 10⁵ from the centre, the bonds start strained and E0 is off).
    let e0 = 20.0;
    let steps = 400; // the rings of each pair meet at t ≈ 0.2
    let mut drift = Vec::new();
    for far in [4.0, 2e5] {
        let (s, m) = two_pairs(far);
        let d = 2.0 * m.max_radius();
        // The default frame: the origin at the centre of the bounding box, 10⁵ from each pair
        // for the far layout.
        let mut g = gpu(&m, Integrator::RrpNewmark, s.dt, Precision::F32);
        let mut c = cpu(&m, Integrator::RrpNewmark, s.dt);
        let start = g.diagnostics().unwrap().total();
        assert!((start - e0).abs() <= 1e-5 * e0, "far = {far}: E0 = {start}, expected {e0}");
        let (mut worst, mut dx, mut de) = (0.0f64, 0.0f64, 0.0f64);
        for _ in 0..8 {
            let (x, _, _) = compare(&mut g, &mut c, steps / 8);
            dx = dx.max(x);
            let (eg, ec) = (g.diagnostics().unwrap().total(), c.diagnostics().unwrap().total());
            de = de.max((eg - ec).abs());
            worst = worst.max((eg - start).abs());
        }
        let u = c.diagnostics().unwrap().u_contact;
        eprintln!(
            "two pairs {far:e} apart, f32: max |Δx| = {dx:.2e}, max |ΔE| = {de:.2e} vs CPU f64; max |E − E0| = {worst:.2e}, U_contact = {u:.2e}"
        );
        assert!(u > 0.0, "the rings must be in contact for this test to mean anything");
        // As in gpu_contacts' two-rings f32 test: drift round-off ≤ ½ ulp of an offset (below a
        // cell edge, 1.15 D = 0.07) per step and rounding, 400 steps: 2 · 400 · 2.2e-9 ≈ 2e-6
        // ≪ 1e-4 D. Energies: each of 160 terms ≤ ~1 carries ~1e-6 relative error: ≪ 1e-4 E0.
        assert!(dx <= 1e-4 * d, "far = {far}: positions differ from the f64 CPU by {dx:e}");
        assert!(de <= 1e-4 * e0, "far = {far}: energy differs from the f64 CPU by {de:e}");
        drift.push(worst);
    }
    // Energy is conserved far from the origin as near it: the integrator's own fluctuation
    // through the collision (~3e-3, the same on the CPU) plus f32 round-off (bounded above).
    eprintln!("max |E − E0|: near {:.2e}, far {:.2e}", drift[0], drift[1]);
    assert!((drift[1] - drift[0]).abs() <= 1e-4 * e0, "far {:e} vs near {:e}", drift[1], drift[0]);
}
