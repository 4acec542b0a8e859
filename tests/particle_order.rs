//! The engine's particle order (`rrpdem::order`): a model read in a shuffled numbering runs in
//! the same spatial order, bit for bit, as the same model read in the generator's, and every
//! output comes back in the numbering it was read in; a checkpoint keeps the order; `input`
//! runs the user's order and agrees to round-off.

mod common;

use rrpdem::engine::Precision;
use rrpdem::run::{self, EngineChoice, RunError, RunOptions};
use rrpdem::scenario::{Backend, Scenario};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A solid torus of about 4500 FCC spheres (above `AUTO_MIN_PARTICLES`) driven into a wall fast
/// enough that bonds break within the run: every mechanism that sums in particle or bond order
/// (bonds, contacts, walls, rupture) is at work.
const TORUS: &str = r#"{"name": "order", "dt": 0.0005, "t_end": 1, "particle": {"mass": 1, "inertia": 1},
    "stiffness": {"bending": 10, "axial": 200, "shear": 200, "contact": 2100, "wall": 2100},
    "walls": [{"point": [0, 0, 0], "normal": [1, 0, 0]}],
    "rupture": {"tension": 0.01, "shear": 0.1},
    "bodies": [{"type": "torus_solid", "torus_diameter": 3, "tube_diameter": 1, "particles": 4500,
                "gap": 0, "velocity": [-3, 0.25, 0]}]}"#;

const STEPS: u64 = 240;

/// A fixed shuffle: row r of the shuffled files holds the generator's particle `perm[r]`.
fn shuffle(n: usize) -> Vec<usize> {
    rrpdem::rng::permutation(n, 0x2545_f491_4f6c_dd1d)
}

/// The torus as the generator numbers it.
fn torus() -> rrpdem::model::Model {
    Scenario::from_json(TORUS, Path::new("torus.json")).unwrap().build_model().unwrap()
}

/// The order of the bonds file for particle rows `perm`: the generator's when `perm` is the
/// identity, else shuffled too (row q holds the generator's bond `bond_rows(..)[q]`), so that
/// bond indices differ between the two files as particle indices do.
fn bond_rows(perm: &[usize], nb: usize) -> Vec<usize> {
    if perm.iter().enumerate().all(|(k, &u)| k == u) { (0..nb).collect() } else { shuffle(nb) }
}

/// Writes the torus as CSV bodies in the row order `perm` into `dir` and returns the scenario
/// reading them (bonds in the order `bond_rows`, their ends renumbered, orientation kept).
fn csv_scenario(dir: &Path, perm: &[usize], order: &str, name: &str) -> Scenario {
    let model = torus();
    let p = &model.particles;
    let mut row_of = vec![0usize; perm.len()];
    for (r, &u) in perm.iter().enumerate() {
        row_of[u] = r;
    }
    let mut particles = String::from("x,y,z,vx,vy,vz,mass,inertia,diameter\n");
    for &u in perm {
        let (x, v) = (p.x[u], p.v[u]);
        // Rust prints the shortest decimal that reads back to the same f64.
        writeln!(
            particles,
            "{},{},{},{},{},{},{},{},{}",
            x.x,
            x.y,
            x.z,
            v.x,
            v.y,
            v.z,
            p.mass[u],
            p.inertia[u],
            2.0 * p.radius[u]
        )
        .unwrap();
    }
    let mut bonds = String::from("i,j\n");
    for &k in &bond_rows(perm, model.bonds.len()) {
        let b = &model.bonds[k];
        writeln!(bonds, "{},{}", row_of[b.i as usize], row_of[b.j as usize]).unwrap();
    }
    std::fs::write(dir.join(format!("{name}_particles.csv")), particles).unwrap();
    std::fs::write(dir.join(format!("{name}_bonds.csv")), bonds).unwrap();
    let json = TORUS
        .replace(
            r#"{"type": "torus_solid", "torus_diameter": 3, "tube_diameter": 1, "particles": 4500,
                "gap": 0, "velocity": [-3, 0.25, 0]}"#,
            &format!(r#"{{"type": "csv", "particles": "{name}_particles.csv", "bonds": "{name}_bonds.csv"}}"#),
        )
        .replace(r#""name": "order","#, &format!(r#""name": "{name}", "particle_order": "{order}","#))
        .replace(r#""t_end": 1"#, &format!(r#""t_end": {}"#, STEPS as f64 * 0.0005));
    assert!(json.contains("csv"), "the body was replaced");
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, json).unwrap();
    Scenario::load(&path).unwrap()
}

/// Runs `s` into `out` (stopped at `stop_at` if given) and returns what it announced.
fn run_into(s: &Scenario, out: &Path, backend: Backend, stop_at: Option<u64>) -> Result<String, RunError> {
    run_with(s, out, EngineChoice { backend: Some(backend), ..Default::default() }, stop_at)
}

/// `run_into` with an engine choice (backend and precision).
fn run_with(s: &Scenario, out: &Path, choice: EngineChoice, stop_at: Option<u64>) -> Result<String, RunError> {
    let said = Mutex::new(String::new());
    let opts = RunOptions { stop_at, checkpoint_every: Some(100), ..Default::default() };
    run::run_scenario(s, out, false, &choice, opts, &|m| said.lock().unwrap().push_str(m))?;
    Ok(said.into_inner().unwrap())
}

fn read(dir: &Path, f: &str) -> String {
    std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{}: {e}", dir.join(f).display()))
}

/// The rows of a CSV file after its header, split into cells.
fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines().skip(1).map(|l| l.split(',').map(str::to_owned).collect()).collect()
}

