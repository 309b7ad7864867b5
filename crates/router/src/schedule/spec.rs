//! A schedule's definition: when it fires, what it does with fires it
//! missed, and the job it publishes each time; as a row of the schedule
//! table holds it (JSON). [`ScheduleDef::check`] refuses a definition that
//! cannot fire as asked. The job's bounds that depend on the namespace
//! (its quota's TTL and tries, the body's size) are for the API to check,
//! as they are at publish.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::{Missed, Recurrence, RecurrenceError, missed::MAX_CATCH_UP};
use sundial_core::{
    MAX_KEY_WINDOW_SECS, check_key,
    job::{MAX_ATTRIBUTE_KEY_BYTES, MAX_ATTRIBUTE_VALUE_BYTES},
};

use crate::policy::RetryPolicy;

/// The longest schedule name, bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// The longest jitter: an hour.
pub const MAX_JITTER_MS: u64 = 3_600_000;
/// How late a fire may be and still fire, unless a schedule says: past
/// it, a fire is missed.
pub const DEFAULT_GRACE_MS: u64 = 60_000;
/// The grace a schedule may give, ms: a second to a day.
pub const GRACE_MS: std::ops::RangeInclusive<u64> = 1_000..=86_400_000;
/// The fires over which a jitter must stay under half of every gap.
const JITTER_FIRES: usize = 100;
/// The attributes a schedule's job may carry: two of a job's sixteen are
/// the fire's own (its schedule, and the time it was meant for).
pub const MAX_TEMPLATE_ATTRIBUTES: usize = 14;
/// The attributes each fire's job carries: its schedule's name, and the
/// time the fire was for (Unix ms, as text).
pub const FIRE_ATTRIBUTES: [&str; 2] = ["schedule", "scheduled-at"];

/// A schedule, as the schedule table holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleDef {
    /// At least the time it was made (ms), and one more than the row it
    /// revised: a slot applies a row only over an older one, and a
    /// schedule deleted and made again (before a slot saw the delete)
    /// still has a newer row.
    pub rev: u64,
    /// A cron expression (5 or 6 fields), or…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// …its IANA time zone (`UTC` when absent)…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// …or an interval, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    /// The instant an interval counts from (ms): its start, or when it was
    /// created; kept while the interval does not change.
    pub anchor_ms: u64,
    /// No fire before (ms, inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    /// No fire after (ms, inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    /// Each fire waits a random 0 to this many ms after its time.
    #[serde(default)]
    pub jitter_ms: u64,
    /// What happens to fires missed for longer than `grace_ms`.
    pub missed: Missed,
    pub grace_ms: u64,
    /// A paused schedule does not fire; its fires meanwhile are missed.
    /// Only a pause or a resume changes it: a revision keeps the row's.
    #[serde(default)]
    pub paused: bool,
    pub job: JobTemplate,
    pub created_ms: u64,
    pub updated_ms: u64,
}

/// The job a schedule publishes at each fire.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobTemplate {
    /// The body, base64.
    pub data: String,
    /// Seconds; 0: never expires.
    pub ttl: u32,
    pub tries: u16,
    #[serde(default)]
    pub priority: u8,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
    /// Over the queue's retry policy, as a publish's fields are.
    #[serde(default, skip_serializing_if = "RetryPolicy::is_empty")]
    pub policy: RetryPolicy,
    /// The idempotency key each fire's job is published with: a fire
    /// while the key names a job (until that job is done, or for
    /// `dedup_ttl` seconds after each publish) publishes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<String>,
    /// Seconds the key holds after each publish, however its job ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_ttl: Option<u64>,
}

