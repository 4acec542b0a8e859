//! V14 (MODEL §11): fragment labels and sizes against an independent connected-components
//! computation: `scipy.sparse.csgraph.connected_components` in Python (not the project's code;
//! `.ci/run` installs scipy), which reads only the bond list, the broken bonds (a flag column or
//! the run's `breaks.csv`) and the final state's masses, diameters, positions and velocities.
//! Bodies cut by planes of broken bonds (known pieces, distinct sizes, the numbering shuffled),
//! and real rupturing impacts on the CPU engine, the GPU engine in f64 and f32, in another
//! particle order and resumed from a checkpoint.

mod common;

use glam::{DQuat, DVec3};
use rrpdem::engine::Precision;
use rrpdem::fragments;
use rrpdem::model::{Model, Particles};
use rrpdem::run::{self, EngineChoice, RunOptions};
use rrpdem::scenario::{Backend, Scenario};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// Components of the intact-bond graph with scipy; labels are each component's smallest index
/// (numpy). With a final state, also each fragment of more than one particle (by label: label,
/// particles, mass, volume, diameter, x, y, z, vx, vy, vz, intact bonds), the debris and the
/// largest fragment's mass fraction.
/// Arguments: n, bonds.csv (`i,j[,broken]`), breaks.csv or `-`, final_state.csv or `-`.
const COMPONENTS: &str = r#"
import csv, json, sys
import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

