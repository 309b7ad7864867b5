//! What the token and limit tables hold: a token's record (never its
//! secret) and its rate limit, and how a token is named in an admin path.
//!
//! A token's field is `<pool>/<ns>/sha256:<hex digest of the secret>`, its
//! value a JSON [`Stored`] record. Tokens made by a version before hashing
//! are fields `<pool>/<ns>/<secret>` whose value is the bare description;
//! they keep working, with every scope, until `Tokens::migrate` rewrites
//! them. A limit's field is its token's field, its value a JSON [`Limit`].

use crate::{Grant, Token};

/// A token's rate limit: at most `read` consumes and `write` publishes
/// (single or bulk, one each) per window of `interval` seconds; 0 = no
/// limit on that action. A body needs all three fields; `interval` above 0
/// and `read` or `write` above 0.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[schema(example = json!({"read": 100, "write": 50, "interval": 1}))]
pub struct Limit {
    pub read: u64,
    pub write: u64,
    /// Seconds.
    pub interval: u64,
}

/// How many hex digits of a token's digest name it in listings, in rate
/// counters and in admin paths (64 bits: no two tokens of a namespace
/// share one in practice, and an admin path that matches two is refused).
pub const ID_LEN: usize = 16;

const HASHED: &str = "sha256:";

/// The SHA-256 of a secret, in lower-case hex.
pub fn digest(secret: &str) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(secret.as_bytes()))
}

/// Whether `s` has the form of a token id rather than of a secret (secrets
/// are at least [`crate::token::MIN_CUSTOM_SECRET`] characters).
pub(super) fn is_id(s: &str) -> bool {
    s.len() == ID_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A hashed token's value in the table.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Stored {
    description: String,
    /// `None`: every scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scopes: Option<Vec<String>>,
    /// `None`: every queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queues: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    created_ms: Option<u64>,
}

impl Stored {
    pub(super) fn new(description: &str, grant: &Grant, created_ms: Option<u64>) -> Self {
        let full = grant.is_full();
        Self {
            description: description.to_owned(),
            scopes: (!full).then(|| grant.scope_names().into_iter().map(str::to_owned).collect()),
            queues: grant.queues().map(<[String]>::to_vec),
            created_ms,
        }
    }

    pub(super) fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A token as the table holds it (never its secret).
#[derive(Debug, Clone)]
pub struct TokenInfo {
    pub pool: String,
    pub ns: String,
    /// The secret's SHA-256, hex.
    pub digest: String,
    pub description: String,
    pub grant: Grant,
    /// When it was made (unknown for tokens older than hashing).
    pub created_ms: Option<u64>,
    /// `false` for a token stored in plaintext by an earlier version, until
    /// `Tokens::migrate` rewrites it.
    pub hashed: bool,
    /// Its field in the table (and in the limit table).
    pub(super) field: String,
    /// A plaintext token's secret, which migrating it needs.
    pub(super) legacy_secret: Option<String>,
    /// The plaintext field of the same token, when a migration stopped
    /// half-way and left both: deleting the token deletes both.
    pub(super) shadowed: Option<String>,
}

impl TokenInfo {
    /// Reads one field of the table; `None` for a field this version cannot
    /// read (it is kept as it is, and logged).
    pub(super) fn parse(field: &str, value: &str) -> Option<Self> {
        let mut parts = field.splitn(3, '/');
        let (pool, ns, rest) = (parts.next()?, parts.next()?, parts.next()?);
        let mut info = Self {
            pool: pool.to_owned(),
            ns: ns.to_owned(),
            digest: String::new(),
            description: String::new(),
            grant: Grant::full(),
            created_ms: None,
            hashed: false,
            field: field.to_owned(),
            legacy_secret: None,
            shadowed: None,
        };
        match rest.strip_prefix(HASHED) {
            Some(hex)
                if hex.len() != 64
                    || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
            {
                tracing::warn!(pool, ns, "ignoring a token whose digest is malformed");
                return None;
            }
            Some(hex) => {
                let stored: Stored = serde_json::from_str(value)
                    .inspect_err(
                        |e| tracing::warn!(error = %e, pool, ns, "ignoring an unreadable token"),
                    )
                    .ok()?;
                info.grant = match &stored.scopes {
                    None if stored.queues.is_none() => Grant::full(),
                    scopes => {
                        let all: Vec<String> = crate::Scope::ALL
                            .iter()
                            .map(|s| s.name().to_owned())
                            .collect();
                        Grant::from_names(scopes.as_deref().unwrap_or(&all), stored.queues.clone())
                            .inspect_err(|e| tracing::warn!(error = %e, pool, ns, "ignoring a token with an unreadable scope"))
                            .ok()?
                    }
                };
                hex.clone_into(&mut info.digest);
                info.description = stored.description;
                info.created_ms = stored.created_ms;
                info.hashed = true;
            }
            None => {
                info.digest = digest(rest);
                value.clone_into(&mut info.description);
                info.legacy_secret = Some(rest.to_owned());
            }
        }
        Some(info)
    }

    /// The id: the digest's first [`ID_LEN`] hex digits, with the pool's
    /// prefix as a token carries it. Admin paths take it in place of the
    /// token.
    pub fn id(&self) -> String {
        Token {
            pool: self.pool.clone(),
            secret: self.digest[..ID_LEN.min(self.digest.len())].to_owned(),
        }
        .to_string()
    }

    pub(super) fn key(&self) -> String {
        key(&self.pool, &self.ns, &self.digest)
    }
}

pub(super) fn key(pool: &str, ns: &str, digest: &str) -> String {
    format!("{pool}/{ns}/{digest}")
}

pub(super) fn hashed_field(pool: &str, ns: &str, digest: &str) -> String {
    format!("{pool}/{ns}/{HASHED}{digest}")
}

/// A token named in an admin path: the token itself, or its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenRef {
    Secret(Token),
    Id { pool: String, id: String },
}

impl TokenRef {
    /// `[pool:]secret` or `[pool:]id`.
    pub fn parse(s: &str) -> Self {
        let t = Token::parse(s);
        if is_id(&t.secret) {
            Self::Id {
                pool: t.pool,
                id: t.secret,
            }
        } else {
            Self::Secret(t)
        }
    }
}

/// The limit table's rows that this version can read (field → limit),
/// and why each other one cannot be read.
pub(super) fn parse_limits(
    rows: &std::collections::HashMap<String, String>,
) -> (
    std::collections::HashMap<String, Limit>,
    Vec<serde_json::Error>,
) {
    let (mut read, mut unreadable) = (std::collections::HashMap::new(), Vec::new());
    for (field, value) in rows {
        match serde_json::from_str(value) {
            Ok(l) => {
                read.insert(field.clone(), l);
            }
            Err(e) => unreadable.push(e),
        }
    }
    (read, unreadable)
}
