//! How results are printed: one JSON object on stdout with `--json`, short aligned text
//! otherwise. Errors never come through here (see `main.rs`), except part-way through a list
//! printed as it is read ([`Output::emit_stream`]): what was printed stays, cut short.

use std::io::Write;

use anyhow::{Context, Result};
use futures_util::{Stream, TryStreamExt};
use serde::Serialize;

/// The reader of the command's output went away (`| head`): it chose to stop reading, so the
/// command ends quietly. Raised only by writes to stdout ([`Watched`]), never by a broken
/// connection to the database or the service, which is a failure.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// A writer that notes whether its reader went away (a broken pipe).
pub struct Watched<W> {
    inner: W,
    closed: bool,
}

impl<W: Write> Watched<W> {
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            closed: false,
        }
    }

    fn note<T>(&mut self, result: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(err) = &result
            && err.kind() == std::io::ErrorKind::BrokenPipe
        {
            self.closed = true;
        }
        result
    }

    /// `result`, or [`StdoutClosed`] when it failed because the reader went away.
    pub fn unless_closed<T>(&self, result: Result<T>) -> Result<T> {
        match result {
            Err(_) if self.closed => Err(StdoutClosed.into()),
            result => result,
        }
    }
}

impl<W: Write> Write for Watched<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf);
        self.note(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let flushed = self.inner.flush();
        self.note(flushed)
    }
}

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
        let mut stdout = Watched::new(std::io::stdout().lock());
        let text = text.trim_end_matches('\n');
        let written = if text.is_empty() {
            Ok(())
        } else {
            writeln!(stdout, "{text}")
        };
        let written = written
            .and_then(|()| stdout.flush())
            .context("cannot write to stdout");
        stdout.unless_closed(written)
    }

    /// Tells where the next page of a list starts, on stderr, so that stdout stays the page
    /// alone (with `--json` the object carries `nextCursor`).
    pub fn more(&self, next: Option<&str>) {
        if let (Some(cursor), false) = (next, self.json) {
            eprintln!("more: run again with the same options and --cursor {cursor}");
        }
    }
}

/// Aligned columns under a header row, two spaces apart; "(none)" for no rows.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        return "(none)".to_owned();
    }
    let mut widths = Vec::new();
    widen(&mut widths, headers.iter().copied());
    for row in rows {
        widen(&mut widths, row.iter().map(String::as_str));
    }
    let mut out = line(&widths, headers.iter().copied());
    for row in rows {
        out.push('\n');
        out.push_str(&line(&widths, row.iter().map(String::as_str)));
    }
    out
}

/// Widens `widths` to fit `cells`.
fn widen<'a>(widths: &mut Vec<usize>, cells: impl Iterator<Item = &'a str>) {
    for (i, cell) in cells.enumerate() {
        let count = cell.chars().count();
        match widths.get_mut(i) {
            Some(width) => *width = (*width).max(count),
            None => widths.push(count),
        }
    }
}

/// One row of a table, each cell padded to its column's width, two spaces apart.
fn line<'a>(widths: &[usize], cells: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for (i, (cell, width)) in cells.zip(widths).enumerate() {
        if i > 0 {
            out.push_str("  ");
        }
        out.push_str(cell);
        let pad = width.saturating_sub(cell.chars().count());
        out.extend(std::iter::repeat_n(' ', pad));
    }
    out.trim_end().to_owned()
}

/// How many rows a streamed table measures before it prints them.
const STREAMED_TABLE_CHUNK: usize = 500;

impl Output {
    /// Prints a list to `to` as it is read, so that memory does not grow with its length: with
    /// `--json` one object, `head` with `field` set to the items, written item by item;
    /// otherwise a table (see [`table`]) whose columns are measured `STREAMED_TABLE_CHUNK`
    /// rows at a time and only ever widen. A failure part-way stops the output there.
    pub async fn emit_stream<T: Serialize, E: std::error::Error + Send + Sync + 'static>(
        &self,
        to: &mut impl Write,
        head: serde_json::Value,
        field: &str,
        headers: &[&str],
        items: impl Stream<Item = Result<T, E>>,
        row: impl Fn(&T) -> Vec<String>,
    ) -> Result<()> {
        let mut to = Watched::new(to);
        let mut items = std::pin::pin!(items);
        let emitted: Result<()> = async {
            let to = &mut to;
            if self.json {
                let head =
                    serde_json::to_string(&head).context("cannot encode the result as JSON")?;
                let open = head
                    .strip_suffix('}')
                    .context("the head is not a JSON object")?;
                let comma = if open == "{" { "" } else { "," };
                write!(to, "{open}{comma}{}:[", serde_json::to_string(field)?)?;
                let mut first = true;
                while let Some(item) = items.try_next().await? {
                    if !first {
                        to.write_all(b",")?;
                    }
                    first = false;
                    serde_json::to_writer(&mut *to, &item)
                        .context("cannot encode the result as JSON")?;
                }
                writeln!(to, "]}}")?;
            } else {
                let mut table = StreamedTable::new(headers);
                while let Some(item) = items.try_next().await? {
                    table.chunk.push(row(&item));
                    if table.chunk.len() == STREAMED_TABLE_CHUNK {
                        table.print_chunk(to)?;
                    }
                }
                table.print_chunk(to)?;
                if !table.printed_header {
                    writeln!(to, "(none)")?;
                }
            }
            to.flush().context("cannot write to stdout")
        }
        .await;
        to.unless_closed(emitted)
    }
}

