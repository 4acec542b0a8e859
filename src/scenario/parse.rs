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
            } else {
                format!("field `{field}`: {inner}")
            }));
        }
    };
    de.end().map_err(|e| parse_err(e.to_string()))?;
    Ok(scenario)
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

/// The path of the error deserialising `v` as `T`, if there is one below the top.
fn path_in<T: DeserializeOwned>(v: Value) -> Option<String> {
    match serde_path_to_error::deserialize::<_, T>(v) {
        Ok(_) => None,
        Err(e) => Some(e.path().to_string()).filter(|p| p != "." && !p.is_empty()),
    }
}
