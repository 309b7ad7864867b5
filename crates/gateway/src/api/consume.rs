//! Consume: one or several queues in priority order, a batch, a long poll.

use std::{pin::Pin, sync::Arc, time::Duration};

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use futures::{Stream, StreamExt, future::select_all, stream::FuturesUnordered};
use serde_json::Value;
use sundial_core::{Delivery, Shard, Want, job::check_queue, keys};

use super::{
    error::ApiError,
    params::ConsumeParams,
    render,
    tenant::Tenant,
    throttle::{self, Action},
};
use crate::{batch::Reserved, state::AppState, wakeups::Watch};

/// `GET /api/{ns}/{q1[,q2…]}`
pub(super) async fn consume(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
) -> Result<Response, ApiError> {
    let work = consume_jobs(&state, &tenant);
    throttle::limited(&state, &tenant, Action::Read, work).await
}

async fn consume_jobs(state: &AppState, tenant: &Tenant) -> Result<Response, ApiError> {
    let queues: Arc<[String]> = tenant.queue.split(',').map(str::to_owned).collect();
    if queues.iter().any(|q| check_queue(q).is_err()) {
        return Err(ApiError::bad("invalid queue name(s)"));
    }
    let p = ConsumeParams::parse(&tenant.params, &state.limits)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(p.timeout_secs));

    // Register for wake-ups before the first look, so nothing that becomes
    // ready in between is missed.
    let watches = if p.timeout_secs > 0 {
        watch(state, tenant, &queues).await?
    } else {
        Vec::new()
    };
    let _waiting = (!watches.is_empty()).then(Waiting::new);
    // The pools this poll watches: when the namespace's move changes them
    // (`sundial_router::admin::homes`), the poll ends with no job, and the
    // worker's next poll watches the new ones.
    let route = tenant.route();
    loop {
        let mut woken: Vec<Pin<Box<tokio::sync::futures::Notified<'_>>>> = watches
            .iter()
            .map(|w| Box::pin(w.notify().notified()))
            .collect();
        for n in &mut woken {
            n.as_mut().enable();
        }
        let jobs = take(state, tenant, &queues, &p).await?;
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
            () = rerouted(state, tenant, &route) => return Err(ApiError::NoJob),
        }
        // The token may have been revoked or narrowed while this request
        // waited.
        tenant.still_permitted(state)?;
    }
}

/// Resolves once the namespace's route differs from `route`, looked at
/// again whenever this gateway's copy of the homes table or its topology
/// changes (no Redis call, no timer).
async fn rerouted(state: &AppState, tenant: &Tenant, route: &(String, Option<String>)) {
    let mut homes = state.admin.homes().changes();
    let mut topology = state.live.changes();
    loop {
        if tenant.route_now(state) != *route {
            return;
        }
        let changed = tokio::select! {
            r = homes.changed() => r,
            r = topology.changed() => r,
        };
        if changed.is_err() {
            // Shutting down: the poll ends by its deadline or the shutdown.
            std::future::pending::<()>().await;
        }
    }
}

/// A long poll in progress, counted in `sundial_consumers_waiting` until it
/// ends, however it ends.
struct Waiting(metrics::Gauge);