/// A table printed a chunk of rows at a time, its header once, before the first chunk.
struct StreamedTable<'h> {
    headers: &'h [&'h str],
    widths: Vec<usize>,
    chunk: Vec<Vec<String>>,
    printed_header: bool,
}

impl<'h> StreamedTable<'h> {
    fn new(headers: &'h [&'h str]) -> Self {
        let mut widths = Vec::new();
        widen(&mut widths, headers.iter().copied());
        Self {
            headers,
            widths,
            chunk: Vec::with_capacity(STREAMED_TABLE_CHUNK),
            printed_header: false,
        }
    }

    /// Widens the columns to fit the chunk and prints it (nothing when it is empty).
    fn print_chunk(&mut self, to: &mut impl Write) -> std::io::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        for cells in &self.chunk {
            widen(&mut self.widths, cells.iter().map(String::as_str));
        }
        if !self.printed_header {
            writeln!(to, "{}", line(&self.widths, self.headers.iter().copied()))?;
            self.printed_header = true;
        }
        for cells in self.chunk.drain(..) {
            writeln!(
                to,
                "{}",
                line(&self.widths, cells.iter().map(String::as_str))
            )?;
        }
        Ok(())
    }
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

    /// Runs `emit_stream` over `items` and returns what it printed.
    fn streamed(json: bool, items: Vec<Result<(String, i64), std::io::Error>>) -> String {
        let mut printed = Vec::new();
        let output = Output { json };
        let write = output.emit_stream(
            &mut printed,
            serde_json::json!({ "clientId": "c" }),
            "entries",
            &["NAME", "N"],
            futures_util::stream::iter(items),
            |(name, n)| vec![name.clone(), n.to_string()],
        );
        let outcome = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(write);
        let printed = String::from_utf8(printed).unwrap();
        match outcome {
            Ok(()) => printed,
            Err(error) => format!("{printed}<error: {error}>"),
        }
    }

    #[test]
    fn streams_a_list_as_one_json_object() {
        let items = vec![Ok(("a".to_owned(), 1)), Ok(("b".to_owned(), 2))];
        assert_eq!(
            streamed(true, items),
            "{\"clientId\":\"c\",\"entries\":[[\"a\",1],[\"b\",2]]}\n"
        );
        assert_eq!(
            streamed(true, vec![]),
            "{\"clientId\":\"c\",\"entries\":[]}\n"
        );
    }

    #[test]
    fn streams_a_table_a_chunk_at_a_time() {
        assert_eq!(streamed(false, vec![]), "(none)\n");
        // The first chunk is measured whole; a wider cell later widens the columns from
        // its chunk on, and the header is printed once.
        let mut items: Vec<_> = (0..STREAMED_TABLE_CHUNK)
            .map(|i| Ok(("a".to_owned(), i64::try_from(i).unwrap())))
            .collect();
        items.push(Ok(("wider".to_owned(), 7)));
        let printed = streamed(false, items);
        let lines: Vec<&str> = printed.lines().collect();
        assert_eq!(lines.len(), STREAMED_TABLE_CHUNK + 2);
        assert_eq!(lines[0], "NAME  N");
        assert_eq!(lines[1], "a     0");
        assert_eq!(lines[STREAMED_TABLE_CHUNK + 1], "wider  7");
        assert_eq!(printed.matches("NAME").count(), 1);
        // A failure part-way stops the output after what was already read.
        let failing = vec![
            Ok(("a".to_owned(), 1)),
            Err(std::io::Error::other("connection lost")),
        ];
        assert_eq!(
            streamed(true, failing),
            "{\"clientId\":\"c\",\"entries\":[[\"a\",1]<error: connection lost>"
        );
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
