//! Every Redis key and channel that Sundial uses, and what it holds.
//!
//! All keys start with `sd:`. A pool's data is partitioned into `S` **slots**
//! (fixed per pool, default 128). A queue's jobs are spread over `L` lanes
//! (fixed per pool, default 1); a job's lane comes from its id
//! ([`crate::JobId::lane`]), and the slot of a lane is XXH3 of
//! `"<ns>/<queue>/<lane>"` modulo `S` ([`slot_of`]). Every key of one slot
//! carries the hash tag `{<slot>}`, so a slot never splits across shards and
//! maps to one Redis Cluster hash slot. Names match `[-_A-Za-z0-9]+`, so
//! `/` and `:` never occur inside them; a queue is written qualified,
//! `<ns>/<queue>` ([`qualified`]).
//!
//! Per slot (`T` = `{<slot>}`):
//!
//! | key | type | holds | invariant |
//! | --- | --- | --- | --- |
//! | `sd:T:j` | hash | job id → packed record (state, tries left, publish and expiry time, queue number, attributes, body) | a job exists iff its field exists |
//! | `sd:T:q` | hash | `<ns>/<queue>` → the queue's number in this slot, `#<number>` → `<ns>/<queue>`, `#` → the last number given | a number, once given, never changes or goes |
//! | `sd:T:t` | zset | job id → next deadline (ms, shard clock) | delayed and due within about 2 s: due time; reserved: TTR deadline (or expiry if sooner); ready or dead: expiry if it was within about 2 s when armed or its wheel second was opened, else absent |
//! | `sd:T:s` | zset | wheel second → its start (ms) | one member per second whose wheel list or expiry hash is non-empty (a script that empties both removes it: `leave_if_empty` in `lua/lib/expiry.lua`) |
//! | `sd:T:w:<second>` | list | ids of delayed jobs due within that second (`second = due_ms / 1000`) | every delayed job not in `sd:T:t` is in the list of its second; stale ids (deleted jobs) are skipped when the second opens |
//! | `sd:T:e:<second>` | hash | id of a ready or dead job → its expiry's ms into that second | every ready or dead job with an expiry not in `sd:T:t` is in the hash of its expiry's second; its entry goes when the job leaves that state (`unplace_expiry` in `lua/lib/expiry.lua`) or the second opens |
//! | `sd:T:c` | hash | `<s><ns>/<queue>` → number of live jobs of that queue in state `s` (`l` delayed, `r` ready, `f` reserved, `d` dead); `P<ns>/<queue>`, `C<ns>/<queue>` and `A<ns>/<queue>` → jobs published, deliveries made and jobs acked (deleted by id: `serve.lua`) (running totals, which move with the slot) | the per-state counts equal the records in that state; changed by the script that changes the records |
//! | `sd:T:u` | hash | `j<ns>` → jobs of the namespace held in the slot on this shard (records, and transit entries until their copy is safe); `b<ns>` → their bytes (ids and records, body included) | changed by every script that adds or removes a record or a transit entry; a field at 0 goes; counted afresh once on a shard whose data predates it (`usage_build.lua`) |
//! | `sd:T:r:<ns>/<queue>` | list | ids of ready jobs of priority 0, pushed left, popped right | every ready job is in its priority's list once; stale ids of jobs deleted while ready are skipped when popped (see `unlist` in `lua/lib/slot.lua`); the lists go when the slot holds no ready job of the queue |
//! | `sd:T:r:<ns>/<queue>:<p>` | list | ids of ready jobs of priority `p` (1 to 255), as above | consumed before every lower level (`ready_lists` in `lua/lib/slot.lua`) |
//! | `sd:T:r:<ns>/<queue>:p` | zset | the priorities above 0 whose lists may hold ids (member and score `p`) | every non-empty level list has its member; a consume that finds a level empty removes its member |
//! | `sd:T:d:<ns>/<queue>` | list | ids of dead jobs | like the ready list, for the dead letter |
//! | `sd:T:k` | hash | `<queue number>:<key>` → the id of the latest job of that queue published with idempotency key `<key>` (`lua/lib/keys.lua`); `~w` → the latest end of a window a tombstone keeps | an entry names a job the slot holds; it goes with that job (acked, deleted, expired, dropped, moved away); `~w` goes at the first keyed publish after it passed |
//! | `sd:T:k:<ns>/<queue>:<key>` | string | the id of a job published with a window (`dedup_ttl`) that ended before its window did | expires when the window ends |
//! | `sd:T:sc` | hash | `<ns>/<queue>/<name>` (a schedule of that queue whose lane is this slot's: [`schedule_lane`], or its job's idempotency key's) → its definition as the fire script reads it (revision, grace, paused, the job's TTL, tries, priority, policy, attributes, key and body, and its timing as JSON for the pumps; `lua/lib/fires.lua`) | written only by the lease holder's pumps, from the schedule table, and only over an older revision |
//! | `sd:T:sn` | hash | the same members → the schedule's fire state: the revision it was planned for, its cursor (no fire at or before it fires again), counts, its last fire, and its planned fires (time, due time, job id) | a member has a state iff it has a definition; its cursor only grows while its revision stays |
//! | `sd:T:f` | zset | the same members → when the first planned fire is due (ms), or when the pumps should plan it | a schedule that is paused or ended has no member; any other has one |
//! | `sd:T:lease` | string | the id of the pump process that pumps this slot | changed only by the lease scripts; the pump script checks it |
//! | `sd:T:m` | hash | job id → transit entry: a job the mover took out of this slot (its record, queue, reservation deadline, destination and the take's tag), or `x`, queue and destination for one deleted in transit | only on a shard the slot moved away from, while the mover copies it; peek and ack by id read it |
//! | `sd:T:i` | zset | job id → the tag of the take whose copy the mover made here (the take's time, µs) | only on a shard the slot moved to; a copy of the same take is skipped, a copy of any other take is not; a mark goes once its job's transit entry at the old shard is gone for good; the key expires a day after its last mark, as a backstop |
//! | `sd:T:mover` | string | the gateway instance that moves the slot's jobs away from this shard | set and renewed by `move_out.lua` (expires unless renewed); gone when the slot is clear |
//!
//! So a namespace has no key of its own: an idle tenant costs its jobs'
//! records and, per queue that holds jobs, its ready and dead lists (and
//! two fields of its slots' queue tables); its usage fields go with its
//! last job.
//!
//! Per shard:
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `sd:meta` | hash | `format` → the data layout version ([`FORMAT`]); `slots`, `lanes` → the pool's slot and lane counts, fixed once written; `ring` → the pool's shards (`name:weight,...`); `draining` → earlier layouts whose moved slots still drain |
//! | `sd:pumps` | zset | live pump processes → when their heartbeat expires (ms) |
//! | `sd:views` | set | gateway instances that announced the layouts they write to and know |
//! | `sd:view:<instance>` | string | those layouts (JSON list; a known one is written `knows <layout>`); expires (20 s, or three `layout_check_ms`) unless the gateway renews it |
//!
//! Admin Redis (tokens): `sd:tokens` hash `<pool>/<ns>/sha256:<hex digest of
//! the secret>` → JSON (description, scopes, queues, creation time; a token
//! stored by a version before hashing is `<pool>/<ns>/<secret>` → its bare
//! description until migrated); `sd:limits` hash, same fields → rate limit
//! JSON; `sd:tokens:version`, a counter bumped on every change of either so
//! that every gateway reloads its copy; `sd:rate:<pool>/<ns>/<token id>:<r|w>`
//! (the id: the digest's first 16 hex digits), request counters that expire
//! with their window; `sd:queues:<pool>/<ns>`, a sorted set of the queues
//! the namespace has been published to (score 0, ordered by name), for the
//! admin listing: gateways add a queue when they first publish to it, and
//! at start every queue their pools' slots hold; `sd:homes` hash
//! `<pool>/<ns>` → JSON `{"to","from","state","since_ms"}`: the pool the
//! namespace's tokens of that pool are served from, while it moves there
//! from `from` (`state` `announced`, then `moving`) and once it has moved
//! (`moved`), changed with the other tables' version; `sd:quotas` hash
//! `<pool>/<ns>` → JSON of a namespace's quota fields and `sd:policies` hash
//! `<pool>/<ns>/<queue>` → JSON of a queue's retry policy (`sundial_router`'s
//! `quota` and `policy`), and `sd:pauses` hash `<pool>/<ns>/<queue>` (a
//! queue) or `<pool>/<ns>` (a whole namespace) → JSON `{"since_ms"}` of a
//! pause (`sundial_router::admin::pauses`), and `sd:schedules` hash
//! `<pool>/<ns>/<queue>/<name>` → JSON of a schedule's definition
//! (`sundial_router::schedule::ScheduleDef`), changed with the same version;
//! `sd:quota:<pool>/<ns>:<p|c>`, a namespace's publish and consume rate
//! buckets. On a cluster the tables are `sd:{admin}:<name>` ([`AdminKeys`]):
//! one hash tag, so that a change and its version bump stay one script in
//! one cluster hash slot; the queue indexes carry the same tag.
//!
//! Channels: on a standalone or Sentinel shard, `sd:ready:<ns>/<queue>` (a
//! count of jobs that became ready, for long polls) and `sd:timer` (a slot
//! number whose earliest deadline moved sooner, for pumps), with `PUBLISH`.
//! On a Redis Cluster shard they are sharded channels (`SPUBLISH`) that
//! carry their slot's hash tag, so that a message goes only to the node that
//! serves the slot: `sd:{<slot>}:ready:<ns>/<queue>` and `sd:{<slot>}:timer`.
//! A script publishes with `SPUBLISH` exactly when the channel has a hash
//! tag (`announce` in `lua/lib/record.lua`).