def table(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    return {h: np.array([float(r[k]) for r in rows[1:]]) for k, h in enumerate(rows[0])}

n = int(sys.argv[1])
b = table(sys.argv[2])
i, j = b["i"].astype(np.int64), b["j"].astype(np.int64)
broken = b["broken"] != 0 if "broken" in b else np.zeros(len(i), bool)
if sys.argv[3] != "-":
    with open(sys.argv[3]) as f:
        for row in csv.DictReader(f):
            broken[int(row["bond"])] = True
keep = ~broken
g = coo_matrix((np.ones(int(keep.sum())), (i[keep], j[keep])), shape=(n, n))
k, comp = connected_components(g, directed=False)
mins = np.full(k, n, dtype=np.int64)
np.minimum.at(mins, comp, np.arange(n))
sizes = np.bincount(comp, minlength=k)
out = {"count": int(k), "label": mins[comp].tolist(), "sizes": sorted(sizes.tolist()),
       "broken": int(broken.sum())}
if sys.argv[4] != "-":
    s = table(sys.argv[4])
    m = s["mass"]
    vol = 4.0 / 3.0 * np.pi * (s["diameter"] / 2) ** 3
    M = np.bincount(comp, weights=m, minlength=k)
    V = np.bincount(comp, weights=vol, minlength=k)
    mean = lambda c: np.bincount(comp, weights=m * s[c], minlength=k) / M
    cols = [mean(c) for c in ["x", "y", "z", "vx", "vy", "vz"]]
    nb = np.bincount(comp[i[keep]], minlength=k)
    pieces = []
    for c in np.argsort(mins):
        if sizes[c] > 1:
            pieces.append([int(mins[c]), int(sizes[c]), M[c], V[c], (6 * V[c] / np.pi) ** (1 / 3)]
                          + [float(col[c]) for col in cols] + [int(nb[c])])
    out["pieces"] = pieces
    out["debris"] = int((sizes == 1).sum())
    out["debris_fraction"] = float(M[sizes == 1].sum() / m.sum())
    out["largest_fraction"] = float(M.max() / m.sum())
print(json.dumps(out))
"#;

/// Runs `COMPONENTS`. Fails (never skips) without scipy.
fn scipy(n: usize, bonds: &Path, breaks: Option<&Path>, state: Option<&Path>) -> Value {
    let probe = Command::new("python3").args(["-c", "import scipy.sparse.csgraph"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        other => panic!(
            "V14 checks fragments against scipy's connected components, which is missing: install it with \
             `python3 -m pip install scipy` (.ci/run does)\n{other:?}"
        ),
    }
    let arg = |p: Option<&Path>| p.map_or("-".to_string(), |p| p.display().to_string());
    let o = Command::new("python3")
        .args(["-c", COMPONENTS, &n.to_string(), bonds.to_str().unwrap(), &arg(breaks), &arg(state)])
        .output()
        .unwrap();
    assert!(o.status.success(), "the scipy check failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("the check prints JSON")
}

fn labels_of(v: &Value) -> Vec<u32> {
    v["label"].as_array().unwrap().iter().map(|l| l.as_u64().unwrap() as u32).collect()
}

/// Writes `model`'s bonds (user numbering) with their broken flags as `bonds.csv` in `dir`.
fn write_bonds(dir: &Path, model: &Model, broken: &[bool]) -> std::path::PathBuf {
    let mut text = String::from("i,j,broken\n");
    for (b, &x) in model.bonds.iter().zip(broken) {
        writeln!(text, "{},{},{}", b.i, b.j, x as u8).unwrap();
    }
    let path = dir.join("bonds.csv");
    std::fs::write(&path, text).unwrap();
    path
}

/// A simple cubic lattice of `nx × ny × nz` unit-spaced spheres, each bonded to its six
/// neighbours, numbered by the shuffle `perm` (user particle k is lattice site `perm[k]`) with
/// the bonds listed in a shuffled order and orientation. Returns the model and each particle's
/// site `(x, y, z)`.
fn shuffled_lattice(nx: usize, ny: usize, nz: usize, seed: u64) -> (Model, Vec<[usize; 3]>) {
    let n = nx * ny * nz;
    let site = |s: usize| [s % nx, (s / nx) % ny, s / (nx * ny)];
    let perm = rrpdem::rng::permutation(n, seed);
    let mut user_of = vec![0u32; n];
    for (k, &s) in perm.iter().enumerate() {
        user_of[s] = k as u32;
    }
    let mut p = Particles::default();
    let mut sites = Vec::with_capacity(n);
    for &s in &perm {
        let [x, y, z] = site(s);
        p.push(
            DVec3::new(x as f64, y as f64, z as f64),
            DVec3::ZERO,
            DQuat::IDENTITY,
            DVec3::ZERO,
            1.0,
            0.1,
            0.5,
            false,
        );
        sites.push([x, y, z]);
    }
    let mut pairs = Vec::new();
    for s in 0..n {
        let [x, y, z] = site(s);
        for (d, &len) in [nx, ny, nz].iter().enumerate() {
            let c = [x, y, z][d];
            if c + 1 < len {
                let t = s + [1, nx, nx * ny][d];
                pairs.push((user_of[s], user_of[t]));
            }
        }
    }
    let order = rrpdem::rng::permutation(pairs.len(), seed ^ 0x5bd1_e995);
    let pairs: Vec<(u32, u32)> =
        order.iter().enumerate().map(|(k, &b)| if k % 2 == 0 { pairs[b] } else { (pairs[b].1, pairs[b].0) }).collect();
    (Model::new(p, &pairs, common::gpu::lattice_params()), sites)
}

#[test]
fn planes_cut_a_lattice_into_the_pieces_they_bound() {
    let (nx, ny, nz) = (12, 7, 5);
    let (model, sites) = shuffled_lattice(nx, ny, nz, 0x1234_5678);
    let n = model.particles.len();
    // Planes x = 2.5 and x = 7.5 (slabs of 3, 5 and 4 columns) and y = 1.5 (2 and 5 rows): six
    // pieces of distinct sizes 30, 75, 50, 125, 40, 100. Three particles inside the 75, 125 and
    // 100 pieces lose every bond (debris). A crack z = 2.5 over x ≤ 1 only (the column x = 2
    // still holds) splits nothing.
    let crosses = |a: f64, b: f64, c: f64| (a - c) * (b - c) < 0.0;
    let loose = |s: [usize; 3]| [[1, 4, 2], [5, 4, 2], [10, 4, 2]].contains(&s);
    let broken: Vec<bool> = model
        .bonds
        .iter()
        .map(|b| {
            let (si, sj) = (sites[b.i as usize], sites[b.j as usize]);
            let f = |s: [usize; 3]| s.map(|c| c as f64);
            let (a, c) = (f(si), f(sj));
            crosses(a[0], c[0], 2.5)
                || crosses(a[0], c[0], 7.5)
                || crosses(a[1], c[1], 1.5)
                || (crosses(a[2], c[2], 2.5) && a[0] <= 1.0 && c[0] <= 1.0)
                || loose(si)
                || loose(sj)
        })
        .collect();
    let labels = fragments::label(n, &model.bonds, &broken);
    // Known answer: the piece of a site by the planes, labelled by its smallest user index.
    let piece = |k: usize| {
        let s = sites[k];
        if loose(s) {
            return 100 + k;
        }
        let slab = if s[0] <= 2 {
            0
        } else if s[0] <= 7 {
            1
        } else {
            2
        };
        2 * slab + usize::from(s[1] >= 2)
    };
    let mut smallest = std::collections::HashMap::new();
    for k in 0..n {
        smallest.entry(piece(k)).or_insert(k as u32);
    }
    let expected: Vec<u32> = (0..n).map(|k| smallest[&piece(k)]).collect();
    assert_eq!(labels, expected, "labels: the smallest user index of each piece the planes bound");
    let tmp = tempfile::tempdir().unwrap();
    let v = scipy(n, &write_bonds(tmp.path(), &model, &broken), None, None);
    assert_eq!(labels, labels_of(&v), "labels: scipy's components");
    let sizes: Vec<u64> = v["sizes"].as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect();
    assert_eq!(sizes, [1, 1, 1, 30, 40, 50, 74, 99, 124], "piece sizes");
    let c = fragments::counts(&labels, &model.particles.mass);
    assert_eq!((c.n_fragments, c.debris, c.largest_particles), (9, 3, 124));
    assert_eq!(c.largest_fraction, 124.0 / n as f64);
    assert_eq!(c.debris_fraction, 3.0 / n as f64);
}

#[test]
fn a_random_forest_cut_anywhere_labels_as_scipy() {
    // A random tree over shuffled indices: every bond is a bridge, so a bond skipped or joined
    // wrongly changes the labels wherever it lies in the list. Every 7th bond broken; the tree
    // is split at each.
    let n = 2001;
    let perm = rrpdem::rng::permutation(n, 0xfeed);
    let mut rng = common::Rng(42);
    let mut p = Particles::default();
    for k in 0..n {
        p.push(DVec3::new(k as f64, 0.0, 0.0), DVec3::ZERO, DQuat::IDENTITY, DVec3::ZERO, 1.0, 0.1, 0.5, false);
    }
    let pairs: Vec<(u32, u32)> =
        (1..n).map(|k| (perm[k] as u32, perm[(rng.next_u64() % k as u64) as usize] as u32)).collect();
    let model = Model::new(p, &pairs, common::gpu::lattice_params());
    let broken: Vec<bool> = (0..pairs.len()).map(|b| b % 7 == 3).collect();
    let labels = fragments::label(n, &model.bonds, &broken);
    let tmp = tempfile::tempdir().unwrap();
    let v = scipy(n, &write_bonds(tmp.path(), &model, &broken), None, None);
    assert_eq!(labels, labels_of(&v), "labels: scipy's components");
    // A tree cut at 286 bonds (b = 3, 10, …, 1998) falls into 287 pieces.
    assert_eq!(v["count"], 287);
}

/// A solid torus (FCC, 2000 spheres) from the scenario generator.
const TORUS: &str = r#"{"name": "cut", "dt": 0.0005, "t_end": 1, "particle": {"mass": 1, "inertia": 1},
    "stiffness": {"bending": 10, "axial": 200, "shear": 200, "contact": 2100, "wall": 2100},
    "bodies": [{"type": "torus_solid", "torus_diameter": 3, "tube_diameter": 1, "particles": 2000,
                "lattice": "fcc", "gap": 0}]}"#;

#[test]
fn planes_cut_a_solid_torus_into_eight_pieces_as_scipy_finds() {
    let s = Scenario::from_json(TORUS, Path::new("cut.json")).unwrap();
    let model = s.build_model().unwrap();
    let n = model.particles.len();
    let x = &model.particles.x;
    // The ring lies in z = 0 around the origin: x = 0.3 and y = -0.2 cut it into four arcs and
    // z = 0.05 each arc into two layers; every region is connected (FCC neighbours).
    let region = |p: DVec3| (p.x > 0.3) as usize + 2 * (p.y > -0.2) as usize + 4 * (p.z > 0.05) as usize;
    let broken: Vec<bool> = model.bonds.iter().map(|b| region(x[b.i as usize]) != region(x[b.j as usize])).collect();
    let labels = fragments::label(n, &model.bonds, &broken);
    let tmp = tempfile::tempdir().unwrap();
    let v = scipy(n, &write_bonds(tmp.path(), &model, &broken), None, None);
    assert_eq!(labels, labels_of(&v), "labels: scipy's components");
    let mut per_region = [0u64; 8];
    for p in x {
        per_region[region(*p)] += 1;
    }
    let mut expected: Vec<u64> = per_region.to_vec();
    expected.sort();
    let sizes: Vec<u64> = v["sizes"].as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect();
    assert_eq!(sizes, expected, "one piece per region");
    assert!(expected.windows(2).all(|w| w[0] < w[1]), "distinct sizes: {expected:?}");
    // Every bond intact: one piece; labelled 0.
    let whole = fragments::label(n, &model.bonds, &vec![false; model.bonds.len()]);
    assert!(whole.iter().all(|&l| l == 0));
}

/// The solid torus impact of `scenarios/` made small and brittle: 600 spheres, a third of the
/// bonds break by t = 1 (2000 steps), 110 fragments on the CPU engine.
fn impact() -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/solid_torus_impact.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v["bodies"][0]["particles"] = 600.into();
    v["t_end"] = 1.0.into();
    v["record_every"] = 100.into();
    v["rupture"] = serde_json::json!({"tension": 0.03, "shear": 0.3});
    Scenario::from_json(&v.to_string(), &path).unwrap()
}

fn run_into(s: &Scenario, out: &Path, choice: EngineChoice, opts: RunOptions) -> run::Summary {
    run::run_scenario(s, out, false, &choice, opts, &|_| {}).unwrap_or_else(|e| panic!("{e}"))
}

fn read(dir: &Path, f: &str) -> String {
    std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{}: {e}", dir.join(f).display()))
}

/// The `fragment` column of `final_state.csv` in `dir`.
fn final_labels(dir: &Path) -> Vec<u32> {
    let text = read(dir, "final_state.csv");
    let mut lines = text.lines();
    assert!(lines.next().unwrap().ends_with(",fixed,fragment"), "final_state.csv ends with `fragment`");
    lines.map(|l| l.rsplit(',').next().unwrap().parse().unwrap()).collect()
}

/// `a` and `b` equal to `rel` of the larger magnitude or `abs` (values near zero).
fn close(a: f64, b: f64, rel: f64, abs: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()) + abs
}