/// Checks that the run in `b` (rows in the order `perm`) wrote what the run in `a` (generator
/// order) wrote, bit for bit, in its own numbering; returns the number of breaks.
fn assert_same_run_renumbered(a: &Path, b: &Path, perm: &[usize]) -> usize {
    assert_eq!(read(a, "series.csv"), read(b, "series.csv"), "series.csv: same diagnostics, bit for bit");
    // final_state.csv: row r of b is particle perm[r] of a; every column but the id and the
    // fragment label equal. A label is the smallest index of a fragment in the file's own
    // numbering: b's labels are a's renumbered (the same partition), each b's smallest.
    let (fa, fb) = (rows(&read(a, "final_state.csv")), rows(&read(b, "final_state.csv")));
    assert_eq!(fa.len(), perm.len());
    let last = fa[0].len() - 1;
    let mut label_of_a_label = std::collections::HashMap::new();
    for (r, row) in fb.iter().enumerate() {
        assert_eq!(row[0], r.to_string(), "final_state.csv is in the input's numbering");
        let other = &fa[perm[r]];
        assert_eq!(row[1..last], other[1..last], "final_state.csv row {r} (particle {} of the other run)", perm[r]);
        // Rows in b's order: the first of a fragment met is its label.
        let lb = label_of_a_label.entry(other[last].clone()).or_insert_with(|| r.to_string());
        assert_eq!(&row[last], lb, "row {r}: the fragment of particle {} of the other run", perm[r]);
    }
    // breaks.csv: the same bonds (bond and ends renumbered) at the same steps; b lists a step's
    // breaks by its own bond numbers, so both are compared sorted by step and a's bond.
    let (ba, bb) = (rows(&read(a, "breaks.csv")), rows(&read(b, "breaks.csv")));
    assert_eq!(ba.len(), bb.len(), "as many breaks");
    let nb = torus().bonds.len();
    let brows = bond_rows(perm, nb);
    let mut mapped: Vec<Vec<String>> = bb
        .iter()
        .map(|rb| {
            let mut m = rb.clone();
            m[2] = brows[rb[2].parse::<usize>().unwrap()].to_string();
            for c in [3, 4] {
                m[c] = perm[rb[c].parse::<usize>().unwrap()].to_string();
            }
            m
        })
        .collect();
    let key = |r: &Vec<String>| (r[0].parse::<u64>().unwrap(), r[2].parse::<usize>().unwrap());
    mapped.sort_by_key(key);
    assert!(ba.windows(2).all(|w| key(&w[0]) < key(&w[1])), "breaks.csv in step, then bond order");
    assert_eq!(mapped, ba, "breaks.csv rows");
    ba.len()
}

