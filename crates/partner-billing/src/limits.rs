//! Every bound of the HTTP API, defined once: the domain parsers and the server enforce these,
//! the SDK checks them before sending, and the server's published OpenAPI document declares
//! them (`maxLength`, `maximum`, `maxItems`, ...). Lengths count characters (Unicode scalar
//! values), as JSON Schema's `maxLength` does. The other limits an integrator or an operator
//! meets (abuse limits, session lifetimes, the promo recovery window, the CLI's bounds, the
//! panel's page sizes) are defined here too, so a figure in docs/design.md has one source.

/// `planSlug` / `productSlug`: 1–64 of `a-z 0-9 . _ -`.
pub const PLAN_SLUG_MAX_CHARS: usize = 64;
/// An end user's `login`: 1–254 characters, no control characters.
pub const LOGIN_MAX_CHARS: usize = 254;
/// `idempotencyKey`: 8–128 visible ASCII characters.
pub const IDEMPOTENCY_KEY_MIN_CHARS: usize = 8;
/// `idempotencyKey`: 8–128 visible ASCII characters.
pub const IDEMPOTENCY_KEY_MAX_CHARS: usize = 128;
/// Codes in one promo batch request (`count`).
pub const PROMO_BATCH_MAX_CODES: i64 = 1000;
/// A promo code as typed (hyphens and spaces allowed); longer input is no code.
pub const PROMO_CODE_INPUT_MAX_CHARS: usize = 64;
/// A promo code as shown: `XXXX-XXXX-XXXX-XXXX`.
pub const PROMO_CODE_CHARS: usize = 19;
/// An API key's optional `name`.
pub const KEY_NAME_MAX_CHARS: usize = 64;
/// A reseller account's name.
pub const ACCOUNT_NAME_MAX_CHARS: usize = 200;
/// A new panel password: 12–128 characters.
pub const PASSWORD_MIN_CHARS: usize = 12;
/// A new panel password: 12–128 characters.
pub const PASSWORD_MAX_CHARS: usize = 128;
/// A presented panel password (sign-in, `currentPassword`): longer is malformed, not wrong.
pub const PRESENTED_PASSWORD_MAX_CHARS: usize = 1024;
/// A presented `clientId` at sign-in: longer is malformed, not unknown.
pub const PRESENTED_CLIENT_ID_MAX_CHARS: usize = 64;
/// Seconds an old key keeps working after a roll (`expiresInSeconds`): 0 to 7 days.
pub const ROLL_GRACE_MAX_SECONDS: i64 = 604_800;
/// The grace period of a roll that names none: one day.
pub const ROLL_GRACE_DEFAULT_SECONDS: i64 = 24 * 60 * 60;
/// A webhook endpoint's `url`.
pub const WEBHOOK_URL_MAX_CHARS: usize = 2048;
/// A webhook endpoint's optional `description`.
pub const WEBHOOK_DESCRIPTION_MAX_CHARS: usize = 256;
/// Entries of `eventTypes` in a registration (duplicates are dropped).
pub const WEBHOOK_EVENT_TYPES_MAX_ITEMS: usize = 16;
/// `lowBalanceThreshold`: 0 (off) to one billion.
pub const LOW_BALANCE_THRESHOLD_MAX: i64 = 1_000_000_000;
/// Units of one operator credit.
pub const CREDIT_MAX_UNITS: i64 = 1_000_000_000;
/// A plan's day counts (subscription length, code validity) and redemptions per code: 1 to
/// 36 500.
pub const PLAN_SETTING_MAX: i64 = 36_500;
/// Active API keys per account.
pub const MAX_ACTIVE_API_KEYS: usize = 5;
/// Webhook endpoints per account.
pub const MAX_WEBHOOK_ENDPOINTS: usize = 5;
/// Delivery attempts listed per endpoint.
pub const WEBHOOK_DELIVERIES_LISTED: usize = 100;
/// A delivery attempt's `error` text (it may quote the URL the attempt was refused for).
pub const WEBHOOK_DELIVERY_ERROR_MAX_CHARS: usize = WEBHOOK_URL_MAX_CHARS + 256;
/// `limit` of a keyset-paged list: 1–500.
pub const PAGE_LIMIT_MAX: i64 = 500;
/// `limit` of a keyset-paged list when none is given.
pub const PAGE_LIMIT_DEFAULT: i64 = 100;
/// A list's opaque cursor.
pub const CURSOR_MAX_CHARS: usize = 256;
/// A ledger entry's `reference` (a license id, a batch's order id, an operator's reference).
pub const LEDGER_REFERENCE_MAX_CHARS: usize = 500;
/// Codes in one request to void listed promo codes.
pub const VOID_CODES_MAX: usize = 1000;
/// The body of a request to void listed promo codes (1000 codes as typed fit).
pub const VOID_CODES_MAX_BODY_BYTES: usize = 64 * 1024;
/// `X-Request-Id` taken from a request: 1–64 visible ASCII characters.
pub const REQUEST_ID_MAX_CHARS: usize = 64;
/// A JSON request body, in bytes (but [`VOID_CODES_MAX_BODY_BYTES`] on `promo-codes/void`).
pub const BODY_MAX_BYTES: usize = 16 * 1024;
/// An operator's `reference` on a credit or an adjustment (its idempotency key).
pub const OPERATOR_REFERENCE_MAX_CHARS: usize = 128;
/// An operator's `--reason` (a credit, an adjustment, a license revocation): 1–500 characters.
pub const OPERATOR_REASON_MAX_CHARS: usize = 500;
/// How long after `createdUtc` a batch's plaintext codes can be fetched again by retrying with
/// its idempotency key: 72 hours.
pub const PROMO_RECOVERY_WINDOW_SECONDS: i64 = 72 * 60 * 60;

