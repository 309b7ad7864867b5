//! Per-token rate limits (lmstfy's throttle, made right): a fixed window per
//! token and action, counted in the admin Redis so that it holds across
//! gateways. A request that does not succeed gives its count back, so a
//! consume that finds no job costs nothing.
//!
//! If the admin Redis cannot count, the request is let through (and a
//! warning logged): a rate limit protects the service, it should not take
//! it down.

use std::future::Future;

use sundial_core::keys;

use super::{error::ApiError, tenant::Tenant};
use crate::state::AppState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    /// Consume.
    Read,
    /// Publish and bulk publish.
    Write,
}

/// Runs `work` if the tenant's token is within its limit for `action`
/// (429 otherwise), and refunds the count when `work` fails.
pub(super) async fn limited<T>(
    state: &AppState,
    tenant: &Tenant,
    action: Action,
    work: impl Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    let Some(limit) = tenant.access.limit else {
        return work.await;
    };
    let (max, tag, verb) = match action {
        Action::Read => (limit.read, 'r', "consume"),
        Action::Write => (limit.write, 'w', "produce"),
    };
    if max == 0 || limit.interval == 0 {
        return work.await;
    }
    let key = keys::rate(&tenant.token.pool, &tenant.ns, &tenant.access.id, tag);
    let window_ms = limit.interval.saturating_mul(1000);
    let redis = state.admin.redis();
    match redis.admin().rate(&key, window_ms, 1).await {
        Ok((n, window_left_ms)) if n > max => {
            refund(state, &key, window_ms).await;
            metrics::counter!("sundial_rate_limited_total", "pool" => tenant.pool().name().to_owned(), "action" => verb)
                .increment(1);
            // lmstfy's words, with the token's id, not the token: a
            // proxy's or client's log of the answer holds no secret.
            Err(ApiError::TooMany {
                message: format!(
                    "token({}) {verb} reach the limit rate, please retry later",
                    sundial_router::Token {
                        pool: tenant.token.pool.clone(),
                        secret: tenant.access.id.clone(),
                    }
                ),
                retry_after_ms: window_left_ms.max(1),
            })
        }
        Ok(_) => {
            let result = work.await;
            if result.is_err() {
                refund(state, &key, window_ms).await;
            }
            result
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot count against a rate limit; letting the request through");
            work.await
        }
    }
}

async fn refund(state: &AppState, key: &str, window_ms: u64) {
    if let Err(e) = state.admin.redis().admin().rate(key, window_ms, -1).await {
        tracing::warn!(error = %e, "cannot refund a rate-limit count");
    }
}
