//! The active mover: copies the jobs that moved slots still hold at their
//! old shard to the shard that holds them now, so that a drain finishes in
//! time proportional to its data rather than to its jobs' delays (or never,
//! for jobs nobody consumes).
//!
//! Every gateway runs [`run`]; a slot is moved by one at a time, the holder
//! of the slot's mover lease on the old shard (`sd:{<slot>}:mover`, taken
//! and renewed by each batch, expiring [`MoverOptions::lease`] after the
//! last). A slot
//! moves only once nothing can write to it at the old shard any more
//! ([`movable`]): this gateway writes to the current layout, and every live
//! gateway knows that layout and writes to no layout that places the slot
//! at the old shard. Until then reads cover both shards, as they do while a
//! drain waits.
//!
//! A slot moves in batches of four steps (see `sundial_core`'s
//! `engine::mover`), [`MoverOptions::settle`] apart so that each step's
//! writes are on the shards' disks (and replicas) before the next relies on
//! them: take out at the old shard (each job waits in transit, where peek
//! and ack by id still find it), read again and copy to the new one
//! (marking each copy), let the transit entries go, remove the marks. A
//! mover that crashes, loses its lease or whose Redis restarts leaves
//! transit entries behind; the next holder of the lease reads them back
//! and copies them again first (copies already made are skipped by their
//! marks), so every job ends up at the new shard once. A namespace that
//! moves to another pool is carried the same way ([`crate::homes`]), and a
//! sweep finishes transit entries that no move would (a slot moved back).

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use serde::Serialize;
use sundial_core::{EngineError, InTransit, JobId, Mark, MoveMode, PageSize, Shard, Taken, keys};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::{
    Layout, LiveTopology, Pool, Topology,
    drain::{HOME, INSTANCE, KNOWS, known_by},
    homes::{Home, MoveState},
    tokens::TokenStore,
};

/// How the mover works.
#[derive(Debug, Clone)]
pub struct MoverOptions {
    /// Jobs per batch (each batch is one script call at each shard).
    pub batch: u32,
    /// Slots this gateway moves at once.
    pub slots_at_once: usize,
    /// How long each batch waits between its steps: long enough for what
    /// one step wrote to reach the shard's disk (`appendfsync everysec`
    /// writes each second) before the next relies on it, so that a restart
    /// of either Redis cannot lose the only copy of a job, or bring back
    /// one that was taken out.
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
    /// Jobs whose move this gateway completed in this pool since it started.
    pub jobs_moved: u64,
}

static STATUS: LazyLock<Mutex<BTreeMap<String, MoverStatus>>> = LazyLock::new(Mutex::default);
/// Jobs this gateway moved per namespace moving out of a pool: (pool it
/// leaves, namespace) → jobs.
static NAMESPACES: LazyLock<Mutex<HashMap<(String, String), u64>>> = LazyLock::new(Mutex::default);

/// Jobs this gateway moved of namespace `ns` out of pool `from`.
pub fn namespace_moved(from: &str, ns: &str) -> u64 {
    lock(&NAMESPACES)
        .get(&(from.to_owned(), ns.to_owned()))
        .copied()
        .unwrap_or(0)
}

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

/// A slot to move: the pool, the shard it left, the slot, and where its
/// jobs go: the shard that holds the slot now (`dest` is its name), or,
/// for a namespace moving to another pool, that pool (`dest` is
/// `@<pool>`, and only the queues that start with `only`, `<ns>/`, move).
/// Without `take`, only what is in transit is finished (a sweep).
#[derive(Debug, Clone)]
struct Move {
    topology: Arc<Topology>,
    pool: Arc<Pool>,
    from: Shard,
    slot: u32,
    dest: String,
    only: String,
    take: bool,
    /// Which namespace move this is (when it began `moving`): a later move
    /// of the same namespace walks every place again.
    epoch: u64,
}

/// A slot to move, by name: pool, old shard, slot, queue prefix, whether
/// it takes jobs (a sweep does not), and the namespace move's epoch.
type SlotKey = (String, String, u32, String, bool, u64);

