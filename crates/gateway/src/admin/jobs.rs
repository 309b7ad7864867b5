//! A queue's jobs for operators, whatever their state: page through the
//! ready, delayed, reserved or dead ones, or look one up by id. Reads only,
//! in the pool `?pool=` names; each page reads a bounded number of entries
//! (`READ_BUDGET`), so a listing never scans a whole slot at once.

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, State},
    http::Uri,
    response::{IntoResponse, Response},
};
use sundial_core::{JobId, ListAsk, ListState, ListedJob, keys, state};
use sundial_router::placement;

use super::answers::jobs::{JobSummary, QueueJob, QueueJobFound, QueueJobList, StateTime};
use super::{
    deadletter::preview_of,
    queues::{page_size, queue_route},
};
use crate::openapi::doc;
use crate::{api::error::ApiError, state::AppState};

/// Entries one page may read in all (over its script calls): a page of a
/// state that is rare among a slot's timer entries ends early, with a
/// cursor, rather than reading on.
const READ_BUDGET: u64 = 10_000;
/// Entries one script call reads at most.
const CALL_BUDGET: u64 = 1_000;

/// A place in a listing: the index of one of the queue's places
/// (`placement::queue_places`) and where its slot's listing goes on.
fn parse_cursor(c: &str) -> Option<(usize, (u64, u64))> {
    let mut parts = c.split('.');
    let place = parts.next()?.parse().ok()?;
    let a = parts.next()?.parse().ok()?;
    let b = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((place, (a, b)))
}

