//! The promo code format: 16 symbols of Crockford's base32 (80 random bits), shown as
//! `XXXX-XXXX-XXXX-XXXX`, read back forgivingly from what a person types.

use rand::RngCore;
use rand::rngs::OsRng;

use crate::error::{Error, Result};

/// Crockford's base32: no I, L, O or U.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Symbols per code: 16 × 5 bits = 80 bits.
const CODE_SYMBOLS: usize = 16;

/// Normalises a code as typed by a person: upper case, hyphens and spaces dropped, `I`/`L` read
/// as `1` and `O` as `0`. `None` when it cannot be a code.
pub fn normalize_code(input: &str) -> Option<String> {
    let mut out = String::with_capacity(CODE_SYMBOLS);
    for c in input.chars() {
        let c = match c.to_ascii_uppercase() {
            '-' | ' ' => continue,
            'I' | 'L' => '1',
            'O' => '0',
            c => c,
        };
        if !c.is_ascii() || !CROCKFORD.contains(&(c as u8)) || out.len() == CODE_SYMBOLS {
            return None;
        }
        out.push(c);
    }
    (out.len() == CODE_SYMBOLS).then_some(out)
}

/// `XXXX-XXXX-XXXX-XXXX`.
pub fn display_code(normalised: &str) -> String {
    let mut out = String::with_capacity(CODE_SYMBOLS + 3);
    for (i, c) in normalised.chars().enumerate() {
        if i > 0 && i % 4 == 0 {
            out.push('-');
        }
        out.push(c);
    }
    out
}

/// 80 random bits as 16 Crockford symbols.
pub(super) fn draw_code() -> Result<String> {
    Ok(draw_codes(1)?.pop().unwrap_or_default())
}

/// `count` codes from one read of the OS CSPRNG (10 bytes = 80 bits each).
pub(super) fn draw_codes(count: usize) -> Result<Vec<String>> {
    let mut bytes = vec![0u8; 10 * count];
    OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|_| Error::PromoGenerationFailed)?;
    Ok(bytes
        .chunks_exact(10)
        .map(|chunk| {
            let bits = chunk
                .iter()
                .fold(0u128, |acc, b| (acc << 8) | u128::from(*b));
            (0..CODE_SYMBOLS)
                .rev()
                .map(|i| CROCKFORD[((bits >> (i * 5)) & 31) as usize] as char)
                .collect()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawn_codes_have_the_documented_shape() {
        let code = draw_code().unwrap();
        assert_eq!(code.len(), 16);
        assert!(code.bytes().all(|b| CROCKFORD.contains(&b)));
        let shown = display_code(&code);
        assert_eq!(shown.len(), 19);
        assert_eq!(shown.matches('-').count(), 3);
        assert_eq!(normalize_code(&shown), Some(code));
    }

    #[test]
    fn normalisation_reads_what_people_type() {
        assert_eq!(
            normalize_code("abcd-efgh-jkmn-pqrs").as_deref(),
            Some("ABCDEFGHJKMNPQRS")
        );
        assert_eq!(
            normalize_code(" ABCD EFGH JKMN PQRS ").as_deref(),
            Some("ABCDEFGHJKMNPQRS")
        );
        assert_eq!(
            normalize_code("IiLl-OoO0-1234-5678").as_deref(),
            Some("1111000012345678")
        );
        assert_eq!(
            normalize_code("ABCD-EFGH-JKMN-PQRU"),
            None,
            "U is not Crockford"
        );
        assert_eq!(normalize_code("ABCD-EFGH-JKMN-PQR"), None);
        assert_eq!(normalize_code("ABCD-EFGH-JKMN-PQRST"), None);
        assert_eq!(normalize_code("ÄBCD-EFGH-JKMN-PQRS"), None);
        assert_eq!(normalize_code(""), None);
    }
}
