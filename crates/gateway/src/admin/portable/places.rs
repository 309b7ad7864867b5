//! Where a namespace's jobs are, for its export and import: whether they
//! are all in a pool and served from there, and every place in the pool
//! that may hold them.

use std::collections::BTreeMap;

use sundial_core::{Shard, keys};
use sundial_router::{Pool, homes::MoveState};

use crate::{api::error::ApiError, state::AppState};

/// Every place (shard, slot) that may hold the namespace's jobs, with the
/// qualified queues of the namespace each holds (from the slots' queue
/// tables and the queue index); by
/// slot, and within a slot where it drains from first, where it is written
/// last: a job a mover carries while the export runs is read before it
/// leaves or after it arrives.
pub(super) async fn places(
    state: &AppState,
    pool: &Pool,
    ns: &str,
) -> Result<Vec<(Shard, u32, Vec<String>)>, ApiError> {
    // (slot, place of the shard among the slot's locations, reversed).
    let mut at: BTreeMap<(u32, usize, String), (Shard, Vec<String>)> = BTreeMap::new();
    {
        let queues = sundial_router::mover::namespace_queues(pool, &state.tokens, ns).await?;
        for q in &queues {
            for slot in pool.queue_slots(ns, q) {
                let locations = pool.locations(slot);
                let last = locations.len();
                for (i, shard) in locations.into_iter().enumerate() {
                    at.entry((slot, last - i, shard.name().to_owned()))
                        .or_insert_with(|| (shard.clone(), Vec::new()))
                        .1
                        .push(keys::qualified(ns, q));
                }
            }
        }
    }
    Ok(at
        .into_iter()
        .map(|((slot, _, _), (shard, queues))| (shard, slot, queues))
        .collect())
}

/// Refuses (409) to export or import `ns` in `pool` unless its jobs are
/// all there and served from there: not while it moves into or out of
/// `pool`, nor once its tokens of `pool` moved elsewhere (its jobs went
/// with them: an import here would store jobs nobody is served).
pub(super) fn settled_in(state: &AppState, pool: &Pool, ns: &str) -> Result<(), ApiError> {
    for (token_pool, name, home) in state.tokens.homes() {
        if name != ns {
            continue;
        }
        let here = pool.name();
        if home.state != MoveState::Moved && (home.from == here || home.to == here) {
            return Err(ApiError::Conflict(format!(
                "namespace {ns} is moving from pool {} to pool {} ({}): export or import it once it is moved",
                home.from,
                home.to,
                home.state.as_str()
            )));
        }
        // Its tokens of this pool are served from elsewhere (moved away,
        // or moving on between two other pools).
        if token_pool == here && home.to != here {
            return Err(ApiError::Conflict(format!(
                "namespace {ns} of pool {here} moved to pool {}: its jobs are there (pool={})",
                home.to, home.to
            )));
        }
    }
    Ok(())
}
