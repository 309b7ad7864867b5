//! The admin store: the admin Redis's tables, each typed, every one
//! replicated into every gateway on one mechanism ([`replica`]).
//!
//! | table | hash | what a row holds | file |
//! | --- | --- | --- | --- |
//! | tokens | `sd:tokens` | a token's record, by `<pool>/<ns>/sha256:<digest>` | [`tokens`] ([`records`]) |
//! | limits | `sd:limits` | a token's rate limit, by its token's field | [`limits`] |
//! | homes | `sd:homes` | where a namespace's tokens are served from, by `<pool>/<ns>` | [`homes`] |
//! | quotas | `sd:quotas` | the quota fields a namespace sets over its pool's, by `<pool>/<ns>` | [`quotas`] |
//! | policies | `sd:policies` | a queue's retry policy, by `<pool>/<ns>/<queue>` | [`policies`] |
//! | pauses | `sd:pauses` | a pause, by `<pool>/<ns>/<queue>` or `<pool>/<ns>` | [`pauses`] |
//! | schedules | `sd:schedules` | a schedule's definition, by `<pool>/<ns>/<queue>/<name>` | [`schedules`] |
//!
//! The replicated tables share one version: a change takes effect in every
//! gateway within one poll ([`POLL`]), and an admin Redis that lost them
//! gets a gateway's copy back. The queue index ([`queues`]) lives in the
//! same Redis but is not replicated: it is paged from Redis, rebuilt from
//! the pools' slots, and swept of queues that hold no job
//! ([`queue_sweep`]).
//!
//! Adding a table: a variant of `sundial_core::keys::AdminTable`, listed in
//! `AdminTable::ALL` (what is not there is neither read, replicated nor
//! restored), with its key names in `AdminKeys`; a file here with its row
//! type, its typed form ([`replica::Table`]) and its operations; a
//! `.with::<T>()` and an accessor in [`AdminStore`].

pub mod homes;
pub mod limits;
pub mod pauses;
pub mod policies;
pub mod queue_sweep;
pub mod queues;
pub mod quotas;
pub mod records;
pub mod replica;
pub mod schedules;
#[cfg(test)]
mod testing;
pub mod tokens;

use std::{sync::Arc, time::Duration};

use sundial_core::{EngineError, Shard};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::LiveTopology;
use homes::{HomeTable, Homes};
use limits::{LimitTable, Limits};
use pauses::{PauseTable, Pauses};
use policies::{Policies, PolicyTable};
use queues::QueueIndex;
use quotas::{QuotaTable, Quotas};
use replica::Replica;
use schedules::{ScheduleTable, Schedules};
use tokens::{TokenIndex, Tokens};

/// How often each gateway checks the tables' version: a change (a token
/// revoked, a quota set) is in force everywhere within this and a load.
pub const POLL: Duration = Duration::from_millis(200);

/// The admin Redis and this gateway's copy of its tables.
#[derive(Debug)]
pub struct AdminStore {
    replica: Arc<Replica>,
    /// When a reload last found this copy current (or made it so).
    confirmed: std::sync::Mutex<Option<std::time::Instant>>,
}

impl AdminStore {
    /// The store of the admin Redis `redis` (nothing loaded yet: see
    /// [`Self::reload`]).
    pub fn new(redis: Shard) -> Arc<Self> {
        let replica = Replica::new(redis)
            .with::<TokenIndex>()
            .with::<LimitTable>()
            .with::<HomeTable>()
            .with::<QuotaTable>()
            .with::<PolicyTable>()
            .with::<PauseTable>()
            .with::<ScheduleTable>();
        Arc::new(Self {
            replica: Arc::new(replica),
            confirmed: std::sync::Mutex::new(None),
        })
    }

    /// Tokens: who may act on which namespace, and what they may do.
    pub fn tokens(&self) -> Tokens<'_> {
        Tokens(&self.replica)
    }

    /// Each token's rate limit.
    pub fn limits(&self) -> Limits<'_> {
        Limits(&self.replica)
    }

    /// Where namespaces that moved between pools are served from.
    pub fn homes(&self) -> Homes<'_> {
        Homes(&self.replica)
    }

    /// What each namespace sets over its pool's quota.
    pub fn quotas(&self) -> Quotas<'_> {
        Quotas(&self.replica)
    }

    /// Each queue's retry policy.
    pub fn policies(&self) -> Policies<'_> {
        Policies(&self.replica)
    }

    /// The queues and namespaces paused.
    pub fn pauses(&self) -> Pauses<'_> {
        Pauses(&self.replica)
    }

    /// Each queue's schedules.
    pub fn schedules(&self) -> Schedules<'_> {
        Schedules(&self.replica)
    }

    /// The queues each namespace holds jobs in or published to lately.
    pub fn queues(&self) -> QueueIndex<'_> {
        QueueIndex(&self.replica)
    }

    /// The admin Redis, where the tables and the request counters live.
    pub fn redis(&self) -> Arc<Shard> {
        self.replica.redis()
    }

    /// Loads the tables if they changed, or writes them back into an admin
    /// Redis that lost them (see [`Replica::reload`]).
    pub async fn reload(&self) -> Result<(), EngineError> {
        self.replica.reload().await?;
        *self.confirmed.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
        Ok(())
    }

    /// Whether a reload found this copy current within `age`: a process
    /// whose copy is older (its admin Redis unreachable) leaves what it
    /// writes from the tables as it is, rather than write what may have
    /// changed since (the pumps' schedules).
    pub fn confirmed_within(&self, age: Duration) -> bool {
        self.confirmed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() <= age)
    }

    /// Changes when the admin Redis was found to have lost its tables.
    pub fn losses(&self) -> watch::Receiver<u64> {
        self.replica.losses()
    }

    /// Keeps the queue index rebuilt from the slots (at start and after a
    /// loss) and swept of queues that hold no job, until `stop`.
    pub async fn keep_queue_index(
        self: Arc<Self>,
        live: Arc<LiveTopology>,
        stop: CancellationToken,
    ) {
        tokio::join!(
            queues::keep_rebuilt(live.clone(), self.replica.clone(), stop.clone()),
            queue_sweep::keep_swept(live, self.replica.clone(), stop),
        );
    }

    /// Polls the tables' version until `shutdown`. With `follow` (the tables
    /// live on the default pool's first shard, no admin Redis of their own),
    /// the store moves to that shard's connection when a reload replaces it.
    pub async fn run(
        self: Arc<Self>,
        follow: Option<Arc<LiveTopology>>,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut changes = follow.as_ref().map(|l| l.changes());
        let mut failing = false;
        let mut paused = std::collections::BTreeSet::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                Some(Ok(())) = async { Some(changes.as_mut()?.changed().await) } => {}
                () = shutdown.cancelled() => return,
            }
            // Also on a tick: a poller started again after a panic would
            // not see a change made before it subscribed.
            if let Some(shard) = follow.as_ref().and_then(|l| default_shard(l)) {
                self.replica.set_redis(shard);
            }
            let reloaded = self.reload().await;
            self.pauses().report(&mut paused);
            match reloaded {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("token table reachable again");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "cannot refresh the token table; keeping the cached one");
                }
                Err(_) => {}
            }
        }
    }
}

/// The first shard of the default pool: where the tables live when there is
/// no admin Redis.
pub fn default_shard(live: &LiveTopology) -> Option<Shard> {
    live.topology()
        .pool(crate::token::DEFAULT_POOL)
        .and_then(|p| p.shards().next().cloned())
}
