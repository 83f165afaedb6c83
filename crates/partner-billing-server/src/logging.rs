//! The server's log: `text` (the default) or `json`, one JSON object per line with
//! `timestamp`, `level`, `message`, `requestId` (inside a request) and `fields`. A request's
//! id comes from `partner_billing::request_scope`, not from a span.
//! `PARTNER_BILLING_LOG` sets the filter (default `info`).

use std::fmt;

use partner_billing::request_scope;

use crate::log_writer::LogGuard;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; a request's lines carry the prefix `request{request_id=…}:`.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the process's subscriber, writing to stdout from a thread of its own
/// (`log_writer`): a request hands its line over and goes on (a license group commits
/// its next transaction without waiting on a write per license), and lines reach stdout in
/// batches, a few milliseconds after the first line of each. Never lossy. Keep the guard until
/// the process ends; dropping it writes out what is left.
pub fn init(format: LogFormat) -> std::io::Result<LogGuard> {
    let filter =
        EnvFilter::try_from_env("PARTNER_BILLING_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let (writer, guard) = crate::log_writer::start(std::io::stdout())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.event_format(TextLines).init(),
        LogFormat::Json => builder.with_ansi(false).event_format(JsonLines).init(),
    }
    Ok(guard)
}

/// The `text` format: `<timestamp> <LEVEL> request{request_id=…}: <target>: <message> <fields>`,
/// the request part only on a request's lines; level, name and target in colour on a terminal.
pub struct TextLines;

impl<S, N> FormatEvent<S, N> for TextLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let ansi = writer.has_ansi_escapes();
        let paint = |code: &'static str| if ansi { code } else { "" };
        let reset = paint("\x1b[0m");
        SystemTime.format_time(&mut writer)?;
        let level = *event.metadata().level();
        let colour = paint(match level {
            Level::TRACE => "\x1b[35m",
            Level::DEBUG => "\x1b[34m",
            Level::INFO => "\x1b[32m",
            Level::WARN => "\x1b[33m",
            Level::ERROR => "\x1b[31m",
        });
        write!(writer, " {colour}{level:>5}{reset} ")?;
        if let Some(id) = request_scope::current() {
            let bold = paint("\x1b[1m");
            write!(
                writer,
                "{bold}request{{{reset}request_id={id}{bold}}}{reset}: "
            )?;
        }
        let dimmed = paint("\x1b[2m");
        write!(writer, "{dimmed}{}:{reset} ", event.metadata().target())?;
        ctx.format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The `json` format: `{"timestamp","level","message","requestId","fields":{…}}`.
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let mut fields = Fields::default();
        event.record(&mut fields);
        let request_id = request_scope::current();
        let mut line = Map::new();
        line.insert("timestamp".to_owned(), timestamp.into());
        line.insert(
            "level".to_owned(),
            event
                .metadata()
                .level()
                .as_str()
                .to_ascii_lowercase()
                .into(),
        );
        line.insert(
            "message".to_owned(),
            fields.message.unwrap_or_default().into(),
        );
        line.insert(
            "requestId".to_owned(),
            request_id.map_or(Value::Null, |id| Value::from(&*id)),
        );
        line.insert("target".to_owned(), event.metadata().target().into());
        line.insert("fields".to_owned(), Value::Object(fields.others));
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

#[derive(Default)]
struct Fields {
    message: Option<String>,
    others: Map<String, Value>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = Some(text);
        } else {
            self.others.insert(field.name().to_owned(), text.into());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_owned());
        } else {
            self.others.insert(field.name().to_owned(), value.into());
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.others.insert(field.name().to_owned(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.others.insert(field.name().to_owned(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.others.insert(field.name().to_owned(), value.into());
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use partner_billing::request_scope;

    use super::{JsonLines, TextLines};

    /// Lines written by a subscriber, kept for the test to read.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn lines(&self) -> Vec<String> {
            String::from_utf8(self.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    /// One line inside request `req-7` (after a yield, so on a later poll) and one outside.
    fn log_in_and_out_of_a_request(subscriber: impl tracing::Subscriber + Send + Sync) {
        tracing::subscriber::with_default(subscriber, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(request_scope::serve(Arc::from("req-7"), async {
                tokio::task::yield_now().await;
                tracing::info!(status = 200, "request finished");
            }));
            tracing::warn!("no request");
        });
    }

    #[test]
    fn text_lines_carry_the_request_id_prefix_inside_a_request() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .event_format(TextLines)
            .finish();
        log_in_and_out_of_a_request(subscriber);
        let lines = captured.lines();
        assert_eq!(lines.len(), 2, "{lines:?}");
        let (stamp, rest) = lines[0].split_once(' ').unwrap();
        assert!(stamp.ends_with('Z'), "{stamp}");
        assert_eq!(
            rest,
            " INFO request{request_id=req-7}: partner_billing_server::logging::tests: \
             request finished status=200"
        );
        let (_, rest) = lines[1].split_once(' ').unwrap();
        assert_eq!(
            rest,
            " WARN partner_billing_server::logging::tests: no request"
        );
    }

    #[test]
    fn json_lines_carry_the_request_id_inside_a_request() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .event_format(JsonLines)
            .finish();
        log_in_and_out_of_a_request(subscriber);
        let lines: Vec<serde_json::Value> = captured
            .lines()
            .iter()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0]["requestId"], "req-7");
        assert_eq!(lines[0]["message"], "request finished");
        assert_eq!(lines[0]["fields"]["status"], 200);
        assert_eq!(lines[1]["requestId"], serde_json::Value::Null);
        assert_eq!(lines[1]["level"], "warn");
    }
}
