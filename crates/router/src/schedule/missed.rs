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

impl Missed {
    /// The most missed fires this policy fires, whatever their number.
    pub fn most(self) -> usize {
        match self {
            Self::Skip => 0,
            Self::Once => 1,
            Self::CatchUp(n) => usize::from(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_fires_its_share_of_the_missed() {
        assert_eq!(Missed::Skip.most(), 0);
        assert_eq!(Missed::Once.most(), 1);
        assert_eq!(Missed::CatchUp(MAX_CATCH_UP).most(), 100);
    }
}
