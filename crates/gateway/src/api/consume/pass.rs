//! One look over a consume's queues (a pass): their ready counts read at
//! once, a script call only where jobs are ready, and the queues whose
//! shard failed set aside rather than failing the others.

use futures::{FutureExt, StreamExt, future::BoxFuture, stream::FuturesUnordered};
use sundial_core::{Delivery, EngineError, Shard, Want, keys};
use sundial_router::quota::{Bound, Quota};

use super::super::{error::ApiError, params::ConsumeParams, rate_quota, tenant::Tenant};
use crate::{batch::Reserved, state::AppState};

/// What a pass took, and the queues (by index in the request) that could
/// not be read on some shard.
#[derive(Debug, Default)]
pub(super) struct Pass {
    pub(super) jobs: Vec<Delivery>,
    pub(super) unavailable: Vec<usize>,
    /// The last failure, for a 503 when every queue failed.
    pub(super) error: Option<EngineError>,
    /// The namespace's consume rate held nothing for it (429), which ended
    /// the pass.
    pub(super) refused: Option<ApiError>,
}

impl Pass {
    fn failed(&mut self, queue: usize, e: EngineError) {
        if !self.unavailable.contains(&queue) {
            self.unavailable.push(queue);
        }
        self.error = Some(e);
    }
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
/// does not stop the others: its queue is reported unavailable. Consumers
/// of a queue that ask a slot together share one call, with its acks
/// (`crate::batch`).
async fn take(
    state: &AppState,
    tenant: &Tenant,
    queues: &[String],
    p: &ConsumeParams,
    rate: &mut Rate<'_>,
) -> Pass {
    let qualified: Vec<String> = queues
        .iter()
        .map(|q| keys::qualified(&tenant.ns, q))
        .collect();
    let places = places_of(tenant, queues);
    let mut counts = Counts::ask(&places, &qualified);
    let mut out = Reserved::default();
    let mut pass = Pass::default();
    'queues: for (q, qualified) in qualified.iter().enumerate() {
        for i in counts.of_queue(q).await {
            if rate.cap(p.count) <= out.len() as u32 {
                break 'queues;
            }
            let (_, slot, shard) = places[i];
            let failed = match counts.result(i) {
                Err(e) => e,
                Ok(Some(0)) => continue,
                Ok(_) => {
                    if let Err(refused) = rate.take(state, tenant, p.count).await {
                        pass.refused = Some(refused);
                        break 'queues;
                    }
                    let want = Want {
                        count: rate.cap(p.count).saturating_sub(out.len() as u32),
                        ttr_ms: p.ttr_ms,
                    };
                    if want.count == 0 {
                        break 'queues;
                    }
                    let weight = rate.quota.weight();
                    match state
                        .workers
                        .consume(shard, slot, qualified, weight, want)
                        .await
                    {
                        Ok(got) => {
                            out.append(got);
                            continue;
                        }
                        Err(e) => e,
                    }
                }
            };
            tracing::warn!(shard = shard.name(), slot, error = %failed, "consume skipped a failing shard");
            pass.failed(q, failed);
        }
    }
    pass.jobs = out.answered();
    pass
}

/// The namespace's consume rate in one pass: taken from only when the
/// pass is about to call a script (a pass over empty queues takes
/// nothing), up to the consume's `count`, and given back for the jobs the
/// pass did not get.
struct Rate<'a> {
    quota: &'a Quota,
    /// `None` until taken; then what was taken (`None` inside: no rate).
    taken: Option<Option<rate_quota::Taken>>,
}

impl Rate<'_> {
    /// Takes from the rate, once a pass: 429 when it holds nothing.
    async fn take(
        &mut self,
        state: &AppState,
        tenant: &Tenant,
        count: u32,
    ) -> Result<(), ApiError> {
        if self.taken.is_none() {
            let taken = rate_quota::take_rate(
                state,
                tenant,
                self.quota,
                Bound::ConsumeRate,
                u64::from(count),
            )
            .await?;
            self.taken = Some(taken);
        }
        Ok(())
    }

    /// The jobs the pass may take in all.
    fn cap(&self, count: u32) -> u32 {
        match self.taken.as_ref().and_then(Option::as_ref) {
            Some(t) => u32::try_from(t.jobs).unwrap_or(count).min(count),
            None => count,
        }
    }
}

/// One pass ([`take`]) for at most as many jobs as the namespace's consume
/// rate holds (its refusal in [`Pass::refused`]), which gets back those
/// not taken.
pub(super) async fn take_within_rate(
    state: &AppState,
    tenant: &Tenant,
    queues: &[String],
    p: &ConsumeParams,
    quota: &Quota,
) -> Pass {
    let mut rate = Rate { quota, taken: None };
    let pass = take(state, tenant, queues, p, &mut rate).await;
    if let Some(Some(taken)) = &rate.taken {
        let used = pass.jobs.len() as u64;
        taken.give_back(taken.jobs.saturating_sub(used)).await;
    }
    pass
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
