//! Preparing a topology, at start and on every reload: connect, check every
//! shard, work out which earlier layouts still drain, build it whole, pin
//! it, and choose the layout each pool writes to.
//! Nothing is swapped in here.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use tokio::time::Instant;

use anyhow::Context;
use sundial_core::Shard;

use crate::{Layout, Pins, PoolConfig, Topology, topology::connect};

/// How long startup waits for each shard to answer.
pub const STARTUP_WAIT: Duration = Duration::from_secs(15);
/// How long a reload waits for new shards to answer.
pub const RELOAD_WAIT: Duration = Duration::from_secs(10);

/// Builds the topology of `pools` (reusing `previous`'s unchanged
/// connections) and checks every shard: it answers within `wait`, its
/// eviction policy is safe, its data format, slot and lane counts and ring
/// membership match
/// what it holds; then loads the scripts and pins the layouts.
///
/// A shard that answers but refuses for now (`LOADING` while Redis reads
/// its data, `CLUSTERDOWN` while a cluster forms or a master rejoins) is
/// asked again until `wait` has passed: a gateway started together with
/// its Redis waits for it rather than exiting at the first refusal. Every
/// step is idempotent, so the whole preparation is simply run again.
pub async fn prepare(
    pools: &BTreeMap<String, PoolConfig>,
    previous: Option<&Topology>,
    wait: Duration,
) -> anyhow::Result<Topology> {
    const AGAIN: Duration = Duration::from_millis(200);
    let shards = connect(pools, previous)?;
    let start = Instant::now();
    let deadline = start + wait;
    let mut refused = 0u32;
    loop {
        match prepare_connected(pools, previous, &shards, deadline).await {
            Err(e) if is_refusal(&e) && Instant::now() + AGAIN < deadline => {
                // One line when it starts and one every few seconds after.
                if refused.is_multiple_of(15) {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        waited_ms = start.elapsed().as_millis(),
                        "a shard refuses for now; asking again"
                    );
                }
                refused += 1;
                tokio::time::sleep(AGAIN).await;
            }
            other => return other,
        }
    }
}

/// Whether `e` is a refusal that may pass: a shard that answered "not
/// now", not one that failed a check (a wrong format, an unsafe eviction
/// policy) or did not answer at all within the wait.
fn is_refusal(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<sundial_core::EngineError>()
            .is_some_and(sundial_core::EngineError::is_unavailable)
    })
}

async fn prepare_connected(
    pools: &BTreeMap<String, PoolConfig>,
    previous: Option<&Topology>,
    shards: &BTreeMap<String, Vec<Shard>>,
    deadline: Instant,
) -> anyhow::Result<Topology> {
    let mut draining = BTreeMap::new();
    for (name, pool) in pools {
        let connected = shards.get(name).map_or(&[][..], Vec::as_slice);
        for shard in connected {
            let reused = previous.is_some_and(|t| t.shards().any(|s| s.same(shard)));
            let wait = deadline.saturating_duration_since(Instant::now());
            check_shard(name, shard, pool, reused, wait).await?;
        }
        draining.insert(name.clone(), draining_layouts(name, pool, connected).await?);
    }
    let topology = Topology::new(pools, shards.clone(), &draining)?;
    // Pinned only once the whole topology is valid.
    for pool in topology.pools() {
        let draining: Vec<Layout> = pool.draining().cloned().collect();
        for shard in pool.shards() {
            Pins::write(shard, pool.layout(), &draining).await?;
        }
    }
    // Which layout writes go to: on a reload, the one they went to (the
    // drain loop moves them on once every gateway knows the new layout);
    // at start, the newest layout every live gateway knows.
    let to_choose: Vec<_> = match previous {
        Some(before) => topology.keep_writes_of(before),
        None => topology.pools().collect(),
    };
    for pool in to_choose {
        crate::writes::choose(pool, Some(crate::view::INSTANCE.as_str())).await?;
    }
    Ok(topology)
}

/// Waits for a shard and checks it; a new connection also gets the scripts.
async fn check_shard(
    pool: &str,
    shard: &Shard,
    pool_config: &PoolConfig,
    reused: bool,
    wait: Duration,
) -> anyhow::Result<()> {
    shard.wait_connected(wait).await.with_context(|| {
        format!(
            "shard {} at {} did not answer within {} s",
            shard.name(),
            shard.conn().address(),
            wait.as_secs_f64().round()
        )
    })?;
    let check = shard.check(pool_config.slots, pool_config.lanes).await?;
    if reused {
        return Ok(());
    }
    if !check.aof_enabled {
        tracing::warn!(
            shard = shard.name(),
            "AOF is off: a Redis restart loses every job since the last snapshot; \
             set `appendonly yes` for durability"
        );
    }
    if check.maxmemory == 0 {
        tracing::warn!(
            shard = shard.name(),
            "the Redis has no maxmemory: it grows until the host runs out of memory, and \
             no headroom is kept for the namespaces that hold little of it (set `maxmemory` \
             in redis.conf; see \"Multi-tenancy\" in docs/OPERATIONS.md)"
        );
    }
    if let Some(wanted) = shard.conn().wait_replicas()
        && check.replicas < wanted
    {
        tracing::warn!(
            shard = shard.name(),
            replicas = check.replicas,
            wanted,
            "publishes wait for more replicas than a master has connected now: they are \
             answered 503 until enough replicas connect"
        );
    }
    shard.load_scripts().await?;
    tracing::info!(
        pool,
        shard = shard.name(),
        redis = check.redis_version,
        slots = pool_config.slots,
        lanes = pool_config.lanes,
        "shard ready"
    );
    Ok(())
}

/// Works out which earlier layouts of a pool still drain (the caller pins
/// them with the current one once the whole topology is valid).
///
/// Every layout any shard has pinned and that differs from the config's is
/// one whose moved slots may still hold jobs at their old shard, or that
/// another gateway still writes to (its config is behind), so it drains:
/// reads and pumps also cover it, and writes stay on it until every
/// gateway knows the new one. Also in a pool that holds no jobs now. (A
/// layout leaves the list once no gateway may write to it and its moved
/// slots are empty: see `crate::drain`.)
async fn draining_layouts(
    name: &str,
    pool: &PoolConfig,
    shards: &[Shard],
) -> anyhow::Result<Vec<Layout>> {
    let current = pool.layout();
    let seen = pinned_except(shards, &current).await?;
    // A layout that gave slots to a shard the config no longer lists
    // cannot be shown empty (that shard is out of reach): the shard must
    // stay, with weight 0, until its slots have drained.
    let names: Vec<&str> = pool.shards.iter().map(|s| s.ring_name()).collect();
    for layout in &seen {
        if let Some(gone) = layout.holders().find(|h| !names.contains(h)) {
            anyhow::bail!(
                "pool {name}: shard {gone:?} holds slots of the layout [{layout}] but is not in the config; \
                 keep it in the config (with weight 0) until GET /drains shows that layout empty, then remove it"
            );
        }
    }
    let draining: Vec<Layout> = seen.into_iter().collect();
    if !draining.is_empty() {
        tracing::info!(
            pool = name,
            current = %current,
            draining = ?draining.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "earlier shard layouts drain"
        );
    }
    Ok(draining)
}

/// The layouts pinned in `shards`, except `current`.
pub(crate) async fn pinned_except(
    shards: impl IntoIterator<Item = &Shard>,
    current: &Layout,
) -> Result<BTreeSet<Layout>, sundial_core::EngineError> {
    let mut seen = BTreeSet::new();
    for shard in shards {
        seen.extend(Pins::read(shard).await?.all());
    }
    seen.remove(current);
    Ok(seen)
}
