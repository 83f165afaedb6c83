//! The overview's "usage at a glance": units spent per day (UTC) and product over the last 30
//! days, as an inline SVG bar chart (stacked by product) beside `table#usage`.
//!
//! The SVG is built here from numbers and plan slugs only (slugs are `a-z 0-9 . _ -`, nothing
//! to escape), with presentation attributes rather than `style` (the panel's CSP allows no
//! inline style) and no script. It scales to its container through `viewBox`, so it reads at
//! 375 px.

use std::collections::BTreeMap;
use std::fmt::Write;

use partner_billing::activity::{USAGE_DAYS, UsageRow};
use partner_billing::utc::{SECONDS_PER_DAY, day_start};

use super::layout::Utc;

/// Bar colours, one per product in slug order (they repeat after eight).
const PALETTE: [&str; 8] = [
    "#2f6fb3", "#d9822b", "#3c9a5f", "#b8465a", "#7a5cb8", "#8c6d3f", "#3a9aa8", "#6b6b6b",
];

const WIDTH: i64 = 600;
const BARS_HEIGHT: i64 = 160;
const TOP: i64 = 10;
const SLOT: i64 = WIDTH / USAGE_DAYS;
const BAR: i64 = SLOT - 6;

/// One row of `table#usage`.
pub struct UsageLine {
    /// The day (UTC), `2026-11-23`: a date, not a time, so plain text, not a `<time>` (whose
    /// text is always a time of the form `2026-11-23 06:00 UTC` in the panel).
    pub date: String,
    pub product_slug: String,
    pub units: i64,
}

