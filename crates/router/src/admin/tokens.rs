//! The token table: who may act on which namespace, and what each token
//! may do there. Every gateway holds it whole ([`TokenIndex`], with each
//! token's rate limit), so that authenticating a request and finding its
//! scope and limit cost no round trip; a deleted or narrowed token takes
//! effect everywhere within one poll.

use std::{
    collections::{BTreeSet, HashMap, hash_map::Entry},
    sync::Arc,
};

use sundial_core::{EngineError, keys::AdminTable};

use super::{
    records::{
        ID_LEN, Limit, Stored, TokenInfo, TokenRef, digest, hashed_field, key, parse_limits,
    },
    replica::{RawTables, Replica, Rows, Table},
};
use crate::{Grant, Token};

/// What an authenticated request's token may do.
#[derive(Debug)]
pub struct Access {
    /// The token's id without its pool: names it in rate counters.
    pub id: String,
    pub grant: Grant,
    pub limit: Option<Limit>,
}

/// What an authentication attempt found.
#[derive(Debug, Clone)]
pub enum Check {
    Valid(Arc<Access>),
    Invalid,
    /// The table has never been loaded (admin Redis unreachable since start).
    Unknown,
}

/// The token table as a gateway holds it: `<pool>/<ns>/<digest>` → the
/// token and what it may do (a hashed field wins over a plaintext one of
/// the same secret, half-way through a migration).
#[derive(Debug, Default)]
pub struct TokenIndex {
    index: HashMap<String, (TokenInfo, Arc<Access>)>,
}

impl Table for TokenIndex {
    fn build(tables: &RawTables) -> Self {
        let limits = tables
            .get(&AdminTable::Limits)
            .map(|rows| parse_limits(rows).0)
            .unwrap_or_default();
        Self::new(
            tables.get(&AdminTable::Tokens).unwrap_or(&Rows::new()),
            &limits,
        )
    }
}

impl TokenIndex {
    fn new(tokens: &Rows, limits: &HashMap<String, Limit>) -> Self {
        let mut index: HashMap<String, (TokenInfo, Arc<Access>)> = HashMap::new();
        for (f, v) in tokens {
            let Some(info) = TokenInfo::parse(f, v) else {
                continue;
            };
            let access = Arc::new(Access {
                id: info.digest[..ID_LEN].to_owned(),
                grant: info.grant.clone(),
                limit: limits.get(f).copied(),
            });
            match index.entry(info.key()) {
                Entry::Occupied(mut o) if o.get().0.hashed && !info.hashed => {
                    o.get_mut().0.shadowed = Some(info.field);
                }
                Entry::Occupied(mut o) => {
                    let mut info = info;
                    info.shadowed = Some(o.get().0.field.clone());
                    o.insert((info, access));
                }
                Entry::Vacant(v) => {
                    v.insert((info, access));
                }
            }
        }
        Self { index }
    }

    /// The one token `r` names in `ns`.
    pub(super) fn find(&self, r: &TokenRef, ns: &str) -> Option<&TokenInfo> {
        match r {
            TokenRef::Secret(t) => self
                .index
                .get(&key(&t.pool, ns, &digest(&t.secret)))
                .map(|(i, _)| i),
            TokenRef::Id { pool, id } => {
                let prefix = key(pool, ns, id);
                let mut found = self
                    .index
                    .iter()
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .map(|(_, (i, _))| i);
                // Two tokens sharing an id: neither is named.
                match (found.next(), found.next()) {
                    (Some(i), None) => Some(i),
                    _ => None,
                }
            }
        }
    }

    /// Every token, with what it may do.
    pub(super) fn all(&self) -> impl Iterator<Item = &(TokenInfo, Arc<Access>)> {
        self.index.values()
    }
}

