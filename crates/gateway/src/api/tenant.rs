//! Who is asking, for which namespace, in which pool; and what the request
//! names: the path is read once, here, for every job-API handler.

use std::sync::Arc;

use axum::{
    extract::{FromRequestParts, RawPathParams},
    http::request::Parts,
};
use sundial_core::job::check_namespace;
use sundial_router::{Pool, Token, tokens::Check};

use super::{error::ApiError, params::Params};
use crate::state::AppState;

/// An authenticated caller and what its request names.
#[derive(Debug)]
pub struct Tenant {
    pub ns: String,
    pub pool: Arc<Pool>,
    pub token: Token,
    /// The `{queue}` segment as sent (consume names several, comma-separated);
    /// each handler checks it.
    pub queue: String,
    /// The `{job_id}` segment, on job routes.
    pub job_id: Option<String>,
    /// The query string.
    pub params: Params,
}

/// The path's segments, as the route captured them (percent-decoded).
#[derive(Debug, Default)]
struct Segments {
    ns: String,
    queue: String,
    job_id: Option<String>,
}

impl Segments {
    async fn read(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let raw = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::NotFound("api not found"))?;
        let mut out = Self::default();
        for (name, value) in &raw {
            match name {
                "ns" => value.clone_into(&mut out.ns),
                "queue" => value.clone_into(&mut out.queue),
                "job_id" => out.job_id = Some(value.to_owned()),
                _ => {}
            }
        }
        Ok(out)
    }
}

/// The token as sent: the `X-Token` header, else the `token` query parameter.
fn presented_token(parts: &Parts, params: &Params) -> Option<String> {
    if let Some(v) = parts.headers.get("x-token") {
        return v.to_str().ok().map(str::to_owned).filter(|s| !s.is_empty());
    }
    params
        .get("token")
        .filter(|s| !s.is_empty())
        .map(|s| s.into_owned())
}

impl FromRequestParts<Arc<AppState>> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        let Segments { ns, queue, job_id } = Segments::read(parts, state).await?;
        check_namespace(&ns).map_err(|e| ApiError::bad(e.to_string()))?;
        let params = Params::new(&parts.uri);
        let Some(raw) = presented_token(parts, &params) else {
            return Err(ApiError::Unauthorized("token not found"));
        };
        let token = Token::parse(&raw);
        let Some(pool) = state.live.topology().pool(&token.pool).cloned() else {
            return Err(ApiError::NotFound("pool not found"));
        };
        match state.tokens.check(&token, &ns) {
            Check::Valid => Ok(Self {
                ns,
                pool,
                token,
                queue,
                job_id,
                params,
            }),
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
