//! One job as a line of a namespace's NDJSON export (the format is in
//! the `portable` module's doc): written from a job read for an export,
//! and read back, checked, into a job to import.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sundial_core::{
    JobId, PortableJob, check_key,
    job::{
        MAX_ATTRIBUTE_KEY_BYTES, MAX_ATTRIBUTE_VALUE_BYTES, MAX_ATTRIBUTES, MAX_BODY_BYTES,
        check_queue,
    },
    keys, state as st,
};
use sundial_router::policy::{Backoff, RetryPolicy};

/// The longest time a line's ms fields may say: ten years.
const MAX_MS: u64 = 10 * 365 * 86_400_000;

/// One job of an export or import (one line of NDJSON). Times in
/// milliseconds, relative to when the job was read.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PortableJob)]
pub(crate) struct Line {
    /// The queue (within the route's namespace).
    queue: String,
    /// The job's id, kept by an import.
    job_id: String,
    #[schema(value_type = super::super::answers::jobs::JobState)]
    state: String,
    /// Deliveries left (at least 1 for a delayed or ready job).
    #[schema(maximum = 65535)]
    remain_tries: u16,
    /// Whether it has been delivered at least once (default false; a
    /// reserved job has been).
    #[serde(default)]
    delivered: bool,
    /// Since it was published.
    #[serde(default)]
    elapsed_ms: u64,
    /// Until it expires; 0 = never.
    #[serde(default)]
    ttl_ms: u64,
    /// Delayed: until it is due (left out when 0).
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    delay_ms: u64,
    /// Reserved: until its TTR runs out and it is delivered again or dies
    /// (left out when 0).
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    ttr_ms: u64,
    /// Dead: since it died, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dead_for_ms: Option<u64>,
    /// Its deliveries so far (left out when 0; a delivered job without it
    /// counts as delivered once).
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    #[schema(maximum = 4294967295u64)]
    delivery: u32,
    /// Why it last failed, at most 1024 bytes (left out when none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schema(max_length = 1024)]
    reason: String,
    /// Its retry policy (left out when none): the fields of a queue's
    /// policy, without `tries` (`remain_tries` holds the job's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policy: Option<RetryPolicy>,
    /// Its idempotency key (left out when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 256)]
    dedup: Option<String>,
    /// Until its key's window ends (`dedup_ttl` at publish), ms; left out
    /// when the key lasts as long as the job.
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    dedup_ttl_ms: u64,
    /// Its priority (`priority` at publish), 0 to 255; left out when 0.
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    priority: u8,
    /// Its attributes (`Job-Attr-*` at publish), or null.
    #[serde(default)]
    #[schema(value_type = Option<std::collections::HashMap<String, String>>)]
    attributes: Option<serde_json::Map<String, serde_json::Value>>,
    /// The body, base64.
    #[schema(content_encoding = "base64")]
    data: String,
}

/// A line's policy as the record packs it, or why it is not one.
fn packed(policy: Option<RetryPolicy>) -> Result<Option<sundial_core::PackedPolicy>, String> {
    let Some(p) = policy else { return Ok(None) };
    if p.tries.is_some() {
        return Err("invalid policy: tries (a job's tries are its remain_tries)".to_owned());
    }
    Ok(p.resolve()
        .map_err(|why| format!("invalid policy: {why}"))?
        .pack())
}

/// The longest reason a line may carry, as a release's.
const MAX_REASON_BYTES: usize = 1024;

const STATES: [&str; 4] = ["delayed", "ready", "reserved", "dead"];

impl Line {
    /// The line of `j`; `None` when its state is none of [`STATES`].
    pub(super) fn of(j: &PortableJob) -> Option<Self> {
        let state = STATES.get(usize::from(j.state).wrapping_sub(1))?;
        Some(Self {
            queue: keys::parse_qualified(&j.queue)
                .map_or(j.queue.as_str(), |(_, q)| q)
                .to_owned(),
            job_id: j.id.clone(),
            state: (*state).to_owned(),
            remain_tries: j.tries,
            delivered: j.delivered,
            elapsed_ms: j.age_ms,
            ttl_ms: j.ttl_ms,
            delay_ms: j.due_in_ms,
            ttr_ms: j.ttr_ms,
            dead_for_ms: j.dead_for_ms,
            delivery: j.delivery,
            reason: j.reason.clone(),
            policy: j
                .policy
                .as_ref()
                .and_then(Backoff::unpack)
                .map(|b| b.policy()),
            dedup: (!j.key.is_empty()).then(|| j.key.clone()),
            dedup_ttl_ms: j.key_ttl_ms,
            priority: j.priority,
            attributes: serde_json::from_str(&j.attrs).ok(),
            data: base64::engine::general_purpose::STANDARD.encode(&j.body),
        })
    }

