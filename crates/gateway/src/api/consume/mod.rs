//! Consume: one or several queues in priority order, a batch, a long poll.
//! A pass over the queues is in [`pass`]; a queue whose shard fails is set
//! aside, named in the answer, and the others are served and waited on.

mod pass;

use std::{pin::Pin, sync::Arc, time::Duration};

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use futures::future::select_all;
use pass::{Pass, take_within_rate};
use sundial_core::{Delivery, Shard, job::check_queue, keys};

use super::{
    error::ApiError,
    params::ConsumeParams,
    quota, render,
    tenant::Tenant,
    throttle::{self, Action},
};
use crate::openapi::doc;
use crate::{state::AppState, wakeups::Watch};

/// Consume jobs
///
/// Takes up to `count` ready jobs from the queues named (comma-separated,
/// served in the order given: strict priority), each reserved for `ttr` with
/// one try spent, in one atomic step. With `timeout` > 0 waits up to that many
/// seconds (capped at `limits.max_timeout`, 600) for a job; a client that goes
/// away takes none. Needs scope `consume` on every queue named; counts one read
/// against the token's rate limit. A long poll rechecks the token when it
/// wakes: revoked is 401, narrowed is 403. A job whose TTR runs out without an
/// ack is ready again while it has tries left, else it moves to the dead
/// letter. A queue whose shard fails is set aside (named in
/// `X-Sundial-Unavailable-Queues`) while the others are served and waited on;
/// only when every named queue fails is the answer 503.
#[utoipa::path(
    get,
    path = "/api/{ns}/{queue}",
    operation_id = "consumeJobs",
    tag = "jobs",
    params(doc::ConsumeJobsParams),
    responses(
        (status = 200, description = "The job (`count` = 1), or always an array of jobs (`count` > 1).", body = inline(doc::Delivered), headers(("X-Sundial-Unavailable-Queues" = String, description = "Queues of this consume that a failing shard (or cluster primary) kept out of its last look, comma-separated; the others were served. Absent when every queue was read."), ("X-Sundial-Delivery" = u32, description = "On a one-job answer (`count` = 1): the job's delivery number, as its `delivery` field. Pass it back as `?delivery=N` on ack, touch and release to fence them against a later delivery."))),
        (status = 400, description = "A parameter or queue name was refused. Messages: `invalid ttr`, `invalid ttr_ms`, `invalid timeout`, `invalid count`, `invalid queue name(s)`, `too many queues: a consume names at most 64`.", body = crate::api::answers::ErrorBody<'_>),
        (status = 403, response = doc::Forbidden),
        (status = 404, description = "`{\"msg\":\"no job available\"}` when nothing came within `timeout` (also to waiting consumers when the gateway shuts down); `{\"error\":\"pool not found\"}` when the token names a pool that does not exist. Messages: `no job available`, `pool not found`.", body = inline(doc::NoJobOrError), headers(("X-Sundial-Unavailable-Queues" = String, description = "Queues of this consume that a failing shard (or cluster primary) kept out of its last look, comma-separated; the others were served. Absent when every queue was read."))),
        (status = 429, response = doc::TooManyRequests),
    ),
    extensions(("x-sundial-scopes" = json!(["consume"])), ("x-sundial-extension" = json!(false))),
)]
pub(super) async fn consume(
    State(state): State<Arc<AppState>>,
    tenant: Tenant,
) -> Result<Response, ApiError> {
    let work = consume_jobs(&state, &tenant);
    throttle::limited(&state, &tenant, Action::Read, work).await
}

/// The header of a one-job consume answer that carries its delivery number
/// (the `delivery` field of the body), for clients that read headers.
const DELIVERY_HEADER: &str = "x-sundial-delivery";

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
    let mut unavailable: Vec<String>;
    let mut pauses = state.admin.pauses().changes();
    loop {
        let woken = armed(&watches);
        pauses.mark_unchanged();
        // Paused queues are left out of the pass, and waited on: a resume
        // wakes the poll.
        let open = open_queues(state, tenant, &queues);
        let pass = if open.is_empty() {
            Pass::default()
        } else {
            take_within_rate(state, tenant, &open, &p, &quota).await
        };
        unavailable = pass.unavailable.iter().map(|&q| open[q].clone()).collect();
        let some_paused = open.len() < queues.len();
        match after(pass, open.len(), deadline)? {
            After::Jobs(jobs) => {
                let answer = answer(tenant, jobs, p.count);
                return Ok(with_unavailable(answer, &unavailable));
            }
            After::Pause(pause) => {
                tokio::time::sleep(pause).await;
                continue;
            }
            After::Nothing => {}
        }
        if woken.is_empty() || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::select! {
            _ = select_all(woken) => {}
            _ = pauses.changed(), if some_paused => {}
            () = tokio::time::sleep_until(deadline) => break,
            () = state.shutdown.cancelled() => break,
            () = rerouted(state, tenant, &route) => break,
        }
        // The token may have been revoked or narrowed while this request
        // waited.
        tenant.still_permitted(state)?;
    }
    Err(ApiError::NoJobFrom(unavailable))
}

