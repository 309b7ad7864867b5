//! The admin API's parameters.

written! {
    /// `?pool=`: the pool a token lives in.
    PoolQuery = [
        {
            "name": "pool",
            "in": "query",
            "required": false,
            "description": "The pool; absent or empty: `default`. An unknown pool is 404 `pool not found`.",
            "schema": {"type": "string", "default": "default"},
            "x-sundial-extension": true
        },
    ];
    /// A token route's namespace, checked as a name.
    TokenNamespace = [
        {
            "name": "ns",
            "in": "path",
            "required": true,
            "description": "The namespace: `^[-_A-Za-z0-9]+$`, at most 255 bytes (else 400 `the namespace name was too long` / `namespace name contains forbidden characters`).",
            "schema": {"type": "string", "pattern": "^[-_A-Za-z0-9]+$", "maxLength": 255},
            "example": "ns"
        },
    ];
    /// A limit route's namespace: the token's, not checked as a name.
    LimitNamespace = [
        {
            "name": "ns",
            "in": "path",
            "required": true,
            "description": "The token's namespace (not checked as a name: one that is not the token's is 404 `token not found`).",
            "schema": {"type": "string"},
            "example": "ns"
        },
    ];
    /// `?preview=`: how much of each listed job's body is shown.
    Preview = [
        {
            "name": "preview",
            "in": "query",
            "required": false,
            "description": "Body bytes shown per job, 0 to 4096 (default 256).",
            "schema": {"type": "integer", "minimum": 0, "maximum": 4096, "format": "uint64", "default": 256}
        },
    ];
    /// Of `listTokens`.
    ListTokensParams = [
        {
            "name": "pool",
            "in": "query",
            "required": false,
            "description": "The pool; absent or empty: `default`. Unknown: 400 `the pool was not exists`.",
            "schema": {"type": "string", "default": "default"}
        },
    ];
    /// Of `createToken`.
    CreateTokenParams = [
        {
            "name": "description",
            "in": "query",
            "required": false,
            "description": "Required (here or in the form): empty or absent is 400 `invalid description`.",
            "schema": {"type": "string", "minLength": 1}
        },
        {
            "name": "token",
            "in": "query",
            "required": false,
            "description": "A chosen token instead of a minted one: at least 20 characters, may carry its `pool:` prefix (400 `the user token was too short`).",
            "schema": {"type": "string", "minLength": 20}
        },
        {
            "name": "pool",
            "in": "query",
            "required": false,
            "description": "The token's pool; absent or empty: `default`. Unknown: 400 `the pool was not exists`.",
            "schema": {"type": "string", "default": "default"}
        },
        {
            "name": "scope",
            "in": "query",
            "required": false,
            "description": "Comma-separated subset of `publish,consume,read,manage`; absent or empty: all four.",
            "schema": {"type": "string", "examples": ["publish,read"]},
            "x-sundial-extension": true
        },
        {
            "name": "queues",
            "in": "query",
            "required": false,
            "description": "Comma-separated queue names and `prefix*` prefixes (at most 100); absent or empty: every queue. Needs `scope`; a blank name in the list is 400.",
            "schema": {"type": "string", "examples": ["emails,reports-*"]},
            "x-sundial-extension": true
        },
    ];
    /// Of `listQueuesNeedingALook`.
    ListQueuesNeedingALookParams = [
        {
            "name": "min_age_s",
            "in": "query",
            "required": false,
            "description": "Seconds the next ready job must have waited (default 60).",
            "schema": {"type": "integer", "minimum": 0, "format": "uint64", "default": 60}
        },
    ];
    /// Of `listQueues`.
    ListQueuesParams = [
        {
            "name": "cursor",
            "in": "query",
            "required": false,
            "description": "The previous page's `next_cursor` (a queue name: the list continues after it); absent or empty: from the start. Not a queue name: 400 `invalid cursor`.",
            "schema": {"type": "string", "pattern": "^[-A-Za-z0-9][-_A-Za-z0-9]*$"}
        },
        {
            "name": "limit",
            "in": "query",
            "required": false,
            "description": "Queues per page, 1 to 500 (default 50): 400 `invalid limit: 1 to 500` outside, `invalid limit` when not an integer.",
            "schema": {"type": "integer", "minimum": 1, "maximum": 500, "format": "uint64", "default": 50}
        },
    ];
    /// Of `listQueueJobs`.
    ListQueueJobsParams = [
        {
            "name": "state",
            "in": "query",
            "required": false,
            "description": "Which jobs: `ready` (the default), `delayed`, `reserved` or `dead`.",
            "schema": {"type": "string", "enum": ["ready", "delayed", "reserved", "dead"], "default": "ready"}
        },
        {
            "name": "cursor",
            "in": "query",
            "required": false,
            "description": "The previous page's `next_cursor` (`<place>.<a>.<b>`); absent or empty: from the start.",
            "schema": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$"}
        },
        {
            "name": "limit",
            "in": "query",
            "required": false,
            "description": "Jobs per page, 1 to 500 (default 50).",
            "schema": {"type": "integer", "minimum": 1, "maximum": 500, "format": "uint64", "default": 50}
        },
    ];
    /// Of `listDeadJobs`.
    ListDeadJobsParams = [
        {
            "name": "cursor",
            "in": "query",
            "required": false,
            "description": "The previous page's `next_cursor` (`<place>.<skip>`); absent or empty: from the start.",
            "schema": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+$"}
        },
        {
            "name": "limit",
            "in": "query",
            "required": false,
            "description": "Jobs per page, 1 to 500 (default 50).",
            "schema": {"type": "integer", "minimum": 1, "maximum": 500, "format": "uint64", "default": 50}
        },
    ];
    /// Of `getInfo`.
    GetInfoParams = [
        {
            "name": "pool",
            "in": "query",
            "required": false,
            "description": "The pool; absent or empty: `default`.",
            "schema": {"type": "string", "default": "default"}
        },
    ];
    /// Of `ready`.
    ReadyParams = [
        {
            "name": "strict",
            "in": "query",
            "required": false,
            "description": "`true` (or `1`): 503 unless every shard answers. Read leniently: the last value counts, anything else is not strict.",
            "schema": {"type": "boolean", "default": false}
        },
    ];
}
