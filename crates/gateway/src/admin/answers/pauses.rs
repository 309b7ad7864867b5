//! A queue's or a namespace's pause, as the pause routes answer it.

use serde::Serialize;
use utoipa::ToSchema;

/// Whether a queue (or, without `queue`, a whole namespace) is paused.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"pool": "default", "namespace": "shop", "queue": "emails",
    "paused": true, "since_ms": 1_764_000_000_000u64, "namespace_paused": false}))]
pub struct PauseAnswer<'a> {
    pub pool: &'a str,
    pub namespace: &'a str,
    /// The queue; absent for a namespace's own pause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<&'a str>,
    /// Whether it is paused itself.
    pub paused: bool,
    /// Since when (ms since the Unix epoch), while paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Of a queue: whether its namespace is paused, which holds the queue
    /// too, paused itself or not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace_paused: Option<bool>,
}
