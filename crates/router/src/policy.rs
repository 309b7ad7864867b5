//! Retry policies: how long a job waits before its next try after a failure
//! (a TTR that ran out, or a release that names no delay), how many tries a
//! job gets when its publish does not say, and how long it may keep trying.
//!
//! A policy is a set of fields, each optional: a queue's policy (the admin
//! table) and a publish's own fields over it make the job's policy, which is
//! checked ([`RetryPolicy::resolve`]) and packed into the job's record
//! ([`Backoff::pack`]), where the scripts apply it (`retry_delay` in
//! `lua/lib/record.lua`). Without a backoff a failed job is ready again at
//! once, as in lmstfy.

use serde::{Deserialize, Serialize};
use sundial_core::PackedPolicy;

/// The longest delay a backoff may give, and the longest retry duration:
/// what the record's fields hold (`u32` ms, about 49 days).
pub const MAX_DELAY_MS: u64 = u32::MAX as u64;

/// How the delay before the next try grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackoffKind {
    /// The same delay before every retry: `initial_delay_ms`.
    Fixed,
    /// `initial_delay_ms × multiplier^(delivery − 1)`, at most
    /// `max_delay_ms`, spread by `jitter_percent`.
    Exponential,
}

/// A queue's retry policy, or a publish's fields over it; every field
/// optional. JSON, as the admin API and the CLI take it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// How the delay grows; none: a failed job is ready again at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<BackoffKind>,
    /// The delay before the first retry, ms (required with `backoff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(maximum = 4294967295u64)]
    pub initial_delay_ms: Option<u64>,
    /// Exponential: the factor from one delay to the next, 1 to 10 (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10)]
    pub multiplier: Option<f64>,
    /// Exponential: the longest delay, ms (default 1 hour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(maximum = 4294967295u64)]
    pub max_delay_ms: Option<u64>,
    /// Each delay (after the `max_delay_ms` cap) moved by up to this share
    /// of it, either way, at random (0 to 100, default 0), so that jobs
    /// that failed together do not all come back together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(maximum = 100)]
    pub jitter_percent: Option<u8>,
    /// Tries a job gets when its publish gives no `tries` (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 65535)]
    pub tries: Option<u16>,
    /// How long after its publish a job may still be retried, ms: a failure
    /// after that sends it to the dead letter, tries left or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 4294967295u64)]
    pub max_retry_ms: Option<u64>,
}

/// A job's backoff and retry bound, as its record keeps them: checked, with
/// the defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub kind: Option<BackoffKind>,
    pub initial_ms: u32,
    /// Thousandths.
    pub multiplier_milli: u16,
    pub max_ms: u32,
    pub jitter_percent: u8,
    /// 0 = no bound.
    pub max_retry_ms: u32,
}

/// The default exponential bound: an hour.
const DEFAULT_MAX_DELAY_MS: u64 = 3_600_000;

impl RetryPolicy {
    /// A policy from its JSON (400 text when it is not one).
    pub fn from_json(text: &str) -> Result<Self, String> {
        let p: Self = serde_json::from_str(text).map_err(|e| format!("invalid policy: {e}"))?;
        p.resolve()?;
        Ok(p)
    }

    /// Whether it sets nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// This policy's fields over `base`'s: what a publish's fields make of
    /// its queue's policy.
    pub fn over(&self, base: &Self) -> Self {
        Self {
            backoff: self.backoff.or(base.backoff),
            initial_delay_ms: self.initial_delay_ms.or(base.initial_delay_ms),
            multiplier: self.multiplier.or(base.multiplier),
            max_delay_ms: self.max_delay_ms.or(base.max_delay_ms),
            jitter_percent: self.jitter_percent.or(base.jitter_percent),
            tries: self.tries.or(base.tries),
            max_retry_ms: self.max_retry_ms.or(base.max_retry_ms),
        }
    }

