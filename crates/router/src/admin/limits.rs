//! The limit table: each token's rate limit (at most so many consumes and
//! publishes per interval), by its token's field. Every gateway holds it
//! whole; a request's limit comes with its token ([`super::tokens::Access`]).

use std::collections::HashMap;

use sundial_core::{EngineError, keys::AdminTable};

use super::{
    records::{Limit, TokenInfo, TokenRef, parse_limits},
    replica::{RawTables, Replica, Table},
    tokens::{TokenIndex, Tokens},
};

/// The limit table as a gateway holds it: token field → limit.
#[derive(Debug, Default)]
pub struct LimitTable {
    limits: HashMap<String, Limit>,
}

impl Table for LimitTable {
    /// Logs each row it cannot read (once per load: the token table's
    /// copy reads the same rows without a word).
    fn build(tables: &RawTables) -> Self {
        let Some(rows) = tables.get(&AdminTable::Limits) else {
            return Self::default();
        };
        let (limits, unreadable) = parse_limits(rows);
        for e in unreadable {
            tracing::warn!(error = %e, "ignoring an unreadable rate limit");
        }
        Self { limits }
    }
}

/// The limit table's operations.
#[derive(Debug, Clone, Copy)]
pub struct Limits<'a>(pub(super) &'a Replica);

impl Limits<'_> {
    fn tokens(&self) -> Tokens<'_> {
        Tokens(self.0)
    }

    /// The rate limit of a token, from this gateway's copy.
    pub fn get(&self, r: &TokenRef, ns: &str) -> Option<Limit> {
        self.0
            .read(|l| {
                let field = &l.get::<TokenIndex>()?.find(r, ns)?.field;
                l.get::<LimitTable>()?.limits.get(field).copied()
            })
            .flatten()
    }

    /// Sets a token's limit; with `only_new`, not if one exists (`false`).
    /// `None` if there is no such token.
    pub async fn set(
        &self,
        r: &TokenRef,
        ns: &str,
        limit: Limit,
        only_new: bool,
    ) -> Result<Option<bool>, EngineError> {
        let Some(info) = self.tokens().find(r, ns).await? else {
            return Ok(None);
        };
        let json = serde_json::to_string(&limit).unwrap_or_default();
        let op = if only_new { "add" } else { "set" };
        let changed = self
            .0
            .change(AdminTable::Limits, op, &info.field, &json)
            .await?;
        Ok(Some(changed || !only_new))
    }

    /// Removes a token's limit; `false` if it had none.
    pub async fn delete(&self, r: &TokenRef, ns: &str) -> Result<bool, EngineError> {
        let Some(info) = self.tokens().find(r, ns).await? else {
            return Ok(false);
        };
        self.0
            .change(AdminTable::Limits, "del", &info.field, "")
            .await
    }

    /// Every token that has a limit, with it, from this gateway's copy, in
    /// (pool, namespace, id) order.
    pub fn all(&self) -> Vec<(TokenInfo, Limit)> {
        let mut out: Vec<(TokenInfo, Limit)> = self
            .0
            .read(|l| {
                l.get::<TokenIndex>()
                    .into_iter()
                    .flat_map(TokenIndex::all)
                    .filter_map(|(i, a)| Some((i.clone(), a.limit?)))
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|(a, _), (b, _)| (&a.pool, &a.ns, &a.digest).cmp(&(&b.pool, &b.ns, &b.digest)));
        out
    }
}

#[cfg(test)]
mod tests {
    use sundial_tests::RedisServer;

    use super::*;
    use crate::{Grant, Token, admin::testing::store, admin::tokens::Check};

    #[tokio::test]
    async fn a_limit_is_set_once_read_with_its_token_and_deleted() {
        let redis = RedisServer::start();
        let store = store(&redis).await;
        let token = Token::mint("default");
        let named = TokenRef::Secret(token.clone());
        let limit = Limit {
            read: 10,
            write: 5,
            interval: 1,
        };
        assert_eq!(
            store
                .limits()
                .set(&named, "ns", limit, true)
                .await
                .expect("set"),
            None,
            "no such token"
        );
        store
            .tokens()
            .create(&token, "ns", "t", &Grant::full())
            .await
            .expect("create");
        assert_eq!(
            store
                .limits()
                .set(&named, "ns", limit, true)
                .await
                .expect("set"),
            Some(true)
        );
        let other = Limit { read: 1, ..limit };
        assert_eq!(
            store
                .limits()
                .set(&named, "ns", other, true)
                .await
                .expect("set"),
            Some(false),
            "only a new one"
        );
        assert_eq!(store.limits().get(&named, "ns"), Some(limit));
        match store.tokens().check(&token, "ns") {
            Check::Valid(access) => assert_eq!(access.limit, Some(limit)),
            c => panic!("{c:?}"),
        }
        assert_eq!(store.limits().all().len(), 1);
        assert!(store.limits().delete(&named, "ns").await.expect("delete"));
        assert_eq!(store.limits().get(&named, "ns"), None);
        assert!(store.limits().all().is_empty());
    }
}
