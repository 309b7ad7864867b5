//! The room a fire call gives a namespace held to a backlog quota: what
//! the admin Redis admits of its due fires ([`admit`]), and the admission
//! ended with what the call stored ([`Rooms::ended`]). See `quotas.rs` for
//! which namespaces are held.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sundial_core::{Admission, BacklogAsk, EngineError, FireOutcome, Room, Usage};
use sundial_router::{admin::AdminStore, backlog, placement::NamespacePools};

/// How long a namespace's admission may take, all its rounds together:
/// past it, the call's fires of that namespace go uncounted, as when the
/// admin Redis does not answer (an admission that lands after is ended at
/// once, as stored).
const ADMIT_WITHIN: Duration = Duration::from_millis(500);
/// How long a namespace's fires wait for a snapshot of its usage (there is
/// none yet, or an old one refused them): past it, they go uncounted while
/// there is none, and are held to the old one, as a publish is.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(1);

/// A held namespace's due fires, to admit.
pub(crate) struct Ask {
    pub(crate) ns: String,
    /// The pool its quota is set under (its tokens').
    pub(crate) pool: Arc<str>,
    pub(crate) due: Usage,
    /// The smallest and the largest due fire's bytes.
    pub(crate) least: u64,
    pub(crate) most: u64,
    pub(crate) max_jobs: Option<u64>,
    pub(crate) max_bytes: Option<u64>,
}

/// Since when each namespace (`<pool>/<ns>`) waits for a snapshot.
#[derive(Debug, Default)]
pub(crate) struct Waiting(Mutex<HashMap<String, Instant>>);

impl Waiting {
    /// Whether `key`'s fires may wait for a snapshot (noting that they
    /// wait, from the first time asked).
    fn may_wait(&self, key: &str) -> bool {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let since = *all.entry(key.to_owned()).or_insert_with(Instant::now);
        since.elapsed() < SNAPSHOT_WAIT
    }

    /// `key` was answered on a current snapshot.
    fn over(&self, key: &str) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.remove(key);
    }
}

/// An admission of one fire call, to end.
struct Entry {
    pool: Arc<str>,
    ns: String,
    entry: String,
}

/// The rooms of one fire call, and the admissions to end after it (when
/// dropped unended, they end as stored in full).
#[derive(Default)]
pub(crate) struct Rooms {
    pub(crate) rooms: Vec<(String, Room)>,
    admitted: Vec<Entry>,
    admin: Option<Arc<AdminStore>>,
}

impl Rooms {
    pub(crate) fn new(admin: Arc<AdminStore>) -> Self {
        Self {
            rooms: Vec::new(),
            admitted: Vec::new(),
            admin: Some(admin),
        }
    }

    /// Ends the call's admissions (within [`ADMIT_WITHIN`]), each with what
    /// the call stored of it: nothing when its lease was not held or Redis
    /// refused it for memory; all it was admitted for when it may have
    /// stored without saying.
    pub(crate) async fn ended(mut self, call: Result<&FireOutcome, &EngineError>) {
        let Some(admin) = self.admin.clone() else {
            return;
        };
        let ends = std::mem::take(&mut self.admitted).into_iter().map(|e| {
            let redis = admin.redis();
            async move {
                let a = redis.admin();
                let ended = match call {
                    Ok(o) if !o.fenced => {
                        let stored = o.stored.iter().find(|(ns, _)| *ns == e.ns);
                        let stored = stored.map(|(_, u)| *u).unwrap_or_default();
                        a.backlog_stored(&e.pool, &e.ns, &e.entry, stored).await
                    }
                    Ok(_) | Err(EngineError::OutOfMemory { .. }) => {
                        a.backlog_done(&e.pool, &e.ns, &e.entry, false).await
                    }
                    Err(_) => a.backlog_done(&e.pool, &e.ns, &e.entry, true).await,
                };
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "cannot say what fires admitted by a backlog quota stored");
                }
            }
        });
        let all = futures::future::join_all(ends);
        if tokio::time::timeout(ADMIT_WITHIN, all).await.is_err() {
            tracing::debug!("the admin Redis did not take the end of fires' admissions in time");
        }
    }

    /// Takes `other`'s rooms and admissions.
    pub(crate) fn merge(&mut self, mut other: Rooms) {
        self.rooms.append(&mut other.rooms);
        self.admitted.append(&mut other.admitted);
    }

    fn admitted(&mut self, ask: &Ask, entry: String) {
        let (pool, ns) = (ask.pool.clone(), ask.ns.clone());
        self.admitted.push(Entry { pool, ns, entry });
    }
}

