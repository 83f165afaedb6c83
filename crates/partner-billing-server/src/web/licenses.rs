//! `GET /panel/licenses`: the licenses of the account, newest first, a keyset page at a time,
//! filter by login; and "Revoke", with a confirmation step.

use askama::Template;
use poem::http::StatusCode;
use poem::web::{Data, Path, Query};
use poem::{Request, Response, handler};
use serde::Deserialize;

use partner_billing::Error;
use partner_billing::activity;
use partner_billing::domain::Login;
use partner_billing::subscriptions::{self, Revoker};
use partner_billing::wire::LicenseRecord;

use super::flash::{self, Flash, FlashPage};
use super::layout::{self, Utc};
use super::session::{SignedIn, SignedInForm};
use crate::AppState;

struct LicenseRow {
    license_id: String,
    login: String,
    product_slug: String,
    created: Utc,
    starts: Utc,
    expires: Option<Utc>,
    revoked: Option<Utc>,
}

#[derive(Template)]
#[template(path = "licenses.html")]
struct LicensesPage {
    csrf: String,
    current: &'static str,
    login: String,
    /// Why the login in the filter was refused, shown beside it (the input kept).
    error: Option<&'static str>,
    licenses: Vec<LicenseRow>,
    /// What the last form did, once ("Revoke license").
    notice: Option<String>,
    /// This page's own cursor (none on the first page): a "Revoke" leads back to it.
    cursor: Option<String>,
    older: Option<String>,
    newer: Option<String>,
}

impl LicensesPage {
    fn page_link(&self, cursor: &str) -> String {
        list_path(&self.login, Some(cursor))
    }
}

/// The licenses list: at `cursor` when one is given, filtered by `login` when not empty.
fn list_path(login: &str, cursor: Option<&str>) -> String {
    let mut query = Vec::new();
    if let Some(cursor) = cursor {
        query.push(format!("cursor={cursor}"));
    }
    if !login.is_empty() {
        query.push(format!("login={}", urlencoding(login)));
    }
    if query.is_empty() {
        "/panel/licenses".to_owned()
    } else {
        format!("/panel/licenses?{}", query.join("&"))
    }
}