impl Move {
    fn key(&self) -> SlotKey {
        (
            self.pool.name().to_owned(),
            self.from.name().to_owned(),
            self.slot,
            self.only.clone(),
            self.take,
            self.epoch,
        )
    }
}

/// Every this many checks, each shard's slots are swept for transit
/// entries that no move will finish (as many as there is room for) (a move cut short by a reload that
/// moved the slot back, say).
const SWEEP_EVERY: u64 = 12;

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
    tokens: Arc<TokenStore>,
    opts: MoverOptions,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut changes = live.changes();
    // Counted across topology changes: sweeps stay `SWEEP_EVERY` checks
    // apart however often the config reloads.
    let (mut ticks, mut swept) = (0u64, 0u64);
    loop {
        changes.mark_unchanged();
        let topology = live.topology();
        let stop = shutdown.child_token();
        let mut slots = Slots::new(&opts, &stop);
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Per namespace move: when this gateway first saw every gateway
        // write to the new pool (its own clock).
        let mut all_writing: HashMap<(String, String, u64), Instant> = HashMap::new();
        let more = loop {
            tokio::select! {
                _ = tick.tick() => {
                    ticks += 1;
                    slots.resting.clear();
                }
                Some(done) = slots.tasks.join_next_with_id() => {
                    let Some((key, ended)) = slots.finished(done) else {
                        continue;
                    };
                    match ended {
                        // A sweep's slot is swept again whenever it holds
                        // entries (a gateway on an older config may add
                        // some); a move's, not under this topology.
                        Some(Ok(Ended::Cleared)) if !key.4 => {}
                        Some(Ok(Ended::Cleared)) => {
                            tracing::info!(pool = key.0, shard = key.1, slot = key.2, "moved slot cleared at its old shard");
                            slots.cleared.insert(key);
                        }
                        Some(Ok(Ended::Held(by))) => {
                            tracing::debug!(pool = key.0, shard = key.1, slot = key.2, by, "another gateway moves this slot");
                            slots.resting.insert(key);
                        }
                        Some(Ok(Ended::Stopped)) => {
                            slots.resting.insert(key);
                        }
                        Some(Err(e)) => {
                            tracing::warn!(pool = key.0, shard = key.1, slot = key.2, error = %e, "moving a slot failed; tried again at the next check");
                            slots.resting.insert(key);
                        }
                        None => {
                            tracing::error!(pool = key.0, shard = key.1, slot = key.2, "moving a slot panicked; tried again at the next check");
                            slots.resting.insert(key);
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
                let (moves, held_back) = match movable(&topology, pool).await {
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
                    s.state = if moves.is_empty() && held_back > 0 {
                        "waiting"
                    } else {
                        "moving"
                    };
                    s.reason = (held_back > 0).then(|| {
                        format!(
                            "{held_back} moved slot(s) wait until their new shard answers and holds \
                             none of their jobs in transit from an earlier move (a sweep finishes \
                             those once the lease of the mover that left them expires)"
                        )
                    });
                });
                slots.start(moves, opts.slots_at_once.max(1));
            }
            // Once per `SWEEP_EVERY` ticks (not again when a task ends), with
            // one place beyond `slots_at_once`: moves keep the others busy
            // through a drain, and a slot held back for its transit entries
            // waits for a sweep.
            if ticks % SWEEP_EVERY == 1 && swept != ticks {
                swept = ticks;
                slots.start(sweep(&topology).await, opts.slots_at_once.max(1) + 1);
            }
            // Namespaces moving to another pool.
            for (token_pool, ns, home) in tokens.homes() {
                if home.state == MoveState::Moved {
                    continue;
                }
                let moves = match namespace_step(
                    &topology,
                    &tokens,
                    &token_pool,
                    &ns,
                    &home,
                    &mut all_writing,
                )
                .await
                {
                    Ok(Some(moves)) => moves,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(pool = token_pool, namespace = ns, error = %e, "a namespace's move cannot go on now; tried again at the next check");
                        continue;
                    }
                };
                if moves.iter().all(|m| slots.cleared.contains(&m.key())) {
                    match namespace_left(&moves, &ns).await {
                        Ok(false) => {}
                        Ok(true) => {
                            // Walk them all again.
                            slots
                                .cleared
                                .retain(|k| !moves.iter().any(|m| m.key() == *k));
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(pool = token_pool, namespace = ns, error = %e, "cannot count what a namespace's move left");
                            continue;
                        }
                    }
                    let mut done = home.clone();
                    done.state = MoveState::Moved;
                    done.since_ms = unix_ms();
                    match tokens
                        .set_home(&token_pool, &ns, Some(&done), Some(&home))
                        .await
                    {
                        Ok(true) => tracing::info!(
                            pool = token_pool,
                            namespace = ns,
                            to = home.to,
                            "namespace moved: its jobs are all in its new pool"
                        ),
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(pool = token_pool, namespace = ns, error = %e, "cannot mark a namespace moved")
                        }
                    }
                    continue;
                }
                slots.start(moves, opts.slots_at_once.max(1));
            }
        };
        stop.cancel();
        let mut held: Vec<(Shard, u32)> = Vec::new();
        while let Some(done) = slots.tasks.join_next_with_id().await {
            if let Some((key, _)) = slots.finished(done)
                && let Some(shard) = topology
                    .pool(&key.0)
                    .and_then(|p| p.shards().find(|s| s.name() == key.1))
            {
                held.push((shard.clone(), key.2));
            }
        }
        if !more {
            // Leave the leases to the other gateways at once (bounded: a
            // shard that is down lets them expire).
            let release = async {
                for (shard, slot) in &held {
                    let _ = shard.mover().release(*slot, &INSTANCE).await;
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(2), release).await;
            return;
        }
    }
}

