//! `POST /namespaces/{ns}/import`: the NDJSON lines of a body stored as
//! jobs of a namespace, line by line, in batches per place.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::{Path, State},
    http::Uri,
    response::IntoResponse,
};
use bytes::BytesMut;
use http_body_util::BodyExt;
use sundial_core::{JobId, PortableJob, Shard, job::MAX_BODY_BYTES, key_lane, keys};
use sundial_router::Pool;

use super::{line::Line, places::wholly_in};
use crate::admin::answers::namespaces::ImportResult;
use crate::openapi::doc;
use crate::{admin::queues::namespace_route, api::error::ApiError, state::AppState};

/// Jobs per import batch (one script call).
const BATCH: usize = 200;
/// Bytes of jobs an import holds before it stores them.
const HELD_BYTES: usize = 4 * 1024 * 1024;
/// The longest line: a largest body in base64 and room for the rest.
const MAX_LINE: usize = MAX_BODY_BYTES / 3 * 4 + 64 * 1024;
/// Imports that may run at once: each holds its share of the body budget
/// for as long as its body takes.
static IMPORTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);
/// Queues noted before they are added to the queue index (and forgotten).
const INDEX_EVERY: usize = 100;

/// What an import did so far.
#[derive(Debug, Default)]
struct Imported {
    imported: u64,
    existing: u64,
    /// Schedules stored (paused), new or over one of the same name.
    schedules: u64,
}

/// Jobs read but not stored yet, per place.
struct Held<'a> {
    pool: &'a Pool,
    batches: BTreeMap<(String, u32), (Shard, Vec<PortableJob>)>,
    bytes: usize,
    done: Imported,
}

impl Held<'_> {
    async fn add(&mut self, id: &JobId, mut job: PortableJob) -> Result<(), ApiError> {
        let (_, queue) = keys::parse_qualified(&job.queue).unwrap_or_default();
        let ns = keys::parse_qualified(&job.queue).map_or("", |(n, _)| n);
        let lane = id.lane(self.pool.lanes());
        // A key lives in its lane's slot (`sundial_core::key_lane`), which
        // is the id's in the pool the job was published to; in a pool of
        // another lane count it may not be, and the job comes without it.
        if !job.key.is_empty() && key_lane(&job.key, self.pool.lanes()) != lane {
            job.key.clear();
        }
        let slot = self.pool.slot_of(ns, queue, lane);
        let shard = self.pool.shard_for(slot);
        self.bytes += job.body.len() + job.attrs.len() + 64;
        let key = (shard.name().to_owned(), slot);
        let batch = &mut self
            .batches
            .entry(key.clone())
            .or_insert_with(|| (shard.clone(), Vec::new()))
            .1;
        batch.push(job);
        if batch.len() >= BATCH {
            self.store(Some(key)).await?;
        }
        if self.bytes >= HELD_BYTES {
            self.store(None).await?;
        }
        Ok(())
    }

    /// Stores one place's batch, or every batch.
    async fn store(&mut self, only: Option<(String, u32)>) -> Result<(), ApiError> {
        let keys: Vec<(String, u32)> = match only {
            Some(k) => vec![k],
            None => self.batches.keys().cloned().collect(),
        };
        for k in keys {
            let Some((shard, jobs)) = self.batches.remove(&k) else {
                continue;
            };
            let c = shard.portable().import(k.1, &jobs).await?;
            self.done.imported += c.copied;
            self.done.existing += c.skipped;
            self.bytes = self
                .bytes
                .saturating_sub(jobs.iter().map(|j| j.body.len() + j.attrs.len() + 64).sum());
        }
        if self.batches.is_empty() {
            self.bytes = 0;
        }
        Ok(())
    }
}

/// Reads the body's lines into `held` (which stores them in batches),
/// noting each queue in `queues`, until its end or a line that is not a
/// job (400 naming it).
async fn read_lines(
    state: &AppState,
    body: Body,
    ns: &str,
    held: &mut Held<'_>,
    queues: &mut std::collections::BTreeSet<String>,
) -> Result<(), ApiError> {
    let mut lines = BodyLines {
        body,
        buf: BytesMut::new(),
        ended: false,
    };
    let mut line_no = 0u64;
    while let Some(line) = lines.next(state).await? {
        line_no += 1;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if super::schedule_line::is_schedule(text) {
            schedule(state, ns, text, line_no, held).await?;
            continue;
        }
        let parsed = serde_json::from_slice::<Line>(text)
            .map_err(|e| e.to_string())
            .and_then(|l| l.job(ns));
        let (id, job) = match parsed {
            Ok(j) => j,
            Err(why) => return Err(refused(held, line_no, &why).await),
        };
        if let Some((_, q)) = keys::parse_qualified(&job.queue)
            && !queues.contains(q)
        {
            queues.insert(q.to_owned());
        }
        held.add(&id, job).await?;
        if queues.len() >= INDEX_EVERY {
            // Stored first: the index names queues that hold jobs.
            held.store(None).await?;
            index(state, held.pool, ns, queues).await?;
        }
    }
    Ok(())
}

/// Stores the schedule of line `line_no` (`text`), paused, counting it
/// in `held`; a line that is not one is 400 as a job's is.
async fn schedule(
    state: &AppState,
    ns: &str,
    text: &[u8],
    line_no: u64,
    held: &mut Held<'_>,
) -> Result<(), ApiError> {
    let now = crate::api::queue::unix_ms();
    match super::schedule_line::import(state, held.pool.name(), ns, text, now).await {
        Ok(Ok(_)) => {
            held.done.schedules += 1;
            Ok(())
        }
        Ok(Err(why)) => Err(refused(held, line_no, &why).await),
        Err(e) => {
            // The lines before it are stored first, as for a line refused.
            held.store(None).await?;
            Err(e.into())
        }
    }
}

