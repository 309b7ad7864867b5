//! Who is asking, for which namespace, in which pool.

use std::{collections::HashMap, sync::Arc};

use axum::{
    extract::{FromRequestParts, Path},
    http::request::Parts,
};
use sundial_core::job::check_namespace;
use sundial_router::{Pool, Token};

use super::error::ApiError;
use sundial_router::tokens::Check;

use crate::state::AppState;

/// An authenticated caller: its namespace and the pool its token names.
#[derive(Debug)]
pub struct Tenant {
    pub ns: String,
    pub pool: Arc<Pool>,
    pub token: Token,
}

/// The token as sent: the `X-Token` header, else the `token` query parameter.
fn presented_token(parts: &Parts) -> Option<String> {
    if let Some(v) = parts.headers.get("x-token") {
        return v.to_str().ok().map(str::to_owned).filter(|s| !s.is_empty());
    }
    query_params(&parts.uri)
        .remove("token")
        .filter(|s| !s.is_empty())
}

/// The query string as a map (a malformed one reads as empty).
pub(crate) fn query_params(uri: &axum::http::Uri) -> HashMap<String, String> {
    axum::extract::Query::<HashMap<String, String>>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

impl FromRequestParts<Arc<AppState>> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::NotFound("api not found"))?;
        let ns = params.get("ns").cloned().unwrap_or_default();
        check_namespace(&ns).map_err(|e| ApiError::bad(e.to_string()))?;
        let Some(raw) = presented_token(parts) else {
            return Err(ApiError::Unauthorized("token not found"));
        };
        let token = Token::parse(&raw);
        let Some(pool) = state.live.topology().pool(&token.pool).cloned() else {
            return Err(ApiError::NotFound("pool not found"));
        };
        match state.tokens.check(&token, &ns) {
            Check::Valid => Ok(Self { ns, pool, token }),
            Check::Invalid => Err(ApiError::Unauthorized("invalid token")),
            Check::Unknown => Err(ApiError::Unavailable(
                sundial_core::EngineError::Unavailable {
                    shard: "admin".to_owned(),
                    source: fred::error::Error::new(
                        fred::error::ErrorKind::IO,
                        "the token table has not been loaded yet",
                    ),
                },
            )),
        }
    }
}
