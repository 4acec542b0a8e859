//! V12 (VTK output): every frame, the walls and the collection are read back by an independent
//! reader, VTK's own `vtkXMLPolyDataReader` (Python), and compared with the run's other outputs
//! (final_state.csv, series.csv, breaks.csv) and with quantities recomputed here; an interrupted
//! run leaves a valid collection that a resume completes to the files of an uninterrupted run;
//! a frame that cannot be written stops the run with every other output written.

mod common;

use glam::{DQuat, DVec3};
use rrpdem::model::Model;
use rrpdem::run::{self, EngineChoice, RunError, RunOptions, VtkOptions};
use rrpdem::scenario::{Backend, Scenario};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn rrpdem(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rrpdem")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
}

/// Reads a run folder with VTK's Python package: the collection (Python's xml), every frame it
/// lists and walls.vtp (vtkXMLPolyDataReader). Prints JSON; NaN becomes null. Reader errors
/// and warnings (observers and VTK's output window) are collected in `errors`.
const READER: &str = r#"
import json, math, os, sys
import xml.etree.ElementTree as ET
from vtkmodules.vtkCommonCore import vtkOutputWindow, vtkStringOutputWindow
from vtkmodules.vtkIOXML import vtkXMLPolyDataReader

window = vtkStringOutputWindow()
vtkOutputWindow.SetInstance(window)
errors = []

def clean(v):
    return None if isinstance(v, float) and math.isnan(v) else v

def arrays(data):
    out = {}
    for k in range(data.GetNumberOfArrays()):
        a = data.GetAbstractArray(k)
        n, c = a.GetNumberOfTuples(), a.GetNumberOfComponents()
        out[a.GetName()] = {
            "type": a.GetDataTypeAsString(),
            "size": a.GetDataTypeSize(),
            "comps": c,
            "values": [clean(a.GetComponent(i, j)) for i in range(n) for j in range(c)],
        }
    return out

def read(path):
    r = vtkXMLPolyDataReader()
    r.AddObserver("ErrorEvent", lambda o, e: errors.append(path + ": error event"))
    r.AddObserver("WarningEvent", lambda o, e: errors.append(path + ": warning event"))
    if not r.CanReadFile(path):
        errors.append(path + ": not readable as VTK XML PolyData")
        return None
    r.SetFileName(path)
    r.Update()
    pd = r.GetOutput()
    cells = []
    for k in range(pd.GetNumberOfCells()):
        c = pd.GetCell(k)
        cells.append([c.GetCellType()] + [c.GetPointId(i) for i in range(c.GetNumberOfPoints())])
    pts = pd.GetPoints()
    return {
        "points": pd.GetNumberOfPoints(),
        "verts": pd.GetNumberOfVerts(),
        "lines": pd.GetNumberOfLines(),
        "polys": pd.GetNumberOfPolys(),
        "cells": cells,
        "point_type": pts.GetData().GetDataTypeAsString() if pts else None,
        "coords": [x for i in range(pd.GetNumberOfPoints()) for x in pd.GetPoint(i)],
        "point_data": arrays(pd.GetPointData()),
        "cell_data": arrays(pd.GetCellData()),
        "field_data": arrays(pd.GetFieldData()),
    }

run = sys.argv[1]
root = ET.parse(os.path.join(run, "particles.pvd")).getroot()
assert root.tag == "VTKFile" and root.get("type") == "Collection", root.tag
frames = []
for ds in root.find("Collection").findall("DataSet"):
    f = read(os.path.join(run, ds.get("file")))
    if f is not None:
        f["file"] = ds.get("file")
        f["time"] = float(ds.get("timestep"))
    frames.append(f)
walls = os.path.join(run, "vtk", "walls.vtp")
out = {"frames": frames, "walls": read(walls) if os.path.exists(walls) else None}
if window.GetOutput():
    errors.append(window.GetOutput())
out["errors"] = errors
print(json.dumps(out))
"#;