impl Drop for Rooms {
    fn drop(&mut self) {
        let (Some(admin), Ok(_)) = (&self.admin, tokio::runtime::Handle::try_current()) else {
            return;
        };
        for e in std::mem::take(&mut self.admitted) {
            backlog::done(admin.redis(), e.pool.to_string(), e.ns, e.entry, true);
        }
    }
}

/// Admits what fits of `ask` (whose namespace's jobs `pools` hold) on the
/// admin Redis, into `out`: all of it; or, when it would go over a bound,
/// what fits of it; or none (refused) when not even its smallest fire
/// fits. While a snapshot of the namespace's usage is taken (it has none,
/// or an old one refused), its fires wait (room for none), at most
/// [`SNAPSHOT_WAIT`]. Not held (no room) when the admin Redis cannot count.
pub(crate) async fn admit(
    admin: &AdminStore,
    waiting: &Waiting,
    ask: &Ask,
    pools: &NamespacePools,
    out: &mut Rooms,
) {
    let key = format!("{}/{}", ask.pool, ask.ns);
    let deadline = tokio::time::Instant::now() + ADMIT_WITHIN;
    let mut want = BacklogAsk {
        add: ask.due,
        max_jobs: ask.max_jobs.unwrap_or(0),
        max_bytes: ask.max_bytes.unwrap_or(0),
        stale_ms: backlog::STALE_MS,
    };
    let mut refused = false;
    let room = loop {
        let entry = format!("{:016x}", rand::random::<u64>());
        let Some(found) = admit_once(admin, ask, pools, &entry, want, deadline).await else {
            // Refused once: the bound holds; else, uncounted.
            break refused.then_some(Room::Refused);
        };
        // While the snapshot `admit_once` started is taken, the fires wait
        // (at most SNAPSHOT_WAIT).
        if backlog::stale(&found) && !refused && waiting.may_wait(&key) {
            break Some(Room::Admitted(Usage::default()));
        }
        match found {
            Admission::Admitted { .. } => {
                waiting.over(&key);
                out.admitted(ask, entry);
                break Some(Room::Admitted(room_of(ask, want.add)));
            }
            Admission::Unknown => break refused.then_some(Room::Refused),
            Admission::Refused { held, .. } => {
                if !backlog::stale(&found) {
                    waiting.over(&key);
                }
                match fits(ask, &want, held) {
                    Some(less) if !refused => want.add = less,
                    _ => break Some(Room::Refused),
                }
                refused = true;
            }
        }
    };
    out.rooms.extend(room.map(|r| (ask.ns.clone(), r)));
}

/// One admission round by `deadline`; `None` when the admin Redis did not
/// answer in time (an admission that lands after is ended, as stored).
async fn admit_once(
    admin: &AdminStore,
    ask: &Ask,
    pools: &NamespacePools,
    entry: &str,
    want: BacklogAsk,
    deadline: tokio::time::Instant,
) -> Option<Admission> {
    let (redis, pool, ns) = (admin.redis(), ask.pool.to_string(), ask.ns.clone());
    let (pools, id) = (pools.clone(), entry.to_owned());
    let mut task = tokio::spawn(async move {
        backlog::admit_once(&redis, (&pool, &ns), &pools, &id, want)
            .await
            .map(|found| (found, redis, pool, ns, id))
    });
    match tokio::time::timeout_at(deadline, &mut task).await {
        Ok(Ok(Ok((found, ..)))) => Some(found),
        Ok(Ok(Err(e))) => {
            tracing::warn!(ns = ask.ns, error = %e, "cannot count fires against a backlog quota; letting them through");
            None
        }
        Ok(Err(_)) => None,
        Err(_) => {
            tracing::warn!(
                ns = ask.ns,
                "the admin Redis did not count fires against a backlog quota in time; letting them through"
            );
            tokio::spawn(async move {
                if let Ok(Ok((Admission::Admitted { .. }, redis, pool, ns, id))) = task.await {
                    backlog::done(redis, pool, ns, id, true);
                }
            });
            None
        }
    }
}

