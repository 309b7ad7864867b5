//! The queue index: per pool and namespace, the queues it holds jobs in or
//! has published to since the last sweep (a sorted set of names,
//! `sd:queues:<pool>/<ns>`), for the admin listing, exports and the
//! `max_queues` quota.
//!
//! Unlike the replicated tables it is neither versioned nor copied into
//! every gateway: it grows with the queues, and the admin listing pages it
//! from Redis. Gateways add a queue when they publish to it ([`QueueIndex::note`],
//! again every ten minutes), and rebuild the index from what the pools'
//! slots hold at start and whenever the admin Redis is found to have lost
//! its tables ([`keep_rebuilt`]); queues that hold no job leave it
//! (`super::queue_sweep`).

use std::{
    collections::BTreeMap,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use sundial_core::{EngineError, keys};
use tokio_util::sync::CancellationToken;

use super::replica::Replica;
use crate::{LiveTopology, Topology};

/// The start of this process's clock for [`Listed`].
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
/// How often a process adds a queue it publishes to to the index again
/// (the index may have been lost with its Redis).
const REINDEX_MS: u64 = 10 * 60 * 1000;
/// How soon after a failed addition it is tried again.
const REINDEX_RETRY_MS: u64 = 10 * 1000;

/// When this process last added one queue to its index (ms since
/// [`EPOCH`], offset by [`REINDEX_MS`]; 0 = never): kept with the queue's
/// other per-process state, so that a publish finds it without a lookup.
#[derive(Debug, Default, Clone)]
pub struct Listed(Arc<AtomicU64>);

/// The queue index's operations.
#[derive(Debug, Clone, Copy)]
pub struct QueueIndex<'a>(pub(super) &'a Replica);

impl QueueIndex<'_> {
    /// Adds queues to a namespace's index (a queue already there stays).
    pub async fn add(&self, pool: &str, ns: &str, queues: &[String]) -> Result<(), EngineError> {
        self.0.redis().admin().index_queues(pool, ns, queues).await
    }

    /// Up to `limit` queue names of a namespace's index, in name order,
    /// after `after` (from the first when `None`).
    pub async fn page(
        &self,
        pool: &str,
        ns: &str,
        after: Option<&str>,
        limit: u64,
    ) -> Result<Vec<String>, EngineError> {
        self.0
            .redis()
            .admin()
            .indexed_queues(pool, ns, after, limit)
            .await
    }

    /// Every queue name of a namespace's index.
    pub async fn all(&self, pool: &str, ns: &str) -> Result<Vec<String>, EngineError> {
        self.0.redis().admin().all_indexed_queues(pool, ns).await
    }

    /// Adds `queue` of namespace `ns` in `pool` to the index before a
    /// publish to it, unless that would make the index hold more than
    /// `max` queues: `Err` with the queues it holds then. Asks the admin
    /// Redis only when this process has not listed the queue within
    /// [`REINDEX_MS`] (`listed`), as [`Self::note`] does; lets the publish
    /// through (and logs) when the admin Redis cannot answer.
    pub async fn admit(
        &self,
        listed: &Listed,
        (pool, ns, queue): (&str, &str, &str),
        max: u64,
    ) -> Result<(), u64> {
        let now = EPOCH.elapsed().as_millis() as u64 + REINDEX_MS;
        let last = listed.0.load(Ordering::Relaxed);
        if last != 0 && now < last + REINDEX_MS {
            return Ok(());
        }
        let admin = self.0.redis();
        match admin.admin().index_queue_within(pool, ns, queue, max).await {
            Ok((true, _)) => {
                listed.0.store(now, Ordering::Relaxed);
                Ok(())
            }
            Ok((false, held)) => Err(held),
            Err(e) => {
                tracing::warn!(pool, ns, queue, error = %e, "cannot count against a queue quota; letting the publish through");
                Ok(())
            }
        }
    }

    /// Adds `queue` of namespace `ns` in `pool` to the index, in the
    /// background, unless this process did so within [`REINDEX_MS`]
    /// (`listed` says when). A publish neither waits for it nor fails with
    /// it; a failed addition is tried again on a publish
    /// [`REINDEX_RETRY_MS`] later.
    pub fn note(&self, listed: &Listed, pool: &str, ns: &str, queue: &str) {
        let now = EPOCH.elapsed().as_millis() as u64 + REINDEX_MS;
        let last = listed.0.load(Ordering::Relaxed);
        if last != 0 && now < last + REINDEX_MS {
            return;
        }
        if listed
            .0
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return; // another request of this queue does it
        }
        let (redis, listed) = (self.0.redis(), listed.clone());
        let (pool, ns, queue) = (pool.to_owned(), ns.to_owned(), queue.to_owned());
        tokio::spawn(async move {
            let added = redis
                .admin()
                .index_queues(&pool, &ns, std::slice::from_ref(&queue))
                .await;
            if let Err(e) = added {
                tracing::debug!(pool, ns, queue, error = %e, "cannot add the queue to its index; trying again later");
                listed
                    .0
                    .store(now - REINDEX_MS + REINDEX_RETRY_MS, Ordering::Relaxed);
            }
        });
    }

    /// Adds to the indexes every queue that holds jobs in the pools' slots
    /// (queues published before the index existed, by gateways of an
    /// older version, or before the admin Redis lost the index); returns
    /// how many it listed.
    pub async fn rebuild(&self, topology: &Topology) -> Result<usize, EngineError> {
        let mut n = 0;
        for pool in topology.pools() {
            let mut by_ns: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (shard, slots) in pool.groups() {
                for qualified in shard.slots().counts(slots).await?.into_keys() {
                    if let Some((ns, queue)) = keys::parse_qualified(&qualified) {
                        by_ns
                            .entry(ns.to_owned())
                            .or_default()
                            .push(queue.to_owned());
                    }
                }
            }
            for (ns, queues) in by_ns {
                n += queues.len();
                self.add(pool.name(), &ns, &queues).await?;
            }
        }
        Ok(n)
    }
}