    /// The backoff the record keeps, or why the policy is not one: each
    /// field in its range, and a backoff with its initial delay.
    pub fn resolve(&self) -> Result<Backoff, String> {
        let ms = |name: &str, v: Option<u64>, min: u64| -> Result<Option<u32>, String> {
            match v {
                Some(v) if v < min || v > MAX_DELAY_MS => {
                    Err(format!("{name}: {min} to {MAX_DELAY_MS}"))
                }
                Some(v) => Ok(Some(v as u32)),
                None => Ok(None),
            }
        };
        let initial = ms("initial_delay_ms", self.initial_delay_ms, 0)?;
        let max = ms("max_delay_ms", self.max_delay_ms, 0)?;
        let max_retry = ms("max_retry_ms", self.max_retry_ms, 1)?;
        let multiplier = self.multiplier.unwrap_or(2.0);
        if !(1.0..=10.0).contains(&multiplier) {
            return Err("multiplier: 1 to 10".to_owned());
        }
        let jitter = self.jitter_percent.unwrap_or(0);
        if jitter > 100 {
            return Err("jitter_percent: 0 to 100".to_owned());
        }
        if self.tries == Some(0) {
            return Err("tries: at least 1".to_owned());
        }
        if self.backoff.is_some() && initial.is_none() {
            return Err("a backoff needs initial_delay_ms".to_owned());
        }
        let initial = initial.unwrap_or(0);
        let max = max.unwrap_or(DEFAULT_MAX_DELAY_MS.max(u64::from(initial)) as u32);
        if max < initial {
            return Err("max_delay_ms is shorter than initial_delay_ms".to_owned());
        }
        Ok(Backoff {
            kind: self.backoff,
            initial_ms: initial,
            multiplier_milli: (multiplier * 1000.0).round() as u16,
            max_ms: max,
            jitter_percent: jitter,
            max_retry_ms: max_retry.unwrap_or(0),
        })
    }
}

impl Backoff {
    /// Whether it changes anything: a backoff, or a retry bound.
    pub fn is_set(&self) -> bool {
        self.kind.is_some() || self.max_retry_ms > 0
    }

    /// The bytes the record keeps (`policy` in `lua/lib/record.lua`):
    /// kind `B` (0 none, 1 fixed, 2 exponential), initial delay `I4`,
    /// multiplier in thousandths `H`, largest delay `I4`, jitter percent
    /// `B`, retry bound `I4` (0 none); `None` when it changes nothing.
    pub fn pack(&self) -> Option<PackedPolicy> {
        if !self.is_set() {
            return None;
        }
        let kind: u8 = match self.kind {
            None => 0,
            Some(BackoffKind::Fixed) => 1,
            Some(BackoffKind::Exponential) => 2,
        };
        let mut out = Vec::with_capacity(16);
        out.push(kind);
        out.extend(self.initial_ms.to_be_bytes());
        out.extend(self.multiplier_milli.to_be_bytes());
        out.extend(self.max_ms.to_be_bytes());
        out.push(self.jitter_percent);
        out.extend(self.max_retry_ms.to_be_bytes());
        out.try_into().ok()
    }

    /// What [`Backoff::pack`] packed; `None` for bytes no pack makes (an
    /// unknown kind).
    pub fn unpack(p: &PackedPolicy) -> Option<Self> {
        let u32_at = |at: usize| u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
        let kind = match p[0] {
            0 => None,
            1 => Some(BackoffKind::Fixed),
            2 => Some(BackoffKind::Exponential),
            _ => return None,
        };
        Some(Self {
            kind,
            initial_ms: u32_at(1),
            multiplier_milli: u16::from_be_bytes([p[5], p[6]]),
            max_ms: u32_at(7),
            jitter_percent: p[11],
            max_retry_ms: u32_at(12),
        })
    }

