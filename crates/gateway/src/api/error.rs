//! The one error type of the HTTP API: each case maps to a status and a
//! stable JSON body in lmstfy's shapes. Internal causes are logged once,
//! here, and never shown to clients.

use super::answers::errors::{ErrorBody, NoJob, NoJobMsg, QuotaRefusalBody, RateLimited};
use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
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
    /// 421 `{"error": …}`: the admin listener does not answer to the name
    /// the request was sent to (`access`).
    #[error("{0}")]
    Misdirected(String),
    /// 409 `{"error": …}`: the request conflicts with what is under way.
    #[error("{0}")]
    Conflict(String),
    /// 404 `{"msg": "no job available"}` (lmstfy's shape for an empty
    /// consume); the queues a failing shard kept out of its last look are
    /// named in `X-Sundial-Unavailable-Queues`, when there are any.
    #[error("no job available")]
    NoJobFrom(Vec<String>),
    /// 429 `{"msg": …}` (lmstfy's shape): over the token's rate limit,
    /// with `Retry-After` (when its window ends).
    #[error("{message}")]
    TooMany {
        message: String,
        retry_after_ms: u64,
    },
    /// 413 `{"error": …}`
    #[error("{0}")]
    TooLarge(&'static str),
    /// 400, 413 or 429 `{"error", "quota", "limit", "usage"}`: over a
    /// namespace quota (`super::quota`); a rate's answer says when to
    /// retry (`Retry-After`).
    #[error("{}", .0.message)]
    Quota(Box<QuotaRefusal>),
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

/// A request refused by a namespace quota: nothing of it was done.
#[derive(Debug)]
pub struct QuotaRefusal {
    pub status: StatusCode,
    /// The bound's name (`max_body`, `publish_rate`, …).
    pub quota: &'static str,
    pub limit: u64,
    /// What met the limit: the job's value, or the jobs drawn on a rate.
    pub usage: u64,
    /// A rate: how long until the request would pass.
    pub retry_after_ms: Option<u64>,
    pub message: String,
}

impl QuotaRefusal {
    fn body(&self) -> QuotaRefusalBody<'_> {
        QuotaRefusalBody {
            error: &self.message,
            quota: self.quota,
            limit: self.limit,
            usage: self.usage,
        }
    }
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

/// A refused write of the schedule table: a definition refused is 400;
/// a row a newer build wrote, or a key that would change, 409.
impl From<sundial_router::admin::schedules::PutError> for ApiError {
    fn from(e: sundial_router::admin::schedules::PutError) -> Self {
        use sundial_router::admin::schedules::PutError;
        match e {
            PutError::Spec(e) => Self::bad(e.to_string()),
            PutError::Engine(e) => e.into(),
            other @ (PutError::Newer(_) | PutError::KeyChange) => Self::Conflict(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after_ms = match &self {
            Self::Quota(r) => r.retry_after_ms,
            Self::TooMany { retry_after_ms, .. } => Some(*retry_after_ms),
            _ => None,
        };
        let mut response = match &self {
            Self::BadRequest(m) => error(StatusCode::BAD_REQUEST, m),
            Self::Unauthorized(m) => error(StatusCode::UNAUTHORIZED, m),
            Self::Forbidden(m) => error(StatusCode::FORBIDDEN, m),
            Self::NotFound(m) => error(StatusCode::NOT_FOUND, m),
            Self::Misdirected(m) => error(StatusCode::MISDIRECTED_REQUEST, m),
            Self::Conflict(m) => error(StatusCode::CONFLICT, m),
            Self::NoJobFrom(_) => (
                StatusCode::NOT_FOUND,
                Json(NoJob {
                    msg: NoJobMsg::NoJobAvailable,
                }),
            )
                .into_response(),
            Self::TooLarge(m) => error(StatusCode::PAYLOAD_TOO_LARGE, m),
            Self::Quota(r) => (r.status, Json(r.body())).into_response(),
            Self::TooMany { message, .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                Json(RateLimited { msg: message }),
            )
                .into_response(),
            Self::MethodNotAllowed => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
            Self::RequestTimeout(m) => error(StatusCode::REQUEST_TIMEOUT, m),
            Self::Busy => error(StatusCode::SERVICE_UNAVAILABLE, "server busy, retry later"),
            Self::Unserved(m) => error(StatusCode::SERVICE_UNAVAILABLE, m),
            Self::Unavailable(e) => error(StatusCode::SERVICE_UNAVAILABLE, &unavailable(e)),
            Self::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "internal error");
                error(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
            }
        };
        if let Self::NoJobFrom(queues) = &self
            && !queues.is_empty()
            && let Ok(v) = axum::http::HeaderValue::from_str(&queues.join(","))
        {
            response
                .headers_mut()
                .insert("x-sundial-unavailable-queues", v);
        }
        if let Some(ms) = retry_after_ms {
            // Whole seconds (RFC 9110), rounded up.
            let secs = ms.div_ceil(1000).max(1);
            response.headers_mut().insert("retry-after", secs.into());
        }
        response
    }
}

/// `{"error": …}` with `status`.
fn error(status: StatusCode, error: &str) -> Response {
    (status, Json(ErrorBody { error })).into_response()
}

/// The message of a 503 for a shard that could not do a request, logged
/// once here.
fn unavailable(e: &EngineError) -> String {
    match e {
        EngineError::OutOfMemory { shard, .. } => {
            tracing::warn!(shard, "redis refused a write: out of memory");
            let pool = shard.split_once('/').map_or(shard.as_str(), |(p, _)| p);
            format!("pool {pool} is out of memory: nothing was stored; retry later")
        }
        EngineError::NotReplicated { .. } => {
            tracing::warn!(error = %e, "write not confirmed by replicas");
            "stored, but not confirmed by the replicas in time: it may still be delivered, \
             or be lost if Redis fails over now"
                .to_owned()
        }
        _ => {
            tracing::warn!(error = %e, "redis unavailable");
            "storage unavailable, retry later".to_owned()
        }
    }
}

/// A route that exists, with a method it does not have: 405, nothing done.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
