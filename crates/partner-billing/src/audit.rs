//! The audit trail: every change a person or an operator's tool makes (but the partner API's
//! licenses and batches, which the ledger records) is written here, append-only, in the same
//! transaction as the change, with who made it, from where, and what it touched.
//!
//! A change's function takes an [`Origin`] (the actor, and for HTTP the peer's address and the
//! request id) and writes its [`Entry`] inside its own transaction: no entry without its change,
//! no change without its entry. Details are built from parsed values only and never hold a
//! secret, token, password or promo code; free text in them is bounded ([`bounded_text`]).
//!
//! Every domain module that changes something writes its entries here, so this module imports
//! none of them; reading the trail back is [`crate::audit_log`]'s.

use std::net::IpAddr;

use serde_json::{Map, Value};

use crate::db::Tx;
use crate::domain::{ClientId, InvalidField};
use crate::error::Result;
use crate::limits::{AUDIT_DETAIL_TEXT_MAX_CHARS, OPERATOR_REASON_MAX_CHARS};
use crate::store::Store;

/// Who made a change, as the trail names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// A person signed in to the panel (HTML or JSON) of this account.
    Panel(ClientId),
    /// A reseller's backend, by its API key id.
    ApiKey(String),
    /// The product's backend, by its operator token's name.
    OperatorToken(String),
    /// An operator's `partner-billing admin` command, by the OS user running it.
    Cli(String),
}

impl Actor {
    /// `panel:<clientId>`, `api_key:<apiKeyId>`, `operator_token:<name>`, `cli:<user>`.
    pub fn label(&self) -> String {
        match self {
            Self::Panel(client_id) => format!("panel:{client_id}"),
            Self::ApiKey(id) => format!("api_key:{id}"),
            Self::OperatorToken(name) => format!("operator_token:{}", bounded_text(name)),
            Self::Cli(user) => format!("cli:{}", bounded_text(user)),
        }
    }

    /// The operator at this terminal: the OS user running the command, found from the
    /// process's real uid (never from `$USER` or `$LOGNAME`, which anyone can set and cron or a
    /// container may leave unset); `uid:<n>` when the uid has no user name.
    pub fn cli_user() -> Self {
        Self::Cli(os_user())
    }
}

/// The name of the user the process runs as (its real uid), or `uid:<n>`.
#[cfg(unix)]
fn os_user() -> String {
    let uid = uzers::get_current_uid();
    let name = uzers::get_user_by_uid(uid).map(|user| user.name().to_string_lossy().into_owned());
    user_label(uid, name)
}

#[cfg(not(unix))]
fn os_user() -> String {
    "unknown".to_owned()
}

/// A user's name, or `uid:<n>` when the uid has none (or an empty one).
fn user_label(uid: u32, name: Option<String>) -> String {
    name.filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| format!("uid:{uid}"))
}

/// Who made a change and, over HTTP, from where: what every entry records beside the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    actor: Actor,
    source_address: Option<String>,
    request_id: Option<String>,
}

impl Origin {
    /// A change made by `actor` over HTTP: the peer's address (no port) and the request's id.
    pub fn http(actor: Actor, peer: Option<IpAddr>, request_id: Option<&str>) -> Self {
        Self {
            actor,
            source_address: peer.map(|ip| ip.to_canonical().to_string()),
            request_id: request_id.map(bounded_text),
        }
    }

    /// A change made by an operator's `admin` command: no address, no request id.
    pub fn cli() -> Self {
        Self {
            actor: Actor::cli_user(),
            source_address: None,
            request_id: None,
        }
    }

    pub fn actor(&self) -> &Actor {
        &self.actor
    }
}

