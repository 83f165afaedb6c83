//! Times in UTC, one routine for every place that shows one: Unix seconds as RFC 3339 (the
//! CLI's output, the panel's `<time datetime>`), as a person reads them in the panel, and the
//! day a time falls in (the panel's usage per day). Compiles without feature `db`.

use time::OffsetDateTime;
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;

/// Seconds in a day (UTC has no leap seconds in Unix time).
pub const SECONDS_PER_DAY: i64 = 86_400;

/// RFC 3339 in UTC, to the second.
const RFC3339: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");

/// What a person reads.
const MINUTES: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day] [hour]:[minute] UTC");

/// The time, if it falls in years 0-9999 (every time the service writes does; RFC 3339 has
/// no other years).
fn civil(unix_seconds: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp(unix_seconds)
        .ok()
        .filter(|time| (0..=9999).contains(&time.year()))
}

/// `2024-05-01T12:00:00Z`; `None` outside years 0-9999.
pub fn rfc3339(unix_seconds: i64) -> Option<String> {
    civil(unix_seconds)?.format(RFC3339).ok()
}

/// `2026-11-23 06:00 UTC`, as the panel shows a time; `None` outside years 0-9999.
pub fn minutes(unix_seconds: i64) -> Option<String> {
    civil(unix_seconds)?.format(MINUTES).ok()
}

/// The first second (UTC) of the day `unix_seconds` falls in.
pub fn day_start(unix_seconds: i64) -> i64 {
    unix_seconds.div_euclid(SECONDS_PER_DAY) * SECONDS_PER_DAY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_rfc3339_and_for_people() {
        assert_eq!(
            rfc3339(1_795_413_600).as_deref(),
            Some("2026-11-23T06:00:00Z")
        );
        assert_eq!(
            minutes(1_795_413_600).as_deref(),
            Some("2026-11-23 06:00 UTC")
        );
        assert_eq!(rfc3339(0).as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(rfc3339(i64::MAX), None);
        assert_eq!(rfc3339(-62_167_219_201), None, "a second before year 0");
        assert_eq!(
            rfc3339(-62_167_219_200).as_deref(),
            Some("0000-01-01T00:00:00Z")
        );
    }

    #[test]
    fn days_start_at_midnight_utc() {
        assert_eq!(day_start(SECONDS_PER_DAY + 3600), SECONDS_PER_DAY);
        assert_eq!(day_start(-1), -SECONDS_PER_DAY);
        assert_eq!(day_start(0), 0);
    }
}
