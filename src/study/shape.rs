//! What a study file's shape must be before serde reads it, and the exact angles of the
//! impact pointers.

use serde_json::Value;

/// What serde's words would not say of a study file's shape: that it ends early, that it is a
/// scenario (no `base` and `vary`), or that `vary` holds other than exactly one of `list`,
/// `grid` and `random`.
pub(super) fn check_shape(text: &str) -> Result<(), String> {
    let v = match serde_json::from_str::<Value>(text) {
        Ok(v) => v,
        Err(e) => return crate::scenario::unfinished(&e).map_or(Ok(()), Err),
    };
    let Some(o) = v.as_object() else { return Ok(()) };
    if !o.contains_key("base") && !o.contains_key("vary") && (o.contains_key("bodies") || o.contains_key("dt")) {
        return Err(
            "this is a scenario (it has no `base` and `vary`), not a study: run it with `rrpdem run FILE`".into()
        );
    }
    if let Some(Value::Object(vary)) = o.get("vary") {
        let keys: Vec<&str> = vary.keys().map(String::as_str).collect();
        if keys.len() != 1 {
            let found = if keys.is_empty() {
                "none".to_string()
            } else {
                format!(
                    "`{}`; to vary two things together use one `grid` of both pointers, or a `list` of objects that \
                     set both",
                    keys.join("`, `")
                )
            };
            return Err(format!("field `vary`: give exactly one of `list`, `grid` or `random` (found {found})"));
        }
    }
    Ok(())
}

/// `(sin a, cos a)` of an angle in degrees, exact at the multiples of 90° (`cos 90°` is 6e-17
/// in radians: a body sent along the wall would move towards it at round-off).
pub(super) fn sin_cos_degrees(a: f64) -> (f64, f64) {
    match a.rem_euclid(360.0) {
        0.0 => (0.0, 1.0),
        90.0 => (1.0, 0.0),
        180.0 => (0.0, -1.0),
        270.0 => (-1.0, 0.0),
        _ => a.to_radians().sin_cos(),
    }
}
