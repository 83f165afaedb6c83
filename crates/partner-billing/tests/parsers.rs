//! Property tests for everything that parses caller input.

use partner_billing::domain::{
    ApiKeyId, ClientId, IdempotencyKey, Login, PlanSlug, Secret, SecretKind,
};
use partner_billing::promo::{display_code, normalize_code};
use proptest::prelude::*;

const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

fn crockford_code() -> impl Strategy<Value = String> {
    proptest::collection::vec(0usize..32, 16).prop_map(|symbols| {
        symbols
            .into_iter()
            .map(|i| CROCKFORD.as_bytes()[i] as char)
            .collect()
    })
}

/// A code as a person might type it: any case, hyphens and spaces anywhere, 1 as I or L, 0 as O.
fn typed(code: &str, noise: &[u8]) -> String {
    let mut out = String::new();
    for (c, n) in code.chars().zip(noise.iter().cycle()) {
        let c = match (c, n % 4) {
            ('1', 1) => 'I',
            ('1', 2) => 'l',
            ('0', 1) => 'o',
            ('0', 2) => 'O',
            (c, 3) => c.to_ascii_lowercase(),
            (c, _) => c,
        };
        out.push(c);
        match n % 7 {
            0 => out.push('-'),
            1 => out.push(' '),
            _ => {}
        }
    }
    out
}

/// The normalisation as docs/design.md words it, written independently of the library: drop hyphens
/// and spaces, upper-case, read `I`/`L` as `1` and `O` as `0`; a code is then exactly 16
/// Crockford symbols.
fn reference_normalisation(input: &str) -> Option<String> {
    let code: String = input
        .chars()
        .filter(|c| !matches!(c, '-' | ' '))
        .map(|c| match c.to_ascii_uppercase() {
            'I' | 'L' => '1',
            'O' => '0',
            c => c,
        })
        .collect();
    (code.chars().count() == 16 && code.chars().all(|c| CROCKFORD.contains(c))).then_some(code)
}

/// Text close to a code: Crockford symbols in both cases, the look-alikes, separators, and
/// characters that must never pass (U, other punctuation, control and Unicode look-alikes).
fn code_like_text() -> impl Strategy<Value = String> {
    const ALPHABET: &[char] = &[
        '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'A', 'B', 'C', 'D', 'E', 'F', 'G', 'H',
        'J', 'K', 'M', 'N', 'P', 'Q', 'R', 'S', 'T', 'V', 'W', 'X', 'Y', 'Z', 'a', 'b', 'c', 'd',
        'e', 'f', 'g', 'h', 'j', 'k', 'm', 'n', 'p', 'q', 'r', 's', 't', 'v', 'w', 'x', 'y', 'z',
        'I', 'i', 'L', 'l', 'O', 'o', '-', ' ', '-', ' ', 'U', 'u', '_', '.', '\t', '\n', '\0',
        '\u{0130}', '\u{0131}', '\u{212a}', '\u{041e}', '\u{0406}', '\u{ff10}', '\u{00a0}',
        '\u{2010}',
    ];
    let random = proptest::collection::vec(proptest::sample::select(ALPHABET), 0..28)
        .prop_map(|chars| chars.into_iter().collect());
    // A typed code with one character replaced or inserted: about half of these still parse.
    let edited = (
        crockford_code(),
        proptest::collection::vec(any::<u8>(), 1..32),
        any::<proptest::sample::Index>(),
        proptest::sample::select(ALPHABET),
        0u8..3,
    )
        .prop_map(|(code, noise, at, c, edit)| {
            let mut chars: Vec<char> = typed(&code, &noise).chars().collect();
            match edit {
                0 => {
                    let at = at.index(chars.len());
                    chars[at] = c;
                }
                1 => chars.insert(at.index(chars.len() + 1), c),
                _ => {}
            }
            chars.into_iter().collect()
        });
    prop_oneof![random, edited]
}