/// What was done. The names are a contract (docs/design.md § Audit trail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    AccountCreated,
    AccountSuspended,
    AccountReinstated,
    AccountPasswordSet,
    AccountPasswordChanged,
    SessionCreated,
    ApiKeyCreated,
    ApiKeyRolled,
    ApiKeyRevoked,
    WebhookEndpointCreated,
    WebhookEndpointDeleted,
    AlertSet,
    OperatorTokenCreated,
    OperatorTokenRevoked,
    QuotaCredited,
    QuotaAdjusted,
    PlanCreated,
    UserCreated,
    LicenseRevoked,
    PromoBatchVoided,
    PromoCodesVoided,
}

impl Action {
    /// Every action, for metrics that start each one at zero.
    pub const ALL: [Self; 21] = [
        Self::AccountCreated,
        Self::AccountSuspended,
        Self::AccountReinstated,
        Self::AccountPasswordSet,
        Self::AccountPasswordChanged,
        Self::SessionCreated,
        Self::ApiKeyCreated,
        Self::ApiKeyRolled,
        Self::ApiKeyRevoked,
        Self::WebhookEndpointCreated,
        Self::WebhookEndpointDeleted,
        Self::AlertSet,
        Self::OperatorTokenCreated,
        Self::OperatorTokenRevoked,
        Self::QuotaCredited,
        Self::QuotaAdjusted,
        Self::PlanCreated,
        Self::UserCreated,
        Self::LicenseRevoked,
        Self::PromoBatchVoided,
        Self::PromoCodesVoided,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::AccountCreated => "account.created",
            Self::AccountSuspended => "account.suspended",
            Self::AccountReinstated => "account.reinstated",
            Self::AccountPasswordSet => "account.password_set",
            Self::AccountPasswordChanged => "account.password_changed",
            Self::SessionCreated => "session.created",
            Self::ApiKeyCreated => "api_key.created",
            Self::ApiKeyRolled => "api_key.rolled",
            Self::ApiKeyRevoked => "api_key.revoked",
            Self::WebhookEndpointCreated => "webhook_endpoint.created",
            Self::WebhookEndpointDeleted => "webhook_endpoint.deleted",
            Self::AlertSet => "alert.set",
            Self::OperatorTokenCreated => "operator_token.created",
            Self::OperatorTokenRevoked => "operator_token.revoked",
            Self::QuotaCredited => "quota.credited",
            Self::QuotaAdjusted => "quota.adjusted",
            Self::PlanCreated => "plan.created",
            Self::UserCreated => "user.created",
            Self::LicenseRevoked => "license.revoked",
            Self::PromoBatchVoided => "promo_batch.voided",
            Self::PromoCodesVoided => "promo_codes.voided",
        }
    }
}

/// One entry to write: the action, the account it concerns (if any), the ids it touched and
/// its details. Built from parsed values; [`Entry::text`] bounds free text.
#[derive(Debug, Clone)]
#[must_use = "an entry is only kept once written in the change's transaction"]
pub struct Entry {
    action: Action,
    account_id: Option<i64>,
    ids: Map<String, Value>,
    details: Map<String, Value>,
}

impl Entry {
    pub fn new(action: Action, account_id: Option<i64>) -> Self {
        Self {
            action,
            account_id,
            ids: Map::new(),
            details: Map::new(),
        }
    }

    /// An id the change touched (`apiKeyId`, `webhookEndpointId`, …).
    pub fn id(mut self, name: &str, value: impl Into<String>) -> Self {
        self.ids
            .insert(name.to_owned(), Value::String(bounded_text(&value.into())));
        self
    }

    /// A detail that is a number or a flag.
    pub fn value(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.details.insert(name.to_owned(), value.into());
        self
    }

    /// A detail that is free text, bounded and stripped of control characters; `None` is kept
    /// as `null`.
    pub fn text(mut self, name: &str, value: Option<&str>) -> Self {
        self.details.insert(
            name.to_owned(),
            value.map_or(Value::Null, |text| Value::String(bounded_text(text))),
        );
        self
    }