use xxhash_rust::xxh3::xxh3_64;

/// The prefix of every key.
pub const PREFIX: &str = "sd:";
/// Per-shard metadata hash.
pub const META: &str = "sd:meta";
/// Field of [`META`] that holds the data layout version.
pub const META_FORMAT: &str = "format";
/// The data layout this build reads and writes: pool-wide slots, records
/// that may be extended, keyed and prioritized (`lua/lib/record.lua`),
/// ready lists per priority, far expiries of ready and dead jobs in the
/// wheel (`sd:T:e:<second>`), schedules in their slots (`sd:T:sc`,
/// `sd:T:sn`, `sd:T:f`). Format 1 (buckets) is in `docs/POOLS.md`
/// ("Upgrading from format 1").
pub const FORMAT: u32 = 7;
/// The older formats this build reads as they are (each a subset of
/// [`FORMAT`]'s layout), and marks [`FORMAT`] on start so that the build
/// that wrote them refuses the shard rather than misread it.
pub const OLDER_FORMATS: [u32; 5] = [
    FORMAT_PLAIN,
    FORMAT_EXTENDED,
    FORMAT_KEYED,
    FORMAT_PRIORITIZED,
    FORMAT_WHEELED,
];
/// Format 6: no schedules in the slots. Read, and marked [`FORMAT`] on
/// start, so that a format-6 build, whose pumps neither fire schedules
/// nor move or wipe their keys, refuses the shard rather than hold a
/// slot's lease and leave its schedules unfired.
pub const FORMAT_WHEELED: u32 = 6;
/// Format 5: every expiry on the timer zset, none in the wheel. Read, and
/// marked [`FORMAT`] on start, so that a format-5 build, whose pump never
/// opens an expiry hash, refuses the shard rather than leave its jobs
/// unexpired.
pub const FORMAT_PRIORITIZED: u32 = 5;
/// Format 4: records that may be keyed, never prioritized. Read, and
/// marked [`FORMAT`] on start, so that a format-4 build refuses the shard
/// rather than misread a prioritized record.
pub const FORMAT_KEYED: u32 = 4;
/// Format 3: records that may be extended, never keyed. Read, and marked
/// [`FORMAT`] on start, so that a format-3 build refuses the shard rather
/// than misread a keyed record.
pub const FORMAT_EXTENDED: u32 = 3;
/// Format 2: plain records only. Read, and marked [`FORMAT`] on start, so
/// that a format-2 build refuses the shard rather than misread it.
pub const FORMAT_PLAIN: u32 = 2;
/// Field of [`META`] set once the slots' usage hashes (`sd:T:u`) count
/// every job of the shard (see `engine::usage`).
pub const META_USAGE: &str = "usage";
/// Field of [`META`] written by format 1 only.
pub const META_BUCKETS_V1: &str = "buckets";
/// Field of [`META`] that holds the pool's slot count.
pub const META_SLOTS: &str = "slots";
/// Field of [`META`] that holds the pool's lane count.
pub const META_LANES: &str = "lanes";
/// Field of [`META`] that holds the pool's ring membership (`name:weight,...`).
pub const META_RING: &str = "ring";
/// Field of [`META`] that holds the earlier memberships whose moved slots
/// still drain (a JSON array of signatures).
pub const META_DRAINING: &str = "draining";
/// A schedule's member in its slot's keys (`sd:T:sc`, `sd:T:sn`,
/// `sd:T:f`): `<ns>/<queue>/<name>`.
pub fn schedule_member(ns: &str, queue: &str, name: &str) -> String {
    format!("{ns}/{queue}/{name}")
}