/// Characters that are neither a Crockford symbol, a look-alike nor a separator.
fn forbidden_char() -> impl Strategy<Value = char> {
    prop_oneof![
        proptest::sample::select(vec![
            'U', 'u', '_', '.', '+', '/', '=', '\t', '\n', '\r', '\0', '\u{0130}', '\u{0131}',
            '\u{212a}', '\u{041e}', '\u{0406}', '\u{ff10}', '\u{00a0}', '\u{2010}', '\u{200b}',
        ]),
        any::<char>().prop_filter("not part of a code", |c| {
            !c.is_ascii_alphanumeric() && !matches!(c, '-' | ' ') || matches!(c, 'U' | 'u')
        }),
    ]
}

/// Text with the documented shape of a prefixed identifier or near misses of it.
fn prefixed_text() -> impl Strategy<Value = String> {
    let prefix = proptest::sample::select(vec![
        "rsc_", "rsk_", "rss_", "rps_", "rso_", "RSC_", "rss-", "rss", "", " rss_",
    ]);
    let body = prop_oneof![
        "[A-Za-z0-9]{20,48}",
        "[A-Za-z0-9]{23,25}",
        "[A-Za-z0-9]{42,44}",
        "[A-Za-z0-9_:+/= -]{0,50}",
        any::<String>(),
    ];
    (prefix, body).prop_map(|(p, b)| format!("{p}{b}"))
}

fn secret_kind() -> impl Strategy<Value = SecretKind> {
    proptest::sample::select(vec![
        SecretKind::ApiKey,
        SecretKind::PanelSession,
        SecretKind::OperatorToken,
    ])
}

fn prefix_of(kind: SecretKind) -> &'static str {
    match kind {
        SecretKind::ApiKey => "rss_",
        SecretKind::PanelSession => "rps_",
        SecretKind::OperatorToken => "rso_",
    }
}

fn is_prefixed_base62(value: &str, prefix: &str, len: usize) -> bool {
    value.len() == prefix.len() + len
        && value.starts_with(prefix)
        && value[prefix.len()..]
            .chars()
            .all(|c| c.is_ascii_alphanumeric())
}

