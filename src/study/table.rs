//! `study.csv`: one row per variant, its varied values and its outcome measures, from what its
//! folder holds (`folder::inspect`, so a variant of another study is never shown as this one's);
//! the same code for a whole run, a shard's merge and `--resume`. Cells follow RFC 4180: one
//! holding a comma, a quote or a line break (an array-valued override, a status text) is quoted.

use super::Study;
use super::folder::{VariantState, inspect};
use serde_json::Value;
use std::path::Path;

/// Columns of `study.csv` after `variant` and the varied pointers.
pub const OUTCOME_COLUMNS: [&str; 21] = [
    "status",
    "steps",
    "t_final",
    "max_rel_energy_error",
    "conserved_drift_p",
    "conserved_drift_s",
    "conserved_drift_l",
    "n_broken",
    "broken_fraction",
    "n_fragments",
    "largest_fragment_fraction",
    "debris_fraction",
    "first_contact_t",
    "contact_duration",
    "peak_wall_force",
    "impact_speed",
    "rebound_speed",
    "restitution",
    "e_dissipated",
    "wall_time_s",
    "particle_steps_per_s",
];

/// The study table and what each variant's folder holds (in variant order).
pub struct Table {
    pub csv: String,
    pub states: Vec<VariantState>,
}

/// The study table of `study` (read from `path`) from the variants' folders in `out`. A
/// variant's outcome cells are filled from its summary where it has one of this variant
/// (completed, failed or interrupted), and left empty otherwise.
pub fn table(study: &Study, path: &Path, out: &Path) -> Table {
    let mut header = vec!["variant".to_string()];
    header.extend(study.columns.iter().map(|c| quote(c.clone())));
    header.extend(OUTCOME_COLUMNS.iter().map(|c| c.to_string()));
    let mut csv = header.join(",");
    csv.push('\n');
    let mut states = Vec::with_capacity(study.variants.len());
    for k in 0..study.variants.len() {
        let (state, summary) = inspect(study, path, out, k);
        let mut row = vec![k.to_string()];
        row.extend(study.columns.iter().map(|c| study.variants[k].get(c).map(cell).unwrap_or_default()));
        row.push(state.label().to_string());
        match summary {
            None => row.extend(std::iter::repeat_n(String::new(), OUTCOME_COLUMNS.len() - 1)),
            Some(s) => {
                let b = &s["energy_and_momenta"];
                // A drift along no conserved direction is no figure (empty), not a perfect 0.
                let along = |k: &str| {
                    let none = b["conserved"][k].as_array().is_some_and(|a| a.is_empty());
                    if none { &Value::Null } else { &b[format!("conserved_drift_{k}").as_str()] }
                };
                let i = &s["impact"];
                let f = &s["fragments"];
                let values = [
                    &s["steps"],
                    &s["t_final"],
                    &b["max_rel_energy_deviation"],
                    along("p"),
                    along("s"),
                    along("l"),
                    &s["final_diagnostics"]["n_broken"],
                    &i["broken_fraction"],
                    &f["count"],
                    &f["largest_mass_fraction"],
                    &f["debris_mass_fraction"],
                    &i["first_contact_t"],
                    &i["contact_duration"],
                    &i["peak_wall_force"],
                    &i["impact_speed"],
                    &i["rebound_speed"],
                    &i["restitution"],
                    &s["final_diagnostics"]["e_dissipated"],
                    &s["wall_time_s"],
                    &s["particle_steps_per_s"],
                ];
                row.extend(values.into_iter().map(cell));
            }
        }
        csv.push_str(&row.join(","));
        csv.push('\n');
        states.push(state);
    }
    Table { csv, states }
}

/// A JSON value as one CSV cell: strings as they are, anything else (numbers, arrays, objects)
/// as its JSON text, quoted where RFC 4180 needs it.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => quote(s.clone()),
        other => quote(other.to_string()),
    }
}

/// `text` as an RFC 4180 field: quoted (inner quotes doubled) when it holds a comma, a quote or
/// a line break.
fn quote(text: String) -> String {
    if text.contains([',', '"', '\n', '\r']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text }
}

/// The records of RFC 4180 CSV text (quoted fields may hold commas, doubled quotes and line
/// breaks; CRLF or LF line ends), or where it is malformed.
pub fn csv_records(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let (mut line, mut quoted_from) = (1usize, None);
    let mut at_start = true;
    while let Some(c) = chars.next() {
        if let Some(from) = quoted_from {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => {
                    quoted_from = None;
                    if !matches!(chars.peek(), None | Some(',' | '\n' | '\r')) {
                        return Err(format!(
                            "line {line}: text after the closing quote of a field opened on line {from}"
                        ));
                    }
                }
                _ => {
                    line += usize::from(c == '\n');
                    field.push(c);
                }
            }
            continue;
        }
        match c {
            '"' if at_start => quoted_from = Some(line),
            '"' => return Err(format!("line {line}: a quote inside an unquoted field")),
            ',' => {
                record.push(std::mem::take(&mut field));
                at_start = true;
                continue;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' | '\r' => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
                line += 1;
                at_start = true;
                continue;
            }
            _ => field.push(c),
        }
        at_start = false;
    }
    if let Some(from) = quoted_from {
        return Err(format!("the quoted field opened on line {from} is not closed"));
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_cells_read_back() {
        let cells = [r#"[0,-9.81,0]"#, "plain", r#"say "hi", twice"#, "two\nlines", ""];
        let line: Vec<String> = cells.iter().map(|c| quote(c.to_string())).collect();
        let text = format!("a,b,c,d,e\r\n{}\n", line.join(","));
        let records = csv_records(&text).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1], cells.iter().map(|c| c.to_string()).collect::<Vec<_>>());
        assert!(csv_records("a,\"b\"c\n").is_err());
        assert!(csv_records("a,b\"c\n").is_err());
        assert!(csv_records("\"a,b\n").is_err());
    }
}
