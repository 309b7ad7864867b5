//! A queue's retry policy, as the policy routes answer it.

use serde::Serialize;
use sundial_router::policy::RetryPolicy;
use utoipa::ToSchema;

/// A queue's retry policy, as the table holds it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"pool": "default", "namespace": "shop", "queue": "emails",
    "policy": {"backoff": "exponential", "initial_delay_ms": 1000, "multiplier": 2.0,
    "max_delay_ms": 60000, "jitter_percent": 10, "tries": 5}}))]
pub struct PolicyAnswer<'a> {
    pub pool: &'a str,
    pub namespace: &'a str,
    pub queue: &'a str,
    /// The fields set (`{}`: none; a failed job is then ready again at
    /// once, as in lmstfy).
    pub policy: RetryPolicy,
}