fn same_run_in_any_numbering(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let n = torus().particles.len();
    let perm = shuffle(n);
    let ident: Vec<usize> = (0..n).collect();
    let (a, b): (PathBuf, PathBuf) = (d.join("a"), d.join("b"));
    // The generator's numbering, sorted on request; the shuffled one, sorted because `auto`
    // finds it scattered (and says so).
    let said_a = run_into(&csv_scenario(d, &ident, "spatial", "in_order"), &a, backend, None).unwrap();
    let said_b = run_into(&csv_scenario(d, &perm, "auto", "shuffled"), &b, backend, None).unwrap();
    assert!(!said_a.contains("scatters neighbours"), "spatial was asked for: no note ({said_a})");
    assert!(said_b.contains("running them in a spatial order"), "{said_b}");
    let breaks = assert_same_run_renumbered(&a, &b, &perm);
    assert!(breaks > 50, "bonds break during the run ({breaks})");
    // The generator's order run as it is gives other bits (the order was applied) but the
    // same physics.
    let c = d.join("c");
    run_into(&csv_scenario(d, &ident, "input", "in_order_input"), &c, backend, None).unwrap();
    assert_ne!(read(&a, "series.csv"), read(&c, "series.csv"), "another summation order, other last bits");
}

#[test]
fn a_shuffled_model_runs_as_the_ordered_one_bit_for_bit_cpu() {
    same_run_in_any_numbering(Backend::Cpu);
}

#[test]
fn a_shuffled_model_runs_as_the_ordered_one_bit_for_bit_gpu_f32() {
    same_run_in_any_numbering(Backend::Gpu);
}

#[test]
fn the_user_order_and_the_spatial_order_agree_to_round_off() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let n = torus().particles.len();
    let perm = shuffle(n);
    let (a, b) = (d.join("spatial"), d.join("input"));
    run_into(&csv_scenario(d, &perm, "spatial", "s1"), &a, Backend::Cpu, None).unwrap();
    run_into(&csv_scenario(d, &perm, "input", "s2"), &b, Backend::Cpu, None).unwrap();
    // Only the order of the sums differs: 1e-16 relative per sum. Over 240 steps of contacts and
    // breaks the difference grows (measured: 1.9e-13 of E0 at most for this shuffle, 7.5e-14 for another), far below 1e-9 of E0; a
    // particle or bond mapped wrongly would show as O(1).
    let (sa, sb) = (rows(&read(&a, "series.csv")), rows(&read(&b, "series.csv")));
    assert_eq!(sa.len(), sb.len());
    let e0: f64 = sa[0][2].parse().unwrap();
    let mut worst = 0.0f64;
    for (ra, rb) in sa.iter().zip(&sb) {
        for c in 2..ra.len() {
            let (x, y): (f64, f64) = (ra[c].parse().unwrap(), rb[c].parse().unwrap());
            assert!((x - y).abs() <= 1e-9 * e0.abs().max(1.0), "step {} column {c}: {x} vs {y}", ra[0]);
            worst = worst.max((x - y).abs() / e0.abs().max(1.0));
        }
    }
    eprintln!("largest difference between the two orders: {worst:.2e} of max(E0, 1)");
    assert!(worst > 0.0, "the two orders sum differently");
    // The same bonds break (Weibull off: thresholds equal), at the same steps.
    let key = |dir: &Path| {
        let mut k: Vec<(String, String)> =
            rows(&read(dir, "breaks.csv")).into_iter().map(|r| (r[0].clone(), r[2].clone())).collect();
        k.sort();
        k
    };
    assert_eq!(key(&a), key(&b));
}

#[test]
fn a_resumed_spatial_run_continues_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let n = torus().particles.len();
    let perm = shuffle(n);
    let s = csv_scenario(d, &perm, "auto", "shuffled");
    let (whole, resumed) = (d.join("whole"), d.join("resumed"));
    run_into(&s, &whole, Backend::Cpu, None).unwrap();
    match run_into(&s, &resumed, Backend::Cpu, Some(150)) {
        Err(RunError::Interrupted { step: 150, .. }) => {}
        other => panic!("{other:?}"),
    }
    let cp = rrpdem::checkpoint::Checkpoint::read(&resumed.join("checkpoint.bin")).unwrap();
    let order = cp.order.as_ref().expect("the checkpoint keeps the engine's order");
    assert_eq!(order.particles.len(), n);
    let out = common::reopen(&resumed);
    run::resume(&out, None, Some(&s), RunOptions::default(), |_| {}).unwrap();
    for f in ["series.csv", "final_state.csv", "breaks.csv"] {
        assert_eq!(read(&whole, f), read(&resumed, f), "{f}: the resumed run equals the whole one");
    }
}