/// Page through a queue's jobs in one state
///
/// The queue's jobs in one state, each with its tries, times, attributes and
/// the start of its body. Within each of the queue's slots: ready and dead jobs
/// oldest first; reserved jobs, and delayed jobs due within about 2 s, in timer
/// order; then delayed jobs due later, by due second. A page reads at most
/// 10,000 entries of the slots' lists and timers: a page of a state that is
/// rare among them can hold fewer jobs than `limit`, with a `next_cursor`. A
/// page read while jobs change state may show a job twice or pass one.
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/queues/{queue}/jobs",
    operation_id = "listQueueJobs",
    tag = "queues",
    params(doc::PoolQuery, doc::ListQueueJobsParams, doc::Preview),
    responses(
        (status = 200, description = "A page of jobs.", body = crate::admin::answers::jobs::QueueJobList<'_>),
        (status = 400, description = "A bad name or parameter. Messages: `namespace or queue name too long`, `namespace name contains forbidden characters`, `queue name contains forbidden characters`, `invalid limit: 1 to 500`, `invalid preview: 0 to 4096`, `invalid cursor`, `invalid state: ready, delayed, reserved or dead`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
)]
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (params, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let limit = page_size(&params)?;
    let preview = preview_of(&params)?;
    let which = params.get("state").filter(|s| !s.is_empty());
    let which = match which.as_deref() {
        None => ListState::Ready,
        Some(s) => ListState::parse(s).ok_or(ApiError::bad(
            "invalid state: ready, delayed, reserved or dead",
        ))?,
    };
    let (mut place, mut at) = match params.get("cursor").filter(|c| !c.is_empty()) {
        Some(c) => parse_cursor(&c).ok_or(ApiError::bad("invalid cursor"))?,
        None => (0, (0, 0)),
    };
    let places = placement::queue_places(&pool, &ns, &queue);
    let qualified = keys::qualified(&ns, &queue);
    let (mut jobs, mut seen, mut read) = (Vec::new(), std::collections::HashSet::new(), 0);
    while place < places.len() && (jobs.len() as u64) < limit && read < READ_BUDGET {
        let (shard, slot) = places[place];
        let want = limit - jobs.len() as u64;
        let budget = CALL_BUDGET.min(READ_BUDGET - read);
        let ask = ListAsk {
            state: which,
            at,
            want,
            budget,
            preview,
        };
        let page = shard.queues().list_jobs(slot, &qualified, ask).await?;
        read += budget;
        for j in page.jobs {
            if seen.insert(j.id.clone()) {
                jobs.push(listed(j, which, page.now_ms));
            }
        }
        match page.next {
            Some(next) => at = next,
            None => (place, at) = (place + 1, (0, 0)),
        }
    }
    let next = (place < places.len()).then(|| format!("{place}.{}.{}", at.0, at.1));
    Ok(Json(QueueJobList {
        pool: pool.name(),
        namespace: &ns,
        queue: &queue,
        state: which.name(),
        jobs,
        next_cursor: next,
    })
    .into_response())
}

/// A listed job, read at `now_ms` (the shard's clock).
fn listed(j: ListedJob, which: ListState, now_ms: u64) -> QueueJob {
    let at_ms = (j.at_ms > 0).then_some(j.at_ms);
    let at = match which {
        ListState::Ready => StateTime::ReadySince(at_ms),
        ListState::Delayed => StateTime::DueAt(at_ms),
        ListState::Reserved => StateTime::TtrDeadline(at_ms),
        ListState::Dead => StateTime::DiedAt(at_ms),
    };
    let ttl = ttl_secs(j.expire_ms, now_ms);
    QueueJob {
        job: JobSummary::new(
            j.id,
            j.tries_left,
            ttl,
            &j.attrs,
            j.body_size,
            &j.body_preview,
        )
        .with_history(j.delivery, &j.reason)
        .with_priority(j.priority),
        published_at_ms: j.published_ms,
        at,
    }
}

/// Seconds of TTL left (rounded up), 0 for a job that never expires.
fn ttl_secs(expire_ms: u64, now_ms: u64) -> u64 {
    match expire_ms {
        0 => 0,
        at => at.saturating_sub(now_ms).div_ceil(1000),
    }
}

/// Look a job up by id, in any state
///
/// One job of the queue in the pool, whatever its state, with the start of its
/// body. Unlike the job API's `GET /api/{ns}/{queue}/job/{job_id}`, needs no
/// tenant token and shows the job's state.
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/queues/{queue}/jobs/{job_id}",
    operation_id = "getQueueJob",
    tag = "queues",
    params(doc::PoolQuery, doc::Preview),
    responses(
        (status = 200, description = "The job.", body = crate::admin::answers::jobs::QueueJobFound<'_>),
        (status = 400, description = "A bad name or parameter. Messages: `namespace or queue name too long`, `namespace name contains forbidden characters`, `queue name contains forbidden characters`, `invalid job id`, `invalid preview: 0 to 4096`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "Unknown pool, or no such job in the queue. Messages: `pool not found`, `job not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
)]
pub(super) async fn one(
    State(state): State<Arc<AppState>>,
    Path((ns, queue, id)): Path<(String, String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (params, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let preview = preview_of(&params)? as usize;
    let job_id = JobId::parse(&id).map_err(|e| ApiError::bad(e.to_string()))?;
    let qualified = keys::qualified(&ns, &queue);
    let slot = pool.slot_of(&ns, &queue, job_id.lane(pool.lanes()));
    for shard in placement::slot_places(&pool, slot) {
        if let Some(j) = shard.jobs().peek(slot, &qualified, &job_id).await? {
            let shown = &j.body[..j.body.len().min(preview)];
            let state_name = match j.state {
                state::DELAYED => "delayed",
                state::READY => "ready",
                state::RESERVED => "reserved",
                _ => "dead",
            };
            let ttl = j.ttl_ms.div_ceil(1000);
            let size = j.body.len() as u64;
            return Ok(Json(QueueJobFound {
                pool: pool.name(),
                namespace: &ns,
                queue: &queue,
                state: state_name,
                elapsed_ms: j.elapsed_ms,
                job: JobSummary::new(j.id.clone(), j.tries_left, ttl, &j.attrs, size, shown)
                    .with_history(j.delivery, &j.reason)
                    .with_priority(j.priority),
            })
            .into_response());
        }
    }
    Err(ApiError::NotFound("job not found"))
}
