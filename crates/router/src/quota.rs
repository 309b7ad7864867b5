//! A namespace's quota: what it may hold and do in its pool.
//!
//! One type, [`Quota`], serves three places, each field set or not: the
//! config's `[quotas]` (every pool's default), a pool's `quotas` (over
//! `[quotas]`), and a namespace's row of the quota table
//! (`crate::admin::quotas`, over its pool's). [`Quota::over`] lays one over
//! another field by field; a field set to 0 means "no bound", so that a
//! namespace can be let out of a bound its pool sets.

use serde::{Deserialize, Serialize};

/// The bounds of one namespace: each `None` where not set at this level.
/// Its fields' documents are the API's (the quota routes take and show
/// it): each a whole number from 0 up (never `null`: `PATCH` takes that);
/// 0 lifts a bound a lower level sets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Jobs held in every state, the backlog (429 `max_jobs` over it,
    /// nothing stored; a bulk all or nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = false, maximum = 9007199254740992_u64)]
    pub max_jobs: Option<u64>,
    /// Bytes held by those jobs: each job's id and stored record,
    /// attributes and body included (429 `max_bytes` over it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = false, maximum = 9007199254740992_u64)]
    pub max_bytes: Option<u64>,
    /// Queues the namespace uses: holds jobs in, or published to since the
    /// last sweep of its index (403 `max_queues` for a publish to a new
    /// queue over it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = false, maximum = 9007199254740992_u64)]
    pub max_queues: Option<u64>,
    /// Schedules the namespace may hold (403 `max_schedules` for a new
    /// one over it); 1,000 when no level sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = false, maximum = 9007199254740992_u64)]
    pub max_schedules: Option<u64>,
    /// Jobs published per second, a bulk counting each job (429 over it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = false, maximum = 10000000)]
    pub publish_rate: Option<u64>,
    /// Jobs consumed per second (a consume gets at most what the bucket
    /// holds; 429 when it holds none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = false, maximum = 10000000)]
    pub consume_rate: Option<u64>,
    /// Bytes of one job's body (413 over it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = false)]
    pub max_body: Option<u64>,
    /// Seconds of one job's delay (400 over it; a delay left to the
    /// default is lowered to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = false, maximum = 4294967295_u64)]
    pub max_delay: Option<u64>,
    /// Seconds of one job's TTL, 0 (never expires) counting as longer than
    /// any (400 over it; a TTL left to the default is lowered to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = false, maximum = 4294967295_u64)]
    pub max_ttl: Option<u64>,
    /// Tries of one job (400 over it; tries left to the default are
    /// lowered to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = false, maximum = 65535)]
    pub max_tries: Option<u64>,
    /// Not a bound: the namespace's share of a busy Redis server's calls
    /// against other namespaces' (a gateway's publishes, consumes and acks
    /// on one server go in turn by weight once they are more than its
    /// pooled connections: the gateway's `batch::turns`), and of a nearly
    /// full shard's memory (headroom splits it by weight,
    /// `crate::headroom`). 0 or unset: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, required = false, maximum = 1000)]
    pub weight: Option<u64>,
}

/// The largest rate a quota may set, in jobs per second (far above what a
/// shard takes).
pub const MAX_RATE: u64 = 10_000_000;

/// The schedules a namespace may hold when no quota level sets
/// `max_schedules`: each is a row every gateway and pump keeps a copy of.
pub const DEFAULT_MAX_SCHEDULES: u64 = 1_000;

/// The largest weight a quota may give.
pub const MAX_WEIGHT: u64 = 1000;

/// One bound of a quota, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    MaxJobs,
    MaxBytes,
    MaxQueues,
    MaxSchedules,
    PublishRate,
    ConsumeRate,
    MaxBody,
    MaxDelay,
    MaxTtl,
    MaxTries,
    Weight,
}

