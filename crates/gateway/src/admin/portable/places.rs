//! Where a namespace's jobs are, for its export and import: whether they
//! are all in a pool and served from there, and every place in the pool
//! that may hold them (`sundial_router::placement` answers both).

use sundial_core::Shard;
use sundial_router::{Pool, placement};

use crate::{api::error::ApiError, state::AppState};

/// Every place (shard, slot) that may hold the namespace's jobs, with the
/// qualified queues of the namespace each holds (from the slots' queue
/// tables and the queue index), in the order an export reads them
/// ([`placement::export_places`]).
pub(super) async fn places(
    state: &AppState,
    pool: &Pool,
    ns: &str,
) -> Result<Vec<(Shard, u32, Vec<String>)>, ApiError> {
    let queues: Vec<String> = placement::namespace_queues(pool, &state.admin, ns)
        .await?
        .into_iter()
        .collect();
    Ok(placement::export_places(pool, ns, &queues))
}

/// Refuses (409) to export or import `ns` in `pool` unless its jobs are
/// all there and served from there ([`placement::wholly_in`]).
pub(super) fn wholly_in(state: &AppState, pool: &Pool, ns: &str) -> Result<(), ApiError> {
    placement::wholly_in(&state.admin.homes().all(), pool.name(), ns).map_err(ApiError::Conflict)
}
