//! Publish, and what bulk publish and republish share with it.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use sundial_core::{
    JobId, KeyHit, Keys, NewJob, Schedule,
    job::{MAX_ATTRIBUTE_KEY_BYTES, MAX_ATTRIBUTE_VALUE_BYTES, MAX_ATTRIBUTES, MAX_BODY_BYTES},
    key_lane, keys,
};

use super::{
    answers::{Published, PublishedMsg},
    backlog, body, dedup,
    error::ApiError,
    params::PublishParams,
    quota, rate_quota,
    tenant::Tenant,
    throttle::{self, Action},
};
use sundial_router::quota::{Bound, Quota};

use crate::openapi::doc;
use crate::state::AppState;

/// Versioned ids and attributes, from `Enable-Job-Version: YES` and
/// `Job-Attr-<Key>: <value>` headers (keys lower-cased, keys and values
/// truncated as lmstfy does).
fn version_and_attrs(headers: &HeaderMap) -> Result<(bool, String), ApiError> {
    let versioned = headers
        .get("enable-job-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("yes"));
    if !versioned {
        return Ok((false, String::new()));
    }
    let mut attrs = BTreeMap::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix("job-attr-") else {
            continue;
        };
        let value = String::from_utf8_lossy(value.as_bytes());
        attrs.insert(
            truncate(key, MAX_ATTRIBUTE_KEY_BYTES),
            truncate(&value, MAX_ATTRIBUTE_VALUE_BYTES),
        );
    }
    if attrs.len() > MAX_ATTRIBUTES {
        return Err(ApiError::bad(format!(
            "too many attributes, cannot exceed {MAX_ATTRIBUTES}"
        )));
    }
    let json = if attrs.is_empty() {
        String::new()
    } else {
        serde_json::to_string(&attrs).map_err(|e| ApiError::Internal(e.into()))?
    };
    Ok((true, json))
}

/// The first `max` bytes of `s`, cut at a character boundary.
fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// What every publish route reads before the body.
pub(super) struct Publication<'a> {
    pub(super) queue: &'a str,
    pub(super) schedule: Schedule,
    versioned: bool,
    attrs: String,
    /// The namespace's quota, as the request found it.
    pub(super) quota: Quota,
}

impl<'a> Publication<'a> {
    /// Reads the request's queue, parameters and headers (by reference:
    /// the body is read after), and holds its schedule to the namespace's
    /// quota before the body is read.
    pub(super) fn parse(
        state: &AppState,
        tenant: &'a Tenant,
        req: Request,
    ) -> Result<(Self, Body), ApiError> {
        let (parts, body) = req.into_parts();
        let queue = super::jobs::queue(tenant)?;
        let asked = PublishParams::parse(&tenant.params, &state.limits)?.schedule();
        let asked = super::retry::apply(state, tenant, queue, asked)?;
        let (versioned, attrs) = version_and_attrs(&parts.headers)?;
        let quota = quota::of(state, tenant);
        let schedule = quota::schedule(tenant, &quota, &tenant.params, asked)?;
        let p = Self {
            queue,
            schedule,
            versioned,
            attrs,
            quota,
        };
        Ok((p, body))
    }

    /// A job of this publication: with an id in `lane` when one is
    /// imposed (several jobs that must share a script call), else with any
    /// id. Returns the job's lane too.
    pub(super) fn job(&self, lane: Option<u32>, lanes: u32, body: bytes::Bytes) -> (u32, NewJob) {
        let id = match lane {
            Some(l) => JobId::mint_in_lane(self.versioned, l, lanes),
            None => JobId::mint(self.versioned),
        };
        let lane = id.lane(lanes);
        let job = NewJob {
            id,
            attrs: self.attrs.clone(),
            body,
        };
        (lane, job)
    }
}

pub(super) fn published(
    state: &AppState,
    tenant: &Tenant,
    queue: &str,
    n: usize,
    answer: impl serde::Serialize,
) -> Response {
    super::queue_metrics::published(&state.admin, tenant, queue, n as u64);
    (StatusCode::CREATED, Json(answer)).into_response()
}

