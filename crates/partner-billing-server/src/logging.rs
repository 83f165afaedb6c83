//! The server's log: `text` (the default) or `json`, one JSON object per line with
//! `timestamp`, `level`, `message`, `requestId` (inside a request) and `fields`.
//! `PARTNER_BILLING_LOG` sets the filter (default `info`).

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; the request id shows in the `request{…}` span prefix.
    Text,
    /// One JSON object per line.
    Json,
}

/// Log lines queued for the writer thread at most (a few MB); past that, loggers wait.
const LINES_QUEUED: usize = 16_384;

/// Installs the process's subscriber, writing to stdout from a thread of its own: a request
/// hands its line over and goes on (a license group commits its next transaction without
/// waiting on a write per license), and lines reach stdout in batches, flushed whenever the
/// queue empties. Never lossy: when the queue is full (16 384 lines), loggers wait. Keep the
/// guard until the process ends; dropping it writes out what is queued.
pub fn init(format: LogFormat) -> WorkerGuard {
    let filter =
        EnvFilter::try_from_env("PARTNER_BILLING_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(LINES_QUEUED)
        .thread_name("log-writer")
        .finish(std::io::BufWriter::new(std::io::stdout()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.with_ansi(false).event_format(JsonLines).init(),
    }
    guard
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
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let mut fields = Fields::default();
        event.record(&mut fields);
        let request_id = ctx.event_scope().and_then(|scope| {
            scope.from_root().find_map(|span| {
                let extensions = span.extensions();
                let formatted = extensions.get::<FormattedFields<N>>()?;
                request_id_of(formatted.fields.as_str())
            })
        });
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
            request_id.map_or(Value::Null, Value::from),
        );
        line.insert("target".to_owned(), event.metadata().target().into());
        line.insert("fields".to_owned(), Value::Object(fields.others));
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// The `request_id` of a span's formatted fields (`request_id=…`; ids hold no spaces).
fn request_id_of(formatted: &str) -> Option<String> {
    formatted
        .split_whitespace()
        .find_map(|pair| pair.strip_prefix("request_id="))
        .map(str::to_owned)
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
    #[test]
    fn finds_the_request_id_among_span_fields() {
        assert_eq!(
            super::request_id_of("request_id=abc-123 other=1").as_deref(),
            Some("abc-123")
        );
        assert_eq!(super::request_id_of("other=1"), None);
    }
}
