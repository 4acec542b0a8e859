//! Where two JSON documents first differ (a JSON Pointer and both values, shortened): what a
//! refusal says when a folder's study or a checkpoint's scenario is not the one given.

use serde_json::Value;
use std::fmt;

/// The first place where two documents differ, and whose the expected one is.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    /// JSON Pointer of the place (empty: the top level).
    pub at: String,
    pub found: String,
    pub expected: String,
    /// Whose document `expected` comes from ("this study", "scenario x.json").
    pub other: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.at.is_empty() { "the top level" } else { &self.at };
        write!(f, "at `{at}` it has {} where {} has {}", self.found, self.other, self.expected)
    }
}

/// The first place (objects in key order, arrays in index order) where `found` and `expected`
/// differ, if they do; `other` says whose `expected` is.
pub fn first_difference(found: &Value, expected: &Value, other: &str) -> Option<Difference> {
    first_at(found, expected, "", other)
}

fn first_at(found: &Value, expected: &Value, at: &str, other: &str) -> Option<Difference> {
    let show = |v: Option<&Value>| match v {
        None => "nothing".to_string(),
        Some(v) => {
            let t = v.to_string();
            match t.char_indices().nth(60) {
                Some((i, _)) => format!("{}…", &t[..i]),
                None => t,
            }
        }
    };
    let differ = |at: String, x: Option<&Value>, y: Option<&Value>| {
        Some(Difference { at, found: show(x), expected: show(y), other: other.to_string() })
    };
    match (found, expected) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => first_at(x, y, &here, other),
                    (x, y) => differ(here, x, y),
                }
            })
        }
        // Arrays entry by entry, then by length: the first entry that differs says more than the
        // whole arrays, which a list of bodies or variants makes long.
        (Value::Array(a), Value::Array(b)) => {
            a.iter().zip(b).enumerate().find_map(|(i, (x, y))| first_at(x, y, &format!("{at}/{i}"), other)).or_else(
                || {
                    (a.len() != b.len()).then(|| Difference {
                        at: at.to_string(),
                        found: format!("{} entries", a.len()),
                        expected: format!("{} entries", b.len()),
                        other: other.to_string(),
                    })
                },
            )
        }
        (a, b) if a == b => None,
        _ => differ(at.to_string(), Some(found), Some(expected)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_the_first_differing_place_in_key_order() {
        let a = json!({"b": [1, {"c~/d": 2}], "a": "x", "z": 1});
        let b = json!({"b": [1, {"c~/d": 3}], "a": "x"});
        let d = first_difference(&a, &b, "that one").unwrap();
        assert_eq!((d.at.as_str(), d.found.as_str(), d.expected.as_str()), ("/b/1/c~0~1d", "2", "3"));
        assert_eq!(d.to_string(), "at `/b/1/c~0~1d` it has 2 where that one has 3");
        let d = first_difference(&json!({"a": 1, "z": 1}), &json!({"a": 1}), "it").unwrap();
        assert_eq!((d.at.as_str(), d.expected.as_str()), ("/z", "nothing"));
        let d = first_difference(&json!({"v": [1, 2]}), &json!({"v": [1]}), "it").unwrap();
        assert_eq!(d.to_string(), "at `/v` it has 2 entries where it has 1 entries");
        let d = first_difference(&json!([1, 2]), &json!([3]), "it").unwrap();
        assert_eq!((d.at.as_str(), d.found.as_str()), ("/0", "1"));
        assert!(first_difference(&a, &a.clone(), "it").is_none());
        let long = json!("x".repeat(100));
        assert!(first_difference(&long, &json!(1), "it").unwrap().found.ends_with('…'));
    }
}
