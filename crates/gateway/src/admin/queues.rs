//! A namespace's queues and their dead letters, for operators: list the
//! queues with their backlog and rates, page through a dead letter, and
//! respawn or delete chosen dead jobs (or all of them).
//!
//! The queue list reads the namespace's queue index in the admin Redis
//! (`sd:queues:<pool>/<ns>`, see `sundial_core::keys`), one page at a time,
//! then each listed queue's counters: its cost grows with the queues
//! listed, not with the pool's keyspace.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use axum::{
    Json,
    body::Body,
    extract::{Path, State},
    http::Uri,
    response::IntoResponse,
};
use base64::Engine as _;
use serde_json::json;
use sundial_core::{
    JobId,
    job::{check_namespace, check_queue},
    keys,
};
use sundial_router::{LiveTopology, Pool, tokens::TokenStore};
use tokio_util::sync::CancellationToken;

use crate::{
    api::{
        error::ApiError,
        params::Params,
        queue::{counts_of, stats_of},
    },
    state::AppState,
};

/// Page sizes: default and most.
const PAGE: u64 = 50;
const MAX_PAGE: u64 = 500;
/// Body bytes shown per dead job: default and most.
const PREVIEW: u64 = 256;
const MAX_PREVIEW: u64 = 4096;
/// Job ids one respawn or delete call may name.
const MAX_IDS: usize = 1000;

/// The pool named by `?pool=` (default `default`).
pub(super) fn pool(state: &AppState, params: &Params) -> Result<Arc<Pool>, ApiError> {
    let name = params.get("pool").filter(|p| !p.is_empty()).map_or_else(
        || sundial_router::token::DEFAULT_POOL.to_owned(),
        |p| p.into_owned(),
    );
    state
        .live
        .topology()
        .pool(&name)
        .cloned()
        .ok_or(ApiError::NotFound("pool not found"))
}

pub(super) fn names(ns: &str, queue: Option<&str>) -> Result<(), ApiError> {
    check_namespace(ns).map_err(|e| ApiError::bad(e.to_string()))?;
    if let Some(q) = queue {
        check_queue(q).map_err(|e| ApiError::bad(e.to_string()))?;
    }
    Ok(())
}

/// The opening of every route on one namespace: its query, its checked
/// name, and the pool it names.
pub(super) fn namespace_route(
    state: &AppState,
    ns: &str,
    uri: &Uri,
) -> Result<(Params, Arc<Pool>), ApiError> {
    let params = Params::new(uri);
    names(ns, None)?;
    let pool = pool(state, &params)?;
    Ok((params, pool))
}

/// The opening of every route on one queue: its query, checked names,
/// and the pool it names.
fn queue_route(
    state: &AppState,
    ns: &str,
    queue: &str,
    uri: &Uri,
) -> Result<(Params, Arc<Pool>), ApiError> {
    let params = Params::new(uri);
    names(ns, Some(queue))?;
    let pool = pool(state, &params)?;
    Ok((params, pool))
}

fn page_size(params: &Params) -> Result<u64, ApiError> {
    match params.uint("limit", PAGE)? {
        n @ 1..=MAX_PAGE => Ok(n),
        _ => Err(ApiError::bad(format!("invalid limit: 1 to {MAX_PAGE}"))),
    }
}

/// `GET /namespaces/{ns}/queues?pool=&cursor=&limit=`: the namespace's
/// queues in name order, each with its backlog per state, running totals
/// and rates; `next_cursor` continues the list (`null` at its end).
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    uri: Uri,
) -> Result<impl IntoResponse, ApiError> {
    let (params, pool) = namespace_route(&state, &ns, &uri)?;
    let limit = page_size(&params)?;
    let cursor = params.get("cursor").filter(|c| !c.is_empty());
    if let Some(c) = &cursor {
        check_queue(c).map_err(|_| ApiError::bad("invalid cursor"))?;
    }
    // One more than the page, to know whether another page follows.
    let mut queues = state
        .tokens
        .redis()
        .admin()
        .indexed_queues(pool.name(), &ns, cursor.as_deref(), limit + 1)
        .await?;
    let more = queues.len() as u64 > limit;
    queues.truncate(limit as usize);
    let counted =
        futures::future::try_join_all(queues.iter().map(|q| counts_of(&pool, &ns, q))).await?;
    let mut out = Vec::with_capacity(queues.len());
    for (queue, c) in queues.iter().zip(counted) {
        out.push(stats_of(&state, pool.name(), &ns, queue, &c, true));
    }
    let next = more.then(|| queues.last().cloned());
    // The namespace's move to another pool, if it has one (the dashboard
    // shows it above the queues).
    let moved = state.tokens.home(pool.name(), &ns).map(|h| {
        json!({ "from": h.from, "to": h.to, "state": h.state.as_str(), "since_ms": h.since_ms })
    });
    Ok(Json(json!({
        "pool": pool.name(),
        "namespace": ns,
        "queues": out,
        "next_cursor": next.flatten(),
        "move": moved,
    })))
}