/// Checks every fragment output of the run in `dir` (scenario `s`) against scipy: the labels
/// of `final_state.csv`, every row of `fragments.csv`, `summary.json`'s `fragments` and the
/// last `series.csv` row. Returns the labels.
fn check_run_against_scipy(s: &Scenario, dir: &Path) -> Vec<u32> {
    let model = s.build_model().unwrap();
    let n = model.particles.len();
    let bonds = write_bonds(dir, &model, &vec![false; model.bonds.len()]);
    let v = scipy(n, &bonds, Some(&dir.join("breaks.csv")), Some(&dir.join("final_state.csv")));
    let labels = final_labels(dir);
    assert_eq!(labels, labels_of(&v), "{}: final_state.csv's labels are scipy's components", dir.display());
    assert!(v["broken"].as_u64().unwrap() > 100 && v["count"].as_u64().unwrap() > 20, "the body broke: {v}");
    // fragments.csv: integers exact; sums of at most 600 terms of O(1) in another order
    // (bincount): 600·2⁻⁵³ ≈ 7e-14 relative, so 1e-12 of the value (1e-12 absolute for a centre
    // or velocity near zero).
    let text = read(dir, "fragments.csv");
    let mut rows = text.lines();
    assert_eq!(rows.next().unwrap(), "label,particles,mass,volume,diameter,x,y,z,vx,vy,vz,bonds");
    let pieces = v["pieces"].as_array().unwrap();
    let rows: Vec<&str> = rows.collect();
    assert_eq!(rows.len(), pieces.len(), "one row per fragment of more than one particle");
    for (row, want) in rows.iter().zip(pieces) {
        let got: Vec<f64> = row.split(',').map(|c| c.parse().unwrap()).collect();
        let want: Vec<f64> = want.as_array().unwrap().iter().map(|c| c.as_f64().unwrap()).collect();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let exact = [0, 1, 11].contains(&k);
            assert!(if exact { g == w } else { close(*g, *w, 1e-12, 1e-12) }, "fragments.csv `{row}` column {k}: {w}");
        }
    }
    let f = &serde_json::from_str::<Value>(&read(dir, "summary.json")).unwrap()["fragments"];
    assert_eq!(f["count"], v["count"]);
    assert_eq!(f["pieces"].as_u64().unwrap(), pieces.len() as u64);
    assert_eq!(f["debris_count"], v["debris"]);
    assert_eq!(f["initial_count"], 1);
    for (ours, theirs) in [("debris_mass_fraction", "debris_fraction"), ("largest_mass_fraction", "largest_fraction")] {
        assert!(close(f[ours].as_f64().unwrap(), v[theirs].as_f64().unwrap(), 1e-12, 0.0), "{ours}: {f} / {v}");
    }
    let series = read(dir, "series.csv");
    let header: Vec<&str> = series.lines().next().unwrap().split(',').collect();
    let nf = header.iter().position(|&h| h == "n_fragments").expect("an n_fragments column");
    assert_eq!(header[nf..nf + 3], ["n_fragments", "largest_fragment_fraction", "debris_fraction"]);
    let last: Vec<&str> = series.lines().last().unwrap().split(',').collect();
    assert_eq!(last[nf], v["count"].to_string(), "series.csv's last n_fragments");
    // Every row counts the bonds broken up to its step (breaks.csv), none later.
    let breaks: Vec<(u64, usize)> = read(dir, "breaks.csv")
        .lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            (c[0].parse().unwrap(), c[2].parse().unwrap())
        })
        .collect();
    for row in series.lines().skip(1) {
        let c: Vec<&str> = row.split(',').collect();
        let step: u64 = c[0].parse().unwrap();
        let mut broken = vec![false; model.bonds.len()];
        breaks.iter().filter(|b| b.0 <= step).for_each(|b| broken[b.1] = true);
        let f = fragments::counts(&fragments::label(n, &model.bonds, &broken), &model.particles.mass);
        let want =
            [f.n_fragments.to_string(), format!("{:.16e}", f.largest_fraction), format!("{:.16e}", f.debris_fraction)];
        // The fragment columns come before E_dissipated (the last column).
        assert_eq!(c[c.len() - 4..c.len() - 1], want, "series.csv row of step {step}");
    }
    labels
}

