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

    /// Parses CSV text (RFC 4180: a double-quoted field may hold commas, line breaks and `""`
    /// for a quote); `path` only names the source in errors. A last record without its newline
    /// and with too few fields, or ending inside an open quote, is dropped: it is a row cut short
    /// by a run that was killed. Blank lines are skipped.
    pub fn parse(path: &Path, text: &str) -> Result<Table, PlotError> {
        let csv_err = |line: usize, message: String| PlotError::Csv { path: path.to_owned(), line, message };
        let mut records = records(text).map_err(|(line, message)| csv_err(line, message))?.into_iter();
        let header = match records.next() {
            Some(r) if !r.is_blank() => r.cells,
            _ => return Err(csv_err(1, "no header line".into())),
        };
        let mut rows = Vec::new();
        for r in records.filter(|r| !r.is_blank()) {
            if r.end == End::OpenQuote {
                break;
            }
            if r.cells.len() != header.len() {
                if r.end == End::Eof && r.cells.len() < header.len() {
                    break;
                }
                return Err(csv_err(r.line, format!("{} fields, the header has {}", r.cells.len(), header.len())));
            }
            rows.push(r.cells);
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

/// How a CSV record ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// A line break outside quotes.
    Newline,
    /// The end of the text, outside quotes.
    Eof,
    /// The end of the text inside a quoted field that began on the record's last line.
    OpenQuote,
}

/// One record of CSV text: the line it starts on (1-based) and its fields.
#[derive(Debug)]
struct Record {
    line: usize,
    cells: Vec<String>,
    end: End,
    /// Whether the first field was quoted (`""` alone is an empty field, not a blank line).
    quoted_first: bool,
}

impl Record {
    /// An empty or all-blank line, unquoted.
    fn is_blank(&self) -> bool {
        self.cells.len() == 1 && self.cells[0].trim().is_empty() && !self.quoted_first
    }
}

/// Where the reader is within a field.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Start,
    Unquoted,
    Quoted,
    /// Just after a quoted field's closing quote: only `,` or the end of the record may follow.
    Closed,
}

