//! The active mover: copies the jobs that moved slots still hold at their
//! old shard to the shard that holds them now, so that a drain finishes in
//! time proportional to its data rather than to its jobs' delays (or never,
//! for jobs nobody consumes).
//!
//! Every gateway runs [`run`]; a slot is moved by one at a time, the holder
//! of the slot's mover lease on the old shard (`sd:{<slot>}:mover`, taken
//! and renewed by each batch, expiring [`MoverOptions::lease`] after the last). A slot
//! moves only once nothing can write to it at the old shard any more
//! ([`movable`]): this gateway writes to the current layout, and every live
//! gateway knows that layout and writes to no layout that places the slot
//! at the old shard. Until then reads cover both shards, as they do while a
//! drain waits.
//!
//! A slot moves in batches of three steps (see `sundial_core`'s
//! `engine::mover`): take out at the old shard (each job waits in transit,
//! where peek and ack by id still find it), copy to the new one, and, once
//! the copy has had [`MoverOptions::settle`] to reach the new shard's disk
//! and replicas, let the transit entries go. A mover that crashes, loses
//! its lease or whose Redis restarts leaves transit entries behind; the
//! next holder of the lease copies them again first (copies already made
//! are skipped, for [`COPY_MEMORY`]), so every job ends up at the new shard
//! exactly once.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use serde::Serialize;
use sundial_core::{EngineError, InTransit, MoveMode, Shard, Taken};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::{
    Layout, LiveTopology, Pool,
    drain::{INSTANCE, KNOWS, known_by},
};

pub use sundial_core::COPY_MEMORY;

/// How the mover works.
#[derive(Debug, Clone)]
pub struct MoverOptions {
    /// Jobs per batch (each batch is one script call at each shard).
    pub batch: u32,
    /// Slots this gateway moves at once.
    pub slots_at_once: usize,
    /// How long a copy waits before the old shard lets its job go: long
    /// enough for the new shard to write it to disk (`appendfsync
    /// everysec` writes each second) so that a restart of that Redis
    /// cannot lose the only copy.
    pub settle: Duration,
    /// How long a mover's lease on a slot lasts unless a batch renews it:
    /// how soon another gateway goes on with a slot whose mover died.
    pub lease: Duration,
}

impl Default for MoverOptions {
    fn default() -> Self {
        Self {
            batch: 500,
            slots_at_once: 8,
            settle: Duration::from_secs(2),
            lease: Duration::from_secs(30),
        }
    }
}

/// What this gateway's mover is doing in one pool (`GET /drains`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct MoverStatus {
    /// `idle` (nothing drains), `moving`, or `waiting` (see `reason`).
    pub state: &'static str,
    /// Why it waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Slots this gateway is moving now.
    pub slots_moving: u64,
    /// Jobs this gateway copied in this pool since it started.
    pub jobs_moved: u64,
}

static STATUS: LazyLock<Mutex<BTreeMap<String, MoverStatus>>> = LazyLock::new(Mutex::default);

/// This gateway's mover, per pool.
pub fn status(pool: &str) -> MoverStatus {
    lock(&STATUS).get(pool).cloned().unwrap_or(MoverStatus {
        state: "idle",
        ..MoverStatus::default()
    })
}

