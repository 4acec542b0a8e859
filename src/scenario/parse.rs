//! Scenario JSON to a `Scenario`, with errors that name the field: serde's own messages say what
//! was expected and where (line, column) but not in which field, so the deserialiser is wrapped
//! to track the path (`serde_path_to_error`). Bodies are an internally tagged enum, which serde
//! buffers before it picks the variant, so a path stops at `bodies[k]`; for those errors the
//! body is parsed once more as its own type to find the field inside it (only on the error path:
//! a valid file is parsed once).

use super::{BlockSolid, Body, ClumpBody, CsvBody, ParticleList, PendulumBody, Scenario, TorusRing, TorusSolid};
use crate::error::ScenarioError;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::Path;

/// Parses scenario text (not yet validated). A UTF-8 byte-order mark is skipped (editors on
/// Windows write one); anything but a JSON object is refused up front, because serde would
/// read a JSON array positionally as the scenario's fields ("expected a string").
pub(crate) fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let parse_err = |message: String| ScenarioError::Parse { path: path.to_owned(), message };
    match text.trim_start().chars().next() {
        None => {
            return Err(parse_err("line 1: the file is empty: expected a scenario object `{\"name\": …, …}`".into()));
        }
        Some('{') => {}
        Some(c) => {
            let what = match c {
                '[' => "a JSON array".to_string(),
                '"' => "a JSON string".to_string(),
                c => format!("`{c}`"),
            };
            return Err(parse_err(format!(
                "line 1: a scenario is a JSON object `{{\"name\": …, \"dt\": …, …}}`; this file starts with {what}"
            )));
        }
    }
    check_kind(text).map_err(parse_err)?;
    check_objects(text).map_err(parse_err)?;
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed: Result<Scenario, _> = serde_path_to_error::deserialize(&mut de);
    let scenario = match parsed {
        Ok(s) => s,
        Err(e) => {
            let field = e.path().to_string();
            let inner = e.into_inner().to_string();
            let field = refine(text, &field).unwrap_or(field);
            return Err(parse_err(if field == "." || field.is_empty() {
                inner
            } else if value_at(text, &field).is_some_and(|v| v.is_null()) {
                // serde's words for a null where a value must be ("invalid type: null", for an
                // enum "expected value") do not say what to do.
                let (what, at) =
                    inner.split_once(" at line ").map_or((inner.as_str(), ""), |(w, _)| (w, &inner[w.len()..]));
                let what = what.trim_start_matches("invalid type: null, ");
                let what = if what == "expected value" { String::new() } else { format!(" ({what})") };
                let fix = if required(text, &field) { "give a value" } else { "leave the field out for its default" };
                format!("field `{field}`: null{at} is not a value this field takes{what}; {fix}")
            } else {
                format!("field `{field}`: {inner}")
            }));
        }
    };
    de.end().map_err(|e| parse_err(e.to_string()))?;
    Ok(scenario)
}

/// Refuses a study file given where a scenario is read (its fields `base` and `vary` would be
/// listed as unknown, which does not say what the file is) and text that ends early.
fn check_kind(text: &str) -> Result<(), String> {
    // Only these two fields are kept: a scenario with 10⁸ particles inline is not copied.
    #[derive(serde::Deserialize)]
    struct Kind {
        base: Option<serde::de::IgnoredAny>,
        vary: Option<serde::de::IgnoredAny>,
    }
    match serde_json::from_str::<Kind>(text) {
        Ok(Kind { base: Some(_), vary: Some(_) }) => {
            Err("this is a study (it has `base` and `vary`), not a scenario: run it with `rrpdem study FILE`".into())
        }
        Err(e) => unfinished(&e).map_or(Ok(()), Err),
        _ => Ok(()),
    }
}

/// What to say of a JSON file that ends early (serde's "EOF while parsing" under a field `?`);
/// `None` for any other error. Scenario and study files alike.
pub(crate) fn unfinished(e: &serde_json::Error) -> Option<String> {
    e.is_eof().then(|| {
        format!(
            "the file ends before its JSON is complete (line {}, column {}): a bracket or brace is not closed",
            e.line(),
            e.column()
        )
    })
}