/// Splits CSV text into records by RFC 4180. A quote inside an unquoted field, anything but
/// `,` or a line break after a closing quote, and a quote never closed (unless the text ends
/// on the line it opened on: a record cut short) are errors with their line.
fn records(text: &str) -> Result<Vec<Record>, (usize, String)> {
    let mut out = Vec::new();
    let (mut line, mut start_line, mut quote_line) = (1, 1, 1);
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut state = Field::Start;
    let mut quoted_first = false;
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        if state == Field::Quoted {
            match ch {
                '"' if chars.peek() == Some(&'"') => {
                    cell.push('"');
                    chars.next();
                }
                '"' => state = Field::Closed,
                c => {
                    line += usize::from(c == '\n');
                    cell.push(c);
                }
            }
            continue;
        }
        let newline = ch == '\n' || (ch == '\r' && chars.peek() == Some(&'\n'));
        if newline {
            if ch == '\r' {
                chars.next();
            }
            cells.push(std::mem::take(&mut cell));
            out.push(Record { line: start_line, cells: std::mem::take(&mut cells), end: End::Newline, quoted_first });
            line += 1;
            (start_line, state, quoted_first) = (line, Field::Start, false);
            continue;
        }
        match (state, ch) {
            (_, ',') => {
                cells.push(std::mem::take(&mut cell));
                state = Field::Start;
            }
            (Field::Start, '"') => {
                (state, quote_line) = (Field::Quoted, line);
                quoted_first |= cells.is_empty();
            }
            (Field::Unquoted, '"') => {
                return Err((
                    line,
                    format!(
                        "field {}: a `\"` inside an unquoted field (RFC 4180: quote the whole field and double \
                         the quote)",
                        cells.len() + 1
                    ),
                ));
            }
            (Field::Closed, c) => {
                return Err((
                    line,
                    format!(
                        "field {}: `{c}` after a closing quote (expected `,` or the end of the line)",
                        cells.len() + 1
                    ),
                ));
            }
            (_, c) => {
                cell.push(c);
                state = Field::Unquoted;
            }
        }
    }
    let end = match state {
        Field::Quoted if quote_line == line => End::OpenQuote,
        Field::Quoted => {
            return Err((quote_line, format!("field {}: a quoted field opened here is never closed", cells.len() + 1)));
        }
        _ => End::Eof,
    };
    // Text ending with a line break has no further record.
    if end != End::Eof || state != Field::Start || !cells.is_empty() || !cell.is_empty() {
        cells.push(cell);
        out.push(Record { line: start_line, cells, end, quoted_first });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_quotes() {
        let r = records(r#"a,"b,c",,"d""e""#).unwrap();
        assert_eq!((r.len(), r[0].end), (1, End::Eof));
        assert_eq!(r[0].cells, vec!["a", "b,c", "", "d\"e"]);
    }

    #[test]
    fn a_row_cut_short_at_the_end_is_dropped_but_not_in_the_middle() {
        let p = Path::new("s.csv");
        let t = Table::parse(p, "a,b\n1,2\n3").unwrap();
        assert_eq!(t.rows.len(), 1);
        let e = Table::parse(p, "a,b\n1\n3,4\n").unwrap_err();
        assert!(matches!(e, PlotError::Csv { line: 2, .. }), "{e}");
    }

    /// A study.csv row as the study writer quotes it: array values and text with quotes in
    /// double quotes, `""` for a quote inside.
    #[test]
    fn rfc4180_quoted_cells_in_a_table() {
        let text = "variant,/gravity,/label,status,max_rel_energy_error\n\
                    0,\"[0, 0, -9.81]\",plain,completed,1e-3\n\
                    1,\"[0, 0, 0]\",\"say \"\"hi\"\", then go\",completed,2e-3\n";
        let t = Table::parse(Path::new("study.csv"), text).unwrap();
        assert_eq!(t.texts("/gravity").unwrap(), ["[0, 0, -9.81]", "[0, 0, 0]"]);
        assert_eq!(t.texts("/label").unwrap(), ["plain", "say \"hi\", then go"]);
        assert_eq!(t.numbers("max_rel_energy_error").unwrap(), [1e-3, 2e-3]);
    }

    /// RFC 4180 lets a quoted field hold line breaks; the lines after it keep their numbers.
    #[test]
    fn a_quoted_field_may_span_lines() {
        let p = Path::new("s.csv");
        let t = Table::parse(p, "a,b\r\n1,\"x\r\ny\"\r\n2,z\r\n").unwrap();
        assert_eq!(t.rows, [["1", "x\r\ny"], ["2", "z"]]);
        let e = Table::parse(p, "a,b\n1,\"x\ny\"\n3\n").unwrap_err();
        assert!(matches!(e, PlotError::Csv { line: 4, .. }), "{e}");
    }

    /// A stray quote would otherwise shift or merge fields without a word.
    #[test]
    fn malformed_quotes_are_errors_naming_the_line() {
        let p = Path::new("s.csv");
        for (text, line, what) in [
            ("a,b\n1,2\n1,x\"y\n", 3, "inside an unquoted field"),
            ("a,b\n1,\"x\"y\n", 2, "after a closing quote"),
            ("a,b\n1,\"x\n2,3\n", 2, "never closed"),
        ] {
            let e = Table::parse(p, text).unwrap_err();
            assert!(matches!(e, PlotError::Csv { line: l, .. } if l == line), "{text:?}: {e}");
            assert!(e.to_string().contains(what), "{text:?}: {e}");
        }
    }

    /// A killed writer can stop inside a quoted field of the last row.
    #[test]
    fn a_last_row_cut_short_inside_quotes_is_dropped() {
        let t = Table::parse(Path::new("s.csv"), "a,b\n1,\"[0]\"\n2,\"[0, ").unwrap();
        assert_eq!(t.rows, [["1", "[0]"]]);
    }
}
