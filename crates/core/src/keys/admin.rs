//! The keys of the admin Redis: the replicated tables and their version,
//! and the counters of rates, quotas and refusals. Their layout is in the
//! `keys` module's doc.

/// Admin Redis: all tokens.
pub const TOKENS: &str = "sd:tokens";
/// Admin Redis: the token table's version (bumped by token and limit changes).
pub const TOKENS_VERSION: &str = "sd:tokens:version";
/// Admin Redis: rate limits, `<pool>/<ns>/<secret>` → JSON `{read, write, interval}`.
pub const LIMITS: &str = "sd:limits";

/// One of the admin Redis's replicated tables: hashes changed together
/// with one version ([`AdminKeys::version`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AdminTable {
    Tokens,
    Limits,
    /// Where a namespace's tokens are served from, while and after it
    /// moves to another pool.
    Homes,
    /// A namespace's quota, where it overrides its pool's.
    Quotas,
    /// A queue's retry policy.
    Policies,
    /// Queues and namespaces whose consumers get no job for now.
    Pauses,
    /// Schedules: jobs that queues publish by themselves.
    Schedules,
}

impl AdminTable {
    /// Every table, in the order they are declared (and read, and
    /// restored).
    pub const ALL: [Self; 7] = [
        Self::Tokens,
        Self::Limits,
        Self::Homes,
        Self::Quotas,
        Self::Policies,
        Self::Pauses,
        Self::Schedules,
    ];
}

/// The names of the admin tables on one kind of admin Redis.
#[derive(Debug)]
pub struct AdminKeys {
    pub tokens: &'static str,
    pub limits: &'static str,
    pub homes: &'static str,
    pub quotas: &'static str,
    pub policies: &'static str,
    pub pauses: &'static str,
    pub schedules: &'static str,
    pub version: &'static str,
    /// Prefix of the queue indexes ([`AdminKeys::queues`]).
    queues: &'static str,
}

/// The admin tables on a standalone or Sentinel-managed Redis.
const ADMIN_KEYS: AdminKeys = AdminKeys {
    tokens: TOKENS,
    limits: LIMITS,
    homes: "sd:homes",
    quotas: "sd:quotas",
    policies: "sd:policies",
    pauses: "sd:pauses",
    schedules: "sd:schedules",
    version: TOKENS_VERSION,
    queues: "sd:queues:",
};

/// The admin tables on a Redis Cluster: one hash tag, one cluster hash slot.
const CLUSTER_ADMIN_KEYS: AdminKeys = AdminKeys {
    tokens: "sd:{admin}:tokens",
    limits: "sd:{admin}:limits",
    homes: "sd:{admin}:homes",
    quotas: "sd:{admin}:quotas",
    policies: "sd:{admin}:policies",
    pauses: "sd:{admin}:pauses",
    schedules: "sd:{admin}:schedules",
    version: "sd:{admin}:tokens:version",
    queues: "sd:{admin}:queues:",
};

impl AdminKeys {
    /// The names on a cluster (`true`) or on a single Redis.
    pub fn of(cluster: bool) -> &'static AdminKeys {
        if cluster {
            &CLUSTER_ADMIN_KEYS
        } else {
            &ADMIN_KEYS
        }
    }

    /// The index of the queues a namespace of a pool has been published
    /// to: a sorted set of queue names, all with score 0 (so that it pages
    /// by name).
    pub fn queues(&self, pool: &str, ns: &str) -> String {
        format!("{}{pool}/{ns}", self.queues)
    }

    pub fn table(&self, table: AdminTable) -> &'static str {
        match table {
            AdminTable::Tokens => self.tokens,
            AdminTable::Limits => self.limits,
            AdminTable::Homes => self.homes,
            AdminTable::Quotas => self.quotas,
            AdminTable::Policies => self.policies,
            AdminTable::Pauses => self.pauses,
            AdminTable::Schedules => self.schedules,
        }
    }
}

/// Admin Redis: the request counter of one token (by its id, never its
/// secret) and action (`r` consume, `w` publish) in the current window;
/// expires with the window.
pub fn rate(pool: &str, ns: &str, token_id: &str, action: char) -> String {
    format!("sd:rate:{pool}/{ns}/{token_id}:{action}")
}

/// Admin Redis: a namespace's rate-quota bucket for one direction (`p`
/// publish, `c` consume); expires once full again.
pub fn quota_rate(pool: &str, ns: &str, direction: char) -> String {
    format!("sd:quota:{pool}/{ns}:{direction}")
}

/// Admin Redis: a namespace's refusals by quota (hash: quota → requests).
pub fn refusals(pool: &str, ns: &str) -> String {
    format!("sd:refusals:{pool}/{ns}")
}

/// A namespace's backlog quota on the admin Redis (`lua/backlog.lua`):
/// this hash, and its `:p` and `:d` sorted sets, under one hash tag.
pub fn backlog(pool: &str, ns: &str) -> String {
    format!("sd:backlog:{{{pool}/{ns}}}")
}
