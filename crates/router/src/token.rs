//! Tokens: `secret` for the `default` pool, `pool:secret` for any other.

use std::fmt;

/// The pool a bare token belongs to.
pub const DEFAULT_POOL: &str = "default";
/// The shortest secret an operator may choose (lmstfy's rule).
pub const MIN_CUSTOM_SECRET: usize = 20;

/// A parsed token.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token {
    pub pool: String,
    pub secret: String,
}

impl Token {
    /// Splits a presented token on its first `:`; no prefix means the
    /// default pool. Never fails: an unknown pool or secret is found out by
    /// looking it up.
    pub fn parse(s: &str) -> Self {
        match s.split_once(':') {
            Some((pool, secret)) => Self {
                pool: pool.to_owned(),
                secret: secret.to_owned(),
            },
            None => Self {
                pool: DEFAULT_POOL.to_owned(),
                secret: s.to_owned(),
            },
        }
    }

    /// A fresh token of `pool`: 128 bits from the operating system's
    /// CSPRNG, with no time part (a ULID's first 48 bits are its time, which
    /// made tokens minted together share their first characters), written
    /// in the same 26 Crockford base32 characters as before.
    pub fn mint(pool: &str) -> Self {
        use rand::TryRngCore;
        let mut bytes = [0u8; 16];
        rand::rngs::OsRng
            .try_fill_bytes(&mut bytes)
            .expect("the operating system's random source");
        Self {
            pool: pool.to_owned(),
            secret: ulid::Ulid(u128::from_be_bytes(bytes)).to_string(),
        }
    }
}

impl fmt::Display for Token {
    /// The form a client presents: no prefix for the default pool.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pool == DEFAULT_POOL {
            f.write_str(&self.secret)
        } else {
            write!(f, "{}:{}", self.pool, self.secret)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn minted_secrets_share_no_prefix_and_carry_no_time() {
        let secrets: Vec<String> = (0..64).map(|_| Token::mint("default").secret).collect();
        // ULIDs made in the same millisecond shared their first 10
        // characters; random secrets share their first 6 (28 bits) by
        // chance once in 130,000 runs of this test.
        let mut shared = 0;
        for (i, a) in secrets.iter().enumerate() {
            assert_eq!(a.len(), 26, "{a}");
            for b in &secrets[i + 1..] {
                assert_ne!(a, b);
                shared += usize::from(a[..6] == b[..6]);
            }
        }
        assert_eq!(shared, 0, "{secrets:?}");
        // Read as a ULID, a secret's time is random, not now.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        let near_now = secrets
            .iter()
            .filter_map(|s| ulid::Ulid::from_string(s).ok())
            .filter(|u| u.timestamp_ms().abs_diff(now) < 86_400_000)
            .count();
        assert_eq!(near_now, 0);
    }

    #[test]
    fn bare_tokens_belong_to_the_default_pool() {
        let t = Token::parse("01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(t.pool, "default");
        assert_eq!(t.to_string(), "01ARZ3NDEKTSV4RRFFQ69G5FAV");
    }

    #[test]
    fn prefixed_tokens_name_their_pool() {
        let t = Token::parse("eu:abc:def");
        assert_eq!((t.pool.as_str(), t.secret.as_str()), ("eu", "abc:def"));
        assert_eq!(t.to_string(), "eu:abc:def");
        assert_eq!(Token::parse("default:x").to_string(), "x");
    }

    proptest! {
        #[test]
        fn display_parses_back(pool in "[a-z]{1,8}", secret in "[A-Z0-9]{1,30}") {
            let t = Token { pool, secret };
            prop_assert_eq!(Token::parse(&t.to_string()), t);
        }
    }
}
