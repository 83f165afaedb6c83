//! The characters a path parameter may hold, checked when a request is routed.
//!
//! Each rule is a character class (`^[…]+$` or `^[^…]*$`), checked character by character, and
//! published as that regular expression (the parameter's `pattern` in the document, added by
//! name in `document.rs`). poem-openapi's own `pattern` validator compiles its regular
//! expression on every check: on the entitlements read, whose `login` it checked, that was 30 %
//! of the server's CPU. These rules are given to poem-openapi as `validator(custom = …)`.

use std::fmt;

/// A rule on every character of a text, and on whether it may be empty.
pub struct TextRule {
    pattern: &'static str,
    allows: fn(char) -> bool,
    may_be_empty: bool,
}

impl TextRule {
    /// The rule as a regular expression, as the document publishes it.
    pub fn pattern(&self) -> &'static str {
        self.pattern
    }

    /// Whether `text` keeps the rule.
    pub fn allows(&self, text: &str) -> bool {
        (self.may_be_empty || !text.is_empty()) && text.chars().all(self.allows)
    }
}

/// As poem-openapi prints a pattern: `pattern("…")` (in the reason of a refused parameter).
impl fmt::Display for TextRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pattern(\"{}\")", self.pattern)
    }
}

/// A plan (product) slug: lower-case letters, digits, `.`, `_`, `-`.
pub static SLUG: TextRule = TextRule {
    pattern: r"^[a-z0-9._-]+$",
    allows: |c| matches!(c, 'a'..='z' | '0'..='9' | '.' | '_' | '-'),
    may_be_empty: false,
};

/// An idempotency key: visible ASCII, no space.
pub static VISIBLE_ASCII: TextRule = TextRule {
    pattern: r"^[!-~]+$",
    allows: |c| matches!(c, '!'..='~'),
    may_be_empty: false,
};

/// A login or a label: no control character (C0, DEL, C1).
pub static NO_CONTROL: TextRule = TextRule {
    pattern: r"^[^\u0000-\u001F\u007F-\u009F]*$",
    allows: |c| !matches!(c, '\u{0}'..='\u{1F}' | '\u{7F}'..='\u{9F}'),
    may_be_empty: true,
};

impl<T: AsRef<str>> poem_openapi::validation::Validator<T> for &TextRule {
    fn check(&self, value: &T) -> bool {
        self.allows(value.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::{NO_CONTROL, SLUG, TextRule, VISIBLE_ASCII};

    /// Texts at each rule's edges: every character class boundary, empty, mixed.
    fn samples() -> Vec<String> {
        let mut texts: Vec<String> = [
            "",
            "a",
            "z",
            "0",
            "9",
            ".",
            "_",
            "-",
            "A",
            "Z",
            "/",
            ":",
            "`",
            "{",
            " ",
            "!",
            "~",
            "é",
            "ß",
            "日本",
            "pro-1.x_y",
            "idem_abc!~",
            "a b",
            "a\tb",
            "a\nb",
            "\n",
            "ab\n",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for code in [
            0x00, 0x1F, 0x20, 0x7E, 0x7F, 0x80, 0x9F, 0xA0, 0x2028, 0xFEFF,
        ] {
            let c = char::from_u32(code).unwrap();
            texts.push(c.to_string());
            texts.push(format!("ok{c}ok"));
        }
        texts
    }

    fn agrees_with_its_pattern(rule: &TextRule) {
        let regex = regex::Regex::new(rule.pattern()).unwrap();
        for text in samples() {
            assert_eq!(
                rule.allows(&text),
                regex.is_match(&text),
                "{rule} on {text:?}"
            );
        }
    }

    #[test]
    fn each_rule_allows_what_its_published_pattern_matches() {
        agrees_with_its_pattern(&SLUG);
        agrees_with_its_pattern(&VISIBLE_ASCII);
        agrees_with_its_pattern(&NO_CONTROL);
    }

    proptest::proptest! {
        #[test]
        fn each_rule_agrees_with_its_pattern_on_any_text(text in proptest::prelude::any::<String>()) {
            for rule in [&SLUG, &VISIBLE_ASCII, &NO_CONTROL] {
                let regex = regex::Regex::new(rule.pattern()).unwrap();
                proptest::prop_assert_eq!(rule.allows(&text), regex.is_match(&text), "{}", rule);
            }
        }
    }

    #[test]
    fn a_rule_prints_as_a_pattern_does_in_a_refusal() {
        assert_eq!(SLUG.to_string(), r#"pattern("^[a-z0-9._-]+$")"#);
    }
}