impl Waiting {
    fn new() -> Self {
        let g = metrics::gauge!("sundial_consumers_waiting");
        g.increment(1.0);
        Self(g)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

async fn watch(
    state: &AppState,
    tenant: &Tenant,
    queues: &[String],
) -> Result<Vec<Watch>, ApiError> {
    let mut watches = Vec::new();
    for q in queues {
        let qualified = keys::qualified(&tenant.ns, q);
        // A standalone shard announces a queue on one channel, a cluster on
        // one per slot: each (shard, channel) once.
        let mut seen: Vec<(&Shard, String)> = Vec::new();
        for (shard, slot) in tenant.queue_places(q) {
            let channel = shard.ready_channel(slot, &qualified);
            // A disconnected shard (cluster node) cannot announce anything;
            // waiting for its subscribe would only hold the request up.
            if !shard.conn().is_connected_for(&channel) {
                continue;
            }
            if seen.iter().any(|(s, c)| s.same(shard) && *c == channel) {
                continue;
            }
            seen.push((shard, channel.clone()));
            watches.push(state.wakeups.watch(shard, channel).await?);
        }
    }
    Ok(watches)
}

/// One pass until `count` jobs are taken: queues in priority order (strict),
/// and within a queue the places of its lanes' slots (where each is written
/// now, and where it drains from) that hold ready jobs, in the order their
/// counts answer (`ready_first`; with one place, that place). A slot that
/// fails does not stop the others: its error is returned only if no slot
/// had a job (then "no job" could be false). Consumers of a queue that ask
/// a slot together share one call, with its acks (`crate::batch`).
async fn take(
    state: &AppState,
    tenant: &Tenant,
    queues: &Arc<[String]>,
    p: &ConsumeParams,
) -> Result<Vec<Delivery>, ApiError> {
    let mut out = Reserved::default();
    let mut failed = None;
    'queues: for q in queues.iter() {
        let qualified = keys::qualified(&tenant.ns, q);
        // Each pool's slots from a random one (both pools while the
        // namespace moves).
        let places: Vec<(u32, &Shard)> = tenant
            .pools
            .queue_places_from(&tenant.ns, q, |n| rand::random_range(0..n))
            .into_iter()
            .map(|(shard, slot)| (slot, shard))
            .collect();
        let mut places = std::pin::pin!(ready_first(places, &qualified));
        while let Some((slot, shard)) = places.next().await {
            let want = p.count - out.len() as u32;
            if want == 0 {
                break 'queues;
            }
            let want = Want {
                count: want,
                ttr_ms: p.ttr_ms,
            };
            match state.workers.consume(shard, slot, &qualified, want).await {
                Ok(got) => out.append(got),
                Err(e) => {
                    tracing::warn!(shard = shard.name(), slot, error = %e, "consume skipped a failing shard");
                    failed = Some(e);
                }
            }
        }
    }
    match failed {
        Some(e) if out.is_empty() => Err(e.into()),
        _ => Ok(out.answered()),
    }
}

/// The places (slot, shard) of a queue worth a consume call. With more than
/// one, their ready counts are asked all at once (one `HGET` each), places
/// come in the order their counts arrive, and those without a ready job are
/// skipped: a queue over L lanes would otherwise cost L calls one after the
/// other, each waiting its turn behind whatever the shard is busy with
/// (1.5 s for 16 lanes while a backlog drained), and a hung shard's lanes
/// would hold up the others'. A place whose count cannot be read is kept,
/// so that its consume reports the error. A job that lands in a skipped
/// place meanwhile is announced on the queue's ready channel, which a long
/// poll watches.
fn ready_first<'a>(
    places: Vec<(u32, &'a Shard)>,
    qualified: &'a str,
) -> impl Stream<Item = (u32, &'a Shard)> + Send + 'a {
    let ask = places.len() > 1;
    places
        .into_iter()
        .map(|(slot, shard)| async move {
            let count = if ask {
                shard.queues().ready_count(slot, qualified).await.ok()
            } else {
                None
            };
            ((slot, shard), count)
        })
        .collect::<FuturesUnordered<_>>()
        .filter_map(|(place, count)| async move { (count != Some(0)).then_some(place) })
}

fn answer(tenant: &Tenant, jobs: Vec<Delivery>, count: u32) -> Response {
    for d in &jobs {
        let h = super::queue_metrics::of(tenant.pool().name(), &tenant.ns, d.job.queue_name());
        h.count(super::queue_metrics::Event::Consumed, 1);
        if d.first {
            // Publish to first delivery, delay included, on the shard's clock.
            h.first_delivery(d.job.elapsed_ms as f64 / 1000.0);
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
