//! The partner API's reads and voids: a reseller's backend reads back its own licenses, promo
//! batches and ledger, learns what became of a write, and withdraws its own promo codes.
//!
//! Each list comes two ways: one page (`list_*`, `ledger_page`), and a stream of items that
//! follows `nextCursor` page after page (`*_stream`). Cursors are opaque: pass them back as
//! they came.

use futures_util::Stream;
use futures_util::stream::{self, TryStreamExt};
use reqwest::Method;

use partner_billing::limits::{PAGE_LIMIT_MAX, VOID_CODES_MAX};
use partner_billing::wire::{
    LedgerEntryRecord, LedgerPage, LicenseList, LicenseRecord, PromoBatchList, PromoBatchSummary,
    RequestStatus, VoidPromoCodesRequest, VoidPromoCodesResult,
};

use crate::error::{Error, Result};
use crate::partner::PartnerClient;

/// Which licenses to list, and which page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LicenseQuery {
    /// Only the licenses of this login.
    pub login: Option<String>,
    /// Only the licenses of this plan.
    pub plan_slug: Option<String>,
    /// Licenses per page, 1–500 (the server's default, 100, when `None`).
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page; `None` for the first.
    pub cursor: Option<String>,
}

/// Which page of a list: its size and where it starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageQuery {
    /// Items per page, 1–500 (the server's default, 100, when `None`).
    pub limit: Option<u32>,
    /// The `next_cursor` of an earlier page; `None` for the first.
    pub cursor: Option<String>,
}

/// Which ledger entries, and from where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerQuery {
    /// Only the entries of this product.
    pub product_slug: Option<String>,
    /// Entries per page, 1–500 (the server's default, 100, when `None`).
    pub limit: Option<u32>,
    /// A `next_cursor` kept from an earlier page: only entries written after it. `None` reads
    /// from the first entry.
    pub cursor: Option<String>,
}

fn check_limit(limit: Option<u32>) -> Result<Option<(&'static str, String)>> {
    match limit {
        None => Ok(None),
        Some(n) if (1..=PAGE_LIMIT_MAX as u32).contains(&n) => Ok(Some(("limit", n.to_string()))),
        Some(_) => Err(Error::invalid(
            "limit",
            format!("must be 1-{PAGE_LIMIT_MAX}"),
        )),
    }
}

