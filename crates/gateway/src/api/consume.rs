//! Consume: one or several queues in priority order, a batch, a long poll.

use std::{pin::Pin, sync::Arc, time::Duration};

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use futures::{
    FutureExt, StreamExt,
    future::{BoxFuture, select_all},
    stream::FuturesUnordered,
};
use serde_json::Value;
use sundial_core::{Delivery, Shard, Want, job::check_queue, keys};
use sundial_router::quota::Quota;

use super::{
    error::ApiError,
    params::ConsumeParams,
    quota, render,
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

/// The most queues one consume may name, duplicates counted once. Each is
/// watched while the poll waits and has its ready counts read on every
/// pass, so this bounds the Redis work that one request can cause.
const MAX_QUEUES: usize = 64;

/// The queues a consume names, in priority order, each once.
fn named_queues(list: &str) -> Result<Arc<[String]>, ApiError> {
    let mut queues: Vec<String> = Vec::new();
    for q in list.split(',') {
        if check_queue(q).is_err() {
            return Err(ApiError::bad("invalid queue name(s)"));
        }
        if queues.iter().any(|seen| seen == q) {
            continue;
        }
        if queues.len() == MAX_QUEUES {
            return Err(ApiError::bad(format!(
                "too many queues: a consume names at most {MAX_QUEUES}"
            )));
        }
        queues.push(q.to_owned());
    }
    Ok(queues.into())
}

async fn consume_jobs(state: &AppState, tenant: &Tenant) -> Result<Response, ApiError> {
    let queues = named_queues(&tenant.queue)?;
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
    let quota = quota::of(state, tenant);
    loop {
        let mut woken: Vec<Pin<Box<tokio::sync::futures::Notified<'_>>>> = watches
            .iter()
            .map(|w| Box::pin(w.notify().notified()))
            .collect();
        for n in &mut woken {
            n.as_mut().enable();
        }
        let jobs = take_within_rate(state, tenant, &queues, &p, &quota).await?;
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
/// now, and where it drains from). With more than one place in all, the
/// ready counts of every place of every named queue are asked at once (one
/// `HGET` each, sent together), and only places with ready jobs get a
/// consume call: a pass costs one round of counter reads and a script call
/// per place that holds a job, however many of the named queues are empty.
/// A queue is served once its counts, and those of the queues before it,
/// are known, its places in the order their counts arrived, so a hung
/// shard holds up only the queues on it and those after them (and a pass
/// that is served before it answers drops its call). A place that fails
/// does not stop the others: its error is returned only if no place had a
/// job (then "no job" could be false). Consumers of a queue that ask a
/// slot together share one call, with its acks (`crate::batch`).
async fn take(
    state: &AppState,
    tenant: &Tenant,
    queues: &Arc<[String]>,
    p: &ConsumeParams,
) -> Result<Vec<Delivery>, ApiError> {
    let qualified: Vec<String> = queues
        .iter()
        .map(|q| keys::qualified(&tenant.ns, q))
        .collect();
    let places = places_of(tenant, queues);
    let mut counts = Counts::ask(&places, &qualified);
    let mut out = Reserved::default();
    let mut failed = None;
    'queues: for (q, qualified) in qualified.iter().enumerate() {
        for i in counts.of_queue(q).await {
            let want = p.count - out.len() as u32;
            if want == 0 {
                break 'queues;
            }
            let (_, slot, shard) = places[i];
            let want = Want {
                count: want,
                ttr_ms: p.ttr_ms,
            };
            match counts.result(i) {
                Err(e) => failed = Some(e),
                Ok(Some(0)) => {}
                Ok(_) => match state.workers.consume(shard, slot, qualified, want).await {
                    Ok(got) => out.append(got),
                    Err(e) => {
                        tracing::warn!(shard = shard.name(), slot, error = %e, "consume skipped a failing shard");
                        failed = Some(e);
                    }
                },
            }
        }
    }
    match failed {
        Some(e) if out.is_empty() => Err(e.into()),
        _ => Ok(out.answered()),
    }
}

/// One pass ([`take`]) for at most as many jobs as the namespace's consume
/// rate holds (429 when it holds none), which gets back those not taken.
async fn take_within_rate(
    state: &AppState,
    tenant: &Tenant,
    queues: &Arc<[String]>,
    p: &ConsumeParams,
    quota: &Quota,
) -> Result<Vec<Delivery>, ApiError> {
    let Some(taken) = quota::take_consume(state, tenant, quota, u64::from(p.count)).await? else {
        return take(state, tenant, queues, p).await;
    };
    let within = ConsumeParams {
        count: u32::try_from(taken.jobs).unwrap_or(p.count).min(p.count),
        ..*p
    };
    let got = take(state, tenant, queues, &within).await;
    let used = got.as_ref().map_or(0, |jobs| jobs.len() as u64);
    taken
        .give_back(state, taken.jobs.saturating_sub(used))
        .await;
    got
}

/// Every place (queue index, slot, shard) of the named queues, in priority
/// order; each pool's slots of a queue from a random one (both pools while
/// the namespace moves).
fn places_of<'a>(tenant: &'a Tenant, queues: &[String]) -> Vec<(usize, u32, &'a Shard)> {
    let mut places = Vec::new();
    for (q, name) in queues.iter().enumerate() {
        let of_queue = tenant
            .pools
            .queue_places_from(&tenant.ns, name, |n| rand::random_range(0..n));
        places.extend(of_queue.into_iter().map(|(shard, slot)| (q, slot, shard)));
    }
    places
}

/// The ready counts of a pass's places, asked all at once and read as they
/// arrive. With one place there is nothing to choose, and no count is
/// asked: its consume call answers at once when the queue is empty.
struct Counts<'a> {
    queue_of: Vec<usize>,
    known: Vec<Option<Result<Option<u64>, sundial_core::EngineError>>>,
    arriving: FuturesUnordered<BoxFuture<'a, (usize, Result<u64, sundial_core::EngineError>)>>,
}

