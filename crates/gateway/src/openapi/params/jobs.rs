//! The job API's parameters.

written! {
    /// What every publish reads: lmstfy's delay, TTL and tries, Sundial's `delay_ms` and `priority`, and versioned ids.
    PublishQuery = [
        {
            "name": "delay",
            "in": "query",
            "required": false,
            "description": "Seconds before the job is ready (default `limits.default_delay`, 0). Must not exceed `ttl` when `ttl` > 0 (400 `ttl is shorter than delay`).",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4294967295u64, "format": "uint32", "default": 0}
        },
        {
            "name": "delay_ms",
            "in": "query",
            "required": false,
            "description": "Milliseconds before the job is ready; overrides `delay`. The job fires within a few ms of it. Above 4294967295000 is 400 `invalid delay_ms`.",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4294967295000u64, "format": "uint64"},
            "x-sundial-extension": true
        },
        {
            "name": "ttl",
            "in": "query",
            "required": false,
            "description": "Seconds the job lives, in every state (default `limits.default_ttl`, 86400); 0 = never expires.",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4294967295u64, "format": "uint32", "default": 86400}
        },
        {
            "name": "tries",
            "in": "query",
            "required": false,
            "description": "Deliveries the job gets (default: its queue's retry policy's `tries`, else `limits.default_tries`, 1). 0 is 400 `tries shouldn't be zero`.",
            "schema": {"type": "integer", "minimum": 1, "maximum": 65535, "format": "uint16", "default": 1}
        },
        {
            "name": "priority",
            "in": "query",
            "required": false,
            "description": "The job's priority, 0 (the default) to 255: of a queue's ready jobs, the highest priority is consumed first, and each priority in publish order; a delayed or retried job keeps its priority when it becomes ready. Strict within a lane (a queue with one lane, the default, is one order); across lanes and in a multi-queue consume, see API.md. Anything else is 400 `invalid priority`. Answers show a job's `priority` when it is above 0.",
            "schema": {"type": "integer", "minimum": 0, "maximum": 255, "default": 0},
            "x-sundial-extension": true
        },
        {
            "name": "backoff",
            "in": "query",
            "required": false,
            "description": "The job's retry backoff, over its queue's policy (`PUT /namespaces/{ns}/queues/{queue}/policy`): `fixed` or `exponential` (needs `initial_delay_ms`, from the publish or the queue's policy). Anything else is 400 `invalid backoff: fixed or exponential`; fields that make no policy are 400 `invalid policy: …`.",
            "schema": {"type": "string", "enum": ["fixed", "exponential"]},
            "x-sundial-extension": true
        },
        {
            "name": "initial_delay_ms",
            "in": "query",
            "required": false,
            "description": "The delay before the first retry, ms (policy field, over the queue's).",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4294967295u64, "format": "uint32"},
            "x-sundial-extension": true
        },
        {
            "name": "multiplier",
            "in": "query",
            "required": false,
            "description": "Exponential backoff: the factor from one delay to the next, 1 to 10 (default 2).",
            "schema": {"type": "number", "minimum": 1, "maximum": 10},
            "x-sundial-extension": true
        },
        {
            "name": "max_delay_ms",
            "in": "query",
            "required": false,
            "description": "Exponential backoff: the longest delay, ms (default 1 hour).",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4294967295u64, "format": "uint32"},
            "x-sundial-extension": true
        },
        {
            "name": "jitter_percent",
            "in": "query",
            "required": false,
            "description": "Each delay moved by up to this share of it, either way, at random (0 to 100).",
            "schema": {"type": "integer", "minimum": 0, "maximum": 100},
            "x-sundial-extension": true
        },
        {
            "name": "max_retry_ms",
            "in": "query",
            "required": false,
            "description": "How long after its publish the job may still be retried, ms: a failure after that sends it to the dead letter, tries left or not.",
            "schema": {"type": "integer", "minimum": 1, "maximum": 4294967295u64, "format": "uint32"},
            "x-sundial-extension": true
        },
        {
            "name": "Enable-Job-Version",
            "in": "header",
            "required": false,
            "description": "`YES` (any case): the job gets a versioned id (`1` + ULID) and keeps its attributes from `Job-Attr-<Key>: <value>` headers (key lower-cased and cut to 32 bytes, value cut to 128 bytes, at most 16: more is 400 `too many attributes, cannot exceed 16`). Without it, `Job-Attr-*` headers are ignored. lmstfy's header.",
            "schema": {"type": "string", "examples": ["YES"]}
        },
    ];
    /// A publish's idempotency key, of `publishJob`.
    PublishKeyParams = [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": false,
            "description": "The job's idempotency key: 1 to 256 bytes, no control character (else 400 `invalid dedup: <why>`). A later publish with the same key in the queue stores nothing and answers the first job's id with `\"duplicate\": true` and the header `Idempotent-Replayed: true` (see `dedup_ttl` and `dedup_mode` for how long a key holds).",
            "schema": {"type": "string", "minLength": 1, "maxLength": 256},
            "x-sundial-extension": true
        },
        {
            "name": "dedup",
            "in": "query",
            "required": false,
            "description": "The key, as a parameter: the same as `Idempotency-Key` (both given must agree, else 400 `Idempotency-Key and dedup differ`).",
            "schema": {"type": "string", "minLength": 1, "maxLength": 256},
            "x-sundial-extension": true
        },
        {
            "name": "dedup_ttl",
            "in": "query",
            "required": false,
            "description": "With a key: the key holds for this many seconds after the first publish, however its job ended (1 to 2592000, 30 days; else 400 `invalid dedup_ttl`), instead of until the job is done. Not with `dedup_mode=debounce` (400 `dedup_ttl does not go with debounce`).",
            "schema": {"type": "integer", "minimum": 1, "maximum": 2592000},
            "x-sundial-extension": true
        },
        {
            "name": "dedup_mode",
            "in": "query",
            "required": false,
            "description": "With a key: `until_done` (the default: a duplicate while the first job exists, in any state, the dead letter included) or `debounce` (a publish whose key names a delayed job never delivered replaces that job's body, attributes, delay, TTL, tries and policy, and keeps its id; else as `until_done`). Anything else is 400 `invalid dedup_mode: until_done or debounce`; `dedup_ttl` or `dedup_mode` without a key is 400 `dedup_ttl and dedup_mode need a key (Idempotency-Key or dedup)`.",
            "schema": {"type": "string", "enum": ["until_done", "debounce"], "default": "until_done"},
            "x-sundial-extension": true
        },
    ];
    /// A bulk's idempotency keys, of `publishJobsBulk`.
    BulkKeyParams = [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": false,
            "description": "A key for the whole bulk: element `i` (from 0) gets the key `<key>/<i>`, so that the same bulk sent again stores nothing twice. Not with `dedup` (400 `give a bulk's keys as Idempotency-Key or as dedup, not both`).",
            "schema": {"type": "string", "minLength": 1, "maxLength": 256},
            "x-sundial-extension": true
        },
        {
            "name": "dedup",
            "in": "query",
            "required": false,
            "description": "One key per element, in order (`dedup=a&dedup=b`; a count that differs from the elements' is 400 `dedup must be given once per job`). Elements whose key named a job published before are answered with its id, and their places in `duplicates` (or `replaced`, with debounce).",
            "schema": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 256}},
            "style": "form",
            "explode": true,
            "x-sundial-extension": true
        },
        {
            "name": "dedup_ttl",
            "in": "query",
            "required": false,
            "description": "With a key: the key holds for this many seconds after the first publish, however its job ended (1 to 2592000, 30 days; else 400 `invalid dedup_ttl`), instead of until the job is done. Not with `dedup_mode=debounce` (400 `dedup_ttl does not go with debounce`).",
            "schema": {"type": "integer", "minimum": 1, "maximum": 2592000},
            "x-sundial-extension": true
        },
        {
            "name": "dedup_mode",
            "in": "query",
            "required": false,
            "description": "With a key: `until_done` (the default: a duplicate while the first job exists, in any state, the dead letter included) or `debounce` (a publish whose key names a delayed job never delivered replaces that job's body, attributes, delay, TTL, tries and policy, and keeps its id; else as `until_done`). Anything else is 400 `invalid dedup_mode: until_done or debounce`; `dedup_ttl` or `dedup_mode` without a key is 400 `dedup_ttl and dedup_mode need a key (Idempotency-Key or dedup)`.",
            "schema": {"type": "string", "enum": ["until_done", "debounce"], "default": "until_done"},
            "x-sundial-extension": true
        },
    ];
    /// Of `publishJob`.
    PublishJobParams = [
        {
            "name": "queue",
            "in": "path",
            "required": true,
            "description": "The queue.",
            "schema": {"type": "string", "pattern": "^[-A-Za-z0-9][-_A-Za-z0-9]*$", "maxLength": 255}
        },
    ];
    /// Of `consumeJobs`.
    ConsumeJobsParams = [
        {
            "name": "queue",
            "in": "path",
            "required": true,
            "description": "One queue, or several comma-separated (`q1,q2`), in priority order: at most 64, a name given twice counted once. Any invalid name is 400 `invalid queue name(s)`; more than 64 queues is 400 `too many queues: a consume names at most 64`.",
            "schema": {"type": "string", "pattern": "^[-_A-Za-z0-9,]+$"},
            "example": "q1,q2"
        },
        {
            "name": "ttr",
            "in": "query",
            "required": false,
            "description": "Seconds before an unacknowledged job comes back (default `limits.default_ttr`, 120).",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4294967295u64, "format": "uint32", "default": 120}
        },
        {
            "name": "ttr_ms",
            "in": "query",
            "required": false,
            "description": "Milliseconds; overrides `ttr`. Above 4294967295000 is 400 `invalid ttr_ms`.",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4294967295000u64, "format": "uint64"},
            "x-sundial-extension": true
        },
        {
            "name": "timeout",
            "in": "query",
            "required": false,
            "description": "Seconds to wait for a job (default `limits.default_timeout`, 0: answer at once); capped at `limits.max_timeout` (600 by default).",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4294967295u64, "format": "uint32", "default": 0}
        },
        {
            "name": "count",
            "in": "query",
            "required": false,
            "description": "Jobs to take, 1 to 100; otherwise 400 `invalid count`. With `timeout`, wakes when jobs arrive and returns up to `count`.",
            "schema": {"type": "integer", "minimum": 1, "maximum": 100, "format": "uint32", "default": 1}
        },
        {
            "name": "freeze_tries",
            "in": "query",
            "required": false,
            "description": "Sent by lmstfy's Go client; lmstfy's server stopped reading it in 2021 (lmstfy #114), and Sundial ignores it too: every delivery spends a try.",
            "schema": {"type": "boolean", "default": false},
            "x-sundial-ignored": true
        },
    ];
    /// Of `touchJob`.
    TouchJobParams = [
        {
            "name": "ttr",
            "in": "query",
            "required": false,
            "description": "Seconds from now until the job's TTR runs out (default `limits.default_ttr`, 120), at most `limits.max_ttr` (43200): more is 400 `ttr over limits.max_ttr (43200 s)`; 0 is 400 `invalid ttr`.",
            "schema": {"type": "integer", "minimum": 1, "maximum": 4294967295u64, "format": "uint32", "default": 120}
        },
        {
            "name": "ttr_ms",
            "in": "query",
            "required": false,
            "description": "The same in milliseconds; overrides `ttr`.",
            "schema": {"type": "integer", "minimum": 1, "format": "uint64"}
        },
    ];
    /// Of `releaseJob`.
    ReleaseJobParams = [
        {
            "name": "delay",
            "in": "query",
            "required": false,
            "description": "Seconds before the job is ready again; 0 = at once. Without `delay` and `delay_ms`, the job's retry policy sets it (its queue's at its publish, under the publish's own fields; none: at once).",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4294967295u64, "format": "uint32"}
        },
        {
            "name": "delay_ms",
            "in": "query",
            "required": false,
            "description": "The same in milliseconds; overrides `delay`. Above 4294967295000 is 400 `invalid delay_ms`.",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4294967295000u64, "format": "uint64"}
        },
        {
            "name": "spend_try",
            "in": "query",
            "required": false,
            "description": "`true` (the default): this delivery counts as one of the job's tries, and a job left with none goes to the dead letter; `false`: the try is given back (the job is only postponed).",
            "schema": {"type": "boolean", "default": true}
        },
        {
            "name": "reason",
            "in": "query",
            "required": false,
            "description": "Why the job failed, kept with it as its last reason (peek, dead letter, export): at most 1024 bytes, else 400 `reason too long: at most 1024 bytes`. Empty or absent: no reason.",
            "schema": {"type": "string", "maxLength": 1024}
        },
    ];
    /// The fence of a worker's ack, touch or release.
    DeliveryQuery = [
        {
            "name": "delivery",
            "in": "query",
            "required": false,
            "description": "The delivery the worker holds: the `delivery` field (or `X-Sundial-Delivery` header) of the consume answer that gave it the job. With it the call acts only while that delivery holds the job (reserved, not delivered again since), else 409 and nothing changes. 0 or not a number is 400 `invalid delivery`.",
            "schema": {"type": "integer", "minimum": 1, "maximum": 4294967295u64, "format": "uint32"},
            "x-sundial-extension": true
        },
    ];
    /// Of `respawnDeadLetter`.
    RespawnDeadLetterParams = [
        {
            "name": "limit",
            "in": "query",
            "required": false,
            "description": "Dead jobs to respawn at most (default 1, at least 1).",
            "schema": {"type": "integer", "minimum": 1, "maximum": 18446744073709551615u64, "format": "uint64", "default": 1}
        },
        {
            "name": "ttl",
            "in": "query",
            "required": false,
            "description": "The respawned jobs' TTL in seconds (default `limits.default_ttl`, 86400); 0 = never expires.",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4294967295u64, "format": "uint32", "default": 86400}
        },
    ];
    /// Of `deleteDeadLetter`.
    DeleteDeadLetterParams = [
        {
            "name": "limit",
            "in": "query",
            "required": false,
            "description": "Dead jobs to delete at most (default 1, at least 1).",
            "schema": {"type": "integer", "minimum": 1, "maximum": 18446744073709551615u64, "format": "uint64", "default": 1}
        },
    ];
}
