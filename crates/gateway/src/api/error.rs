//! The one error type of the HTTP API: each case maps to a status and a
//! stable JSON body in lmstfy's shapes. Internal causes are logged once,
//! here, and never shown to clients.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::json;
use sundial_core::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 `{"error": …}`
    #[error("{0}")]
    BadRequest(String),
    /// 401 `{"error": …}`
    #[error("{0}")]
    Unauthorized(&'static str),
    /// 403 `{"error": …}`: the token is valid but its scope does not
    /// cover this request.
    #[error("{0}")]
    Forbidden(String),
    /// 404 `{"error": …}`
    #[error("{0}")]
    NotFound(&'static str),
    /// 409 `{"error": …}`: the request conflicts with what is under way.
    #[error("{0}")]
    Conflict(String),
    /// 404 `{"msg": "no job available"}` (lmstfy's shape for an empty consume)
    #[error("no job available")]
    NoJob,
    /// 429 `{"msg": …}` (lmstfy's shape): over the token's rate limit.
    #[error("{0}")]
    TooMany(String),
    /// 413 `{"error": …}`
    #[error("{0}")]
    TooLarge(&'static str),
    /// 405 `{"error": "method not allowed"}`: no route has this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 408 `{"error": …}`: the request body did not arrive in time.
    #[error("{0}")]
    RequestTimeout(&'static str),
    /// 503 `{"error": …}`: too many request bodies are being read at once
    /// (their memory budget is spent); retry later.
    #[error("too many request bodies in flight")]
    Busy,
    /// 503 `{"error": …}`: this gateway cannot serve the request now
    /// (its config lacks a pool the request needs); retry later.
    #[error("{0}")]
    Unserved(String),
    /// 503 `{"error": …}`: Redis unreachable; retry later.
    #[error(transparent)]
    Unavailable(EngineError),
    /// 500 `{"error": "internal error"}`
    #[error(transparent)]
    Internal(anyhow::Error),
}

impl ApiError {
    pub fn bad(msg: impl Into<String>) -> Self {
        Self::BadRequest(msg.into())
    }

    /// 503: the token table has not been loaded yet (its Redis has not
    /// answered since the gateway started).
    pub fn tokens_not_loaded() -> Self {
        Self::Unavailable(EngineError::Unavailable {
            shard: "admin".to_owned(),
            source: fred::error::Error::new(
                fred::error::ErrorKind::IO,
                "the token table has not been loaded yet",
            ),
        })
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        if e.is_unavailable() {
            Self::Unavailable(e)
        } else {
            Self::Internal(e.into())
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = match &self {
            Self::BadRequest(m) => (StatusCode::BAD_REQUEST, json!({ "error": m })),
            Self::Unauthorized(m) => (StatusCode::UNAUTHORIZED, json!({ "error": m })),
            Self::Forbidden(m) => (StatusCode::FORBIDDEN, json!({ "error": m })),
            Self::NotFound(m) => (StatusCode::NOT_FOUND, json!({ "error": m })),
            Self::Conflict(m) => (StatusCode::CONFLICT, json!({ "error": m })),
            Self::NoJob => (StatusCode::NOT_FOUND, json!({ "msg": "no job available" })),
            Self::TooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, json!({ "error": m })),
            Self::TooMany(m) => (StatusCode::TOO_MANY_REQUESTS, json!({ "msg": m })),
            Self::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                json!({ "error": "method not allowed" }),
            ),
            Self::RequestTimeout(m) => (StatusCode::REQUEST_TIMEOUT, json!({ "error": m })),
            Self::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "error": "server busy, retry later" }),
            ),
            Self::Unserved(m) => (StatusCode::SERVICE_UNAVAILABLE, json!({ "error": m })),
            Self::Unavailable(EngineError::OutOfMemory { shard, .. }) => {
                tracing::warn!(shard, "redis refused a write: out of memory");
                let pool = shard.split_once('/').map_or(shard.as_str(), |(p, _)| p);
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "error": format!(
                        "pool {pool} is out of memory: nothing was stored; retry later"
                    ) }),
                )
            }
            Self::Unavailable(e @ EngineError::NotReplicated { .. }) => {
                tracing::warn!(error = %e, "write not confirmed by replicas");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "error": "stored, but not confirmed by the replicas in time: \
                                      it may still be delivered, or be lost if Redis fails over now" }),
                )
            }
            Self::Unavailable(e) => {
                tracing::warn!(error = %e, "redis unavailable");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "error": "storage unavailable, retry later" }),
                )
            }
            Self::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "internal error");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({ "error": "internal error" }),
                )
            }
        };
        (status, Json(body)).into_response()
    }
}

/// A route that exists, with a method it does not have: 405, nothing done.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
