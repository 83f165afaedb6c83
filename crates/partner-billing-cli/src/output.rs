//! How results are printed: one JSON object on stdout with `--json`, short aligned text
//! otherwise. Errors never come through here (see `main.rs`).

use std::io::Write;

use anyhow::{Context, Result};
use serde::Serialize;

/// The output mode chosen by `--json`.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `value` as one compact JSON object, or the text `human` builds.
    pub fn emit<T: Serialize + ?Sized>(
        &self,
        value: &T,
        human: impl FnOnce() -> String,
    ) -> Result<()> {
        let text = if self.json {
            serde_json::to_string(value).context("cannot encode the result as JSON")?
        } else {
            human()
        };
        let mut stdout = std::io::stdout().lock();
        let text = text.trim_end_matches('\n');
        if !text.is_empty() {
            writeln!(stdout, "{text}").context("cannot write to stdout")?;
        }
        stdout.flush().context("cannot write to stdout")
    }
}

/// Aligned columns under a header row, two spaces apart; "(none)" for no rows.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        return "(none)".to_owned();
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, (cell, width)) in cells.zip(&widths).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(cell);
            let pad = width.saturating_sub(cell.chars().count());
            out.extend(std::iter::repeat_n(' ', pad));
        }
        out.trim_end().to_owned()
    };
    let mut out = line(&mut headers.iter().copied());
    for row in rows {
        out.push('\n');
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// `key: value` lines with the values aligned.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k}:{}{v}", " ".repeat(width - k.chars().count() + 1)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Unix seconds as RFC 3339 UTC, e.g. `2024-05-01T12:00:00Z` (the seconds themselves outside
/// years 0-9999, which no time the service writes is).
pub fn utc(seconds: i64) -> String {
    partner_billing::utc::rfc3339(seconds).unwrap_or_else(|| seconds.to_string())
}

/// An optional timestamp, `-` when absent.
pub fn opt_utc(seconds: Option<i64>) -> String {
    seconds.map_or_else(|| "-".to_owned(), utc)
}

/// An optional text, `-` when absent.
pub fn opt(text: Option<&str>) -> String {
    text.map_or_else(|| "-".to_owned(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_714_564_800), "2024-05-01T12:00:00Z");
        assert_eq!(utc(-1), "1969-12-31T23:59:59Z");
        assert_eq!(utc(253_402_300_800), "253402300800", "year 10000");
    }

    #[test]
    fn aligns_tables() {
        let rows = vec![
            vec!["a".to_owned(), "bbb".to_owned()],
            vec!["cc".to_owned(), "d".to_owned()],
        ];
        assert_eq!(table(&["X", "Y"], &rows), "X   Y\na   bbb\ncc  d");
        assert_eq!(table(&["X"], &[]), "(none)");
        assert_eq!(
            fields(&[("a", "1".into()), ("bbb", "2".into())]),
            "a:   1\nbbb: 2"
        );
    }
}
