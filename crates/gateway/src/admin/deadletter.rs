//! A queue's dead letter, for operators: page through its dead jobs, and
//! respawn or delete chosen ones (or all of them).

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::{Path, State},
    http::Uri,
    response::IntoResponse,
};
use sundial_core::{DeadJob, JobId, keys};
use sundial_router::{Pool, placement};

use super::answers::{
    self,
    jobs::{DeadDeleted, DeadJobList, DeadRespawned, JobSummary},
};
use super::queues::{page_size, queue_route};
use crate::openapi::doc;
use crate::{
    api::{error::ApiError, queue::counts_of},
    state::AppState,
};

/// Body bytes shown per dead job: default and most.
const PREVIEW: u64 = 256;
const MAX_PREVIEW: u64 = 4096;
/// Job ids one respawn or delete call may name.
const MAX_IDS: usize = 1000;

/// The `preview` parameter: body bytes shown per job.
pub(super) fn preview_of(params: &crate::api::params::Params) -> Result<u64, ApiError> {
    match params.uint("preview", PREVIEW)? {
        n @ 0..=MAX_PREVIEW => Ok(n),
        _ => Err(ApiError::bad(format!(
            "invalid preview: 0 to {MAX_PREVIEW}"
        ))),
    }
}

/// A place in a dead letter: the index of one of the queue's places
/// (`placement::queue_places`) and how many entries of its list were passed.
fn parse_dead_cursor(c: &str) -> Option<(usize, u64)> {
    let (place, skip) = c.split_once('.')?;
    Some((place.parse().ok()?, skip.parse().ok()?))
}

