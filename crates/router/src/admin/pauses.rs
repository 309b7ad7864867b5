//! The pause table: `sd:pauses` (`<pool>/<ns>/<queue>` for a queue,
//! `<pool>/<ns>` for a whole namespace → when it was paused), replicated
//! with the other tables, so that a pause or a resume is in force on every
//! gateway within one poll. While a queue or its namespace is paused its
//! consumers get no job (a long poll waits on, and is answered once the
//! queue resumes within its timeout); publishes, timers, TTRs and expiry go
//! on as ever. A gateway reads the table from its copy: a consume costs no
//! round trip for it.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use sundial_core::{EngineError, keys::AdminTable};
use tokio::sync::watch;

use super::replica::{RawTables, Replica, Table, readable_rows};

/// A pause, as the table keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paused {
    /// When it was paused (ms since the Unix epoch, the gateway's clock).
    pub since_ms: u64,
}

/// The table's field for `queue` of `ns` of `pool`, or for the whole
/// namespace. Names hold no `/`: a field says which it is by its parts.
fn field(pool: &str, ns: &str, queue: Option<&str>) -> String {
    match queue {
        Some(q) => format!("{pool}/{ns}/{q}"),
        None => format!("{pool}/{ns}"),
    }
}

/// The pause table as a gateway holds it: field → pause.
#[derive(Debug, Default)]
pub struct PauseTable {
    paused: HashMap<String, Paused>,
}

impl Table for PauseTable {
    fn build(tables: &RawTables) -> Self {
        let paused = readable_rows(tables, AdminTable::Pauses, "pause", |raw| {
            serde_json::from_str(raw)
        });
        Self { paused }
    }
}

/// The pause table's operations. `queue` `None` names the whole namespace.
#[derive(Debug, Clone, Copy)]
pub struct Pauses<'a>(pub(super) &'a Replica);

impl Pauses<'_> {
    /// The pause of a queue itself, or of a whole namespace (`None`), from
    /// this gateway's copy.
    pub fn get(&self, pool: &str, ns: &str, queue: Option<&str>) -> Option<Paused> {
        self.0
            .read(|l| {
                l.get::<PauseTable>()?
                    .paused
                    .get(&field(pool, ns, queue))
                    .copied()
            })
            .flatten()
    }

    /// Whether consumers of `queue` get no job: the queue or its namespace
    /// is paused.
    pub fn holds(&self, pool: &str, ns: &str, queue: &str) -> bool {
        self.0
            .read(|l| {
                let t = l.get::<PauseTable>()?;
                if t.paused.is_empty() {
                    return Some(false);
                }
                Some(
                    t.paused.contains_key(&field(pool, ns, None))
                        || t.paused.contains_key(&field(pool, ns, Some(queue))),
                )
            })
            .flatten()
            .unwrap_or(false)
    }

    /// Every paused queue of every namespace, and every paused namespace
    /// (queue `None`): (pool, namespace, queue, pause).
    pub fn all(&self) -> Vec<(String, String, Option<String>, Paused)> {
        self.0
            .read(|l| {
                let t = l.get::<PauseTable>()?;
                let mut out: Vec<_> = t
                    .paused
                    .iter()
                    .filter_map(|(f, p)| {
                        let mut parts = f.splitn(3, '/');
                        let (pool, ns) = (parts.next()?, parts.next()?);
                        Some((
                            pool.to_owned(),
                            ns.to_owned(),
                            parts.next().map(str::to_owned),
                            *p,
                        ))
                    })
                    .collect();
                out.sort_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
                Some(out)
            })
            .flatten()
            .unwrap_or_default()
    }

    /// Pauses a queue, or a whole namespace; `false` when it was paused
    /// already (its first pause's time stays). Every gateway reloads it.
    pub async fn pause(
        &self,
        pool: &str,
        ns: &str,
        queue: Option<&str>,
        since_ms: u64,
    ) -> Result<bool, EngineError> {
        let json = serde_json::to_string(&Paused { since_ms }).unwrap_or_default();
        self.0
            .change(AdminTable::Pauses, "add", &field(pool, ns, queue), &json)
            .await
    }

    /// Resumes a queue, or a whole namespace; `false` if it was not paused.
    /// A queue of a paused namespace stays paused until the namespace
    /// resumes too.
    pub async fn resume(
        &self,
        pool: &str,
        ns: &str,
        queue: Option<&str>,
    ) -> Result<bool, EngineError> {
        self.0
            .change(AdminTable::Pauses, "del", &field(pool, ns, queue), "")
            .await
    }

    /// Changes when the pauses do.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.0.changes(AdminTable::Pauses)
    }

    /// Sets `sundial_queue_paused` (a queue paused itself) and
    /// `sundial_namespace_paused` to 1 for each pause in this gateway's
    /// copy, and to 0 for those of `reported` (the last call's) that
    /// resumed since; `reported` becomes the pauses now.
    pub fn report(&self, reported: &mut BTreeSet<(String, String, Option<String>)>) {
        let now: BTreeSet<_> = self
            .all()
            .into_iter()
            .map(|(pool, ns, queue, _)| (pool, ns, queue))
            .collect();
        if now == *reported {
            return;
        }
        for (key, value) in now
            .iter()
            .map(|k| (k, 1.0))
            .chain(reported.difference(&now).map(|k| (k, 0.0)))
        {
            let (pool, ns, queue) = key.clone();
            match queue {
                Some(q) => metrics::gauge!("sundial_queue_paused",
                    "pool" => pool, "namespace" => ns, "queue" => q)
                .set(value),
                None => {
                    metrics::gauge!("sundial_namespace_paused", "pool" => pool, "namespace" => ns)
                        .set(value)
                }
            }
        }
        *reported = now;
    }
}

