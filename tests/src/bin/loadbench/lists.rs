//! `--lists`: every list of the hot account at its first and at its last page, and the ledger CSV
//! with the server's memory beside it. With `--history`, this is what a reseller with a million
//! licenses sees: keyset pages cost the same at page 1 and page 20 000, and the CSV streams.
//!
//! Each list is walked to its end by its own links (`nextCursor` for the read API at its largest
//! page, the "Older" link for the panel's pages); the first and the last page are then each
//! fetched [`TIMED`] times and their median kept.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::seed::Seeded;
use crate::server::Server;

/// Fetches of each timed page; the median is reported.
const TIMED: usize = 5;

/// How often the server's RSS is read while the CSV downloads.
const RSS_EVERY: Duration = Duration::from_millis(20);

/// One list at its two ends.
#[derive(Debug, Clone)]
pub struct ListFigures {
    pub list: &'static str,
    pub pages: u64,
    pub items: u64,
    pub first_ms: f64,
    pub last_ms: f64,
}

/// The CSV download.
#[derive(Debug, Clone)]
pub struct CsvFigures {
    pub lines: u64,
    pub bytes: u64,
    pub first_byte_ms: f64,
    pub total_ms: f64,
    pub rss_before_kib: u64,
    pub rss_peak_during_kib: u64,
}

/// What `--lists` measured on one database.
#[derive(Debug, Clone)]
pub struct ListsReport {
    pub lists: Vec<ListFigures>,
    pub csv: CsvFigures,
    /// The server's peak RSS over its whole life (VmHWM) once everything ran.
    pub server_peak_kib: u64,
}

/// Walks and times every list of account 0 on `server`.
pub async fn measure(server: &Server, seeded: &Seeded) -> anyhow::Result<ListsReport> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(600))
        .build()?;
    let base = &server.base_url;
    let account = &seeded.accounts[0];
    let api = |url: String| {
        http.get(url)
            .header("X-Client-Id", &account.client_id)
            .header("X-Client-Secret", &account.secret)
    };
    let mut lists = Vec::new();
    for (list, path, items_member) in [
        ("API licenses", "/v1/billing/partner/licenses", "licenses"),
        ("API ledger", "/v1/billing/partner/ledger", "entries"),
        (
            "API promo batches",
            "/v1/billing/partner/promo-batches",
            "promoBatches",
        ),
    ] {
        let first = format!("{base}{path}?limit=500");
        let (mut pages, mut items, mut url, mut last) =
            (0_u64, 0_u64, Some(first.clone()), first.clone());
        while let Some(next) = url.take() {
            let page: Value = api(next.clone())
                .send()
                .await?
                .error_for_status()
                .with_context(|| format!("{list} page {pages}"))?
                .json()
                .await?;
            let count = page[items_member].as_array().map_or(0, Vec::len) as u64;
            pages += 1;
            items += count;
            // The ledger's feed keeps a cursor at its end; `hasMore` says whether it is there.
            let more = page.get("hasMore").is_none_or(|m| m == true);
            match page["nextCursor"].as_str() {
                Some(cursor) if more && count > 0 => {
                    last = next;
                    url = Some(format!("{base}{path}?limit=500&cursor={cursor}"));
                }
                _ => last = next,
            }
        }
        let first_ms = median_ms(|| api(first.clone()).send()).await?;
        let last_ms = median_ms(|| api(last.clone()).send()).await?;
        lists.push(ListFigures {
            list,
            pages,
            items,
            first_ms,
            last_ms,
        });
    }

    let cookie = panel_cookie(&http, base, &seeded.first_password, &account.client_id).await?;
    let panel = |url: String| http.get(url).header("Cookie", &cookie);
    for (list, path) in [
        ("panel ledger", "/panel/ledger"),
        ("panel licenses", "/panel/licenses"),
        ("panel promo batches", "/panel/promo-batches"),
    ] {
        let first = format!("{base}{path}");
        let (mut pages, mut items, mut url, mut last) =
            (0_u64, 0_u64, Some(first.clone()), first.clone());
        while let Some(next) = url.take() {
            let response = panel(next.clone()).send().await?;
            if !response.status().is_success() {
                bail!("{list} page {pages}: HTTP {}", response.status());
            }
            let body = response.text().await?;
            pages += 1;
            items += body.matches("<tr").count().saturating_sub(1) as u64;
            last = next;
            url = older_link(&body).map(|href| format!("{base}{href}"));
        }
        let first_ms = median_ms(|| panel(first.clone()).send()).await?;
        let last_ms = median_ms(|| panel(last.clone()).send()).await?;
        lists.push(ListFigures {
            list,
            pages,
            items,
            first_ms,
            last_ms,
        });
    }

    let rss_before_kib = server.rss_kib()?;
    let started = Instant::now();
    let response = panel(format!("{base}/panel/ledger.csv")).send().await?;
    if !response.status().is_success() {
        bail!("ledger.csv: HTTP {}", response.status());
    }
    let mut response = response;
    let (mut first_byte_ms, mut bytes, mut lines) = (None, 0_u64, 0_u64);
    let mut rss_peak_during_kib = rss_before_kib;
    let mut next_rss = Instant::now();
    while let Some(chunk) = response.chunk().await? {
        first_byte_ms.get_or_insert_with(|| started.elapsed().as_secs_f64() * 1000.0);
        bytes += chunk.len() as u64;
        lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        if Instant::now() >= next_rss {
            rss_peak_during_kib = rss_peak_during_kib.max(server.rss_kib()?);
            next_rss = Instant::now() + RSS_EVERY;
        }
    }
    let csv = CsvFigures {
        lines,
        bytes,
        first_byte_ms: first_byte_ms.unwrap_or(f64::NAN),
        total_ms: started.elapsed().as_secs_f64() * 1000.0,
        rss_before_kib,
        rss_peak_during_kib: rss_peak_during_kib.max(server.rss_kib()?),
    };
    Ok(ListsReport {
        lists,
        csv,
        server_peak_kib: server.peak_rss_kib()?,
    })
}

/// The median time of [`TIMED`] fetches of one page (the body read whole), in milliseconds.
async fn median_ms<F, Fut>(fetch: F) -> anyhow::Result<f64>
where
    F: Fn() -> Fut,
    Fut: Future<Output = reqwest::Result<reqwest::Response>>,
{
    let mut times = Vec::with_capacity(TIMED);
    for _ in 0..TIMED {
        let started = Instant::now();
        let response = fetch().await?.error_for_status()?;
        response.bytes().await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Signs in to the panel through its form; returns the `Cookie` header value.
async fn panel_cookie(
    http: &reqwest::Client,
    base: &str,
    password: &str,
    client_id: &str,
) -> anyhow::Result<String> {
    let response = http
        .post(format!("{base}/panel/login"))
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[("client_id", client_id), ("password", password)])
        .send()
        .await?;
    if response.status() != reqwest::StatusCode::SEE_OTHER {
        bail!("panel sign-in: HTTP {}", response.status());
    }
    let cookie = response
        .headers()
        .get(reqwest::header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .context("panel sign-in set no cookie")?;
    Ok(cookie.to_owned())
}

/// The href of a page's "Older" link (`rel="next"`), unescaped.
fn older_link(body: &str) -> Option<String> {
    let end = body.find("rel=\"next\"")?;
    let start = body[..end].rfind("href=\"")? + "href=\"".len();
    let href = body[start..end].trim_end().trim_end_matches('"');
    Some(href.replace("&amp;", "&"))
}
