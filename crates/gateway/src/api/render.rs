//! The JSON of a job, as lmstfy shapes it.

use base64::Engine;
use serde_json::value::RawValue;
use sundial_core::JobView;

use super::answers::{DeliveredJob, Job, NewJob};

/// Seconds left before expiry, as Redis `TTL` would say it; 0 = never.
fn ttl_secs(ttl_ms: u64) -> u64 {
    if ttl_ms == 0 {
        0
    } else {
        ttl_ms.div_ceil(1000)
    }
}

/// The attributes' JSON text as it is stored; `None` when the job has none.
fn attributes(attrs: &str) -> Option<&RawValue> {
    if attrs.is_empty() {
        None
    } else {
        serde_json::from_str(attrs).ok()
    }
}

/// A job as peek shows it.
pub(super) fn job<'a>(ns: &'a str, j: &'a JobView) -> Job<'a> {
    Job {
        namespace: ns,
        queue: j.queue_name(),
        job_id: &j.id,
        data: base64::engine::general_purpose::STANDARD.encode(&j.body),
        ttl: ttl_secs(j.ttl_ms),
        elapsed_ms: j.elapsed_ms,
        remain_tries: j.tries_left,
        attributes: attributes(&j.attrs),
        delivery: j.delivery,
        reason: (!j.reason.is_empty()).then_some(j.reason.as_str()),
        priority: j.priority,
    }
}

/// A job as consume hands it out.
pub(super) fn delivered<'a>(ns: &'a str, j: &'a JobView) -> DeliveredJob<'a> {
    DeliveredJob {
        msg: NewJob::NewJob,
        job: job(ns, j),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rounds_up_and_zero_means_forever() {
        assert_eq!(ttl_secs(0), 0);
        assert_eq!(ttl_secs(1), 1);
        assert_eq!(ttl_secs(1000), 1);
        assert_eq!(ttl_secs(1001), 2);
    }
}