/// The token table's operations.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a>(pub(super) &'a Replica);

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Tokens<'_> {
    /// Whether `token` may act on `ns`, and what it may do there.
    pub fn check(&self, token: &Token, ns: &str) -> Check {
        let found = self.0.read(|l| {
            l.get::<TokenIndex>()
                .and_then(|t| t.index.get(&key(&token.pool, ns, &digest(&token.secret))))
                .map(|(_, access)| access.clone())
        });
        match found {
            None => Check::Unknown,
            Some(None) => Check::Invalid,
            Some(Some(access)) => Check::Valid(access),
        }
    }

    /// Creates a token with `grant`; `None` if it already exists.
    pub async fn create(
        &self,
        token: &Token,
        ns: &str,
        description: &str,
        grant: &Grant,
    ) -> Result<Option<TokenInfo>, EngineError> {
        self.0.reload().await?;
        if self
            .find_cached(&TokenRef::Secret(token.clone()), ns)
            .is_some()
        {
            return Ok(None);
        }
        let field = hashed_field(&token.pool, ns, &digest(&token.secret));
        let stored = Stored::new(description, grant, Some(now_ms()));
        if !self
            .0
            .change(AdminTable::Tokens, "add", &field, &stored.json())
            .await?
        {
            return Ok(None);
        }
        Ok(TokenInfo::parse(&field, &stored.json()))
    }

    /// The token `r` names in `ns`, from the table as it is now.
    pub async fn find(&self, r: &TokenRef, ns: &str) -> Result<Option<TokenInfo>, EngineError> {
        self.0.reload().await?;
        Ok(self.find_cached(r, ns))
    }

    /// The token `r` names in `ns`, from this gateway's copy.
    pub(super) fn find_cached(&self, r: &TokenRef, ns: &str) -> Option<TokenInfo> {
        self.0
            .read(|l| l.get::<TokenIndex>()?.find(r, ns).cloned())
            .flatten()
    }

    /// Deletes a token and its limit; `false` if there was none.
    pub async fn delete(&self, r: &TokenRef, ns: &str) -> Result<bool, EngineError> {
        let Some(info) = self.find(r, ns).await? else {
            return Ok(false);
        };
        // The token first, so that it stops at once; a crash before its
        // limit goes leaves a limit nobody uses, which the next delete of
        // the same token clears.
        let deleted = self.remove(&info.field).await?;
        // A plaintext token may have been rewritten hashed since it was
        // found (a migration on another gateway): that goes too.
        if let Some(secret) = &info.legacy_secret {
            self.remove(&hashed_field(&info.pool, &info.ns, &digest(secret)))
                .await?;
        }
        if let Some(plain) = &info.shadowed {
            self.remove(plain).await?;
        }
        Ok(deleted)
    }

    /// Deletes one token field and its limit; whether the token was there.
    async fn remove(&self, field: &str) -> Result<bool, EngineError> {
        let deleted = self.0.change(AdminTable::Tokens, "del", field, "").await?;
        self.0.change(AdminTable::Limits, "del", field, "").await?;
        Ok(deleted)
    }

    /// Gives a token a new grant, in place; a plaintext token is migrated
    /// on the way (a scope needs the hashed record). `None` if no such token.
    pub async fn set_grant(
        &self,
        r: &TokenRef,
        ns: &str,
        grant: &Grant,
    ) -> Result<Option<TokenInfo>, EngineError> {
        let Some(info) = self.find(r, ns).await? else {
            return Ok(None);
        };
        let info = match info.hashed {
            true => info,
            false => match self.rehash(&info).await? {
                Some(info) => info,
                None => return Ok(None),
            },
        };
        let stored = Stored::new(&info.description, grant, info.created_ms);
        // Only if it still exists: a token deleted meanwhile stays deleted.
        self.0
            .change(AdminTable::Tokens, "xset", &info.field, &stored.json())
            .await?;
        Ok(self.find_cached(r, ns))
    }

    /// Rewrites a plaintext token hashed, with its limit, in one script
    /// (a token revoked meanwhile is not brought back), then reloads.
    /// Returns the token as it now is, `None` if it went meanwhile.
    async fn rehash(&self, info: &TokenInfo) -> Result<Option<TokenInfo>, EngineError> {
        let field = hashed_field(&info.pool, &info.ns, &info.digest);
        let value = Stored::new(&info.description, &Grant::full(), None).json();
        self.0
            .redis()
            .admin()
            .token_rehash(&info.field, &field, &value)
            .await?;
        self.0.reload().await?;
        let stored = self
            .0
            .read(|l| l.rows(AdminTable::Tokens)?.get(&field).cloned())
            .flatten();
        Ok(stored.and_then(|v| TokenInfo::parse(&field, &v)))
    }

    /// Rewrites every token stored in plaintext (by a version before
    /// hashing) hashed, with its limit; returns how many. Gateways of that
    /// earlier version no longer know them afterwards: run it once every
    /// gateway is upgraded.
    pub async fn migrate(&self) -> Result<usize, EngineError> {
        self.0.reload().await?;
        let legacy: Vec<TokenInfo> = self
            .0
            .read(|l| {
                l.rows(AdminTable::Tokens)
                    .into_iter()
                    .flatten()
                    .filter_map(|(f, v)| TokenInfo::parse(f, v))
                    .filter(|i| !i.hashed)
                    .collect()
            })
            .unwrap_or_default();
        let redis = self.0.redis();
        let mut migrated = 0;
        for info in &legacy {
            let field = hashed_field(&info.pool, &info.ns, &info.digest);
            let value = Stored::new(&info.description, &Grant::full(), None).json();
            // One script each, no reload between: a token revoked meanwhile
            // is skipped, not brought back.
            migrated += usize::from(
                redis
                    .admin()
                    .token_rehash(&info.field, &field, &value)
                    .await?,
            );
        }
        self.0.reload().await?;
        if migrated > 0 {
            tracing::info!(tokens = migrated, "plaintext tokens rewritten hashed");
        }
        Ok(migrated)
    }

    /// How many tokens this gateway's copy holds in plaintext.
    pub fn plaintext_tokens(&self) -> usize {
        self.0
            .read(|l| {
                l.get::<TokenIndex>()
                    .map_or(0, |t| t.all().filter(|(i, _)| !i.hashed).count())
            })
            .unwrap_or(0)
    }

    /// The namespaces of `pool` that have a token, sorted, from this
    /// gateway's copy of the table (as fresh as token checks are); `None`
    /// while the table has never been loaded.
    pub fn namespaces(&self, pool: &str) -> Option<Vec<String>> {
        self.0.read(|l| {
            let set: BTreeSet<&str> = l
                .get::<TokenIndex>()
                .into_iter()
                .flat_map(TokenIndex::all)
                .filter(|(info, _)| info.pool == pool)
                .map(|(info, _)| info.ns.as_str())
                .collect();
            set.into_iter().map(str::to_owned).collect()
        })
    }

    /// Every (pool, namespace) that some token names, with its number of
    /// tokens, from this gateway's copy (empty while the table was never
    /// loaded).
    pub fn pools(&self) -> std::collections::BTreeMap<(String, String), usize> {
        self.0
            .read(|l| {
                let mut out = std::collections::BTreeMap::new();
                for (info, _) in l.get::<TokenIndex>().into_iter().flat_map(TokenIndex::all) {
                    *out.entry((info.pool.clone(), info.ns.clone())).or_insert(0) += 1;
                }
                out
            })
            .unwrap_or_default()
    }

    /// The tokens of a namespace in a pool, oldest first. Read from Redis,
    /// not the copy, so it is exact.
    pub async fn list(&self, pool: &str, ns: &str) -> Result<Vec<TokenInfo>, EngineError> {
        let prefix = format!("{pool}/{ns}/");
        let rows: Rows = self
            .0
            .rows_now(AdminTable::Tokens)
            .await?
            .into_iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .collect();
        let index = TokenIndex::new(&rows, &HashMap::new());
        let mut out: Vec<TokenInfo> = index.index.into_values().map(|(i, _)| i).collect();
        out.sort_by(|a, b| (a.created_ms, &a.digest).cmp(&(b.created_ms, &b.digest)));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use sundial_tests::RedisServer;

    use super::*;
    use crate::{Scope, admin::testing::store};

    #[tokio::test]
    async fn a_token_is_found_by_secret_or_id_narrowed_and_deleted() {
        let redis = RedisServer::start();
        let store = store(&redis).await;
        let tokens = store.tokens();
        let token = Token::mint("default");
        let made = tokens
            .create(&token, "ns", "first", &Grant::full())
            .await
            .expect("create")
            .expect("new");
        assert!(made.hashed);
        assert!(
            tokens
                .create(&token, "ns", "again", &Grant::full())
                .await
                .expect("create")
                .is_none(),
            "a token exists once"
        );
        let by_id = TokenRef::parse(&made.id());
        assert_eq!(
            tokens
                .find(&by_id, "ns")
                .await
                .expect("find")
                .map(|i| i.digest),
            Some(made.digest.clone())
        );
        assert!(
            matches!(tokens.check(&token, "other"), Check::Invalid),
            "a token serves one namespace"
        );
        let read = Grant::parse("read", None).expect("grant");
        let narrowed = tokens
            .set_grant(&by_id, "ns", &read)
            .await
            .expect("set")
            .expect("found");
        assert!(!narrowed.grant.allows(Scope::Publish));
        match tokens.check(&token, "ns") {
            Check::Valid(access) => assert!(!access.grant.allows(Scope::Publish)),
            other => panic!("{other:?}"),
        }
        assert_eq!(tokens.namespaces("default"), Some(vec!["ns".to_owned()]));
        assert_eq!(tokens.list("default", "ns").await.expect("list").len(), 1);
        assert!(tokens.delete(&by_id, "ns").await.expect("delete"));
        assert!(matches!(tokens.check(&token, "ns"), Check::Invalid));
        assert!(!tokens.delete(&by_id, "ns").await.expect("delete"));
    }

    #[tokio::test]
    async fn a_plaintext_token_works_until_migrated_and_after() {
        let redis = RedisServer::start();
        let secret = "an-old-plaintext-secret-of-length";
        let _: () = redis::cmd("HSET")
            .arg("sd:tokens")
            .arg(format!("default/ns/{secret}"))
            .arg("made before hashing")
            .query(&mut redis.client())
            .expect("old token");
        let store = store(&redis).await;
        let tokens = store.tokens();
        let token = Token::parse(&format!("default:{secret}"));
        assert!(matches!(tokens.check(&token, "ns"), Check::Valid(_)));
        assert_eq!(tokens.plaintext_tokens(), 1);
        assert_eq!(tokens.migrate().await.expect("migrate"), 1);
        assert_eq!(tokens.plaintext_tokens(), 0);
        assert!(matches!(tokens.check(&token, "ns"), Check::Valid(_)));
        let stored: Vec<String> = redis::cmd("HKEYS")
            .arg("sd:tokens")
            .query(&mut redis.client())
            .expect("keys");
        assert!(stored.iter().all(|f| !f.contains(secret)), "{stored:?}");
    }
}
