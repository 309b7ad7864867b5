//! Publish, bulk publish, and republish.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::value::RawValue;
use sundial_core::{
    JobId, NewJob, Schedule,
    job::{
        MAX_ATTRIBUTE_KEY_BYTES, MAX_ATTRIBUTE_VALUE_BYTES, MAX_ATTRIBUTES, MAX_BODY_BYTES,
        MAX_BULK_JOBS,
    },
    keys,
};

use super::{
    answers::{BulkPublished, Published, PublishedMsg},
    backlog, body,
    error::ApiError,
    params::PublishParams,
    quota, rate_quota,
    tenant::Tenant,
    throttle::{self, Action},
};
use sundial_router::{
    placement::NamespacePools,
    quota::{Bound, Quota},
};

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
struct Publication<'a> {
    queue: &'a str,
    schedule: Schedule,
    versioned: bool,
    attrs: String,
    /// The namespace's quota, as the request found it.
    quota: Quota,
}

impl<'a> Publication<'a> {
    /// Reads the request's queue, parameters and headers (by reference:
    /// the body is read after), and holds its schedule to the namespace's
    /// quota before the body is read.
    fn parse(state: &AppState, tenant: &'a Tenant, req: Request) -> Result<(Self, Body), ApiError> {
        let (parts, body) = req.into_parts();
        let queue = super::jobs::queue(tenant)?;
        let asked = PublishParams::parse(&tenant.params, &state.limits)?.schedule();
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
    fn job(&self, lane: Option<u32>, lanes: u32, body: bytes::Bytes) -> (u32, NewJob) {
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

fn published(
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
/// (`crate::batch`).
async fn store(
    state: &AppState,
    tenant: &Tenant,
    p: &Publication<'_>,
    lane: u32,
    jobs: &[NewJob],
) -> Result<(), ApiError> {
    // The topology as it is now, not as it was before the body was read:
    // see `sundial_router::view::WRITE_GRACE` for why a write must use
    // the layout written to now.
    let pool = tenant.write_pool(state)?;
    let slot = pool.slot_of(&tenant.ns, p.queue, lane);
    quota::headroom(state, tenant, pool.shard_for(slot))?;
    let stored = sundial_core::Publication {
        schedule: p.schedule,
        jobs: jobs.to_vec(),
    };
    state
        .publishes
        .publish(
            pool.shard_for(slot),
            slot,
            &keys::qualified(&tenant.ns, p.queue),
            p.quota.weight(),
            stored,
        )
        .await?;
    Ok(())
}

/// Stores `jobs` as [`store`] does, within the namespace's quota: once
/// they are taken from its publish rate (all or none), admitted by its
/// backlog bounds (`super::backlog`), both of which get them back if they
/// are not stored, and their queue by `max_queues`. The queue comes last,
/// as it stays counted once admitted: a publish refused by a rate or a
/// backlog must not take one of the namespace's queues.
async fn store_within_quota(
    state: &AppState,
    tenant: &Tenant,
    p: &Publication<'_>,
    lane: u32,
    jobs: &[NewJob],
) -> Result<(), ApiError> {
    let n = jobs.len() as u64;
    let taken = rate_quota::take_rate(state, tenant, &p.quota, Bound::PublishRate, n).await?;
    let admitted = admit(state, tenant, &p.quota, jobs, taken.as_ref()).await?;
    let stored = match quota::admit_queue(state, tenant, &p.quota, p.queue).await {
        Ok(()) => store(state, tenant, p, lane, jobs).await,
        Err(refused) => Err(refused),
    };
    rate_quota::give_back_if_failed(taken.as_ref(), &stored).await;
    if let Some(a) = admitted {
        a.ended(state, &stored);
    }
    stored
}

/// Admits `jobs` by the namespace's backlog bounds; a refusal gives back
/// what was `taken` from its publish rate.
async fn admit(
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

/// `PUT /api/{ns}/{queue}`
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
    let (p, body) = Publication::parse(state, tenant, req)?;
    let body = body::read(&state.bodies, body, MAX_BODY_BYTES, "body too large").await?;
    quota::check_body(tenant, &p.quota, body.bytes.len())?;
    let (lane, job) = p.job(None, tenant.pool().lanes(), body.bytes.clone());
    store_within_quota(state, tenant, &p, lane, std::slice::from_ref(&job)).await?;
    Ok(published(
        state,
        tenant,
        p.queue,
        1,
        Published {
            msg: PublishedMsg::Published,
            job_id: job.id.as_str(),
        },
    ))
}

/// `PUT /api/{ns}/{queue}/bulk`: a JSON array; each element's raw JSON text
/// is one job's body. All jobs are published, or none.
pub(super) async fn bulk(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    req: Request,
) -> Result<Response, ApiError> {
    let work = publish_bulk(&state, &tenant, req);
    throttle::limited(&state, &tenant, Action::Write, work).await
}

async fn publish_bulk(
    state: &AppState,
    tenant: &Tenant,
    req: Request,
) -> Result<Response, ApiError> {
    let (p, body) = Publication::parse(state, tenant, req)?;
    // At most 64 bodies of up to 1 MiB each, and at most `http.max_bulk_bytes`
    // in all.
    let limit = state.bodies.max_bulk;
    let read = body::read(&state.bodies, body, limit, "bulk body too large").await?;
    let raw = &read.bytes;
    let items: Vec<&RawValue> = serde_json::from_slice(raw)
        .map_err(|_| ApiError::bad("request body should be an array of objects"))?;
    if items.is_empty() {
        return Err(ApiError::bad("no jobs"));
    }
    if items.len() > MAX_BULK_JOBS {
        return Err(ApiError::bad("too many jobs"));
    }
    if items.iter().any(|i| i.get().len() > MAX_BODY_BYTES) {
        return Err(ApiError::TooLarge("job too large"));
    }
    let largest = items.iter().map(|i| i.get().len()).max().unwrap_or(0);
    quota::check_body(tenant, &p.quota, largest)?;
    let lanes = tenant.pool().lanes();
    let lane = rand::random_range(0..lanes);
    let jobs: Vec<NewJob> = items
        .iter()
        .map(|i| {
            // A view into the request's buffer: no copy per job.
            let body = raw.slice_ref(i.get().as_bytes());
            p.job(Some(lane), lanes, body).1
        })
        .collect();
    store_within_quota(state, tenant, &p, lane, &jobs).await?;
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    Ok(published(
        state,
        tenant,
        p.queue,
        jobs.len(),
        BulkPublished {
            msg: PublishedMsg::Published,
            job_ids: ids,
        },
    ))
}

/// Deletes the job `old` where else it may be than at `written` (the
/// pools `now`: the one written to as the topology is now, and the one the
/// namespace moves from, while it moves); missed everywhere, at `written`
/// after all, where the mover may have carried it meanwhile (see
/// `Tenant::job_places`).
async fn delete_elsewhere(
    now: &NamespacePools,
    ns: &str,
    queue: &str,
    old: &JobId,
    (written, slot): (&sundial_core::Shard, u32),
) -> Result<(), ApiError> {
    let qualified = keys::qualified(ns, queue);
    let others: Vec<(&sundial_core::Shard, u32)> = now
        .job_places_once(ns, queue, old)
        .into_iter()
        .filter(|(s, n)| !(s.same(written) && *n == slot))
        .collect();
    let mut deleted = others.is_empty();
    for (other, s) in others {
        if other.jobs().delete(s, &qualified, old).await? {
            deleted = true;
            break;
        }
    }
    if !deleted {
        written.jobs().delete(slot, &qualified, old).await?;
    }
    Ok(())
}

/// `PUT /api/{ns}/{queue}/job/{job_id}`: deletes the job and publishes its
/// replacement (a new id, in the same lane, so the same slot) in one atomic
/// step.
pub(super) async fn republish(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    req: Request,
) -> Result<impl IntoResponse, ApiError> {
    let (p, body) = Publication::parse(&state, &tenant, req)?;
    let old = super::jobs::job_id(&tenant)?;
    let body = body::read(&state.bodies, body, MAX_BODY_BYTES, "body too large").await?;
    quota::check_body(&tenant, &p.quota, body.bytes.len())?;
    let lanes = tenant.pool().lanes();
    let (lane, job) = p.job(Some(old.lane(lanes)), lanes, body.bytes.clone());
    let pool = tenant.write_pool(&state)?;
    let slot = pool.slot_of(&tenant.ns, p.queue, lane);
    let qualified = keys::qualified(&tenant.ns, p.queue);
    let written = pool.shard_for(slot);
    quota::headroom(&state, &tenant, written)?;
    quota::admit_queue(&state, &tenant, &p.quota, p.queue).await?;
    let taken = rate_quota::take_rate(&state, &tenant, &p.quota, Bound::PublishRate, 1).await?;
    let one = std::slice::from_ref(&job);
    let admitted = admit(&state, &tenant, &p.quota, one, taken.as_ref()).await?;
    let republished = written
        .jobs()
        .republish(slot, &qualified, &old, &p.schedule, &job)
        .await
        .map_err(ApiError::from);
    rate_quota::give_back_if_failed(taken.as_ref(), &republished).await;
    if let Some(a) = admitted {
        a.ended(&state, &republished);
    }
    // While the slot moves, the old job may be at its other location: it
    // goes after the new one is stored (a crash in between leaves both,
    // never neither).
    if !republished? {
        let now = NamespacePools {
            writes: pool.clone(),
            also: tenant.pools.also.clone(),
        };
        delete_elsewhere(&now, &tenant.ns, p.queue, &old, (written, slot)).await?;
    }
    Ok(published(
        &state,
        &tenant,
        p.queue,
        1,
        Published {
            msg: PublishedMsg::Published,
            job_id: job.id.as_str(),
        },
    ))
}

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
