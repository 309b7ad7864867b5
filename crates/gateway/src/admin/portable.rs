//! A namespace's jobs as NDJSON, for backups and for moving tenants between
//! installations: `GET /namespaces/{ns}/export` streams one line per job,
//! `POST /namespaces/{ns}/import` stores the lines of its body.
//!
//! A line (one JSON object; times in ms, relative to when it was read):
//!
//! ```text
//! {"queue":"q","job_id":"01…","state":"delayed","remain_tries":3,"delivered":false,
//!  "elapsed_ms":1200,"ttl_ms":86399000,"delay_ms":3598800,"attributes":null,"data":"aGk="}
//! ```
//!
//! `state` is `delayed` (with `delay_ms`, until due), `ready`, `reserved`
//! (with `ttr_ms`, until its TTR runs out) or `dead` (with `dead_for_ms`
//! when known); `ttl_ms` is 0 for a job that never expires; `data` is the
//! body in base64. The namespace is the route's, so an export may be
//! imported under another name or pool.
//!
//! Both stream with bounded memory: the export walks the namespace's slots
//! a page at a time (a few hundred jobs), each page one read-only script;
//! the import reads its body line by line and stores each slot's jobs in
//! batches, each batch one script. An import skips a job whose id exists
//! (so it may be run again after a failure, or over an export that holds a
//! job twice, as one taken while jobs change state may).

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Json,
    body::{Body, Bytes},
    extract::{Path, State},
    http::{HeaderValue, Uri, header},
    response::{IntoResponse, Response},
};
use base64::Engine as _;
use bytes::BytesMut;
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sundial_core::{
    JobId, PageSize, PortableJob, Shard,
    job::{
        MAX_ATTRIBUTE_KEY_BYTES, MAX_ATTRIBUTE_VALUE_BYTES, MAX_ATTRIBUTES, MAX_BODY_BYTES,
        check_queue,
    },
    keys, state as st,
};
use sundial_router::{Pool, homes::MoveState};

use super::queues::namespace_route;
use crate::{api::error::ApiError, state::AppState};

/// Records read per export page, at most (fewer when their bodies are
/// large: see `PageSize`).
const PAGE: u32 = 200;
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
/// The longest time a line's ms fields may say: ten years.
const MAX_MS: u64 = 10 * 365 * 86_400_000;

/// One job, as a line of NDJSON.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    queue: String,
    job_id: String,
    state: String,
    remain_tries: u16,
    #[serde(default)]
    delivered: bool,
    #[serde(default)]
    elapsed_ms: u64,
    #[serde(default)]
    ttl_ms: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    delay_ms: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    ttr_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dead_for_ms: Option<u64>,
    #[serde(default)]
    attributes: Option<serde_json::Map<String, serde_json::Value>>,
    data: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

const STATES: [&str; 4] = ["delayed", "ready", "reserved", "dead"];

impl Line {
    fn of(j: &PortableJob) -> Self {
        Self {
            queue: keys::parse_qualified(&j.queue)
                .map_or(j.queue.as_str(), |(_, q)| q)
                .to_owned(),
            job_id: j.id.clone(),
            state: STATES
                .get(usize::from(j.state).wrapping_sub(1))
                .copied()
                .unwrap_or("unknown")
                .to_owned(),
            remain_tries: j.tries,
            delivered: j.delivered,
            elapsed_ms: j.age_ms,
            ttl_ms: j.ttl_ms,
            delay_ms: j.due_in_ms,
            ttr_ms: j.ttr_ms,
            dead_for_ms: j.dead_for_ms,
            attributes: serde_json::from_str(&j.attrs).ok(),
            data: base64::engine::general_purpose::STANDARD.encode(&j.body),
        }
    }

    /// The job this line describes, in namespace `ns`, or why it cannot be.
    fn job(self, ns: &str) -> Result<(JobId, PortableJob), String> {
        check_queue(&self.queue).map_err(|e| e.to_string())?;
        let id = JobId::parse(&self.job_id).map_err(|e| e.to_string())?;
        let state = match STATES.iter().position(|s| *s == self.state) {
            Some(i) => i as u8 + 1,
            None => return Err(format!("invalid state {:?}", self.state)),
        };
        if self.remain_tries == 0 && matches!(state, st::DELAYED | st::READY) {
            return Err("a delayed or ready job needs remain_tries of at least 1".to_owned());
        }
        let times = [
            self.elapsed_ms,
            self.ttl_ms,
            self.delay_ms,
            self.ttr_ms,
            self.dead_for_ms.unwrap_or(0),
        ];
        if times.iter().any(|t| *t > MAX_MS) {
            return Err("a time over ten years".to_owned());
        }
        let body = base64::engine::general_purpose::STANDARD
            .decode(&self.data)
            .map_err(|_| "data is not base64".to_owned())?;
        if body.len() > MAX_BODY_BYTES {
            return Err("job too large".to_owned());
        }
        let attrs = match self.attributes {
            None => String::new(),
            Some(a) if a.is_empty() => String::new(),
            Some(a) => {
                let fits = a.len() <= MAX_ATTRIBUTES
                    && a.iter().all(|(k, v)| {
                        k.len() <= MAX_ATTRIBUTE_KEY_BYTES
                            && v.as_str()
                                .is_some_and(|s| s.len() <= MAX_ATTRIBUTE_VALUE_BYTES)
                    });
                if !fits {
                    return Err(format!(
                        "attributes: at most {MAX_ATTRIBUTES} string values, keys of at most \
                         {MAX_ATTRIBUTE_KEY_BYTES} bytes, values of at most \
                         {MAX_ATTRIBUTE_VALUE_BYTES}"
                    ));
                }
                serde_json::Value::Object(a).to_string()
            }
        };
        let job = PortableJob {
            id: id.as_str().to_owned(),
            queue: keys::qualified(ns, &self.queue),
            state,
            delivered: self.delivered || state == st::RESERVED,
            tries: self.remain_tries,
            age_ms: self.elapsed_ms,
            ttl_ms: self.ttl_ms,
            due_in_ms: if state == st::DELAYED {
                self.delay_ms
            } else {
                0
            },
            ttr_ms: if state == st::RESERVED {
                self.ttr_ms
            } else {
                0
            },
            dead_for_ms: if state == st::DEAD {
                self.dead_for_ms
            } else {
                None
            },
            attrs,
            body: body.into(),
        };
        Ok((id, job))
    }
}