    /// The job this line describes, in namespace `ns`, or why it cannot be.
    pub(super) fn job(self, ns: &str) -> Result<(JobId, PortableJob), String> {
        check_queue(&self.queue).map_err(|e| e.to_string())?;
        let id = JobId::parse(&self.job_id).map_err(|e| e.to_string())?;
        let state = self.state_code()?;
        if self.remain_tries == 0 && matches!(state, st::DELAYED | st::READY) {
            return Err("a delayed or ready job needs remain_tries of at least 1".to_owned());
        }
        self.check_times()?;
        if self.reason.len() > MAX_REASON_BYTES {
            return Err(format!("reason too long: at most {MAX_REASON_BYTES} bytes"));
        }
        let body = self.body()?;
        let policy = packed(self.policy)?;
        if let Some(k) = &self.dedup {
            check_key(k).map_err(|why| format!("invalid dedup: {why}"))?;
        }
        let delivered = self.delivered || self.delivery > 0 || state == st::RESERVED;
        let attrs = attributes(self.attributes)?;
        let job = PortableJob {
            id: id.as_str().to_owned(),
            queue: keys::qualified(ns, &self.queue),
            state,
            delivered,
            tries: self.remain_tries,
            age_ms: self.elapsed_ms,
            ttl_ms: self.ttl_ms,
            due_in_ms: if state == st::DELAYED {
                self.delay_ms
            } else {
                0
            },
            ttr_ms: if state == st::RESERVED {
                self.ttr_ms
            } else {
                0
            },
            dead_for_ms: if state == st::DEAD {
                self.dead_for_ms
            } else {
                None
            },
            attrs,
            body: body.into(),
            delivery: self.delivery.max(u32::from(delivered)),
            reason: self.reason,
            policy,
            key: self.dedup.unwrap_or_default(),
            key_ttl_ms: self.dedup_ttl_ms,
            priority: self.priority,
        };
        Ok((id, job))
    }

    /// The state's number (`sundial_core::state`).
    fn state_code(&self) -> Result<u8, String> {
        match STATES.iter().position(|s| *s == self.state) {
            Some(i) => Ok(i as u8 + 1),
            None => Err(format!("invalid state {:?}", self.state)),
        }
    }

    /// Refuses a time over [`MAX_MS`].
    fn check_times(&self) -> Result<(), String> {
        let times = [
            self.elapsed_ms,
            self.ttl_ms,
            self.delay_ms,
            self.ttr_ms,
            self.dead_for_ms.unwrap_or(0),
            self.dedup_ttl_ms,
        ];
        if times.iter().any(|t| *t > MAX_MS) {
            return Err("a time over ten years".to_owned());
        }
        Ok(())
    }

    /// The body, decoded, within a job's bounds.
    fn body(&self) -> Result<Vec<u8>, String> {
        let body = base64::engine::general_purpose::STANDARD
            .decode(&self.data)
            .map_err(|_| "data is not base64".to_owned())?;
        if body.len() > MAX_BODY_BYTES {
            return Err("job too large".to_owned());
        }
        Ok(body)
    }
}