// The audit trail's entries (docs/design.md § Audit trail).

/// Free text kept in an entry (a key name, a description, an operator token's name), in
/// characters; longer text is cut and ends in `…`.
pub const AUDIT_DETAIL_TEXT_MAX_CHARS: usize = 200;
/// An entry's `actor`: `operator_token:` and a bounded name (and its `…`).
pub const AUDIT_ACTOR_MAX_CHARS: usize = "operator_token:".len() + AUDIT_DETAIL_TEXT_MAX_CHARS + 1;
/// An entry's `sourceAddress`: an IPv6 address in text at most.
pub const AUDIT_SOURCE_ADDRESS_MAX_CHARS: usize = 45;

// Abuse limits (docs/design.md § Abuse limits), shared by every replica.

/// At most `max` attempts within `window_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptLimit {
    pub max: i64,
    pub window_seconds: i64,
}

/// Failed panel sign-ins per client id: 10 in 15 minutes.
pub const SIGN_IN_FAILURES_PER_CLIENT_ID: AttemptLimit = AttemptLimit {
    max: 10,
    window_seconds: 15 * 60,
};
/// Failed panel sign-ins per source address: 50 in 15 minutes.
pub const SIGN_IN_FAILURES_PER_ADDRESS: AttemptLimit = AttemptLimit {
    max: 50,
    window_seconds: 15 * 60,
};
/// `Reseller.UnknownLogin` answers per account: 100 an hour.
pub const UNKNOWN_LOGINS_PER_ACCOUNT: AttemptLimit = AttemptLimit {
    max: 100,
    window_seconds: 60 * 60,
};
/// Failed promo redemptions per login: 10 a minute.
pub const REDEMPTION_FAILURES_PER_LOGIN: AttemptLimit = AttemptLimit {
    max: 10,
    window_seconds: 60,
};
/// Failed promo redemptions per operator token (or the operator's console): 1000 an hour.
pub const REDEMPTION_FAILURES_PER_OPERATOR: AttemptLimit = AttemptLimit {
    max: 1000,
    window_seconds: 60 * 60,
};
/// Password hashes waiting for a hashing thread (one per core); one more answers 503.
pub const PASSWORD_HASHES_WAITING_MAX: usize = 64;
/// Promo batches of one account generated at once per process, below the process-wide count.
pub const PROMO_BATCHES_PER_ACCOUNT: usize = 2;

// Panel sessions (docs/design.md § Authentication).

/// How long a panel session lasts at most: 12 hours.
pub const SESSION_LIFETIME_SECONDS: i64 = 12 * 60 * 60;
/// A panel session unused this long has ended: one hour.
pub const SESSION_IDLE_SECONDS: i64 = 60 * 60;

// The HTML panel's pages (docs/design.md § Reseller panel).

/// Entries per page of `/panel/activity`.
pub const PANEL_ACTIVITY_PAGE_SIZE: i64 = 50;
/// Entries per page of `/panel/ledger`.
pub const PANEL_LEDGER_PAGE_SIZE: i64 = 50;
/// Licenses per page of `/panel/licenses`.
pub const PANEL_LICENSES_PAGE_SIZE: i64 = 100;
/// Batches per page of `/panel/promo-batches`.
pub const PANEL_PROMO_BATCHES_PAGE_SIZE: i64 = 50;

/// Random base62 characters after the prefix of an identifier (`rsc_`, `rsk_`, `rwe_`, `evt_`).
pub const ID_RANDOM_CHARS: usize = 24;
/// An identifier: a four-character prefix and [`ID_RANDOM_CHARS`].
pub const ID_CHARS: usize = 4 + ID_RANDOM_CHARS;
/// Random base62 characters after the prefix of a secret or token (`rss_`, `rps_`, `rso_`).
pub const SECRET_RANDOM_CHARS: usize = 43;
/// A secret or token: a four-character prefix and [`SECRET_RANDOM_CHARS`].
pub const SECRET_CHARS: usize = 4 + SECRET_RANDOM_CHARS;
/// A webhook signing secret: `whsec_` and the base64 of 24 random bytes.
pub const WEBHOOK_SECRET_CHARS: usize = 6 + 32;
/// A UUID in its hyphenated form (`licenseId`, `batchId`, `orderPublicId`).
pub const UUID_CHARS: usize = 36;