/// The chart and the table rows, for `now` (Unix seconds).
pub fn usage(rows: &[UsageRow], now_utc: i64) -> (String, Vec<UsageLine>) {
    let first_day = day_start(now_utc) - (USAGE_DAYS - 1) * SECONDS_PER_DAY;
    let products: Vec<&str> = {
        let mut slugs: Vec<&str> = rows.iter().map(|r| r.product_slug.as_str()).collect();
        slugs.sort_unstable();
        slugs.dedup();
        slugs
    };
    let mut per_day: BTreeMap<i64, i64> = BTreeMap::new();
    for row in rows {
        *per_day.entry(row.day_utc).or_default() += row.units;
    }
    let busiest_day = per_day.values().copied().max().unwrap_or(0);
    // The bars' scale: a day of `max` units is a full bar.
    let max = busiest_day.max(1);
    let summary = if busiest_day > 0 {
        format!("most in one day: {busiest_day}")
    } else {
        "nothing spent".to_owned()
    };
    let legend_rows = i64::try_from(products.len().div_ceil(4)).unwrap_or(1);
    let height = TOP + BARS_HEIGHT + 24 + 18 * legend_rows;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg id=\"usage-chart\" role=\"img\" aria-labelledby=\"usage-chart-title\" \
         viewBox=\"0 0 {WIDTH} {height}\" width=\"100%\" preserveAspectRatio=\"xMidYMid meet\" \
         xmlns=\"http://www.w3.org/2000/svg\">\
         <title id=\"usage-chart-title\">Units spent per day over the last {USAGE_DAYS} days \
         ({summary})</title>"
    );
    let baseline = TOP + BARS_HEIGHT;
    let _ = write!(
        svg,
        "<line x1=\"0\" y1=\"{baseline}\" x2=\"{WIDTH}\" y2=\"{baseline}\" stroke=\"#999\" stroke-width=\"1\"/>"
    );
    // Bars: each day a stack, products in slug order from the bottom.
    let mut stacked: BTreeMap<i64, i64> = BTreeMap::new();
    for row in rows {
        let index = (row.day_utc - first_day) / SECONDS_PER_DAY;
        if !(0..USAGE_DAYS).contains(&index) || row.units <= 0 {
            continue;
        }
        let below = stacked.entry(row.day_utc).or_default();
        let bar_height = ((row.units * BARS_HEIGHT + max - 1) / max).max(1);
        let y_bottom = baseline - (*below * BARS_HEIGHT) / max;
        *below += row.units;
        let colour = products
            .iter()
            .position(|p| *p == row.product_slug)
            .map_or(PALETTE[0], |i| PALETTE[i % PALETTE.len()]);
        let x = index * SLOT + 3;
        let y = y_bottom - bar_height;
        let day = Utc::new(row.day_utc);
        let _ = write!(
            svg,
            "<rect x=\"{x}\" y=\"{y}\" width=\"{BAR}\" height=\"{bar_height}\" fill=\"{colour}\">\
             <title>{} {}: {}</title></rect>",
            &day.datetime[..10.min(day.datetime.len())],
            row.product_slug,
            row.units
        );
    }
    // Day labels: the first, the middle and the last day.
    for index in [0, USAGE_DAYS / 2, USAGE_DAYS - 1] {
        let day = Utc::new(first_day + index * SECONDS_PER_DAY);
        let label = day.datetime.get(5..10).unwrap_or("");
        let x = index * SLOT + SLOT / 2;
        let anchor = match index {
            0 => "start",
            i if i == USAGE_DAYS - 1 => "end",
            _ => "middle",
        };
        let x = match anchor {
            "start" => 0,
            "end" => WIDTH,
            _ => x,
        };
        let _ = write!(
            svg,
            "<text x=\"{x}\" y=\"{}\" font-size=\"14\" text-anchor=\"{anchor}\" fill=\"currentColor\">{label}</text>",
            baseline + 18
        );
    }
    // Legend: a swatch and the slug per product, four to a row.
    for (i, product) in products.iter().enumerate() {
        let i = i64::try_from(i).unwrap_or(0);
        let x = (i % 4) * (WIDTH / 4);
        let y = baseline + 30 + (i / 4) * 18;
        let colour = PALETTE[usize::try_from(i).unwrap_or(0) % PALETTE.len()];
        let _ = write!(
            svg,
            "<rect x=\"{x}\" y=\"{y}\" width=\"12\" height=\"12\" fill=\"{colour}\"/>\
             <text x=\"{}\" y=\"{}\" font-size=\"14\" fill=\"currentColor\">{product}</text>",
            x + 16,
            y + 11
        );
    }
    svg.push_str("</svg>");
    let lines = rows
        .iter()
        .rev()
        .map(|row| UsageLine {
            date: Utc::new(row.day_utc).datetime.chars().take(10).collect(),
            product_slug: row.product_slug.clone(),
            units: row.units,
        })
        .collect();
    (svg, lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(day: i64, product: &str, units: i64) -> UsageRow {
        UsageRow {
            day_utc: day * SECONDS_PER_DAY,
            product_slug: product.to_owned(),
            units,
        }
    }

    #[test]
    fn draws_one_bar_per_day_and_product_without_script_or_style() {
        let now = 100 * SECONDS_PER_DAY + 3600;
        let rows = [row(99, "pro", 3), row(100, "max", 1), row(100, "pro", 2)];
        let (svg, lines) = usage(&rows, now);
        assert!(svg.starts_with("<svg id=\"usage-chart\""));
        assert_eq!(
            svg.matches("<rect").count(),
            3 + 2,
            "bars and legend swatches"
        );
        assert!(!svg.contains("<script") && !svg.contains("style="));
        assert!(svg.contains("viewBox"));
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].units, 2, "newest day first in the table");
        assert!(svg.contains("(most in one day: 3)</title>"), "{svg}");
    }

    #[test]
    fn an_empty_month_is_an_empty_chart() {
        let (svg, lines) = usage(&[], 5 * SECONDS_PER_DAY);
        assert!(svg.contains("</svg>"));
        assert!(svg.contains("(nothing spent)</title>"), "{svg}");
        assert!(lines.is_empty());
    }
}