impl Bound {
    /// Every bound, in the order the API lists them.
    pub const ALL: [Bound; 11] = [
        Self::MaxJobs,
        Self::MaxBytes,
        Self::MaxQueues,
        Self::MaxSchedules,
        Self::PublishRate,
        Self::ConsumeRate,
        Self::MaxBody,
        Self::MaxDelay,
        Self::MaxTtl,
        Self::MaxTries,
        Self::Weight,
    ];

    /// Its name in the API, the config and errors.
    pub fn name(self) -> &'static str {
        match self {
            Self::MaxJobs => "max_jobs",
            Self::MaxBytes => "max_bytes",
            Self::MaxQueues => "max_queues",
            Self::MaxSchedules => "max_schedules",
            Self::PublishRate => "publish_rate",
            Self::ConsumeRate => "consume_rate",
            Self::MaxBody => "max_body",
            Self::MaxDelay => "max_delay",
            Self::MaxTtl => "max_ttl",
            Self::MaxTries => "max_tries",
            Self::Weight => "weight",
        }
    }

    /// The bound named `name`.
    pub fn named(name: &str) -> Option<Bound> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }
}

impl Quota {
    /// The field of `bound`, as set at this level.
    pub fn get(&self, bound: Bound) -> Option<u64> {
        let mut q = *self;
        *q.field_mut(bound)
    }

    /// The field of `bound`, to set.
    pub fn field_mut(&mut self, bound: Bound) -> &mut Option<u64> {
        match bound {
            Bound::MaxJobs => &mut self.max_jobs,
            Bound::MaxBytes => &mut self.max_bytes,
            Bound::MaxQueues => &mut self.max_queues,
            Bound::MaxSchedules => &mut self.max_schedules,
            Bound::PublishRate => &mut self.publish_rate,
            Bound::ConsumeRate => &mut self.consume_rate,
            Bound::MaxBody => &mut self.max_body,
            Bound::MaxDelay => &mut self.max_delay,
            Bound::MaxTtl => &mut self.max_ttl,
            Bound::MaxTries => &mut self.max_tries,
            Bound::Weight => &mut self.weight,
        }
    }

    /// `self` where it sets a field, else `base`.
    #[must_use]
    pub fn over(&self, base: &Quota) -> Quota {
        let mut out = *base;
        for b in Bound::ALL {
            if let Some(v) = self.get(b) {
                *out.field_mut(b) = Some(v);
            }
        }
        out
    }

    /// The bound a field sets: `None` when unset or 0; but
    /// `max_schedules` is [`DEFAULT_MAX_SCHEDULES`] when unset (0 lifts
    /// it), so that what a namespace is shown held to is what holds it.
    pub fn limit(&self, bound: Bound) -> Option<u64> {
        match (bound, self.get(bound)) {
            (Bound::MaxSchedules, None) => Some(DEFAULT_MAX_SCHEDULES),
            (_, set) => set.filter(|&n| n > 0),
        }
    }

    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Quota::default()
    }

    /// The namespace's weight in the fair share of a server's calls.
    pub fn weight(&self) -> u64 {
        self.limit(Bound::Weight).unwrap_or(1)
    }

    /// Refuses values no job or namespace could meet, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(w) = self.weight
            && w > MAX_WEIGHT
        {
            return Err(format!("weight must be at most {MAX_WEIGHT}, not {w}"));
        }
        if let Some(t) = self.max_tries
            && t > u64::from(u16::MAX)
        {
            return Err(format!("max_tries must be at most {}, not {t}", u16::MAX));
        }
        for (name, v) in [
            ("publish_rate", self.publish_rate),
            ("consume_rate", self.consume_rate),
        ] {
            if let Some(v) = v
                && v > MAX_RATE
            {
                return Err(format!("{name} must be at most {MAX_RATE} jobs/s, not {v}"));
            }
        }
        for (name, v) in [("max_delay", self.max_delay), ("max_ttl", self.max_ttl)] {
            if let Some(v) = v
                && v > u64::from(u32::MAX)
            {
                return Err(format!(
                    "{name} must be at most {} seconds, not {v}",
                    u32::MAX
                ));
            }
        }
        // Counted in Lua numbers (doubles) on the admin Redis: whole up to 2^53.
        for b in [
            Bound::MaxJobs,
            Bound::MaxBytes,
            Bound::MaxQueues,
            Bound::MaxSchedules,
        ] {
            if let Some(v) = self.get(b)
                && v > MAX_COUNT
            {
                return Err(format!("{} must be at most {MAX_COUNT}, not {v}", b.name()));
            }
        }
        Ok(())
    }

    /// Reads a quota from JSON as the API and the table hold it: an object
    /// of fields, each a whole number from 0 up. The error names the field
    /// that is wrong (unknown, not such a number, out of bounds).
    pub fn from_json(text: &str) -> Result<Quota, String> {
        let mut q = Quota::default();
        for (name, v) in &object(text)? {
            let bound = Bound::named(name).ok_or_else(|| format!("unknown field `{name}`"))?;
            *q.field_mut(bound) = Some(whole(name, v)?);
        }
        q.validate()?;
        Ok(q)
    }
}

