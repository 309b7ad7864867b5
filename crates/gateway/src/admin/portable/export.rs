//! `GET /namespaces/{ns}/export`: a namespace's jobs streamed as NDJSON,
//! a page of one place at a time.

use std::sync::Arc;

use axum::{
    body::{Body, Bytes},
    extract::{Path, State},
    http::{HeaderValue, Uri, header},
    response::{IntoResponse, Response},
};
use sundial_core::{PageSize, PortableJob, Shard};

use super::{
    line::Line,
    places::{places, wholly_in},
};
use crate::openapi::doc;
use crate::{admin::queues::namespace_route, api::error::ApiError, state::AppState};

/// Records read per export page, at most (fewer when their bodies are
/// large: see `PageSize`).
const PAGE: u32 = 200;

/// Every page of the namespace's jobs at one place, as NDJSON, to `tx`:
/// delayed and reserved jobs, then each queue's ready and dead lists.
async fn export_place(
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    shard: &Shard,
    slot: u32,
    ns: &str,
    queues: &[String],
) -> Result<u64, sundial_core::EngineError> {
    let mut n = 0;
    let send = |jobs: Vec<PortableJob>| {
        let mut out = Vec::new();
        for j in &jobs {
            // A record whose state byte names no state is damaged (the
            // scripts pass over such records in the lists and the hash, as
            // they pass over stale ids; a job in transit comes as taken):
            // the export fails there, as when a shard fails, rather than
            // write a line that no import takes.
            let line = Line::of(j).ok_or_else(|| sundial_core::EngineError::Reply {
                shard: shard.name().to_owned(),
                what: format!(
                    "job {} of {ns} has a record of no known state ({})",
                    j.id, j.state
                ),
            })?;
            if serde_json::to_writer(&mut out, &line).is_ok() {
                out.push(b'\n');
            }
        }
        Ok((jobs.len() as u64, Bytes::from(out)))
    };
    // The jobs hash, the lists, and last the jobs in transit (a mover took
    // them out of the hash or a list and has not let them go: a job may be
    // read twice, here and at its copy).
    for transit in [false, true] {
        if transit {
            for q in queues {
                lists(tx, shard, slot, q, &send, &mut n).await?;
            }
        }
        let mut cursor = "0".to_owned();
        let mut size = PageSize::new(PAGE);
        loop {
            let page = shard
                .portable()
                .export_scan(slot, ns, transit, &cursor, size.get())
                .await?;
            size.saw(page.jobs.len(), page.bytes());
            let (k, chunk) = send(page.jobs)?;
            n += k;
            if !chunk.is_empty() && tx.send(Ok(chunk)).await.is_err() {
                return Ok(n);
            }
            match page.next {
                Some(c) => cursor = c,
                None => break,
            }
        }
    }
    Ok(n)
}

/// The ready and dead lists of queue `q` at one place, newest first.
async fn lists(
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    shard: &Shard,
    slot: u32,
    q: &str,
    send: &impl Fn(Vec<PortableJob>) -> Result<(u64, Bytes), sundial_core::EngineError>,
    n: &mut u64,
) -> Result<(), sundial_core::EngineError> {
    for dead in [false, true] {
        let mut passed = 0u64;
        let mut size = PageSize::new(PAGE);
        loop {
            let page = shard
                .portable()
                .export_list(slot, q, dead, passed, size.get())
                .await?;
            size.saw(page.jobs.len(), page.bytes());
            let (k, chunk) = send(page.jobs)?;
            *n += k;
            if !chunk.is_empty() && tx.send(Ok(chunk)).await.is_err() {
                return Ok(());
            }
            match page.next.and_then(|p| p.parse().ok()) {
                Some(p) => passed = p,
                None => break,
            }
        }
    }
    Ok(())
}

/// Export a namespace's jobs (NDJSON)
///
/// Streams every job of the namespace in the pool, one JSON object per line
/// (`PortableJob`), for backups and for moving a tenant to another installation
/// or pool (`POST /namespaces/{ns}/import`). Its schedules come first, a line
/// each (`ScheduleLine`: `{"schedule","queue","spec","paused"}`, the spec as
/// `PUT /api/{ns}/{queue}/schedules/{name}` takes it). Per slot: delayed and reserved
/// jobs, then each queue's ready and dead jobs newest first (an import keeps
/// their order). Read a page (at most 200 records, and about 8 MiB) at a time,
/// each page one read-only script, at the pace the client reads: the gateway
/// holds a few pages at most. Jobs that change state while the export runs may
/// be listed twice (an import skips a job it has) or, for a ready job consumed
/// meanwhile, not at all: export a namespace whose consumers are stopped for an
/// exact copy. A shard that fails midway ends the response without its final
/// chunk (an incomplete transfer, never a file that looks whole). A namespace
/// without jobs exports an empty body.
#[utoipa::path(
    get,
    path = "/namespaces/{ns}/export",
    operation_id = "exportNamespace",
    tag = "queues",
    params(doc::PoolQuery),
    responses(
        (status = 200, description = "The jobs, one per line.", body = crate::admin::portable::line::Line, content_type = "application/x-ndjson"),
        (status = 400, response = doc::BadRequest),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 409, description = "The namespace moves into or out of this pool, or its tokens of this pool are served from another (its jobs are there): nothing is read or stored. Messages: `namespace shop is moving from pool default to pool b (moving): export or import it once it is moved`, `namespace shop of pool default moved to pool b: its jobs are there (pool=b)`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(in crate::admin) async fn export(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (_, pool) = namespace_route(&state, &ns, &uri)?;
    wholly_in(&state, &pool, &ns)?;
    let places = places(&state, &pool, &ns).await?;
    // A few chunks in flight: the walk goes at the pace the client reads.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let schedules = super::schedule_line::lines(&state, pool.name(), &ns);
    tokio::spawn(async move {
        if !schedules.is_empty() && tx.send(Ok(schedules)).await.is_err() {
            return;
        }
        let mut jobs = 0;
        for (shard, slot, queues) in &places {
            match export_place(&tx, shard, *slot, &ns, queues).await {
                Ok(n) => jobs += n,
                Err(e) => {
                    tracing::warn!(namespace = ns, shard = shard.name(), slot, error = %e, "an export stopped midway");
                    let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                    return;
                }
            }
            if tx.is_closed() {
                return;
            }
        }
        tracing::info!(namespace = ns, jobs, "namespace exported");
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut response = Body::from_stream(stream).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(response)
}
