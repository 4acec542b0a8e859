//! Bad scenarios give clear errors naming the file and the field (or CSV line), never a panic.

mod common;
use rrpdem::error::ScenarioError;
use rrpdem::scenario::Scenario;
use rrpdem::stability;
use std::path::Path;

const GOOD: &str = r#"{
  "name": "t", "dt": 1e-3, "t_end": 1,
  "particle": {"mass": 1, "inertia": 1, "diameter": 1},
  "stiffness": {"axial": 100, "contact": 1000},
  "bodies": [{"type": "particles", "particles": [{"x": [0,0,0]}, {"x": [1,0,0]}], "bonds": [[0,1]]}]
}"#;

/// Loads `text` as a scenario and builds its model; returns the error message.
fn error_of(text: &str) -> String {
    let path = Path::new("bad.json");
    match Scenario::from_json(text, path).and_then(|s| s.build_model().map(|_| ())) {
        Ok(()) => panic!("expected an error for:\n{text}"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("bad.json"), "error must name the file: {msg}");
            msg
        }
    }
}

fn assert_mentions(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "error `{msg}` should mention `{p}`");
    }
}

#[test]
fn good_scenario_is_accepted() {
    Scenario::from_json(GOOD, Path::new("good.json")).unwrap().build_model().unwrap();
}