    /// Writes the entry in the change's transaction. Returns what to report once it commits.
    pub async fn write(self, store: &Store, tx: &mut Tx, origin: &Origin) -> Result<Written> {
        sqlx::query(
            "INSERT INTO audit_entries (account_id, action, actor, source_address, request_id, \
             subjects, details, created_utc) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(self.account_id)
        .bind(self.action.as_str())
        .bind(origin.actor.label())
        .bind(origin.source_address.as_deref())
        .bind(origin.request_id.as_deref())
        .bind(Value::Object(self.ids).to_string())
        .bind(Value::Object(self.details).to_string())
        .bind(store.now_utc())
        .execute(&mut **tx)
        .await?;
        if store.fault(crate::faults::FaultPoint::AfterAuditEntry) {
            return Err(crate::Error::Internal(
                "fault injection: failed after the audit entry".to_owned(),
            ));
        }
        Ok(Written(self.action))
    }
}

/// An entry written in a transaction that has not committed yet.
#[derive(Debug, Clone, Copy)]
#[must_use = "call `committed` once the transaction has committed"]
pub struct Written(Action);

impl Written {
    /// Reports the entry to the store's observer (the server's metric) after the COMMIT.
    pub fn committed(self, store: &Store) {
        store.audit_observed(self.0.as_str());
    }
}

/// Free text for an entry: control characters become spaces, and past
/// [`AUDIT_DETAIL_TEXT_MAX_CHARS`] it is cut with `…`.
pub fn bounded_text(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(AUDIT_DETAIL_TEXT_MAX_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(AUDIT_DETAIL_TEXT_MAX_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// A URL as the trail keeps it: scheme, host, port and path only. A user name, password,
/// query or fragment can carry a credential (`?token=…`), so none is kept.
pub fn url_for_trail(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.set_fragment(None);
            bounded_text(parsed.as_str())
        }
        Err(_) => "(not a URL)".to_owned(),
    }
}

/// An operator's reason: 1 to [`OPERATOR_REASON_MAX_CHARS`] characters, no control characters.
/// Refused, not cleaned: the operator retypes it.
pub fn parse_reason(reason: &str) -> std::result::Result<&str, InvalidField> {
    if reason.trim().is_empty() || reason.chars().nth(OPERATOR_REASON_MAX_CHARS).is_some() {
        return Err(InvalidField::new("reason", "must be 1-500 characters"));
    }
    if reason.chars().any(char::is_control) {
        return Err(InvalidField::new(
            "reason",
            "must not contain control characters",
        ));
    }
    Ok(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_text_and_drops_control_characters() {
        assert_eq!(bounded_text("a\nb\u{1b}[31m"), "a b [31m");
        let long = "x".repeat(10_000);
        let kept = bounded_text(&long);
        assert_eq!(kept.chars().count(), AUDIT_DETAIL_TEXT_MAX_CHARS + 1);
        assert!(kept.ends_with('…'));
    }

    #[test]
    fn refuses_reasons_with_control_characters_or_too_long() {
        assert!(parse_reason("fix a typo").is_ok());
        assert!(parse_reason("").is_err());
        assert!(parse_reason("two\nlines").is_err());
        assert!(parse_reason(&"x".repeat(10 * 1024)).is_err());
    }

    #[test]
    fn keeps_no_credential_of_a_url() {
        assert_eq!(
            url_for_trail("https://user:pw@hooks.example:8443/in?token=abc#frag"),
            "https://hooks.example:8443/in"
        );
    }

    #[test]
    fn a_uid_without_a_name_is_named_by_its_number() {
        assert_eq!(user_label(1000, Some("ops".into())), "ops");
        assert_eq!(user_label(1000, None), "uid:1000");
        assert_eq!(user_label(1000, Some(" ".into())), "uid:1000");
    }

    #[test]
    fn labels_actors() {
        assert_eq!(Actor::ApiKey("rsk_1".into()).label(), "api_key:rsk_1");
        assert_eq!(Actor::Cli("ops\nroot".into()).label(), "cli:ops root");
    }
}