/// Every place (shard, slot) that may hold the namespace's jobs, with the
/// qualified queues of the namespace each holds (from the slots' queue
/// tables and the queue index); by
/// slot, and within a slot where it drains from first, where it is written
/// last: a job a mover carries while the export runs is read before it
/// leaves or after it arrives.
async fn places(
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
            if serde_json::to_writer(&mut out, &Line::of(j)).is_ok() {
                out.push(b'\n');
            }
        }
        (jobs.len() as u64, Bytes::from(out))
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
            let (k, chunk) = send(page.jobs);
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
    send: &impl Fn(Vec<PortableJob>) -> (u64, Bytes),
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
            let (k, chunk) = send(page.jobs);
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

/// Refuses (409) to export or import `ns` in `pool` unless its jobs are
/// all there and served from there: not while it moves into or out of
/// `pool`, nor once its tokens of `pool` moved elsewhere (its jobs went
/// with them: an import here would store jobs nobody is served).
fn settled_in(state: &AppState, pool: &Pool, ns: &str) -> Result<(), ApiError> {
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

/// `GET /namespaces/{ns}/export?pool=`: the namespace's jobs as NDJSON
/// (`application/x-ndjson`), streamed. A failure midway (a shard that does
/// not answer) ends the stream without its last chunk: the client sees an
/// incomplete response, never a short file that looks whole.
pub(super) async fn export(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (_, pool) = namespace_route(&state, &ns, &uri)?;
    settled_in(&state, &pool, &ns)?;
    let places = places(&state, &pool, &ns).await?;
    // A few chunks in flight: the walk goes at the pace the client reads.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
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

/// What an import did so far.
#[derive(Debug, Default)]
struct Imported {
    imported: u64,
    existing: u64,
}

/// Jobs read but not stored yet, per place.
struct Held<'a> {
    pool: &'a Pool,
    batches: BTreeMap<(String, u32), (Shard, Vec<PortableJob>)>,
    bytes: usize,
    done: Imported,
}

impl Held<'_> {
    async fn add(&mut self, id: &JobId, job: PortableJob) -> Result<(), ApiError> {
        let (_, queue) = keys::parse_qualified(&job.queue).unwrap_or_default();
        let ns = keys::parse_qualified(&job.queue).map_or("", |(n, _)| n);
        let slot = self.pool.slot_of(ns, queue, id.lane(self.pool.lanes()));
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
    mut body: Body,
    ns: &str,
    held: &mut Held<'_>,
    queues: &mut std::collections::BTreeSet<String>,
) -> Result<(), ApiError> {
    let mut buf = BytesMut::new();
    let mut line_no = 0u64;
    let mut ended = false;
    while !ended || !buf.is_empty() {
        let line = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => buf.split_to(i + 1),
            None if ended => buf.split(),
            None => {
                if buf.len() > MAX_LINE {
                    return Err(ApiError::TooLarge("an import line is too long"));
                }
                match tokio::time::timeout(state.bodies.timeout(), body.frame()).await {
                    Err(_) => return Err(ApiError::RequestTimeout("request body too slow")),
                    Ok(None) => ended = true,
                    Ok(Some(Err(_))) => return Err(ApiError::bad("failed to read body")),
                    Ok(Some(Ok(frame))) => {
                        if let Ok(data) = frame.into_data() {
                            buf.extend_from_slice(&data);
                        }
                    }
                }
                continue;
            }
        };
        line_no += 1;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed = serde_json::from_slice::<Line>(text)
            .map_err(|e| e.to_string())
            .and_then(|l| l.job(ns));
        let (id, job) = match parsed {
            Ok(j) => j,
            Err(why) => {
                // The lines before it are stored first, to be counted.
                held.store(None).await?;
                return Err(ApiError::bad(format!(
                    "line {line_no}: {why} ({} job(s) of the lines before it imported, {} there already)",
                    held.done.imported, held.done.existing
                )));
            }
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
    state
        .tokens
        .redis()
        .admin()
        .index_queues(pool.name(), ns, &names)
        .await?;
    Ok(())
}

/// `POST /namespaces/{ns}/import?pool=`: stores the jobs of an NDJSON body
/// (as an export writes it) in the namespace; answers how many were stored
/// and how many were there already (by id). A line that is not a valid job
/// stops the import with 400 naming the line; the lines before it are
/// stored. Each chunk of the body must arrive within `http.body_timeout_ms`
/// of the one before.
pub(super) async fn import(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let (_, pool) = namespace_route(&state, &ns, &uri)?;
    settled_in(&state, &pool, &ns)?;
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
    Ok(Json(json!({
        "pool": pool.name(),
        "namespace": ns,
        "imported": held.done.imported,
        "existing": held.done.existing,
    })))
}
