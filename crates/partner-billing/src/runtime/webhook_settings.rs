//! How webhook deliveries are retried and where they may go: settings the server gives the
//! store at start (`--webhook-backoff`, `--webhook-allow-insecure`).

use std::time::Duration;

use crate::utc::SECONDS_PER_DAY;

/// The default retry schedule (`--webhook-backoff`).
pub const DEFAULT_BACKOFF: &str = "5s,5m,30m,2h,5h,10h,10h";

/// How deliveries are retried and where they may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Delays between attempts: one attempt, then one after each delay, then failed.
    pub backoff: Vec<Duration>,
    /// `--webhook-allow-insecure`: `http://` and loopback addresses allowed too.
    pub allow_insecure: bool,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            backoff: parse_backoff(DEFAULT_BACKOFF).expect("the default schedule parses"),
            allow_insecure: false,
        }
    }
}

/// Parses a schedule such as `5s,5m,30m,2h` (units `s`, `m`, `h`, `d`).
pub fn parse_backoff(text: &str) -> std::result::Result<Vec<Duration>, String> {
    text.split(',')
        .map(|item| {
            let item = item.trim();
            let split = item
                .find(|c: char| !c.is_ascii_digit())
                .ok_or_else(|| format!("`{item}` needs a unit (s, m, h or d)"))?;
            let (number, unit) = item.split_at(split);
            let number: u64 = number
                .parse()
                .map_err(|_| format!("`{item}` is not a duration"))?;
            let seconds = match unit {
                "s" => number,
                "m" => number * 60,
                "h" => number * 3600,
                "d" => number * SECONDS_PER_DAY.unsigned_abs(),
                _ => return Err(format!("`{item}` has an unknown unit (s, m, h or d)")),
            };
            Ok(Duration::from_secs(seconds))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_schedules_parse() {
        assert_eq!(
            parse_backoff("5s,5m, 2h,1d").unwrap(),
            [5, 300, 7200, 86_400].map(Duration::from_secs)
        );
        assert_eq!(WebhookSettings::default().backoff.len(), 7);
        for bad in ["", "5", "s", "5x", "5s,,5s", "-1s"] {
            assert!(parse_backoff(bad).is_err(), "{bad:?}");
        }
    }
}
