//! Standard Webhooks signatures: `v1,<base64 HMAC-SHA256(secret bytes, id.timestamp.body)>`.
//!
//! The server signs with [`sign`]; resellers' receivers check with [`verify`] (the SDK's
//! `verify_webhook`). Compiles without the database stack.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The prefix of a signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// How far a `webhook-timestamp` may be from now, either way, for [`verify`] to accept it.
pub const DEFAULT_TOLERANCE_SECONDS: i64 = 300;

/// Why a webhook failed verification. Carries nothing of the secret or the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the signing secret is malformed")]
    MalformedSecret,
    #[error("the webhook-id, webhook-timestamp or webhook-signature header is missing")]
    MissingHeader,
    #[error("the webhook-timestamp header is not a number")]
    MalformedTimestamp,
    #[error("the webhook-timestamp is outside the tolerance")]
    StaleTimestamp,
    #[error("no signature matches")]
    SignatureMismatch,
}

/// The secret's key bytes: the base64 after `whsec_`.
pub fn secret_bytes(secret: &str) -> Result<Vec<u8>, VerifyError> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
    STANDARD
        .decode(encoded)
        .map_err(|_| VerifyError::MalformedSecret)
}

fn mac(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `webhook-signature` header value for one attempt.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let digest = mac(key, id, timestamp, body).finalize().into_bytes();
    format!("v1,{}", STANDARD.encode(digest))
}

/// Checks a received webhook: the three headers (`webhook-id`, `webhook-timestamp`,
/// `webhook-signature`, which may list several space-separated signatures), a timestamp within
/// `tolerance_seconds` of `now_utc`, and an HMAC that matches in constant time.
pub fn verify(
    secret: &str,
    id: Option<&str>,
    timestamp: Option<&str>,
    signatures: Option<&str>,
    body: &[u8],
    now_utc: i64,
    tolerance_seconds: i64,
) -> Result<(), VerifyError> {
    let key = secret_bytes(secret)?;
    let (Some(id), Some(timestamp), Some(signatures)) = (id, timestamp, signatures) else {
        return Err(VerifyError::MissingHeader);
    };
    let timestamp: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::MalformedTimestamp)?;
    if (now_utc - timestamp).abs() > tolerance_seconds {
        return Err(VerifyError::StaleTimestamp);
    }
    for candidate in signatures.split(' ') {
        let Some(encoded) = candidate.strip_prefix("v1,") else {
            continue;
        };
        let Ok(received) = STANDARD.decode(encoded) else {
            continue;
        };
        if mac(&key, id, timestamp, body)
            .verify_slice(&received)
            .is_ok()
        {
            return Ok(());
        }
    }
    Err(VerifyError::SignatureMismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_webhooks_reference_vector() {
        // The example of the Standard Webhooks specification.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let body = br#"{"test": 2432232314}"#;
        let signature = sign(&secret_bytes(secret).unwrap(), id, 1614265330, body);
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert_eq!(
            verify(
                secret,
                Some(id),
                Some("1614265330"),
                Some(&signature),
                body,
                1614265330,
                300
            ),
            Ok(())
        );
        assert_eq!(
            verify(
                secret,
                Some(id),
                Some("1614265330"),
                Some(&signature),
                b"{}",
                1614265330,
                300
            ),
            Err(VerifyError::SignatureMismatch)
        );
        assert_eq!(
            verify(
                secret,
                Some(id),
                Some("1614265330"),
                Some(&signature),
                body,
                1614265330 + 301,
                300
            ),
            Err(VerifyError::StaleTimestamp)
        );
    }
}
