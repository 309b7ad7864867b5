//! Every Redis key and channel that Sundial uses, and what it holds.
//!
//! All keys start with `sd:`. A namespace's jobs are spread over `B` buckets
//! (B is per pool); a job's bucket is [`crate::JobId::bucket`]. Every key of
//! one bucket carries the hash tag `{<ns>/<b>}`, so a bucket never splits
//! across shards and could live on a Redis Cluster slot of its own. Names
//! match `[-_A-Za-z0-9]+`, so `/` and `:` never occur inside them.
//!
//! Per bucket (`T` = `{ns/b}`):
//!
//! | key | type | holds | invariant |
//! | --- | --- | --- | --- |
//! | `sd:T:j` | hash | job id → packed record (state, tries left, publish and expiry time, queue, attributes, body) | a job exists iff its field exists |
//! | `sd:T:t` | zset | job id → next deadline (ms, shard clock) | delayed and due within about 2 s: due time; reserved: TTR deadline (or expiry if sooner); ready or dead: expiry if any, else absent |
//! | `sd:T:s` | zset | wheel slot number → its start (ms) | one member per non-empty wheel list |
//! | `sd:T:w:<slot>` | list | ids of delayed jobs due within that second (`slot = due_ms / 1000`) | every delayed job not in `sd:T:t` is in the list of its slot; stale ids (deleted jobs) are skipped when the slot opens |
//! | `sd:T:c` | hash | `<s><queue>` → number of live jobs of that queue in state `s` (`l` delayed, `r` ready, `f` reserved, `d` dead) | equals the count of records in that state; changed by the same script that changes a record |
//! | `sd:T:r:<queue>` | list | ids of ready jobs, pushed left, popped right | every ready job is in it once; a job that expires or is deleted while ready leaves it in the same script when its id stands within 256 entries of either end, else its id stays (stale) until popped and skipped; the list is deleted when the bucket holds no ready job of the queue, so it never outlives the queue's jobs |
//! | `sd:T:d:<queue>` | list | ids of dead jobs | like the ready list, for the dead letter |
//! | `sd:T:lease` | string | the id of the process that pumps this bucket | set with `NX PX`, renewed and deleted only by its owner; the pump script checks it |
//!
//! Per shard:
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `sd:meta` | hash | `buckets` → the pool's bucket count, fixed once written; `ring` → the pool's shards (`name:weight,...`); `draining` → earlier layouts whose moved buckets still drain |
//! | `sd:namespaces` | set | namespaces that have (had) jobs on this shard |
//! | `sd:queues:<ns>` | set | queues of the namespace that have (had) jobs on this shard |
//! | `sd:pumps` | zset | live pump processes → when their heartbeat expires (ms) |
//! | `sd:views` | set | gateway instances that announced the layouts they write to |
//! | `sd:view:<instance>` | string | those layouts, JSON; expires (15 s) unless the gateway renews it |
//!
//! Admin Redis (tokens): `sd:tokens` hash `<pool>/<ns>/<token>` → description;
//! `sd:limits` hash, same fields → rate limit JSON; `sd:tokens:version`, a
//! counter bumped on every change of either so that every gateway reloads its
//! copy; `sd:rate:<pool>/<ns>/<token>:<r|w>`, request counters that expire
//! with their window.
//!
//! Channels: `sd:ready:<ns>/<queue>` (a count of jobs that became ready, for
//! long polls), `sd:timer` (a bucket tag `<ns>/<b>` whose earliest deadline
//! moved sooner, for pumps).

/// The prefix of every key.
pub const PREFIX: &str = "sd:";
/// Per-shard metadata hash.
pub const META: &str = "sd:meta";
/// Field of [`META`] that holds the pool's bucket count.
pub const META_BUCKETS: &str = "buckets";
/// Field of [`META`] that holds the pool's ring membership (`name:weight,...`).
pub const META_RING: &str = "ring";
/// Field of [`META`] that holds the earlier memberships whose moved buckets
/// still drain (a JSON array of signatures).
pub const META_DRAINING: &str = "draining";
/// Per-shard set of namespaces.
pub const NAMESPACES: &str = "sd:namespaces";
/// Channel on which scripts announce that a bucket became due sooner.
pub const TIMER_CHANNEL: &str = "sd:timer";
/// Prefix of the channels on which scripts announce ready jobs.
pub const READY_CHANNEL_PREFIX: &str = "sd:ready:";
/// Admin Redis: all tokens.
pub const TOKENS: &str = "sd:tokens";
/// Admin Redis: the token table's version (bumped by token and limit changes).
pub const TOKENS_VERSION: &str = "sd:tokens:version";
/// Admin Redis: rate limits, `<pool>/<ns>/<secret>` → JSON `{read, write, interval}`.
pub const LIMITS: &str = "sd:limits";