/// For an error at `bodies[k]` (a path that stops at a body), the path inside the body: the body
/// parsed alone as the type its `type` names.
fn refine(text: &str, field: &str) -> Option<String> {
    let k: usize = field.strip_prefix("bodies[")?.strip_suffix(']')?.parse().ok()?;
    let root: Value = serde_json::from_str(text).ok()?;
    let mut body = root.get("bodies")?.get(k)?.clone();
    let kind = body.as_object_mut()?.remove("type")?;
    let inner = match kind.as_str()? {
        "torus_ring" => path_in::<TorusRing>(body),
        "torus_solid" => path_in::<TorusSolid>(body),
        "block_solid" => path_in::<BlockSolid>(body),
        "pendulum" => path_in::<PendulumBody>(body),
        "particles" => path_in::<ParticleList>(body),
        "csv" => path_in::<CsvBody>(body),
        "clump" => path_in::<ClumpBody>(body),
        _ => None,
    }?;
    // Every variant is listed above: a new one must be added there too.
    let _exhaustive = |b: &Body| match b {
        Body::TorusRing(_)
        | Body::TorusSolid(_)
        | Body::BlockSolid(_)
        | Body::Pendulum(_)
        | Body::Particles(_)
        | Body::Csv(_)
        | Body::Clump(_) => (),
    };
    Some(if inner.starts_with('[') { format!("{field}{inner}") } else { format!("{field}.{inner}") })
}

/// The JSON value at an error's path (`a.b[2].c`, as `serde_path_to_error` writes it).
fn value_at(text: &str, field: &str) -> Option<Value> {
    let mut root: Value = serde_json::from_str(text).ok()?;
    pointer_mut(&mut root, field).map(std::mem::take)
}

/// Whether the scenario still misses the field at `field` (a path to an object's member) once
/// it is left out: a required field, which has no default to fall back on.
fn required(text: &str, field: &str) -> bool {
    let Ok(mut root) = serde_json::from_str::<Value>(text) else { return false };
    let (parent, name) = field.rsplit_once('.').map_or(("", field), |(p, n)| (p, n));
    let slot = if parent.is_empty() { Some(&mut root) } else { pointer_mut(&mut root, parent) };
    if let Some(Value::Object(o)) = slot {
        o.remove(name);
    }
    match serde_path_to_error::deserialize::<_, Scenario>(root) {
        Ok(_) => false,
        Err(e) => e.into_inner().to_string().contains(&format!("missing field `{name}`")),
    }
}

/// The value at an error's path (`a.b[2].c`), mutably.
fn pointer_mut<'v>(root: &'v mut Value, field: &str) -> Option<&'v mut Value> {
    let mut v = root;
    for part in field.split('.') {
        let (name, rest) = part.split_once('[').map_or((part, ""), |(n, r)| (n, r));
        if !name.is_empty() {
            v = v.get_mut(name)?;
        }
        for index in rest.split('[').filter(|i| !i.is_empty()) {
            let k: usize = index.trim_end_matches(']').parse().ok()?;
            v = v.get_mut(k)?;
        }
    }
    Some(v)
}

/// The path of the error deserialising `v` as `T`, if there is one below the top.
fn path_in<T: DeserializeOwned>(v: Value) -> Option<String> {
    match serde_path_to_error::deserialize::<_, T>(v) {
        Ok(_) => None,
        Err(e) => Some(e.path().to_string()).filter(|p| p != "." && !p.is_empty()),
    }
}

/// The scenario's blocks that are JSON objects of named fields, as read apart from the rest
/// (every other field skipped unread), for `check_objects`.
#[derive(serde::Deserialize)]
struct Blocks {
    #[serde(default)]
    particle: Option<Value>,
    #[serde(default)]
    stiffness: Option<Value>,
    #[serde(default)]
    pendulum: Option<Value>,
    #[serde(default)]
    rupture: Option<Value>,
    #[serde(default)]
    damping: Option<Value>,
    #[serde(default)]
    friction: Option<Value>,
    #[serde(default)]
    gravitation: Option<Value>,
    #[serde(default)]
    output: Option<Value>,
    #[serde(default)]
    walls: Option<Value>,
}

