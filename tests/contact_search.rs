//! The contact search finds exactly the overlapping pairs a brute-force search finds (hash
//! collisions, negative and far-away cells, polydisperse radii), and the CPU engine's results
//! do not depend on the number of threads.

mod common;
use common::{Rng, scenario_from};
use glam::DVec3;
use rrpdem::engine::{CpuEngine, Engine};
use rrpdem::grid::NeighbourList;
use rrpdem::integrator::Integrator;
use std::collections::BTreeSet;

fn overlapping_pairs_brute(x: &[DVec3], r: &[f64]) -> BTreeSet<(usize, usize)> {
    let mut s = BTreeSet::new();
    for i in 0..x.len() {
        for j in i + 1..x.len() {
            if (x[i] - x[j]).length() < r[i] + r[j] {
                s.insert((i, j));
            }
        }
    }
    s
}

#[test]
fn neighbour_list_finds_every_overlap_and_only_once() {
    let mut rng = Rng(7);
    for (n, spread, offset) in [(3000usize, 12.0, DVec3::ZERO), (2500, 10.0, DVec3::new(-3.0e5, 2.0e5, -7.5e5))] {
        let r: Vec<f64> = (0..n).map(|_| rng.range(0.1, 0.5)).collect();
        let mut x: Vec<DVec3> = (0..n)
            .map(|_| {
                offset + DVec3::new(rng.range(-spread, spread), rng.range(-spread, spread), rng.range(-spread, spread))
            })
            .collect();
        let mut list = NeighbourList::new(n, 0.5, 0.15);
        for round in 0..4 {
            list.update(|i| x[i], &r).unwrap();
            let mut found = BTreeSet::new();
            for i in 0..n {
                let p = list.partners(i);
                assert!(p.windows(2).all(|w| w[0] < w[1]), "partners sorted, no duplicates");
                for &j in p {
                    let j = j as usize;
                    assert_ne!(i, j);
                    if (x[i] - x[j]).length() < r[i] + r[j] {
                        found.insert((i.min(j), i.max(j)));
                    }
                }
            }
            let brute = overlapping_pairs_brute(&x, &r);
            assert!(brute.len() > 100, "the test needs overlaps ({})", brute.len());
            assert_eq!(found, brute, "round {round}");
            // Move every particle by less than skin/2 (no rebuild) or more (rebuild): the list
            // must stay complete either way.
            let step = if round % 2 == 0 { 0.07 } else { 0.4 };
            for xi in x.iter_mut() {
                *xi += rng.unit() * rng.range(0.0, step);
            }
        }
        assert!(list.rebuilds() >= 2, "rebuilt after large moves ({})", list.rebuilds());
    }
}

#[test]
fn cpu_results_do_not_depend_on_thread_count() {
    // 6000 particles, above the size where loops go parallel; contacts and bonds both active.
    // Both rings start in front of the wall (a body behind a wall is refused since issue 22).
    let json = r#"{"name": "det", "dt": 1e-3, "t_end": 1, "shear": "objective",
        "particle": {"mass": 1, "inertia": 0.4},
        "stiffness": {"bending": 10, "axial": 200, "shear": 200, "contact": 2100},
        "walls": [{"point": [0, 0, 0], "normal": [1, 0, 0]}],
        "bodies": [{"type": "torus_ring", "n": 6000, "particle_diameter": 1, "velocity": [-1, 0.2, 0]},
                   {"type": "torus_ring", "n": 3000, "particle_diameter": 1, "center": [480, 960, 0], "axis": [0, 1, 0], "velocity": [0, -2, 0.1]}]}"#;
    let model = scenario_from(json).build_model().unwrap();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let mut e = CpuEngine::new(&model, Integrator::RrpNewmark, 2e-3).unwrap();
            e.advance(40).unwrap();
            (e.snapshot().unwrap(), e.diagnostics().unwrap())
        })
    };
    let (s1, d1) = run(1);
    let (s2, d2) = run(2);
    let (s3, d3) = run(3);
    assert!(d1.u_wall > 0.0 && d1.u_contact > 0.0, "wall and contacts active");
    assert_eq!(s1, s2);
    assert_eq!(s1, s3);
    assert_eq!(d1, d2);
    assert_eq!(d1, d3);
    // One engine, first on one thread (no bond ranges cut), then on two (cut at the first
    // parallel evaluation, mid-run), then on three (cut anew): the same bits.
    let part = |e: &CpuEngine, name: &str| e.memory().iter().find(|p| p.0 == name).map(|p| p.1).unwrap();
    let pool = |n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
    let mut e = pool(1).install(|| {
        let mut e = CpuEngine::new(&model, Integrator::RrpNewmark, 2e-3).unwrap();
        e.advance(10).unwrap();
        e
    });
    assert_eq!(part(&e, "bond ranges"), 0);
    pool(2).install(|| e.advance(20).unwrap());
    // Two rings of 6000 and 3000 bonds in 5 ranges of 2048 (3 per thread, in whole blocks of
    // 1024): the ranges part a particle's two bonds only at their boundaries and at a ring's
    // closing bond (0, n − 1), so the plan is its per-particle arrays (owner, stored-end
    // offsets: 8 B per particle, + 4), 4 B per range (+ 4), 32 B per energy block (9: bending,
    // axial, shear and the bonded pairs' contacts) and a few stored ends of 52 B.
    let (n, ranges) = (model.particles.len(), part(&e, "bond ranges"));
    let fixed = 8 * n + 4 + 4 * 6 + 32 * 9;
    assert!(ranges >= fixed && (ranges - fixed) % 52 == 0 && ranges - fixed <= 52 * 8, "{ranges} B against {fixed}");
    pool(3).install(|| e.advance(10).unwrap());
    assert_eq!((e.snapshot().unwrap(), e.diagnostics().unwrap()), (s1, d1));
}