/// A login as a query value: every byte but unreserved ASCII percent-encoded.
fn urlencoding(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[derive(Deserialize)]
pub struct LicensesQuery {
    #[serde(default)]
    login: String,
    #[serde(default, deserialize_with = "layout::page_cursor")]
    cursor: Option<String>,
}

/// `GET /panel/licenses`; after "Revoke license", with its notice, once.
#[handler]
pub async fn page(
    req: &Request,
    who: SignedIn,
    state: Data<&AppState>,
    Query(query): Query<LicensesQuery>,
) -> Response {
    let state: &AppState = &state;
    flash::showing(req, state, who, FlashPage::Licenses, |who, flash| {
        list_page(who, state, query, flash.as_ref().and_then(Flash::notice))
    })
    .await
}

/// The list, with `notice` above it; a refused filter is answered without it (the notice is
/// kept for the list that follows).
async fn list_page(
    who: SignedIn,
    state: &AppState,
    query: LicensesQuery,
    notice: Option<String>,
) -> Response {
    let login = query.login;
    let filter = match login.as_str() {
        "" => None,
        text => match Login::parse("login", text) {
            Ok(login) => Some(login),
            Err(_) => {
                return layout::render(
                    StatusCode::BAD_REQUEST,
                    &LicensesPage {
                        csrf: who.csrf,
                        current: "licenses",
                        login,
                        error: Some(
                            "Not a login: a login is 1-254 characters without control characters.",
                        ),
                        licenses: Vec::new(),
                        notice: None,
                        cursor: None,
                        older: None,
                        newer: None,
                    },
                );
            }
        },
    };
    let listed = match activity::licenses(
        &state.store,
        who.account.account_id,
        filter.as_ref(),
        query.cursor.as_deref(),
    )
    .await
    {
        Ok(listed) => listed,
        Err(err) => return layout::failure_for(&who, err),
    };
    let licenses = listed
        .items
        .into_iter()
        .map(|l| LicenseRow {
            license_id: l.license_id,
            login: l.login,
            product_slug: l.product_slug,
            created: Utc::new(l.created_utc),
            starts: Utc::new(l.starts_utc),
            expires: Utc::optional(l.expires_utc),
            revoked: Utc::optional(l.revoked_utc),
        })
        .collect();
    layout::render(
        StatusCode::OK,
        &LicensesPage {
            csrf: who.csrf,
            current: "licenses",
            login,
            error: None,
            licenses,
            notice,
            cursor: query.cursor.clone(),
            older: listed.older,
            newer: listed.newer,
        },
    )
}

/// The license a "Revoke" button names, as the confirmation page shows it.
struct RevokeTarget {
    license_id: String,
    login: String,
    product_slug: String,
    starts: Utc,
    expires: Option<Utc>,
    /// Whether its period has begun (else the revocation takes none of the login's access
    /// now, and gives back its whole length).
    started: bool,
}

impl RevokeTarget {
    fn of(license: LicenseRecord, now_utc: i64) -> Self {
        Self {
            started: license.starts_utc <= now_utc,
            license_id: license.license_id,
            login: license.login,
            product_slug: license.plan_slug,
            starts: Utc::new(license.starts_utc),
            expires: Utc::optional(license.expires_utc),
        }
    }
}

#[derive(Template)]
#[template(path = "license_revoke.html")]
struct ConfirmRevokePage {
    csrf: String,
    current: &'static str,
    license: RevokeTarget,
    /// The list's login filter, kept for the way back.
    filter: String,
    /// The list's page, kept for the way back (empty: the first).
    cursor: String,
}

impl ConfirmRevokePage {
    /// "Cancel": the list's page as it was filtered.
    fn back(&self) -> String {
        list_path(&self.filter, layout::way_back(&self.cursor))
    }
}

#[derive(Deserialize)]
pub struct RevokeForm {
    /// `yes` from the confirmation page; absent from the list's button.
    #[serde(default)]
    confirm: String,
    /// The login filter of the list the button was on, if any: the way back leads to it.
    #[serde(default)]
    login: String,
    /// The cursor of the list's page the button was on, if any: the way back leads to it.
    #[serde(default)]
    cursor: String,
}

/// `POST /panel/licenses/{licenseId}/revoke`: from the list's "Revoke" button, the
/// confirmation page (nothing changes yet); from that page's "Revoke license" (`confirm=yes`),
/// the revocation, then back to the list, which says so once.
#[handler]
pub async fn revoke(
    req: &Request,
    SignedInForm { who, form }: SignedInForm<RevokeForm>,
    state: Data<&AppState>,
    Path(license_id): Path<String>,
) -> Response {
    let account_id = who.account.account_id;
    let back = list_path(&form.login, layout::way_back(&form.cursor));
    if form.confirm != "yes" {
        return match subscriptions::reseller_license(&state.store, account_id, &license_id).await {
            Ok(license) if license.revoked_utc.is_some() => layout::see_other(&back),
            Ok(license) => layout::render(
                StatusCode::OK,
                &ConfirmRevokePage {
                    csrf: who.csrf,
                    current: "licenses",
                    license: RevokeTarget::of(license, state.store.now_utc()),
                    filter: form.login,
                    cursor: layout::way_back(&form.cursor)
                        .unwrap_or_default()
                        .to_owned(),
                },
            ),
            Err(Error::LicenseNotFound) => not_found(&who),
            Err(err) => layout::failure_for(&who, err),
        };
    }
    let revoker = Revoker::Reseller {
        account_id,
        client_id: &who.account.client_id,
    };
    match subscriptions::revoke_license(&state.store, revoker, &license_id, &who.origin).await {
        Ok(revoked) => {
            let done = Flash::LicenseRevoked {
                license_id: revoked.license_id,
            };
            flash::see_other_to(req, &state, &who, done, &back).await
        }
        Err(Error::LicenseNotFound) => not_found(&who),
        Err(err) => layout::failure_for(&who, err),
    }
}

fn not_found(who: &SignedIn) -> Response {
    layout::signed_in_message(
        who,
        StatusCode::NOT_FOUND,
        "No such license",
        "None of your licenses has this id. Nothing was changed.",
    )
}
