//! A schedule as its slot holds it: the lane and slot it lives in, and
//! its definition as the fire script reads it (`sundial_core::FireDef`).

use std::collections::BTreeMap;

use bytes::Bytes;
use sundial_core::{FireDef, keys};

use super::{ScheduleDef, SpecError, Timing, spec::FIRE_ATTRIBUTES};
use crate::policy::RetryPolicy;

/// The lane, among `lanes`, of schedule `name` whose job has idempotency
/// key `key` or none: the key's (where the key's index is, so that the
/// key answers publishes and fires alike), else the name's
/// ([`keys::schedule_lane`]). Its fires' jobs go there.
pub fn lane_of(name: &str, key: Option<&str>, lanes: u32) -> u32 {
    match key {
        Some(k) if !k.is_empty() => sundial_core::key_lane(k, lanes),
        _ => keys::schedule_lane(name, lanes),
    }
}

/// The slot, among a pool's `slots` and `lanes`, of schedule `name` of
/// `queue` in `ns` whose job has idempotency key `key` or none: its
/// lane's ([`lane_of`]).
pub fn slot_of(
    ns: &str,
    queue: &str,
    (name, key): (&str, Option<&str>),
    slots: u32,
    lanes: u32,
) -> u32 {
    keys::slot_of(ns, queue, lane_of(name, key, lanes), slots)
}

/// The definition of schedule `name` as its slot holds it: the job's
/// retry policy is its queue's (`queue_policy`) under the template's own,
/// as a publish makes it, and its attributes are the template's and the
/// schedule's name (the fire script adds the fire's time).
pub fn fire_def(
    def: &ScheduleDef,
    name: &str,
    queue_policy: &RetryPolicy,
) -> Result<FireDef, SpecError> {
    let policy = def
        .job
        .policy
        .over(queue_policy)
        .resolve()
        .map_err(SpecError::Policy)?
        .pack();
    let mut attrs: BTreeMap<&str, &str> = def
        .job
        .attributes
        .iter()
        .filter(|(k, _)| !FIRE_ATTRIBUTES.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    attrs.insert(FIRE_ATTRIBUTES[0], name);
    let json = serde_json::to_string(&attrs).map_err(|_| SpecError::Attributes)?;
    let timing = serde_json::to_string(&Timing::of(def)).map_err(|_| SpecError::Neither)?;
    Ok(FireDef {
        rev: def.rev,
        grace_ms: u32::try_from(def.grace_ms).map_err(|_| SpecError::Grace)?,
        paused: def.paused,
        ttl_ms: u64::from(def.job.ttl) * 1000,
        tries: def.job.tries,
        priority: def.job.priority,
        policy,
        // Without its closing brace: the fire script appends the fire's
        // time and closes it.
        attrs: json[..json.len() - 1].to_owned(),
        timing,
        key: def.job.dedup.clone().unwrap_or_default(),
        key_window_ms: def.job.dedup_ttl.unwrap_or(0) * 1000,
        body: Bytes::from(def.job.body()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{policy::BackoffKind, schedule::spec::tests::every};

    #[test]
    fn a_definition_becomes_what_its_slot_holds() {
        let mut def = every(60);
        def.rev = 42;
        def.job.attributes = [("region".to_owned(), "eu".to_owned())].into();
        def.job.priority = 3;
        let queue = RetryPolicy {
            backoff: Some(BackoffKind::Fixed),
            initial_delay_ms: Some(500),
            ..RetryPolicy::default()
        };
        let fd = fire_def(&def, "nightly", &queue).expect("a slot's form");
        assert_eq!(fd.rev, 42);
        assert_eq!(fd.ttl_ms, 60_000);
        assert_eq!((fd.tries, fd.priority), (1, 3));
        assert!(fd.policy.is_some(), "the queue's policy under the job's");
        assert_eq!(fd.body, Bytes::from_static(b"hello"));
        let attrs: serde_json::Value =
            serde_json::from_str(&format!("{},\"scheduled-at\":\"1\"}}", fd.attrs)).expect("json");
        assert_eq!(attrs["region"], "eu");
        assert_eq!(attrs["schedule"], "nightly");
        let timing: Timing = serde_json::from_str(&fd.timing).expect("timing");
        assert_eq!(timing, Timing::of(&def));
        let plain = fire_def(&def, "n", &RetryPolicy::default()).expect("a slot's form");
        assert_eq!(plain.policy, None);
    }

    #[test]
    fn a_schedules_slot_is_its_lane_of_its_queue() {
        let lanes = 4;
        let lane = keys::schedule_lane("nightly", lanes);
        assert_eq!(
            slot_of("ns", "q", ("nightly", None), 128, lanes),
            keys::slot_of("ns", "q", lane, 128)
        );
        assert_eq!(keys::schedule_lane("anything", 1), 0);
        // With a key, the key's lane: where a publish with it goes.
        let keyed = sundial_core::key_lane("report", lanes);
        assert_eq!(lane_of("nightly", Some("report"), lanes), keyed);
        assert_eq!(
            slot_of("ns", "q", ("nightly", Some("report")), 128, lanes),
            keys::slot_of("ns", "q", keyed, 128)
        );
        assert_eq!(lane_of("nightly", Some(""), lanes), lane);
    }

    #[test]
    fn a_key_and_its_window_go_with_the_definition() {
        let mut def = every(60);
        def.job.dedup = Some("report".to_owned());
        def.job.dedup_ttl = Some(3600);
        let fd = fire_def(&def, "nightly", &RetryPolicy::default()).expect("a slot's form");
        assert_eq!((fd.key.as_str(), fd.key_window_ms), ("report", 3_600_000));
        let plain = fire_def(&every(60), "n", &RetryPolicy::default()).expect("a slot's form");
        assert_eq!((plain.key.as_str(), plain.key_window_ms), ("", 0));
    }
}
