//! Property tests of both credential forms at the HTTP layer (docs/design.md), on the real app in
//! process over a fresh SQLite store: arbitrary `X-Client-Id`, `X-Client-Secret` and
//! `Authorization` values never panic the server or give a 5xx, anything that is not a valid key
//! is the one empty 401, and a valid key is accepted in either form alike.
//!
//! Over 450 lines on purpose: the app fixture, the strategies of arbitrary and near-miss
//! credentials and the properties drawing from them read as one piece; split apart, a property
//! would lose sight of what it draws.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use poem::endpoint::BoxEndpoint;
use poem::http::{HeaderValue, Method, StatusCode, header};
use poem::{Endpoint, Request};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};

use partner_billing::accounts;
use partner_billing::clock::Clock;
use partner_billing::domain::{Password, Secret};
use partner_billing::keys;
use partner_billing::store::Store;
use partner_billing_server::{AppState, WWW_AUTHENTICATE, app};

const BALANCES: &str = "/v1/billing/partner/balances";
const LICENSES: &str = "/v1/billing/partner/licenses";

/// Each test makes a few dozen requests at most per case; keep CI fast.
fn config() -> Config {
    Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    }
}

/// A valid API key: client id and secret.
#[derive(Debug, Clone)]
struct Key {
    client_id: String,
    secret: String,
}

/// The app over a fresh SQLite store with two resellers of two keys each.
struct Fixture {
    runtime: tokio::runtime::Runtime,
    app: BoxEndpoint<'static>,
    keys: Vec<Key>,
    dir: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fixture() -> Fixture {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "credentials-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test directory");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let url = format!("sqlite://{}", dir.join("billing.db").display());
    let (store, keys) = runtime.block_on(async {
        let store = Store::connect(&url, Clock::system())
            .await
            .expect("store connects");
        let mut keys = Vec::new();
        for n in 0..2 {
            let password = format!("password-{n}-of-the-fixture");
            let client_id = accounts::create_reseller(
                &store,
                &format!("Reseller {n}"),
                Password::parse("password", &password).expect("password"),
                &partner_billing::audit::Origin::cli(),
            )
            .await
            .expect("create reseller");
            let session = accounts::create_session(
                &store,
                client_id.as_str(),
                Password::presented(password),
                None,
                None,
            )
            .await
            .expect("panel session");
            let account = accounts::authenticate_session(
                &store,
                &Secret::from_presented(session.session_token),
            )
            .await
            .expect("session works");
            for _ in 0..2 {
                let created = keys::create_api_key(
                    &store,
                    account.account_id,
                    None,
                    &partner_billing::audit::Origin::cli(),
                )
                .await
                .expect("create key");
                keys.push(Key {
                    client_id: created.client_id,
                    secret: created.secret,
                });
            }
        }
        (store, keys)
    });
    Fixture {
        app: app(AppState {
            store,
            metrics: Default::default(),
        }),
        runtime,
        keys,
        dir,
    }
}

/// How a credential is presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Headers,
    Basic,
}

fn basic(client_id: &str, secret: &str) -> Vec<u8> {
    format!("Basic {}", BASE64.encode(format!("{client_id}:{secret}"))).into_bytes()
}

/// What came back, read in full.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    www_authenticate: Option<HeaderValue>,
    content_type: Option<HeaderValue>,
    body: Vec<u8>,
}

impl Fixture {
    /// Sends one request with the given raw header values (those `HeaderValue` refuses are
    /// simply not sent, as no client could send them).
    fn send(&self, method: Method, path: &str, headers: &[(&str, Vec<u8>)]) -> Answer {
        let mut builder = Request::builder().method(method.clone()).uri_str(path);
        for (name, value) in headers {
            if let Ok(value) = HeaderValue::from_bytes(value) {
                builder = builder.header(*name, value);
            }
        }
        let request = if method == Method::POST {
            builder.content_type("application/json").body(
                r#"{"planSlug":"pro","login":"someone@example.com","idempotencyKey":"prop-key-1"}"#,
            )
        } else {
            builder.finish()
        };
        self.runtime.block_on(async {
            let response = self
                .app
                .call(request)
                .await
                .expect("the app always answers");
            let status = response.status();
            let www_authenticate = response.headers().get(header::WWW_AUTHENTICATE).cloned();
            let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
            let body = response
                .into_body()
                .into_vec()
                .await
                .expect("body readable");
            Answer {
                status,
                www_authenticate,
                content_type,
                body,
            }
        })
    }

