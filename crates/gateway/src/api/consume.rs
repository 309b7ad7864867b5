//! Consume: one or several queues in priority order, a batch, a long poll.

use std::{collections::BTreeMap, pin::Pin, sync::Arc, time::Duration};

use axum::{
    Json,
    extract::{Path, State},
    response::{IntoResponse, Response},
};
use futures::future::select_all;
use serde_json::Value;
use sundial_core::{Delivery, EngineError, Shard, job::check_queue};
use tokio::sync::oneshot;

use super::{
    error::ApiError,
    params::{ConsumeParams, Params},
    render,
    tenant::Tenant,
    throttle::{self, Action},
};
use crate::{state::AppState, wakeups::Watch};

/// `GET /api/{ns}/{q1[,q2…]}`
pub(super) async fn consume(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
    Path(path): Path<BTreeMap<String, String>>,
    params: axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let work = consume_jobs(&state, &tenant, &path, params.0);
    throttle::limited(&state, &tenant, Action::Read, work).await
}

async fn consume_jobs(
    state: &AppState,
    tenant: &Tenant,
    path: &BTreeMap<String, String>,
    params: std::collections::HashMap<String, String>,
) -> Result<Response, ApiError> {
    let raw = path.get("queue").map(String::as_str).unwrap_or_default();
    let queues: Vec<String> = raw.split(',').map(str::to_owned).collect();
    if queues.iter().any(|q| check_queue(q).is_err()) {
        return Err(ApiError::bad("invalid queue name(s)"));
    }
    let p = ConsumeParams::parse(&Params(params), &state.limits)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(p.timeout_secs));

    // Register for wake-ups before the first look, so nothing that becomes
    // ready in between is missed.
    let watches = if p.timeout_secs > 0 {
        watch(state, tenant, &queues).await?
    } else {
        Vec::new()
    };
    loop {
        let mut woken: Vec<Pin<Box<tokio::sync::futures::Notified<'_>>>> = watches
            .iter()
            .map(|w| Box::pin(w.notify().notified()))
            .collect();
        for n in &mut woken {
            n.as_mut().enable();
        }
        let jobs = take(tenant, &queues, &p).await?;
        if !jobs.is_empty() {
            return Ok(answer(tenant, jobs, p.count));
        }
        if woken.is_empty() || tokio::time::Instant::now() >= deadline {
            return Err(ApiError::NoJob);
        }
        tokio::select! {
            _ = select_all(woken) => {}
            () = tokio::time::sleep_until(deadline) => return Err(ApiError::NoJob),
            () = state.shutdown.cancelled() => return Err(ApiError::NoJob),
        }
        // The token may have been revoked while this request waited.
        if state.tokens.check(&tenant.token, &tenant.ns) == sundial_router::tokens::Check::Invalid {
            return Err(ApiError::Unauthorized("invalid token"));
        }
    }
}

async fn watch(
    state: &AppState,
    tenant: &Tenant,
    queues: &[String],
) -> Result<Vec<Watch>, ApiError> {
    let mut watches = Vec::new();
    for (shard, _) in tenant.pool.groups(&tenant.ns) {
        // A disconnected shard cannot announce anything; waiting for its
        // subscribe would only hold the request up.
        let Some(w) = state.wakeups(shard).filter(|_| shard.is_connected()) else {
            continue;
        };
        for q in queues {
            watches.push(w.watch(&tenant.ns, q).await?);
        }
    }
    Ok(watches)
}

/// One pass over the pool's shards until `count` jobs are taken. The pass
/// starts at a random shard, so no shard's jobs wait behind another's;
/// queue priority is strict within each shard. A shard that fails does not
/// stop the others: its error is returned only if no shard had a job (then
/// "no job" could be false).
async fn take(
    tenant: &Tenant,
    queues: &[String],
    p: &ConsumeParams,
) -> Result<Vec<Delivery>, ApiError> {
    let mut out = Vec::new();
    let mut failed = None;
    let mut groups = tenant.pool.groups(&tenant.ns);
    if groups.len() > 1 {
        let start = rand::random_range(0..groups.len());
        groups.rotate_left(start);
    }
    for (shard, buckets) in groups {
        let want = p.count - out.len() as u32;
        if want == 0 {
            break;
        }
        match take_from(shard.clone(), &tenant.ns, &buckets, queues, want, p.ttr_ms).await {
            Ok(got) => out.extend(got),
            Err(e) => {
                tracing::warn!(shard = shard.name(), error = %e, "consume skipped a failing shard");
                failed = Some(e);
            }
        }
    }
    match failed {
        Some(e) if out.is_empty() => Err(e.into()),
        _ => Ok(out),
    }
}

/// Runs the consume script in a task of its own: if the client goes away
/// while it runs (the request future is dropped), the task gives the jobs
/// back instead of leaving them reserved for nobody.
async fn take_from(
    shard: Shard,
    ns: &str,
    buckets: &[u32],
    queues: &[String],
    count: u32,
    ttr_ms: u64,
) -> Result<Vec<Delivery>, EngineError> {
    let (tx, rx) = oneshot::channel();
    let ns = ns.to_owned();
    let buckets = buckets.to_vec();
    let queues = queues.to_vec();
    let task_shard = shard.clone();
    tokio::spawn(async move {
        let qs: Vec<&str> = queues.iter().map(String::as_str).collect();
        let result = task_shard.consume(&ns, &buckets, &qs, count, ttr_ms).await;
        if let Err(Ok(jobs)) = tx.send(result) {
            for d in &jobs {
                match task_shard.release(&ns, d).await {
                    Ok(_) => tracing::debug!(job_id = d.job.id, "consumer went away; job released"),
                    Err(e) => {
                        tracing::warn!(job_id = d.job.id, error = %e, "consumer went away; release failed, the job returns after its TTR")
                    }
                }
            }
        }
    });
    rx.await.unwrap_or_else(|_| {
        Err(EngineError::Reply {
            shard: shard.name().to_owned(),
            what: "consume task ended without an answer".to_owned(),
        })
    })
}

fn answer(tenant: &Tenant, jobs: Vec<Delivery>, count: u32) -> Response {
    for d in &jobs {
        let h = super::queue_metrics::of(tenant.pool.name(), &tenant.ns, &d.job.queue);
        h.count(super::queue_metrics::Event::Consumed, 1);
        if d.first {
            // Publish to first delivery, delay included, on the shard's clock.
            h.first_delivery.record(d.job.elapsed_ms as f64 / 1000.0);
        }
    }
    let mut items: Vec<Value> = jobs
        .iter()
        .map(|d| render::delivered(&tenant.ns, &d.job))
        .collect();
    if count > 1 {
        Json(Value::Array(items)).into_response()
    } else {
        Json(items.swap_remove(0)).into_response()
    }
}
