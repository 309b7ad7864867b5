//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>,
//! spec 1.0.0): how a push request proves that Sundial sent it, in the
//! form existing verifier libraries read.
//!
//! - The signed bytes are `<id>.<timestamp>.<body>`: the message id (a
//!   job's id, the same on every try, so a receiver can drop repeats),
//!   the attempt's time in Unix seconds, and the body exactly as sent.
//! - The key is the subscription's secret: `whsec_` and the base64 of
//!   24 to 64 random bytes; those bytes are the HMAC-SHA256 key.
//! - The signature is `v1,` and the base64 of the MAC. A request may
//!   carry several, space-separated (a secret being rotated): a receiver
//!   accepts any that matches.
//!
//! Written on `ring`'s HMAC (already linked, through rustls) rather than
//! with the `standardwebhooks` crate, which refuses bodies that are not
//! UTF-8 (a job's body is bytes) and brings another base64 version.

use ::ring::hmac;
use base64::{
    Engine, alphabet,
    engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig, general_purpose::STANDARD},
};

/// The start of a secret's text.
pub const SECRET_PREFIX: &str = "whsec_";
/// The fewest bytes a secret holds (the spec asks for at least 24).
pub const SECRET_BYTES_MIN: usize = 24;
/// The most bytes a secret holds (the spec's 512 bits).
pub const SECRET_BYTES_MAX: usize = 64;
/// The bytes of a secret Sundial makes.
const SECRET_BYTES_MADE: usize = 32;

/// Reads a secret's base64 with or without its padding, as the Python
/// verifier does (it pads before decoding).
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why a secret's text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("a signing secret starts with `whsec_`")]
    Prefix,
    #[error("a signing secret is `whsec_` and then base64 (the standard alphabet)")]
    Base64,
    #[error("a signing secret holds 24 to 64 bytes, not {0}")]
    Length(usize),
}

/// A subscription's signing key. Nothing of it shows in its `Debug` form.
#[derive(Clone)]
pub struct SigningKey(hmac::Key);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

impl SigningKey {
    /// The key of a secret's text (`whsec_…`).
    pub fn parse(secret: &str) -> Result<Self, SecretError> {
        let b64 = secret
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SecretError::Prefix)?;
        let bytes = LENIENT.decode(b64).map_err(|_| SecretError::Base64)?;
        if !(SECRET_BYTES_MIN..=SECRET_BYTES_MAX).contains(&bytes.len()) {
            return Err(SecretError::Length(bytes.len()));
        }
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, &bytes)))
    }

    /// The `webhook-signature` value of message `id`, sent at
    /// `timestamp_s` (Unix seconds), with body `body`: `v1,<base64>`.
    pub fn sign(&self, id: &str, timestamp_s: u64, body: &[u8]) -> String {
        let mut mac = hmac::Context::with_key(&self.0);
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp_s.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.sign().as_ref()))
    }
}

/// A new random secret's text, for a subscription given none.
pub fn make_secret() -> String {
    let bytes: [u8; SECRET_BYTES_MADE] = rand::random();
    format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The spec's own vectors, from its libraries' tests (Go and Python:
    // the first; Rust: the second).
    #[test]
    fn signs_as_the_standard_webhooks_libraries_do() {
        let key = SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("secret");
        assert_eq!(
            key.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let key = SigningKey::parse("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").expect("secret");
        assert_eq!(
            key.sign(
                "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
                1_649_367_553,
                br#"{"email":"test@example.com","username":"test_user"}"#
            ),
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
        );
    }

    #[test]
    fn every_signed_part_changes_the_signature() {
        let key = SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("secret");
        let base = key.sign("msg_1", 1_000, b"body");
        assert_ne!(key.sign("msg_2", 1_000, b"body"), base);
        assert_ne!(key.sign("msg_1", 1_001, b"body"), base);
        assert_ne!(key.sign("msg_1", 1_000, b"bodY"), base);
        let other = SigningKey::parse(&make_secret()).expect("made");
        assert_ne!(other.sign("msg_1", 1_000, b"body"), base);
        // Bytes that are not UTF-8 sign as well as text.
        assert!(
            key.sign("msg_1", 1_000, &[0xff, 0x00, 0xfe])
                .starts_with("v1,")
        );
    }

    #[test]
    fn a_secret_is_whsec_and_24_to_64_bytes_of_base64() {
        assert_eq!(
            SigningKey::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").err(),
            Some(SecretError::Prefix)
        );
        assert_eq!(
            SigningKey::parse("whsec_not base64!").err(),
            Some(SecretError::Base64)
        );
        let of = |n: usize| format!("whsec_{}", STANDARD.encode(vec![7u8; n]));
        assert_eq!(
            SigningKey::parse(&of(23)).err(),
            Some(SecretError::Length(23))
        );
        assert_eq!(
            SigningKey::parse(&of(65)).err(),
            Some(SecretError::Length(65))
        );
        assert!(SigningKey::parse(&of(24)).is_ok());
        assert!(SigningKey::parse(&of(64)).is_ok());
        // Without its padding, as the Python verifier accepts it.
        let unpadded = of(32);
        assert!(SigningKey::parse(unpadded.trim_end_matches('=')).is_ok());
    }

    #[test]
    fn a_made_secret_is_new_each_time_and_shows_in_no_debug_form() {
        let (a, b) = (make_secret(), make_secret());
        assert_ne!(a, b);
        let key = SigningKey::parse(&a).expect("made secrets parse");
        let decoded = STANDARD.decode(&a[SECRET_PREFIX.len()..]).expect("base64");
        assert_eq!(decoded.len(), SECRET_BYTES_MADE);
        assert_eq!(format!("{key:?}"), "SigningKey(..)");
    }
}