/// The 400 of line `line_no`, refused for `why`, once the lines before it
/// are stored (to be counted).
async fn refused(held: &mut Held<'_>, line_no: u64, why: &str) -> ApiError {
    if let Err(e) = held.store(None).await {
        return e;
    }
    ApiError::bad(format!(
        "line {line_no}: {why} ({} job(s) of the lines before it imported, {} there already)",
        held.done.imported, held.done.existing
    ))
}

/// An import body cut into lines as its chunks arrive.
struct BodyLines {
    body: Body,
    buf: BytesMut,
    ended: bool,
}

impl BodyLines {
    /// The next line (with its `\n`, but for a last line without one), or
    /// `None` at the body's end. A line longer than [`MAX_LINE`] is 413; a
    /// chunk that takes longer than the body timeout, 408.
    async fn next(&mut self, state: &AppState) -> Result<Option<BytesMut>, ApiError> {
        while !self.ended || !self.buf.is_empty() {
            match self.buf.iter().position(|b| *b == b'\n') {
                Some(i) => return Ok(Some(self.buf.split_to(i + 1))),
                None if self.ended => return Ok(Some(self.buf.split())),
                None => {}
            }
            if self.buf.len() > MAX_LINE {
                return Err(ApiError::TooLarge("an import line is too long"));
            }
            match tokio::time::timeout(state.bodies.timeout(), self.body.frame()).await {
                Err(_) => return Err(ApiError::RequestTimeout("request body too slow")),
                Ok(None) => self.ended = true,
                Ok(Some(Err(_))) => return Err(ApiError::bad("failed to read body")),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
        Ok(None)
    }
}

/// Adds the noted queues to the namespace's queue index (so that the admin
/// listing and a later export find them, as a publish would add them), and
/// forgets them.
async fn index(
    state: &AppState,
    pool: &Pool,
    ns: &str,
    queues: &mut std::collections::BTreeSet<String>,
) -> Result<(), ApiError> {
    let names: Vec<String> = std::mem::take(queues).into_iter().collect();
    state.admin.queues().add(pool.name(), ns, &names).await?;
    Ok(())
}

/// Import jobs into a namespace (NDJSON)
///
/// Stores the jobs of an NDJSON body, one `PortableJob` per line as an export
/// writes them, in the namespace (whatever namespace they were exported from)
/// of the pool: each with its state, tries, attributes, body, and its times
/// counted from now (a delayed job is due `delay_ms` from now, a reserved job's
/// TTR runs out `ttr_ms` from now). A job whose id the namespace's slot holds
/// already is skipped and counted in `existing`, so an import may run again
/// after a failure. Read line by line and stored in batches (one script per
/// slot and batch), in bounded memory; each chunk of the body must arrive
/// within `http.body_timeout_ms` of the one before. A line that is not a valid
/// job stops the import: 400 naming the line, the lines before it stored (and
/// counted in the message). Blank lines are skipped. A schedule's line (it
/// starts with its `schedule` field, as an export writes it) stores that
/// schedule, paused, over one of the same name: resume it once it should
/// fire here (`POST /api/{ns}/{queue}/schedules/{name}/resume`).
#[utoipa::path(
    post,
    path = "/namespaces/{ns}/import",
    operation_id = "importNamespace",
    tag = "queues",
    params(doc::PoolQuery),
    request_body(content = crate::admin::portable::line::Line, content_type = "application/x-ndjson"),
    responses(
        (status = 200, description = "What was stored.", body = crate::admin::answers::namespaces::ImportResult<'_>),
        (status = 400, description = "A line that is not a valid job (the lines before it are stored), or a bad namespace name. Messages: `line 3: invalid job id (0 job(s) of the lines before it imported, 2 there already)`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 404, description = "Unknown pool. Messages: `pool not found`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 408, response = doc::RequestTimeout),
        (status = 409, description = "The namespace moves into or out of this pool, or its tokens of this pool are served from another (its jobs are there): nothing is read or stored. Messages: `namespace shop is moving from pool default to pool b (moving): export or import it once it is moved`, `namespace shop of pool default moved to pool b: its jobs are there (pool=b)`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 413, response = doc::PayloadTooLarge),
        (status = 500, response = doc::Internal),
        (status = 503, response = doc::Unavailable),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(in crate::admin) async fn import(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let (_, pool) = namespace_route(&state, &ns, &uri)?;
    wholly_in(&state, &pool, &ns)?;
    // A few imports at a time (a body may take long to arrive), each with
    // room for a line and the jobs held from the budget all bodies share.
    let _turn = IMPORTS.try_acquire().map_err(|_| ApiError::Busy)?;
    let _room = state.bodies.take(MAX_LINE + HELD_BYTES + 64 * 1024)?;
    let mut held = Held {
        pool: &pool,
        batches: BTreeMap::new(),
        bytes: 0,
        done: Imported::default(),
    };
    let mut queues = std::collections::BTreeSet::new();
    let read = read_lines(&state, body, &ns, &mut held, &mut queues).await;
    // What was stored is stored, whatever stopped the import: the admin
    // listing (and a later export) must find its queues, as a publish
    // would add them.
    let stored = held.store(None).await;
    index(&state, &pool, &ns, &mut queues).await?;
    read?;
    stored?;
    tracing::info!(
        namespace = ns,
        imported = held.done.imported,
        existing = held.done.existing,
        "namespace imported"
    );
    Ok(Json(ImportResult {
        pool: pool.name(),
        namespace: &ns,
        imported: held.done.imported,
        existing: held.done.existing,
        schedules: held.done.schedules,
    })
    .into_response())
}