    fn send_key(&self, form: Form, client_id: &str, secret: &str) -> Answer {
        match form {
            Form::Headers => self.send(
                Method::GET,
                BALANCES,
                &[
                    ("X-Client-Id", client_id.as_bytes().to_vec()),
                    ("X-Client-Secret", secret.as_bytes().to_vec()),
                ],
            ),
            Form::Basic => self.send(
                Method::GET,
                BALANCES,
                &[("Authorization", basic(client_id, secret))],
            ),
        }
    }
}

fn assert_empty_401(answer: &Answer) -> Result<(), TestCaseError> {
    prop_assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{:?}", answer);
    prop_assert!(answer.body.is_empty(), "{:?}", answer);
    prop_assert_eq!(
        answer
            .www_authenticate
            .as_ref()
            .and_then(|v| v.to_str().ok()),
        Some(WWW_AUTHENTICATE)
    );
    prop_assert!(answer.content_type.is_none(), "{:?}", answer);
    Ok(())
}

fn assert_accepted(answer: &Answer) -> Result<(), TestCaseError> {
    prop_assert_eq!(answer.status, StatusCode::OK, "{:?}", answer);
    let body: serde_json::Value =
        serde_json::from_slice(&answer.body).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(body["balances"].is_array(), "{}", body);
    Ok(())
}

/// Bytes a header value may hold (visible ASCII, space, tab, obs-text) and a few it may not.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..80),
        proptest::collection::vec(
            prop_oneof![8 => 0x20u8..0x7f, 1 => 0x80u8..=0xff, 1 => Just(b'\t')],
            0..80
        ),
    ]
}

/// Text shaped like the real thing, and near misses of it.
fn credential_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "rsc_[A-Za-z0-9]{24}",
        "rss_[A-Za-z0-9]{43}",
        "rs[cks]_[A-Za-z0-9]{20,48}",
        "[ -~]{0,60}",
        any::<String>(),
    ]
}

/// An `Authorization` value: Basic over anything, Bearer, other schemes, or raw bytes.
fn authorization() -> impl Strategy<Value = Vec<u8>> {
    let scheme = proptest::sample::select(vec![
        "Basic ", "basic ", "BASIC ", "Basic", "Basic  ", "Bearer ", "Digest ", "",
    ]);
    prop_oneof![
        (
            scheme.clone(),
            proptest::collection::vec(any::<u8>(), 0..80)
        )
            .prop_map(|(s, raw)| format!("{s}{}", BASE64.encode(raw)).into_bytes()),
        (scheme.clone(), credential_text(), credential_text()).prop_map(|(s, u, p)| format!(
            "{s}{}",
            BASE64.encode(format!("{u}:{p}"))
        )
        .into_bytes()),
        (scheme, "[A-Za-z0-9+/=:_ -]{0,80}").prop_map(|(s, t)| format!("{s}{t}").into_bytes()),
        header_bytes(),
    ]
}

fn optional_header(
    values: impl Strategy<Value = Vec<u8>>,
) -> impl Strategy<Value = Option<Vec<u8>>> {
    proptest::option::of(values)
}

/// A client id and secret built from the real keys: exact, swapped between keys, or mutated.
#[derive(Debug, Clone)]
enum Candidate {
    Exact(usize),
    Crossed(usize, usize),
    MutatedSecret(usize, usize, char),
    MutatedClientId(usize, usize, char),
    Truncated(usize, usize),
    Extended(usize, String),
    Cased(usize),
    Padded(usize),
    Garbage(String, String),
}

