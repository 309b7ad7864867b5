//! Tokens: never their secrets, but at their creation.

use std::collections::BTreeMap;

use serde::Serialize;
use sundial_router::{admin::records::TokenInfo, scope::Scope};
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{RefOr, schema::Schema},
};

use crate::api::answers::names_schema;

/// What a token may do. publish: publish, bulk publish. consume: consume,
/// acknowledge (`DELETE …/job/{job_id}`). read: peek a job or a queue,
/// size, stats, dead-letter peek and size. manage: destroy a queue,
/// respawn or delete its dead letter. Republish needs publish and consume.
#[derive(Debug)]
pub struct TokenScope;

impl PartialSchema for TokenScope {
    fn schema() -> RefOr<Schema> {
        names_schema(
            "publish: publish, bulk publish. consume: consume, acknowledge (`DELETE \
             …/job/{job_id}`). read: peek a job or a queue, size, stats, dead-letter peek \
             and size. manage: destroy a queue, respawn or delete its dead letter. \
             Republish needs publish and consume.",
            Scope::ALL.map(Scope::name),
        )
    }
}

impl ToSchema for TokenScope {}

/// How a token is stored.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Stored {
    /// As the SHA-256 of its secret.
    Hashed,
    /// As is, by an earlier version, until `POST /tokens/migrate`.
    Plaintext,
}

/// A token as the admin API describes it: never its secret.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Token)]
pub struct TokenView<'a> {
    /// The first 16 hex digits of the secret's SHA-256, with `pool:`
    /// before it outside the default pool. Admin paths take it in place
    /// of the token.
    #[schema(examples("3f2a9c1b0d4e5f67", "eu:3f2a9c1b0d4e5f67"))]
    pub id: String,
    pub namespace: &'a str,
    pub pool: &'a str,
    pub description: &'a str,
    /// All four for a token made without a scope.
    #[schema(value_type = Vec<TokenScope>)]
    pub scopes: Vec<&'static str>,
    /// Queue names and `prefix*` prefixes; `null`: every queue.
    #[schema(required = true)]
    pub queues: Option<&'a [String]>,
    /// Unix ms; `null` for a token made before Sundial recorded it.
    #[schema(required = true)]
    pub created_at_ms: Option<u64>,
    #[schema(inline)]
    pub stored: Stored,
}

impl<'a> From<&'a TokenInfo> for TokenView<'a> {
    fn from(t: &'a TokenInfo) -> Self {
        Self {
            id: t.id(),
            namespace: &t.ns,
            pool: &t.pool,
            description: &t.description,
            scopes: t.grant.scope_names(),
            queues: t.grant.queues(),
            created_at_ms: t.created_ms,
            stored: if t.hashed {
                Stored::Hashed
            } else {
                Stored::Plaintext
            },
        }
    }
}

/// 201 of `POST /token/{ns}`: lmstfy's `{"token"}` plus the token's
/// description. The only answer that shows the token.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"token": "01JD3M6Y7ZQ8K5X4W2V1T0S9R8", "id": "3f2a9c1b0d4e5f67",
    "namespace": "ns", "pool": "default", "description": "worker", "scopes": ["consume"],
    "queues": ["emails", "reports-*"], "created_at_ms": 1732493000000u64, "stored": "hashed"}))]
pub struct CreatedToken<'a> {
    /// As a client presents it: `secret`, or `pool:secret` outside the
    /// default pool.
    pub token: &'a str,
    #[serde(flatten)]
    pub info: TokenView<'a>,
}

/// A namespace's tokens.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenList<'a> {
    /// lmstfy's map, keyed by token id (Redis holds digests, not tokens):
    /// id → description.
    pub tokens: BTreeMap<String, &'a str>,
    /// Oldest first.
    #[schema(extensions(("x-sundial-extension" = json!(true))))]
    pub details: Vec<TokenView<'a>>,
}

/// Tokens rewritten as digests.
#[derive(Debug, Serialize, ToSchema)]
pub struct Migrated {
    pub migrated: usize,
}