/// A line's attributes as the job stores them (JSON, or empty for none),
/// within a job's bounds.
fn attributes(
    attributes: Option<serde_json::Map<String, serde_json::Value>>,
) -> Result<String, String> {
    Ok(match attributes {
        None => String::new(),
        Some(a) if a.is_empty() => String::new(),
        Some(a) => {
            let fits = a.len() <= MAX_ATTRIBUTES
                && a.iter().all(|(k, v)| {
                    k.len() <= MAX_ATTRIBUTE_KEY_BYTES
                        && v.as_str()
                            .is_some_and(|s| s.len() <= MAX_ATTRIBUTE_VALUE_BYTES)
                });
            if !fits {
                return Err(format!(
                    "attributes: at most {MAX_ATTRIBUTES} string values, keys of at most \
                     {MAX_ATTRIBUTE_KEY_BYTES} bytes, values of at most \
                     {MAX_ATTRIBUTE_VALUE_BYTES}"
                ));
            }
            serde_json::Value::Object(a).to_string()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: u8) -> PortableJob {
        PortableJob {
            id: "01JD3M6Y7ZQ8K5X4W2V1T0S9R8".to_owned(),
            queue: "ns/q".to_owned(),
            state,
            delivered: state == st::RESERVED,
            tries: 1,
            age_ms: 5,
            ttl_ms: 0,
            due_in_ms: if state == st::DELAYED { 1000 } else { 0 },
            ttr_ms: if state == st::RESERVED { 1000 } else { 0 },
            dead_for_ms: None,
            attrs: String::new(),
            body: bytes::Bytes::from_static(b"x"),
            delivery: u32::from(state == st::RESERVED),
            reason: String::new(),
            policy: None,
            key: String::new(),
            key_ttl_ms: 0,
            priority: 0,
        }
    }

    #[test]
    fn a_line_keeps_the_key_and_refuses_a_bad_one() {
        let mut ready = job(st::READY);
        ready.key = "order-7".to_owned();
        ready.key_ttl_ms = 60_000;
        let text = serde_json::to_string(&Line::of(&ready).expect("line")).expect("text");
        assert!(
            text.contains(r#""dedup":"order-7","dedup_ttl_ms":60000"#),
            "{text}"
        );
        let line: Line = serde_json::from_str(&text).expect("line");
        let (_, back) = line.job("ns").expect("job");
        assert_eq!((back.key.as_str(), back.key_ttl_ms), ("order-7", 60_000));
        ready.priority = 9;
        let text = serde_json::to_string(&Line::of(&ready).expect("line")).expect("text");
        assert!(text.contains(r#""priority":9"#), "{text}");
        let line: Line = serde_json::from_str(&text).expect("line");
        assert_eq!(line.job("ns").expect("job").1.priority, 9);
        let over = text.replace(r#""priority":9"#, r#""priority":256"#);
        assert!(
            serde_json::from_str::<Line>(&over).is_err(),
            "256 is no priority"
        );
        let plain = serde_json::to_string(&Line::of(&job(st::READY)).expect("line")).expect("text");
        assert!(!plain.contains("dedup"), "no key, no field: {plain}");
        let bad = text.replace("order-7", "");
        let line: Line = serde_json::from_str(&bad).expect("line");
        assert_eq!(line.job("ns").expect_err("refused"), "invalid dedup: empty");
    }

    #[test]
    fn a_line_keeps_the_policy_and_refuses_a_bad_one() {
        let p = RetryPolicy::from_json(r#"{"backoff": "fixed", "initial_delay_ms": 500}"#)
            .and_then(|p| p.resolve())
            .expect("policy")
            .pack();
        let mut ready = job(st::READY);
        ready.policy = p;
        let text = serde_json::to_string(&Line::of(&ready).expect("line")).expect("text");
        assert!(
            text.contains(r#""policy":{"backoff":"fixed","initial_delay_ms":500"#),
            "{text}"
        );
        let line: Line = serde_json::from_str(&text).expect("parses");
        assert_eq!(line.job("ns").expect("taken").1.policy, p);
        for (bad, why) in [
            (
                r#"{"backoff":"fixed"}"#,
                "invalid policy: a backoff needs initial_delay_ms",
            ),
            (
                r#"{"tries":3}"#,
                "invalid policy: tries (a job's tries are its remain_tries)",
            ),
        ] {
            let text = format!(
                r#"{{"queue":"q","job_id":"01JD3M6Y7ZQ8K5X4W2V1T0S9R8","state":"ready","remain_tries":1,"data":"","policy":{bad}}}"#
            );
            let line: Line = serde_json::from_str(&text).expect("parses");
            assert_eq!(line.job("ns").err().as_deref(), Some(why), "{bad}");
        }
    }

    #[test]
    fn every_state_makes_a_line_an_import_takes_back_and_no_other_does() {
        for state in [st::DELAYED, st::READY, st::RESERVED, st::DEAD] {
            let line = Line::of(&job(state)).expect("a known state");
            let text = serde_json::to_string(&line).expect("serialises");
            let back: Line = serde_json::from_str(&text).expect("parses");
            let (_, again) = back.job("ns").expect("an import takes it");
            assert_eq!(again.state, state, "{text}");
        }
        for state in [0, 5, 15] {
            assert!(Line::of(&job(state)).is_none(), "state {state}");
        }
    }

    #[test]
    fn a_line_keeps_the_deliveries_and_the_reason_and_bounds_the_reason() {
        let mut dead = job(st::DEAD);
        (dead.delivered, dead.delivery, dead.reason) = (true, 3, "db down".to_owned());
        let text = serde_json::to_string(&Line::of(&dead).expect("line")).expect("text");
        assert!(
            text.contains(r#""delivery":3,"reason":"db down""#),
            "{text}"
        );
        let (_, back) = serde_json::from_str::<Line>(&text)
            .expect("parses")
            .job("ns")
            .expect("taken");
        assert_eq!((back.delivery, back.reason.as_str()), (3, "db down"));
        // A delivered job of an older export counts as delivered once.
        let old = r#"{"queue":"q","job_id":"01JD3M6Y7ZQ8K5X4W2V1T0S9R8","state":"ready","remain_tries":1,"delivered":true,"data":""}"#;
        let (_, back) = serde_json::from_str::<Line>(old)
            .expect("parses")
            .job("ns")
            .expect("taken");
        assert_eq!((back.delivered, back.delivery), (true, 1));
        dead.reason = "x".repeat(1025);
        let text = serde_json::to_string(&Line::of(&dead).expect("line")).expect("text");
        let err = serde_json::from_str::<Line>(&text)
            .expect("parses")
            .job("ns");
        assert_eq!(
            err.err().as_deref(),
            Some("reason too long: at most 1024 bytes")
        );
    }
}
