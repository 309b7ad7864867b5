//! The start-up task that fills the queue indexes (`sd:queues:<pool>/<ns>`
//! in the admin Redis, read by the admin queue list) from what the pools'
//! slots hold.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use sundial_core::keys;
use sundial_router::{LiveTopology, tokens::TokenStore};
use tokio_util::sync::CancellationToken;

/// Adds to the queue indexes every queue the pools' slots hold, once, at
/// start (queues published before the index existed, or by gateways of an
/// older version); asked again every 10 s until it succeeds. Later queues
/// are added as they are published to.
pub async fn index_existing(
    live: Arc<LiveTopology>,
    tokens: Arc<TokenStore>,
    stop: CancellationToken,
) {
    const AGAIN: Duration = Duration::from_secs(10);
    loop {
        match index_once(&live, &tokens).await {
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
    stop.cancelled().await;
}

async fn index_once(
    live: &LiveTopology,
    tokens: &TokenStore,
) -> Result<usize, sundial_core::EngineError> {
    let topology = live.topology();
    let redis = tokens.redis();
    let mut n = 0;
    for pool in topology.pools() {
        let mut by_ns: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (shard, slots) in pool.groups() {
            for qualified in shard.slot_queues(slots).await? {
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
            redis.index_queues(pool.name(), &ns, &queues).await?;
        }
    }
    Ok(n)
}