fn candidate() -> impl Strategy<Value = Candidate> {
    let key = 0usize..4;
    prop_oneof![
        3 => key.clone().prop_map(Candidate::Exact),
        1 => (key.clone(), key.clone()).prop_map(|(a, b)| Candidate::Crossed(a, b)),
        1 => (key.clone(), 0usize..47, proptest::char::range('!', '~'))
            .prop_map(|(k, at, c)| Candidate::MutatedSecret(k, at, c)),
        1 => (key.clone(), 0usize..28, proptest::char::range('!', '~'))
            .prop_map(|(k, at, c)| Candidate::MutatedClientId(k, at, c)),
        1 => (key.clone(), 0usize..47).prop_map(|(k, n)| Candidate::Truncated(k, n)),
        1 => (key.clone(), "[ -~]{1,8}").prop_map(|(k, s)| Candidate::Extended(k, s)),
        1 => key.clone().prop_map(Candidate::Cased),
        1 => key.prop_map(Candidate::Padded),
        1 => ("[!-9;-~]{0,40}", "[ -~]{0,60}").prop_map(|(u, p)| Candidate::Garbage(u, p)),
    ]
}

fn replace_at(text: &str, at: usize, c: char) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    let at = at % chars.len();
    chars[at] = c;
    chars.into_iter().collect()
}

impl Candidate {
    /// The client id and secret to present.
    fn resolve(&self, keys: &[Key]) -> (String, String) {
        match self {
            Self::Exact(k) => (keys[*k].client_id.clone(), keys[*k].secret.clone()),
            Self::Crossed(a, b) => (keys[*a].client_id.clone(), keys[*b].secret.clone()),
            Self::MutatedSecret(k, at, c) => (
                keys[*k].client_id.clone(),
                replace_at(&keys[*k].secret, *at, *c),
            ),
            Self::MutatedClientId(k, at, c) => (
                replace_at(&keys[*k].client_id, *at, *c),
                keys[*k].secret.clone(),
            ),
            Self::Truncated(k, n) => (keys[*k].client_id.clone(), keys[*k].secret[..*n].to_owned()),
            Self::Extended(k, tail) => (
                keys[*k].client_id.clone(),
                format!("{}{tail}", keys[*k].secret),
            ),
            Self::Cased(k) => (
                keys[*k].client_id.clone(),
                keys[*k].secret.to_ascii_uppercase(),
            ),
            Self::Padded(k) => (keys[*k].client_id.clone(), format!(" {}", keys[*k].secret)),
            Self::Garbage(u, p) => (u.clone(), p.clone()),
        }
    }
}

#[test]
fn arbitrary_credential_headers_get_the_empty_401() {
    let fx = fixture();
    proptest!(config(), |(
        client_id in optional_header(prop_oneof![
            credential_text().prop_map(String::into_bytes),
            header_bytes(),
        ]),
        secret in optional_header(prop_oneof![
            credential_text().prop_map(String::into_bytes),
            header_bytes(),
        ]),
        authorization in optional_header(authorization()),
        post in any::<bool>(),
    )| {
        let mut headers = Vec::new();
        if let Some(v) = client_id {
            headers.push(("X-Client-Id", v));
        }
        if let Some(v) = secret {
            headers.push(("X-Client-Secret", v));
        }
        if let Some(v) = authorization {
            headers.push(("Authorization", v));
        }
        let (method, path) = if post { (Method::POST, LICENSES) } else { (Method::GET, BALANCES) };
        let answer = fx.send(method, path, &headers);
        prop_assert!(!answer.status.is_server_error(), "{:?}", answer);
        assert_empty_401(&answer)?;
    });
}

#[test]
fn an_api_secret_as_a_bearer_token_is_refused() {
    let fx = fixture();
    proptest!(config(), |(k in 0usize..4, scheme in "(Bearer|bearer|BEARER) {1,2}")| {
        let key = &fx.keys[k];
        let answer = fx.send(
            Method::GET,
            BALANCES,
            &[("Authorization", format!("{scheme}{}", key.secret).into_bytes())],
        );
        assert_empty_401(&answer)?;
    });
}