/// The named queues whose consumers may get jobs now: those neither
/// paused nor of a paused namespace (`sundial_router::admin::pauses`).
/// (The queues themselves, shared, when none is paused: the usual case
/// costs no copy.)
fn open_queues(state: &AppState, tenant: &Tenant, queues: &Arc<[String]>) -> Arc<[String]> {
    let pauses = state.admin.pauses();
    let pool = tenant.pool().name();
    let held = |q: &String| pauses.holds(pool, &tenant.ns, q);
    if !queues.iter().any(held) {
        return queues.clone();
    }
    queues.iter().filter(|q| !held(q)).cloned().collect()
}

/// What a pass leads to.
enum After {
    /// Jobs to answer with.
    Jobs(Vec<Delivery>),
    /// The consume rate held no job: look again after this long.
    Pause(Duration),
    /// No job: wait for a wake-up, until the deadline.
    Nothing,
}

/// What a pass over `queues` queues leads to: its jobs; a 429 from the
/// consume rate, or a wait for it while the poll's time allows; a 503 when
/// every queue failed (nothing says there is no job, as a single queue's
/// failure does not); else nothing.
fn after(pass: Pass, queues: usize, deadline: tokio::time::Instant) -> Result<After, ApiError> {
    if !pass.jobs.is_empty() {
        return Ok(After::Jobs(pass.jobs));
    }
    if let Some(refused) = pass.refused {
        return match rate_wait(&refused, deadline) {
            Some(pause) => Ok(After::Pause(pause)),
            None => Err(refused),
        };
    }
    match pass.error {
        Some(e) if pass.unavailable.len() == queues => Err(e.into()),
        _ => Ok(After::Nothing),
    }
}

/// How long a long poll refused by its namespace's consume rate waits
/// for it, if the rate frees a job before the poll's `deadline`.
fn rate_wait(refused: &ApiError, deadline: tokio::time::Instant) -> Option<Duration> {
    let ApiError::Quota(r) = refused else {
        return None;
    };
    let pause = Duration::from_millis(r.retry_after_ms?);
    (tokio::time::Instant::now() + pause < deadline).then_some(pause)
}

/// A wake-up of each watch, enabled now: a job announced from here on is
/// not missed by the look that follows.
fn armed(watches: &[Watch]) -> Vec<Pin<Box<tokio::sync::futures::Notified<'_>>>> {
    let mut woken: Vec<_> = watches
        .iter()
        .map(|w| Box::pin(w.notify().notified()))
        .collect();
    for n in &mut woken {
        n.as_mut().enable();
    }
    woken
}

/// The answer, naming in `X-Sundial-Unavailable-Queues` the queues that a
/// failing shard kept out of the last pass (the others were served).
fn with_unavailable(mut response: Response, unavailable: &[String]) -> Response {
    if !unavailable.is_empty()
        && let Ok(v) = axum::http::HeaderValue::from_str(&unavailable.join(","))
    {
        response.headers_mut().insert(UNAVAILABLE, v);
    }
    response
}

/// The header that names the queues a consume could not read.
pub(crate) const UNAVAILABLE: &str = "x-sundial-unavailable-queues";

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
    let mut failed = None;
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
            // One that fails (a node that hangs, or refuses) is left out:
            // the poll waits on the others, and its passes still read
            // this queue, which reports it if it is unavailable.
            match state.wakeups.watch(shard, channel).await {
                Ok(w) => watches.push(w),
                Err(e) => {
                    tracing::warn!(shard = shard.name(), slot, error = %e, "a long poll waits without this queue's wake-ups");
                    failed = Some(e);
                }
            }
        }
    }
    match failed {
        Some(e) if watches.is_empty() => Err(e.into()),
        _ => Ok(watches),
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
    let mut items: Vec<_> = jobs
        .iter()
        .map(|d| render::delivered(&tenant.ns, &d.job))
        .collect();
    if count > 1 {
        Json(items).into_response()
    } else {
        let number = jobs[0].number();
        let mut r = Json(items.swap_remove(0)).into_response();
        r.headers_mut()
            .insert(DELIVERY_HEADER, axum::http::HeaderValue::from(number));
        r
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
