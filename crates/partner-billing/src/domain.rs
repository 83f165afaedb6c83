//! Parsed domain values: each one is checked once, where it enters, and is a type from then on.

use std::fmt;

use rand::RngCore;
use rand::rngs::OsRng;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::limits;

/// A value that failed to parse, with the API field it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidField {
    /// The request field (camelCase), e.g. `planSlug`.
    pub field: &'static str,
    /// What is wrong, without echoing the value.
    pub message: String,
}

impl InvalidField {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

macro_rules! string_newtype {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// The value as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }
    };
}

string_newtype!(
    /// A product (plan) slug: 1–64 of `a-z 0-9 . _ -`.
    PlanSlug
);
string_newtype!(
    /// An end user's login: 1–254 characters, no control characters, compared exactly.
    Login
);
string_newtype!(
    /// The caller's idempotency key: 8–128 visible ASCII characters (0x21–0x7E).
    IdempotencyKey
);
string_newtype!(
    /// A reseller account's public identity: `rsc_` + 24 base62.
    ClientId
);
string_newtype!(
    /// Identifies one API key: `rsk_` + 24 base62.
    ApiKeyId
);
string_newtype!(
    /// Identifies one webhook endpoint: `rwe_` + 24 base62.
    WebhookEndpointId
);

impl PlanSlug {
    pub fn parse(field: &'static str, value: &str) -> Result<Self, InvalidField> {
        let ok = (1..=limits::PLAN_SLUG_MAX_CHARS).contains(&value.len())
            && value
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
        if ok {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidField::new(
                field,
                "must be 1-64 characters of a-z, 0-9, '.', '_' or '-'",
            ))
        }
    }
}

impl Login {
    pub fn parse(field: &'static str, value: &str) -> Result<Self, InvalidField> {
        let chars = value.chars().count();
        if (1..=limits::LOGIN_MAX_CHARS).contains(&chars) && !value.chars().any(char::is_control) {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidField::new(
                field,
                "must be 1-254 characters without control characters",
            ))
        }
    }
}

impl IdempotencyKey {
    pub fn parse(field: &'static str, value: &str) -> Result<Self, InvalidField> {
        if (limits::IDEMPOTENCY_KEY_MIN_CHARS..=limits::IDEMPOTENCY_KEY_MAX_CHARS)
            .contains(&value.len())
            && value.bytes().all(|b| (0x21..=0x7e).contains(&b))
        {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidField::new(
                field,
                "must be 8-128 visible ASCII characters",
            ))
        }
    }

    /// A fresh random key, for callers that did not choose one.
    pub fn generate() -> Self {
        Self(format!("idem_{}", random_base62(32)))
    }
}

fn parse_prefixed(value: &str, prefix: &str, len: usize) -> bool {
    value
        .strip_prefix(prefix)
        .is_some_and(|rest| rest.len() == len && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

impl ClientId {
    pub fn parse(field: &'static str, value: &str) -> Result<Self, InvalidField> {
        if parse_prefixed(value, "rsc_", limits::ID_RANDOM_CHARS) {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidField::new(
                field,
                "must be rsc_ followed by 24 letters or digits",
            ))
        }
    }

    pub fn generate() -> Self {
        Self(format!("rsc_{}", random_base62(limits::ID_RANDOM_CHARS)))
    }
}

impl ApiKeyId {
    pub fn parse(field: &'static str, value: &str) -> Result<Self, InvalidField> {
        if parse_prefixed(value, "rsk_", limits::ID_RANDOM_CHARS) {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidField::new(
                field,
                "must be rsk_ followed by 24 letters or digits",
            ))
        }
    }

    pub fn generate() -> Self {
        Self(format!("rsk_{}", random_base62(limits::ID_RANDOM_CHARS)))
    }
}

impl WebhookEndpointId {
    pub fn parse(field: &'static str, value: &str) -> Result<Self, InvalidField> {
        if parse_prefixed(value, "rwe_", limits::ID_RANDOM_CHARS) {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidField::new(
                field,
                "must be rwe_ followed by 24 letters or digits",
            ))
        }
    }

    pub fn generate() -> Self {
        Self(format!("rwe_{}", random_base62(limits::ID_RANDOM_CHARS)))
    }
}

