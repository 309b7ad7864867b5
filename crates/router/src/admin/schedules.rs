//! The schedule table: `sd:schedules` (`<pool>/<ns>/<queue>/<name>` → a
//! schedule's definition, [`ScheduleDef`] as JSON), replicated with the
//! other tables, so that every gateway (which will list and preview them)
//! and every pump (which will fire them) has the same schedules within one
//! poll.
//! A change is a new revision of its row (`rev`), written compare-and-swap
//! over the row it revises, so that two operators' changes are both
//! counted and a slot can tell a newer row from one it already applied.

use std::{collections::BTreeMap, sync::Mutex};

use sundial_core::{EngineError, keys::AdminTable};
use tokio::sync::watch;

use super::replica::{RawTables, Replica, Table, readable_rows};
use crate::schedule::{ScheduleDef, SpecError};

/// A schedule: its name, and the queue, namespace and pool it belongs to.
/// Names hold no `/`.
#[derive(Debug, Clone, Copy)]
pub struct ScheduleId<'a> {
    pub pool: &'a str,
    pub ns: &'a str,
    pub queue: &'a str,
    pub name: &'a str,
}

impl ScheduleId<'_> {
    /// The table's field: `<pool>/<ns>/<queue>/<name>`.
    fn field(&self) -> String {
        format!("{}/{}/{}/{}", self.pool, self.ns, self.queue, self.name)
    }
}

/// The schedule table as a process holds it: field → definition, in
/// field order, so that a queue's schedules are one range.
#[derive(Debug, Default)]
pub struct ScheduleTable {
    rows: BTreeMap<String, ScheduleDef>,
}

impl Table for ScheduleTable {
    /// A row of a newer version is left out: this process neither shows
    /// nor fires it.
    fn build(tables: &RawTables) -> Self {
        let rows = readable_rows(tables, AdminTable::Schedules, "schedule", |raw| {
            serde_json::from_str(raw)
        });
        Self { rows }
    }
}

/// What a [`Schedules::put`] did, and the row as it stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Put {
    Created(ScheduleDef),
    Changed(ScheduleDef),
    /// The definition was the row's already: nothing written.
    Unchanged(ScheduleDef),
}

/// Why a [`Schedules::put`] stored nothing.
#[derive(Debug, thiserror::Error)]
pub enum PutError {
    /// The definition was refused (a 400).
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The row was written by a newer build, whose fields this one cannot
    /// keep.
    #[error("schedule {0} was written by a newer Sundial: change it there")]
    Newer(String),
    /// The job's idempotency key would change: it places the schedule (in
    /// its key's lane), and a schedule is not carried to another slot.
    #[error(
        "a schedule's job.dedup cannot change (it decides where the schedule lives): delete the schedule and create it again"
    )]
    KeyChange,
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// The schedule table's operations.
#[derive(Debug, Clone, Copy)]
pub struct Schedules<'a>(pub(super) &'a Replica);

