//! Held writes: which of its layouts a pool is written to.
//!
//! After a reload to a new layout, writes stay where they went until every
//! other live gateway announces (in its view, [`crate::view`]) that it
//! knows the new layout too, so that a gateway whose config is behind
//! still finds every job (by id, for a peek or an ack) where it looks.
//! [`choose`] runs at start, after a reload that lost the layout written
//! to, and at every round of the drain loop.

use std::collections::HashMap;

use sundial_core::EngineError;

use crate::{Layout, Pool, view};

/// Points `pool`'s writes at a layout every other live gateway knows, by
/// the views announced in the pool's shards (`me`: this gateway's own
/// view, left out: it knows all of the pool's layouts), in this order: the
/// current layout; else the layout written to now; else, among those all
/// know, the one the most other gateways write to (their views keep it
/// from being retired). A view of an earlier version lists no known
/// layouts; the layouts it may write to stand for them. The shards that
/// answer are enough (every gateway announces in each of the pool's).
pub async fn choose(pool: &Pool, me: Option<&str>) -> Result<(), EngineError> {
    if pool.draining().next().is_none() {
        pool.set_write_layout(pool.layout());
        return Ok(());
    }
    let views = others(pool, me).await?;
    let known: Vec<Vec<&Layout>> = views.values().map(|v| v.known()).collect();
    let all_know = |l: &Layout| known.iter().all(|k| k.contains(&l));
    let (current, writes) = (pool.layout(), pool.write_layout());
    let chosen = if all_know(current) {
        current
    } else if all_know(writes) {
        writes
    } else {
        let written: Vec<&Layout> = views.values().flat_map(|v| v.writes()).collect();
        match pool
            .layouts()
            .filter(|l| all_know(l))
            .max_by_key(|l| written.iter().filter(|w| **w == *l).count())
            .filter(|l| written.contains(l))
        {
            Some(l) => l,
            None => {
                tracing::warn!(pool = pool.name(), writes = %writes, "no layout is known to every live gateway; writes stay where they go");
                writes
            }
        }
    }
    .clone();
    if pool.set_write_layout(&chosen) {
        log_chosen(pool, &chosen);
    }
    Ok(())
}

/// The views of every live gateway but `me` in `pool`'s shards, each
/// gateway's entries from all of them together; an error only when no
/// shard answers.
async fn others(pool: &Pool, me: Option<&str>) -> Result<HashMap<String, view::View>, EngineError> {
    let mut views: HashMap<String, view::View> = HashMap::new();
    let mut failed = None;
    let mut answered = false;
    for shard in pool.shards() {
        match view::read(shard).await {
            Ok(read) => {
                answered = true;
                for v in read.into_iter().filter(|v| Some(v.instance.as_str()) != me) {
                    match views.get_mut(&v.instance) {
                        Some(seen) => {
                            seen.entries.extend(v.entries);
                            seen.unreadable.extend(v.unreadable);
                        }
                        None => {
                            views.insert(v.instance.clone(), v);
                        }
                    }
                }
            }
            Err(e) => failed = Some(e),
        }
    }
    match failed {
        Some(e) if !answered => Err(e),
        _ => Ok(views),
    }
}

fn log_chosen(pool: &Pool, chosen: &Layout) {
    if chosen == pool.layout() {
        tracing::info!(pool = pool.name(), layout = %chosen, "every gateway knows the current layout: writes follow it");
    } else {
        tracing::info!(
            pool = pool.name(),
            writes = %chosen,
            current = %pool.layout(),
            "writes stay on a layout every gateway knows until each knows the current one"
        );
    }
}