proptest! {
    #[test]
    fn shown_codes_normalise_back(code in crockford_code()) {
        let shown = display_code(&code);
        prop_assert_eq!(shown.len(), 19);
        prop_assert_eq!(normalize_code(&shown), Some(code));
    }

    #[test]
    fn typed_codes_normalise_to_the_same_code(code in crockford_code(), noise in proptest::collection::vec(any::<u8>(), 1..32)) {
        prop_assert_eq!(normalize_code(&typed(&code, &noise)), Some(code));
    }

    #[test]
    fn normalisation_accepts_only_sixteen_crockford_symbols(input in any::<String>()) {
        if let Some(code) = normalize_code(&input) {
            prop_assert_eq!(code.len(), 16);
            prop_assert!(code.chars().all(|c| CROCKFORD.contains(c)));
        }
    }

    #[test]
    fn idempotency_keys_are_exactly_8_to_128_visible_ascii(input in any::<String>()) {
        let expected = (8..=128).contains(&input.len()) && input.bytes().all(|b| (0x21..=0x7e).contains(&b));
        prop_assert_eq!(IdempotencyKey::parse("idempotencyKey", &input).is_ok(), expected);
    }

    #[test]
    fn visible_ascii_keys_in_bounds_are_accepted(input in "[!-~]{8,128}") {
        prop_assert!(IdempotencyKey::parse("idempotencyKey", &input).is_ok());
    }

    #[test]
    fn plan_slugs_follow_their_alphabet(input in any::<String>()) {
        let expected = (1..=64).contains(&input.len())
            && input.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
        prop_assert_eq!(PlanSlug::parse("planSlug", &input).is_ok(), expected);
    }

    #[test]
    fn valid_slugs_are_accepted(input in "[a-z0-9._-]{1,64}") {
        prop_assert!(PlanSlug::parse("planSlug", &input).is_ok());
    }

    #[test]
    fn logins_have_no_control_characters_and_fit(input in any::<String>()) {
        let count = input.chars().count();
        let expected = (1..=254).contains(&count) && !input.chars().any(char::is_control);
        let parsed = Login::parse("login", &input);
        prop_assert_eq!(parsed.is_ok(), expected);
        if let Ok(login) = parsed {
            prop_assert_eq!(login.as_str(), input.as_str(), "compared exactly, never altered");
        }
    }

    #[test]
    fn a_rejection_never_echoes_the_input(input in "[a-zA-Z0-9]{200,300}") {
        let err = IdempotencyKey::parse("idempotencyKey", &input).unwrap_err();
        prop_assert!(!err.to_string().contains(&input));
    }

    #[test]
    fn normalisation_matches_the_documented_rule(input in code_like_text()) {
        prop_assert_eq!(normalize_code(&input), reference_normalisation(&input));
    }

    #[test]
    fn normalisation_agrees_with_the_rule_on_any_text(input in any::<String>()) {
        prop_assert_eq!(normalize_code(&input), reference_normalisation(&input));
    }

    #[test]
    fn the_canonical_form_is_a_fixed_point(input in code_like_text()) {
        if let Some(code) = normalize_code(&input) {
            prop_assert_eq!(normalize_code(&code), Some(code.clone()));
            prop_assert_eq!(normalize_code(&display_code(&code)), Some(code.clone()));
            prop_assert_eq!(normalize_code(&code.to_lowercase()), Some(code.clone()));
        }
    }

    #[test]
    fn a_foreign_character_anywhere_is_refused(
        code in crockford_code(),
        noise in proptest::collection::vec(any::<u8>(), 1..32),
        bad in forbidden_char(),
        at in any::<proptest::sample::Index>(),
    ) {
        let mut chars: Vec<char> = typed(&code, &noise).chars().collect();
        let at = at.index(chars.len() + 1);
        chars.insert(at, bad);
        let text: String = chars.into_iter().collect();
        prop_assert_eq!(normalize_code(&text), None, "{:?}", text);
    }

    #[test]
    fn a_wrong_number_of_symbols_is_refused(
        symbols in proptest::collection::vec(0usize..32, 0..40),
        noise in proptest::collection::vec(any::<u8>(), 1..32),
    ) {
        prop_assume!(symbols.len() != 16);
        let code: String = symbols.iter().map(|&i| CROCKFORD.as_bytes()[i] as char).collect();
        prop_assert_eq!(normalize_code(&typed(&code, &noise)), None);
    }

    #[test]
    fn different_codes_never_normalise_alike(
        a in crockford_code(),
        b in crockford_code(),
        noise in proptest::collection::vec(any::<u8>(), 1..32),
    ) {
        prop_assume!(a != b);
        prop_assert_ne!(normalize_code(&typed(&a, &noise)), normalize_code(&typed(&b, &noise)));
    }

    #[test]
    fn secrets_have_their_shape_exactly(input in prefixed_text(), kind in secret_kind()) {
        let expected = is_prefixed_base62(&input, prefix_of(kind), 43);
        prop_assert_eq!(Secret::from_presented(input.as_str()).has_shape(kind), expected);
    }

    #[test]
    fn arbitrary_secrets_never_panic_and_shape_is_exact(input in any::<String>(), kind in secret_kind()) {
        let expected = is_prefixed_base62(&input, prefix_of(kind), 43);
        prop_assert_eq!(Secret::from_presented(input.as_str()).has_shape(kind), expected);
    }

    #[test]
    fn a_well_formed_secret_has_only_its_own_shape(body in "[A-Za-z0-9]{43}", kind in secret_kind(), other in secret_kind()) {
        let secret = Secret::from_presented(format!("{}{body}", prefix_of(kind)));
        prop_assert!(secret.has_shape(kind));
        prop_assert_eq!(secret.has_shape(other), kind == other);
        let generated = Secret::generate(kind);
        prop_assert!(generated.has_shape(kind));
        prop_assert_eq!(generated.has_shape(other), kind == other);
    }

    #[test]
    fn secrets_compare_and_hash_by_their_exact_text(a in prefixed_text(), b in prefixed_text()) {
        let (sa, sb) = (Secret::from_presented(a.as_str()), Secret::from_presented(b.as_str()));
        prop_assert_eq!(sa == sb, a == b);
        prop_assert_eq!(sa.hash() == sb.hash(), a == b);
        prop_assert_eq!(sa.hash().len(), 64);
        prop_assert_eq!(format!("{sa:?}"), "Secret([redacted])");
    }

    #[test]
    fn client_ids_and_key_ids_are_a_prefix_and_24_base62(input in prefixed_text()) {
        prop_assert_eq!(ClientId::parse("clientId", &input).is_ok(), is_prefixed_base62(&input, "rsc_", 24));
        prop_assert_eq!(ApiKeyId::parse("apiKeyId", &input).is_ok(), is_prefixed_base62(&input, "rsk_", 24));
        if let Ok(id) = ClientId::parse("clientId", &input) {
            prop_assert_eq!(id.to_string(), input.clone());
        }
        if let Err(err) = ClientId::parse("clientId", &input) {
            prop_assert!(input.len() < 8 || !err.to_string().contains(&input));
        }
    }

    #[test]
    fn well_formed_identifiers_are_accepted(body in "[A-Za-z0-9]{24}") {
        let (client_id, api_key_id) = (format!("rsc_{body}"), format!("rsk_{body}"));
        prop_assert!(ClientId::parse("clientId", &client_id).is_ok());
        prop_assert!(ApiKeyId::parse("apiKeyId", &api_key_id).is_ok());
        prop_assert!(ClientId::parse("clientId", &api_key_id).is_err());
        prop_assert!(ApiKeyId::parse("apiKeyId", &client_id).is_err());
    }

    #[test]
    fn slugs_logins_and_keys_keep_their_text(input in "[a-z0-9._-]{1,64}") {
        prop_assert_eq!(PlanSlug::parse("planSlug", &input).unwrap().to_string(), input.clone());
        prop_assert_eq!(Login::parse("login", &input).unwrap().to_string(), input.clone());
        if input.len() >= 8 {
            prop_assert_eq!(IdempotencyKey::parse("idempotencyKey", &input).unwrap().to_string(), input.clone());
        }
    }

    #[test]
    fn slugs_near_the_alphabet_are_judged_exactly(input in "[a-zA-Z0-9._ /+-]{0,70}") {
        let expected = (1..=64).contains(&input.len())
            && input.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
        prop_assert_eq!(PlanSlug::parse("planSlug", &input).is_ok(), expected);
    }

    #[test]
    fn keys_near_the_bounds_are_judged_exactly(input in "[ -\u{7f}]{6,130}") {
        let expected = (8..=128).contains(&input.len()) && input.bytes().all(|b| (0x21..=0x7e).contains(&b));
        prop_assert_eq!(IdempotencyKey::parse("idempotencyKey", &input).is_ok(), expected);
    }

    #[test]
    fn logins_near_the_bounds_are_judged_by_characters(
        base in "[a-zé漢@.]{250,258}",
        control in proptest::option::of(prop_oneof![Just('\n'), Just('\0'), Just('\u{7f}'), Just('\u{85}')]),
        at in any::<proptest::sample::Index>(),
    ) {
        let mut chars: Vec<char> = base.chars().collect();
        if let Some(c) = control {
            let at = at.index(chars.len());
            chars[at] = c;
        }
        let input: String = chars.iter().collect();
        let expected = chars.len() <= 254 && control.is_none();
        prop_assert_eq!(Login::parse("login", &input).is_ok(), expected);
    }
}