impl Schedules<'_> {
    /// Schedule `id`, from this process's copy.
    pub fn get(&self, id: ScheduleId<'_>) -> Option<ScheduleDef> {
        self.0
            .read(|l| l.get::<ScheduleTable>()?.rows.get(&id.field()).cloned())
            .flatten()
    }

    /// The queue's schedules by name, from this process's copy.
    pub fn list(&self, pool: &str, ns: &str, queue: &str) -> Vec<(String, ScheduleDef)> {
        let prefix = ScheduleId {
            pool,
            ns,
            queue,
            name: "",
        }
        .field();
        self.0
            .read(|l| {
                let Some(t) = l.get::<ScheduleTable>() else {
                    return Vec::new();
                };
                t.rows
                    .range(prefix.clone()..)
                    .take_while(|(f, _)| f.starts_with(&prefix))
                    .map(|(f, d)| (f[prefix.len()..].to_owned(), d.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Calls `f` with every schedule of this process's copy, in field
    /// order; `false` (and no call) before the copy's first load.
    pub fn for_each(&self, mut f: impl FnMut(ScheduleId<'_>, &ScheduleDef)) -> bool {
        self.0
            .read(|l| {
                let Some(t) = l.get::<ScheduleTable>() else {
                    return;
                };
                for (field, def) in &t.rows {
                    let mut parts = field.splitn(4, '/');
                    if let (Some(pool), Some(ns), Some(queue), Some(name)) =
                        (parts.next(), parts.next(), parts.next(), parts.next())
                    {
                        f(
                            ScheduleId {
                                pool,
                                ns,
                                queue,
                                name,
                            },
                            def,
                        );
                    }
                }
            })
            .is_some()
    }

    /// Creates schedule `id`, or revises it, as `def` says
    /// ([`ScheduleDef::revise`]) at `now_ms`, once the revised row passes
    /// [`ScheduleDef::check`]. Every process reloads it.
    pub async fn put(
        &self,
        id: ScheduleId<'_>,
        def: &ScheduleDef,
        now_ms: u64,
    ) -> Result<Put, PutError> {
        crate::schedule::spec::check_name(id.name)?;
        let field = id.field();
        // What the last attempt made of the row it read (an attempt runs
        // again when the row changed under it).
        let outcome = Mutex::new(None);
        self.0
            .update(AdminTable::Schedules, &field, |raw| {
                let (put, row) = revise(&field, raw, def, now_ms);
                *outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(put);
                row.or_else(|| raw.map(str::to_owned))
            })
            .await?;
        outcome
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .expect("an update reads the row before it answers")
    }

    /// Pauses or resumes schedule `id` (a new revision, its definition
    /// otherwise as it stands); `None` if there is none, else whether it
    /// changed.
    pub async fn set_paused(
        &self,
        id: ScheduleId<'_>,
        paused: bool,
        now_ms: u64,
    ) -> Result<Option<bool>, PutError> {
        let field = id.field();
        let found = Mutex::new(Ok(None));
        let changed = self
            .0
            .update(AdminTable::Schedules, &field, |raw| {
                // The last attempt's reading is the answer.
                *found.lock().unwrap_or_else(|p| p.into_inner()) = Ok(None);
                let old = match raw.map(serde_json::from_str::<ScheduleDef>) {
                    None => return None,
                    Some(Ok(old)) => old,
                    Some(Err(_)) => {
                        *found.lock().unwrap_or_else(|p| p.into_inner()) =
                            Err(PutError::Newer(field.clone()));
                        return raw.map(str::to_owned);
                    }
                };
                *found.lock().unwrap_or_else(|p| p.into_inner()) = Ok(Some(()));
                if old.paused == paused {
                    return raw.map(str::to_owned);
                }
                let new = ScheduleDef {
                    paused,
                    rev: (old.rev + 1).max(now_ms),
                    updated_ms: now_ms,
                    ..old
                };
                serde_json::to_string(&new)
                    .ok()
                    .or_else(|| raw.map(str::to_owned))
            })
            .await?;
        Ok(found
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())?
            .map(|()| changed))
    }

    /// Deletes schedule `id`; `false` if there was none.
    pub async fn delete(&self, id: ScheduleId<'_>) -> Result<bool, EngineError> {
        self.0
            .change(AdminTable::Schedules, "del", &id.field(), "")
            .await
    }

    /// Changes when the schedules do.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.0.changes(AdminTable::Schedules)
    }
}

/// What `def` makes of the row `raw` of `field` at `now_ms`: the outcome,
/// and the row to write (`None`: none).
fn revise(
    field: &str,
    raw: Option<&str>,
    def: &ScheduleDef,
    now_ms: u64,
) -> (Result<Put, PutError>, Option<String>) {
    let old = match raw.map(serde_json::from_str::<ScheduleDef>) {
        None => None,
        Some(Ok(old)) => Some(old),
        Some(Err(_)) => return (Err(PutError::Newer(field.to_owned())), None),
    };
    let Some(new) = def.revise(old.as_ref(), now_ms) else {
        let old = old.unwrap_or_else(|| def.clone());
        return (Ok(Put::Unchanged(old)), None);
    };
    if let Err(e) = new.check(now_ms) {
        return (Err(e.into()), None);
    }
    if old.as_ref().is_some_and(|o| o.job.dedup != new.job.dedup) {
        return (Err(PutError::KeyChange), None);
    }
    let row = serde_json::to_string(&new).ok();
    let put = if old.is_some() {
        Put::Changed(new)
    } else {
        Put::Created(new)
    };
    (Ok(put), row)
}

#[cfg(test)]
mod tests {
    use sundial_tests::RedisServer;

    use super::*;
    use crate::admin::{
        POLL,
        testing::{polling, store},
    };
    use crate::schedule::spec::tests::every;

    const NOW: u64 = 1_780_000_000_000;

    fn id(name: &str) -> ScheduleId<'_> {
        ScheduleId {
            pool: "p",
            ns: "ns",
            queue: "q",
            name,
        }
    }

    #[tokio::test]
    async fn a_schedule_is_created_revised_paused_and_deleted_and_seen_on_another_gateway() {
        let redis = RedisServer::start();
        let fresh = crate::admin::AdminStore::new(crate::admin::testing::shard(&redis, "a").await);
        let age = std::time::Duration::from_secs(5);
        assert!(!fresh.confirmed_within(age), "never loaded");
        let one = store(&redis).await;
        assert!(one.confirmed_within(age), "a reload found it current");
        let (two, stop) = polling(&redis).await;
        let mut changes = two.schedules().changes();

        let put = one
            .schedules()
            .put(id("a"), &every(60), NOW)
            .await
            .expect("put");
        let Put::Created(first) = put else {
            panic!("created: {put:?}")
        };
        assert_eq!((first.rev, first.anchor_ms), (NOW, NOW));
        tokio::time::timeout(POLL * 2, changes.changed())
            .await
            .expect("within a poll")
            .expect("open");
        assert_eq!(two.schedules().get(id("a")), Some(first.clone()));

        let again = one.schedules().put(id("a"), &every(60), NOW + 1).await;
        assert_eq!(again.expect("put"), Put::Unchanged(first.clone()));
        let put = one.schedules().put(id("a"), &every(30), NOW + 2).await;
        let Put::Changed(second) = put.expect("put") else {
            panic!("changed")
        };
        assert_eq!(
            (second.rev, second.created_ms, second.updated_ms),
            (NOW + 2, NOW, NOW + 2)
        );

        one.schedules()
            .put(id("b"), &every(5), NOW)
            .await
            .expect("put");
        let other = ScheduleId {
            queue: "q2",
            ..id("c")
        };
        one.schedules()
            .put(other, &every(5), NOW)
            .await
            .expect("put");
        let names: Vec<String> = one
            .schedules()
            .list("p", "ns", "q")
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["a", "b"], "the queue's own, by name");
        let mut all = Vec::new();
        assert!(one.schedules().for_each(|id, def| {
            all.push((
                format!("{}/{}/{}/{}", id.pool, id.ns, id.queue, id.name),
                def.every,
            ));
        }));
        assert_eq!(
            all,
            [
                ("p/ns/q/a".to_owned(), Some(30)),
                ("p/ns/q/b".to_owned(), Some(5)),
                ("p/ns/q2/c".to_owned(), Some(5)),
            ]
        );

        assert_eq!(
            one.schedules()
                .set_paused(id("a"), true, NOW + 3)
                .await
                .expect("pause"),
            Some(true)
        );
        assert_eq!(
            one.schedules()
                .set_paused(id("a"), true, NOW + 4)
                .await
                .expect("pause"),
            Some(false)
        );
        let paused = one.schedules().get(id("a")).expect("there");
        assert_eq!(
            (paused.paused, paused.rev, paused.every),
            (true, NOW + 3, Some(30))
        );
        assert_eq!(
            one.schedules()
                .set_paused(id("none"), true, NOW)
                .await
                .expect("pause"),
            None
        );

        assert!(one.schedules().delete(id("a")).await.expect("delete"));
        assert!(
            !one.schedules().delete(id("a")).await.expect("delete"),
            "gone"
        );
        tokio::time::timeout(std::time::Duration::from_secs(1), async {
            while two.schedules().get(id("a")).is_some() {
                changes.changed().await.expect("open");
            }
        })
        .await
        .expect("the other gateway sees it go");
        stop.cancel();
    }

    #[tokio::test]
    async fn a_refused_definition_or_a_newer_row_stores_nothing() {
        let redis = RedisServer::start();
        let one = store(&redis).await;
        let bad = ScheduleDef {
            jitter_ms: 60_000,
            ..every(60)
        };
        let err = one
            .schedules()
            .put(id("a"), &bad, NOW)
            .await
            .expect_err("refused");
        assert!(matches!(err, PutError::Spec(SpecError::Jitter)), "{err}");
        let rows = one
            .replica
            .rows_now(AdminTable::Schedules)
            .await
            .expect("rows");
        assert!(rows.is_empty(), "nothing stored: {rows:?}");

        let newer = r#"{"rev":7,"every":60,"a_field_of_tomorrow":1}"#;
        assert!(
            one.replica
                .change(AdminTable::Schedules, "set", "p/ns/q/a", newer)
                .await
                .expect("set")
        );
        let err = one
            .schedules()
            .put(id("a"), &every(60), NOW)
            .await
            .expect_err("refused");
        assert!(matches!(err, PutError::Newer(_)), "{err}");
        let err = one
            .schedules()
            .set_paused(id("a"), true, NOW)
            .await
            .expect_err("refused");
        assert!(matches!(err, PutError::Newer(_)), "{err}");
        assert_eq!(
            one.schedules().get(id("a")),
            None,
            "not shown by this build"
        );
        for name in ["", "a/b"] {
            let err = one
                .schedules()
                .put(id(name), &every(60), NOW)
                .await
                .expect_err("refused");
            assert!(
                matches!(err, PutError::Spec(SpecError::Name)),
                "{name:?}: {err}"
            );
        }
        let rows = one
            .replica
            .rows_now(AdminTable::Schedules)
            .await
            .expect("rows");
        assert_eq!(
            rows.get("p/ns/q/a").map(String::as_str),
            Some(newer),
            "kept as it was"
        );
    }

    #[tokio::test]
    async fn a_schedules_key_cannot_change_once_it_is_made() {
        let redis = RedisServer::start();
        let one = store(&redis).await;
        let mut keyed = every(60);
        keyed.job.dedup = Some("report".to_owned());
        let s = one.schedules();
        assert!(matches!(
            s.put(id("k"), &keyed, NOW).await,
            Ok(Put::Created(_))
        ));
        let mut other = keyed.clone();
        other.job.dedup = Some("other".to_owned());
        let mut none = keyed.clone();
        none.job.dedup = None;
        for (what, def) in [("another key", &other), ("no key", &none)] {
            let refused = s.put(id("k"), def, NOW + 1).await;
            assert!(
                matches!(refused, Err(PutError::KeyChange)),
                "{what}: {refused:?}"
            );
        }
        assert!(matches!(
            s.put(id("n"), &every(60), NOW).await,
            Ok(Put::Created(_))
        ));
        let refused = s.put(id("n"), &keyed, NOW + 1).await;
        assert!(
            matches!(refused, Err(PutError::KeyChange)),
            "a key added: {refused:?}"
        );
        // The same key with another interval is a change like any other.
        let mut faster = keyed.clone();
        faster.every = Some(30);
        assert!(matches!(
            s.put(id("k"), &faster, NOW + 2).await,
            Ok(Put::Changed(_))
        ));
    }
}
