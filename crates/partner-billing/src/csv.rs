//! The one CSV writer of the project (the panel's ledger download, the CLI's promo codes
//! file), on the `csv` crate: RFC 4180 quoting, one line at a time so a long export streams.
//!
//! Text cells are guarded against formula injection: a text that begins with `=`, `+`, `-`,
//! `@`, a tab or a carriage return is prefixed with `'`, so a spreadsheet shows it instead of
//! running it. Numbers are written as they are (a negative amount stays a number).

/// One cell of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell<'a> {
    /// Text, guarded and quoted as needed.
    Text(&'a str),
    /// A number, written as is.
    Int(i64),
}

/// The characters that make a spreadsheet read a text cell as a formula.
const FORMULA_STARTS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// One CSV line, `\n`-terminated.
pub fn line(cells: &[Cell<'_>]) -> Vec<u8> {
    let fields: Vec<String> = cells
        .iter()
        .map(|cell| match cell {
            Cell::Int(n) => n.to_string(),
            Cell::Text(text) if text.starts_with(FORMULA_STARTS) => format!("'{text}"),
            Cell::Text(text) => (*text).to_owned(),
        })
        .collect();
    let mut writer = ::csv::WriterBuilder::new()
        .terminator(::csv::Terminator::Any(b'\n'))
        .from_writer(Vec::with_capacity(64));
    // Writing to a Vec cannot fail.
    let _ = writer.write_record(&fields);
    writer.into_inner().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(cells: &[Cell<'_>]) -> String {
        String::from_utf8(line(cells)).unwrap()
    }

    #[test]
    fn quotes_what_needs_quoting() {
        assert_eq!(text(&[Cell::Text("a"), Cell::Int(-3)]), "a,-3\n");
        assert_eq!(text(&[Cell::Text("we,ird\"")]), "\"we,ird\"\"\"\n");
        assert_eq!(text(&[Cell::Text("two\nlines")]), "\"two\nlines\"\n");
        assert_eq!(text(&[Cell::Text(""), Cell::Text("")]), ",\n");
    }

    #[test]
    fn formulas_are_shown_not_run() {
        for formula in ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"] {
            let out = text(&[Cell::Text(formula)]);
            assert!(
                out.starts_with("'") || out.starts_with("\"'"),
                "{formula:?} -> {out:?}"
            );
        }
        assert_eq!(
            text(&[Cell::Text("=HYPERLINK(\"x\")")]),
            "\"'=HYPERLINK(\"\"x\"\")\"\n"
        );
        // Numbers are not text: a negative amount stays a number.
        assert_eq!(text(&[Cell::Int(-1)]), "-1\n");
    }
}