/// A JSON object's fields, or an error that says what is wrong.
fn object(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    match value {
        serde_json::Value::Object(fields) => Ok(fields),
        _ => Err("a quota is a JSON object".to_owned()),
    }
}

/// A field's value as a whole number from 0 up.
fn whole(name: &str, v: &serde_json::Value) -> Result<u64, String> {
    v.as_u64()
        .ok_or_else(|| format!("{name} must be a whole number from 0 up, not {v}"))
}

/// Some fields of what a namespace sets, to change: each to a value, or
/// removed (`None`: its pool's bound holds again).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuotaPatch(Vec<(Bound, Option<u64>)>);

impl QuotaPatch {
    /// Reads a patch from JSON: an object of fields, each a whole number
    /// from 0 up or `null`. The error names the field that is wrong.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let mut changes = Vec::new();
        let mut set = Quota::default();
        for (name, v) in &object(text)? {
            let bound = Bound::named(name).ok_or_else(|| format!("unknown field `{name}`"))?;
            let n = if v.is_null() {
                None
            } else {
                Some(whole(name, v)?)
            };
            *set.field_mut(bound) = n;
            changes.push((bound, n));
        }
        set.validate()?;
        Ok(Self(changes))
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A row of the quota table (`None`: none) with the patch over it;
    /// `None` when it leaves no field. Fields this version does not know
    /// (a newer gateway's) are kept as they are.
    /// A patch that changes no field gives `row` back as it is, so that
    /// nothing is written.
    pub fn apply(&self, row: Option<&str>) -> Option<String> {
        let before = row.and_then(|r| object(r).ok()).unwrap_or_default();
        let mut fields = before.clone();
        for &(bound, n) in &self.0 {
            match n {
                Some(n) => fields.insert(bound.name().to_owned(), n.into()),
                None => fields.remove(bound.name()),
            };
        }
        if row.is_some() && fields == before {
            return row.map(str::to_owned);
        }
        (!fields.is_empty()).then(|| serde_json::Value::Object(fields).to_string())
    }
}

