//! Property tests for everything that parses caller input.

use partner_billing::domain::{IdempotencyKey, Login, PlanSlug};
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
}
