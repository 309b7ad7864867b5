//! Consume: one or several queues in priority order, a batch, a long poll.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use futures::future::{BoxFuture, select_all};
use serde_json::Value;
use sundial_core::{Delivery, EngineError, Shard, job::check_queue, keys};

use super::{
    error::ApiError,
    params::ConsumeParams,
    render,
    tenant::Tenant,
    throttle::{self, Action},
};
use crate::{state::AppState, wakeups::Watch};

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
        let mut seen: Vec<&Shard> = Vec::new();
        for (shard, _) in tenant.pool.queue_places(&tenant.ns, q) {
            // A disconnected shard cannot announce anything; waiting for its
            // subscribe would only hold the request up.
            if !shard.is_connected() || seen.iter().any(|s| s.same(shard)) {
                continue;
            }
            seen.push(shard);
            watches.push(state.wakeups.watch(shard, &tenant.ns, q).await?);
        }
    }
    Ok(watches)
}

/// One pass until `count` jobs are taken: queues in priority order (strict),
/// and within a queue its lanes' slots from a random start, so no lane's
/// jobs wait behind another's; each slot where it is written now, then where
/// it drains from. A slot that fails does not stop the others: its error is
/// returned only if no slot had a job (then "no job" could be false).
async fn take(
    tenant: &Tenant,
    queues: &Arc<[String]>,
    p: &ConsumeParams,
) -> Result<Vec<Delivery>, ApiError> {
    let mut out = Reserved { jobs: Vec::new() };
    let mut failed = None;
    'queues: for q in queues.iter() {
        let slots = tenant.pool.queue_slots(&tenant.ns, q);
        let start = match slots.len() {
            0 | 1 => 0,
            n => rand::random_range(0..n),
        };
        let qualified: Arc<str> = keys::qualified(&tenant.ns, q).into();
        for &slot in slots[start..].iter().chain(&slots[..start]) {
            for shard in tenant.pool.locations(slot) {
                let want = p.count - out.jobs.len() as u32;
                if want == 0 {
                    break 'queues;
                }
                let consume = Consume {
                    shard: shard.clone(),
                    slot,
                    qualified: qualified.clone(),
                    count: want,
                    ttr_ms: p.ttr_ms,
                };
                match Taking::new(consume).await {
                    Ok(got) => out.jobs.extend(got.into_iter().map(|d| (shard.clone(), d))),
                    Err(e) => {
                        tracing::warn!(shard = shard.name(), slot, error = %e, "consume skipped a failing shard");
                        failed = Some(e);
                    }
                }
            }
        }
    }
    match failed {
        Some(e) if out.jobs.is_empty() => Err(e.into()),
        _ => Ok(out.answered()),
    }
}

/// The jobs a pass has reserved so far. If the request is dropped before
/// they are handed over (the client hung up while a later slot was asked),
/// they are given back rather than left reserved for nobody until their TTR.
struct Reserved {
    jobs: Vec<(Shard, Delivery)>,
}

impl Reserved {
    /// The jobs, now the client's.
    fn answered(mut self) -> Vec<Delivery> {
        std::mem::take(&mut self.jobs)
            .into_iter()
            .map(|(_, d)| d)
            .collect()
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if self.jobs.is_empty() {
            return;
        }
        let jobs = std::mem::take(&mut self.jobs);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                for (shard, d) in jobs {
                    release(&shard, &d).await;
                }
            });
        }
    }
}

/// Gives back a job reserved for a client that went away.
async fn release(shard: &Shard, d: &Delivery) {
    match shard.release(d).await {
        Ok(_) => tracing::debug!(job_id = d.job.id, "consumer went away; job released"),
        Err(e) => {
            tracing::warn!(job_id = d.job.id, error = %e, "consumer went away; release failed, the job returns after its TTR")
        }
    }
}

/// One consume script call, with what it needs owned, so that it can
/// outlive the request.
struct Consume {
    shard: Shard,
    slot: u32,
    qualified: Arc<str>,
    count: u32,
    ttr_ms: u64,
}

impl Consume {
    async fn run(&self) -> Result<Vec<Delivery>, EngineError> {
        self.shard
            .consume(self.slot, &self.qualified, self.count, self.ttr_ms)
            .await
    }

    /// The client went away while the script ran: gives the jobs back
    /// instead of leaving them reserved for nobody.
    async fn release(&self, jobs: Vec<Delivery>) {
        for d in &jobs {
            release(&self.shard, d).await;
        }
    }
}

/// A consume call in flight. Awaited in the request's own task; if the
/// request is dropped before the call answered, the call moves to a task of
/// its own that releases whatever it reserved. (Only then is a task spawned.)
struct Taking {
    call: Option<BoxFuture<'static, Taken>>,
}

/// A consume call and its answer.
type Taken = (Consume, Result<Vec<Delivery>, EngineError>);

impl Taking {
    fn new(consume: Consume) -> Self {
        let call = Box::pin(async move {
            let result = consume.run().await;
            (consume, result)
        });
        Self { call: Some(call) }
    }
}

impl Future for Taking {
    type Output = Result<Vec<Delivery>, EngineError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(call) = self.call.as_mut() else {
            return Poll::Pending;
        };
        let (_, result) = std::task::ready!(call.as_mut().poll(cx));
        self.call = None;
        Poll::Ready(result)
    }
}

impl Drop for Taking {
    fn drop(&mut self) {
        if let Some(call) = self.call.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                if let (consume, Ok(jobs)) = call.await {
                    consume.release(jobs).await;
                }
            });
        }
    }
}

fn answer(tenant: &Tenant, jobs: Vec<Delivery>, count: u32) -> Response {
    for d in &jobs {
        let h = super::queue_metrics::of(tenant.pool.name(), &tenant.ns, d.job.queue_name());
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