/// An id that is a UUID (`licenseId`, `batchId`): parsed from its hyphenated form, in either
/// case, and written back in the lower-case form the service issues and stores.
macro_rules! uuid_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(Uuid);

        impl $name {
            /// Anything but a hyphenated UUID (36 characters) is refused: such text names
            /// nothing the service issued.
            pub fn parse(field: &'static str, value: &str) -> Result<Self, InvalidField> {
                match Uuid::try_parse(value) {
                    Ok(uuid) if value.len() == 36 => Ok(Self(uuid)),
                    _ => Err(InvalidField::new(field, "must be a hyphenated UUID")),
                }
            }

            /// A fresh time-ordered (v7) id: its millisecond first, then random bits (74 of
            /// them, the first 42 a counter that keeps the ids of one process in order). Each
            /// new id sorts after the ones before it, so its unique index grows at one place
            /// (its right edge; on a database that holds older random ids, the end of the
            /// time-ordered ones among them), instead of writing a random leaf of an index
            /// that grows with history past what the database keeps in memory. The time it
            /// shows is the row's `createdUtc`, which is public anyway.
            pub fn generate() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.hyphenated().fmt(f)
            }
        }
    };
}

uuid_id!(
    /// A license's id.
    LicenseId
);
uuid_id!(
    /// A promo batch's id.
    PromoBatchId
);

/// A high-entropy secret: an API key secret (`rss_`), a panel session token (`rps_`) or an
/// operator token (`rso_`). It never prints itself, compares in constant time, and is stored
/// only as its SHA-256.
#[derive(Clone)]
pub struct Secret(String);

/// The kinds of [`Secret`], by prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretKind {
    ApiKey,
    PanelSession,
    OperatorToken,
}

impl SecretKind {
    fn prefix(self) -> &'static str {
        match self {
            Self::ApiKey => "rss_",
            Self::PanelSession => "rps_",
            Self::OperatorToken => "rso_",
        }
    }
}

impl Secret {
    /// 256 random bits from the OS CSPRNG, as 43 base62 characters after the prefix.
    pub fn generate(kind: SecretKind) -> Self {
        Self(format!(
            "{}{}",
            kind.prefix(),
            random_base62(limits::SECRET_RANDOM_CHARS)
        ))
    }

    /// Wraps text received from a caller. Shape is not checked here: a malformed secret simply
    /// matches no stored hash, so every rejection looks the same.
    pub fn from_presented(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// Whether the text has the shape of this kind of secret.
    pub fn has_shape(&self, kind: SecretKind) -> bool {
        parse_prefixed(&self.0, kind.prefix(), limits::SECRET_RANDOM_CHARS)
    }

    /// The plaintext, for the one response that shows it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The stored form: hex SHA-256. Random 256-bit secrets need no slow hash.
    pub fn hash(&self) -> String {
        sha256_hex(self.0.as_bytes())
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_bytes().ct_eq(other.0.as_bytes()).into()
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// A human-chosen panel password: redacted in `Debug`, hashed with argon2id.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    pub fn parse(field: &'static str, value: &str) -> Result<Self, InvalidField> {
        let chars = value.chars().count();
        if (limits::PASSWORD_MIN_CHARS..=limits::PASSWORD_MAX_CHARS).contains(&chars) {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidField::new(field, "must be 12-128 characters"))
        }
    }

    /// Wraps a presented password for verification (no length rule: a wrong one just fails).
    pub fn presented(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password([redacted])")
    }
}