/// The lane of a queue's schedule `name` among `lanes`: a queue's
/// schedules spread over its lanes by name, and each fires its jobs into
/// its lane's slot, where it lives; one whose job has an idempotency key
/// lives in its key's lane instead (`sundial_router`'s
/// `schedule::placed::lane_of`).
pub fn schedule_lane(name: &str, lanes: u32) -> u32 {
    (xxh3_64(name.as_bytes()) % u64::from(lanes.max(1))) as u32
}

/// Channel on which scripts announce that a slot became due sooner.
pub const TIMER_CHANNEL: &str = "sd:timer";
/// Prefix of the channels on which scripts announce ready jobs.
pub const READY_CHANNEL_PREFIX: &str = "sd:ready:";
mod admin;

pub use admin::*;

/// Per shard: live pump processes (member = owner id, score = expiry ms).
pub const PUMPS: &str = "sd:pumps";

/// Per shard: the set of gateway instances that have announced a view.
pub const VIEWS: &str = "sd:views";

/// Per shard: the layouts one gateway instance may write to, expiring with
/// the shard's clock unless renewed.
pub fn view(instance: &str) -> String {
    format!("sd:view:{instance}")
}

/// A queue as the slot's keys and records name it: `<ns>/<queue>`.
pub fn qualified(ns: &str, queue: &str) -> String {
    format!("{ns}/{queue}")
}

