//! Job ids, names and limits: what a client may send, checked before anything
//! reaches Redis.

use std::fmt;

/// The largest job body, as in lmstfy (1 MiB).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The most jobs in one bulk publish.
pub const MAX_BULK_JOBS: usize = 64;
/// The most jobs one consume may return.
pub const MAX_CONSUME_COUNT: u32 = 100;
/// The longest namespace or queue name, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// The most attributes on one job, and their longest key and value, in bytes.
pub const MAX_ATTRIBUTES: usize = 16;
pub const MAX_ATTRIBUTE_KEY_BYTES: usize = 32;
pub const MAX_ATTRIBUTE_VALUE_BYTES: usize = 128;

/// Defaults and caps that the operator configures; lmstfy's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub default_ttl_secs: u32,
    pub default_delay_secs: u32,
    pub default_tries: u16,
    pub default_ttr_secs: u32,
    pub default_timeout_secs: u32,
    /// The longest long poll a consumer may ask for; longer asks are capped.
    pub max_timeout_secs: u32,
    /// The longest TTR a touch may ask for; a longer one is refused.
    pub max_ttr_secs: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            default_ttl_secs: 86_400,
            default_delay_secs: 0,
            default_tries: 1,
            default_ttr_secs: 120,
            default_timeout_secs: 0,
            max_timeout_secs: 600,
            max_ttr_secs: 43_200,
        }
    }
}

/// Why a name was refused; the texts are lmstfy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("namespace or queue name too long")]
    TooLong,
    #[error("namespace name contains forbidden characters")]
    Namespace,
    #[error("queue name contains forbidden characters")]
    Queue,
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}

/// Checks a namespace name: `^[-_A-Za-z0-9]+$`, at most 255 bytes.
pub fn check_namespace(ns: &str) -> Result<(), NameError> {
    if ns.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong);
    }
    if !is_name(ns) {
        return Err(NameError::Namespace);
    }
    Ok(())
}

/// Checks a queue name: like a namespace, and not starting with `_`.
pub fn check_queue(queue: &str) -> Result<(), NameError> {
    if queue.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong);
    }
    if !is_name(queue) || queue.starts_with('_') {
        return Err(NameError::Queue);
    }
    Ok(())
}

/// A job id in one of lmstfy's two formats: a 26-character ULID (version 0),
/// or `1` followed by a ULID (version 1, which carries attributes).
///
/// Ids are minted from a ULID with 80 random bits from the thread's CSPRNG,
/// so gateways never need to coordinate to avoid collisions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(String);

/// Why a job id was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid job id")]
pub struct BadJobId;

impl JobId {
    /// Mints a fresh id.
    pub fn mint(versioned: bool) -> Self {
        let ulid = ulid::Ulid::new().to_string();
        if versioned {
            Self(format!("1{ulid}"))
        } else {
            Self(ulid)
        }
    }

    /// Mints a fresh id whose lane, among `lanes`, is `lane`. Bulk publish
    /// and republish use this so that all the jobs they touch share one lane,
    /// so one slot, so one script call.
    pub fn mint_in_lane(versioned: bool, lane: u32, lanes: u32) -> Self {
        loop {
            let id = Self::mint(versioned);
            if id.lane(lanes) == lane {
                return id;
            }
        }
    }

    /// Parses an id that a client sent back.
    pub fn parse(s: &str) -> Result<Self, BadJobId> {
        let ulid = match s.len() {
            26 => s,
            27 if s.starts_with('1') => &s[1..],
            _ => return Err(BadJobId),
        };
        // Only the canonical spelling names a stored job: upper case, no overflow.
        match ulid::Ulid::from_string(ulid) {
            Ok(u) if u.to_string() == ulid => Ok(Self(s.to_owned())),
            _ => Err(BadJobId),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// 0 for a bare ULID, 1 for a versioned id.
    pub fn version(&self) -> u8 {
        if self.0.len() == 27 { 1 } else { 0 }
    }

    /// The lane of this id among `lanes`: FNV-1a (64-bit) of the id's text,
    /// modulo the lane count. Stable across versions and processes; pinned by
    /// tests. With the queue's name it gives the job's slot
    /// ([`crate::keys::slot_of`]).
    pub fn lane(&self, lanes: u32) -> u32 {
        debug_assert!(lanes > 0);
        (fnv1a64(self.0.as_bytes()) % u64::from(lanes.max(1))) as u32
    }

    /// The publish time embedded in the id by the gateway that minted it (ms).
    pub fn timestamp_ms(&self) -> u64 {
        let ulid = if self.0.len() == 27 {
            &self.0[1..]
        } else {
            &self.0[..]
        };
        ulid::Ulid::from_string(ulid).map_or(0, |u| u.timestamp_ms())
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// FNV-1a, 64-bit.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names() {
        assert_eq!(check_namespace("ns-1_A"), Ok(()));
        assert_eq!(check_namespace(""), Err(NameError::Namespace));
        assert_eq!(check_namespace("a/b"), Err(NameError::Namespace));
        assert_eq!(check_namespace(&"a".repeat(256)), Err(NameError::TooLong));
        assert_eq!(check_namespace(&"a".repeat(255)), Ok(()));
        assert_eq!(check_queue("_q"), Err(NameError::Queue));
        assert_eq!(check_queue("q_"), Ok(()));
        assert_eq!(check_queue("q,r"), Err(NameError::Queue));
    }

    #[test]
    fn ids_round_trip_in_both_versions() {
        let v0 = JobId::mint(false);
        assert_eq!(v0.as_str().len(), 26);
        assert_eq!(v0.version(), 0);
        assert_eq!(JobId::parse(v0.as_str()), Ok(v0.clone()));
        let v1 = JobId::mint(true);
        assert_eq!(v1.as_str().len(), 27);
        assert_eq!(v1.version(), 1);
        assert_eq!(JobId::parse(v1.as_str()), Ok(v1));
        assert!(v0.timestamp_ms() > 1_700_000_000_000);
    }

    #[test]
    fn bad_ids_are_refused() {
        for bad in [
            "",
            "x",
            "01ARZ3NDEKTSV4RRFFQ69G5FA",
            "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
            "2ARZ3NDEKTSV4RRFFQ69G5FAV",
            "01ARZ3NDEKTSV4RRFFQ69G5FA!",
        ] {
            assert_eq!(JobId::parse(bad), Err(BadJobId), "{bad}");
        }
    }

    /// Golden vectors: the lane of an id must never change between
    /// versions, or jobs already stored could not be found by id.
    #[test]
    fn lane_of_id_is_pinned() {
        let cases = [
            ("01ARZ3NDEKTSV4RRFFQ69G5FAV", 16, 0),
            ("01ARZ3NDEKTSV4RRFFQ69G5FAV", 64, 0),
            ("101ARZ3NDEKTSV4RRFFQ69G5FAV", 16, 13),
            ("01HZY7Q6W3J9T0M2C4V8B5N1XK", 16, 3),
        ];
        for (id, lanes, want) in cases {
            let got = JobId::parse(id).expect("valid").lane(lanes);
            assert_eq!(got, want, "{id} over {lanes}");
        }
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn minted_ids_land_in_the_asked_lane() {
        for l in 0..16 {
            assert_eq!(JobId::mint_in_lane(true, l, 16).lane(16), l);
        }
    }

    proptest! {
        #[test]
        fn lanes_are_in_range(lanes in 1u32..1024) {
            let id = JobId::mint(false);
            prop_assert!(id.lane(lanes) < lanes);
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,40}") {
            let _ = JobId::parse(&s);
        }
    }
}