    /// The policy's fields that make this backoff again through
    /// [`RetryPolicy::resolve`] (its defaults written out; no tries: a
    /// job's tries are its own).
    pub fn policy(&self) -> RetryPolicy {
        let backoff = self.kind.is_some();
        RetryPolicy {
            backoff: self.kind,
            initial_delay_ms: backoff.then_some(u64::from(self.initial_ms)),
            multiplier: backoff.then_some(f64::from(self.multiplier_milli) / 1000.0),
            max_delay_ms: backoff.then_some(u64::from(self.max_ms)),
            jitter_percent: (self.jitter_percent > 0).then_some(self.jitter_percent),
            tries: None,
            max_retry_ms: (self.max_retry_ms > 0).then_some(u64::from(self.max_retry_ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_policy_unpacks_to_fields_that_pack_the_same() {
        for json in [
            r#"{"backoff": "exponential", "initial_delay_ms": 1000, "multiplier": 1.5, "max_delay_ms": 60000, "jitter_percent": 10, "max_retry_ms": 86400000}"#,
            r#"{"backoff": "fixed", "initial_delay_ms": 250}"#,
            r#"{"max_retry_ms": 5000}"#,
        ] {
            let packed = RetryPolicy::from_json(json)
                .and_then(|p| p.resolve())
                .expect("policy")
                .pack()
                .expect("packed");
            let back = Backoff::unpack(&packed).expect("unpacked");
            let again = back.policy().resolve().expect("resolves").pack();
            assert_eq!(again, Some(packed), "{json} -> {:?}", back.policy());
        }
        let mut bad = [0u8; 16];
        bad[0] = 9;
        assert_eq!(Backoff::unpack(&bad), None);
    }

    #[test]
    fn a_policy_is_checked_and_packed_with_its_defaults() {
        let p = RetryPolicy::from_json(
            r#"{"backoff": "exponential", "initial_delay_ms": 1000, "jitter_percent": 10}"#,
        )
        .expect("policy");
        let b = p.resolve().expect("backoff");
        assert_eq!(
            (
                b.multiplier_milli,
                b.max_ms,
                b.jitter_percent,
                b.max_retry_ms
            ),
            (2000, 3_600_000, 10, 0)
        );
        assert_eq!(
            b.pack(),
            Some([
                2, 0, 0, 0x03, 0xe8, 0x07, 0xd0, 0, 0x36, 0xee, 0x80, 10, 0, 0, 0, 0
            ])
        );
        assert_eq!(RetryPolicy::default().resolve().expect("none").pack(), None);
        let bound = RetryPolicy {
            max_retry_ms: Some(60_000),
            ..RetryPolicy::default()
        };
        let packed = bound.resolve().expect("bound").pack().expect("a bound");
        assert_eq!(
            (packed[0], &packed[12..]),
            (0, &[0, 0, 0xea, 0x60][..]),
            "no backoff, a bound"
        );
        for (text, why) in [
            (
                r#"{"backoff": "fixed"}"#,
                "a backoff needs initial_delay_ms",
            ),
            (r#"{"multiplier": 0.5}"#, "multiplier: 1 to 10"),
            (r#"{"jitter_percent": 101}"#, "jitter_percent: 0 to 100"),
            (r#"{"tries": 0}"#, "tries: at least 1"),
            (r#"{"max_retry_ms": 0}"#, "max_retry_ms: 1 to 4294967295"),
            (
                r#"{"initial_delay_ms": 4294967296}"#,
                "initial_delay_ms: 0 to 4294967295",
            ),
            (
                r#"{"backoff": "exponential", "initial_delay_ms": 10, "max_delay_ms": 5}"#,
                "max_delay_ms is shorter than initial_delay_ms",
            ),
        ] {
            assert_eq!(RetryPolicy::from_json(text).expect_err(text), why, "{text}");
        }
        let unknown = RetryPolicy::from_json(r#"{"backof": "fixed"}"#).expect_err("unknown");
        assert!(
            unknown.starts_with("invalid policy: unknown field `backof`"),
            "{unknown}"
        );
    }

    #[test]
    fn a_publish_s_fields_go_over_its_queue_s() {
        let queue = RetryPolicy {
            backoff: Some(BackoffKind::Fixed),
            initial_delay_ms: Some(5_000),
            tries: Some(3),
            ..RetryPolicy::default()
        };
        let job = RetryPolicy {
            initial_delay_ms: Some(100),
            ..RetryPolicy::default()
        };
        let both = job.over(&queue);
        assert_eq!(
            (both.backoff, both.initial_delay_ms, both.tries),
            (Some(BackoffKind::Fixed), Some(100), Some(3))
        );
    }
}