fn set_status(pool: &str, f: impl FnOnce(&mut MoverStatus)) {
    let mut all = lock(&STATUS);
    let s = all.entry(pool.to_owned()).or_insert(MoverStatus {
        state: "idle",
        ..MoverStatus::default()
    });
    f(s);
    metrics::gauge!("sundial_mover_slots", "pool" => pool.to_owned()).set(s.slots_moving as f64);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A slot to move: the pool, the shard it left, the slot, and the shard
/// that holds it now.
#[derive(Debug, Clone)]
struct Move {
    pool: Arc<Pool>,
    from: Shard,
    slot: u32,
    to: Shard,
}

/// A slot to move, by name: pool, old shard, slot.
type SlotKey = (String, String, u32);

impl Move {
    fn key(&self) -> SlotKey {
        (
            self.pool.name().to_owned(),
            self.from.name().to_owned(),
            self.slot,
        )
    }
}

/// How a slot's move ended.
#[derive(Debug)]
enum Ended {
    /// The slot held nothing more at the old shard, and was cleared there.
    Cleared,
    /// Another gateway holds the slot's mover lease.
    Held(String),
    /// Stopped (topology change, shutdown, or a batch that took so long
    /// that the lease may have passed): what is in transit is picked up by
    /// the next holder of the lease.
    Stopped,
}

/// Moves the jobs of moved slots, checking every `every` (and at every
/// topology change) which slots may move, until `shutdown`.
pub async fn run(
    live: Arc<LiveTopology>,
    opts: MoverOptions,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut changes = live.changes();
    loop {
        changes.mark_unchanged();
        let topology = live.topology();
        let stop = shutdown.child_token();
        let mut tasks: JoinSet<(SlotKey, Result<Ended, EngineError>)> = JoinSet::new();
        let mut running: HashSet<SlotKey> = HashSet::new();
        // Slots cleared (or held elsewhere) under this topology: not
        // looked at again until it changes, or until the next tick for a
        // held one.
        let mut cleared: HashSet<SlotKey> = HashSet::new();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let more = loop {
            tokio::select! {
                _ = tick.tick() => {}
                Some(done) = tasks.join_next() => {
                    if let Ok((key, ended)) = done {
                        running.remove(&key);
                        set_status(&key.0, |s| s.slots_moving = s.slots_moving.saturating_sub(1));
                        match ended {
                            Ok(Ended::Cleared) => {
                                tracing::info!(pool = key.0, shard = key.1, slot = key.2, "moved slot cleared at its old shard");
                                cleared.insert(key);
                            }
                            Ok(Ended::Held(by)) => {
                                tracing::debug!(pool = key.0, shard = key.1, slot = key.2, by, "another gateway moves this slot");
                            }
                            Ok(Ended::Stopped) => {}
                            Err(e) => {
                                tracing::warn!(pool = key.0, shard = key.1, slot = key.2, error = %e, "moving a slot failed; tried again at the next check");
                            }
                        }
                    }
                    // A free place: look for more at once.
                }
                Ok(()) = changes.changed() => break true,
                () = shutdown.cancelled() => break false,
            }
            for pool in topology.pools() {
                if pool.draining().next().is_none() {
                    set_status(pool.name(), |s| {
                        s.state = "idle";
                        s.reason = None;
                    });
                    continue;
                }
                let moves = match movable(pool).await {
                    Ok(m) => m,
                    Err(reason) => {
                        set_status(pool.name(), |s| {
                            s.state = "waiting";
                            s.reason = Some(reason);
                        });
                        continue;
                    }
                };
                set_status(pool.name(), |s| {
                    s.state = "moving";
                    s.reason = None;
                });
                for m in moves {
                    if running.len() >= opts.slots_at_once.max(1) {
                        break;
                    }
                    let key = m.key();
                    if running.contains(&key) || cleared.contains(&key) {
                        continue;
                    }
                    running.insert(key.clone());
                    set_status(&key.0, |s| s.slots_moving += 1);
                    let (opts, stop) = (opts.clone(), stop.clone());
                    tasks.spawn(async move { (key, move_slot(m, &opts, &stop).await) });
                }
            }
        };
        stop.cancel();
        while let Some(done) = tasks.join_next().await {
            if let Ok((key, _)) = done {
                set_status(&key.0, |s| {
                    s.slots_moving = s.slots_moving.saturating_sub(1)
                });
            }
        }
        if !more {
            // Leave the leases to the other gateways at once (bounded: a
            // shard that is down lets them expire).
            let release = async {
                for pool in topology.pools() {
                    for (from, slot, _) in pool.moved() {
                        let _ = from.move_release(slot, &INSTANCE).await;
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(2), release).await;
            return;
        }
    }
}

/// The slots of `pool` that may move now, each once (its old shard, slot,
/// and the shard that holds it in the current layout), or why none may.
/// Every live gateway's view is read (this one's too): each must know the
/// current layout, and none may write to a layout that places the slot at
/// the old shard (a view lists, for a while after a reload, the layout it
/// wrote to before).
async fn movable(pool: &Arc<Pool>) -> Result<Vec<Move>, String> {
    if pool.write_layout() != pool.layout() {
        return Err(format!(
            "this gateway still writes to {} until every gateway knows {}",
            pool.write_layout(),
            pool.layout()
        ));
    }
    let mut written: HashSet<Layout> = HashSet::new();
    let mut answered = false;
    for shard in pool.shards() {
        let Ok(sets) = shard.live_view_sets().await else {
            continue;
        };
        answered = true;
        for (instance, entries) in sets {
            if !known_by(&entries).contains(pool.layout()) {
                return Err(format!(
                    "gateway {instance} does not know the current layout yet"
                ));
            }
            for e in entries.iter().filter(|e| !e.starts_with(KNOWS)) {
                match e.parse::<Layout>() {
                    Ok(l) => {
                        written.insert(l);
                    }
                    Err(_) => return Err(format!("gateway {instance} writes to {e:?}")),
                }
            }
        }
    }
    if !answered {
        return Err("no shard of the pool answers".to_owned());
    }
    let mut out: Vec<Move> = Vec::new();
    let mut seen: HashSet<(String, u32)> = HashSet::new();
    'slots: for (from, slot, _) in pool.moved() {
        if !seen.insert((from.name().to_owned(), slot)) {
            continue;
        }
        for w in &written {
            match pool.placed(w, slot) {
                None => {
                    return Err(format!(
                        "a gateway writes to {w}, which this one does not know"
                    ));
                }
                Some(Some(s)) if s.same(from) => continue 'slots,
                Some(_) => {}
            }
        }
        out.push(Move {
            pool: pool.clone(),
            from: from.clone(),
            slot,
            to: pool.home_of(slot).clone(),
        });
    }
    Ok(out)
}

/// Moves one slot until it is clear at its old shard, another gateway
/// holds it, or `stop`.
async fn move_slot(
    m: Move,
    opts: &MoverOptions,
    stop: &CancellationToken,
) -> Result<Ended, EngineError> {
    let Move {
        pool,
        from,
        slot,
        to,
    } = &m;
    let owner: &str = &INSTANCE;
    // Batches copied, waiting for `settle` before their entries go.
    let mut copied: VecDeque<(Instant, Vec<String>)> = VecDeque::new();
    // Entries left by an earlier mover are copied first.
    let mut recover = true;
    let mut cursor = "0".to_owned();
    loop {
        if stop.is_cancelled() {
            return Ok(Ended::Stopped);
        }
        while copied
            .front()
            .is_some_and(|(at, _)| at.elapsed() >= opts.settle)
        {
            if let Some((_, ids)) = copied.pop_front() {
                finish(pool, from, slot, &ids).await?;
            }
        }
        let mode = if recover {
            MoveMode::Pending
        } else {
            MoveMode::Take
        };
        let sent = Instant::now();
        let taken = match from
            .move_out(
                *slot,
                owner,
                opts.lease,
                mode,
                opts.batch,
                to.name(),
                &cursor,
            )
            .await?
        {
            Ok(t) => t,
            Err(holder) => return Ok(Ended::Held(holder)),
        };
        if taken.cleared {
            return Ok(Ended::Cleared);
        }
        let took = !taken.jobs.is_empty();
        if took {
            // A batch that took half the lease may belong to another mover
            // by now: leave it in transit for whoever holds the lease.
            if sent.elapsed() > opts.lease / 2 {
                return Ok(Ended::Stopped);
            }
            let n = copy(pool, *slot, &taken).await?;
            set_status(pool.name(), |s| s.jobs_moved += n);
            metrics::counter!("sundial_mover_jobs_total", "pool" => pool.name().to_owned())
                .increment(n);
            copied.push_back((
                Instant::now(),
                taken.jobs.into_iter().map(|j| j.id).collect(),
            ));
        }
        cursor = taken.cursor;
        if cursor != "0" {
            continue;
        }
        if recover {
            recover = false;
            continue;
        }
        if copied.is_empty() && !took {
            // Nothing to take and nothing copied, yet not clear: entries in
            // transit that this mover did not make (a mover that lost its
            // lease, marks of jobs acked in transit).
            recover = true;
        }
        if !took {
            let wait = copied.front().map_or(opts.settle, |(at, _)| {
                opts.settle.saturating_sub(at.elapsed())
            });
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stop.cancelled() => return Ok(Ended::Stopped),
            }
        }
    }
}

/// Step 2: copies the jobs of a batch to the shards their entries name.
/// Returns how many were copied (not skipped).
async fn copy(pool: &Pool, slot: u32, taken: &Taken) -> Result<u64, EngineError> {
    let mut by_dest: HashMap<&str, Vec<InTransit>> = HashMap::new();
    for j in &taken.jobs {
        if let Some(d) = &j.dest {
            by_dest.entry(d.as_str()).or_default().push(j.clone());
        }
    }
    let mut n = 0;
    for (dest, jobs) in by_dest {
        let Some(to) = pool.shards().find(|s| s.name() == dest) else {
            tracing::warn!(
                pool = pool.name(),
                slot,
                dest,
                "jobs in transit to a shard the config no longer lists stay in transit"
            );
            continue;
        };
        n += to
            .move_in(slot, taken.now_ms, &jobs, COPY_MEMORY)
            .await?
            .copied;
    }
    Ok(n)
}

/// Step 3: lets the transit entries of a settled batch go, and deletes the
/// copies of jobs acked in transit (wherever the slot may be now but the
/// old shard), then their marks.
async fn finish(pool: &Pool, from: &Shard, slot: &u32, ids: &[String]) -> Result<(), EngineError> {
    let deleted = from.move_done(*slot, ids).await?;
    if deleted.is_empty() {
        return Ok(());
    }
    for (id, queue) in &deleted {
        for shard in pool.locations(*slot) {
            if !shard.same(from) {
                shard.delete(*slot, queue, id).await?;
            }
        }
    }
    let ids: Vec<String> = deleted
        .iter()
        .map(|(id, _)| id.as_str().to_owned())
        .collect();
    from.move_forget(*slot, &ids).await
}
