//! Idempotency keys of publishes: what a key may be, the lane it picks,
//! how a publication's keys are held (`KeyMode`), and what a publication
//! with keys is answered. The script side is `lua/lib/keys.lua`.

use crate::{JobId, job::fnv1a64};

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// The longest window of a key ([`KeyMode::Window`]): 30 days, in seconds.
pub const MAX_KEY_WINDOW_SECS: u64 = 30 * 24 * 3600;

/// How long a key names its job, and what a later publish with it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMode {
    /// A later publish is a duplicate while the first job exists, in any
    /// state (the dead letter included).
    UntilDone,
    /// A later publish is a duplicate for this many ms after the first
    /// publish, however the job ended.
    Window(u64),
    /// A later publish replaces the body and schedule of the first job
    /// while it is delayed and was never delivered, and keeps its id; else
    /// it is a duplicate while the first job exists, as [`Self::UntilDone`].
    Debounce,
}

impl KeyMode {
    /// The mode as `publish.lua` reads it.
    pub(crate) fn arg(self) -> String {
        match self {
            Self::UntilDone => "u".to_owned(),
            Self::Debounce => "d".to_owned(),
            Self::Window(ms) => format!("w{}", ms.max(1)),
        }
    }
}

/// The keys of a publication: one per job, in the order of its jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub mode: KeyMode,
    pub keys: Vec<String>,
}

/// Why a key was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadKey {
    #[error("empty")]
    Empty,
    #[error("longer than {MAX_KEY_BYTES} bytes")]
    TooLong,
    #[error("contains a control character")]
    Control,
}

/// Refuses an empty key, one over [`MAX_KEY_BYTES`], and one with a control
/// character (which a header could not carry, nor a log show).
pub fn check_key(key: &str) -> Result<(), BadKey> {
    if key.is_empty() {
        return Err(BadKey::Empty);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(BadKey::TooLong);
    }
    if key.chars().any(char::is_control) {
        return Err(BadKey::Control);
    }
    Ok(())
}

/// The lane of a job published with `key`, among `lanes`: every job of a
/// queue with the same key lands in the same slot, where its key lives.
pub fn key_lane(key: &str, lanes: u32) -> u32 {
    (fnv1a64(key.as_bytes()) % u64::from(lanes.max(1))) as u32
}

/// A job of a publication that its key answered instead of storing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHit {
    /// Its place in the publication (from 0).
    pub place: usize,
    /// The job the key names.
    pub id: JobId,
    /// `true`: that job was delayed and took this one's body and schedule
    /// ([`KeyMode::Debounce`]); `false`: a duplicate, nothing stored.
    pub replaced: bool,
}

/// What a publication came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Stored, but for the jobs its keys answered (none without keys).
    Stored(Vec<KeyHit>),
    /// One of its ids exists already: nothing of it was stored.
    Exists,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        assert_eq!(check_key("order-1"), Ok(()));
        assert_eq!(check_key(""), Err(BadKey::Empty));
        assert_eq!(check_key(&"k".repeat(256)), Ok(()));
        assert_eq!(check_key(&"k".repeat(257)), Err(BadKey::TooLong));
        assert_eq!(check_key("a\nb"), Err(BadKey::Control));
        assert_eq!(check_key("a\u{7f}"), Err(BadKey::Control));
        assert_eq!(check_key("ключ-1"), Ok(()));
    }

    #[test]
    fn a_key_picks_one_lane() {
        assert_eq!(key_lane("order-1", 1), 0);
        let lanes: std::collections::BTreeSet<u32> =
            (0..64).map(|i| key_lane(&format!("k{i}"), 4)).collect();
        assert_eq!(lanes.len(), 4, "keys spread over the lanes");
        assert_eq!(key_lane("order-1", 4), key_lane("order-1", 4));
    }

    #[test]
    fn modes_as_the_script_reads_them() {
        assert_eq!(KeyMode::UntilDone.arg(), "u");
        assert_eq!(KeyMode::Debounce.arg(), "d");
        assert_eq!(KeyMode::Window(60_000).arg(), "w60000");
    }
}