#[test]
fn missing_field() {
    assert_mentions(&error_of(&GOOD.replace(r#""dt": 1e-3, "#, "")), &["missing field `dt`"]);
}

#[test]
fn a_null_where_a_value_must_be_says_whether_to_give_one_or_leave_the_field_out() {
    // Before: "field `backend`: expected value" (serde's words for a null enum), and for every
    // other field "invalid type: null", with no hint that leaving a defaulted field out works.
    let defaulted = error_of(&GOOD.replace(r#""t_end": 1"#, r#""t_end": 1, "backend": null"#));
    assert_mentions(&defaulted, &["field `backend`", "null at line 2", "leave the field out"]);
    assert!(!defaulted.contains("expected value"), "{defaulted}");
    let vector = error_of(&GOOD.replace(r#""t_end": 1"#, r#""t_end": 1, "gravity": null"#));
    assert_mentions(&vector, &["field `gravity`", "expected a sequence of 3", "leave the field out"]);
    let inside = error_of(&GOOD.replace(r#"{"x": [1,0,0]}"#, r#"{"x": [1,0,0], "v": null}"#));
    assert_mentions(&inside, &["field `bodies[0].particles[1].v`", "leave the field out"]);
    // A required field has no default to fall back on.
    let required = error_of(&GOOD.replace(r#""dt": 1e-3"#, r#""dt": null"#));
    assert_mentions(&required, &["field `dt`", "expected f64", "give a value"]);
    assert!(!required.contains("leave the field out"), "{required}");
}

#[test]
fn unknown_fields_at_every_level() {
    assert_mentions(&error_of(&GOOD.replace(r#""t_end": 1"#, r#""t_end": 1, "tend": 2"#)), &["unknown field `tend`"]);
    assert_mentions(
        &error_of(&GOOD.replace(r#""inertia": 1,"#, r#""inertia": 1, "radius": 2,"#)),
        &["unknown field `radius`"],
    );
    assert_mentions(
        &error_of(&GOOD.replace(r#"{"x": [1,0,0]}"#, r#"{"x": [1,0,0], "spin": 1}"#)),
        &["unknown field `spin`"],
    );
    assert_mentions(
        &error_of(&GOOD.replace(r#""bonds": [[0,1]]"#, r#""bonds": [[0,1]], "color": 1"#)),
        &["unknown field `color`"],
    );
}

#[test]
fn negative_mass() {
    assert_mentions(&error_of(&GOOD.replace(r#""mass": 1"#, r#""mass": -1"#)), &["particle.mass", "> 0", "-1"]);
    let per_particle = GOOD.replace(r#"{"x": [1,0,0]}"#, r#"{"x": [1,0,0], "mass": -2}"#);
    assert_mentions(&error_of(&per_particle), &["bodies[0].particles[1].mass", "-2"]);
}

#[test]
fn nan_and_infinite_numbers() {
    // JSON has no NaN: the parser names the position.
    assert_mentions(&error_of(&GOOD.replace(r#""dt": 1e-3"#, r#""dt": NaN"#)), &["line 2"]);
    assert_mentions(&error_of(&GOOD.replace(r#""dt": 1e-3"#, r#""dt": 1e999"#)), &["line 2"]);
    // In CSV, "nan" parses as a float and must be rejected by name and line.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.csv"), "x,y,z\n0,0,0\n1,nan,0\n").unwrap();
    let text = GOOD.replace(
        r#"{"type": "particles", "particles": [{"x": [0,0,0]}, {"x": [1,0,0]}], "bonds": [[0,1]]}"#,
        r#"{"type": "csv", "particles": "p.csv"}"#,
    );
    let path = dir.path().join("s.json");
    std::fs::write(&path, text).unwrap();
    let err = Scenario::load(&path).unwrap().build_model().unwrap_err();
    assert!(matches!(err, ScenarioError::Csv { line: 3, .. }), "{err}");
    assert_mentions(&err.to_string(), &["p.csv:3", "column `y`", "finite"]);
}

#[test]
fn bond_to_a_missing_particle() {
    let msg = error_of(&GOOD.replace("[[0,1]]", "[[0,1],[1,7]]"));
    assert_mentions(&msg, &["bodies[0].bonds[1]", "particle 7 does not exist", "2 particles"]);
    assert_mentions(&error_of(&GOOD.replace("[[0,1]]", "[[1,1]]")), &["bonds[0]", "itself"]);
    assert_mentions(&error_of(&GOOD.replace("[[0,1]]", "[[0,1],[1,0]]")), &["bonds[1]", "duplicate"]);
}

#[test]
fn other_invalid_values() {
    assert_mentions(&error_of(&GOOD.replace(r#""t_end": 1"#, r#""t_end": 0"#)), &["t_end"]);
    assert_mentions(&error_of(&GOOD.replace(r#""axial": 100"#, r#""axial": -5"#)), &["stiffness.axial"]);
    let check = GOOD.replace(r#""name": "t","#, r#""name": "t", "order_check_every": 0,"#);
    assert_mentions(&error_of(&check), &["order_check_every", "at least 1"]);
    assert_mentions(
        &error_of(
            &GOOD.replace(r#""integrator""#, "").replace(r#""name": "t","#, r#""name": "t", "integrator": "verlet","#),
        ),
        &["verlet"],
    );
    let wall = GOOD.replace(r#""bodies""#, r#""walls": [{"point": [0,0,0], "normal": [0,0,0]}], "bodies""#);
    assert_mentions(&error_of(&wall), &["walls[0].normal", "non-zero"]);
    let ring = GOOD.replace(
        r#"{"type": "particles", "particles": [{"x": [0,0,0]}, {"x": [1,0,0]}], "bonds": [[0,1]]}"#,
        r#"{"type": "torus_ring", "n": 2, "torus_diameter": 3}"#,
    );
    assert_mentions(&error_of(&ring), &["bodies[0].n", "at least 3"]);
    let both = GOOD.replace(
        r#"{"type": "particles", "particles": [{"x": [0,0,0]}, {"x": [1,0,0]}], "bonds": [[0,1]]}"#,
        r#"{"type": "torus_ring", "n": 8, "torus_diameter": 3, "particle_diameter": 1}"#,
    );
    assert_mentions(&error_of(&both), &["bodies[0]", "either"]);
}

#[test]
fn time_step_above_the_stability_estimate_is_refused_unless_forced() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/torus_impact.json");
    let model = Scenario::load(&path).unwrap().build_model().unwrap();
    let est = stability::estimate(&model);
    // MODEL §5: wall impact at v0 = 1 limits h to about 4e-3 (axial alone: 8.3e-3).
    assert!((3.5e-3..5e-3).contains(&est.h_max), "h_max = {}", est.h_max);
    let err = stability::check_step(1e-2, false, &est).unwrap_err().to_string();
    assert_mentions(&err, &["0.01", "exceeds the stability estimate", "--force"]);
    assert!(stability::check_step(1e-2, true, &est).unwrap().is_some(), "forced: runs with a warning");
    assert!(stability::check_step(3e-3, false, &est).unwrap().is_some(), "above half the limit: a warning");
    assert!(stability::check_step(1e-3, false, &est).unwrap().is_none(), "the paper's step: silent");
}

#[test]
fn speeds_whose_kinetic_energy_overflows_are_refused_and_huge_ones_read_in_scientific_notation() {
    // Before: at |v| = 1e160 (finite, but ½ m v² is not) the stability estimate's impact terms
    // overflowed and dropped out ("time step ok"), and the run failed at step 1 on a NaN energy
    // error; at 1e150 the reasons printed the speed in 151 digits.
    let fast = |v: &str| GOOD.replace(r#"{"x": [1,0,0]}"#, &format!(r#"{{"x": [1,0,0], "v": [0, {v}, 0]}}"#));
    let err = error_of(&fast("1e160"));
    assert_mentions(&err, &["bodies[0].particles[1]", "kinetic energy", "not finite", "[0, 1e160, 0]"]);
    let spin = GOOD.replace(r#"{"x": [1,0,0]}"#, r#"{"x": [1,0,0], "omega": [0, 0, 1e200]}"#);
    assert_mentions(&error_of(&spin), &["bodies[0].particles[1]", "[0, 0, 1e200]"]);
    let walled = fast("1e150").replace(r#""bodies""#, r#""walls": [{"point": [-1,0,0], "normal": [1,0,0]}], "bodies""#);
    let model = Scenario::from_json(&walled, Path::new("fast.json")).unwrap().build_model().unwrap();
    let est = stability::estimate(&model);
    assert!(est.limiting.contains("speed 1.000e150"), "{}", est.limiting);
    let err = stability::check_step(1e-3, true, &est).unwrap().unwrap();
    let pct = err.split("% of the stability estimate").next().unwrap().rsplit(' ').next().unwrap();
    assert!(pct.contains('e') && pct.len() < 12, "{err}");
}

#[test]
fn a_block_given_as_anything_but_an_object_is_refused_with_its_field() {
    // serde would read an array positionally into a struct's fields: `"friction": [0.3, 0.5, 2]`
    // ran as μ = 0.3, μ_w = 0.5, κ = 2 without a word. A number or string named the internal type.
    let with = |field: &str, value: &str| GOOD.replacen("\"bodies\"", &format!("\"{field}\": {value}, \"bodies\""), 1);
    let cases = [
        (with("friction", "[0.3, 0.5, 2.0]"), "`friction`", "an array"),
        (with("damping", "0.5"), "`damping`", "the number 0.5"),
        (with("damping", r#"{"binder": [1, 1]}"#), "`damping.binder`", "an array"),
        (with("rupture", r#"{"tension": 0.1, "weibull": [5, 1]}"#), "`rupture.weibull`", "an array"),
        (with("walls", "[[0, 0, 0]]"), "`walls[0]`", "an array"),
        (with("output", "\"vtk\""), "`output`", "the string \"vtk\""),
        (
            GOOD.replace(r#""stiffness": {"axial": 100, "contact": 1000}"#, r#""stiffness": [100, 1000]"#),
            "`stiffness`",
            "an array",
        ),
        (
            GOOD.replace(r#""particle": {"mass": 1, "inertia": 1, "diameter": 1}"#, r#""particle": true"#),
            "`particle`",
            "`true`",
        ),
    ];
    for (text, field, found) in cases {
        let msg = error_of(&text);
        assert_mentions(&msg, &[field, "expected an object of named fields such as {", found]);
        assert!(!msg.contains("struct"), "no internal type names: {msg}");
    }
    // `null` is the block left out.
    Scenario::from_json(&with("damping", "null"), Path::new("good.json")).unwrap().build_model().unwrap();
}

#[test]
fn a_generated_body_s_own_fields_are_checked_when_the_scenario_is_read() {
    // Before: a ring of 0 particles or a solid torus without a diameter passed `Scenario`'s
    // validation (Python's `rrpdem.Scenario(…)` accepted them) and failed only when built.
    let with = |body: &str| {
        GOOD.replace(r#"{"type": "particles", "particles": [{"x": [0,0,0]}, {"x": [1,0,0]}], "bonds": [[0,1]]}"#, body)
    };
    for (body, field, what) in [
        (r#"{"type": "torus_ring", "n": 0, "torus_diameter": 3}"#, "bodies[0].n", "at least 3"),
        (
            r#"{"type": "torus_solid", "torus_diameter": -3, "tube_diameter": 1, "particles": 1000}"#,
            "bodies[0].torus_diameter",
            "",
        ),
        (r#"{"type": "block_solid", "size": [1, 0, 1], "particles": 1000}"#, "bodies[0].size[1]", ""),
    ] {
        let text = with(body);
        assert_ne!(text, GOOD);
        match Scenario::from_json(&text, Path::new("bad.json")) {
            Ok(_) => panic!("{body}: accepted when read"),
            Err(e) => assert_mentions(&e.to_string(), &["bad.json", field, what]),
        }
    }
}

/// A file of the wrong kind, or one that ends early, says so: a study read as a scenario was
/// a dump of unknown fields (`base`, `vary`), a scenario read as a study the same, a `vary` of
/// two kinds or none "expected value at line 1 column 69", a truncated file "field `?`: EOF".
#[test]
fn the_wrong_kind_of_file_and_a_truncated_one_are_named_as_such() {
    let study = r#"{"name": "s", "base": "torus_impact.json", "vary": {"list": [{"/dt": 0.001}]}}"#;
    assert_mentions(&error_of(study), &["this is a study", "rrpdem study"]);
    assert_mentions(&error_of(&GOOD[..GOOD.len() / 2]), &["ends before its JSON is complete", "line "]);
    let path = Path::new("bad_study.json");
    let study_error = |text: &str| rrpdem::study::Study::from_json(text, path).unwrap_err().to_string();
    assert_mentions(&study_error(GOOD), &["bad_study.json", "this is a scenario", "rrpdem run"]);
    assert_mentions(&study_error(&study[..40]), &["bad_study.json", "ends before its JSON is complete"]);
    let two = r#"{"name": "s", "base": "t.json", "vary": {"list": [{"/dt": 0.001}], "grid": {"/dt": [0.001]}}}"#;
    assert_mentions(
        &study_error(two),
        &["field `vary`", "exactly one of `list`, `grid` or `random`", "`grid`, `list`"],
    );
    let none = r#"{"name": "s", "base": "t.json", "vary": {}}"#;
    assert_mentions(&study_error(none), &["field `vary`", "(found none)"]);
}
