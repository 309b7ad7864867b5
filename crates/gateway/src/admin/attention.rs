//! `GET /attention?pool=&min_age_s=`: the queues of every namespace of a
//! pool that need a look, those with dead jobs or whose next ready job has
//! waited long, for the dashboard's page of them. Reads each slot's
//! counters once (one pipelined read per shard) and, in the slots with
//! ready jobs, the age of each queue's next one (one read-only script call
//! per such slot): bounded by the pool's slots, whatever its jobs.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Json,
    extract::State,
    http::Uri,
    response::{IntoResponse, Response},
};
use sundial_core::{Shard, keys};
use sundial_router::{Pool, placement};

use super::answers::namespaces::{Attention, AttentionQueue};
use super::queues::pool;
use crate::openapi::doc;
use crate::{
    api::{error::ApiError, params::Params},
    state::AppState,
};

/// Queues one answer lists at most (the most in need first).
const MAX_LISTED: usize = 500;
/// Seconds the next ready job must have waited for its queue to be listed,
/// by default.
const MIN_AGE_S: u64 = 60;

/// A queue's numbers, summed over its slots: [delayed, ready, reserved,
/// dead], and the oldest wait of its next ready job (ms).
#[derive(Default)]
struct Seen {
    counts: [u64; 4],
    oldest_ms: u64,
}

/// Every namespace's queues with dead jobs or a long wait
///
/// The pool's queues, across namespaces, with dead jobs or whose next ready job
/// has waited `min_age_s` or more: dead jobs first, then the longest waits, at
/// most 500. Reads each slot's counters once and, in slots with ready jobs, the
/// age of each queue's next one: bounded by the pool's slots, whatever its
/// jobs.
#[utoipa::path(
    get,
    path = "/attention",
    operation_id = "listQueuesNeedingALook",
    tag = "queues",
    params(doc::PoolQuery, doc::ListQueuesNeedingALookParams),
    responses(
        (status = 200, description = "The queues that need a look.", body = crate::admin::answers::namespaces::Attention<'_>),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "404: the pool is not in this gateway's config. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let params = Params::new(&uri);
    let pool = pool(&state, &params)?;
    let min_age_s = params.uint("min_age_s", MIN_AGE_S)?;
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    for (shard, slots) in by_shard(&pool) {
        read(shard, &slots, &mut seen).await?;
    }
    let mut listed: Vec<(String, Seen)> = seen
        .into_iter()
        .filter(|(_, s)| s.counts[3] > 0 || s.oldest_ms >= min_age_s.saturating_mul(1000))
        .collect();
    // Dead jobs first, then the longest waits.
    listed.sort_by(|(qa, a), (qb, b)| {
        (b.counts[3], b.oldest_ms, qa).cmp(&(a.counts[3], a.oldest_ms, qb))
    });
    let truncated = listed.len() > MAX_LISTED;
    let queues = listed
        .iter()
        .take(MAX_LISTED)
        .filter_map(|(qualified, s)| {
            let (namespace, queue) = keys::parse_qualified(qualified)?;
            Some(AttentionQueue {
                namespace,
                queue,
                delayed: s.counts[0],
                ready: s.counts[1],
                reserved: s.counts[2],
                dead: s.counts[3],
                oldest_ready_s: s.oldest_ms / 1000,
            })
        })
        .collect();
    Ok(Json(Attention {
        pool: pool.name(),
        min_age_s,
        queues,
        truncated,
    })
    .into_response())
}

/// Every place a slot of `pool` may hold jobs (its shard, and while it
/// drains, the one it leaves), grouped by shard.
fn by_shard(pool: &Pool) -> Vec<(&Shard, Vec<u32>)> {
    let mut out: Vec<(&Shard, Vec<u32>)> = Vec::new();
    for slot in 0..pool.slots() {
        for shard in placement::slot_places(pool, slot) {
            match out.iter_mut().find(|(s, _)| s.name() == shard.name()) {
                Some((_, slots)) => slots.push(slot),
                None => out.push((shard, vec![slot])),
            }
        }
    }
    out
}

/// Adds what `shard` holds of `slots` to `seen`.
async fn read(
    shard: &Shard,
    slots: &[u32],
    seen: &mut BTreeMap<String, Seen>,
) -> Result<(), ApiError> {
    let backlog = shard.slots().backlog(slots).await?;
    for (qualified, c) in backlog.counts {
        let s = seen.entry(qualified).or_default();
        for (sum, n) in s.counts.iter_mut().zip(c) {
            *sum += n;
        }
    }
    for (qualified, ms) in shard.slots().ready_ages(&backlog.ready).await? {
        let s = seen.entry(qualified).or_default();
        s.oldest_ms = s.oldest_ms.max(ms);
    }
    Ok(())
}