#[cfg(test)]
mod tests {
    use sundial_tests::RedisServer;

    use super::*;
    use crate::admin::testing::{polling, store};

    #[tokio::test]
    async fn a_pause_is_seen_on_another_gateway_within_a_poll_and_resumed() {
        let redis = RedisServer::start();
        let one = store(&redis).await;
        let (two, stop) = polling(&redis).await;
        let mut changes = two.pauses().changes();
        assert!(
            one.pauses()
                .pause("p", "ns", Some("q"), 5)
                .await
                .expect("pause")
        );
        assert!(
            !one.pauses()
                .pause("p", "ns", Some("q"), 9)
                .await
                .expect("pause"),
            "paused already"
        );
        tokio::time::timeout(super::super::POLL * 2, changes.changed())
            .await
            .expect("within a poll")
            .expect("open");
        let p = two.pauses();
        assert!(p.holds("p", "ns", "q"));
        assert!(!p.holds("p", "ns", "other"));
        assert_eq!(p.get("p", "ns", Some("q")), Some(Paused { since_ms: 5 }));
        // A namespace's pause holds every queue of it.
        assert!(one.pauses().pause("p", "ns", None, 7).await.expect("pause"));
        tokio::time::timeout(super::super::POLL * 2, changes.changed())
            .await
            .expect("within a poll")
            .expect("open");
        assert!(p.holds("p", "ns", "other"));
        assert!(!p.holds("p", "ns2", "q"), "another namespace");
        assert_eq!(p.all().len(), 2);
        assert!(one.pauses().resume("p", "ns", None).await.expect("resume"));
        assert!(
            one.pauses()
                .resume("p", "ns", Some("q"))
                .await
                .expect("resume")
        );
        assert!(
            !one.pauses()
                .resume("p", "ns", Some("q"))
                .await
                .expect("resume"),
            "not paused"
        );
        tokio::time::timeout(super::super::POLL * 2, changes.changed())
            .await
            .expect("within a poll")
            .expect("open");
        tokio::time::sleep(super::super::POLL * 2).await;
        assert!(!p.holds("p", "ns", "q"));
        assert!(p.all().is_empty());
        stop.cancel();
    }
}