fn choice(backend: Backend, precision: Option<Precision>) -> EngineChoice {
    EngineChoice { backend: Some(backend), precision, ..Default::default() }
}

#[test]
fn a_rupturing_impact_labels_as_scipy_in_any_particle_order_and_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let s = impact();
    let cpu = tmp.path().join("cpu");
    run_into(&s, &cpu, choice(Backend::Cpu, None), RunOptions::default());
    let labels = check_run_against_scipy(&s, &cpu);
    // The engine runs the particles in a spatial order of its own (crate::order); the labels
    // are in the user's numbering all the same. Only the order of sums differs from the run
    // above (round-off), which breaks the same bonds here: the same labels.
    let mut spatial = s.clone();
    spatial.particle_order = rrpdem::order::OrderChoice::Spatial;
    let sp = tmp.path().join("spatial");
    run_into(&spatial, &sp, choice(Backend::Cpu, None), RunOptions::default());
    assert_eq!(check_run_against_scipy(&spatial, &sp), labels, "spatial order: the same labels");
    // One thread: bit for bit the same run.
    let one = tmp.path().join("one");
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    pool.install(|| run_into(&s, &one, choice(Backend::Cpu, None), RunOptions::default()));
    for f in ["final_state.csv", "fragments.csv", "series.csv"] {
        assert_eq!(read(&one, f), read(&cpu, f), "{f} on one thread");
    }
}

