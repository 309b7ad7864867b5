//! Tokens' rate limits.

use serde::Serialize;
use sundial_router::admin::records::Limit;
use utoipa::ToSchema;

/// A token's limit, as set.
#[derive(Debug, Serialize, ToSchema)]
pub struct Limiter {
    pub limiter: Limit,
}

/// A limit with the token it bounds.
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitEntry<'a> {
    pub namespace: &'a str,
    /// The token's id (with `pool:` outside the default pool), never the
    /// token.
    pub token: String,
    pub limiter: Limit,
}

/// Every token's limit, in (pool, namespace, id) order.
#[derive(Debug, Serialize, ToSchema)]
#[serde(transparent)]
pub struct LimitList<'a>(pub Vec<LimitEntry<'a>>);
