//! Shared helpers of the GPU tests: engines for a scenario, and max differences between runs.

use rrpdem::diagnostics::Diagnostics;
use rrpdem::engine::{CpuEngine, Engine, Precision};
use rrpdem::gpu::{AdapterChoice, GpuEngine};
use rrpdem::integrator::{Integrator, Kinematics};
use rrpdem::model::Model;
use rrpdem::scenario::Scenario;

/// Loads a scenario of `scenarios/` and builds its model.
pub fn scenario_model(name: &str) -> (Scenario, Model) {
    let s = super::scenario(name);
    let m = s.build_model().unwrap_or_else(|e| panic!("{e}"));
    (s, m)
}

/// `scenarios/solid_torus_impact.json` with a torus of about 150 spheres at the wall and a
/// binder that breaks during its impact (tension 0.004, shear 0.04): a small solid with rupture
/// whose size differs from the paper torus's 80.
pub fn small_solid_torus() -> Scenario {
    let (mut s, _) = scenario_model("solid_torus_impact.json");
    s.bodies[0] = serde_json::from_str(
        r#"{"type": "torus_solid", "torus_diameter": 3, "tube_diameter": 1, "particles": 150, "lattice": "fcc",
            "gap": 0, "velocity": [-1, 0, 0]}"#,
    )
    .unwrap();
    s.rupture = Some(serde_json::from_str(r#"{"tension": 0.004, "shear": 0.04}"#).unwrap());
    s
}

/// Builds a scenario from JSON text.
pub fn model_from_json(text: &str) -> (Scenario, Model) {
    let s = super::scenario_from(text);
    let m = s.build_model().unwrap_or_else(|e| panic!("{e}"));
    (s, m)
}

/// A GPU engine on any adapter. Fails (never skips) without one: these tests must run in CI.
pub fn gpu(model: &Model, integrator: Integrator, dt: f64, precision: Precision) -> GpuEngine {
    GpuEngine::new(model, integrator, dt, precision, AdapterChoice::Any).unwrap_or_else(|e| {
        panic!("GPU engine unavailable: {e}\n(the GPU tests need an adapter: apt-get install mesa-vulkan-drivers libvulkan1)")
    })
}

pub fn cpu(model: &Model, integrator: Integrator, dt: f64) -> CpuEngine {
    CpuEngine::new(model, integrator, dt).unwrap_or_else(|e| panic!("{e}"))
}

/// Largest |x_gpu − x_cpu| over all particles.
pub fn max_position_diff(a: &[Kinematics], b: &[Kinematics]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(p, q)| (p.x - q.x).abs().max_element()).fold(0.0, f64::max)
}

/// Largest difference of any velocity, angular velocity or attitude component.
pub fn max_motion_diff(a: &[Kinematics], b: &[Kinematics]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(p, q)| {
            let dq = (p.q - q.q).length().min((p.q + q.q).length());
            (p.v - q.v).abs().max_element().max((p.w - q.w).abs().max_element()).max(dq)
        })
        .fold(0.0, f64::max)
}

/// Largest difference of the energy components and momenta.
pub fn max_energy_diff(a: &Diagnostics, b: &Diagnostics) -> f64 {
    let e = a.components().iter().zip(b.components()).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    let m = [(a.p, b.p), (a.s, b.s), (a.l, b.l)].iter().map(|(x, y)| (*x - *y).abs().max_element()).fold(0.0, f64::max);
    e.max(m)
}

/// Runs both engines `steps` steps and returns (max position diff, max motion diff, max energy diff).
pub fn compare(gpu: &mut dyn Engine, cpu: &mut dyn Engine, steps: u64) -> (f64, f64, f64) {
    gpu.advance(steps).unwrap_or_else(|e| panic!("gpu: {e}"));
    cpu.advance(steps).unwrap_or_else(|e| panic!("cpu: {e}"));
    let (sg, sc) = (gpu.snapshot().unwrap(), cpu.snapshot().unwrap());
    let (dg, dc) = (gpu.diagnostics().unwrap(), cpu.diagnostics().unwrap());
    assert_eq!(dg.step, dc.step);
    (max_position_diff(&sg, &sc), max_motion_diff(&sg, &sc), max_energy_diff(&dg, &dc))
}

/// A block of `nx·ny·nz` unit-diameter spheres on a jittered lattice of spacing `spacing`
/// (< 1 gives overlaps everywhere), random velocities, spins and attitudes; every 97th particle
/// is fixed; with `bonds`, each particle is bonded to its +x neighbour. Objective shear, a floor
/// wall and gravity.
pub fn lattice_model(nx: usize, ny: usize, nz: usize, spacing: f64, bonds: bool, seed: u64) -> Model {
    lattice_model_with(nx, ny, nz, spacing, bonds, seed, lattice_params())
}