/// Rebuilds the queue index from the slots at start, and again whenever
/// the admin Redis is found to have lost its tables; each time asked again
/// every 10 s until it succeeds. Runs until `stop`.
pub async fn keep_rebuilt(live: Arc<LiveTopology>, replica: Arc<Replica>, stop: CancellationToken) {
    const AGAIN: Duration = Duration::from_secs(10);
    let mut losses = replica.losses();
    loop {
        losses.mark_unchanged();
        loop {
            match QueueIndex(&replica).rebuild(&live.topology()).await {
                Ok(n) => {
                    tracing::debug!(queues = n, "queue index updated from the slots");
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot update the queue index from the slots; trying again in 10 s");
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(AGAIN) => {}
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            Ok(()) = losses.changed() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sundial_core::{JobId, NewJob, Schedule};
    use sundial_tests::{RedisServer, wait_until_async};

    use super::*;
    use crate::admin::{
        AdminStore,
        testing::{one_pool, shard, store},
    };

    #[tokio::test]
    async fn the_index_pages_by_name() {
        let redis = RedisServer::start();
        let store = store(&redis).await;
        let index = store.queues();
        let names: Vec<String> = ["c", "a", "b"].map(str::to_owned).to_vec();
        index.add("default", "ns", &names).await.expect("add");
        index
            .add("default", "ns", &names[..1])
            .await
            .expect("again");
        assert_eq!(
            index.page("default", "ns", None, 2).await.expect("page"),
            ["a", "b"]
        );
        assert_eq!(
            index
                .page("default", "ns", Some("b"), 2)
                .await
                .expect("page"),
            ["c"]
        );
        assert_eq!(
            index.all("default", "ns").await.expect("all"),
            ["a", "b", "c"]
        );
        assert!(index.all("default", "other").await.expect("all").is_empty());
    }

    /// A pool on `jobs` with one job in queue `q` of namespace `ns`.
    async fn pool_with_a_job(jobs: &RedisServer) -> Arc<LiveTopology> {
        let live = one_pool(jobs).await;
        let topology = live.topology();
        let pool = topology.pool("default").expect("pool").clone();
        let job = NewJob {
            id: JobId::mint(false),
            attrs: String::new(),
            body: bytes::Bytes::from_static(b"x"),
        };
        let slot = pool.slot_of("ns", "q", job.id.lane(pool.lanes()));
        let schedule = Schedule {
            delay_ms: 0,
            ttl_ms: 0,
            tries: 1,
            priority: 0,
            policy: None,
        };
        pool.shard_for(slot)
            .jobs()
            .publish(slot, "ns/q", &schedule, std::slice::from_ref(&job))
            .await
            .expect("publish");
        live
    }

    #[tokio::test]
    async fn the_index_is_rebuilt_from_the_slots_at_start_and_after_a_loss() {
        let (jobs, admin) = (RedisServer::start(), RedisServer::start());
        let live = pool_with_a_job(&jobs).await;
        let store = AdminStore::new(shard(&admin, "admin").await);
        store.reload().await.expect("load");
        let stop = CancellationToken::new();
        tokio::spawn(store.clone().keep_queue_index(live, stop.clone()));
        let listed = || async { store.queues().all("default", "ns").await.expect("all") == ["q"] };
        wait_until_async(
            Duration::from_secs(5),
            "the queue is listed at start",
            listed,
        )
        .await;
        // The admin Redis loses everything (it restarted without its data);
        // it held a table, or the loss could not be told from a new Redis.
        let token = crate::Token::mint("default");
        store
            .tokens()
            .create(&token, "ns", "t", &crate::Grant::full())
            .await
            .expect("token");
        let _: () = redis::cmd("FLUSHALL")
            .query(&mut admin.client())
            .expect("flush");
        store.reload().await.expect("restore");
        wait_until_async(Duration::from_secs(5), "the queue is listed again", listed).await;
        stop.cancel();
    }
}