/// Page through a dead letter
///
/// Dead jobs with their tries, attributes, publish and death times, TTL and the
/// start of their body. Oldest first within each of the queue's slots (a queue
/// with several lanes has several). A page read while jobs die or are respawned
/// may show a job twice or pass one.
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/queues/{queue}/deadletter",
    operation_id = "listDeadJobs",
    tag = "queues",
    params(doc::PoolQuery, doc::ListDeadJobsParams, doc::Preview),
    responses(
        (status = 200, description = "A page of dead jobs.", body = crate::admin::answers::jobs::DeadJobList<'_>),
        (status = 400, description = "A bad name or parameter. Messages: `namespace or queue name too long`, `namespace name contains forbidden characters`, `queue name contains forbidden characters`, `invalid limit`, `invalid limit: 1 to 500`, `invalid preview`, `invalid preview: 0 to 4096`, `invalid cursor`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn dead_list(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<impl IntoResponse, ApiError> {
    let (params, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let limit = page_size(&params)?;
    let preview = preview_of(&params)? as usize;
    let (mut place, mut skip) = match params.get("cursor").filter(|c| !c.is_empty()) {
        Some(c) => parse_dead_cursor(&c).ok_or(ApiError::bad("invalid cursor"))?,
        None => (0, 0),
    };
    let places = placement::queue_places(&pool, &ns, &queue);
    let qualified = keys::qualified(&ns, &queue);
    let mut jobs = Vec::new();
    let mut seen = std::collections::HashSet::new();
    while place < places.len() && (jobs.len() as u64) < limit {
        let (shard, slot) = places[place];
        let want = limit - jobs.len() as u64;
        let page = shard
            .dead_letter()
            .list(slot, &qualified, skip, want)
            .await?;
        for j in page.jobs {
            if seen.insert(j.id.clone()) {
                jobs.push(dead_job(j, page.now_ms, preview));
            }
        }
        skip += page.read;
        if page.read == 0 || skip >= page.entries {
            place += 1;
            skip = 0;
        }
    }
    let next = (place < places.len()).then(|| format!("{place}.{skip}"));
    Ok(Json(DeadJobList {
        pool: pool.name(),
        namespace: &ns,
        queue: &queue,
        jobs,
        next_cursor: next,
    })
    .into_response())
}

/// A dead job as the listing shows it, read at `now_ms` (the shard's
/// clock), with the first `preview` bytes of its body.
fn dead_job(j: DeadJob, now_ms: u64, preview: usize) -> answers::jobs::DeadJob {
    let shown = &j.body[..j.body.len().min(preview)];
    let ttl = match j.expire_ms {
        0 => 0,
        at => at.saturating_sub(now_ms).div_ceil(1000),
    };
    let size = j.body.len() as u64;
    answers::jobs::DeadJob {
        job: JobSummary::new(j.id, j.tries_left, ttl, &j.attrs, size, shown)
            .with_history(j.delivery, &j.reason)
            .with_priority(j.priority),
        published_at_ms: j.published_ms,
        died_at_ms: j.died_ms,
    }
}

/// The body of a respawn or delete: `{"ids": [...]}` or `{"all": true}`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Pick {
    #[serde(default)]
    ids: Vec<String>,
    #[serde(default)]
    all: bool,
    /// With `all`: at most this many (the rest stays for the next call).
    limit: Option<u64>,
    /// For respawn: the respawned jobs' TTL in seconds (default: the
    /// gateway's default TTL; 0 = never expire).
    ttl: Option<u32>,
}

/// Respawn chosen dead jobs
///
/// Moves the dead jobs named (or all, up to `limit`) back to ready, each with
/// one try and the new TTL. A malformed id changes nothing.
#[utoipa::path(
    post,
    path = "/namespaces/{ns}/queues/{queue}/deadletter/respawn",
    operation_id = "respawnDeadJobs",
    tag = "queues",
    params(doc::PoolQuery),
    request_body(content = doc::DeadPick),
    responses(
        (status = 200, description = "What was done.", body = crate::admin::answers::jobs::DeadRespawned),
        (status = 400, description = "The body or a name was refused; nothing was changed. Messages: `namespace or queue name too long`, `namespace name contains forbidden characters`, `queue name contains forbidden characters`, `invalid body: expected {\"ids\":[\"<job id>\", ...]} or {\"all\":true[,\"limit\":N]}`, `name either ids or all`, `at most 1000 ids per call`, `invalid limit`, `01JD3M6Y7ZQ8K5X4W2V1T0S9R: invalid job id`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 408, response = doc::RequestTimeout),
        (status = 413, description = "The body is over 256 KiB. Messages: `body too large`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn dead_respawn(
    state: State<Arc<AppState>>,
    path: Path<(String, String)>,
    uri: Uri,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    pick(state, path, uri, body, "respawn").await
}

/// Delete chosen dead jobs
///
/// Deletes the dead jobs named (or all, up to `limit`). Same body as respawn,
/// without `ttl` (400 `a delete takes no ttl`).
#[utoipa::path(
    post,
    path = "/namespaces/{ns}/queues/{queue}/deadletter/delete",
    operation_id = "deleteDeadJobs",
    tag = "queues",
    params(doc::PoolQuery),
    request_body(content = doc::DeadPick),
    responses(
        (status = 200, description = "What was done.", body = crate::admin::answers::jobs::DeadDeleted),
        (status = 400, description = "The body or a name was refused; nothing was changed. Messages: `namespace or queue name too long`, `namespace name contains forbidden characters`, `queue name contains forbidden characters`, `invalid body: expected {\"ids\":[\"<job id>\", ...]} or {\"all\":true[,\"limit\":N]}`, `name either ids or all`, `at most 1000 ids per call`, `invalid limit`, `01JD3M6Y7ZQ8K5X4W2V1T0S9R: invalid job id`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 408, response = doc::RequestTimeout),
        (status = 413, description = "The body is over 256 KiB. Messages: `body too large`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn dead_delete(
    state: State<Arc<AppState>>,
    path: Path<(String, String)>,
    uri: Uri,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    pick(state, path, uri, body, "delete").await
}

/// Respawns or deletes the chosen dead jobs, or the whole dead letter (up
/// to `limit`), and says what it did: how many, which of the ids named were
/// not dead jobs of the queue, and how many dead jobs are left.
async fn pick(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
    body: Body,
    mode: &'static str,
) -> Result<impl IntoResponse, ApiError> {
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let pick = read_pick(&state, body, mode).await?;
    let ttl_ms = match (mode, pick.ttl) {
        ("respawn", Some(t)) => u64::from(t) * 1000,
        ("respawn", None) => u64::from(state.limits.default_ttl_secs) * 1000,
        _ => 0,
    };
    let dead = DeadLetter {
        pool: &pool,
        ns: &ns,
        queue: &queue,
        qualified: keys::qualified(&ns, &queue),
    };
    let (done, missing) = if pick.all {
        let limit = pick.limit.unwrap_or(u64::MAX);
        (dead.all(mode, limit, ttl_ms).await?, Vec::new())
    } else {
        dead.ids(mode, ttl_ms, &pick.ids).await?
    };
    let left = counts_of(&pool, &ns, &queue).await?.dead;
    tracing::info!(
        ns,
        queue,
        pool = pool.name(),
        mode,
        done,
        "dead letter changed by admin"
    );
    let answer = if mode == "respawn" {
        Json(DeadRespawned {
            respawned: done,
            not_found: missing,
            deadletter_size: left,
        })
        .into_response()
    } else {
        Json(DeadDeleted {
            deleted: done,
            not_found: missing,
            deadletter_size: left,
        })
        .into_response()
    };
    Ok(answer)
}

/// The body of a respawn or delete, read and checked.
async fn read_pick(state: &AppState, body: Body, mode: &str) -> Result<Pick, ApiError> {
    let read = crate::api::body::read(&state.bodies, body, 256 * 1024, "body too large").await?;
    let pick: Pick = serde_json::from_slice(&read.bytes).map_err(|_| {
        ApiError::bad(
            "invalid body: expected {\"ids\":[\"<job id>\", ...]} or {\"all\":true[,\"limit\":N]}",
        )
    })?;
    // Exactly one of the two.
    if matches!(
        (pick.all, pick.ids.is_empty()),
        (true, false) | (false, true)
    ) {
        return Err(ApiError::bad("name either ids or all"));
    }
    if pick.ids.len() > MAX_IDS {
        return Err(ApiError::bad(format!("at most {MAX_IDS} ids per call")));
    }
    if pick.limit == Some(0) {
        return Err(ApiError::bad("invalid limit"));
    }
    // What would be ignored is refused, so that a caller learns it.
    if pick.limit.is_some() && !pick.all {
        return Err(ApiError::bad("limit goes with all, not with ids"));
    }
    if mode == "delete" && pick.ttl.is_some() {
        return Err(ApiError::bad("a delete takes no ttl"));
    }
    Ok(pick)
}

/// The dead letter a respawn or delete works on.
struct DeadLetter<'a> {
    pool: &'a Pool,
    ns: &'a str,
    queue: &'a str,
    qualified: String,
}

impl DeadLetter<'_> {
    /// Respawns or deletes the whole dead letter, up to `limit` jobs, place
    /// by place; how many.
    async fn all(&self, mode: &str, limit: u64, ttl_ms: u64) -> Result<u64, ApiError> {
        let qualified = &self.qualified;
        let mut done = 0u64;
        for (shard, slot) in placement::queue_places(self.pool, self.ns, self.queue) {
            if done >= limit {
                break;
            }
            done += match mode {
                "respawn" => {
                    shard
                        .dead_letter()
                        .respawn(slot, qualified, limit - done, ttl_ms)
                        .await?
                }
                _ => {
                    shard
                        .dead_letter()
                        .delete(slot, qualified, limit - done)
                        .await?
                }
            };
        }
        Ok(done)
    }

    /// Respawns or deletes the named dead jobs: how many, and the ids that
    /// were not dead jobs of the queue.
    async fn ids(
        &self,
        mode: &str,
        ttl_ms: u64,
        raw_ids: &[String],
    ) -> Result<(u64, Vec<String>), ApiError> {
        let (pool, qualified) = (self.pool, &self.qualified);
        let mut done = 0u64;
        let mut missing = Vec::new();
        // Ids by slot (a job's lane gives it), each slot's ids in one call
        // per place, where the slot is written now first.
        let mut by_slot: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for raw in raw_ids {
            let id = JobId::parse(raw).map_err(|e| ApiError::bad(format!("{raw}: {e}")))?;
            let slot = pool.slot_of(self.ns, self.queue, id.lane(pool.lanes()));
            by_slot
                .entry(slot)
                .or_default()
                .push(id.as_str().to_owned());
        }
        for (slot, mut ids) in by_slot {
            for shard in placement::slot_places(pool, slot) {
                if ids.is_empty() {
                    break;
                }
                let handled = shard
                    .dead_letter()
                    .pick(slot, qualified, mode, ttl_ms, &ids)
                    .await?;
                let mut left = Vec::new();
                for (id, ok) in ids.into_iter().zip(handled) {
                    if ok {
                        done += 1;
                    } else {
                        left.push(id);
                    }
                }
                ids = left;
            }
            missing.extend(ids);
        }
        Ok((done, missing))
    }
}