/// Runs `READER` on a run folder. Fails (never skips) without VTK's Python package.
fn read_back(dir: &Path) -> Value {
    let probe = Command::new("python3").args(["-c", "import vtkmodules.vtkIOXML"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        other => panic!(
            "the VTK tests read every file back with VTK's Python package, which is missing: install it with \
             `python3 -m pip install vtk` (.ci/run does)\n{other:?}"
        ),
    }
    let o = Command::new("python3").args(["-c", READER, dir.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "the VTK reader failed: {}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("the reader prints JSON");
    assert_eq!(v["errors"], Value::Array(vec![]), "VTK reported errors reading {}", dir.display());
    v
}

/// The paper torus with bending rupture at 0.3 rad to t = 2 (2000 steps): 2 of 80 bonds break
/// at t = 1.76.
fn rupturing_torus(dir: &Path, output: Option<&str>) -> (PathBuf, Scenario) {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    let mut s: Value = serde_json::from_str(&std::fs::read_to_string(base).unwrap()).unwrap();
    s["t_end"] = 2.0.into();
    s["rupture"] = serde_json::json!({"bending": 0.3});
    if let Some(o) = output {
        s["output"] = serde_json::from_str(o).unwrap();
    }
    let path = dir.join("torus.json");
    std::fs::write(&path, s.to_string()).unwrap();
    let scenario = Scenario::load(&path).unwrap();
    (path, scenario)
}

fn csv(path: &Path) -> (Vec<String>, Vec<Vec<f64>>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header = lines.next().unwrap().split(',').map(String::from).collect();
    // breaks.csv's `mode` column is text: NaN stands in for it.
    let rows = lines.map(|l| l.split(',').map(|v| v.parse().unwrap_or(f64::NAN)).collect()).collect();
    (header, rows)
}

fn col(header: &[String], name: &str) -> usize {
    header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}"))
}

fn values(a: &Value) -> Vec<f64> {
    a["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap_or(f64::NAN)).collect()
}

fn array<'a>(frame: &'a Value, section: &str, name: &str) -> &'a Value {
    let a = &frame[section][name];
    assert!(a.is_object(), "{}: no {section} array {name}", frame["file"]);
    a
}

/// Checks an array's type: `"f64"`/`"f32"` for floats, else the VTK type name.
fn check_type(a: &Value, want: &str, comps: u64) {
    let (names, size): (&[&str], u64) = match want {
        "f64" => (&["double"], 8),
        "f32" => (&["float"], 4),
        "Int64" => (&["long long", "long", "idtype"], 8),
        "Int32" => (&["int"], 4),
        "UInt8" => (&["unsigned char"], 1),
        other => panic!("{other}"),
    };
    let ty = a["type"].as_str().unwrap();
    assert!(names.contains(&ty) && a["size"] == size, "type {ty} (size {}), expected {want}", a["size"]);
    assert_eq!(a["comps"], comps);
}

/// What one test run looked like: its folder, model, frame cadence and VTK precision.
struct Expect<'a> {
    dir: &'a Path,
    model: &'a Model,
    every: u64,
    total: u64,
    f32: bool,
    replica: f64,
}