/// Splits a qualified queue back into namespace and queue.
pub fn parse_qualified(q: &str) -> Option<(&str, &str)> {
    q.split_once('/')
}

/// The slot, among `slots`, of lane `lane` of queue `queue` of `ns`: XXH3-64
/// of `"<ns>/<queue>/<lane>"` modulo the slot count. Pinned by tests: if it
/// changed, stored jobs would be looked for in the wrong slot.
pub fn slot_of(ns: &str, queue: &str, lane: u32, slots: u32) -> u32 {
    let h = xxh3_64(format!("{ns}/{queue}/{lane}").as_bytes());
    (h % u64::from(slots.max(1))) as u32
}

/// The channel on which a standalone shard announces a queue's newly ready
/// jobs (a cluster shard announces them per slot:
/// [`SlotKeys::ready_channel`]).
pub fn ready_channel(ns: &str, queue: &str) -> String {
    ready_channel_of(&qualified(ns, queue))
}

/// [`ready_channel`] of a qualified queue (`<ns>/<queue>`).
pub fn ready_channel_of(qualified: &str) -> String {
    format!("{READY_CHANNEL_PREFIX}{qualified}")
}

/// Splits a ready channel name back into namespace and queue.
pub fn parse_ready_channel(channel: &str) -> Option<(&str, &str)> {
    parse_qualified(channel.strip_prefix(READY_CHANNEL_PREFIX)?)
}

