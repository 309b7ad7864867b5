//! What every scenario uses: the pool these tests play, a shard, jobs and
//! schedules, and the queue-wide reads and changes a gateway makes over a
//! queue's lanes.

use std::time::Duration;

use bytes::Bytes;
use redis::Commands;
use sundial_core::{
    Counts, Delivery, EngineError, JobId, JobView, NewJob, Schedule, Shard, ShardOptions,
    keys::{self, SlotKeys},
};
use sundial_tests::RedisServer;

/// Slots and lanes of the pool these tests play: every slot on this one
/// shard, and queues over several lanes, as the gateway drives them.
pub(crate) const S: u32 = 8;

pub(crate) const L: u32 = 4;

/// The slot of a job of `queue` in namespace `ns`.
pub(crate) fn slot(queue: &str, id: &JobId) -> u32 {
    keys::slot_of("ns", queue, id.lane(L), S)
}

/// `ns/<queue>`.
pub(crate) fn qn(queue: &str) -> String {
    keys::qualified("ns", queue)
}

/// The distinct slots of a queue's lanes.
pub(crate) fn slots_of(queue: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for lane in 0..L {
        let s = keys::slot_of("ns", queue, lane, S);
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

pub(crate) async fn counts(s: &Shard, queue: &str) -> Result<Counts, EngineError> {
    let mut total = Counts::default();
    for slot in slots_of(queue) {
        total.add(&s.queues().counts(slot, &qn(queue)).await?);
    }
    Ok(total)
}

/// Queues in priority order, each over its lanes, as the gateway takes.
pub(crate) async fn consume(
    s: &Shard,
    queues: &[&str],
    count: u32,
    ttr_ms: u64,
) -> Result<Vec<Delivery>, EngineError> {
    let mut out = Vec::new();
    for q in queues {
        for slot in slots_of(q) {
            let want = count - out.len() as u32;
            if want == 0 {
                return Ok(out);
            }
            out.extend(s.jobs().consume(slot, &qn(q), want, ttr_ms).await?);
        }
    }
    Ok(out)
}

pub(crate) async fn dead_head(s: &Shard, queue: &str) -> Result<Option<String>, EngineError> {
    let mut best: Option<(String, u64)> = None;
    for slot in slots_of(queue) {
        if let Some(h) = s.dead_letter().head(slot, &qn(queue)).await?
            && best.as_ref().is_none_or(|b| h.1 < b.1)
        {
            best = Some(h);
        }
    }
    Ok(best.map(|b| b.0))
}

pub(crate) async fn respawn(
    s: &Shard,
    queue: &str,
    limit: u64,
    ttl_ms: u64,
) -> Result<u64, EngineError> {
    let mut n = 0;
    for slot in slots_of(queue) {
        n += s
            .dead_letter()
            .respawn(slot, &qn(queue), limit - n, ttl_ms)
            .await?;
    }
    Ok(n)
}

pub(crate) async fn dead_delete(s: &Shard, queue: &str, limit: u64) -> Result<u64, EngineError> {
    let mut n = 0;
    for slot in slots_of(queue) {
        n += s.dead_letter().delete(slot, &qn(queue), limit - n).await?;
    }
    Ok(n)
}

pub(crate) async fn destroy(s: &Shard, queue: &str) -> Result<u64, EngineError> {
    let mut n = 0;
    for slot in slots_of(queue) {
        n += s.queues().destroy(slot, &qn(queue)).await?;
    }
    Ok(n)
}

pub(crate) async fn peek_queue(s: &Shard, queue: &str) -> Result<Option<JobView>, EngineError> {
    let mut best: Option<JobView> = None;
    for slot in slots_of(queue) {
        if let Some(j) = s.queues().peek(slot, &qn(queue)).await?
            && best.as_ref().is_none_or(|b| j.elapsed_ms > b.elapsed_ms)
        {
            best = Some(j);
        }
    }
    Ok(best)
}

pub(crate) async fn shard(redis: &RedisServer) -> Shard {
    let s = Shard::connect("test", &ShardOptions::new(redis.url())).expect("connect");
    s.wait_connected(Duration::from_secs(5))
        .await
        .expect("connected");
    s
}

pub(crate) fn job(body: &str) -> NewJob {
    NewJob {
        id: JobId::mint(false),
        attrs: String::new(),
        body: Bytes::from(body.to_owned()),
    }
}

pub(crate) fn sched(delay_ms: u64, ttl_ms: u64, tries: u16) -> Schedule {
    Schedule {
        delay_ms,
        ttl_ms,
        tries,
        priority: 0,
        policy: None,
    }
}

pub(crate) fn now_sched(tries: u16) -> Schedule {
    Schedule {
        delay_ms: 0,
        ttl_ms: 0,
        tries,
        priority: 0,
        policy: None,
    }
}

pub(crate) async fn publish(s: &Shard, queue: &str, sched: Schedule, body: &str) -> JobId {
    let j = job(body);
    s.jobs()
        .publish(
            slot(queue, &j.id),
            &qn(queue),
            &sched,
            std::slice::from_ref(&j),
        )
        .await
        .expect("publish");
    j.id
}

/// The expiries waiting in a slot's wheel (`sd:T:e:<second>`): per entry,
/// the job's id and its expiry (ms), sorted by id; read with the
/// independent client.
pub(crate) fn expiry_wheel(redis: &RedisServer, b: u32) -> Vec<(String, u64)> {
    let k = SlotKeys::new(b);
    let mut r = redis.client();
    let seconds: Vec<u64> = r.zrange(k.wheel_index(), 0, -1).expect("zrange");
    let mut out: Vec<(String, u64)> = seconds
        .iter()
        .flat_map(|&s| {
            let entries: Vec<(String, u64)> = r.hgetall(k.expiry_wheel(s)).expect("hgetall");
            entries.into_iter().map(move |(id, ms)| (id, s * 1000 + ms))
        })
        .collect();
    out.sort();
    out
}

/// The wheel seconds of a slot and the ids they hold, read with the
/// independent client.
pub(crate) fn wheel(redis: &RedisServer, b: u32) -> (Vec<String>, u64) {
    let k = SlotKeys::new(b);
    let mut r = redis.client();
    let seconds: Vec<String> = r.zrange(k.wheel_index(), 0, -1).expect("zrange");
    let queued: u64 = seconds
        .iter()
        .map(|s| {
            r.llen::<_, u64>(k.wheel(s.parse().expect("second")))
                .expect("llen")
        })
        .sum();
    (seconds, queued)
}