/// Admin Redis: the request counter of one token and action (`r` consume,
/// `w` publish) in the current window; expires with the window.
pub fn rate(pool: &str, ns: &str, secret: &str, action: char) -> String {
    format!("sd:rate:{pool}/{ns}/{secret}:{action}")
}

/// Per shard: live pump processes (member = owner id, score = expiry ms).
pub const PUMPS: &str = "sd:pumps";

/// Per shard: the set of gateway instances that have announced a view.
pub const VIEWS: &str = "sd:views";

/// Per shard: the layouts one gateway instance may write to, expiring with
/// the shard's clock unless renewed.
pub fn view(instance: &str) -> String {
    format!("sd:view:{instance}")
}

/// The set of a namespace's queues on one shard.
pub fn queues(ns: &str) -> String {
    format!("sd:queues:{ns}")
}

/// The channel on which a queue's newly ready jobs are announced.
pub fn ready_channel(ns: &str, queue: &str) -> String {
    format!("{READY_CHANNEL_PREFIX}{ns}/{queue}")
}

/// The prefix of a namespace's ready channels (`ready_channel(ns, q)` is this
/// followed by `q`).
pub fn ready_channel_prefix(ns: &str) -> String {
    format!("{READY_CHANNEL_PREFIX}{ns}/")
}

/// Splits a ready channel name back into namespace and queue.
pub fn parse_ready_channel(channel: &str) -> Option<(&str, &str)> {
    channel.strip_prefix(READY_CHANNEL_PREFIX)?.split_once('/')
}

/// The tag that names a bucket in messages: `<ns>/<b>`.
pub fn bucket_tag(ns: &str, bucket: u32) -> String {
    format!("{ns}/{bucket}")
}

/// Splits a bucket tag back into namespace and bucket.
pub fn parse_bucket_tag(tag: &str) -> Option<(&str, u32)> {
    let (ns, b) = tag.rsplit_once('/')?;
    Some((ns, b.parse().ok()?))
}

/// The keys of one bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketKeys {
    /// `sd:{<ns>/<b>}:`
    prefix: String,
}

impl BucketKeys {
    pub fn new(ns: &str, bucket: u32) -> Self {
        Self {
            prefix: format!("sd:{{{ns}/{bucket}}}:"),
        }
    }

    /// The common prefix of the bucket's keys (the pump builds list names
    /// from it inside its script).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn jobs(&self) -> String {
        format!("{}j", self.prefix)
    }

    pub fn timer(&self) -> String {
        format!("{}t", self.prefix)
    }

    pub fn counters(&self) -> String {
        format!("{}c", self.prefix)
    }

    /// The index of the bucket's timer-wheel slots.
    pub fn slots(&self) -> String {
        format!("{}s", self.prefix)
    }

    /// The timer-wheel list of one slot (one second of due times).
    pub fn wheel(&self, slot: u64) -> String {
        format!("{}w:{slot}", self.prefix)
    }

    /// The bucket's pump lease: the owning process's id, expiring.
    pub fn lease(&self) -> String {
        format!("{}lease", self.prefix)
    }

    pub fn ready(&self, queue: &str) -> String {
        format!("{}r:{queue}", self.prefix)
    }

    pub fn dead(&self, queue: &str) -> String {
        format!("{}d:{queue}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_keys_share_one_hash_tag() {
        let k = BucketKeys::new("ns", 7);
        for key in [
            k.jobs(),
            k.timer(),
            k.counters(),
            k.slots(),
            k.wheel(9),
            k.ready("q"),
            k.dead("q"),
        ] {
            assert!(key.starts_with("sd:{ns/7}:"), "{key}");
        }
        assert_eq!(k.ready("q"), "sd:{ns/7}:r:q");
    }

    #[test]
    fn channels_and_tags_round_trip() {
        assert_eq!(
            parse_ready_channel(&ready_channel("n-s", "q_1")),
            Some(("n-s", "q_1"))
        );
        assert_eq!(parse_bucket_tag(&bucket_tag("ns", 12)), Some(("ns", 12)));
        assert_eq!(parse_bucket_tag("ns"), None);
        assert_eq!(ready_channel_prefix("ns") + "q", ready_channel("ns", "q"));
    }
}