/// The room of an admission of `admitted`: its bytes unbounded when the
/// namespace has no `max_bytes` (the fire script counts them all the same).
fn room_of(ask: &Ask, admitted: Usage) -> Usage {
    Usage {
        jobs: admitted.jobs,
        bytes: if ask.max_bytes.is_some() {
            admitted.bytes
        } else {
            u64::MAX
        },
    }
}

/// What fits of `want` beside the `held` usage under `ask`'s bounds, when
/// that is less than wanted and holds its smallest fire: as many jobs as
/// the room and its bytes hold, and the bytes those may take.
fn fits(ask: &Ask, want: &BacklogAsk, held: Usage) -> Option<Usage> {
    let left = |max: Option<u64>, held: u64| max.map_or(u64::MAX, |m| m.saturating_sub(held));
    let (jobs_left, bytes_left) = (
        left(ask.max_jobs, held.jobs),
        left(ask.max_bytes, held.bytes),
    );
    let jobs = want
        .add
        .jobs
        .min(jobs_left)
        .min(bytes_left / ask.least.max(1));
    let bytes = want
        .add
        .bytes
        .min(bytes_left)
        .min(jobs.saturating_mul(ask.most));
    let fits = Usage { jobs, bytes };
    (fits != want.add && jobs > 0 && bytes >= ask.least).then_some(fits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(due: (u64, u64), least: u64, most: u64, bounds: (Option<u64>, Option<u64>)) -> Ask {
        Ask {
            ns: "ns".to_owned(),
            pool: "p".into(),
            due: Usage {
                jobs: due.0,
                bytes: due.1,
            },
            least,
            most,
            max_jobs: bounds.0,
            max_bytes: bounds.1,
        }
    }

    fn want(a: &Ask) -> BacklogAsk {
        BacklogAsk {
            add: a.due,
            max_jobs: a.max_jobs.unwrap_or(0),
            max_bytes: a.max_bytes.unwrap_or(0),
            stale_ms: 0,
        }
    }

    fn held(jobs: u64, bytes: u64) -> Usage {
        Usage { jobs, bytes }
    }

    #[test]
    fn what_fits_takes_the_room_left_and_what_its_jobs_may_take() {
        // Three fires of 100 to 300 bytes; room for 2 jobs.
        let a = ask((3, 600), 100, 300, (Some(5), None));
        let fit = fits(&a, &want(&a), held(3, 0)).expect("fits");
        assert_eq!((fit.jobs, fit.bytes), (2, 600));
        // Room for 250 bytes: two of the smallest at most, and 250 bytes.
        let a = ask((3, 600), 100, 300, (None, Some(1_000)));
        let fit = fits(&a, &want(&a), held(9, 750)).expect("fits");
        assert_eq!((fit.jobs, fit.bytes), (2, 250));
    }

    #[test]
    fn nothing_fits_without_room_for_the_smallest_fire_or_when_all_was_refused() {
        let a = ask((3, 600), 100, 300, (Some(5), None));
        assert_eq!(fits(&a, &want(&a), held(5, 0)), None, "no job left");
        let a = ask((3, 600), 100, 300, (None, Some(1_000)));
        assert_eq!(
            fits(&a, &want(&a), held(1, 950)),
            None,
            "less than the smallest"
        );
        // All of it fits: the refusal was over something else (a race).
        let a = ask((2, 200), 100, 100, (Some(5), None));
        assert_eq!(fits(&a, &want(&a), held(3, 0)), None);
    }

    #[test]
    fn a_room_without_max_bytes_is_unbounded_in_bytes() {
        let a = ask((2, 200), 100, 100, (Some(5), None));
        assert_eq!(room_of(&a, a.due).bytes, u64::MAX);
        let a = ask((2, 200), 100, 100, (None, Some(5_000)));
        assert_eq!(room_of(&a, a.due).bytes, 200);
    }
}