#[test]
fn a_rupturing_impact_labels_as_scipy_on_the_gpu_f64_as_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let s = impact();
    let (cpu, gpu) = (tmp.path().join("cpu"), tmp.path().join("gpu"));
    run_into(&s, &cpu, choice(Backend::Cpu, None), RunOptions::default());
    run_into(&s, &gpu, choice(Backend::Gpu, Some(Precision::F64)), RunOptions::default());
    let labels = check_run_against_scipy(&s, &gpu);
    // The GPU in f64 differs from the CPU by round-off only, which breaks the same bonds here.
    assert_eq!(labels, final_labels(&cpu), "GPU f64 labels as the CPU's");
    assert_eq!(read(&gpu, "fragments.csv").lines().count(), read(&cpu, "fragments.csv").lines().count());
}

#[test]
fn a_rupturing_impact_labels_as_scipy_on_the_gpu_f32() {
    let tmp = tempfile::tempdir().unwrap();
    let s = impact();
    let gpu = tmp.path().join("gpu");
    run_into(&s, &gpu, choice(Backend::Gpu, Some(Precision::F32)), RunOptions::default());
    check_run_against_scipy(&s, &gpu);
}

#[test]
fn a_resumed_run_labels_as_the_uninterrupted_one() {
    let tmp = tempfile::tempdir().unwrap();
    let s = impact();
    let (whole, cut) = (tmp.path().join("whole"), tmp.path().join("cut"));
    run_into(&s, &whole, choice(Backend::Cpu, None), RunOptions::default());
    // Interrupted at step 700 (a checkpoint there), while bonds break.
    let opts = RunOptions { stop_at: Some(700), checkpoint_every: Some(300), ..Default::default() };
    let stopped = run::run_scenario(&s, &cut, false, &choice(Backend::Cpu, None), opts, &|_| {});
    assert!(matches!(stopped, Err(run::RunError::Interrupted { step: 700, .. })), "{stopped:?}");
    let at_stop = final_labels(&cut);
    assert_ne!(at_stop, final_labels(&whole), "the body breaks further after step 700");
    let out = rrpdem::output::OutputDir::reopen(&cut).unwrap();
    run::resume(&out, None, None, RunOptions::default(), |_| {}).unwrap();
    for f in ["final_state.csv", "fragments.csv", "series.csv", "breaks.csv"] {
        assert_eq!(read(&cut, f), read(&whole, f), "{f} of the resumed run");
    }
    let frag = |d: &Path| serde_json::from_str::<Value>(&read(d, "summary.json")).unwrap()["fragments"].clone();
    assert_eq!(frag(&cut), frag(&whole));
    check_run_against_scipy(&s, &cut);
}

