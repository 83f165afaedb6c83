//! Fuzzes credential and header parsing (docs/design.md) on the real server, in process.
//!
//! Each input becomes one request to the app of `partner_billing_server::app` over a SQLite
//! store created once, holding one reseller with one API key, one panel session and one operator
//! token. The fuzzer chooses the `X-Client-Id`, `X-Client-Secret` and `Authorization` headers
//! (raw bytes, Basic over anything, Bearer, or the valid values, whole or mutated), browser
//! markers, and the endpoint. Checked on every input:
//!
//! - nothing panics and no answer is a 5xx;
//! - every 401 is the empty one, with `WWW-Authenticate: Basic realm="partner-billing"` on the
//!   partner API and `Bearer realm="partner-billing"` on the panel and product APIs;
//! - a partner request with a browser marker is the 403 `Request.BrowserOriginForbidden`;
//! - `GET /v1/billing/partner/balances` is 200 exactly when the valid key is presented in the
//!   form that decides (both dedicated headers, else HTTP Basic), and 401 otherwise.
//!
//! The same input also drives the pure parsers: `Secret` shapes, client and key ids, slugs,
//! logins, idempotency keys and promo-code normalisation.
//!
//! Run: `cargo +nightly fuzz run credentials -- -max_total_time=300` (from the repository root).
//!
//! Over 450 lines on purpose: a cargo-fuzz target is one file and one binary, holding its fixture,
//! its input grammar and every check made on an input.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use poem::endpoint::BoxEndpoint;
use poem::http::{HeaderValue, Method, StatusCode, Uri, header};
use poem::{Endpoint, Request};

use partner_billing::accounts;
use partner_billing::clock::Clock;
use partner_billing::domain::{
    ApiKeyId, ClientId, IdempotencyKey, Login, Password, PlanSlug, Secret, SecretKind,
};
use partner_billing::keys;
use partner_billing::operators;
use partner_billing::promo::{display_code, normalize_code};
use partner_billing::store::Store;
use partner_billing_server::{AppState, WWW_AUTHENTICATE, WWW_AUTHENTICATE_BEARER, app};

/// The app and the valid credentials it knows.
struct Fixture {
    runtime: tokio::runtime::Runtime,
    app: BoxEndpoint<'static>,
    client_id: String,
    secret: String,
    session: String,
    operator: String,
}

const DIR_PREFIX: &str = "partner-billing-fuzz-";

/// Removes the databases of earlier runs whose process is gone (Linux: `/proc/<pid>`).
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        if !PathBuf::from("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        remove_stale_dirs();
        let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the database directory");
        let url = format!("sqlite://{}", dir.join("billing.db").display());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let (store, client_id, secret, session, operator) = runtime.block_on(async {
            let store = Store::connect(&url, Clock::system())
                .await
                .expect("store connects");
            let password = "fuzzing-password-1";
            let client_id = accounts::create_reseller(
                &store,
                "Fuzz Resale",
                Password::parse("password", password).expect("password"), &partner_billing::audit::Origin::cli(),
            )
            .await
            .expect("create reseller");
            let session =
                accounts::create_session(&store, client_id.as_str(), Password::presented(password), None)
                    .await
                    .expect("panel session");
            let account = accounts::authenticate_session(
                &store,
                &Secret::from_presented(session.session_token.clone()),
            )
            .await
            .expect("session works");
            let key = keys::create_api_key(&store, account.account_id, Some("fuzz"), &partner_billing::audit::Origin::cli())
                .await
                .expect("create key");
            let operator = operators::create_operator_token(&store, "fuzz", &partner_billing::audit::Origin::cli())
                .await
                .expect("operator token");
            (
                store,
                key.client_id,
                key.secret,
                session.session_token,
                operator.token.expose().to_owned(),
            )
        });
        Fixture {
            app: app(AppState {
            store,
            metrics: Default::default(),
        }),
            runtime,
            client_id,
            secret,
            session,
            operator,
        }
    })
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Valid {
    ClientId,
    Secret,
    Session,
    Operator,
}

/// A header value or credential part as presented.
#[derive(Arbitrary, Debug)]
enum Text {
    Raw(Vec<u8>),
    Valid(Valid),
    /// A valid value with one byte replaced.
    Mutated(Valid, u8, u8),
    /// A valid value cut short.
    Truncated(Valid, u8),
    /// A valid value with bytes around it.
    Wrapped(Vec<u8>, Valid, Vec<u8>),
}

impl Text {
    fn render(&self, fx: &Fixture) -> Vec<u8> {
        let valid = |v: &Valid| {
            match v {
                Valid::ClientId => &fx.client_id,
                Valid::Secret => &fx.secret,
                Valid::Session => &fx.session,
                Valid::Operator => &fx.operator,
            }
            .as_bytes()
            .to_vec()
        };
        match self {
            Self::Raw(bytes) => bytes.clone(),
            Self::Valid(v) => valid(v),
            Self::Mutated(v, at, byte) => {
                let mut bytes = valid(v);
                let at = usize::from(*at) % bytes.len();
                bytes[at] = *byte;
                bytes
            }
            Self::Truncated(v, len) => {
                let mut bytes = valid(v);
                bytes.truncate(usize::from(*len));
                bytes
            }
            Self::Wrapped(before, v, after) => [before.clone(), valid(v), after.clone()].concat(),
        }
    }
}