/// A row id of one kind, so that a plan's id cannot be passed where a user's is expected. Ids
/// are the database's own (`BIGINT`/`INTEGER` primary keys); they never leave the server.
macro_rules! row_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[cfg_attr(feature = "db", derive(sqlx::Type), sqlx(transparent))]
        pub struct $name(i64);

        impl $name {
            /// The id as the database stores it.
            pub fn get(self) -> i64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

row_id!(
    /// The row id of a plan (`plans.id`).
    PlanId
);
row_id!(
    /// The row id of an end user's login (`users.id`).
    UserId
);

/// An optional label for an API key: at most 64 characters, no control characters.
pub fn parse_key_name(value: Option<&str>) -> Result<Option<String>, InvalidField> {
    match value {
        None => Ok(None),
        Some(name)
            if name.chars().count() <= limits::KEY_NAME_MAX_CHARS
                && !name.chars().any(char::is_control) =>
        {
            Ok(Some(name.to_owned()))
        }
        Some(_) => Err(InvalidField::new(
            "name",
            "must be at most 64 characters without control characters",
        )),
    }
}

/// Hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// `len` uniformly random base62 characters from the OS CSPRNG (rejection sampling, no bias).
pub fn random_base62(len: usize) -> String {
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 64];
    while out.len() < len {
        OsRng.fill_bytes(&mut buf);
        for &b in &buf {
            // 248 = 4 × 62: bytes at or above it would bias the low symbols.
            if b < 248 && out.len() < len {
                out.push(BASE62[usize::from(b % 62)] as char);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_slug_bounds() {
        assert!(PlanSlug::parse("planSlug", "pro").is_ok());
        assert!(PlanSlug::parse("planSlug", "a.b_c-1").is_ok());
        assert!(PlanSlug::parse("planSlug", &"a".repeat(64)).is_ok());
        assert!(PlanSlug::parse("planSlug", &"a".repeat(65)).is_err());
        assert!(PlanSlug::parse("planSlug", "").is_err());
        assert!(PlanSlug::parse("planSlug", "Pro").is_err());
        assert!(PlanSlug::parse("planSlug", "p ro").is_err());
    }

    #[test]
    fn login_bounds() {
        assert!(Login::parse("login", "alice@example.com").is_ok());
        assert!(Login::parse("login", &"é".repeat(254)).is_ok());
        assert!(Login::parse("login", &"a".repeat(255)).is_err());
        assert!(Login::parse("login", "").is_err());
        assert!(Login::parse("login", "a\nb").is_err());
    }

    #[test]
    fn idempotency_key_bounds() {
        assert!(IdempotencyKey::parse("idempotencyKey", "12345678").is_ok());
        assert!(IdempotencyKey::parse("idempotencyKey", &"k".repeat(128)).is_ok());
        assert!(IdempotencyKey::parse("idempotencyKey", "1234567").is_err());
        assert!(IdempotencyKey::parse("idempotencyKey", &"k".repeat(129)).is_err());
        assert!(IdempotencyKey::parse("idempotencyKey", "with space").is_err());
        assert!(IdempotencyKey::parse("idempotencyKey", "ünïcödé!").is_err());
        let generated = IdempotencyKey::generate();
        assert!(IdempotencyKey::parse("k", generated.as_str()).is_ok());
    }

    #[test]
    fn generated_uuid_ids_sort_in_the_order_they_were_made() {
        let ids: Vec<String> = (0..2000)
            .map(|i| {
                if i % 2 == 0 {
                    LicenseId::generate().to_string()
                } else {
                    PromoBatchId::generate().to_string()
                }
            })
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn uuid_ids_read_only_a_hyphenated_uuid() {
        let id = LicenseId::generate().to_string();
        assert_eq!(LicenseId::parse("licenseId", &id).unwrap().to_string(), id);
        assert_eq!(
            LicenseId::parse("licenseId", &id.to_uppercase())
                .unwrap()
                .to_string(),
            id
        );
        for malformed in [
            "",
            "\0",
            "abc\0def",
            &id.replace('-', ""),
            &format!("{{{id}}}"),
            &format!("urn:uuid:{id}"),
            &format!("{id}\0"),
            &id[1..],
        ] {
            assert!(
                LicenseId::parse("licenseId", malformed).is_err(),
                "{malformed:?}"
            );
            assert!(
                PromoBatchId::parse("batchId", malformed).is_err(),
                "{malformed:?}"
            );
        }
    }

    #[test]
    fn generated_identifiers_have_their_documented_shape() {
        assert!(ClientId::parse("c", ClientId::generate().as_str()).is_ok());
        assert!(ApiKeyId::parse("k", ApiKeyId::generate().as_str()).is_ok());
        assert!(WebhookEndpointId::parse("w", WebhookEndpointId::generate().as_str()).is_ok());
        assert!(WebhookEndpointId::parse("w", "rwe_\0").is_err());
        for kind in [
            SecretKind::ApiKey,
            SecretKind::PanelSession,
            SecretKind::OperatorToken,
        ] {
            let secret = Secret::generate(kind);
            assert!(secret.has_shape(kind), "{kind:?}");
            assert_eq!(secret.expose().len(), 47);
        }
        assert_ne!(random_base62(43), random_base62(43));
    }

    #[test]
    fn secrets_redact_and_compare() {
        let secret = Secret::from_presented("rss_canary");
        assert_eq!(format!("{secret:?}"), "Secret([redacted])");
        assert_eq!(secret, Secret::from_presented("rss_canary"));
        assert_ne!(secret, Secret::from_presented("rss_canarz"));
        assert!(!format!("{:?}", Password::presented("hunter22")).contains("hunter"));
    }
}
