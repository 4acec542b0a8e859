//! CSV tables read by the figures: text cells looked up by column name (RFC 4180 quoting).
use super::PlotError;
use std::path::{Path, PathBuf};

/// A CSV file as text cells, looked up by column name.
#[derive(Clone, Debug)]
pub struct Table {
    pub path: PathBuf,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn read(path: &Path) -> Result<Table, PlotError> {
        let text = std::fs::read_to_string(path).map_err(|source| PlotError::Read { path: path.to_owned(), source })?;
        Table::parse(path, &text)
    }

    /// Parses CSV text; `path` only names the source in errors. A last line without its newline
    /// and with too few fields is dropped: it is a row cut short by a run that was killed.
    pub fn parse(path: &Path, text: &str) -> Result<Table, PlotError> {
        let csv_err = |line: usize, message: String| PlotError::Csv { path: path.to_owned(), line, message };
        let mut lines = text.split_inclusive('\n').enumerate();
        let header = match lines.next() {
            Some((_, l)) if !l.trim().is_empty() => split_csv(l.trim_end_matches(['\n', '\r'])),
            _ => return Err(csv_err(1, "no header line".into())),
        };
        let mut rows = Vec::new();
        for (i, raw) in lines {
            let line = raw.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                continue;
            }
            let cells = split_csv(line);
            if cells.len() != header.len() {
                if !raw.ends_with('\n') && cells.len() < header.len() {
                    break;
                }
                return Err(csv_err(i + 1, format!("{} fields, the header has {}", cells.len(), header.len())));
            }
            rows.push(cells);
        }
        Ok(Table { path: path.to_owned(), header, rows })
    }

    pub fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    pub fn has(&self, name: &str) -> bool {
        self.column(name).is_some()
    }

    /// The column as numbers; an empty cell is a missing value (NaN), any other cell that is not
    /// a number is an error naming its line.
    pub fn numbers(&self, name: &str) -> Result<Vec<f64>, PlotError> {
        let c = self.require(name)?;
        self.rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let cell = r[c].trim();
                if cell.is_empty() {
                    return Ok(f64::NAN);
                }
                cell.parse().map_err(|_| PlotError::Csv {
                    path: self.path.clone(),
                    line: i + 2,
                    message: format!("column `{name}`: `{cell}` is not a number"),
                })
            })
            .collect()
    }

    pub fn texts(&self, name: &str) -> Result<Vec<&str>, PlotError> {
        let c = self.require(name)?;
        Ok(self.rows.iter().map(|r| r[c].as_str()).collect())
    }

    fn require(&self, name: &str) -> Result<usize, PlotError> {
        self.column(name).ok_or_else(|| PlotError::MissingColumn { path: self.path.clone(), column: name.into() })
    }
}

/// Splits one CSV line; a double-quoted field may hold commas, and `""` inside it is a quote.
fn split_csv(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cell.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => cells.push(std::mem::take(&mut cell)),
            _ => cell.push(ch),
        }
    }
    cells.push(cell);
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_quotes() {
        assert_eq!(split_csv(r#"a,"b,c",,"d""e""#), vec!["a", "b,c", "", "d\"e"]);
    }

    #[test]
    fn a_row_cut_short_at_the_end_is_dropped_but_not_in_the_middle() {
        let p = Path::new("s.csv");
        let t = Table::parse(p, "a,b\n1,2\n3").unwrap();
        assert_eq!(t.rows.len(), 1);
        let e = Table::parse(p, "a,b\n1\n3,4\n").unwrap_err();
        assert!(matches!(e, PlotError::Csv { line: 2, .. }), "{e}");
    }
}
