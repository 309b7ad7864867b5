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

    /// A fresh token of `pool`.
    pub fn mint(pool: &str) -> Self {
        Self {
            pool: pool.to_owned(),
            secret: ulid::Ulid::new().to_string(),
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