#[test]
fn a_folder_written_before_the_fragment_columns_resumes_in_its_own_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let s = impact();
    let (whole, cut) = (tmp.path().join("whole"), tmp.path().join("cut"));
    run_into(&s, &whole, choice(Backend::Cpu, None), RunOptions::default());
    let opts = RunOptions { stop_at: Some(700), checkpoint_every: Some(300), ..Default::default() };
    assert!(run::run_scenario(&s, &cut, false, &choice(Backend::Cpu, None), opts, &|_| {}).is_err());
    // series.csv as the version before the fragments wrote it: every row ends with E_scale
    // (the three fragment columns and E_dissipated dropped).
    let drop3 =
        |text: &str| -> String { text.lines().map(|l| l.rsplitn(5, ',').last().unwrap().to_string() + "\n").collect() };
    let series = read(&cut, "series.csv");
    std::fs::write(cut.join("series.csv"), drop3(&series)).unwrap();
    assert!(read(&cut, "series.csv").lines().next().unwrap().ends_with(",v_cm_z,E_scale"));
    let out = rrpdem::output::OutputDir::reopen(&cut).unwrap();
    run::resume(&out, None, None, RunOptions::default(), |_| {}).unwrap();
    assert_eq!(read(&cut, "series.csv"), drop3(&read(&whole, "series.csv")), "rows go on without the new columns");
    // The other outputs are this version's.
    assert_eq!(read(&cut, "fragments.csv"), read(&whole, "fragments.csv"));
    assert_eq!(read(&cut, "final_state.csv"), read(&whole, "final_state.csv"));
}