/// Why a definition was refused; the text is the API's 400 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Recurrence(#[from] RecurrenceError),
    #[error("give cron or every")]
    Neither,
    #[error("give cron or every, not both")]
    Both,
    #[error("tz goes with cron")]
    ZoneWithoutCron,
    #[error("the schedule has no fire after now (an end in the past, or a date that never comes)")]
    NeverFires,
    #[error(
        "invalid jitter_ms: at most {MAX_JITTER_MS}, and under half the time between fires (over the next 100)"
    )]
    Jitter,
    #[error("invalid grace_ms: 1000 to 86400000")]
    Grace,
    #[error("invalid missed: skip, once or catch_up with 1 to {MAX_CATCH_UP} fires")]
    Missed,
    #[error("invalid data: not base64")]
    Data,
    #[error("tries shouldn't be zero")]
    Tries,
    #[error("too many attributes, cannot exceed {MAX_TEMPLATE_ATTRIBUTES}")]
    Attributes,
    #[error(
        "invalid attributes: keys of 1 to {MAX_ATTRIBUTE_KEY_BYTES} bytes, values of at most {MAX_ATTRIBUTE_VALUE_BYTES}"
    )]
    AttributeSize,
    #[error("attributes schedule and scheduled-at are the fire's own")]
    FireAttribute,
    #[error("invalid policy: {0}")]
    Policy(String),
    #[error("invalid dedup: {0}")]
    Dedup(String),
    #[error("invalid dedup_ttl: 1 to {MAX_KEY_WINDOW_SECS} seconds, with a dedup")]
    DedupTtl,
    #[error("invalid schedule name: 1 to 128 of A-Z, a-z, 0-9, '-', '_' and '.'")]
    Name,
}

/// Checks a schedule's name: it is a field of the table after `/`.
pub fn check_name(name: &str) -> Result<(), SpecError> {
    let ok = (1..=MAX_NAME_BYTES).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok { Ok(()) } else { Err(SpecError::Name) }
}

impl ScheduleDef {
    /// When the schedule fires.
    pub fn recurrence(&self) -> Result<Recurrence, SpecError> {
        recurrence(
            self.cron.as_deref(),
            self.tz.as_deref(),
            self.every,
            self.anchor_ms,
            (self.start_ms, self.end_ms),
        )
    }

    /// Checks the definition at `now_ms`: it must fire at least once more,
    /// and its jitter, grace, missed-fire policy and job must hold.
    /// Returns when it fires.
    pub fn check(&self, now_ms: u64) -> Result<Recurrence, SpecError> {
        let when = self.recurrence()?;
        when.next_after(now_ms).ok_or(SpecError::NeverFires)?;
        if self.jitter_ms > MAX_JITTER_MS
            || self.jitter_ms.saturating_mul(2) >= min_gap(&when, now_ms)
        {
            return Err(SpecError::Jitter);
        }
        if !GRACE_MS.contains(&self.grace_ms) {
            return Err(SpecError::Grace);
        }
        if let Missed::CatchUp(n) = self.missed
            && !(1..=MAX_CATCH_UP).contains(&n)
        {
            return Err(SpecError::Missed);
        }
        self.job.check()?;
        Ok(when)
    }

    /// What this definition makes of the row `old` at `now_ms`: `None`
    /// when it changes nothing; else the row to store, one revision on
    /// (see `rev`), created when `old` was, and paused as `old` is. An
    /// interval counts from its start, or from `now_ms`; or from `old`'s
    /// anchor if its interval and start did not change, so that changing
    /// a job's body keeps its cadence. (The fields `rev`, `anchor_ms`,
    /// `created_ms` and `updated_ms` given are not read, nor `paused` when
    /// there is an `old`.)
    pub fn revise(&self, old: Option<&ScheduleDef>, now_ms: u64) -> Option<ScheduleDef> {
        let mut new = self.clone();
        new.anchor_ms = self.start_ms.unwrap_or(now_ms);
        match old {
            Some(old) => {
                if old.every == new.every && old.start_ms == new.start_ms {
                    new.anchor_ms = old.anchor_ms;
                }
                new.paused = old.paused;
                new.rev = old.rev;
                new.created_ms = old.created_ms;
                new.updated_ms = old.updated_ms;
                if &new == old {
                    return None;
                }
                new.rev = (old.rev + 1).max(now_ms);
            }
            None => {
                new.rev = now_ms.max(1);
                new.created_ms = now_ms;
            }
        }
        new.updated_ms = now_ms;
        Some(new)
    }
}

/// When a schedule of these fields fires: a cron expression in its zone
/// (UTC when none), or an interval from `anchor_ms`, within `window`
/// (start and end).
pub fn recurrence(
    cron: Option<&str>,
    tz: Option<&str>,
    every: Option<u64>,
    anchor_ms: u64,
    window: (Option<u64>, Option<u64>),
) -> Result<Recurrence, SpecError> {
    let rule = match (cron, every) {
        (Some(_), Some(_)) => return Err(SpecError::Both),
        (None, None) => return Err(SpecError::Neither),
        (None, Some(_)) if tz.is_some() => return Err(SpecError::ZoneWithoutCron),
        (Some(expr), None) => Recurrence::cron(expr, tz.unwrap_or("UTC"))?,
        (None, Some(secs)) => Recurrence::every(secs, anchor_ms)?,
    };
    Ok(rule.within(window.0, window.1)?)
}

