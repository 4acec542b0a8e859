//! The scale work on the CPU side: the bench's FCC builder (linear, parallel) gives the same
//! model as a direct hash-map construction, and the engine's memory accounting is per part.

use glam::{DQuat, DVec3};
use rrpdem::engine::{CpuEngine, Engine};
use rrpdem::integrator::Integrator;
use rrpdem::model::{Model, Particles};
use std::collections::HashMap;

/// The FCC block as the bench built it before (a hash map of half-lattice coordinates).
fn fcc_reference(n: usize) -> (Vec<DVec3>, Vec<(u32, u32)>) {
    let cells = ((n as f64 / 4.0).cbrt().round() as usize).max(1);
    let a = std::f64::consts::SQRT_2;
    let basis = [[0.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [0.0, 0.5, 0.5]];
    let mut x = Vec::new();
    for i in 0..cells {
        for j in 0..cells {
            for k in 0..cells {
                for b in basis {
                    x.push([(i as f64 + b[0]) * a + 0.5, (j as f64 + b[1]) * a, (k as f64 + b[2]) * a]);
                }
            }
        }
    }
    let index = |p: [f64; 3]| -> [i64; 3] {
        [(p[0] * 2.0 / a).round() as i64, (p[1] * 2.0 / a).round() as i64, (p[2] * 2.0 / a).round() as i64]
    };
    let at: HashMap<[i64; 3], u32> = x.iter().enumerate().map(|(k, p)| (index(*p), k as u32)).collect();
    let mut pairs = Vec::new();
    for (k, p) in x.iter().enumerate() {
        let c = index(*p);
        for d in [[1, 1, 0], [1, -1, 0], [1, 0, 1], [1, 0, -1], [0, 1, 1], [0, 1, -1]] {
            if let Some(&j) = at.get(&[c[0] + d[0], c[1] + d[1], c[2] + d[2]]) {
                pairs.push((k as u32, j));
            }
        }
    }
    (x.into_iter().map(DVec3::from).collect(), pairs)
}

#[test]
fn fcc_builder_matches_the_hash_map_construction() {
    for n in [1, 4, 500, 4000] {
        let m = rrpdem::bench::fcc_block(n).unwrap();
        let (x, pairs) = fcc_reference(n);
        assert_eq!(m.particles.x, x, "n = {n}");
        let got: Vec<(u32, u32)> = m.bonds.iter().map(|b| (b.i, b.j)).collect();
        assert_eq!(got, pairs, "n = {n}");
    }
}

#[test]
fn a_bond_with_its_own_reference_attitude_is_honoured() {
    // Bonds made from the initial state keep their reference attitudes per particle; a bond
    // whose reference differs from its ends' initial attitudes is stored per bond.
    let mut p = Particles::default();
    for k in 0..6 {
        let q = DQuat::from_rotation_z(0.1 * k as f64);
        p.push(DVec3::new(k as f64, 0.0, 0.0), DVec3::ZERO, q, DVec3::ZERO, 1.0, 1.0, 0.5, false);
    }
    let pairs: Vec<(u32, u32)> = (0..5).map(|k| (k, k + 1)).collect();
    let params = rrpdem::model::Params { k_bend: 10.0, k_axial: 200.0, k_shear: 200.0, ..Default::default() };
    let mut m = Model::new(p, &pairs, params);
    m.bonds[2].q_j0 = DQuat::from_rotation_x(0.05);
    let e = CpuEngine::new(&m, Integrator::RrpNewmark, 1e-3).unwrap();
    let x = &m.particles.x;
    let q = &m.particles.q;
    let term = |k: usize| {
        let b = &m.bonds[k];
        rrpdem::model::bond_terms(b, x[b.i as usize], x[b.j as usize], q[b.i as usize], q[b.j as usize], &m.params)
    };
    let (o2, o3) = (term(2), term(3));
    let (f, mo) = e.forces()[3];
    assert!((f - (o3.f_i - o2.f_i)).length() < 1e-12, "{f} vs {}", o3.f_i - o2.f_i);
    assert!((mo - (o2.m_j + o3.m_i)).length() < 1e-12, "{mo} vs {}", o2.m_j + o3.m_i);
    assert!(o2.m_j.length() > 1e-3, "the per-bond reference must matter here");
    let mut e = e;
    e.advance(10).unwrap();
    assert!(e.memory().iter().any(|(k, v)| *k == "bond reference data" && *v >= 5 * (40 + 64)));
}
