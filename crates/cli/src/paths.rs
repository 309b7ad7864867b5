//! The admin API's paths that several commands name.

use crate::client::seg;

/// `?pool=<pool>`, or nothing for the default pool.
pub(crate) fn pool_query(pool: Option<&String>) -> String {
    pool.map(|p| format!("?pool={}", seg(p)))
        .unwrap_or_default()
}

/// `/namespaces/<ns>/queues/<queue>`.
pub(crate) fn queue_path(ns: &str, queue: &str) -> String {
    format!("/namespaces/{}/queues/{}", seg(ns), seg(queue))
}
