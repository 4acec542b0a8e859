//! Side-by-side comparison of two engines on the same model (`rrpdem compare`): the largest
//! differences of positions, velocities, attitudes, angular velocities and energy components.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::rrp;
use serde::Serialize;

/// One compared quantity: the largest absolute difference and the same relative to `scale`.
#[derive(Clone, Debug, Serialize)]
pub struct Difference {
    pub quantity: String,
    pub max_abs: f64,
    pub scale: f64,
    pub max_rel: f64,
    /// Where the largest difference is (particle index, or the energy component's name).
    pub at: String,
}

fn difference(quantity: &str, scale: f64, diffs: impl Iterator<Item = (f64, String)>) -> Difference {
    let (max_abs, at) = diffs.fold((0.0, String::from("-")), |best, (d, at)| if d > best.0 { (d, at) } else { best });
    let scale = if scale > 0.0 { scale } else { 1.0 };
    Difference { quantity: quantity.into(), max_abs, scale, max_rel: max_abs / scale, at }
}

/// The default relative tolerance of `rrpdem compare` for a GPU precision: VALIDATION V7's
/// bounds for the paper torus (f64 against f64: 1e-10 after 1000 steps on a device that rounds
/// as IEEE 754; f32 against f64: 1e-4 after 200 steps, here 1e-3 for the default 1000 steps).
/// Chaotic scenarios part faster (the torus after impact grows differences as e^{5t}).
pub fn default_tolerance(precision: crate::engine::Precision) -> f64 {
    match precision {
        crate::engine::Precision::F64 => 1e-10,
        crate::engine::Precision::F32 => 1e-3,
    }
}

/// The differences above `tolerance` (relative), in the order given.
pub fn exceeding(diffs: &[Difference], tolerance: f64) -> Vec<&Difference> {
    // A NaN difference exceeds any tolerance.
    diffs.iter().filter(|d| d.max_rel.is_nan() || d.max_rel > tolerance).collect()
}

/// Steps both engines `steps` steps (in one batch each) and reports their differences.
/// Scales: positions by the size of the initial configuration, velocities and angular
/// velocities by their largest initial magnitude (or 1), attitudes in radians, energies by the
/// energy guard's scale (`crate::guard`: the larger kinetic + elastic energy of the two states,
/// which does not depend on the origin as |E0| does).
pub fn compare(a: &mut dyn Engine, b: &mut dyn Engine, steps: u64) -> Result<Vec<Difference>, EngineError> {
    let s0 = a.snapshot()?;
    let mech0 = crate::guard::mechanical_energy(&a.diagnostics()?);
    let (lo, hi) =
        s0.iter().fold((glam::DVec3::INFINITY, glam::DVec3::NEG_INFINITY), |(l, h), k| (l.min(k.x), h.max(k.x)));
    let size = (hi - lo).length();
    let vmax = s0.iter().map(|k| k.v.length()).fold(0.0, f64::max);
    let wmax = s0.iter().map(|k| k.w.length()).fold(0.0, f64::max);
    a.advance(steps)?;
    b.advance(steps)?;
    let (sa, sb) = (a.snapshot()?, b.snapshot()?);
    let (da, db) = (a.diagnostics()?, b.diagnostics()?);
    let e0 = mech0.max(crate::guard::mechanical_energy(&da));
    let pairs = || sa.iter().zip(&sb).enumerate();
    let at = |i: usize| format!("particle {i}");
    let mut out = vec![
        difference("position", size, pairs().map(|(i, (p, q))| ((p.x - q.x).length(), at(i)))),
        difference(
            "velocity",
            if vmax > 0.0 { vmax } else { 1.0 },
            pairs().map(|(i, (p, q))| ((p.v - q.v).length(), at(i))),
        ),
        difference("attitude [rad]", 1.0, pairs().map(|(i, (p, q))| (rrp::distance(p.q, q.q), at(i)))),
        difference(
            "angular velocity",
            if wmax > 0.0 { wmax } else { 1.0 },
            pairs().map(|(i, (p, q))| ((p.w - q.w).length(), at(i))),
        ),
    ];
    let names = ["E_trans", "E_rot", "U_bend", "U_axial", "U_shear", "U_contact", "U_wall", "U_gravity"];
    for (name, (x, y)) in names.iter().zip(da.components().iter().zip(db.components())) {
        out.push(difference(name, e0, std::iter::once(((x - y).abs(), name.to_string()))));
    }
    out.push(difference("E", e0, std::iter::once(((da.total() - db.total()).abs(), "E".to_string()))));
    Ok(out)
}