/// The keys of one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotKeys {
    /// `sd:{<slot>}:`
    prefix: String,
}

impl SlotKeys {
    pub fn new(slot: u32) -> Self {
        Self {
            prefix: format!("sd:{{{slot}}}:"),
        }
    }

    /// The common prefix of the slot's keys (scripts build list names from
    /// it).
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

    /// The slot's usage per namespace: `j<ns>` jobs held, `b<ns>` their
    /// bytes (see `use` in `lua/lib/counts.lua`).
    pub fn usage(&self) -> String {
        format!("{}u", self.prefix)
    }

    /// The index of the slot's timer-wheel seconds.
    pub fn wheel_index(&self) -> String {
        format!("{}s", self.prefix)
    }

    /// The timer-wheel list of one second of due times.
    pub fn wheel(&self, second: u64) -> String {
        format!("{}w:{second}", self.prefix)
    }

    /// The timer-wheel hash of one second of ready and dead jobs' expiries.
    pub fn expiry_wheel(&self, second: u64) -> String {
        format!("{}e:{second}", self.prefix)
    }

    /// The slot's queue table: `<ns>/<queue>` → number, `#<number>` → name,
    /// `#` → the last number given.
    pub fn queues(&self) -> String {
        format!("{}q", self.prefix)
    }

    /// A key that is never written, declared by every script that writes
    /// to the slot. While a Redis Cluster moves the slot between nodes,
    /// Redis refuses (`TRYAGAIN`, or `ASK` then `TRYAGAIN`) any script that
    /// declares a key the node lacks, before it runs; a script that did run
    /// would fail at the first key it did not declare (a wheel second,
    /// another queue's list) that has moved or cannot be made on a node
    /// giving the slot away, with part of its work written. So no script
    /// runs on a slot in the middle of a move. On other shards it costs one
    /// argument.
    pub fn guard(&self) -> String {
        format!("{}guard", self.prefix)
    }

    /// The slot's pump lease: the owning process's id.
    pub fn lease(&self) -> String {
        format!("{}lease", self.prefix)
    }

    /// The slot's fire zset: schedule member → its next planned fire.
    pub fn fires(&self) -> String {
        format!("{}f", self.prefix)
    }

    /// The slot's schedule definitions: member → packed definition.
    pub fn schedules(&self) -> String {
        format!("{}sc", self.prefix)
    }

    /// The slot's schedules' fire states: member → state and plan.
    pub fn fire_states(&self) -> String {
        format!("{}sn", self.prefix)
    }

    /// Jobs taken out of the slot by the mover, on their way to the slot's
    /// new shard (see `engine::mover`).
    pub fn transit(&self) -> String {
        format!("{}m", self.prefix)
    }

    /// On the slot's new shard: the jobs the mover copied here lately.
    pub fn copies(&self) -> String {
        format!("{}i", self.prefix)
    }

    /// The slot's mover lease: the gateway instance that moves its jobs
    /// away from this shard.
    pub fn mover(&self) -> String {
        format!("{}mover", self.prefix)
    }

    /// The ready list of a qualified queue (`<ns>/<queue>`).
    pub fn ready(&self, qualified: &str) -> String {
        format!("{}r:{qualified}", self.prefix)
    }

