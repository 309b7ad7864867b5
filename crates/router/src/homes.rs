//! Where a namespace's tokens are served from when it moved to another
//! pool: the admin table `sd:homes` (`<pool>/<ns>` → [`Home`]),
//! replicated with the token table.
//!
//! A token names its pool (`pool:secret`), and clients keep their tokens
//! when their namespace moves, so a move re-points the namespace of that
//! pool rather than the tokens: requests with a token of pool `P` for
//! namespace `ns` are served from `home.to` once `P/ns` has a home. A move
//! goes through three states, each announced by every gateway in its view
//! (in the shards of both pools) before the next begins; a gateway whose
//! config lacks either pool names no move in its view, so it holds the
//! move at `announced`:
//!
//! 1. `announced`: reads cover both pools, writes still go to `from`;
//! 2. `moving` (once every live gateway knows `announced`): writes go to
//!    `to`, reads cover both, and once every live gateway writes to `to`
//!    the mover copies the namespace's jobs from `from` to `to`;
//! 3. `moved` (once `from` holds none of them): reads and writes at `to`.

use serde::{Deserialize, Serialize};

/// How far a namespace's move has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveState {
    Announced,
    Moving,
    Moved,
}

impl MoveState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Announced => "announced",
            Self::Moving => "moving",
            Self::Moved => "moved",
        }
    }
}

/// Where the tokens of one pool's namespace are served from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Home {
    /// The pool the namespace is (being) moved to.
    pub to: String,
    /// The pool it is moved from (its tokens' pool, or where an earlier
    /// move took it).
    pub from: String,
    pub state: MoveState,
    /// When this state began (Unix ms, the gateway's clock that set it).
    pub since_ms: u64,
}

impl Home {
    /// The pool that writes go to.
    pub fn writes(&self) -> &str {
        match self.state {
            MoveState::Announced => &self.from,
            MoveState::Moving | MoveState::Moved => &self.to,
        }
    }

    /// The other pool that reads cover, while the move goes on.
    pub fn also_reads(&self) -> Option<&str> {
        match self.state {
            MoveState::Announced => Some(&self.to),
            MoveState::Moving => Some(&self.from),
            MoveState::Moved => None,
        }
    }

    /// The pools that may hold the namespace's jobs now: announced, the
    /// one it leaves (every gateway writes there); moving, both; moved, the
    /// new one.
    pub fn holding(&self) -> Vec<&str> {
        match self.state {
            MoveState::Announced => vec![&self.from],
            MoveState::Moving => vec![&self.from, &self.to],
            MoveState::Moved => vec![&self.to],
        }
    }

    /// What a gateway announces in its view (in the shards of `from` and
    /// of `to`) when it knows this home of `<pool>/<ns>`.
    pub fn view_entry(&self, pool: &str, ns: &str) -> String {
        format!(
            "{}{pool}/{ns} {} {}",
            crate::drain::HOME,
            self.to,
            self.state.as_str()
        )
    }
}

/// The table's field for the namespace `ns` of `pool`.
pub fn field(pool: &str, ns: &str) -> String {
    format!("{pool}/{ns}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_reads_both_pools_until_moved() {
        let mut h = Home {
            to: "b".into(),
            from: "a".into(),
            state: MoveState::Announced,
            since_ms: 1,
        };
        assert_eq!((h.writes(), h.also_reads()), ("a", Some("b")));
        h.state = MoveState::Moving;
        assert_eq!((h.writes(), h.also_reads()), ("b", Some("a")));
        h.state = MoveState::Moved;
        assert_eq!((h.writes(), h.also_reads()), ("b", None));
        let json = serde_json::to_string(&h).expect("json");
        assert_eq!(serde_json::from_str::<Home>(&json).expect("parse"), h);
        assert_eq!(h.view_entry("a", "ns"), "home a/ns b moved");
    }
}