/// An authorization scheme name, in any case, followed by 0–3 spaces.
#[derive(Arbitrary, Debug)]
struct Scheme {
    upper: u8,
    spaces: u8,
}

impl Scheme {
    fn render(&self, name: &str) -> Vec<u8> {
        let mut out: Vec<u8> = name
            .bytes()
            .enumerate()
            .map(|(i, b)| {
                if self.upper & (1 << (i % 8)) != 0 {
                    b.to_ascii_uppercase()
                } else {
                    b.to_ascii_lowercase()
                }
            })
            .collect();
        out.extend(std::iter::repeat_n(b' ', usize::from(self.spaces % 4)));
        out
    }
}

#[derive(Arbitrary, Debug)]
enum Authorization {
    Raw(Text),
    Basic {
        scheme: Scheme,
        user: Text,
        password: Text,
    },
    BasicOf {
        scheme: Scheme,
        raw: Vec<u8>,
    },
    Bearer {
        scheme: Scheme,
        token: Text,
    },
}

impl Authorization {
    fn render(&self, fx: &Fixture) -> Vec<u8> {
        match self {
            Self::Raw(text) => text.render(fx),
            Self::Basic {
                scheme,
                user,
                password,
            } => {
                let pair = [user.render(fx), b":".to_vec(), password.render(fx)].concat();
                [scheme.render("Basic"), BASE64.encode(pair).into_bytes()].concat()
            }
            Self::BasicOf { scheme, raw } => {
                [scheme.render("Basic"), BASE64.encode(raw).into_bytes()].concat()
            }
            Self::Bearer { scheme, token } => [scheme.render("Bearer"), token.render(fx)].concat(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Origin,
    SecFetchSite,
    SecFetchMode,
}

#[derive(Arbitrary, Debug)]
enum Target {
    Balances,
    IssueLicense { content_type: bool, body: Vec<u8> },
    PanelAccount,
    UserLicenses { login: Vec<u8> },
}

#[derive(Arbitrary, Debug)]
struct Input {
    target: Target,
    client_id: Option<Text>,
    secret: Option<Text>,
    authorization: Option<Authorization>,
    browser: Option<(Marker, Vec<u8>)>,
    parsers: String,
}

/// Percent-encodes every byte but the unreserved ones, for a path segment.
fn percent_encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The client id and secret HTTP Basic carries, decoded as the `headers` crate does.
fn basic_pair(value: &HeaderValue) -> Option<(String, String)> {
    let bytes = value.as_bytes();
    if bytes.len() <= 5 || bytes[5] != b' ' || !bytes[..5].eq_ignore_ascii_case(b"Basic") {
        return None;
    }
    let rest = &bytes[6..];
    let start = rest.iter().position(|b| *b != b' ')?;
    let decoded = String::from_utf8(BASE64.decode(&rest[start..]).ok()?).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// A header as text, as the server reads it (visible ASCII only).
fn readable(value: &Option<HeaderValue>) -> Option<&str> {
    value.as_ref().and_then(|v| v.to_str().ok())
}

fn check_parsers(text: &str) {
    for kind in [
        SecretKind::ApiKey,
        SecretKind::PanelSession,
        SecretKind::OperatorToken,
    ] {
        let secret = Secret::from_presented(text);
        let prefix = match kind {
            SecretKind::ApiKey => "rss_",
            SecretKind::PanelSession => "rps_",
            SecretKind::OperatorToken => "rso_",
        };
        let shaped = text.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() == 43 && rest.bytes().all(|b| b.is_ascii_alphanumeric())
        });
        assert_eq!(secret.has_shape(kind), shaped);
        assert_eq!(secret.hash().len(), 64);
    }
    for (ok, prefix) in [
        (ClientId::parse("clientId", text).is_ok(), "rsc_"),
        (ApiKeyId::parse("apiKeyId", text).is_ok(), "rsk_"),
    ] {
        let shaped = text.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() == 24 && rest.bytes().all(|b| b.is_ascii_alphanumeric())
        });
        assert_eq!(ok, shaped);
    }
    if let Ok(slug) = PlanSlug::parse("planSlug", text) {
        assert_eq!(slug.as_str(), text);
        assert!((1..=64).contains(&text.len()));
    }
    if let Ok(login) = Login::parse("login", text) {
        assert_eq!(login.as_str(), text);
        assert!(!text.chars().any(char::is_control));
    }
    if let Ok(key) = IdempotencyKey::parse("idempotencyKey", text) {
        assert_eq!(key.as_str(), text);
        assert!(text.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    }
    if let Some(code) = normalize_code(text) {
        assert_eq!(code.len(), 16);
        assert_eq!(normalize_code(&code).as_deref(), Some(code.as_str()));
        assert_eq!(
            normalize_code(&display_code(&code)).as_deref(),
            Some(code.as_str())
        );
        assert_eq!(
            normalize_code(&code.to_lowercase()).as_deref(),
            Some(code.as_str())
        );
    }
}

fuzz_target!(|input: Input| {
    check_parsers(&input.parsers);
    let fx = fixture();

    let (method, path) = match &input.target {
        Target::Balances => (Method::GET, "/v1/billing/partner/balances".to_owned()),
        Target::IssueLicense { .. } => (Method::POST, "/v1/billing/partner/licenses".to_owned()),
        Target::PanelAccount => (Method::GET, "/v1/billing/resellers/me".to_owned()),
        Target::UserLicenses { login } => (
            Method::GET,
            format!(
                "/v1/billing/product/users/{}/licenses",
                percent_encode(login)
            ),
        ),
    };
    let Ok(uri) = Uri::try_from(path) else {
        return;
    };
    let mut request = Request::builder().method(method).uri(uri).finish();
    let mut set = |name: &'static str, bytes: Vec<u8>| -> Option<HeaderValue> {
        let value = HeaderValue::from_bytes(&bytes).ok()?;
        request.headers_mut().insert(name, value.clone());
        Some(value)
    };
    let client_id = input
        .client_id
        .as_ref()
        .and_then(|t| set("x-client-id", t.render(fx)));
    let secret = input
        .secret
        .as_ref()
        .and_then(|t| set("x-client-secret", t.render(fx)));
    let authorization = input
        .authorization
        .as_ref()
        .and_then(|a| set("authorization", a.render(fx)));
    let marker = input.browser.as_ref().and_then(|(marker, value)| {
        let name = match marker {
            Marker::Origin => "origin",
            Marker::SecFetchSite => "sec-fetch-site",
            Marker::SecFetchMode => "sec-fetch-mode",
        };
        set(name, value.clone()).map(|_| *marker)
    });
    if let Target::IssueLicense { content_type, body } = &input.target {
        if *content_type {
            request.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        request.set_body(body.clone());
    }

    let (status, www_authenticate, content_type, body) = fx.runtime.block_on(async {
        let response = fx.app.call(request).await.expect("the app always answers");
        let status = response.status();
        let www = response.headers().get(header::WWW_AUTHENTICATE).cloned();
        let ct = response.headers().get(header::CONTENT_TYPE).cloned();
        let body = response
            .into_body()
            .into_vec()
            .await
            .expect("body readable");
        (status, www, ct, body)
    });

    assert!(!status.is_server_error(), "{status} for {input:?}");
    if status == StatusCode::UNAUTHORIZED {
        assert!(body.is_empty(), "a 401 with a body for {input:?}");
        assert!(
            content_type.is_none(),
            "a 401 with a content type for {input:?}"
        );
        // API keys are challenged with Basic; panel sessions and operator tokens with Bearer.
        let challenge = match &input.target {
            Target::Balances | Target::IssueLicense { .. } => WWW_AUTHENTICATE,
            Target::PanelAccount | Target::UserLicenses { .. } => WWW_AUTHENTICATE_BEARER,
        };
        assert_eq!(
            www_authenticate.as_ref().and_then(|v| v.to_str().ok()),
            Some(challenge)
        );
    } else {
        assert!(
            content_type.is_some() || status.is_success(),
            "{status} without a content type for {input:?}"
        );
    }
    for secret in [&fx.secret, &fx.session, &fx.operator] {
        let leaked = body.windows(secret.len()).any(|w| w == secret.as_bytes());
        assert!(!leaked, "a credential echoed for {input:?}");
    }

    let partner = matches!(input.target, Target::Balances | Target::IssueLicense { .. });
    if partner && marker.is_some() {
        assert_eq!(status, StatusCode::FORBIDDEN, "{input:?}");
        let problem: serde_json::Value = serde_json::from_slice(&body).expect("a problem body");
        assert_eq!(problem["code"], "Request.BrowserOriginForbidden");
        return;
    }
    if !partner {
        // Panel and product: never reachable with these credentials but their own.
        let bearer = readable(&authorization)
            .filter(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer "))
            .map(|v| v[7..].trim_start());
        let own = match input.target {
            Target::PanelAccount => &fx.session,
            _ => &fx.operator,
        };
        if status.is_success() {
            assert_eq!(bearer, Some(own.as_str()), "{input:?}");
        }
        return;
    }

    // Which credential decides: both dedicated headers, readable as text; else HTTP Basic.
    let presented = match (readable(&client_id), readable(&secret)) {
        (Some(id), Some(secret)) => Some((id.to_owned(), secret.to_owned())),
        _ => authorization.as_ref().and_then(basic_pair),
    };
    let valid = presented.is_some_and(|(id, secret)| id == fx.client_id && secret == fx.secret);
    match input.target {
        Target::Balances => {
            let expected = if valid {
                StatusCode::OK
            } else {
                StatusCode::UNAUTHORIZED
            };
            assert_eq!(status, expected, "{input:?}");
        }
        _ => {
            // No plan exists, so a license is never issued; a body error may come first.
            assert_ne!(status, StatusCode::OK, "{input:?}");
            if !valid {
                assert!(
                    matches!(status.as_u16(), 400 | 401 | 413),
                    "{status} for {input:?}"
                );
            }
        }
    }
});