/// The parameters of `lattice_model`: the paper's stiffnesses, objective shear, a floor wall
/// at z = 0 and gravity −z, no rupture.
pub fn lattice_params() -> rrpdem::model::Params {
    use glam::DVec3;
    use rrpdem::interactions::{ShearVariant, Wall};
    rrpdem::model::Params {
        k_bend: 10.0,
        k_axial: 200.0,
        k_shear: 200.0,
        k_contact: 2100.0,
        k_wall: 2100.0,
        shear: ShearVariant::Objective,
        walls: vec![Wall { point: DVec3::ZERO, normal: DVec3::Z }],
        gravity: DVec3::new(0.0, 0.0, -1.0),
        pendulum: None,
        rupture: None,
        dissipation: None,
        gravitation: None,
        skin: rrpdem::grid::SKIN_FACTOR,
    }
}

/// `lattice_model` with the given parameters (stiffnesses, shear law, walls, fields).
pub fn lattice_model_with(
    nx: usize,
    ny: usize,
    nz: usize,
    spacing: f64,
    bonds: bool,
    seed: u64,
    params: rrpdem::model::Params,
) -> Model {
    // Bonds along x between neighbours only.
    lattice_model_bonded(nx, ny, nz, spacing, seed, params, |o| bonds && o == [1, 0, 0])
}

/// `lattice_model_with`'s spheres bonded where `bonded([dx, dy, dz])` holds for the lattice
/// offset of a pair from its lower-index sphere to the other ((dz, dy, dx) lexicographically
/// positive: each pair asked once; at most 3 sites apart along each axis), bonds in site order.
pub fn lattice_model_bonded(
    nx: usize,
    ny: usize,
    nz: usize,
    spacing: f64,
    seed: u64,
    params: rrpdem::model::Params,
    bonded: impl Fn([i64; 3]) -> bool,
) -> Model {
    use glam::DVec3;
    use rrpdem::model::Particles;
    let mut rng = super::Rng(seed);
    let mut p = Particles::default();
    let idx = |x: usize, y: usize, z: usize| (z * ny + y) * nx + x;
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                let pos = DVec3::new(x as f64, y as f64, z as f64 + 0.5) * spacing + rng.cube(0.02);
                let q = rrpdem::rrp::quat_from_rotation_vector(rng.cube(0.5));
                let fixed = idx(x, y, z) % 97 == 0;
                p.push(pos, rng.cube(0.5), q, rng.cube(1.0), 1.0 + 0.2 * rng.uniform(), 0.1, 0.5, fixed);
            }
        }
    }
    let mut pairs = Vec::new();
    let (sx, sy, sz) = (nx as i64, ny as i64, nz as i64);
    for z in 0..sz {
        for y in 0..sy {
            for x in 0..sx {
                for dz in 0..=3i64 {
                    for dy in -3..=3i64 {
                        for dx in -3..=3i64 {
                            // Each pair once: offsets after (0, 0, 0) in (dz, dy, dx) order.
                            if (dz, dy, dx) <= (0, 0, 0) {
                                continue;
                            }
                            let (u, v, w) = (x + dx, y + dy, z + dz);
                            if u < 0 || v < 0 || w < 0 || u >= sx || v >= sy || w >= sz || !bonded([dx, dy, dz]) {
                                continue;
                            }
                            let a = idx(x as usize, y as usize, z as usize) as u32;
                            pairs.push((a, idx(u as usize, v as usize, w as usize) as u32));
                        }
                    }
                }
            }
        }
    }
    Model::new(p, &pairs, params)
}

/// Every bit of the snapshot and the diagnostics (NaN-safe, ±0-sensitive): what "bit-identical"
/// compares in the GPU tests.
pub fn bits(e: &mut dyn Engine) -> Vec<u64> {
    let snap = e.snapshot().unwrap();
    let d = e.diagnostics().unwrap();
    state_bits(&snap, &d)
}

/// `bits` of a snapshot and its diagnostics (for engines that are not `Engine`s, e.g. one
/// replica of a batch).
pub fn state_bits(snap: &[Kinematics], d: &Diagnostics) -> Vec<u64> {
    let mut v: Vec<u64> = snap
        .iter()
        .flat_map(|k| k.x.to_array().into_iter().chain(k.v.to_array()).chain(k.q.to_array()).chain(k.w.to_array()))
        .map(f64::to_bits)
        .collect();
    let vectors = [d.p, d.s, d.l, d.f_wall, d.x_cm, d.v_cm].into_iter().flat_map(|m| m.to_array());
    v.extend(d.components().into_iter().chain(vectors).chain([d.e_released, d.e_dissipated]).map(f64::to_bits));
    v.extend([d.step, d.t.to_bits(), d.n_broken]);
    v
}
