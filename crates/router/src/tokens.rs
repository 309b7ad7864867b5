//! Tokens, their scopes and their rate limits: stored in the admin Redis,
//! replicated into every gateway.
//!
//! Every gateway holds the whole token and limit tables in memory, so
//! authenticating a request and finding its scope and limit cost no round
//! trip. Each change writes a table and, only when the table really
//! changed, bumps the tables' version, in one script; every gateway polls
//! that version every [`POLL`] and reloads both tables when it moved. A
//! deleted or narrowed token, or a changed limit, therefore takes effect
//! everywhere within about [`POLL`].
//!
//! The table never holds a secret: a token's field is
//! `<pool>/<ns>/sha256:<hex digest of the secret>`, its value a JSON
//! [`Stored`] record. Tokens made by a version before hashing are fields
//! `<pool>/<ns>/<secret>` whose value is the bare description; they keep
//! working, with every scope, until [`TokenStore::migrate`] rewrites them.
//! A limit's field is its token's field.

use std::{
    collections::{HashMap, hash_map::Entry},
    sync::Arc,
    time::Duration,
};

use arc_swap::{ArcSwap, ArcSwapOption};
use sundial_core::{AdminTables, EngineError, Shard, keys::AdminTable};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::{Grant, LiveTopology, Token};

/// How often each gateway checks the token table's version.
pub const POLL: Duration = Duration::from_millis(500);

