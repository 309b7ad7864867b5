//! The sweep of the queue indexes: a queue that holds no job leaves its
//! namespace's index, so that the index holds the queues a namespace uses
//! (holds jobs in, or published to since the last sweep) and `max_queues`
//! counts those, not every name it ever used.
//!
//! Every gateway sweeps every [`SWEEP`] (the first time at a random point
//! of the second half of that period, so that gateways spread their
//! sweeps), one namespace of its
//! pools after another: per indexed queue, the counts of its slots in
//! every layout of the pool (a few `HMGET`s per queue). A queue published
//! to again after it left comes back with its next publish on a gateway
//! that has not listed it within ten minutes (`QueueIndex::note`); until
//! then `max_queues` does not count it. Each sweep sets the
//! `sundial_namespace_queues` gauge of the namespaces it swept.

use std::{sync::Arc, time::Duration};

use sundial_core::{Counts, EngineError, keys};
use tokio_util::sync::CancellationToken;

use super::{replica::Replica, tokens::Tokens};
use crate::{LiveTopology, Pool};

/// How often each gateway sweeps.
pub const SWEEP: Duration = Duration::from_secs(600);

/// Removes from the indexes of `pool`'s namespaces the queues that hold no
/// job in it; returns how many went.
pub async fn sweep(replica: &Replica, pool: &Pool) -> Result<usize, EngineError> {
    let admin = replica.redis();
    let mut removed = 0;
    // The namespaces whose publishes index their queues under this pool:
    // its tokens', and those of other pools that moved here.
    let mut namespaces: std::collections::BTreeSet<String> = Tokens(replica)
        .namespaces(pool.name())
        .unwrap_or_default()
        .into_iter()
        .collect();
    for (_, ns, home) in super::homes::Homes(replica).all() {
        if home.writes() == pool.name() {
            namespaces.insert(ns);
        }
    }
    for ns in namespaces {
        let queues = admin.admin().all_indexed_queues(pool.name(), &ns).await?;
        let mut empty = Vec::new();
        let listed = queues.len();
        for queue in queues {
            if live_jobs(pool, &ns, &queue).await? == 0 {
                empty.push(queue);
            }
        }
        removed += empty.len();
        admin
            .admin()
            .unindex_queues(pool.name(), &ns, &empty)
            .await?;
        // Queues published to while the sweep ran are counted at the next.
        metrics::gauge!(
            "sundial_namespace_queues",
            "pool" => pool.name().to_owned(),
            "namespace" => ns.clone(),
        )
        .set((listed - empty.len()) as f64);
    }
    Ok(removed)
}

/// The jobs a queue holds in `pool`, in every state: each of its lanes'
/// slots, at every shard a layout of the pool places it on. (The pool's
/// own places, not `crate::placement`'s, which reads the admin store: the
/// admin store cannot read it back.)
async fn live_jobs(pool: &Pool, ns: &str, queue: &str) -> Result<u64, EngineError> {
    let qualified = keys::qualified(ns, queue);
    let mut all = Counts::default();
    for slot in pool.queue_slots(ns, queue) {
        for shard in pool.ring_places(slot) {
            all.add(&shard.queues().counts(slot, &qualified).await?);
        }
    }
    Ok(all.live())
}

/// Sweeps every pool every [`SWEEP`], until `stop`.
pub async fn keep_swept(live: Arc<LiveTopology>, replica: Arc<Replica>, stop: CancellationToken) {
    // The first sweep comes between half a period and a period after the
    // start (the index is rebuilt at start): never in a process's first
    // minutes, spread between gateways.
    let mut wait = SWEEP.mul_f64(0.5 + rand::random::<f64>() / 2.0);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        wait = SWEEP;
        for pool in live.topology().pools() {
            match sweep(&replica, pool).await {
                Ok(n) => tracing::debug!(
                    pool = pool.name(),
                    queues = n,
                    "empty queues left their index"
                ),
                Err(e) => {
                    tracing::warn!(pool = pool.name(), error = %e, "cannot sweep the queue index; trying again at the next sweep")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use sundial_core::{JobId, NewJob, Schedule};
    use sundial_tests::RedisServer;

    use super::*;
    use crate::{
        Grant, Token,
        admin::{
            AdminStore,
            testing::{one_pool, store},
        },
    };

    #[tokio::test]
    async fn queues_that_hold_no_job_leave_the_index_and_the_others_stay() {
        let (jobs, admin) = (RedisServer::start(), RedisServer::start());
        let live = one_pool(&jobs).await;
        let pool = live.topology().pool("default").expect("pool").clone();
        let store: Arc<AdminStore> = store(&admin).await;
        store
            .tokens()
            .create(&Token::mint("default"), "ns", "t", &Grant::full())
            .await
            .expect("token");
        store.reload().await.expect("load");
        let job = NewJob {
            id: JobId::mint(false),
            attrs: String::new(),
            body: bytes::Bytes::from_static(b"x"),
        };
        let slot = pool.slot_of("ns", "full", job.id.lane(pool.lanes()));
        let schedule = Schedule {
            delay_ms: 60_000,
            ttl_ms: 0,
            tries: 1,
            priority: 0,
            policy: None,
        };
        pool.shard_for(slot)
            .jobs()
            .publish(slot, "ns/full", &schedule, std::slice::from_ref(&job))
            .await
            .expect("publish");
        let names = ["empty", "full", "gone"].map(str::to_owned);
        store
            .queues()
            .add("default", "ns", &names)
            .await
            .expect("add");
        let swept = sweep(&store.replica, &pool).await.expect("sweep");
        assert_eq!(swept, 2);
        assert_eq!(
            store.queues().all("default", "ns").await.expect("all"),
            ["full"]
        );
    }
}