#[test]
fn cpu_results_of_a_rupturing_solid_do_not_depend_on_thread_count() {
    // An FCC block of 3500 spheres (12 bonds each inside, 18 468 bonds: 5 or 7 ranges of the
    // parallel bond pass, whose boundaries part the bonds of hundreds of spheres) spinning into
    // a wall with thresholds low enough to break 130 bonds. Each particle sums up to 12 bond
    // results, so adding them in any other than bond order changes bits (a ring's two per
    // particle commute and could not show it); broken bonds add +0 through stored ends in the
    // parallel pass and nothing in the serial one.
    let json = r#"{"name": "det-fcc", "dt": 1e-3, "t_end": 1, "shear": "objective",
        "particle": {"mass": 1, "inertia": 0.4},
        "stiffness": {"bending": 10, "axial": 200, "shear": 200, "contact": 2100},
        "rupture": {"tension": 0.01, "shear": 0.1},
        "walls": [{"point": [0, 0, 0], "normal": [1, 0, 0]}],
        "bodies": [{"type": "block_solid", "size": [14, 14, 14], "particle_diameter": 1, "lattice": "fcc",
                    "center": [7.7, 0, 0], "velocity": [-3, 0.5, 0], "angular_velocity": [0, 0, 0.5]}]}"#;
    let model = scenario_from(json).build_model().unwrap();
    assert_eq!(model.bonds.len(), 18468);
    let pool = |threads: usize| rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    // Bits of the states (`==` on f64 would take −0 for +0) and of the forces.
    let state_bits = |k: &[rrpdem::integrator::Kinematics]| {
        k.iter()
            .flat_map(|k| [k.x.to_array(), k.v.to_array(), k.w.to_array()])
            .flatten()
            .map(f64::to_bits)
            .collect::<Vec<_>>()
    };
    let force_bits = |f: &[(DVec3, DVec3)]| {
        f.iter().flat_map(|(a, b)| [a.to_array(), b.to_array()]).flatten().map(f64::to_bits).collect::<Vec<_>>()
    };
    // 200 steps, the diagnostics (energies included) after each: every step's sums are checked.
    let run = |threads: usize| {
        pool(threads).install(|| {
            let mut e = CpuEngine::new(&model, Integrator::RrpNewmark, 1e-3).unwrap();
            let mut diags = Vec::new();
            for _ in 0..200 {
                e.advance(1).unwrap();
                diags.push(e.diagnostics().unwrap());
            }
            let breaks: Vec<(u64, u32, u8)> = e.take_breaks().iter().map(|b| (b.step, b.bond, b.mode)).collect();
            let q: Vec<[u64; 4]> = e.snapshot().unwrap().iter().map(|k| k.q.to_array().map(f64::to_bits)).collect();
            (state_bits(&e.snapshot().unwrap()), q, diags, breaks, force_bits(&e.forces()))
        })
    };
    let one = run(1);
    assert!(one.3.len() > 10 && one.3.len() < model.bonds.len() / 2, "{} breaks", one.3.len());
    assert!(one.2.last().unwrap().u_wall > 0.0, "the block reaches the wall");
    for threads in [2, 3] {
        let other = run(threads);
        assert!(one.0 == other.0 && one.1 == other.1, "{threads} threads: states differ");
        for (step, (a, b)) in one.2.iter().zip(&other.2).enumerate() {
            assert!(a == b, "{threads} threads: diagnostics differ after step {}", step + 1);
        }
        assert!(one.3 == other.3, "{threads} threads: breaks differ");
        assert!(one.4 == other.4, "{threads} threads: forces differ");
    }
    // Saved, run on, reloaded, rolled back: the state continues as the straight run's, on any
    // number of threads (the parallel pass adds into force sums that a reload must clear).
    for threads in [1, 2, 3] {
        let (state, forces) = pool(threads).install(|| {
            let mut e = CpuEngine::new(&model, Integrator::RrpNewmark, 1e-3).unwrap();
            e.advance(120).unwrap();
            let saved = e.save_state().unwrap();
            e.advance(30).unwrap();
            e.load_state(&saved).unwrap();
            e.advance(40).unwrap();
            e.rollback().unwrap();
            e.advance(80).unwrap();
            (state_bits(&e.snapshot().unwrap()), force_bits(&e.forces()))
        });
        assert!(state == one.0 && forces == one.4, "{threads} threads: a reloaded run differs from the straight one");
    }
}

#[test]
fn a_nan_coordinate_is_refused_with_the_particle_named() {
    // Scenario files cannot carry NaN, but a model built in code can: the engine must refuse it
    // (a NaN in one lane used to slip through the grid's range check).
    let json = r#"{"name": "nan", "dt": 1e-3, "t_end": 1, "particle": {"mass": 1, "inertia": 1, "diameter": 1},
        "stiffness": {"contact": 100},
        "bodies": [{"type": "particles", "particles": [{"x": [0, 0, 0]}, {"x": [3, 0, 0]}, {"x": [6, 0, 0]}]}]}"#;
    let mut model = scenario_from(json).build_model().unwrap();
    model.particles.x[2].y = f64::NAN;
    match CpuEngine::new(&model, Integrator::RrpNewmark, 1e-3) {
        Err(rrpdem::error::EngineError::NonFinite { particle, .. }) => assert_eq!(particle, 2),
        Err(other) => panic!("expected the non-finite error for particle 2, got {other}"),
        Ok(_) => panic!("a NaN position was accepted"),
    }
}