/// The largest backlog bound (jobs, bytes, queues) a quota may set: 2^53.
pub const MAX_COUNT: u64 = 1 << 53;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_that_changes_nothing_gives_the_row_back_as_it_was() {
        // Stored by a PUT in its own field order.
        let row = r#"{"max_jobs":5,"max_bytes":1000}"#;
        for text in ["{}", r#"{"max_jobs": 5}"#, r#"{"weight": null}"#] {
            let p = QuotaPatch::from_json(text).expect("patch");
            assert_eq!(p.apply(Some(row)).as_deref(), Some(row), "{text}");
        }
        assert_eq!(
            QuotaPatch::from_json("{}").expect("patch").apply(None),
            None
        );
    }

    #[test]
    fn a_patch_sets_and_removes_fields_and_keeps_the_rest() {
        let p = QuotaPatch::from_json(r#"{"max_jobs": 10, "weight": null}"#).expect("patch");
        let row = r#"{"weight":3,"publish_rate":5,"from_a_newer_version":1}"#;
        let out = p.apply(Some(row)).expect("a row");
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"max_jobs": 10, "publish_rate": 5, "from_a_newer_version": 1})
        );
        assert_eq!(
            QuotaPatch::from_json(r#"{"weight": null}"#)
                .expect("patch")
                .apply(Some(r#"{"weight":3}"#)),
            None,
            "nothing left"
        );
        assert_eq!(p.apply(None).as_deref(), Some(r#"{"max_jobs":10}"#));
        for bad in [
            r#"{"max_jobs": -1}"#,
            r#"{"max_jobs": "5"}"#,
            r#"{"nope": 1}"#,
            r#"{"weight": 1001}"#,
            "[1]",
            "{",
        ] {
            assert!(QuotaPatch::from_json(bad).is_err(), "{bad}");
        }
        assert!(QuotaPatch::from_json("{}").expect("empty").is_empty());
    }

    #[test]
    fn a_namespace_field_overrides_its_pools_and_zero_lifts_the_bound() {
        let pool = Quota {
            consume_rate: Some(1_000),
            max_body: Some(4_096),
            ..Quota::default()
        };
        let ns = Quota {
            consume_rate: Some(0),
            publish_rate: Some(50),
            ..Quota::default()
        };
        let q = ns.over(&pool);
        assert_eq!(
            q.limit(Bound::ConsumeRate),
            None,
            "0 lifts the pool's bound"
        );
        assert_eq!(q.limit(Bound::MaxBody), Some(4_096), "inherited");
        assert_eq!(q.limit(Bound::PublishRate), Some(50));
        assert_eq!(q.limit(Bound::MaxTries), None, "set nowhere");
        assert_eq!(
            q.limit(Bound::MaxSchedules),
            Some(DEFAULT_MAX_SCHEDULES),
            "max_schedules has a default"
        );
        let lifted = Quota {
            max_schedules: Some(0),
            ..Quota::default()
        };
        assert_eq!(lifted.limit(Bound::MaxSchedules), None, "0 lifts it");
    }

    #[test]
    fn bad_quotas_are_refused_with_the_field_named() {
        for (text, want) in [
            (
                r#"{"publish_rate": -1}"#,
                "publish_rate must be a whole number from 0 up, not -1",
            ),
            (
                r#"{"publish_rate": "10"}"#,
                "publish_rate must be a whole number from 0 up, not \"10\"",
            ),
            (
                r#"{"publish_rate": 1.5}"#,
                "publish_rate must be a whole number from 0 up, not 1.5",
            ),
            (
                r#"{"publish_rate": null}"#,
                "publish_rate must be a whole number from 0 up, not null",
            ),
            (r#"{"max_job": 10}"#, "unknown field `max_job`"),
            ("{", "invalid JSON"),
            (r#"{"max_tries": 70000}"#, "max_tries must be at most 65535"),
            (r#"{"max_ttl": 5000000000}"#, "max_ttl must be at most"),
            (
                r#"{"publish_rate": 18446744073709551615}"#,
                "publish_rate must be at most 10000000 jobs/s",
            ),
            ("[1]", "a quota is a JSON object"),
            (
                r#"{"weight": 1001}"#,
                "weight must be at most 1000, not 1001",
            ),
        ] {
            let e = Quota::from_json(text).expect_err(text);
            assert!(e.contains(want), "{text}: {e}");
        }
        let q = Quota::from_json(r#"{"publish_rate": 10, "max_tries": 3}"#).expect("valid");
        assert_eq!((q.publish_rate, q.max_tries), (Some(10), Some(3)));
        assert!(Quota::from_json("{}").expect("valid").is_empty());
    }

    #[test]
    fn a_quota_round_trips_through_json_with_only_its_set_fields() {
        let q = Quota {
            max_delay: Some(20),
            max_ttl: Some(0),
            ..Quota::default()
        };
        let text = serde_json::to_string(&q).expect("json");
        assert_eq!(text, r#"{"max_delay":20,"max_ttl":0}"#);
        assert_eq!(Quota::from_json(&text), Ok(q));
    }
}