#[test]
fn fragments_png_draws_the_cumulative_mass_distribution_of_summary_json() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    run_into(&impact(), &dir, choice(Backend::Cpu, None), RunOptions::default());
    let fig = rrpdem::plot::fragments_figure(&dir).unwrap().expect("the body broke: a figure");
    let f = &serde_json::from_str::<Value>(&read(&dir, "summary.json")).unwrap()["fragments"];
    let num = |k: &str| -> Vec<f64> {
        f["cumulative_mass"][k].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
    };
    let (d, frac) = (num("diameter"), num("fraction"));
    // Sizes from one particle (diameter 2r) to the largest fragment; the fractions rise to 1.
    assert!(d.len() >= 3 && d.windows(2).all(|w| w[0] < w[1]) && frac.windows(2).all(|w| w[0] <= w[1]));
    assert!((frac.last().unwrap() - 1.0).abs() <= 1e-12);
    let p = &fig.panels[0];
    assert!(p.x.log && p.y.log, "log–log");
    assert_eq!(p.curves[0].points, d.into_iter().zip(frac).collect::<Vec<_>>());
    // The number of fragments over time is series.csv's column.
    assert_eq!(fig.panels.len(), 3);
    let files = rrpdem::plot::plot_run_dir(&dir, &dir).unwrap();
    assert!(files.iter().any(|f| f.ends_with("fragments.png")), "{files:?}");
    assert_eq!(&std::fs::read(dir.join("fragments.png")).unwrap()[1..4], b"PNG");
}

#[test]
fn bodies_that_stay_whole_draw_no_fragments_figure() {
    // Two dumbbells in orbit (scenarios/full_body.json) are two fragments from t = 0 and stay
    // so: nothing broke apart, so no fragments.png (before: drawn whenever the count was above 1).
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut s = common::scenario("full_body.json");
    s.t_end = 1.0;
    let summary = run_into(&s, &dir, choice(Backend::Cpu, None), RunOptions::default());
    let f = summary.fragments.expect("fragments");
    assert_eq!((f.count, f.initial_count), (2, 2));
    assert!(rrpdem::plot::fragments_figure(&dir).unwrap().is_none());
}