/// A token's rate limit: at most `read` consumes and `write` publishes per
/// `interval` seconds; 0 = no limit on that action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limit {
    pub read: u64,
    pub write: u64,
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
fn is_id(s: &str) -> bool {
    s.len() == ID_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A hashed token's value in the table.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Stored {
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
    fn new(description: &str, grant: &Grant, created_ms: Option<u64>) -> Self {
        let full = grant.is_full();
        Self {
            description: description.to_owned(),
            scopes: (!full).then(|| grant.scope_names().into_iter().map(str::to_owned).collect()),
            queues: grant.queues().map(<[String]>::to_vec),
            created_ms,
        }
    }

    fn json(&self) -> String {
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
    /// [`TokenStore::migrate`] rewrites it.
    pub hashed: bool,
    /// Its field in the table (and in the limit table).
    field: String,
    /// A plaintext token's secret, which migrating it needs.
    legacy_secret: Option<String>,
    /// The plaintext field of the same token, when a migration stopped
    /// half-way and left both: deleting the token deletes both.
    shadowed: Option<String>,
}

impl TokenInfo {
    /// Reads one field of the table; `None` for a field this version cannot
    /// read (it is kept as it is, and logged).
    fn parse(field: &str, value: &str) -> Option<Self> {
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

    fn key(&self) -> String {
        key(&self.pool, &self.ns, &self.digest)
    }
}

fn key(pool: &str, ns: &str, digest: &str) -> String {
    format!("{pool}/{ns}/{digest}")
}

fn hashed_field(pool: &str, ns: &str, digest: &str) -> String {
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

/// What an authenticated request's token may do.
#[derive(Debug)]
pub struct Access {
    /// The token's id without its pool: names it in rate counters.
    pub id: String,
    pub grant: Grant,
    pub limit: Option<Limit>,
}

/// One load of both tables.
#[derive(Debug, Default)]
struct Snapshot {
    version: i64,
    /// As stored, for writing back after a loss.
    tokens: HashMap<String, String>,
    /// Field → limit.
    limits: HashMap<String, Limit>,
    /// `<pool>/<ns>` → its home, as stored (compare-and-set needs it) and
    /// parsed.
    homes: HashMap<String, (String, crate::homes::Home)>,
    /// `<pool>/<ns>/<digest>` → the token (a hashed field wins over a
    /// plaintext one of the same secret, half-way through a migration).
    index: HashMap<String, (TokenInfo, Arc<Access>)>,
}

impl Snapshot {
    fn new(version: i64, tokens: HashMap<String, String>, limits: HashMap<String, Limit>) -> Self {
        Self::with_homes(version, tokens, limits, HashMap::new())
    }

    fn with_homes(
        version: i64,
        tokens: HashMap<String, String>,
        limits: HashMap<String, Limit>,
        homes: HashMap<String, String>,
    ) -> Self {
        let homes = homes
            .into_iter()
            .filter_map(|(f, raw)| match serde_json::from_str(&raw) {
                Ok(h) => Some((f, (raw, h))),
                Err(e) => {
                    tracing::warn!(field = f, error = %e, "ignoring an unreadable namespace home");
                    None
                }
            })
            .collect();
        let mut index: HashMap<String, (TokenInfo, Arc<Access>)> = HashMap::new();
        for (f, v) in &tokens {
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
        Self {
            version,
            tokens,
            limits,
            homes,
            index,
        }
    }

    /// The one token `r` names in `ns`.
    fn find(&self, r: &TokenRef, ns: &str) -> Option<&TokenInfo> {
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
}

/// What an authentication attempt found.
#[derive(Debug, Clone)]
pub enum Check {
    Valid(Arc<Access>),
    Invalid,
    /// The table has never been loaded (admin Redis unreachable since start).
    Unknown,
}

#[derive(Debug)]
pub struct TokenStore {
    /// Swappable: when tokens live on the default pool's shard, a reload may
    /// give that shard a new address.
    redis: ArcSwap<Shard>,
    table: ArcSwapOption<Snapshot>,
    /// Bumped when the namespace homes change (a long poll ends when its
    /// namespace's route does).
    homes_changed: watch::Sender<u64>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl TokenStore {
    pub fn new(redis: Shard) -> Arc<Self> {
        Arc::new(Self {
            redis: ArcSwap::from_pointee(redis),
            table: ArcSwapOption::empty(),
            homes_changed: watch::Sender::new(0),
        })
    }

    /// Whether `token` may act on `ns`, and what it may do there.
    pub fn check(&self, token: &Token, ns: &str) -> Check {
        match &*self.table.load() {
            None => Check::Unknown,
            Some(t) => match t.index.get(&key(&token.pool, ns, &digest(&token.secret))) {
                Some((_, access)) => Check::Valid(access.clone()),
                None => Check::Invalid,
            },
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
        self.reload().await?;
        if self
            .find_cached(&TokenRef::Secret(token.clone()), ns)
            .is_some()
        {
            return Ok(None);
        }
        let d = digest(&token.secret);
        let field = hashed_field(&token.pool, ns, &d);
        let stored = Stored::new(description, grant, Some(now_ms()));
        if !self
            .change(AdminTable::Tokens, "add", &field, &stored.json())
            .await?
        {
            return Ok(None);
        }
        Ok(TokenInfo::parse(&field, &stored.json()))
    }

    /// The token `r` names in `ns`, from the table as it is now.
    pub async fn find(&self, r: &TokenRef, ns: &str) -> Result<Option<TokenInfo>, EngineError> {
        self.reload().await?;
        Ok(self.find_cached(r, ns))
    }

    fn find_cached(&self, r: &TokenRef, ns: &str) -> Option<TokenInfo> {
        self.table.load().as_ref()?.find(r, ns).cloned()
    }

    /// Deletes a token and its limit; `false` if there was none.
    pub async fn delete(&self, r: &TokenRef, ns: &str) -> Result<bool, EngineError> {
        let Some(info) = self.find(r, ns).await? else {
            return Ok(false);
        };
        // The token first, so that it stops at once; a crash before its
        // limit goes leaves a limit nobody uses, which the next delete of
        // the same token clears.
        let deleted = self
            .change(AdminTable::Tokens, "del", &info.field, "")
            .await?;
        self.change(AdminTable::Limits, "del", &info.field, "")
            .await?;
        // A plaintext token may have been rewritten hashed since it was
        // found (a migration on another gateway): that goes too.
        if let Some(secret) = &info.legacy_secret {
            let hashed = hashed_field(&info.pool, &info.ns, &digest(secret));
            self.change(AdminTable::Tokens, "del", &hashed, "").await?;
            self.change(AdminTable::Limits, "del", &hashed, "").await?;
        }
        if let Some(plain) = &info.shadowed {
            self.change(AdminTable::Tokens, "del", plain, "").await?;
            self.change(AdminTable::Limits, "del", plain, "").await?;
        }
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
        self.change(AdminTable::Tokens, "xset", &info.field, &stored.json())
            .await?;
        Ok(self.find_cached(r, ns))
    }

    /// Rewrites a plaintext token hashed, with its limit, in one script
    /// (a token revoked meanwhile is not brought back), then reloads.
    /// Returns the token as it now is, `None` if it went meanwhile.
    async fn rehash(&self, info: &TokenInfo) -> Result<Option<TokenInfo>, EngineError> {
        let field = hashed_field(&info.pool, &info.ns, &info.digest);
        let value = Stored::new(&info.description, &Grant::full(), None).json();
        let redis = self.redis();
        redis
            .admin()
            .token_rehash(&info.field, &field, &value)
            .await?;
        self.reload().await?;
        let table = self.table.load();
        let stored = table.as_ref().and_then(|t| t.tokens.get(&field)).cloned();
        Ok(stored.and_then(|v| TokenInfo::parse(&field, &v)))
    }

    /// Rewrites every token stored in plaintext (by a version before
    /// hashing) hashed, with its limit; returns how many. Gateways of that
    /// earlier version no longer know them afterwards: run it once every
    /// gateway is upgraded.
    pub async fn migrate(&self) -> Result<usize, EngineError> {
        self.reload().await?;
        let legacy: Vec<TokenInfo> = self
            .table
            .load()
            .as_ref()
            .map(|t| {
                t.tokens
                    .iter()
                    .filter_map(|(f, v)| TokenInfo::parse(f, v))
                    .filter(|i| !i.hashed)
                    .collect()
            })
            .unwrap_or_default();
        let redis = self.redis();
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
        self.reload().await?;
        if migrated > 0 {
            tracing::info!(tokens = migrated, "plaintext tokens rewritten hashed");
        }
        Ok(migrated)
    }

    /// How many tokens this gateway's copy holds in plaintext.
    pub fn plaintext_tokens(&self) -> usize {
        self.table
            .load()
            .as_ref()
            .map_or(0, |t| t.index.values().filter(|(i, _)| !i.hashed).count())
    }

    /// The rate limit of a token, from this gateway's copy.
    pub fn limit(&self, r: &TokenRef, ns: &str) -> Option<Limit> {
        let t = self.table.load();
        let t = t.as_ref()?;
        t.limits.get(&t.find(r, ns)?.field).copied()
    }

    /// Sets a token's limit; with `only_new`, not if one exists (`false`).
    /// `None` if there is no such token.
    pub async fn set_limit(
        &self,
        r: &TokenRef,
        ns: &str,
        limit: Limit,
        only_new: bool,
    ) -> Result<Option<bool>, EngineError> {
        let Some(info) = self.find(r, ns).await? else {
            return Ok(None);
        };
        let json = serde_json::to_string(&limit).unwrap_or_default();
        let op = if only_new { "add" } else { "set" };
        let changed = self
            .change(AdminTable::Limits, op, &info.field, &json)
            .await?;
        Ok(Some(changed || !only_new))
    }

    /// Removes a token's limit; `false` if it had none.
    pub async fn delete_limit(&self, r: &TokenRef, ns: &str) -> Result<bool, EngineError> {
        let Some(info) = self.find(r, ns).await? else {
            return Ok(false);
        };
        self.change(AdminTable::Limits, "del", &info.field, "")
            .await
    }

    /// Every token that has a limit, with it, from this gateway's copy, in
    /// (pool, namespace, id) order.
    pub fn limits(&self) -> Vec<(TokenInfo, Limit)> {
        let t = self.table.load();
        let mut out: Vec<(TokenInfo, Limit)> = t
            .as_ref()
            .map(|t| {
                t.index
                    .values()
                    .filter_map(|(i, a)| Some((i.clone(), a.limit?)))
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|(a, _), (b, _)| (&a.pool, &a.ns, &a.digest).cmp(&(&b.pool, &b.ns, &b.digest)));
        out
    }

    /// The admin Redis, where tokens, limits and request counters live.
    pub fn redis(&self) -> Arc<Shard> {
        self.redis.load_full()
    }

    /// Points the store at another connection (after a reload).
    pub fn set_redis(&self, shard: Shard) {
        if !self.redis.load().same(&shard) {
            self.redis.store(Arc::new(shard));
        }
    }

    /// Changes one field of `table` and, only if that changed anything,
    /// the version (one script), then reloads this gateway's copy at once.
    async fn change(
        &self,
        table: AdminTable,
        op: &str,
        field: &str,
        value: &str,
    ) -> Result<bool, EngineError> {
        let changed = self
            .redis()
            .admin()
            .table_change(table, op, field, value)
            .await?;
        if changed {
            self.reload().await?;
        }
        Ok(changed)
    }

    /// Where the tokens of `pool` for `ns` are served from, if the
    /// namespace moved (or moves) to another pool.
    pub fn home(&self, pool: &str, ns: &str) -> Option<crate::homes::Home> {
        let table = self.table.load_full()?;
        table
            .homes
            .get(&crate::homes::field(pool, ns))
            .map(|(_, h)| h.clone())
    }

    /// Every home this gateway knows: (`pool`, `ns`, home).
    pub fn homes(&self) -> Vec<(String, String, crate::homes::Home)> {
        let Some(table) = self.table.load_full() else {
            return Vec::new();
        };
        table
            .homes
            .iter()
            .filter_map(|(f, (_, h))| {
                let (pool, ns) = f.split_once('/')?;
                Some((pool.to_owned(), ns.to_owned(), h.clone()))
            })
            .collect()
    }

    /// Sets the home of `pool`'s `ns` to `new`, only if it is `expected`
    /// now (`None`: it has none), as read from Redis; returns whether it
    /// was set. Every gateway reloads the tables.
    pub async fn set_home(
        &self,
        pool: &str,
        ns: &str,
        new: Option<&crate::homes::Home>,
        expected: Option<&crate::homes::Home>,
    ) -> Result<bool, EngineError> {
        let field = crate::homes::field(pool, ns);
        let current: Option<String> = self.redis().admin().home(&field).await?;
        let parsed: Option<crate::homes::Home> = current
            .as_deref()
            .and_then(|c| serde_json::from_str(c).ok());
        if parsed.as_ref() != expected {
            return Ok(false);
        }
        let was = current.unwrap_or_default();
        let changed = match new {
            Some(h) => {
                let value = serde_json::to_string(h).unwrap_or_default();
                self.redis()
                    .admin()
                    .table_change_if(AdminTable::Homes, "cas", &field, &value, &was)
                    .await?
            }
            None if was.is_empty() => false,
            None => {
                self.redis()
                    .admin()
                    .table_change(AdminTable::Homes, "del", &field, "")
                    .await?
            }
        };
        if changed {
            self.reload().await?;
        }
        Ok(changed)
    }

    /// The namespaces of `pool` that have a token, sorted, from this
    /// gateway's copy of the table (as fresh as token checks are); `None`
    /// while the table has never been loaded.
    pub fn namespaces(&self, pool: &str) -> Option<Vec<String>> {
        let table = self.table.load_full()?;
        let set: std::collections::BTreeSet<&str> = table
            .index
            .values()
            .filter(|(info, _)| info.pool == pool)
            .map(|(info, _)| info.ns.as_str())
            .collect();
        Some(set.into_iter().map(str::to_owned).collect())
    }

    /// The tokens of a namespace in a pool, oldest first. Read from Redis,
    /// not the cache, so it is exact.
    pub async fn list(&self, pool: &str, ns: &str) -> Result<Vec<TokenInfo>, EngineError> {
        let all = self.redis().admin().token_table().await?;
        let prefix = format!("{pool}/{ns}/");
        let tables = Snapshot::new(
            0,
            all.into_iter()
                .filter(|(k, _)| k.starts_with(&prefix))
                .collect(),
            HashMap::new(),
        );
        let mut out: Vec<TokenInfo> = tables.index.into_values().map(|(i, _)| i).collect();
        out.sort_by(|a, b| (a.created_ms, &a.digest).cmp(&(b.created_ms, &b.digest)));
        Ok(out)
    }

    /// Loads the table if its version moved (or was never loaded). When the
    /// admin Redis has lost the table (its version is gone, or went back,
    /// while this gateway holds a newer one: it came back empty, and maybe
    /// took a change or two since), writes this gateway's copy back instead.
    pub async fn reload(&self) -> Result<(), EngineError> {
        let redis = self.redis();
        // The copy first, then the version: a copy loaded (by a concurrent
        // reload) after the version was read could be newer than it without
        // Redis having lost anything, and restoring it then would give two
        // different tables the same version.
        let cached = self.table.load_full();
        let version = redis.admin().version().await?;
        if let Some(t) = &cached {
            if t.version > version.unwrap_or(0) {
                return self.restore(&redis, t).await;
            }
            if t.version == version.unwrap_or(0) {
                return Ok(());
            }
        }
        let tables = redis.admin().tables().await?;
        let limits = tables
            .limits
            .into_iter()
            .filter_map(|(k, v)| match serde_json::from_str(&v) {
                Ok(l) => Some((k, l)),
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring an unreadable rate limit");
                    None
                }
            })
            .collect();
        let loaded = Arc::new(Snapshot::with_homes(
            tables.version,
            tables.tokens,
            limits,
            tables.homes,
        ));
        // Reloads run concurrently (each admin change reloads at once, and
        // the poller): never replace a newer copy with an older one, or a
        // token created a moment ago would be refused until the next poll.
        let before = self.table.rcu(|current| match current {
            Some(c) if c.version > loaded.version => Some(c.clone()),
            _ => Some(loaded.clone()),
        });
        let homes = |s: Option<&Arc<Snapshot>>| -> HashMap<String, String> {
            s.map(|s| {
                s.homes
                    .iter()
                    .map(|(f, (raw, _))| (f.clone(), raw.clone()))
                    .collect()
            })
            .unwrap_or_default()
        };
        if homes(before.as_ref()) != homes(self.table.load().as_ref()) {
            self.homes_changed.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    /// Changes when the namespace homes do ([`Self::home`]).
    pub fn home_changes(&self) -> watch::Receiver<u64> {
        self.homes_changed.subscribe()
    }

    /// Writes a copy of the tables back into an admin Redis that lost them
    /// (restarted without persistence, or flushed), with a newer version:
    /// tenants keep their tokens. Fields that exist are kept (a token made
    /// since the loss, or another gateway's restore), so the result is the
    /// union. A deletion made just before the loss may come back.
    async fn restore(&self, redis: &Shard, t: &Snapshot) -> Result<(), EngineError> {
        tracing::error!(
            had_version = t.version,
            tokens = t.tokens.len(),
            limits = t.limits.len(),
            "the admin Redis has no token table (restarted without its data, or flushed); \
             writing this gateway's copy back"
        );
        let tables = AdminTables {
            version: t.version,
            tokens: t.tokens.clone(),
            limits: t
                .limits
                .iter()
                .map(|(f, l)| (f.clone(), serde_json::to_string(l).unwrap_or_default()))
                .collect(),
            homes: t
                .homes
                .iter()
                .map(|(f, (raw, _))| (f.clone(), raw.clone()))
                .collect(),
        };
        redis.admin().restore_tables(&tables).await
    }

    /// Polls the version until `shutdown`. With `follow` (the tables live
    /// on the default pool's first shard, no admin Redis of their own), the
    /// store moves to that shard's connection when a reload replaces it.
    pub async fn run(
        self: Arc<Self>,
        follow: Option<Arc<LiveTopology>>,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut changes = follow.as_ref().map(|l| l.changes());
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                Some(Ok(())) = async { Some(changes.as_mut()?.changed().await) } => {}
                () = shutdown.cancelled() => return,
            }
            // Also on a tick: a poller started again after a panic would
            // not see a change made before it subscribed.
            if let Some(shard) = follow.as_ref().and_then(|l| default_shard(l)) {
                self.set_redis(shard);
            }
            match self.reload().await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("token table reachable again");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "cannot refresh the token table; keeping the cached one");
                }
                Err(_) => {}
            }
        }
    }
}

/// The first shard of the default pool: where the tables live when there is
/// no admin Redis.
pub fn default_shard(live: &LiveTopology) -> Option<Shard> {
    live.topology()
        .pool(crate::token::DEFAULT_POOL)
        .and_then(|p| p.shards().next().cloned())
}