/// `GET /namespaces/{ns}/queues/{queue}?pool=`: one queue, as the listing
/// shows it (a queue that was never published to shows zeros).
pub(super) async fn one(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<impl IntoResponse, ApiError> {
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let c = counts_of(&pool, &ns, &queue).await?;
    let mut out = stats_of(&state, pool.name(), &ns, &queue, &c, true);
    out["pool"] = pool.name().into();
    Ok(Json(out))
}

/// `GET /namespaces?pool=`: the namespaces of the pool that have a token,
/// sorted (a namespace is made by its first token). From this gateway's
/// copy of the token table: no Redis call.
pub(super) async fn namespaces(
    State(state): State<Arc<AppState>>,
    uri: Uri,
) -> Result<impl IntoResponse, ApiError> {
    let pool = pool(&state, &Params::new(&uri))?;
    let namespaces = state
        .tokens
        .namespaces(pool.name())
        .ok_or_else(ApiError::tokens_not_loaded)?;
    Ok(Json(
        json!({ "pool": pool.name(), "namespaces": namespaces }),
    ))
}

/// `GET /namespaces/{ns}/queues/{queue}/history?pool=`: the readings of
/// the queue's backlog and rates this gateway kept (see
/// [`crate::history`]), oldest first.
pub(super) async fn history(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<impl IntoResponse, ApiError> {
    use crate::history::{INTERVAL_MS, WINDOW_MS};
    let (_, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let key = format!("{}/{ns}/{queue}", pool.name());
    let points = state.history.points(&key, crate::api::queue::unix_ms());
    Ok(Json(json!({
        "pool": pool.name(),
        "namespace": ns,
        "queue": queue,
        "interval_s": INTERVAL_MS / 1000,
        "window_s": WINDOW_MS / 1000,
        "points": points,
    })))
}

/// A place in a dead letter: the index of one of the queue's places
/// (`Pool::queue_places`) and how many entries of its list were passed.
fn parse_dead_cursor(c: &str) -> Option<(usize, u64)> {
    let (place, skip) = c.split_once('.')?;
    Some((place.parse().ok()?, skip.parse().ok()?))
}

/// `GET /namespaces/{ns}/queues/{queue}/deadletter?pool=&cursor=&limit=&preview=`:
/// dead jobs with their tries, attributes, publish and death times, TTL
/// and the first `preview` bytes of their body (base64, with its full
/// size). Oldest first within each of the queue's slots; `next_cursor`
/// continues (`null` at the end). A page read while jobs die or are
/// respawned may show a job twice or pass one.
pub(super) async fn dead_list(
    State(state): State<Arc<AppState>>,
    Path((ns, queue)): Path<(String, String)>,
    uri: Uri,
) -> Result<impl IntoResponse, ApiError> {
    let (params, pool) = queue_route(&state, &ns, &queue, &uri)?;
    let limit = page_size(&params)?;
    let preview = match params.uint("preview", PREVIEW)? {
        n @ 0..=MAX_PREVIEW => n as usize,
        _ => {
            return Err(ApiError::bad(format!(
                "invalid preview: 0 to {MAX_PREVIEW}"
            )));
        }
    };
    let (mut place, mut skip) = match params.get("cursor").filter(|c| !c.is_empty()) {
        Some(c) => parse_dead_cursor(&c).ok_or(ApiError::bad("invalid cursor"))?,
        None => (0, 0),
    };
    let places = pool.queue_places(&ns, &queue);
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
            if !seen.insert(j.id.clone()) {
                continue;
            }
            let shown = &j.body[..j.body.len().min(preview)];
            jobs.push(json!({
                "job_id": j.id,
                "remain_tries": j.tries_left,
                "published_at_ms": j.published_ms,
                "died_at_ms": j.died_ms,
                "ttl": if j.expire_ms == 0 { 0 } else { j.expire_ms.saturating_sub(page.now_ms).div_ceil(1000) },
                "attributes": serde_json::from_str::<serde_json::Value>(&j.attrs).ok(),
                "body_size": j.body.len(),
                "body_preview": base64::engine::general_purpose::STANDARD.encode(shown),
            }));
        }
        skip += page.read;
        if page.read == 0 || skip >= page.entries {
            place += 1;
            skip = 0;
        }
    }
    let next = (place < places.len()).then(|| format!("{place}.{skip}"));
    Ok(Json(json!({
        "pool": pool.name(),
        "namespace": ns,
        "queue": queue,
        "jobs": jobs,
        "next_cursor": next,
    })))
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

/// `POST /namespaces/{ns}/queues/{queue}/deadletter/respawn?pool=`
pub(super) async fn dead_respawn(
    state: State<Arc<AppState>>,
    path: Path<(String, String)>,
    uri: Uri,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    pick(state, path, uri, body, "respawn").await
}

/// `POST /namespaces/{ns}/queues/{queue}/deadletter/delete?pool=`
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
    let ttl_ms = match (mode, pick.ttl) {
        ("respawn", Some(t)) => u64::from(t) * 1000,
        ("respawn", None) => u64::from(state.limits.default_ttl_secs) * 1000,
        _ => 0,
    };
    let qualified = keys::qualified(&ns, &queue);
    let mut done = 0u64;
    let mut missing = Vec::new();
    if pick.all {
        let limit = pick.limit.unwrap_or(u64::MAX);
        for (shard, slot) in pool.queue_places(&ns, &queue) {
            if done >= limit {
                break;
            }
            done += match mode {
                "respawn" => {
                    shard
                        .dead_letter()
                        .respawn(slot, &qualified, limit - done, ttl_ms)
                        .await?
                }
                _ => {
                    shard
                        .dead_letter()
                        .delete(slot, &qualified, limit - done)
                        .await?
                }
            };
        }
    } else {
        // Ids by slot (a job's lane gives it), each slot's ids in one call
        // per place, where the slot is written now first.
        let mut by_slot: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for raw in &pick.ids {
            let id = JobId::parse(raw).map_err(|e| ApiError::bad(format!("{raw}: {e}")))?;
            let slot = pool.slot_of(&ns, &queue, id.lane(pool.lanes()));
            by_slot
                .entry(slot)
                .or_default()
                .push(id.as_str().to_owned());
        }
        for (slot, mut ids) in by_slot {
            for shard in pool.locations(slot) {
                if ids.is_empty() {
                    break;
                }
                let handled = shard
                    .dead_letter()
                    .pick(slot, &qualified, mode, ttl_ms, &ids)
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
    }
    let left = counts_of(&pool, &ns, &queue).await?.dead;
    tracing::info!(
        ns,
        queue,
        pool = pool.name(),
        mode,
        done,
        "dead letter changed by admin"
    );
    let verb = if mode == "respawn" {
        "respawned"
    } else {
        "deleted"
    };
    let mut answer = serde_json::Map::new();
    answer.insert(verb.to_owned(), done.into());
    answer.insert("not_found".to_owned(), missing.into());
    answer.insert("deadletter_size".to_owned(), left.into());
    Ok(Json(answer))
}

/// Adds to the queue indexes every queue the pools' slots hold, once, at
/// start (queues published before the index existed, or by gateways of an
/// older version); asked again every 10 s until it succeeds. Later queues
/// are added as they are published to.
pub async fn index_existing(
    live: Arc<LiveTopology>,
    tokens: Arc<TokenStore>,
    stop: CancellationToken,
) {
    const AGAIN: Duration = Duration::from_secs(10);
    loop {
        match index_once(&live, &tokens).await {
            Ok(n) => {
                tracing::debug!(queues = n, "queue index updated from the slots");
                break;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot update the queue index from the slots; trying again in 10 s");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(AGAIN) => {}
        }
    }
    stop.cancelled().await;
}

async fn index_once(
    live: &LiveTopology,
    tokens: &TokenStore,
) -> Result<usize, sundial_core::EngineError> {
    let topology = live.topology();
    let redis = tokens.redis();
    let mut n = 0;
    for pool in topology.pools() {
        let mut by_ns: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (shard, slots) in pool.groups() {
            for qualified in shard.slots().queues(slots).await? {
                if let Some((ns, queue)) = keys::parse_qualified(&qualified) {
                    by_ns
                        .entry(ns.to_owned())
                        .or_default()
                        .push(queue.to_owned());
                }
            }
        }
        for (ns, queues) in by_ns {
            n += queues.len();
            redis
                .admin()
                .index_queues(pool.name(), &ns, &queues)
                .await?;
        }
    }
    Ok(n)
}
