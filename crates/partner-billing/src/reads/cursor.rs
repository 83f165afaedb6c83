//! Opaque keyset cursors: the last item's sort key and which list it belongs to, encrypted
//! under the master key (XChaCha20-Poly1305, a synthetic nonce: the same position gives the
//! same cursor) with the account and the list's filter (a login, a product: the values the
//! page was read with) bound as associated data. The sort keys are row ids and transaction
//! ids numbered across every account, so a reseller reading them in clear could count the
//! others' activity; encrypted, a cursor tells nothing. The operator's log, read where there
//! may be no master key (and only by the operator), carries its position in clear with a
//! SHA-256 digest of the same binding. A cursor that does not decode, was altered, belongs to
//! another list, another account or another filter is `Request.ValidationFailed` on `cursor`;
//! and whatever a cursor says, every query is still bound to the caller's own account.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::domain::InvalidField;
use crate::error::{Error, Result};
use crate::store::Store;

/// Which list a cursor pages through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum List {
    Licenses,
    PromoBatches,
    Ledger,
    /// The panel's pages, which go both ways (older and newer).
    PanelLedger,
    PanelLicenses,
    PanelPromoBatches,
    PanelActivity,
    /// The account's audit trail (the activity API).
    Activity,
    /// The operator's log (`admin audit log`).
    OperatorLog,
}

impl List {
    fn tag(self) -> &'static str {
        match self {
            Self::Licenses => "lic",
            Self::PromoBatches => "pb",
            Self::Ledger => "led",
            Self::PanelLedger => "pled",
            Self::PanelLicenses => "plic",
            Self::PanelPromoBatches => "ppb",
            Self::PanelActivity => "pact",
            Self::Activity => "act",
            Self::OperatorLog => "olog",
        }
    }

    /// Whether its cursors are encrypted under the master key. The operator's log is read by
    /// whoever holds the database, with or without the master key (`admin` runs without one):
    /// a digest seals its cursors, which still catches one altered or used under another
    /// filter; there is nothing to forge it against, and nobody else reads it.
    fn keyed(self) -> bool {
        self != Self::OperatorLog
    }
}

/// Hex characters of the digest kept in an operator's log cursor, and of the MAC of a cursor
/// signed before cursors were encrypted (80 bits).
const MAC_HEX_CHARS: usize = 20;

/// What a page of a list was filtered by, in the list's own order of filters, `""` for one
/// not set (every filter value is non-empty text): sealed into its cursors, never written out.
pub(crate) type Filter<'a> = &'a [&'a str];

/// A filter as one text: each value length-prefixed, so that no two filters read as one.
fn filter_text(filter: Filter<'_>) -> String {
    filter
        .iter()
        .map(|value| format!("{}:{value}", value.len()))
        .collect()
}

/// What a cursor is bound to: the account, the list and its filter.
fn binding(account_id: i64, list: List, filter: Filter<'_>) -> String {
    format!("cursor|{account_id}|{}|{}", list.tag(), filter_text(filter))
}

/// The position of a cursor that carries it in clear, `payload.tag`, when its tag is the one
/// `expected` computes for that payload (compared in constant time).
fn clear_payload(bytes: &[u8], expected: impl Fn(&str) -> String) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (payload, tag) = text.rsplit_once('.')?;
    let mut expected = expected(payload);
    expected.truncate(MAC_HEX_CHARS);
    bool::from(subtle::ConstantTimeEq::ct_eq(
        tag.as_bytes(),
        expected.as_bytes(),
    ))
    .then(|| payload.to_owned())
}

/// The tag of a cursor handed out before cursors were encrypted: an HMAC under the master
/// key's lookup subkey over the account, the position and the filter. Such cursors are still
/// read (never written), so that a consumer of the ledger feed keeps its place across the
/// upgrade.
fn signed_tag(
    key: &crate::crypto::MasterKey,
    account_id: i64,
    filter: Filter<'_>,
    payload: &str,
) -> String {
    key.code_hash(&format!(
        "cursor|{account_id}|{payload}|{}",
        filter_text(filter)
    ))
}

/// The operator's log cursor's digest of `payload` and its binding.
fn digest(binding: &str, payload: &str) -> String {
    let mut full = crate::domain::sha256_hex(format!("{binding}|{payload}").as_bytes());
    full.truncate(MAC_HEX_CHARS);
    full
}

/// The cursor after the item whose sort key is `position`, in the list read with `filter`.
pub(crate) fn encode(
    store: &Store,
    account_id: i64,
    list: List,
    filter: Filter<'_>,
    position: &[i64],
) -> Result<String> {
    let values: Vec<String> = position.iter().map(i64::to_string).collect();
    let payload = format!("{}.{}", list.tag(), values.join("."));
    let binding = binding(account_id, list, filter);
    if !list.keyed() {
        let tag = digest(&binding, &payload);
        return Ok(URL_SAFE_NO_PAD.encode(format!("{payload}.{tag}")));
    }
    let sealed = store
        .master_key()?
        .seal_deterministic(payload.as_bytes(), binding.as_bytes())
        .map_err(|_| Error::Internal("a list cursor could not be sealed".to_owned()))?;
    Ok(URL_SAFE_NO_PAD.encode(sealed))
}

fn unreadable() -> Error {
    InvalidField::new(
        "cursor",
        "is not a cursor of this list: pass `nextCursor` as it was returned",
    )
    .into()
}

/// The sort key a cursor of `list` read with `filter` carries, `arity` numbers; any other text,
/// a cursor taken under another filter included, is refused.
pub(crate) fn decode(
    store: &Store,
    account_id: i64,
    list: List,
    filter: Filter<'_>,
    arity: usize,
    cursor: &str,
) -> Result<Vec<i64>> {
    if cursor.len() > crate::limits::CURSOR_MAX_CHARS {
        return Err(unreadable());
    }
    let bytes = URL_SAFE_NO_PAD
        .decode(cursor.as_bytes())
        .map_err(|_| unreadable())?;
    let binding = binding(account_id, list, filter);
    let payload = if list.keyed() {
        let key = store.master_key()?;
        match key.open(&bytes, binding.as_bytes()) {
            Ok(opened) => String::from_utf8(opened).map_err(|_| unreadable())?,
            Err(_) => clear_payload(&bytes, |payload| {
                signed_tag(key, account_id, filter, payload)
            })
            .ok_or_else(unreadable)?,
        }
    } else {
        clear_payload(&bytes, |payload| digest(&binding, payload)).ok_or_else(unreadable)?
    };
    let mut parts = payload.split('.');
    if parts.next() != Some(list.tag()) {
        return Err(unreadable());
    }
    let values: Vec<i64> = parts
        .map(|p| p.parse::<i64>().map_err(|_| unreadable()))
        .collect::<Result<_>>()?;
    if values.len() != arity {
        return Err(unreadable());
    }
    Ok(values)
}