/// The shortest time between two of the next [`JITTER_FIRES`] fires after
/// `now_ms` (`u64::MAX` with fewer than two).
fn min_gap(when: &Recurrence, now_ms: u64) -> u64 {
    let fires: Vec<u64> = when.fires_after(now_ms).take(JITTER_FIRES).collect();
    fires
        .windows(2)
        .map(|w| w[1] - w[0])
        .min()
        .unwrap_or(u64::MAX)
}

impl JobTemplate {
    /// The body's bytes (empty if it is not base64, which
    /// [`JobTemplate::check`] refuses).
    pub fn body(&self) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.data)
            .unwrap_or_default()
    }

    fn check(&self) -> Result<(), SpecError> {
        if base64::engine::general_purpose::STANDARD
            .decode(&self.data)
            .is_err()
        {
            return Err(SpecError::Data);
        }
        if self.tries == 0 {
            return Err(SpecError::Tries);
        }
        if self.attributes.len() > MAX_TEMPLATE_ATTRIBUTES {
            return Err(SpecError::Attributes);
        }
        if self.attributes.iter().any(|(k, v)| {
            k.is_empty() || k.len() > MAX_ATTRIBUTE_KEY_BYTES || v.len() > MAX_ATTRIBUTE_VALUE_BYTES
        }) {
            return Err(SpecError::AttributeSize);
        }
        if FIRE_ATTRIBUTES
            .iter()
            .any(|a| self.attributes.contains_key(*a))
        {
            return Err(SpecError::FireAttribute);
        }
        self.policy.resolve().map_err(SpecError::Policy)?;
        if let Some(key) = &self.dedup {
            check_key(key).map_err(|why| SpecError::Dedup(why.to_string()))?;
        }
        if let Some(ttl) = self.dedup_ttl
            && (self.dedup.is_none() || !(1..=MAX_KEY_WINDOW_SECS).contains(&ttl))
        {
            return Err(SpecError::DedupTtl);
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const NOW: u64 = 1_780_000_000_000;

    /// A schedule every `secs` seconds of a one-try job with a TTL of a
    /// minute, its missed fires skipped (revise it before its anchor
    /// counts).
    pub(crate) fn every(secs: u64) -> ScheduleDef {
        ScheduleDef {
            rev: 0,
            cron: None,
            tz: None,
            every: Some(secs),
            anchor_ms: 0,
            start_ms: None,
            end_ms: None,
            jitter_ms: 0,
            missed: Missed::Skip,
            grace_ms: DEFAULT_GRACE_MS,
            paused: false,
            job: JobTemplate {
                data: "aGVsbG8=".to_owned(),
                ttl: 60,
                tries: 1,
                ..JobTemplate::default()
            },
            created_ms: 0,
            updated_ms: 0,
        }
    }

    fn cron(expr: &str) -> ScheduleDef {
        ScheduleDef {
            cron: Some(expr.to_owned()),
            every: None,
            ..every(1)
        }
    }

    #[test]
    fn a_good_definition_passes_and_says_when_it_fires() {
        let def = every(60).revise(None, NOW).expect("new");
        let when = def.check(NOW).expect("valid");
        assert_eq!(
            when.next_after(NOW),
            Some(NOW + 60_000),
            "from its creation"
        );
        let daily = ScheduleDef {
            tz: Some("Europe/Stockholm".to_owned()),
            jitter_ms: MAX_JITTER_MS,
            missed: Missed::CatchUp(3),
            ..cron("0 8 * * *")
        };
        assert!(daily.check(NOW).is_ok());
        assert_eq!(def.job.body(), b"hello");
    }

    #[test]
    fn each_bad_field_is_refused_with_its_own_message() {
        let past = NOW - 1;
        let cases: Vec<(ScheduleDef, SpecError)> = vec![
            (
                ScheduleDef {
                    cron: Some("* * * * *".to_owned()),
                    ..every(1)
                },
                SpecError::Both,
            ),
            (
                ScheduleDef {
                    every: None,
                    ..every(1)
                },
                SpecError::Neither,
            ),
            (
                ScheduleDef {
                    tz: Some("UTC".to_owned()),
                    ..every(1)
                },
                SpecError::ZoneWithoutCron,
            ),
            (
                ScheduleDef {
                    tz: Some("Nowhere/Else".to_owned()),
                    ..cron("* * * * *")
                },
                SpecError::Recurrence(RecurrenceError::Zone("Nowhere/Else".to_owned())),
            ),
            (every(0), SpecError::Recurrence(RecurrenceError::Every)),
            (
                ScheduleDef {
                    start_ms: Some(NOW),
                    end_ms: Some(NOW),
                    ..every(1)
                },
                SpecError::Recurrence(RecurrenceError::Window),
            ),
            (
                ScheduleDef {
                    end_ms: Some(past),
                    ..every(1)
                },
                SpecError::NeverFires,
            ),
            (cron("0 0 30 2 *"), SpecError::NeverFires),
            (
                ScheduleDef {
                    jitter_ms: 30_000,
                    ..every(60)
                },
                SpecError::Jitter,
            ),
            (
                ScheduleDef {
                    jitter_ms: 30_000,
                    ..cron("* * * * *")
                },
                SpecError::Jitter,
            ),
            (
                ScheduleDef {
                    jitter_ms: MAX_JITTER_MS + 1,
                    ..cron("0 0 * * *")
                },
                SpecError::Jitter,
            ),
            (
                ScheduleDef {
                    grace_ms: 999,
                    ..every(1)
                },
                SpecError::Grace,
            ),
            (
                ScheduleDef {
                    grace_ms: 86_400_001,
                    ..every(1)
                },
                SpecError::Grace,
            ),
            (
                ScheduleDef {
                    missed: Missed::CatchUp(0),
                    ..every(1)
                },
                SpecError::Missed,
            ),
            (
                ScheduleDef {
                    missed: Missed::CatchUp(MAX_CATCH_UP + 1),
                    ..every(1)
                },
                SpecError::Missed,
            ),
        ];
        for (def, want) in cases {
            let def = def.revise(None, NOW).expect("new");
            assert_eq!(def.check(NOW).err(), Some(want.clone()), "{def:?}");
        }
        let err = cron("61 * * * *").check(NOW).expect_err("a minute past 59");
        assert!(
            matches!(&err, SpecError::Recurrence(RecurrenceError::Cron(why)) if !why.is_empty()),
            "{err}"
        );
        assert!(err.to_string().starts_with("invalid cron: "), "{err}");
        let mut def = every(1);
        def.job.data = "not base64!".to_owned();
        assert_eq!(def.check(NOW).err(), Some(SpecError::Data));
        let mut def = every(1);
        def.job.tries = 0;
        assert_eq!(def.check(NOW).err(), Some(SpecError::Tries));
        let mut def = every(1);
        def.job.attributes = (0..15).map(|i| (format!("k{i}"), "v".to_owned())).collect();
        assert_eq!(def.check(NOW).err(), Some(SpecError::Attributes));
        let mut def = every(1);
        def.job.attributes = [("k".to_owned(), "v".repeat(129))].into();
        assert_eq!(def.check(NOW).err(), Some(SpecError::AttributeSize));
        let mut def = every(1);
        def.job.attributes = [("schedule".to_owned(), "mine".to_owned())].into();
        assert_eq!(def.check(NOW).err(), Some(SpecError::FireAttribute));
        let mut def = every(1);
        def.job.policy = RetryPolicy {
            max_delay_ms: Some(u64::MAX),
            ..RetryPolicy::default()
        };
        assert!(matches!(def.check(NOW).err(), Some(SpecError::Policy(_))));
        let mut def = every(1);
        def.job.dedup = Some(String::new());
        assert_eq!(
            def.check(NOW).map_err(|e| e.to_string()).err().as_deref(),
            Some("invalid dedup: empty")
        );
        def.job.dedup = Some("k".repeat(257));
        assert!(matches!(def.check(NOW).err(), Some(SpecError::Dedup(_))));
        let mut def = every(1);
        def.job.dedup_ttl = Some(60);
        assert_eq!(def.check(NOW).err(), Some(SpecError::DedupTtl), "no key");
        def.job.dedup = Some("report".to_owned());
        assert_eq!(def.check(NOW).map(|_| ()), Ok(()));
        for bad in [0, 2_592_001] {
            def.job.dedup_ttl = Some(bad);
            assert_eq!(def.check(NOW).err(), Some(SpecError::DedupTtl), "{bad}");
        }
        assert_eq!(
            SpecError::Recurrence(RecurrenceError::Every).to_string(),
            "invalid every: 1 to 31622400 seconds",
            "the recurrence's own message, unwrapped"
        );
    }

    #[test]
    fn a_jitter_is_held_to_the_shortest_gap_whenever_it_is_checked() {
        // Fires at :00 and :50: gaps of 50 and 10 minutes.
        for at in [NOW, NOW + 20 * 60_000, NOW + 45 * 60_000] {
            let too_long = ScheduleDef {
                jitter_ms: 300_000,
                ..cron("*/50 * * * *")
            };
            assert_eq!(too_long.check(at).err(), Some(SpecError::Jitter), "{at}");
            let fits = ScheduleDef {
                jitter_ms: 299_999,
                ..cron("*/50 * * * *")
            };
            assert!(fits.check(at).is_ok(), "{at}");
        }
    }

    #[test]
    fn names_are_short_plain_words() {
        for ok in ["nightly", "a", "report-2.v1_x", &"n".repeat(MAX_NAME_BYTES)] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "a/b",
            "a b",
            "é",
            "a:b",
            &"n".repeat(MAX_NAME_BYTES + 1),
        ] {
            assert_eq!(check_name(bad), Err(SpecError::Name), "{bad}");
        }
    }

    #[test]
    fn a_revision_counts_changes_only_and_keeps_an_interval_s_cadence() {
        let first = every(60).revise(None, NOW).expect("new");
        assert_eq!(
            (first.rev, first.created_ms, first.updated_ms),
            (NOW, NOW, NOW),
            "a revision is at least the time it was made"
        );
        assert_eq!(
            first.anchor_ms, NOW,
            "an interval without a start counts from its creation"
        );
        assert_eq!(
            every(60).revise(Some(&first), NOW + 5),
            None,
            "the same again changes nothing"
        );

        let mut body = every(60);
        body.job.data = "d29ybGQ=".to_owned();
        let second = body.revise(Some(&first), NOW + 5).expect("changed");
        assert_eq!(
            (second.rev, second.created_ms, second.updated_ms),
            (NOW + 5, NOW, NOW + 5)
        );
        let mut again = body.clone();
        again.job.ttl = 61;
        let same_ms = again.revise(Some(&second), NOW + 5).expect("changed");
        assert_eq!(same_ms.rev, NOW + 6, "one more, within a millisecond too");
        assert_eq!(second.anchor_ms, NOW, "a new body keeps the cadence");

        let faster = every(30).revise(Some(&second), NOW + 7).expect("changed");
        assert_eq!(
            (faster.rev, faster.anchor_ms),
            (NOW + 7, NOW + 7),
            "a new interval counts anew"
        );
        let started = ScheduleDef {
            start_ms: Some(NOW + 1_000),
            ..every(30)
        };
        let started = started.revise(Some(&faster), NOW + 9).expect("changed");
        assert_eq!(
            (started.rev, started.anchor_ms),
            (NOW + 9, NOW + 1_000),
            "from its start"
        );

        let paused = ScheduleDef {
            paused: true,
            ..started.clone()
        };
        let resent = every(30);
        let resent = ScheduleDef {
            start_ms: Some(NOW + 1_000),
            ..resent
        };
        assert_eq!(
            resent.revise(Some(&paused), NOW + 11),
            None,
            "a definition sent again does not resume a paused schedule"
        );
        let remade = every(30).revise(None, NOW + 13).expect("new");
        assert!(
            remade.rev > started.rev,
            "made again after a delete, it is still newer than any slot's row"
        );
    }

    #[test]
    fn rows_round_trip_through_json_and_refuse_unknown_fields() {
        let mut def = cron("*/5 * * * *").revise(None, NOW).expect("new");
        def.tz = Some("America/New_York".to_owned());
        def.job
            .attributes
            .insert("team".to_owned(), "billing".to_owned());
        def.missed = Missed::CatchUp(4);
        let json = serde_json::to_string(&def).expect("json");
        assert_eq!(
            serde_json::from_str::<ScheduleDef>(&json).expect("back"),
            def
        );
        let newer = json.replacen('{', "{\"future\":1,", 1);
        assert!(serde_json::from_str::<ScheduleDef>(&newer).is_err());
    }
}