/// Reads the run folder back and checks every frame against the run's CSV outputs.
fn check_run(e: &Expect) -> Value {
    let v = read_back(e.dir);
    let frames = v["frames"].as_array().unwrap();
    let n = e.model.particles.len();
    let nb = e.model.bonds.len();
    let float = if e.f32 { "f32" } else { "f64" };
    // Same value as a float of the file's precision.
    let round = |x: f64| if e.f32 { x as f32 as f64 } else { x };

    // The collection lists the frames at 0, every, 2·every, … and the last step, with the
    // times series.csv has for those steps.
    let (sh, series) = csv(&e.dir.join("series.csv"));
    let mut steps: Vec<u64> = (0..=e.total).step_by(e.every as usize).collect();
    if *steps.last().unwrap() != e.total {
        steps.push(e.total);
    }
    assert_eq!(frames.len(), steps.len(), "frames listed in particles.pvd");
    let t_of = |step: u64| series.iter().find(|r| r[col(&sh, "step")] == step as f64).map(|r| r[col(&sh, "t")]);
    let (bh, breaks) = csv(&e.dir.join("breaks.csv"));
    for (k, (f, &step)) in frames.iter().zip(&steps).enumerate() {
        assert_eq!(f["file"], format!("vtk/particles_{k:06}.vtp"));
        let t = f["time"].as_f64().unwrap();
        assert_eq!(Some(t), t_of(step), "time of frame {k} (step {step})");
        assert_eq!(values(array(f, "field_data", "TimeValue")), [t]);
        assert_eq!(values(array(f, "field_data", "step")), [step as f64]);
        assert_eq!(
            (f["points"].as_u64(), f["verts"].as_u64(), f["lines"].as_u64()),
            (Some(n as u64), Some(n as u64), Some(nb as u64))
        );
        assert_eq!(f["point_type"], if e.f32 { "float" } else { "double" });
        let cells = f["cells"].as_array().unwrap();
        assert_eq!(cells.len(), n + nb);
        for (c, cell) in cells.iter().enumerate() {
            // VTK_VERTEX = 1 for each particle, then VTK_LINE = 3 for each bond.
            let want: Vec<u64> = if c < n {
                vec![1, c as u64]
            } else {
                let b = e.model.bonds[c - n];
                vec![3, b.i as u64, b.j as u64]
            };
            assert_eq!(cell, &serde_json::json!(want), "cell {c}");
        }
        for (name, ty, comps) in [
            ("id", "Int64", 1),
            ("diameter", float, 1),
            ("velocity", float, 3),
            ("angular_velocity", float, 3),
            ("quaternion", float, 4),
            ("axis_1", float, 3),
            ("axis_2", float, 3),
            ("axis_3", float, 3),
            ("fixed", "UInt8", 1),
            ("replica", "Int32", 1),
            ("fragment", "Int64", 1),
        ] {
            check_type(array(f, "point_data", name), ty, comps);
        }
        for (name, ty) in [
            ("bond", "Int64"),
            ("tension", float),
            ("bending", float),
            ("twist", float),
            ("shear", float),
            ("energy", float),
            ("broken", "UInt8"),
        ] {
            check_type(array(f, "cell_data", name), ty, 1);
        }
        assert_eq!(values(array(f, "point_data", "id")), (0..n).map(|i| i as f64).collect::<Vec<_>>());
        assert!(values(array(f, "point_data", "replica")).iter().all(|&r| r == e.replica));
        let bond = values(array(f, "cell_data", "bond"));
        assert!(bond[..n].iter().all(|&b| b == -1.0) && (0..nb).all(|b| bond[n + b] == b as f64));
        // The bonds broken up to this frame's step are exactly those of breaks.csv.
        let want: BTreeSet<usize> = breaks
            .iter()
            .filter(|r| r[col(&bh, "step")] <= step as f64)
            .map(|r| r[col(&bh, "bond")] as usize)
            .collect();
        let broken = values(array(f, "cell_data", "broken"));
        let got: BTreeSet<usize> = (0..nb).filter(|&b| broken[n + b] == 1.0).collect();
        assert!(broken.iter().all(|&x| x == 0.0 || x == 1.0) && broken[..n].iter().all(|&x| x == 0.0));
        assert_eq!(got, want, "broken bonds of frame {k} (step {step})");
        // Vertex cells carry no bond measures; a broken bond has no energy left; an intact
        // bond's bending angle is below the threshold, 0.3 rad (the rupture rule checked this
        // very state), where the engine applies the rule: the GPU engine does not yet (issue 7),
        // and its breaks.csv is empty.
        let bending = values(array(f, "cell_data", "bending"));
        let energy = values(array(f, "cell_data", "energy"));
        assert!(bending[..n].iter().chain(&energy[..n]).all(|x| x.is_nan()));
        let max_bending = if breaks.is_empty() { f64::INFINITY } else { 0.3 };
        for b in 0..nb {
            if got.contains(&b) {
                assert_eq!(energy[n + b], 0.0);
            } else {
                let ok = (0.0..max_bending).contains(&bending[n + b]);
                assert!(ok, "frame {k}: bond {b}: bending {}", bending[n + b]);
                assert!(energy[n + b] >= 0.0);
            }
        }
    }

    // The last frame is final_state.csv.
    let last = frames.last().unwrap();
    let (fh, fin) = csv(&e.dir.join("final_state.csv"));
    assert_eq!(fin.len(), n);
    let get = |r: &Vec<f64>, names: &[&str]| names.iter().map(|c| r[col(&fh, c)]).collect::<Vec<f64>>();
    let per_particle = |names: &[&str]| fin.iter().flat_map(|r| get(r, names)).map(round).collect::<Vec<f64>>();
    assert_eq!(
        last["coords"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect::<Vec<_>>(),
        per_particle(&["x", "y", "z"])
    );
    assert_eq!(values(array(last, "point_data", "velocity")), per_particle(&["vx", "vy", "vz"]));
    assert_eq!(values(array(last, "point_data", "angular_velocity")), per_particle(&["wx", "wy", "wz"]));
    assert_eq!(values(array(last, "point_data", "quaternion")), per_particle(&["qw", "qx", "qy", "qz"]));
    assert_eq!(values(array(last, "point_data", "diameter")), per_particle(&["diameter"]));
    assert_eq!(values(array(last, "point_data", "fixed")), per_particle(&["fixed"]));
    // The fragment labels (MODEL §11; V14 checks final_state.csv's against scipy).
    assert_eq!(values(array(last, "point_data", "fragment")), per_particle(&["fragment"]));
    // axis_k = R e_k with R the rotation of the final quaternion.
    let tol = if e.f32 { 1e-7 } else { 1e-15 };
    for (name, axis) in [("axis_1", DVec3::X), ("axis_2", DVec3::Y), ("axis_3", DVec3::Z)] {
        let got = values(array(last, "point_data", name));
        for (i, r) in fin.iter().enumerate() {
            let [w, x, y, z] = get(r, &["qw", "qx", "qy", "qz"])[..] else { unreachable!() };
            let want = DQuat::from_xyzw(x, y, z, w) * axis;
            let d = (DVec3::from_slice(&got[3 * i..3 * i + 3]) - want).abs().max_element();
            assert!(d <= tol, "{name} of particle {i}: {d}");
        }
    }
    // Tension: the signed strain |x_i − x_j|/L0 − 1 from final_state.csv's positions, with
    // L0 the bond's length at t = 0.
    let tension = values(array(last, "cell_data", "tension"));
    let pos = |i: u32| DVec3::from_slice(&get(&fin[i as usize], &["x", "y", "z"]));
    let mut compressed = 0;
    for (b, bond) in e.model.bonds.iter().enumerate() {
        let want = (pos(bond.i) - pos(bond.j)).length() / bond.l0 - 1.0;
        let d = (tension[n + b] - want).abs();
        assert!(
            d <= if e.f32 { 1e-7 * want.abs() } else { 1e-15 },
            "tension of bond {b}: {} vs {want}",
            tension[n + b]
        );
        compressed += (want < 0.0) as usize;
    }
    assert!(compressed > 0 && compressed < nb, "the strain is signed: {compressed} compressed bonds");
    // The bond energies add up to the binder energy of the last row of series.csv.
    let energy = values(array(last, "cell_data", "energy"));
    let row = series.last().unwrap();
    let u = row[col(&sh, "U_bend")] + row[col(&sh, "U_axial")] + row[col(&sh, "U_shear")];
    let sum: f64 = energy[n..].iter().sum();
    assert!((sum - u).abs() <= 1e-6 * u, "Σ bond energy {sum} vs U_bend + U_axial + U_shear {u}");
    if !e.f32 {
        assert!((sum - u).abs() <= 1e-12 * u, "Σ bond energy {sum} vs {u}");
    }
    v
}

/// The walls: one square per wall, in its plane, around the particles at t = 0.
fn check_walls(v: &Value, model: &Model, f32: bool) {
    let w = &v["walls"];
    assert!(w.is_object(), "walls.vtp is written");
    assert_eq!((w["points"].as_u64(), w["polys"].as_u64()), (Some(4), Some(1)));
    assert_eq!(
        w["cells"],
        serde_json::json!([[9, 0, 1, 2, 3]]),
        "a polygon of 4 points (VTK reads it as a quad, type 9)"
    );
    assert_eq!(values(array(w, "cell_data", "wall")), [0.0]);
    assert_eq!(values(array(w, "cell_data", "normal")), [1.0, 0.0, 0.0]);
    check_type(array(w, "cell_data", "normal"), if f32 { "f32" } else { "f64" }, 3);
    let c: Vec<f64> = w["coords"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let (mut lo, mut hi) = (DVec3::splat(f64::INFINITY), DVec3::splat(f64::NEG_INFINITY));
    for k in 0..4 {
        let p = DVec3::from_slice(&c[3 * k..3 * k + 3]);
        assert_eq!(p.x, 0.0, "corner {k} lies on the wall x = 0");
        (lo, hi) = (lo.min(p), hi.max(p));
    }
    for (x, r) in model.particles.x.iter().zip(&model.particles.radius) {
        assert!(x.y - r > lo.y && x.y + r < hi.y && x.z - r > lo.z && x.z + r < hi.z, "particle at {x} outside");
    }
}

/// `rupture`: whether the engine applies the rupture rule (the GPU engine does not yet: issue 7).
fn rupturing_run(backend: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let (path, scenario) = rupturing_torus(tmp.path(), None);
    let out = tmp.path().join("out");
    let mut args = vec!["run", path.to_str().unwrap(), "--out", out.to_str().unwrap(), "--vtk-every", "250"];
    args.extend(backend);
    let o = rrpdem(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("particles.pvd"), "the summary names the collection");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["scenario"]["output"], serde_json::json!({"vtk_every": 250, "vtk_precision": "f64"}));
    let model = scenario.build_model().unwrap();
    let (_, breaks) = csv(&out.join("breaks.csv"));
    assert!(!breaks.is_empty() && breaks.len() < model.bonds.len(), "some bonds break: {}", breaks.len());
    let v = check_run(&Expect { dir: &out, model: &model, every: 250, total: 2000, f32: false, replica: 0.0 });
    check_walls(&v, &model, false);
    // Nothing in vtk/ but the listed frames and walls.vtp.
    let mut files: Vec<String> =
        std::fs::read_dir(out.join("vtk")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    files.sort();
    let mut want: Vec<String> = (0..9).map(|k| format!("particles_{k:06}.vtp")).collect();
    want.push("walls.vtp".into());
    assert_eq!(files, want);
}

#[test]
fn cpu_rupturing_torus_frames_read_back_equal_the_run() {
    rupturing_run(&["--backend", "cpu"]);
}

#[test]
fn gpu_f64_rupturing_torus_frames_read_back_equal_the_run() {
    rupturing_run(&["--backend", "gpu", "--precision", "f64"]);
}

#[test]
fn f32_frames_from_the_scenario_output_block_hold_the_rounded_values() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, scenario) = rupturing_torus(tmp.path(), Some(r#"{"vtk_every": 300, "vtk_precision": "f32"}"#));
    let out = tmp.path().join("out");
    let o = rrpdem(&["run", path.to_str().unwrap(), "--out", out.to_str().unwrap(), "--backend", "cpu"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let model = scenario.build_model().unwrap();
    // 2000 is not a multiple of 300: the last step gets a frame of its own.
    let v = check_run(&Expect { dir: &out, model: &model, every: 300, total: 2000, f32: true, replica: 0.0 });
    check_walls(&v, &model, true);
    // The command line overrides the scenario's cadence.
    let out2 = tmp.path().join("out2");
    let o = rrpdem(&[
        "run",
        path.to_str().unwrap(),
        "--out",
        out2.to_str().unwrap(),
        "--vtk-every",
        "1000",
        "--backend",
        "cpu",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    check_run(&Expect { dir: &out2, model: &model, every: 1000, total: 2000, f32: true, replica: 0.0 });
}

#[test]
fn bad_vtk_settings_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, _) = rupturing_torus(tmp.path(), None);
    let o =
        rrpdem(&["run", path.to_str().unwrap(), "--out", tmp.path().join("o").to_str().unwrap(), "--vtk-every", "0"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--vtk-every must be at least 1"));
    for (output, field) in [(r#"{"vtk_every": 0}"#, "output.vtk_every"), (r#"{"vtk_evry": 5}"#, "vtk_evry")] {
        let text = std::fs::read_to_string(&path).unwrap().replacen('{', &format!(r#"{{"output": {output},"#), 1);
        let err = Scenario::from_json(&text, Path::new("x.json")).unwrap_err().to_string();
        assert!(err.contains(field), "{err}");
    }
    let text = std::fs::read_to_string(&path).unwrap().replacen('{', r#"{"output": {"vtk_precision": "f16"},"#, 1);
    assert!(Scenario::from_json(&text, Path::new("x.json")).is_err());
}

fn cpu() -> EngineChoice {
    EngineChoice { backend: Some(Backend::Cpu), ..Default::default() }
}

fn vtk_opts(stop_at: Option<u64>) -> RunOptions {
    RunOptions { stop_at, vtk: VtkOptions { every: Some(250), replica: 0 }, ..Default::default() }
}

/// Every file of a folder, by name.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn interrupted_run_leaves_a_valid_collection_and_resume_completes_it_identically() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, scenario) = rupturing_torus(tmp.path(), None);
    let model = scenario.build_model().unwrap();
    let whole = tmp.path().join("whole");
    run::run_scenario(&scenario, &whole, false, &cpu(), vtk_opts(None), &|_| {}).unwrap();

    // Stopped at step 1100: frames 0, 250, …, 1000 are listed, complete and alone in vtk/.
    let out = tmp.path().join("out");
    let r = run::run_scenario(&scenario, &out, false, &cpu(), vtk_opts(Some(1100)), &|_| {});
    assert!(matches!(r, Err(RunError::Interrupted { step: 1100, .. })), "{:?}", r.err());
    let v = read_back(&out);
    let times: Vec<f64> = v["frames"].as_array().unwrap().iter().map(|f| f["time"].as_f64().unwrap()).collect();
    assert_eq!(times, [0.0, 0.25, 0.5, 0.75, 1.0]);
    let names: Vec<String> = files(&out.join("vtk")).into_iter().map(|f| f.0).collect();
    assert_eq!(names.len(), 6, "5 frames and walls.vtp, no partial file: {names:?}");
    let whole_files = files(&whole.join("vtk"));
    for (name, bytes) in files(&out.join("vtk")) {
        assert!(whole_files.contains(&(name.clone(), bytes)), "{name} equals the uninterrupted run's");
    }
    let cp_1100 = std::fs::read(out.join("checkpoint.bin")).unwrap();

    let resume = |opts| {
        let dir = common::reopen(&out);
        run::resume(&dir, None, None, opts, |_| {})
    };
    let same_as_whole = || {
        assert!(files(&out.join("vtk")) == files(&whole.join("vtk")), "vtk/ equals the uninterrupted run's");
        let pvd = |d: &Path| std::fs::read(d.join("particles.pvd")).unwrap();
        assert_eq!(pvd(&out), pvd(&whole));
    };

    // Resumed and stopped again at 1800 (frames to 1750), after the breaks at 1760; resumed
    // to the end from there: the last frame shows the bonds broken before the checkpoint
    // (taken from breaks.csv).
    let r = resume(vtk_opts(Some(1800)));
    assert!(matches!(r, Err(RunError::Interrupted { step: 1800, .. })), "{:?}", r.err());
    assert_eq!(read_back(&out)["frames"].as_array().unwrap().len(), 8);
    resume(vtk_opts(None)).unwrap();
    same_as_whole();

    // Resumed once more from the checkpoint at 1100: the frames after it (1250 … 2000) are
    // dropped and written anew, and a stray frame no collection lists (from a run killed while
    // writing it) goes too. The frames asked for when the run started are recorded in its
    // checkpoints: the resume continues them without being asked again.
    std::fs::write(out.join("checkpoint.bin"), cp_1100).unwrap();
    std::fs::write(out.join("vtk/particles_000042.vtp"), b"partial").unwrap();
    resume(RunOptions::default()).unwrap();
    same_as_whole();
    check_run(&Expect { dir: &out, model: &model, every: 250, total: 2000, f32: false, replica: 0.0 });
}

#[test]
fn a_frame_that_cannot_be_written_stops_the_run_with_the_other_outputs_written() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, scenario) = rupturing_torus(tmp.path(), None);
    let out = tmp.path().join("out");
    let r = run::run_scenario(&scenario, &out, false, &cpu(), vtk_opts(Some(500)), &|_| {});
    assert!(matches!(r, Err(RunError::Interrupted { .. })));
    // Frame 4 (step 1000) cannot be created: a folder holds its temporary name.
    std::fs::create_dir(out.join("vtk/particles_000004.vtp.tmp")).unwrap();
    let dir = common::reopen(&out);
    let err = run::resume(&dir, None, None, vtk_opts(None), |_| {}).unwrap_err();
    drop(dir);
    let RunError::Vtk { step, .. } = err else { panic!("expected a VTK error, got {err}") };
    assert!(err.to_string().contains("particles_000004.vtp.tmp"), "{err}");
    assert!((1250..=2000).contains(&step), "the run stops at the next frame or soon after: {step}");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert!(summary["status"].as_str().unwrap().starts_with("error:"), "{}", summary["status"]);
    assert!(summary["status"].as_str().unwrap().contains("particles_000004.vtp.tmp"));
    assert_eq!(summary["steps"], step);
    let (sh, series) = csv(&out.join("series.csv"));
    assert_eq!(series.last().unwrap()[col(&sh, "step")], step as f64, "series.csv goes to the last step");
    let (_, fin) = csv(&out.join("final_state.csv"));
    assert_eq!(fin.len(), 80);
    // The collection lists the four frames written before the failure, all readable.
    let times: Vec<f64> =
        read_back(&out)["frames"].as_array().unwrap().iter().map(|f| f["time"].as_f64().unwrap()).collect();
    assert_eq!(times, [0.0, 0.25, 0.5, 0.75]);
}

#[test]
fn study_frames_carry_the_variant_index_as_replica() {
    let tmp = tempfile::tempdir().unwrap();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    std::fs::copy(base, tmp.path().join("torus_impact.json")).unwrap();
    let study = tmp.path().join("s.json");
    std::fs::write(
        &study,
        r#"{"name": "s", "base": "torus_impact.json", "set": {"/t_end": 0.5},
            "vary": {"list": [{"/@impact_speed": 1}, {"/@impact_speed": 2}]}}"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = rrpdem(&[
        "study",
        study.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--backend",
        "cpu",
        "--vtk-every",
        "200",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for k in 0..2 {
        let v = read_back(&rrpdem::study::variant_dir(&out, k));
        let frames = v["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 4, "frames at 0, 200, 400, 500");
        for f in frames {
            assert!(values(array(f, "point_data", "replica")).iter().all(|&r| r == k as f64), "variant {k}");
        }
        let speed = values(array(&frames[0], "point_data", "velocity"))[0];
        assert_eq!(speed, -(k as f64 + 1.0), "variant {k}'s own run");
    }
}

/// Time to write one frame of 10⁶ particles and 10⁶ bonds (a `torus_ring`), f64 and f32:
/// `cargo test --release --test v12_vtk -- --ignored --nocapture`.
#[test]
#[ignore]
fn frame_write_time_for_a_million_particles() {
    use rrpdem::integrator::Kinematics;
    use rrpdem::vtk::{Frame, VtkPrecision, VtkSettings, write_frame};
    let s = Scenario::from_json(
        r#"{"name": "big", "dt": 1e-3, "t_end": 1, "particle": {"mass": 1, "inertia": 1},
            "stiffness": {"bending": 10, "axial": 200, "shear": 200, "contact": 2100}, "shear": "paper",
            "bodies": [{"type": "torus_ring", "n": 1000000, "torus_diameter": 30000}]}"#,
        Path::new("big.json"),
    )
    .unwrap();
    let m = s.build_model().unwrap();
    let p = &m.particles;
    // A perturbed state, so that every bond has non-trivial measures.
    let state: Vec<Kinematics> = (0..p.len())
        .map(|i| {
            let a = i as f64 * 0.618;
            Kinematics {
                x: p.x[i] + 1e-3 * DVec3::new(a.sin(), a.cos(), 0.0),
                v: p.v[i],
                q: DQuat::from_rotation_z(1e-2 * a.sin()),
                w: p.w[i],
            }
        })
        .collect();
    let frame =
        Frame { step: 0, t: 0.0, state, broken: (0..m.bonds.len()).map(|b| b % 100 == 0).collect(), tangential: None };
    let tmp = tempfile::tempdir().unwrap();
    for precision in [VtkPrecision::F64, VtkPrecision::F32] {
        let mut times = Vec::new();
        for k in 0..5 {
            // A new file each time, as in a run (replacing a file would add freeing the old one).
            let path = tmp.path().join(format!("big_{k}.vtp"));
            let t0 = std::time::Instant::now();
            write_frame(&path, &m, &frame, &VtkSettings { every: 1, precision, replica: 0 }).unwrap();
            times.push(t0.elapsed().as_secs_f64());
        }
        let path = tmp.path().join("big_0.vtp");
        let mb = std::fs::metadata(&path).unwrap().len() as f64 / 1e6;
        // The first frames go to the page cache; once the dirty pages reach the kernel's limit,
        // the next ones go at the disk's pace.
        println!("{precision:?}: {mb:.0} MB per frame, 5 frames in a row: {times:.3?} s");
        for k in 0..5 {
            std::fs::remove_file(tmp.path().join(format!("big_{k}.vtp"))).unwrap();
        }
    }
}

#[test]
fn frictional_frames_carry_each_spheres_tangential_displacement() {
    // A sphere (D = 0.1, m = 1) resting at its static overlap on a wall under g = 10 (−x),
    // launched along y at 0.5 with wall friction μ = 0.3 and no dashpot: it slides (it would
    // roll only after ~2 v/(7 μ g) ≈ 0.05), so its spring–slider sits at the Coulomb bound,
    // |ξ| = 2 μ s / (3 κ) with κ = 2/7 and s = r − x the overlap (MODEL §10). Every frame after
    // the first few steps must show that, computed here from the frame's own coordinates (the
    // reader's, independent of the writer's arithmetic); the field is absent without friction.
    let (k, g, r, mu, kappa) = (2100.0, 10.0, 0.05, 0.3, 2.0 / 7.0);
    let s0 = (g / (k / f64::powf(r, 2.5))).powf(2.0 / 3.0);
    let tmp = tempfile::tempdir().unwrap();
    for friction in [true, false] {
        let block = if friction { r#""friction": {"wall_coefficient": 0.3},"# } else { "" };
        let json = format!(
            r#"{{"name": "slide", "dt": 1e-4, "t_end": 0.02, "particle": {{"mass": 1, "inertia": 0.001, "diameter": 0.1}},
            "stiffness": {{"contact": {k}, "wall": {k}}}, "gravity": [-{g}, 0, 0], {block}
            "walls": [{{"point": [0, 0, 0], "normal": [1, 0, 0]}}],
            "bodies": [{{"type": "particles", "particles": [{{"x": [{x:e}, 0, 0], "v": [0, 0.5, 0]}}]}}]}}"#,
            x = r - s0
        );
        let path = tmp.path().join(format!("slide_{friction}.json"));
        std::fs::write(&path, json).unwrap();
        for backend in [["--backend", "cpu", "--precision", "f64"], ["--backend", "gpu", "--precision", "f64"]] {
            let out = tmp.path().join(format!("out_{friction}_{}", backend[1]));
            let mut args = vec!["run", path.to_str().unwrap(), "--out", out.to_str().unwrap(), "--vtk-every", "50"];
            args.extend(backend);
            let o = rrpdem(&args);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let v = read_back(&out);
            let frames = v["frames"].as_array().unwrap();
            assert_eq!(frames.len(), 5, "frames at steps 0, 50, …, 200");
            for f in &frames[1..] {
                let present = f["point_data"].get("tangential_displacement").is_some();
                assert_eq!(present, friction, "{backend:?}: the field only with friction");
                if !friction {
                    continue;
                }
                let a = array(f, "point_data", "tangential_displacement");
                check_type(a, "f64", 1);
                let s = r - f["coords"][0].as_f64().unwrap();
                let want = 2.0 * mu * s / (3.0 * kappa);
                let got = values(a)[0];
                assert!((got - want).abs() <= 1e-12 * want, "{backend:?}: |ξ| {got} vs 2μs/3κ {want}");
            }
        }
    }
}