/// Publishes `jobs`, all in `lane`, all or nothing: in one script call,
/// which may carry other requests' jobs of the same queue and slot too
/// (`crate::batch`). With `keys` (one per job, each of `lane`), answers the
/// jobs that their keys answered instead of storing them.
async fn store(
    state: &AppState,
    tenant: &Tenant,
    p: &Publication<'_>,
    lane: u32,
    jobs: &[NewJob],
    keys: Option<&Keys>,
) -> Result<Vec<KeyHit>, ApiError> {
    // The topology as it is now, not as it was before the body was read:
    // see `sundial_router::view::WRITE_GRACE` for why a write must use
    // the layout written to now.
    let pool = tenant.write_pool(state)?;
    let slot = pool.slot_of(&tenant.ns, p.queue, lane);
    quota::headroom(state, tenant, pool.shard_for(slot))?;
    let stored = sundial_core::Publication {
        schedule: p.schedule,
        jobs: jobs.to_vec(),
        keys: keys.cloned(),
    };
    let hits = state
        .publishes
        .publish(
            pool.shard_for(slot),
            slot,
            &keys::qualified(&tenant.ns, p.queue),
            p.quota.weight(),
            stored,
        )
        .await?;
    Ok(hits)
}

/// Stores `jobs` as [`store`] does, within the namespace's quota: once
/// they are taken from its publish rate (all or none), admitted by its
/// backlog bounds (`super::backlog`), both of which get them back if they
/// are not stored, and their queue by `max_queues`. The queue comes last,
/// as it stays counted once admitted: a publish refused by a rate or a
/// backlog must not take one of the namespace's queues.
pub(super) async fn store_within_quota(
    state: &AppState,
    tenant: &Tenant,
    p: &Publication<'_>,
    lane: u32,
    jobs: &[NewJob],
    keys: Option<&Keys>,
) -> Result<Vec<KeyHit>, ApiError> {
    let n = jobs.len() as u64;
    let taken = rate_quota::take_rate(state, tenant, &p.quota, Bound::PublishRate, n).await?;
    let admitted = admit(state, tenant, &p.quota, jobs, taken.as_ref()).await?;
    let stored = match quota::admit_queue(state, tenant, &p.quota, p.queue).await {
        Ok(()) => store(state, tenant, p, lane, jobs, keys).await,
        Err(refused) => Err(refused),
    };
    rate_quota::give_back_if_failed(taken.as_ref(), &stored).await;
    // A duplicate stored nothing: it takes nothing from the rate.
    if let (Ok(hits), Some(t)) = (&stored, &taken) {
        let duplicates = hits.iter().filter(|h| !h.replaced).count() as u64;
        if duplicates > 0 {
            t.give_back(duplicates).await;
        }
    }
    if let Some(a) = admitted {
        a.ended(state, &stored);
    }
    stored
}

/// Admits `jobs` by the namespace's backlog bounds; a refusal gives back
/// what was `taken` from its publish rate.
pub(super) async fn admit(
    state: &AppState,
    tenant: &Tenant,
    quota: &Quota,
    jobs: &[NewJob],
    taken: Option<&rate_quota::Taken>,
) -> Result<Option<backlog::Admitted>, ApiError> {
    let admitted = backlog::admit(state, tenant, quota, jobs).await;
    if admitted.is_err()
        && let Some(t) = taken
    {
        t.give_back(t.jobs).await;
    }
    admitted
}