fn query(
    limit: Option<u32>,
    cursor: &Option<String>,
    filters: &[(&'static str, &Option<String>)],
) -> Result<Vec<(&'static str, String)>> {
    let mut pairs: Vec<(&'static str, String)> = check_limit(limit)?.into_iter().collect();
    if let Some(cursor) = cursor {
        pairs.push(("cursor", cursor.clone()));
    }
    for (name, value) in filters {
        if let Some(value) = value {
            pairs.push((*name, value.clone()));
        }
    }
    Ok(pairs)
}

/// Follows `next` from page to page, yielding every item; ends after the page whose `next` is
/// `None`. A failure ends the stream after yielding it.
fn paged<T, F, Fut>(first: Option<String>, fetch: F) -> impl Stream<Item = Result<T>>
where
    F: Fn(Option<String>) -> Fut + Clone,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>)>>,
{
    stream::try_unfold(Some(first), move |state| {
        let fetch = fetch.clone();
        async move {
            let Some(cursor) = state else {
                return Ok::<_, Error>(None);
            };
            let (items, next) = fetch(cursor).await?;
            let state = next.map(Some);
            Ok(Some((stream::iter(items.into_iter().map(Ok)), state)))
        }
    })
    .try_flatten()
}

impl PartnerClient {
    /// `GET /v1/billing/partner/licenses`: one page of the account's licenses, newest first
    /// (those it issued and those redeemed from its codes).
    pub async fn list_licenses(&self, query_: &LicenseQuery) -> Result<LicenseList> {
        let pairs = query(
            query_.limit,
            &query_.cursor,
            &[("login", &query_.login), ("planSlug", &query_.plan_slug)],
        )?;
        let reply = self
            .send_to(Method::GET, &["licenses"], pairs, None)
            .await?;
        reply.json(&self.sensitive())
    }

    /// Every license matching `query_`, newest first, fetched a page at a time as the stream
    /// is read (from `query_.cursor` when set).
    pub fn licenses_stream(
        &self,
        query_: LicenseQuery,
    ) -> impl Stream<Item = Result<LicenseRecord>> + '_ {
        let first = query_.cursor.clone();
        paged(first, move |cursor| {
            let query_ = LicenseQuery {
                cursor,
                ..query_.clone()
            };
            async move {
                let page = self.list_licenses(&query_).await?;
                Ok((page.licenses, page.next_cursor))
            }
        })
    }

    /// `GET /v1/billing/partner/licenses/{licenseId}`: one of the account's licenses;
    /// [`Error::LicenseNotFound`] for any other id.
    pub async fn license(&self, license_id: &str) -> Result<LicenseRecord> {
        let reply = self
            .send_to(Method::GET, &["licenses", license_id], Vec::new(), None)
            .await?;
        reply.json(&self.sensitive())
    }

    /// `GET /v1/billing/partner/promo-batches`: one page of the account's promo batches,
    /// newest first, with their counts (never a code).
    pub async fn list_promo_batches(&self, page: &PageQuery) -> Result<PromoBatchList> {
        let pairs = query(page.limit, &page.cursor, &[])?;
        let reply = self
            .send_to(Method::GET, &["promo-batches"], pairs, None)
            .await?;
        reply.json(&self.sensitive())
    }

    /// Every promo batch of the account, newest first, a page at a time as the stream is read.
    pub fn promo_batches_stream(
        &self,
        page: PageQuery,
    ) -> impl Stream<Item = Result<PromoBatchSummary>> + '_ {
        let first = page.cursor.clone();
        paged(first, move |cursor| {
            let page = PageQuery {
                cursor,
                ..page.clone()
            };
            async move {
                let list = self.list_promo_batches(&page).await?;
                Ok((list.promo_batches, list.next_cursor))
            }
        })
    }

    /// `GET /v1/billing/partner/ledger`: one page of the account's ledger, oldest first.
    /// Keep [`LedgerPage::next_cursor`] (never empty) and pass it later as
    /// [`LedgerQuery::cursor`] to read only what was written since.
    pub async fn ledger_page(&self, query_: &LedgerQuery) -> Result<LedgerPage> {
        let pairs = query(
            query_.limit,
            &query_.cursor,
            &[("productSlug", &query_.product_slug)],
        )?;
        let reply = self.send_to(Method::GET, &["ledger"], pairs, None).await?;
        reply.json(&self.sensitive())
    }

    /// Every ledger entry from `query_.cursor` (or the first) up to the latest, oldest first,
    /// a page at a time as the stream is read. To follow the ledger over time, use
    /// [`ledger_page`](Self::ledger_page) and keep its `next_cursor`.
    pub fn ledger_stream(
        &self,
        query_: LedgerQuery,
    ) -> impl Stream<Item = Result<LedgerEntryRecord>> + '_ {
        let first = query_.cursor.clone();
        paged(first, move |cursor| {
            let query_ = LedgerQuery {
                cursor,
                ..query_.clone()
            };
            async move {
                let page = self.ledger_page(&query_).await?;
                let next = page.has_more.then_some(page.next_cursor);
                Ok((page.entries, next))
            }
        })
    }

    /// `GET /v1/billing/partner/requests/{idempotencyKey}`: what became of a write sent with
    /// this key — succeeded (with the ids it created) or still in progress — without sending
    /// it again. [`Error::RequestNotFound`] when the server has no record of it (it never
    /// arrived, or it was refused and changed nothing).
    pub async fn request_status(&self, idempotency_key: &str) -> Result<RequestStatus> {
        let reply = self
            .send_to(
                Method::GET,
                &["requests", idempotency_key],
                Vec::new(),
                None,
            )
            .await?;
        reply.json(&self.sensitive())
    }

    /// `POST /v1/billing/partner/promo-batches/{batchId}/void`: voids one of the account's
    /// batches (its codes redeem no more; licenses already redeemed stay; nothing is refunded)
    /// and returns it. Voiding again returns it unchanged. [`Error::PromoBatchNotFound`] for
    /// any other id.
    pub async fn void_promo_batch(&self, batch_id: &str) -> Result<PromoBatchSummary> {
        let reply = self
            .send_to(
                Method::POST,
                &["promo-batches", batch_id, "void"],
                Vec::new(),
                None,
            )
            .await?;
        reply.json(&self.sensitive())
    }

    /// `POST /v1/billing/partner/promo-codes/void`: voids the listed codes (1–1000, as printed
    /// or typed) that belong to the account's batches; the others come back in `unknown`.
    pub async fn void_promo_codes<S: AsRef<str>>(
        &self,
        codes: &[S],
    ) -> Result<VoidPromoCodesResult> {
        if codes.is_empty() || codes.len() > VOID_CODES_MAX {
            return Err(Error::invalid(
                "codes",
                format!("must hold 1-{VOID_CODES_MAX} codes"),
            ));
        }
        let request = VoidPromoCodesRequest {
            codes: codes.iter().map(|c| c.as_ref().to_owned()).collect(),
        };
        let body = serde_json::to_vec(&request)
            .map_err(|err| Error::invalid("request", err.to_string()))?;
        let reply = self
            .send_to(
                Method::POST,
                &["promo-codes", "void"],
                Vec::new(),
                Some(body),
            )
            .await?;
        // The answer may quote codes: a body that does not decode is not quoted.
        serde_json::from_slice(&reply.body).map_err(|_| Error::UnexpectedResponse {
            status: reply.status,
            body_snippet: "an unexpected shape; body withheld: it may hold promo codes".to_owned(),
        })
    }
}