/// Unit spheres on a cubic grid in its Morton order, every sixth site a dimer (two spheres
/// bonded end to end), each flying as a whole to another site (a fixed shuffle) in `MIX_STEPS`
/// steps: the order that was local at the start is a random one then, as in a granular flow
/// that has mixed, only faster. Each dimer also stretches at its own rate, so that bonds break
/// before and after the re-sort. Contacts have stiffness 0: every particle's force is its one
/// bond's (or none), whatever the order of the sums, so the re-sorted run must give the
/// unsorted one's trajectory bit for bit.
const MIX_STEPS: u64 = 1000;
const SIDE: usize = 16; // 4096 sites, 683 dimers: 4779 particles, above AUTO_MIN_PARTICLES

fn mixing_scenario(dir: &Path, order: &str, name: &str, check_every: Option<u64>) -> Scenario {
    let (m, spacing, dt) = (SIDE, 3.0, 0.001);
    let t_mix = MIX_STEPS as f64 * dt;
    let mut sites: Vec<[usize; 3]> = (0..m * m * m).map(|k| [k % m, (k / m) % m, k / (m * m)]).collect();
    sites.sort_by_key(|s| rrpdem::grid::morton3(s[0] as u64, s[1] as u64, s[2] as u64));
    let centre = |s: [usize; 3]| s.map(|c| c as f64 * spacing);
    let target = shuffle(sites.len());
    // Distinct masses and inertias (a column permuted wrongly would change a dimer's motion).
    let constants = |k: usize| {
        let f = (k as f64 * 0.754_877_666_246_692_7).fract();
        format!("{},{},1", 1.0 + 0.5 * f, 0.1 + 0.05 * f)
    };
    let mut particles = String::from("x,y,z,vx,vy,vz,mass,inertia,diameter\n");
    let mut bonds = String::from("i,j\n");
    let mut count = 0;
    for (k, &s) in sites.iter().enumerate() {
        let (c, to) = (centre(s), centre(sites[target[k]]));
        let v: Vec<f64> = (0..3).map(|a| (to[a] - c[a]) / t_mix).collect();
        if k % 6 != 0 {
            writeln!(particles, "{},{},{},{},{},{},{}", c[0], c[1], c[2], v[0], v[1], v[2], constants(count)).unwrap();
            count += 1;
            continue;
        }
        // Stretching rates 0.02…0.08 (distinct per dimer): the faster ones break early.
        let stretch = 0.02 + 0.06 * (k as f64 * 0.618_033_988_749_895).fract();
        for (side, dx) in [(-1.0, -0.5), (1.0, 0.5)] {
            let vx = v[0] + side * stretch / 2.0;
            let k = count + usize::from(side > 0.0);
            writeln!(particles, "{},{},{},{vx},{},{},{}", c[0] + dx, c[1], c[2], v[1], v[2], constants(k)).unwrap();
        }
        writeln!(bonds, "{},{}", count, count + 1).unwrap();
        count += 2;
    }
    std::fs::write(dir.join(format!("{name}_particles.csv")), particles).unwrap();
    std::fs::write(dir.join(format!("{name}_bonds.csv")), bonds).unwrap();
    let json = format!(
        r#"{{"name": "{name}", "particle_order": "{order}", "dt": {dt}, "t_end": {t_end}{check},
            "particle": {{"mass": 1, "inertia": 0.1}},
            "stiffness": {{"bending": 1, "axial": 0.05, "shear": 1, "contact": 0, "wall": 0}},
            "rupture": {{"tension": 0.04}},
            "bodies": [{{"type": "csv", "particles": "{name}_particles.csv", "bonds": "{name}_bonds.csv"}}]}}"#,
        t_end = (MIX_STEPS + 600) as f64 * dt,
        check = check_every.map_or(String::new(), |c| format!(r#", "order_check_every": {c}"#)),
    );
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, json).unwrap();
    Scenario::load(&path).unwrap()
}