/// The slots whose shards hold transit entries, to finish (each entry
/// goes where it is bound, or to the slot's shard now: see [`place_of`]).
async fn sweep(topology: &Arc<Topology>) -> Vec<Move> {
    let mut out = Vec::new();
    for pool in topology.pools() {
        for (shard, slots) in pool.groups() {
            let Ok(counts) = shard.slots().transit(slots).await else {
                continue;
            };
            for (&slot, n) in slots.iter().zip(counts) {
                if n > 0 {
                    out.push(Move {
                        topology: topology.clone(),
                        pool: pool.clone(),
                        from: shard.clone(),
                        slot,
                        dest: pool.home_of(slot).name().to_owned(),
                        only: String::new(),
                        take: false,
                        epoch: 0,
                    });
                }
            }
        }
    }
    out
}

/// The slot moves of one topology: those running, and those not to start
/// again yet.
struct Slots {
    tasks: JoinSet<Result<Ended, EngineError>>,
    /// The slot each running task moves.
    running: HashMap<tokio::task::Id, SlotKey>,
    /// Cleared under this topology: not looked at again until it changes.
    cleared: HashSet<SlotKey>,
    /// Another gateway moves them, or their move failed or stopped: not
    /// started again before the next tick (else a gateway without the lease
    /// would ask for it again as fast as Redis answers).
    resting: HashSet<SlotKey>,
    opts: MoverOptions,
    stop: CancellationToken,
}

impl Slots {
    fn new(opts: &MoverOptions, stop: &CancellationToken) -> Self {
        Self {
            tasks: JoinSet::new(),
            running: HashMap::new(),
            cleared: HashSet::new(),
            resting: HashSet::new(),
            opts: opts.clone(),
            stop: stop.clone(),
        }
    }

    /// Starts moving each of `moves` in turn while fewer than `room` run,
    /// but not a slot that moves already (as a slot's, a namespace's or a
    /// sweep's move: they share the slot's lease and transit entries), nor
    /// one cleared or resting.
    fn start(&mut self, moves: Vec<Move>, room: usize) {
        for m in moves {
            if self.running.len() >= room {
                return;
            }
            let key = m.key();
            let busy = self
                .running
                .values()
                .any(|k| (&k.0, &k.1, k.2) == (&key.0, &key.1, key.2));
            if busy || self.cleared.contains(&key) || self.resting.contains(&key) {
                continue;
            }
            set_status(&key.0, |s| s.slots_moving += 1);
            let (opts, stop) = (self.opts.clone(), self.stop.clone());
            let task = self
                .tasks
                .spawn(async move { move_slot(m, &opts, &stop).await });
            self.running.insert(task.id(), key);
        }
    }

