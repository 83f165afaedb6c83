//! What a reseller reads about its own account in the panel: the ledger (a page at a time, or
//! all of it for CSV), its promo batches with how many codes were redeemed (never a code), and
//! the licenses it issued.

use crate::error::Result;
use crate::store::Store;

/// Ledger entries per panel page.
pub const LEDGER_PAGE_SIZE: i64 = 50;

/// Licenses per panel page.
pub const LICENSES_PAGE_SIZE: i64 = 100;

/// One ledger entry as the reseller sees it (no actor, no operator reason).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LedgerRow {
    pub created_utc: i64,
    pub product_slug: String,
    pub kind: String,
    pub units: i64,
    pub balance_after: i64,
    pub reference: Option<String>,
}

/// One page of the ledger, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerPage {
    pub entries: Vec<LedgerRow>,
    /// 1-based page number shown.
    pub page: i64,
    pub has_next: bool,
}

const LEDGER_SQL: &str = "SELECT l.created_utc, p.slug AS product_slug, l.kind, l.delta AS units, \
     l.balance_after, l.reference FROM ledger_entries l JOIN plans p ON p.id = l.plan_id \
     WHERE l.account_id = $1 AND ($2 = '' OR p.slug = $2) \
     ORDER BY l.created_utc DESC, l.id DESC";

/// A page of the account's ledger, newest first, optionally for one product (`""` for all).
pub async fn ledger_page(
    store: &Store,
    account_id: i64,
    product_slug: &str,
    page: i64,
) -> Result<LedgerPage> {
    let page = page.max(1);
    let sql = sqlx::AssertSqlSafe(format!("{LEDGER_SQL} LIMIT $3 OFFSET $4"));
    let mut entries: Vec<LedgerRow> = sqlx::query_as(sql)
        .bind(account_id)
        .bind(product_slug)
        .bind(LEDGER_PAGE_SIZE + 1)
        .bind((page - 1).saturating_mul(LEDGER_PAGE_SIZE))
        .fetch_all(store.pool())
        .await?;
    let has_next = entries.len() as i64 > LEDGER_PAGE_SIZE;
    entries.truncate(LEDGER_PAGE_SIZE as usize);
    Ok(LedgerPage {
        entries,
        page,
        has_next,
    })
}

/// Every ledger entry of the account, newest first (the CSV download).
pub async fn ledger_all(store: &Store, account_id: i64) -> Result<Vec<LedgerRow>> {
    Ok(sqlx::query_as(LEDGER_SQL)
        .bind(account_id)
        .bind("")
        .fetch_all(store.pool())
        .await?)
}

/// A promo batch with its redemption count; the codes themselves are never read here.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PromoBatchRow {
    pub batch_id: String,
    pub product_slug: String,
    pub code_count: i64,
    pub redeemed: i64,
    pub created_utc: i64,
    /// The end of the window in which a retry with the same key returns the codes again.
    pub recoverable_until_utc: i64,
}

/// The account's promo batches, newest first.
pub async fn promo_batches(store: &Store, account_id: i64) -> Result<Vec<PromoBatchRow>> {
    Ok(sqlx::query_as(
        "SELECT b.batch_id, p.slug AS product_slug, b.code_count, \
         (SELECT COUNT(*) FROM promo_redemptions r JOIN promo_codes c ON c.code_hash = r.code_hash \
          WHERE c.batch_row_id = b.id) AS redeemed, \
         b.created_utc, b.created_utc + $2 AS recoverable_until_utc \
         FROM promo_batches b JOIN plans p ON p.id = b.plan_id \
         WHERE b.account_id = $1 ORDER BY b.created_utc DESC, b.id DESC",
    )
    .bind(account_id)
    .bind(crate::promo::RECOVERY_WINDOW_SECONDS)
    .fetch_all(store.pool())
    .await?)
}

/// A license the account issued, or one redeemed from its promo codes.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LicenseRow {
    pub license_id: String,
    pub login: String,
    pub product_slug: String,
    pub created_utc: i64,
    pub starts_utc: i64,
    pub expires_utc: Option<i64>,
    pub revoked_utc: Option<i64>,
}

/// The account's licenses, newest first, at most [`LICENSES_PAGE_SIZE`], optionally for one
/// login (compared exactly; `""` for all).
pub async fn licenses(store: &Store, account_id: i64, login: &str) -> Result<Vec<LicenseRow>> {
    Ok(sqlx::query_as(
        "SELECT l.license_id, u.login, p.slug AS product_slug, l.created_utc, l.starts_utc, \
         l.expires_utc, l.revoked_utc FROM licenses l JOIN users u ON u.id = l.user_id JOIN plans p ON p.id = l.plan_id \
         WHERE l.account_id = $1 AND ($2 = '' OR u.login = $2) \
         ORDER BY l.created_utc DESC, l.id DESC LIMIT $3",
    )
    .bind(account_id)
    .bind(login)
    .bind(LICENSES_PAGE_SIZE)
    .fetch_all(store.pool())
    .await?)
}