/// Asserts that file `f` is the same in `a` and `b`, naming the first line that differs.
fn assert_same_file(a: &Path, b: &Path, f: &str, what: &str) {
    let (ta, tb) = (read(a, f), read(b, f));
    if ta != tb {
        let first = ta.lines().zip(tb.lines()).position(|(x, y)| x != y);
        let line = first.map_or_else(|| "its length".to_string(), |k| format!("line {}", k + 1));
        let shown = first.map(|k| (ta.lines().nth(k), tb.lines().nth(k)));
        panic!("{f}: {what}; they differ first at {line}: {shown:?}");
    }
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&read(dir, "summary.json")).unwrap()
}

/// The run of `mixing_scenario` in `auto` against `input` and against itself resumed, on
/// the engine `choice` with checks every `check_every` steps (`None`: the engine's interval, which must
/// be `MIX_STEPS`); `unit_roundoff`: of the engine's arithmetic, for the bound on the sums.
fn a_mixed_order_is_renewed(choice: EngineChoice, check_every: Option<u64>, unit_roundoff: f64) {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (kept, sorted, resumed) = (d.join("input"), d.join("auto"), d.join("resumed"));
    let said = run_with(&mixing_scenario(d, "input", "kept", check_every), &kept, choice, None).unwrap();
    eprintln!("{said}");
    let s = mixing_scenario(d, "auto", "sorted", check_every);
    let said = run_with(&s, &sorted, choice, None).unwrap();
    eprintln!("{said}");
    // `input` never re-sorts; `auto` started in the user's (local) order and re-sorted once the
    // dimers had mixed, at the first check after that.
    assert!(summary(&kept).get("resorts").is_none(), "input keeps its order");
    if let Some(c) = check_every {
        // An interval given to a run that never checks is reported, not silently dropped.
        let warnings = summary(&kept)["warnings"].to_string();
        assert!(
            warnings.contains(&format!("order_check_every = {c} was not applied")) && warnings.contains("input"),
            "{warnings}"
        );
    }
    let resorts = summary(&sorted)["resorts"].as_array().cloned().expect("auto re-sorted");
    assert_eq!(resorts.len(), 1, "{resorts:?}");
    assert_eq!(resorts[0]["step"], MIX_STEPS);
    let scatter = resorts[0]["scatter"].as_f64().unwrap();
    assert!(scatter > rrpdem::order::AUTO_THRESHOLD && scatter < 1.2, "mixed: {scatter}");
    // Per particle nothing depends on the order: the final states and the breaks (bond, step,
    // place, energy) are the same bits. A bond whose broken flag were lost in the renumbering
    // would pull its separated ends together and break again; one mapped to the wrong
    // particles would move them.
    let breaks = rows(&read(&kept, "breaks.csv"));
    let steps: Vec<u64> = breaks.iter().map(|r| r[0].parse().unwrap()).collect();
    assert!(
        steps.iter().any(|&s| s < MIX_STEPS) && steps.iter().any(|&s| s > MIX_STEPS),
        "bonds break before and after the re-sort: {} breaks, steps {:?}…{:?}",
        steps.len(),
        steps.first(),
        steps.last()
    );
    assert!(steps.len() < SIDE.pow(3).div_ceil(6), "some bonds stay intact ({} breaks)", steps.len());
    let after = steps.iter().filter(|&&s| s > MIX_STEPS).count();
    eprintln!("re-sorted at scatter {scatter:.3}; {} breaks, {after} after the re-sort", steps.len());
    for f in ["final_state.csv", "breaks.csv"] {
        assert_same_file(&kept, &sorted, f, "the re-sorted run equals the unsorted one");
    }
    // The energies and momenta are sums over the n particles, in another order after the
    // re-sort: summed one by one, each differs from the exact sum by at most (n − 1) u Σ|terms|
    // (u the unit round-off), so the two orders by 2 (n − 1) u Σ|terms|. Σ|terms| is bounded
    // per column from the run (a column's value can be far below it where terms cancel):
    // energies by the largest E (every term ≥ 0); momenta by Cauchy–Schwarz, Σ m|v| ≤
    // √(2 M E); angular momenta by R Σ m|v| + Σ J|ω|, with R the largest distance a particle
    // can reach; the centre of mass by R, its velocity by √(2 M E)/M. A lost particle or bond
    // would be O(1) of these.
    let (sa, sb) = (rows(&read(&kept, "series.csv")), rows(&read(&sorted, "series.csv")));
    assert_eq!(sa.len(), sb.len());
    let model = s.build_model().unwrap();
    let p = &model.particles;
    let (m, j): (f64, f64) = (p.mass.iter().sum(), p.inertia.iter().sum());
    let t_end = (MIX_STEPS + 600) as f64 * s.dt;
    let reach = (0..p.len()).map(|k| p.x[k].length() + p.v[k].length() * t_end).fold(0.0, f64::max) + 1.0;
    let value = |s: &Vec<Vec<String>>, r: usize, c: usize| -> f64 { s[r][c].parse().unwrap() };
    let energy = (0..sa.len()).map(|r| value(&sa, r, 2).abs().max(value(&sa, r, 20))).fold(0.0, f64::max);
    let (momentum, spin) = ((2.0 * m * energy).sqrt(), (2.0 * j * energy).sqrt());
    let bound = |c: usize| match c {
        2..=10 | 20 => energy,
        11..=13 => momentum,
        14..=16 => spin,
        17..=19 => reach * momentum + spin,
        25..=27 => reach,
        28..=30 => momentum / m,
        _ => 0.0, // n_broken and the wall force (no walls): equal
    };
    let tol = 2.0 * (p.len() - 1) as f64 * unit_roundoff;
    let mut worst = 0.0f64;
    for c in 2..sa[0].len() {
        for r in 0..sa.len() {
            let diff = (value(&sa, r, c) - value(&sb, r, c)).abs();
            assert!(diff <= tol * bound(c), "series.csv row {r} column {c}: {diff:.3e} > {tol:.1e} × {:.3e}", bound(c));
            worst = worst.max(diff / bound(c).max(f64::MIN_POSITIVE));
        }
    }
    eprintln!("series.csv: largest difference {worst:.2e} of its column's bound (tolerance {tol:.1e})");
    // A run interrupted at the re-sort's step and resumed continues in the new order, bit for
    // bit (the checkpoint is written after the re-sort and records the new order).
    match run_with(&s, &resumed, choice, Some(MIX_STEPS)) {
        Err(RunError::Interrupted { step, .. }) if step == MIX_STEPS => {}
        other => panic!("{other:?}"),
    }
    let cp = rrpdem::checkpoint::Checkpoint::read(&resumed.join("checkpoint.bin")).unwrap();
    assert!(cp.order.is_some(), "the checkpoint holds the new order");
    run::resume(&common::reopen(&resumed), None, Some(&s), RunOptions::default(), |_| {}).unwrap();
    for f in ["series.csv", "final_state.csv", "breaks.csv"] {
        assert_same_file(&sorted, &resumed, f, "the resumed run equals the whole one");
    }
    assert_eq!(summary(&resumed)["resorts"], summary(&sorted)["resorts"], "the resumed run lists the re-sort");
    // Resumed from before the re-sort (the checkpoint keeps the checks' interval), it re-sorts
    // at the same step by itself.
    let early = d.join("early");
    match run_with(&s, &early, choice, Some(MIX_STEPS - 100)) {
        Err(RunError::Interrupted { .. }) => {}
        other => panic!("{other:?}"),
    }
    run::resume(&common::reopen(&early), None, Some(&s), RunOptions::default(), |_| {}).unwrap();
    for f in ["series.csv", "final_state.csv", "breaks.csv"] {
        assert_same_file(&sorted, &early, f, "the run resumed before the re-sort equals the whole one");
    }
    assert_eq!(summary(&early)["resorts"], summary(&sorted)["resorts"]);
}