    /// A task that ended: its slot, no longer running, and how its move
    /// ended (`None`: it panicked). `None` for a task this does not know.
    fn finished(
        &mut self,
        done: Result<(tokio::task::Id, Result<Ended, EngineError>), tokio::task::JoinError>,
    ) -> Option<(SlotKey, Option<Result<Ended, EngineError>>)> {
        let (id, ended) = match done {
            Ok((id, ended)) => (id, Some(ended)),
            Err(e) => (e.id(), None),
        };
        let key = self.running.remove(&id)?;
        set_status(&key.0, |s| {
            s.slots_moving = s.slots_moving.saturating_sub(1)
        });
        Some((key, ended))
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Every queue of namespace `ns` in `pool`: those whose jobs any slot of
/// the pool (or an old shard of a moved slot) has held, by the slots'
/// queue tables, and those of the pool's queue index (an index entry is
/// added in the background, and can be missing).
pub async fn namespace_queues(
    pool: &Pool,
    tokens: &TokenStore,
    ns: &str,
) -> Result<std::collections::BTreeSet<String>, EngineError> {
    let prefix = format!("{ns}/");
    let mut queues = std::collections::BTreeSet::new();
    let mut add = |names: std::collections::BTreeSet<String>| {
        queues.extend(
            names
                .into_iter()
                .filter_map(|q| q.strip_prefix(&prefix).map(str::to_owned)),
        );
    };
    for (shard, slots) in pool.groups() {
        add(shard.slots().queue_names(slots).await?);
    }
    for (shard, slot, _) in pool.moved() {
        add(shard.slots().queue_names(&[slot]).await?);
    }
    queues.extend(
        tokens
            .redis()
            .admin()
            .all_indexed_queues(pool.name(), ns)
            .await?,
    );
    Ok(queues)
}

/// One step of the move of namespace `ns` of `token_pool` (see
/// [`crate::homes`]): from `announced` to `moving` once every live gateway
/// (its view in the shards of either pool) knows the move; then,
/// once every live gateway writes to the new pool, and has for
/// [`crate::drain::WRITE_GRACE`] by this gateway's clock, and the old pool
/// does not drain (its slot mover would carry the namespace's jobs between
/// its own shards), the places that may hold its jobs in the old pool, to
/// move (`Some`). `None`: not yet.
async fn namespace_step(
    topology: &Arc<Topology>,
    tokens: &TokenStore,
    token_pool: &str,
    ns: &str,
    home: &Home,
    all_writing: &mut HashMap<(String, String, u64), Instant>,
) -> Result<Option<Vec<Move>>, EngineError> {
    let (Some(from), Some(to)) = (topology.pool(&home.from), topology.pool(&home.to)) else {
        return Ok(None);
    };
    let knows = format!("{HOME}{token_pool}/{ns} {} ", home.to);
    let moving = format!("{knows}{}", MoveState::Moving.as_str());
    // Every live gateway that serves either pool (its view is in that
    // pool's shards) must know the move: one whose config lacks a pool
    // names no move in its view, and so holds it.
    let mut all_know = true;
    let mut all_write = true;
    for shard in from.shards().chain(to.shards()) {
        for (_, entries) in shard.layouts().live_view_sets().await? {
            all_know &= entries.iter().any(|e| e.starts_with(&knows));
            all_write &= entries.contains(&moving);
        }
    }
    match home.state {
        MoveState::Announced if all_know => {
            let mut next = home.clone();
            next.state = MoveState::Moving;
            next.since_ms = unix_ms();
            if tokens
                .set_home(token_pool, ns, Some(&next), Some(home))
                .await?
            {
                tracing::info!(
                    pool = token_pool,
                    namespace = ns,
                    to = home.to,
                    "every gateway knows the namespace's move: writes go to its new pool"
                );
            }
            Ok(None)
        }
        MoveState::Moving if all_write => {
            let key = (token_pool.to_owned(), ns.to_owned(), home.since_ms);
            let seen = *all_writing.entry(key).or_insert_with(Instant::now);
            if seen.elapsed() < crate::drain::WRITE_GRACE || from.draining().next().is_some() {
                return Ok(None);
            }
            // The namespace's queues, from the queue tables of every slot
            // of the old pool (an index entry can be missing), and its index.
            let prefix = format!("{ns}/");
            let queues = namespace_queues(from, tokens, ns).await?;
            // The new pool lists them (as a publish there would add them).
            let listed: Vec<String> = queues.iter().cloned().collect();
            tokens
                .redis()
                .admin()
                .index_queues(to.name(), ns, &listed)
                .await?;
            let mut at: BTreeMap<(String, u32), Move> = BTreeMap::new();
            for q in &queues {
                for (shard, slot) in from.queue_places(ns, q) {
                    at.entry((shard.name().to_owned(), slot))
                        .or_insert_with(|| Move {
                            topology: topology.clone(),
                            pool: from.clone(),
                            from: shard.clone(),
                            slot,
                            dest: format!("@{}", home.to),
                            only: prefix.clone(),
                            take: true,
                            epoch: home.since_ms,
                        });
                }
            }
            Ok(Some(at.into_values().collect()))
        }
        _ => Ok(None),
    }
}

/// Whether the old pool still holds any of namespace `ns`'s jobs at the
/// places of `moves`: its queues' counts there, and entries in transit.
async fn namespace_left(moves: &[Move], ns: &str) -> Result<bool, EngineError> {
    let prefix = format!("{ns}/");
    for m in moves {
        if m.from
            .slots()
            .transit(&[m.slot])
            .await?
            .first()
            .copied()
            .unwrap_or(0)
            > 0
        {
            return Ok(true);
        }
        let counts = m.from.slots().counts(&[m.slot]).await?;
        if counts
            .iter()
            .any(|(q, c)| q.starts_with(&prefix) && c.iter().any(|n| *n > 0))
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The slots of `pool` that may move now, each once (its old shard, slot,
/// and the shard that holds it in the current layout), with how many more
/// are held back (see below), or why none may. Every live gateway's view
/// is read (this one's too): each must know the current layout, and none
/// may write to a layout that places the slot at the old shard (a view
/// lists, for a while after a reload, the layout it wrote to before).
async fn movable(topology: &Arc<Topology>, pool: &Arc<Pool>) -> Result<(Vec<Move>, usize), String> {
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
        let Ok(sets) = shard.layouts().live_view_sets().await else {
            continue;
        };
        answered = true;
        for (instance, entries) in sets {
            if !known_by(&entries).contains(pool.layout()) {
                return Err(format!(
                    "gateway {instance} does not know the current layout yet"
                ));
            }
            for e in entries
                .iter()
                .filter(|e| !e.starts_with(KNOWS) && !e.starts_with(HOME))
            {
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
            topology: topology.clone(),
            pool: pool.clone(),
            from: from.clone(),
            slot,
            dest: pool.home_of(slot).name().to_owned(),
            only: String::new(),
            take: true,
            epoch: 0,
        });
    }
    // A slot that moved back to a shard that still holds some of its jobs
    // in transit from the move away (a mover died mid-batch) waits until a
    // sweep has sent those where they were bound, which still holds the
    // slot: a copy made there before comes back with the rest, and a job
    // acked in transit loses its copy there first. Moving the slot back
    // before would bring such jobs back twice, or back after their ack.
    let mut by_dest: HashMap<String, (&Shard, Vec<u32>)> = HashMap::new();
    for m in &out {
        let home = pool.home_of(m.slot);
        by_dest
            .entry(home.name().to_owned())
            .or_insert_with(|| (home, Vec::new()))
            .1
            .push(m.slot);
    }
    let mut held_back: HashSet<(String, u32)> = HashSet::new();
    for (name, (home, slots)) in by_dest {
        let counts = home.slots().transit(&slots).await.unwrap_or_default();
        for (i, &slot) in slots.iter().enumerate() {
            // Unanswered: held back too, until the next check.
            if counts.get(i).is_none_or(|n| *n > 0) {
                held_back.insert((name.clone(), slot));
            }
        }
    }
    out.retain(|m| !held_back.contains(&(m.dest.clone(), m.slot)));
    Ok((out, held_back.len()))
}

/// Batches of one slot in flight at once (each waits `settle` between
/// steps, so several keep the slot moving).
const IN_FLIGHT: usize = 4;

/// The copy marks a batch left at the new shards: (shard, slot, ids).
type Marks = Vec<(Shard, u32, Vec<Mark>)>;

/// Moves one slot until it is clear at its old shard (or holds none of
/// the namespace's jobs, for a namespace's move; or, for a sweep, nothing
/// in transit), another gateway holds it, or `stop`. Each batch goes
/// through the four steps of `sundial_core`'s `engine::mover`, `settle`
/// apart, so that what each step wrote is on disk (and replicas) before the
/// next relies on it.
async fn move_slot(
    m: Move,
    opts: &MoverOptions,
    stop: &CancellationToken,
) -> Result<Ended, EngineError> {
    let owner: &str = &INSTANCE;
    let settle = opts.settle;
    // Step 1 done: ids whose entries settle at the old shard.
    let mut taken: VecDeque<(Instant, Vec<String>)> = VecDeque::new();
    // Step 2 done: ids to let go, and the marks they left.
    let mut copied: VecDeque<(Instant, Vec<String>, Marks)> = VecDeque::new();
    // Step 3 done: marks to remove.
    let mut letgo: VecDeque<(Instant, Marks)> = VecDeque::new();
    // Entries left by an earlier mover are read back first.
    let mut recover = true;
    let mut cursor = "0".to_owned();
    // Whether the walk that began at cursor 0 took anything.
    let mut walk_took = false;
    // The walk found nothing to take: wait for the batches in flight.
    let mut exhausted = false;
    let mut in_transit = 0;
    // Times this run read back entries it found in transit.
    let mut rereads = 0;
    // Jobs per take: `batch`, fewer when their bodies are large.
    let mut page = PageSize::new(opts.batch);
    loop {
        if stop.is_cancelled() {
            return Ok(Ended::Stopped);
        }
        let due = |at: &Instant| at.elapsed() >= settle;
        // Step 4.
        while letgo.front().is_some_and(|(at, _)| due(at)) {
            if let Some((_, marks)) = letgo.pop_front() {
                for (shard, slot, marks) in &marks {
                    shard.mover().unmark(*slot, marks).await?;
                }
            }
        }
        // Step 3.
        while copied.front().is_some_and(|(at, _, _)| due(at)) {
            if let Some((_, ids, marks)) = copied.pop_front() {
                let n = finish(&m, &ids).await?;
                count_moved(&m, n);
                letgo.push_back((Instant::now(), marks));
            }
        }
        // Step 2.
        while taken.front().is_some_and(|(at, _)| due(at)) {
            let Some((_, ids)) = taken.pop_front() else {
                break;
            };
            let sent = Instant::now();
            let read = match m.from.mover().read(m.slot, owner, opts.lease, &ids).await? {
                Ok(t) => t,
                Err(holder) => return Ok(Ended::Held(holder)),
            };
            // A copy sent long after its read may race another mover's
            // steps 3 and 4 (the lease may have passed, each step waits
            // `settle`): leave it in transit for whoever holds the lease.
            if sent.elapsed() > (opts.lease / 2).min(settle / 2) {
                tracing::warn!(
                    pool = m.pool.name(),
                    shard = m.from.name(),
                    slot = m.slot,
                    took_ms = sent.elapsed().as_millis() as u64,
                    "a batch's read took too long to copy it safely; it stays in transit for the next try"
                );
                return Ok(Ended::Stopped);
            }
            let (done, marks) = copy(&m, &read).await?;
            copied.push_back((Instant::now(), done, marks));
        }
        // Step 1, a few batches ahead.
        if taken.len() < IN_FLIGHT && !exhausted {
            let mode = if recover {
                MoveMode::Pending
            } else {
                MoveMode::Take
            };
            let t = match m
                .from
                .mover()
                .take(
                    m.slot,
                    owner,
                    opts.lease,
                    mode,
                    page.get(),
                    &m.dest,
                    &cursor,
                    &m.only,
                )
                .await?
            {
                Ok(t) => t,
                Err(holder) => return Ok(Ended::Held(holder)),
            };
            if t.cleared {
                // The running totals its queues counted here go on where
                // the slot is now (statistics: lost, not doubled, should
                // this fail or the gateway die first).
                let to = m.pool.home_of(m.slot);
                if !to.same(&m.from)
                    && let Err(e) = to.mover().add_totals(m.slot, &t.totals).await
                {
                    tracing::warn!(pool = m.pool.name(), shard = to.name(), slot = m.slot, error = %e, "a moved slot's running totals were lost");
                }
                return Ok(Ended::Cleared);
            }
            in_transit = t.in_transit;
            page.saw(t.jobs.len(), t.jobs.iter().map(InTransit::size).sum());
            let took = !t.jobs.is_empty();
            if took {
                taken.push_back((Instant::now(), t.jobs.into_iter().map(|j| j.id).collect()));
                walk_took |= !recover;
            }
            cursor = t.cursor;
            if cursor != "0" {
                continue;
            }
            if recover {
                recover = false;
                walk_took = false;
                if !m.take {
                    exhausted = true;
                }
                continue;
            }
            if !walk_took {
                exhausted = true;
            }
            walk_took = false;
            continue;
        }
        if exhausted && taken.is_empty() && copied.is_empty() && letgo.is_empty() {
            // Everything this mover took is through. A namespace's move (or
            // a sweep) ends here once nothing of its is left; a slot's
            // move takes again, to clear the slot.
            if in_transit > 0 && !recover {
                if rereads >= 2 {
                    // What is left cannot be placed from here (bound to a
                    // pool this gateway's config lacks): leave it, and the
                    // lease, to a gateway that can.
                    m.from.mover().release(m.slot, owner).await?;
                    return Ok(Ended::Stopped);
                }
                // Entries this mover did not make (a mover that lost its
                // lease, marks of jobs acked in transit): read them back.
                rereads += 1;
                recover = true;
                exhausted = false;
                in_transit = 0;
                continue;
            }
            if !m.take || !m.only.is_empty() {
                // The slot stays (others' jobs); its lease goes at once, so
                // that a drain waiting on it need not wait for it to expire.
                m.from.mover().release(m.slot, owner).await?;
                return Ok(Ended::Cleared);
            }
            exhausted = false;
            continue;
        }
        // Sleep until the next batch is due for its next step.
        let next = [
            taken.front().map(|(at, _)| *at),
            copied.front().map(|(at, _, _)| *at),
            letgo.front().map(|(at, _)| *at),
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(settle, |at| settle.saturating_sub(at.elapsed()));
        tokio::select! {
            () = tokio::time::sleep(next) => {}
            () = stop.cancelled() => return Ok(Ended::Stopped),
        }
    }
}

/// Where the copy of job `j` goes, in the slot's pool: the shard its entry
/// names if that shard still holds the slot in some layout, else (the
/// shard left, or the slot moved back) the shard that holds the slot now;
/// or, for an entry bound to `@<pool>` (a namespace's move), the shard and
/// slot that pool gives the job's queue and lane. `None`: that pool is not
/// in this gateway's config.
fn place_of<'a>(m: &'a Move, j: &InTransit) -> Option<(&'a Shard, u32)> {
    let dest = j.dest.as_str();
    match dest.strip_prefix('@') {
        Some(pool) => {
            let pool = m.topology.pool(pool)?;
            let (ns, queue) = keys::parse_qualified(&j.queue)?;
            let id = JobId::parse(&j.id).ok()?;
            let slot = pool.slot_of(ns, queue, id.lane(pool.lanes()));
            Some((pool.shard_for(slot), slot))
        }
        None => {
            let held = m.pool.locations(m.slot);
            let shard = held
                .iter()
                .find(|s| s.name() == dest)
                .copied()
                .unwrap_or_else(|| m.pool.home_of(m.slot));
            Some((shard, m.slot))
        }
    }
}

/// Counts `n` jobs whose move `m` completed (step 3), in the status and
/// metrics.
fn count_moved(m: &Move, n: u64) {
    if n == 0 {
        return;
    }
    let pool = m.pool.name();
    set_status(pool, |s| s.jobs_moved += n);
    metrics::counter!("sundial_mover_jobs_total", "pool" => pool.to_owned()).increment(n);
    if let Some(ns) = m.only.strip_suffix('/') {
        *lock(&NAMESPACES)
            .entry((pool.to_owned(), ns.to_owned()))
            .or_default() += n;
        metrics::counter!("sundial_namespace_moved_jobs_total", "pool" => pool.to_owned(), "namespace" => ns.to_owned()).increment(n);
    }
}

/// Step 2: copies the jobs read back where their entries send them.
/// Returns the ids whose entries may go (copied, there already, or acked
/// in transit; not those bound to a pool this gateway does not know, which
/// stay in transit), and the marks the copies left.
async fn copy(m: &Move, read: &Taken) -> Result<(Vec<String>, Marks), EngineError> {
    let mut by_place: HashMap<(String, u32), (&Shard, Vec<InTransit>)> = HashMap::new();
    let mut done = Vec::new();
    for j in &read.jobs {
        if j.acked {
            done.push(j.id.clone());
            continue;
        }
        let Some((shard, slot)) = place_of(m, j) else {
            tracing::warn!(
                pool = m.pool.name(),
                slot = m.slot,
                dest = j.dest,
                "a job in transit to a pool this gateway's config does not list stays in transit"
            );
            continue;
        };
        by_place
            .entry((shard.name().to_owned(), slot))
            .or_insert_with(|| (shard, Vec::new()))
            .1
            .push(j.clone());
    }
    let mut marks = Vec::new();
    for ((_, slot), (to, jobs)) in by_place {
        to.mover().store(slot, read.now_ms, &jobs, true).await?;
        done.extend(jobs.iter().map(|j| j.id.clone()));
        marks.push((to.clone(), slot, jobs.iter().map(InTransit::mark).collect()));
    }
    Ok((done, marks))
}

/// Step 3: lets the transit entries of a settled batch go, and deletes the
/// copies of jobs acked in transit (wherever the copy may be: the slot's
/// other locations in its pool, and, for a job bound to another pool (a
/// namespace's move), every place that pool gives the job), then their
/// marks. A mark bound to a pool this gateway's config lacks stays, for a
/// gateway that has it. Returns how many jobs' moves it completed.
async fn finish(m: &Move, ids: &[String]) -> Result<u64, EngineError> {
    let (went, deleted) = m.from.mover().done(m.slot, ids).await?;
    let mut forget = Vec::with_capacity(deleted.len());
    for (id, mark) in &deleted {
        let mut places: Vec<(&Shard, u32)> = m
            .pool
            .locations(m.slot)
            .into_iter()
            .filter(|s| !s.same(&m.from))
            .map(|s| (s, m.slot))
            .collect();
        if let Some(to) = mark.dest.strip_prefix('@') {
            let (Some(pool), Some((ns, q))) =
                (m.topology.pool(to), keys::parse_qualified(&mark.queue))
            else {
                continue;
            };
            let slot = pool.slot_of(ns, q, id.lane(pool.lanes()));
            places.extend(pool.locations(slot).into_iter().map(|s| (s, slot)));
        }
        for (shard, slot) in places {
            shard.jobs().delete(slot, &mark.queue, id).await?;
        }
        forget.push(id.as_str().to_owned());
    }
    m.from.mover().forget(m.slot, &forget).await?;
    Ok(went)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_move_that_panics_frees_its_place_and_rests() {
        let mut slots = Slots::new(&MoverOptions::default(), &CancellationToken::new());
        let key: SlotKey = ("p".into(), "a".into(), 7, String::new(), true, 0);
        let task = slots.tasks.spawn(async { panic!("a bug in a move") });
        slots.running.insert(task.id(), key.clone());
        set_status("p", |s| s.slots_moving += 1);
        let done = slots.tasks.join_next_with_id().await.expect("a task");
        let (ended, outcome) = slots.finished(done).expect("its slot");
        assert_eq!(ended, key);
        assert!(outcome.is_none(), "a panic has no outcome");
        assert!(slots.running.is_empty());
        assert_eq!(status("p").slots_moving, 0);
    }
}
