//! A publish's retry policy: its queue's (the policy table), with the
//! publish's own fields over it (Sundial's extension), packed into the
//! schedule, and its default tries when the publish gives none.

use sundial_core::Schedule;
use sundial_router::policy::{BackoffKind, RetryPolicy};

use super::{error::ApiError, params::Params, tenant::Tenant};
use crate::state::AppState;

/// The policy fields a publish may give, as query parameters.
fn own_fields(p: &Params) -> Result<RetryPolicy, ApiError> {
    let backoff = match p.get("backoff").as_deref() {
        None => None,
        Some("fixed") => Some(BackoffKind::Fixed),
        Some("exponential") => Some(BackoffKind::Exponential),
        Some(_) => return Err(ApiError::bad("invalid backoff: fixed or exponential")),
    };
    let opt = |name: &str| -> Result<Option<u64>, ApiError> {
        p.get(name).map(|_| p.uint::<u64>(name, 0)).transpose()
    };
    let multiplier = match p.get("multiplier") {
        None => None,
        Some(v) => Some(
            v.parse::<f64>()
                .ok()
                .filter(|m| m.is_finite())
                .ok_or_else(|| ApiError::bad("invalid multiplier"))?,
        ),
    };
    Ok(RetryPolicy {
        backoff,
        initial_delay_ms: opt("initial_delay_ms")?,
        multiplier,
        max_delay_ms: opt("max_delay_ms")?,
        jitter_percent: p
            .get("jitter_percent")
            .map(|_| p.uint::<u8>("jitter_percent", 0))
            .transpose()?,
        tries: None,
        max_retry_ms: opt("max_retry_ms")?,
    })
}

/// `s` with the job's retry policy (its queue's, under the publish's own
/// fields), and the policy's tries when the publish gives no `tries`.
/// 400 when the fields make no policy (`invalid policy: …`), nothing
/// stored.
pub(super) fn apply(
    state: &AppState,
    tenant: &Tenant,
    queue: &str,
    mut s: Schedule,
) -> Result<Schedule, ApiError> {
    let own = own_fields(&tenant.params)?;
    let of_queue = state
        .admin
        .policies()
        .get(&tenant.token.pool, &tenant.ns, queue);
    if own.is_empty() && of_queue.is_empty() {
        return Ok(s);
    }
    let policy = own.over(&of_queue);
    let backoff = policy
        .resolve()
        .map_err(|why| ApiError::bad(format!("invalid policy: {why}")))?;
    if tenant.params.get("tries").is_none()
        && let Some(tries) = policy.tries
    {
        s.tries = tries;
    }
    s.policy = backoff.pack();
    Ok(s)
}
