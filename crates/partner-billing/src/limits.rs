//! Every bound of the HTTP API, defined once: the domain parsers and the server enforce these,
//! the SDK checks them before sending, and the server's published OpenAPI document declares
//! them (`maxLength`, `maximum`, `maxItems`, ...). Lengths count characters (Unicode scalar
//! values), as JSON Schema's `maxLength` does.

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