impl<'a> Counts<'a> {
    fn ask(places: &[(usize, u32, &'a Shard)], qualified: &'a [String]) -> Self {
        let queue_of: Vec<usize> = places.iter().map(|&(q, ..)| q).collect();
        let arriving = FuturesUnordered::new();
        let mut known = Vec::with_capacity(places.len());
        for (i, &(q, slot, shard)) in places.iter().enumerate() {
            if places.len() == 1 {
                known.push(Some(Ok(None)));
                continue;
            }
            known.push(None);
            let qualified = &qualified[q];
            arriving.push(
                async move { (i, shard.queues().ready_count(slot, qualified).await) }.boxed(),
            );
        }
        Self {
            queue_of,
            known,
            arriving,
        }
    }

    /// Waits for the counts of every place of queue `q`, and returns those
    /// places in the order their counts arrived.
    async fn of_queue(&mut self, q: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.known.len())
            .filter(|&i| self.queue_of[i] == q && self.known[i].is_some())
            .collect();
        while self
            .queue_of
            .iter()
            .zip(&self.known)
            .any(|(&of, k)| of == q && k.is_none())
        {
            let Some((i, count)) = self.arriving.next().await else {
                break;
            };
            self.known[i] = Some(count.map(Some));
            if self.queue_of[i] == q {
                order.push(i);
            }
        }
        order
    }

    /// What place `i`'s count said: `Some(n)` ready jobs, `None` not asked.
    fn result(&mut self, i: usize) -> Result<Option<u64>, sundial_core::EngineError> {
        self.known[i].take().unwrap_or(Ok(None))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consume_names_each_queue_once_in_order_and_at_most_the_cap() {
        assert_eq!(&*named_queues("b,a,b,c,a").expect("valid"), ["b", "a", "c"]);
        let at_cap: Vec<String> = (0..MAX_QUEUES).map(|i| format!("q{i}")).collect();
        let mut repeated = at_cap.clone();
        repeated.extend(at_cap.iter().cloned());
        assert_eq!(
            named_queues(&repeated.join(",")).expect("valid").len(),
            MAX_QUEUES
        );
        let mut over = at_cap;
        over.push("one-more".to_owned());
        let e = named_queues(&over.join(",")).expect_err("refused");
        assert_eq!(e.to_string(), "too many queues: a consume names at most 64");
        assert_eq!(
            named_queues("a,,b").expect_err("refused").to_string(),
            "invalid queue name(s)"
        );
    }
}