#[test]
fn both_forms_agree_and_accept_exactly_the_valid_keys() {
    let fx = fixture();
    proptest!(config(), |(candidate in candidate())| {
        let (client_id, secret) = candidate.resolve(&fx.keys);
        let valid = fx.keys.iter().any(|k| k.client_id == client_id && k.secret == secret);
        let by_headers = fx.send_key(Form::Headers, &client_id, &secret);
        let by_basic = fx.send_key(Form::Basic, &client_id, &secret);
        prop_assert_eq!(by_headers.status, by_basic.status, "{:?} / {:?}", by_headers, by_basic);
        if valid {
            assert_accepted(&by_headers)?;
            assert_accepted(&by_basic)?;
            prop_assert_eq!(&by_headers.body, &by_basic.body);
        } else {
            assert_empty_401(&by_headers)?;
            assert_empty_401(&by_basic)?;
        }
    });
}

#[test]
fn a_valid_key_is_accepted_in_either_form_whatever_else_is_sent() {
    let fx = fixture();
    proptest!(config(), |(
        k in 0usize..4,
        form in prop_oneof![Just(Form::Headers), Just(Form::Basic)],
        scheme in "[Bb][Aa][Ss][Ii][Cc]",
        noise in header_bytes(),
    )| {
        let key = &fx.keys[k];
        let answer = match form {
            // The dedicated headers are checked first: a stray `Authorization` is ignored.
            Form::Headers => fx.send(Method::GET, BALANCES, &[
                ("X-Client-Id", key.client_id.clone().into_bytes()),
                ("X-Client-Secret", key.secret.clone().into_bytes()),
                ("Authorization", noise.clone()),
                ("X-Request-Id", noise),
            ]),
            // Basic in any scheme case; an `X-Client-Id` without its secret is no credential.
            Form::Basic => fx.send(Method::GET, BALANCES, &[
                (
                    "Authorization",
                    format!("{scheme} {}", BASE64.encode(format!("{}:{}", key.client_id, key.secret))).into_bytes(),
                ),
                ("X-Client-Id", noise),
            ]),
        };
        assert_accepted(&answer)?;
    });
}

#[test]
fn dedicated_headers_decide_when_both_are_present() {
    let fx = fixture();
    proptest!(config(), |(k in 0usize..4, bad_id in credential_text(), bad_secret in credential_text())| {
        let key = &fx.keys[k];
        // Wrong dedicated headers are not rescued by a valid Basic credential.
        let answer = fx.send(Method::GET, BALANCES, &[
            ("X-Client-Id", bad_id.clone().into_bytes()),
            ("X-Client-Secret", bad_secret.clone().into_bytes()),
            ("Authorization", basic(&key.client_id, &key.secret)),
        ]);
        // A value that is not visible ASCII cannot be read as a dedicated header at all: then
        // the pair is absent and Basic decides.
        let readable = |v: &str| HeaderValue::from_str(v).is_ok_and(|h| h.to_str().is_ok());
        if readable(&bad_id) && readable(&bad_secret) {
            assert_empty_401(&answer)?;
        } else {
            assert_accepted(&answer)?;
        }
    });
}

#[test]
fn browser_markers_are_refused_before_credentials() {
    let fx = fixture();
    proptest!(config(), |(
        k in 0usize..4,
        form in prop_oneof![Just(Form::Headers), Just(Form::Basic)],
        // `Sec-Fetch-Mode` alone is no browser (Node.js's fetch sends it): docs/design.md.
        marker in proptest::sample::select(vec!["Origin", "Sec-Fetch-Site"]),
        value in "[ -~]{0,40}",
    )| {
        let key = &fx.keys[k];
        let mut headers = vec![(marker, value.into_bytes())];
        match form {
            Form::Headers => {
                headers.push(("X-Client-Id", key.client_id.clone().into_bytes()));
                headers.push(("X-Client-Secret", key.secret.clone().into_bytes()));
            }
            Form::Basic => headers.push(("Authorization", basic(&key.client_id, &key.secret))),
        }
        let answer = fx.send(Method::GET, BALANCES, &headers);
        prop_assert_eq!(answer.status, StatusCode::FORBIDDEN, "{:?}", answer);
        let body: serde_json::Value =
            serde_json::from_slice(&answer.body).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&body["code"], "Request.BrowserOriginForbidden");
        prop_assert!(!String::from_utf8_lossy(&answer.body).contains(&key.secret));
    });
}
