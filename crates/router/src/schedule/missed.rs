//! What a schedule does with fires it missed: the fires whose time passed
//! longer ago than the schedule's grace while nothing could fire them (a
//! Redis outage, every pump down). A fire that is late by less than the
//! grace (a pump killed and its lease passed on) is not missed: it fires,
//! late.

use serde::{Deserialize, Serialize};

/// The most missed fires a schedule may catch up after one outage.
pub const MAX_CATCH_UP: u16 = 100;

/// The policy for missed fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Fire none of them: the schedule goes on with its next fire.
    Skip,
    /// Fire once for all of them, at the latest missed time.
    Once,
    /// Fire the latest `n` of them (1 to [`MAX_CATCH_UP`]), oldest first.
    CatchUp(u16),
}

/// Why a policy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid missed: skip, once or catch_up with 1 to {MAX_CATCH_UP} fires")]
pub struct MissedError;

impl Missed {
    /// The policy named `kind` (`skip`, `once` or `catch_up`), with `n`
    /// fires for `catch_up` (and none for the others).
    pub fn parse(kind: &str, n: Option<u16>) -> Result<Self, MissedError> {
        match (kind, n) {
            ("skip", None) => Ok(Self::Skip),
            ("once", None) => Ok(Self::Once),
            ("catch_up", Some(n)) if (1..=MAX_CATCH_UP).contains(&n) => Ok(Self::CatchUp(n)),
            _ => Err(MissedError),
        }
    }

    /// The most missed fires this policy fires, whatever their number.
    pub fn most(self) -> usize {
        match self {
            Self::Skip => 0,
            Self::Once => 1,
            Self::CatchUp(n) => usize::from(n),
        }
    }

    /// Of the missed fires `late` (in time order), those to fire: the
    /// latest [`Missed::most`], oldest first.
    pub fn keep(self, late: &[u64]) -> &[u64] {
        &late[late.len().saturating_sub(self.most())..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_keeps_the_latest_of_its_share() {
        let late = [10, 20, 30, 40];
        assert_eq!(Missed::Skip.keep(&late), &[] as &[u64]);
        assert_eq!(Missed::Once.keep(&late), &[40]);
        assert_eq!(Missed::CatchUp(3).keep(&late), &[20, 30, 40]);
        assert_eq!(Missed::CatchUp(9).keep(&late), &late);
        assert_eq!(Missed::Once.keep(&[]), &[] as &[u64]);
    }

    #[test]
    fn policies_parse_with_their_count_only() {
        assert_eq!(Missed::parse("skip", None), Ok(Missed::Skip));
        assert_eq!(Missed::parse("once", None), Ok(Missed::Once));
        assert_eq!(Missed::parse("catch_up", Some(5)), Ok(Missed::CatchUp(5)));
        for (kind, n) in [
            ("catch_up", None),
            ("catch_up", Some(0)),
            ("catch_up", Some(MAX_CATCH_UP + 1)),
            ("skip", Some(1)),
            ("once", Some(2)),
            ("all", None),
            ("", None),
        ] {
            assert_eq!(Missed::parse(kind, n), Err(MissedError), "{kind} {n:?}");
        }
    }
}