#[test]
fn a_gpu_study_batch_labels_each_variant_as_scipy_and_tables_its_fragments() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut base: Value = serde_json::to_value(impact()).unwrap();
    base.as_object_mut().unwrap().remove("source");
    std::fs::write(d.join("impact.json"), base.to_string()).unwrap();
    let study = d.join("s.json");
    // Two brittleness levels, stepped as one GPU batch (f64).
    std::fs::write(
        &study,
        r#"{"name": "s", "base": "impact.json", "vary": {"grid": {"/rupture/tension": [0.02, 0.03]}}}"#,
    )
    .unwrap();
    let out = d.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_rrpdem"))
        .args(["study", study.to_str().unwrap(), "--plots", "--backend", "gpu", "--precision", "f64", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = read(&out, "study.csv");
    let header: Vec<&str> = table.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name}"));
    let mut counts = Vec::new();
    for (k, row) in table.lines().skip(1).enumerate() {
        let cells: Vec<&str> = row.split(',').collect();
        let dir = out.join(format!("variants/{k}"));
        let s = rrpdem::study::Study::load(&study).unwrap().scenario(k, &study).unwrap();
        check_run_against_scipy(&s, &dir);
        let f = &serde_json::from_str::<Value>(&read(&dir, "summary.json")).unwrap()["fragments"];
        assert_eq!(cells[col("n_fragments")], f["count"].to_string(), "variant {k}");
        assert_eq!(cells[col("largest_fragment_fraction")].parse::<f64>().unwrap(), f["largest_mass_fraction"]);
        assert_eq!(cells[col("debris_fraction")].parse::<f64>().unwrap(), f["debris_mass_fraction"]);
        counts.push(f["count"].as_u64().unwrap());
    }
    assert!(counts[0] > counts[1], "the more brittle variant breaks into more pieces: {counts:?}");
    assert_eq!(&std::fs::read(out.join("study_fragments.png")).unwrap()[1..4], b"PNG");
}

/// The cost of a record's fragments (labelling + counts) on generated solid tori (FCC, about 5.5
/// bonds per sphere) with a tenth of the bonds broken (spread by a hash), by size: sizes from
/// `RRPDEM_FRAGMENT_SIZES` (comma-separated, default 1e6). Prints a line per size; the figures
/// are in docs/BENCHMARKS.md. `cargo test --release --test v14_fragments -- --ignored cost`.
#[test]
#[ignore]
fn fragment_labelling_cost_per_record() {
    let sizes = std::env::var("RRPDEM_FRAGMENT_SIZES").unwrap_or_else(|_| "1000000".into());
    for size in sizes.split(',') {
        let n: f64 = size.trim().parse().unwrap();
        let json = TORUS.replace(r#""particles": 2000"#, &format!(r#""particles": {}"#, n as u64));
        let s = Scenario::from_json(&json, Path::new("cost.json")).unwrap();
        let t0 = std::time::Instant::now();
        let g = s.build_geometry().unwrap();
        let built = t0.elapsed().as_secs_f64();
        let (np, nb) = (g.particles.len(), g.pairs.len());
        // 2/16 of the bonds broken (one piece), and 10/16 (past percolation: mostly debris).
        for sixteenths in [2, 10] {
            let broken: Vec<bool> =
                (0..nb as u64).map(|b| b.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60 < sixteenths).collect::<Vec<_>>();
            let mut best = [f64::INFINITY; 2];
            let mut c = fragments::Counts::default();
            for _ in 0..3 {
                let t = std::time::Instant::now();
                // What a run does at a record after new breaks (`Replica::fragment_counts`).
                let labels = fragments::label_flagged(np, &g.pairs, &broken);
                let labelled = t.elapsed().as_secs_f64();
                c = fragments::counts(&labels, &g.particles.mass);
                best[0] = best[0].min(labelled);
                best[1] = best[1].min(t.elapsed().as_secs_f64());
            }
            println!(
                "{np} particles, {nb} bonds ({} broken; built in {built:.1} s): label {:.3} s, label + counts {:.3} s \
             per record; {} fragments, largest {:.4}",
                broken.iter().filter(|&&x| x).count(),
                best[0],
                best[1],
                c.n_fragments,
                c.largest_fraction
            );
        }
    }
}
