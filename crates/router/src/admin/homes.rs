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

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sundial_core::{EngineError, keys::AdminTable};
use tokio::sync::watch;

use super::replica::{RawTables, Replica, Table, readable_rows};

/// How far a namespace's move has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveState {
    Announced,
    Moving,
    Moved,
}

impl MoveState {
    pub const ALL: [Self; 3] = [Self::Announced, Self::Moving, Self::Moved];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Announced => "announced",
            Self::Moving => "moving",
            Self::Moved => "moved",
        }
    }
}

impl std::str::FromStr for MoveState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown move state {s:?}"))
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
}

/// The table's field for the namespace `ns` of `pool`.
fn field(pool: &str, ns: &str) -> String {
    format!("{pool}/{ns}")
}

/// The homes table as a gateway holds it: `<pool>/<ns>` → its home.
#[derive(Debug, Default)]
pub struct HomeTable {
    homes: HashMap<String, Home>,
}

impl Table for HomeTable {
    fn build(tables: &RawTables) -> Self {
        let homes = readable_rows(tables, AdminTable::Homes, "namespace home", |raw| {
            serde_json::from_str(raw)
        });
        Self { homes }
    }
}

/// The homes table's operations.
#[derive(Debug, Clone, Copy)]
pub struct Homes<'a>(pub(super) &'a Replica);

impl Homes<'_> {
    /// Where the tokens of `pool` for `ns` are served from, if the
    /// namespace moved (or moves) to another pool.
    pub fn get(&self, pool: &str, ns: &str) -> Option<Home> {
        self.0
            .read(|l| l.get::<HomeTable>()?.homes.get(&field(pool, ns)).cloned())
            .flatten()
    }

    /// Every home this gateway knows: (`pool`, `ns`, home).
    pub fn all(&self) -> Vec<(String, String, Home)> {
        self.0
            .read(|l| {
                l.get::<HomeTable>()
                    .into_iter()
                    .flat_map(|t| &t.homes)
                    .filter_map(|(f, h)| {
                        let (pool, ns) = f.split_once('/')?;
                        Some((pool.to_owned(), ns.to_owned(), h.clone()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Sets the home of `pool`'s `ns` to `new`, only if it is `expected`
    /// now (`None`: it has none), as read from Redis; returns whether it
    /// was set. Every gateway reloads the tables.
    pub async fn set(
        &self,
        pool: &str,
        ns: &str,
        new: Option<&Home>,
        expected: Option<&Home>,
    ) -> Result<bool, EngineError> {
        let value = new.map(|h| serde_json::to_string(h).unwrap_or_default());
        let is_expected = |current: Option<&str>| {
            current.and_then(|c| serde_json::from_str(c).ok()).as_ref() == expected
        };
        self.0
            .compare_and_set(
                AdminTable::Homes,
                &field(pool, ns),
                is_expected,
                value.as_deref(),
            )
            .await
    }

    /// Changes when the homes do (a long poll ends when its namespace's
    /// route does).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.0.changes(AdminTable::Homes)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sundial_tests::RedisServer;

    use super::*;
    use crate::admin::testing::store;

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
    }

    #[tokio::test]
    async fn a_home_changes_only_from_what_it_was_and_says_so() {
        let redis = RedisServer::start();
        let store = store(&redis).await;
        let homes = store.homes();
        let mut changes = homes.changes();
        let announced = Home {
            to: "b".into(),
            from: "a".into(),
            state: MoveState::Announced,
            since_ms: 1,
        };
        assert!(
            homes
                .set("a", "ns", Some(&announced), None)
                .await
                .expect("set")
        );
        assert!(
            !homes
                .set("a", "ns", Some(&announced), None)
                .await
                .expect("set"),
            "it has one now"
        );
        tokio::time::timeout(Duration::from_secs(1), changes.changed())
            .await
            .expect("told")
            .expect("open");
        assert_eq!(homes.get("a", "ns"), Some(announced.clone()));
        assert_eq!(
            homes.all(),
            [("a".to_owned(), "ns".to_owned(), announced.clone())]
        );
        let moving = Home {
            state: MoveState::Moving,
            since_ms: 2,
            ..announced.clone()
        };
        assert!(
            !homes
                .set("a", "ns", Some(&moving), Some(&moving))
                .await
                .expect("cas")
        );
        assert!(
            homes
                .set("a", "ns", Some(&moving), Some(&announced))
                .await
                .expect("cas")
        );
        assert!(
            homes
                .set("a", "ns", None, Some(&moving))
                .await
                .expect("delete")
        );
        assert_eq!(homes.get("a", "ns"), None);
    }
}