/// Refuses a block given as anything but an object (`null` aside, which means "absent"): serde
/// reads a JSON array positionally into a struct's fields (`"friction": [0.3, 0.5, 2]` would run
/// as coefficient, wall coefficient and stiffness ratio without a word), and its message for a
/// number or a string names the internal type ("expected struct DampingSpec"). The error names
/// the field and shows the form expected. A text that is not JSON is left to the parse proper,
/// whose message says where.
fn check_objects(text: &str) -> Result<(), String> {
    let Ok(blocks) = serde_json::from_str::<Blocks>(text) else { return Ok(()) };
    let check = |field: &str, v: Option<&Value>| match v {
        Some(v) if !(v.is_object() || v.is_null()) => Err(format!(
            "field `{field}`: expected an object of named fields such as {}, found {}",
            block_example(field),
            found(v)
        )),
        _ => Ok(()),
    };
    let Blocks { particle, stiffness, pendulum, rupture, damping, friction, gravitation, output, walls } = blocks;
    for (field, v) in [
        ("particle", &particle),
        ("stiffness", &stiffness),
        ("pendulum", &pendulum),
        ("rupture", &rupture),
        ("damping", &damping),
        ("friction", &friction),
        ("gravitation", &gravitation),
        ("output", &output),
    ] {
        check(field, v.as_ref())?;
    }
    check("damping.binder", damping.as_ref().and_then(|d| d.get("binder")))?;
    check("rupture.weibull", rupture.as_ref().and_then(|r| r.get("weibull")))?;
    if let Some(Value::Array(walls)) = &walls {
        for (k, w) in walls.iter().enumerate() {
            check(&format!("walls[{k}]"), Some(w))?;
        }
    }
    Ok(())
}

/// An example of the block `field` as `check_objects` shows it (each parses: a unit test).
fn block_example(field: &str) -> &'static str {
    match field {
        "particle" => r#"{"mass": 1, "inertia": 0.1, "diameter": 0.1}"#,
        "stiffness" => r#"{"bending": 10, "axial": 200, "shear": 200, "contact": 2100}"#,
        "pendulum" => r#"{"g": 1, "rho0": [0, 0, 1], "up": [0, 0, 1]}"#,
        "rupture" => r#"{"tension": 0.02, "shear": 0.2}"#,
        "damping" => r#"{"restitution": 0.5, "binder": {"axial": 0.1}}"#,
        "damping.binder" => r#"{"axial": 0.1, "shear": 0.1, "bending": 0.01, "twist": 0.01}"#,
        "friction" => r#"{"coefficient": 0.3, "wall_coefficient": 0.5}"#,
        "gravitation" => r#"{"G": 1}"#,
        "output" => r#"{"vtk_every": 100}"#,
        "rupture.weibull" => r#"{"modulus": 5, "seed": 1}"#,
        _ => r#"{"point": [0, 0, 0], "normal": [0, 0, 1]}"#,
    }
}

/// What a JSON value is, in an error's words.
fn found(v: &Value) -> String {
    match v {
        Value::Array(_) => "an array (its items would be taken for the fields in order)".to_string(),
        Value::String(s) => format!("the string \"{s}\""),
        Value::Bool(b) => format!("`{b}`"),
        Value::Number(n) => format!("the number {n}"),
        Value::Null | Value::Object(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_example_parses_as_its_block() {
        let particle = r#""particle": {"mass": 1, "inertia": 1, "diameter": 1}"#;
        let base = |extra: &str| {
            format!(
                r#"{{"name": "e", "dt": 1e-3, "t_end": 1, {particle}, {extra}
                "bodies": [{{"type": "particles", "particles": [{{"x": [0, 0, 1]}}]}}]}}"#
            )
        };
        let fields = [
            "particle",
            "stiffness",
            "pendulum",
            "rupture",
            "damping",
            "damping.binder",
            "friction",
            "gravitation",
            "output",
            "rupture.weibull",
            "walls[0]",
        ];
        for field in fields {
            let ex = block_example(field);
            let text = match field {
                "particle" => base("").replacen(particle, &format!(r#""particle": {ex}"#), 1),
                "damping.binder" => base(&format!(r#""damping": {{"binder": {ex}}},"#)),
                "rupture.weibull" => base(&format!(r#""rupture": {{"tension": 0.1, "weibull": {ex}}},"#)),
                "walls[0]" => base(&format!(r#""walls": [{ex}],"#)),
                f => base(&format!(r#""{f}": {ex},"#)),
            };
            parse(&text, Path::new("e.json")).unwrap_or_else(|e| panic!("{field}: {e}"));
        }
    }
}