/// Publish a job
///
/// Publishes the body as one job. Needs scope `publish`; counts one write
/// against the token's rate limit. `delay_ms` (Sundial's extension) overrides
/// `delay`. The job is stored in one atomic step.
#[utoipa::path(
    put,
    path = "/api/{ns}/{queue}",
    operation_id = "publishJob",
    tag = "jobs",
    params(doc::PublishQuery, doc::PublishJobParams, doc::PublishKeyParams),
    request_body(content = Option<doc::JobBytes>, content_type = "application/octet-stream", description = "The job's bytes (at most 1 MiB; empty is an empty job). Any content type; stored as sent."),
    responses(
        (status = 201, description = "Published; or, with an idempotency key that named a job published before, nothing stored: that job's id with `\"duplicate\": true` and the header `Idempotent-Replayed: true` (with `dedup_mode=debounce`, a pending delayed job that took this publish's body and schedule: `\"replaced\": true`).", body = crate::api::answers::Published<'_>, headers(("Idempotent-Replayed" = String, description = "`true` on a duplicate: nothing was stored."))),
        (status = 400, description = "A parameter or header was refused. Over the namespace's quota `max_delay`, `max_ttl` or `max_tries`: `{\"error\",\"quota\",\"limit\",\"usage\"}` (see the quota conventions). Messages: `invalid policy: <why>` (the retry policy that the publish's fields make over its queue's, e.g. `invalid policy: a backoff needs initial_delay_ms`), `invalid backoff: fixed or exponential`, `invalid multiplier`, `invalid initial_delay_ms`, `invalid max_delay_ms`, `invalid jitter_percent`, `invalid max_retry_ms`, `invalid dedup: empty`, `invalid dedup: longer than 256 bytes`, `invalid dedup: contains a control character`, `invalid dedup: not UTF-8`, `dedup given more than once`, `invalid dedup_ttl`, `invalid dedup_mode: until_done or debounce`, `dedup_ttl does not go with debounce`, `dedup_ttl and dedup_mode need a key (Idempotency-Key or dedup)`, `Idempotency-Key and dedup differ`, `invalid delay`, `invalid delay_ms`, `invalid ttl`, `invalid tries`, `invalid priority`, `tries shouldn't be zero`, `ttl is shorter than delay`, `too many attributes, cannot exceed 16`, `queue name contains forbidden characters`, `namespace or queue name too long`, `failed to read body`.", body = inline(doc::ErrorOrQuota)),
        (status = 403, response = doc::PublishForbidden),
        (status = 404, description = "`pool not found` (the token names a pool that does not exist).", body = crate::api::answers::ErrorBody<'_>),
        (status = 408, response = doc::RequestTimeout),
        (status = 413, description = "The body is over 1 MiB. Over the namespace's quota `max_body`: `{\"error\",\"quota\":\"max_body\",\"limit\",\"usage\"}`. Messages: `body too large`.", body = inline(doc::ErrorOrQuota)),
        (status = 429, response = doc::TooManyRequests),
    ),
    extensions(("x-sundial-scopes" = json!(["publish"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn publish(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    req: Request,
) -> Result<Response, ApiError> {
    let work = publish_one(&state, &tenant, req);
    throttle::limited(&state, &tenant, Action::Write, work).await
}

async fn publish_one(
    state: &AppState,
    tenant: &Tenant,
    req: Request,
) -> Result<Response, ApiError> {
    let keys = dedup::single(&tenant.params, req.headers())?;
    let (p, body) = Publication::parse(state, tenant, req)?;
    let body = body::read(&state.bodies, body, MAX_BODY_BYTES, "body too large").await?;
    quota::check_body(tenant, &p.quota, body.bytes.len())?;
    let lanes = tenant.pool().lanes();
    let lane = keys.as_ref().map(|k| key_lane(&k.keys[0], lanes));
    let (lane, job) = p.job(lane, lanes, body.bytes.clone());
    let one = std::slice::from_ref(&job);
    let hit = store_within_quota(state, tenant, &p, lane, one, keys.as_ref())
        .await?
        .pop();
    let answer = Published {
        msg: PublishedMsg::Published,
        job_id: hit.as_ref().map_or(job.id.as_str(), |h| h.id.as_str()),
        duplicate: hit.as_ref().is_some_and(|h| !h.replaced),
        replaced: hit.as_ref().is_some_and(|h| h.replaced),
    };
    let stored = usize::from(!answer.duplicate && !answer.replaced);
    let mut response = published(state, tenant, p.queue, stored, &answer);
    if answer.duplicate {
        response
            .headers_mut()
            .insert(REPLAYED, HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// The header on the answer to a publish that stored nothing, as its key
/// named a job published before.
pub(super) const REPLAYED: &str = "idempotent-replayed";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_need_the_version_header() {
        let mut h = HeaderMap::new();
        h.insert("job-attr-color", "red".parse().expect("header"));
        assert_eq!(version_and_attrs(&h).expect("ok"), (false, String::new()));
        h.insert("enable-job-version", "yes".parse().expect("header"));
        assert_eq!(
            version_and_attrs(&h).expect("ok"),
            (true, r#"{"color":"red"}"#.to_owned())
        );
    }

    #[test]
    fn attributes_are_truncated_and_counted() {
        let mut h = HeaderMap::new();
        h.insert("enable-job-version", "YES".parse().expect("header"));
        let long_key = format!("job-attr-{}", "k".repeat(40));
        h.insert(
            axum::http::HeaderName::from_bytes(long_key.as_bytes()).expect("name"),
            "v".repeat(200).parse().expect("value"),
        );
        let (_, json) = version_and_attrs(&h).expect("ok");
        let map: BTreeMap<String, String> = serde_json::from_str(&json).expect("json");
        let (k, v) = map.iter().next().expect("one");
        assert_eq!((k.len(), v.len()), (32, 128));
        for i in 0..16 {
            h.insert(
                axum::http::HeaderName::from_bytes(format!("job-attr-a{i}").as_bytes())
                    .expect("name"),
                "x".parse().expect("value"),
            );
        }
        let err = version_and_attrs(&h).expect_err("17 attributes");
        assert_eq!(err.to_string(), "too many attributes, cannot exceed 16");
    }
}