    /// The dead list of a qualified queue.
    pub fn dead(&self, qualified: &str) -> String {
        format!("{}d:{qualified}", self.prefix)
    }

    /// The sharded channel (cluster shards) that announces the queue's
    /// newly ready jobs in this slot.
    pub fn ready_channel(&self, qualified: &str) -> String {
        format!("{}{qualified}", self.ready_channel_prefix())
    }

    /// What [`Self::ready_channel`] puts before the queue's name.
    pub fn ready_channel_prefix(&self) -> String {
        format!("{}ready:", self.prefix)
    }

    /// The sharded channel (cluster shards) that announces that this slot
    /// became due sooner.
    pub fn timer_channel(&self) -> String {
        format!("{}timer", self.prefix)
    }
}

/// The Redis Cluster hash slot of `key` (CRC16 of the key, or of its hash
/// tag, modulo 16384), as the cluster computes it.
pub fn hash_slot(key: &str) -> u16 {
    fred::util::redis_keyslot(key.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_keys_share_one_hash_tag() {
        let k = SlotKeys::new(7);
        for key in [
            k.jobs(),
            k.timer(),
            k.counters(),
            k.wheel_index(),
            k.wheel(9),
            k.queues(),
            k.lease(),
            k.transit(),
            k.copies(),
            k.mover(),
            k.fires(),
            k.schedules(),
            k.fire_states(),
            k.guard(),
            k.ready("ns/q"),
            k.dead("ns/q"),
            k.ready_channel("ns/q"),
            k.timer_channel(),
        ] {
            assert!(key.starts_with("sd:{7}:"), "{key}");
        }
        assert_eq!(k.ready(&qualified("ns", "q")), "sd:{7}:r:ns/q");
    }

    #[test]
    fn channels_and_names_round_trip() {
        assert_eq!(
            parse_ready_channel(&ready_channel("n-s", "q_1")),
            Some(("n-s", "q_1"))
        );
        assert_eq!(parse_qualified(&qualified("ns", "q")), Some(("ns", "q")));
        assert_eq!(parse_qualified("ns"), None);
    }

    /// Golden vectors (checked against Python's `xxhash` package): the slot
    /// of a lane must never change between versions, or stored jobs would be
    /// looked for in the wrong slot.
    #[test]
    fn slot_of_a_lane_is_pinned() {
        let got: Vec<u32> = [
            ("ns", "q", 0, 128),
            ("ns", "q", 1, 128),
            ("tenant-7", "emails", 0, 128),
            ("tenant-7", "emails", 0, 16384),
        ]
        .iter()
        .map(|(ns, q, l, s)| slot_of(ns, q, *l, *s))
        .collect();
        assert_eq!(got, GOLDEN_SLOTS);
        for lane in 0..64 {
            assert!(slot_of("ns", "q", lane, 128) < 128);
        }
        assert_eq!(slot_of("ns", "q", 0, 1), 0);
    }

    const GOLDEN_SLOTS: [u32; 4] = [82, 68, 1, 257];

    /// Redis's own answers (`CLUSTER KEYSLOT`), including its hash tag
    /// rules: the first `{`, the first `}` after it, and an empty tag meaning
    /// the whole key.
    #[test]
    fn cluster_slots_match_redis() {
        for (key, want) in [
            ("123456789", 12_739),
            ("foo", 12_182),
            ("sd:meta", 10_191),
            ("sd:{7}:j", 1_716),
            ("a{}b", 13_694),
            ("{user1000}.following", 3_443),
            ("foo{}{bar}", 8_363),
            ("foo{{bar}}zap", 4_015),
            ("foo{bar}{zap}", 5_061),
        ] {
            assert_eq!(hash_slot(key), want, "{key}");
        }
        let k = SlotKeys::new(7);
        let tagged = hash_slot(&k.jobs());
        assert_eq!(hash_slot(&k.ready_channel("ns/q")), tagged);
        assert_eq!(hash_slot(&k.timer_channel()), tagged);
    }
}