#[test]
fn a_mixed_order_is_renewed_during_the_run_and_changes_nothing_but_speed_cpu() {
    a_mixed_order_is_renewed(
        EngineChoice { backend: Some(Backend::Cpu), ..Default::default() },
        None,
        f64::EPSILON / 2.0,
    );
}

#[test]
fn a_mixed_order_is_renewed_during_the_run_and_changes_nothing_but_speed_gpu_f32() {
    let f32 = EngineChoice { backend: Some(Backend::Gpu), precision: Some(Precision::F32), ..Default::default() };
    a_mixed_order_is_renewed(f32, Some(MIX_STEPS), f32::EPSILON as f64 / 2.0);
}

#[test]
fn a_mixed_order_is_renewed_during_the_run_and_changes_nothing_but_speed_gpu_f64() {
    let f64 = EngineChoice { backend: Some(Backend::Gpu), precision: Some(Precision::F64), ..Default::default() };
    a_mixed_order_is_renewed(f64, Some(MIX_STEPS), f64::EPSILON / 2.0);
}

/// The CPU engine, but its renumbering fails (as a GPU model too large for a second copy on
/// the device would).
struct CannotRenumber(rrpdem::engine::CpuEngine);

impl rrpdem::engine::Engine for CannotRenumber {
    fn info(&self) -> rrpdem::engine::EngineInfo {
        self.0.info()
    }
    fn n_particles(&self) -> usize {
        self.0.n_particles()
    }
    fn steps_done(&self) -> u64 {
        self.0.steps_done()
    }
    fn advance(&mut self, steps: u64) -> Result<(), rrpdem::error::EngineError> {
        self.0.advance(steps)
    }
    fn diagnostics(&mut self) -> Result<rrpdem::diagnostics::Diagnostics, rrpdem::error::EngineError> {
        self.0.diagnostics()
    }
    fn snapshot(&mut self) -> Result<Vec<rrpdem::integrator::Kinematics>, rrpdem::error::EngineError> {
        self.0.snapshot()
    }
    fn state_kind(&self) -> String {
        self.0.state_kind()
    }
    fn save_state(&mut self) -> Result<rrpdem::engine::EngineState, rrpdem::error::EngineError> {
        self.0.save_state()
    }
    fn load_state(&mut self, state: &rrpdem::engine::EngineState) -> Result<(), rrpdem::error::EngineError> {
        self.0.load_state(state)
    }
    fn rollback(&mut self) -> Result<(), rrpdem::error::EngineError> {
        self.0.rollback()
    }
    fn largest_force(&mut self) -> Result<Option<(usize, f64)>, rrpdem::error::EngineError> {
        self.0.largest_force()
    }
    fn take_breaks(&mut self) -> Vec<rrpdem::interactions::BreakEvent> {
        self.0.take_breaks()
    }
    fn guard_interval(&self) -> u64 {
        self.0.guard_interval()
    }
    fn order_check_interval(&self) -> Option<u64> {
        self.0.order_check_interval()
    }
    fn renumber(
        &mut self,
        _model: &rrpdem::model::Model,
        _perm: &rrpdem::order::Order,
    ) -> Result<(), rrpdem::error::EngineError> {
        Err(rrpdem::error::EngineError::Unsupported("no room for a second copy".into()))
    }
}

#[test]
fn a_run_whose_engine_cannot_be_renumbered_goes_on_in_its_order_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let kept = d.join("input");
    run_into(&mixing_scenario(d, "input", "kept", None), &kept, Backend::Cpu, None).unwrap();
    let s = mixing_scenario(d, "auto", "refused", None);
    let model = s.build_model().unwrap();
    let out = rrpdem::output::OutputDir::create(&d.join("refused"), false).unwrap();
    let mut e = CannotRenumber(rrpdem::engine::CpuEngine::new(&model, s.integrator, s.dt).unwrap());
    let start = run::Start::Fresh { stability: rrpdem::stability::estimate(&model) };
    run::run(&s, &model, &mut e, start, &out, RunOptions::default()).expect("the run completes");
    let sm = summary(&out.path);
    assert!(sm.get("resorts").is_none(), "no re-sort happened");
    let warnings = sm["warnings"].to_string();
    assert!(
        warnings.contains("could not be renewed at step 1000") && warnings.contains("no room for a second copy"),
        "{warnings}"
    );
    // It went on in the user's order, as the `input` run did: the same states, bit for bit.
    assert_same_file(&kept, &out.path, "final_state.csv", "the run went on unchanged");
}
