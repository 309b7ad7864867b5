//! Pumps: the timer loops that move due jobs of every slot.
//!
//! For each shard of each pool, [`run`] keeps one task per slot that this
//! process holds the lease of, among the slots the shard holds (a fixed set
//! per topology, whatever the number of tenants). A slot's task calls the
//! pump script, then sleeps until the slot's next deadline (as the script
//! reports it, on the shard's clock). It wakes early when a script announces
//! on [`sundial_core::keys::TIMER_CHANNEL`] that the slot became due sooner,
//! so a job is moved within milliseconds of its due time and an idle slot
//! costs one call per [`PumpOptions::idle_check`].
//!
//! Any number of processes may run pumps: each slot is pumped by one at a
//! time, the holder of its lease (see `supervisor.rs` for the scheme). The
//! pump script itself checks the lease, so a process that lost one moves
//! nothing. On shutdown a process releases its leases at once.

mod announcements;
mod gauges;
mod options;
mod permits;
mod schedules;
mod slot;
mod status;
mod supervisor;
#[cfg(test)]
mod testing;

use std::{sync::Arc, time::Duration};

use sundial_router::{LiveTopology, admin::AdminStore, headroom::Headroom};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use options::PumpOptions;
pub use status::{PumpStatus, ShardStatus};

/// Pumps every slot of every pool of the live topology until
/// `shutdown` is cancelled. When the topology is swapped (a reload), the
/// pumps of the old one stop and those of the new one start: each pump call
/// is atomic, so the handover needs no coordination. A shard's loop that
/// ends before then (it can only panic) is started again. `status` is kept
/// up to date for health checks. With `tables`, the pumps also fire the
/// schedules of the admin's schedule table (`schedules/`), held to the
/// quotas of its quota table and to the shards' headroom.
pub async fn run(
    live: Arc<LiveTopology>,
    tables: Option<Tables>,
    opts: PumpOptions,
    status: PumpStatus,
    shutdown: CancellationToken,
) {
    // The book's loop ends with this call, however it ends (a panic that
    // its owner restarts included), not only at shutdown: a restarted
    // call starts a book of its own.
    let book_stop = shutdown.child_token();
    let _book_guard = book_stop.clone().drop_guard();
    let book = tables.map(|t| keep_book(t, live.clone(), book_stop));
    let mut changes = live.changes();
    // One identity per process, kept across topology changes so that its
    // leases stay its own.
    let owner = format!("pump-{}", ulid::Ulid::new());
    tracing::info!(owner, "pumps running");
    loop {
        changes.mark_unchanged();
        let generation = Generation {
            opts: opts.clone(),
            owner: owner.clone(),
            status: status.clone(),
            stop: shutdown.child_token(),
            process: shutdown.clone(),
            book: book.clone(),
        };
        let more = generation.run(&live, &mut changes, &shutdown).await;
        if !more {
            return;
        }
        tracing::info!("topology changed; pumps restarted on it");
    }
}

/// The pumps of one topology: a supervisor per shard.
struct Generation {
    opts: PumpOptions,
    owner: String,
    status: PumpStatus,
    /// Stops this generation's supervisors.
    stop: CancellationToken,
    /// The process's own shutdown (this generation may stop without it).
    process: CancellationToken,
    book: Option<watch::Receiver<Arc<schedules::Book>>>,
}

type Supervisors = tokio::task::JoinSet<()>;

impl Generation {
    /// Runs until the topology changes (returns `true`) or `shutdown`
    /// (`false`), restarting a shard's supervisor that ends before.
    async fn run(
        &self,
        live: &LiveTopology,
        changes: &mut tokio::sync::watch::Receiver<u64>,
        shutdown: &CancellationToken,
    ) -> bool {
        let topology = live.topology();
        let mut tasks = Supervisors::new();
        let mut shards = std::collections::HashMap::new();
        self.status.reset(topology.pools().flat_map(|p| {
            p.shards()
                .map(|s| (p.name().to_owned(), s.name().to_owned()))
        }));
        for pool in topology.pools() {
            for shard in pool.shards() {
                let id = self.spawn(&mut tasks, &topology, pool, shard);
                shards.insert(id, (pool.clone(), shard.clone()));
            }
        }
        let more = loop {
            tokio::select! {
                r = changes.changed() => break r.is_ok(),
                () = shutdown.cancelled() => break false,
                Some(ended) = tasks.join_next_with_id() => {
                    let id = match &ended {
                        Ok((id, ())) => *id,
                        Err(e) => e.id(),
                    };
                    if let Some((pool, shard)) = shards.remove(&id) {
                        tracing::error!(shard = shard.name(), error = ?ended.err(), "a shard's pump loop ended; starting it again");
                        let id = self.spawn(&mut tasks, &topology, &pool, &shard);
                        shards.insert(id, (pool, shard));
                    }
                }
            }
        };
        self.stop.cancel();
        while tasks.join_next().await.is_some() {}
        more
    }

    fn spawn(
        &self,
        tasks: &mut Supervisors,
        topology: &Arc<sundial_router::topology::Topology>,
        pool: &Arc<sundial_router::Pool>,
        shard: &sundial_core::Shard,
    ) -> tokio::task::Id {
        let pumps = supervisor::ShardPumps::new(
            pool.clone(),
            shard.clone(),
            self.opts.clone(),
            self.owner.clone(),
            self.status.clone(),
            self.stop.clone(),
            self.process.clone(),
        )
        .with_book(self.book.clone().map(|book| (book, topology.clone())));
        tasks.spawn(pumps.run()).id()
    }
}

/// How long a book loop that ended waits before it starts again.
const BOOK_RESTART_AFTER: Duration = Duration::from_secs(1);

/// The tables the pumps fire schedules from: the admin's copy, and the
/// shards' headroom as this process reads it.
#[derive(Debug, Clone)]
pub struct Tables {
    pub admin: Arc<AdminStore>,
    pub headroom: Headroom,
}

/// Keeps the book of schedules made from `tables` until `stop`,
/// restarting its loop a second after it ends before (it can only
/// panic), so that a panic that comes back does not spin.
fn keep_book(
    tables: Tables,
    live: Arc<LiveTopology>,
    stop: CancellationToken,
) -> watch::Receiver<Arc<schedules::Book>> {
    let quotas = Arc::new(schedules::quotas::FireQuotas::new(
        tables.admin,
        live.clone(),
        tables.headroom,
    ));
    let (tx, rx) = watch::channel(Arc::new(schedules::Book::default()));
    tokio::spawn(async move {
        loop {
            let task =
                schedules::book::keep(quotas.clone(), live.clone(), tx.clone(), stop.clone());
            match tokio::spawn(task).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::error!(error = %e, "the schedules' book loop ended; starting it again");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(BOOK_RESTART_AFTER) => {}
                    }
                }
            }
        }
    });
    rx
}
