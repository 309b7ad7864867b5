//! What every handler shares.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use sundial_core::Limits;
use sundial_router::{LiveTopology, admin::AdminStore, health::Health};
use tokio_util::sync::CancellationToken;

use crate::{
    api::body::Bodies,
    batch::{Publishes, Workers},
    wakeups::Wakeups,
};

/// Samples of queues' running totals, for the rates of `GET …/stats`.
#[derive(Debug, Default)]
pub struct Rates {
    samples: Mutex<HashMap<String, Sample>>,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: std::time::Instant,
    published: u64,
    delivered: u64,
    rates: Option<(f64, f64)>,
}

/// How many queues' samples a gateway keeps before it starts over.
const MAX_SAMPLES: usize = 10_000;

impl Rates {
    /// Records the totals now and returns (publish, consume) per second since
    /// the previous sample taken at least a second ago.
    pub fn observe(&self, key: &str, published: u64, delivered: u64) -> Option<(f64, f64)> {
        let now = std::time::Instant::now();
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        match samples.get(key).copied() {
            Some(prev) if now.duration_since(prev.at).as_secs_f64() < 1.0 => prev.rates,
            prev => {
                let rates = prev.map(|p| {
                    let secs = now.duration_since(p.at).as_secs_f64();
                    (
                        published.saturating_sub(p.published) as f64 / secs,
                        delivered.saturating_sub(p.delivered) as f64 / secs,
                    )
                });
                if samples.len() >= MAX_SAMPLES && prev.is_none() {
                    samples.clear();
                }
                samples.insert(
                    key.to_owned(),
                    Sample {
                        at: now,
                        published,
                        delivered,
                        rates,
                    },
                );
                rates
            }
        }
    }
}

/// What a gateway is run with, besides its topology and tokens.
#[derive(Debug, Clone)]
pub struct Settings {
    /// lmstfy's defaults for parameters a request leaves out.
    pub limits: Limits,
    /// Bounds on request bodies (size, time, shared memory).
    pub bodies: Bodies,
    /// Admin API basic-auth accounts (user → password); none = no auth.
    pub accounts: BTreeMap<String, String>,
    /// Names the admin listener answers to besides IP addresses and
    /// `localhost` (`access`).
    pub admin_hosts: Vec<String>,
    /// Accept a job-API token in the query when no `X-Token` is sent.
    pub query_token: bool,
}

#[derive(Debug)]
pub struct AppState {
    pub live: Arc<LiveTopology>,
    /// The admin tables (tokens, limits, namespace homes) and queue index.
    pub admin: Arc<AdminStore>,
    /// Long polls' wake-ups, per shard connection and queue.
    pub wakeups: Wakeups,
    /// Publishes waiting for a call, per queue and slot (group commit).
    pub publishes: Publishes,
    /// Acks and consumes waiting for a call, per queue and slot (group
    /// commit).
    pub workers: Workers,
    pub limits: Limits,
    /// Bounds on request bodies (size, time, shared memory).
    pub bodies: Bodies,
    /// Every shard's last health check.
    pub health: Health,
    /// The shards near their `maxmemory`, and who may still publish there.
    pub headroom: sundial_router::headroom::Headroom,
    /// What this gateway's mover does (written by the mover's loop).
    pub mover: sundial_router::mover::Status,
    /// Who may use the admin listener.
    pub access: Arc<crate::access::AdminAccess>,
    /// Accept a job-API token in the query (`?token=`).
    pub query_token: bool,
    /// Cancelled when the gateway shuts down: long polls end with a 404.
    pub shutdown: CancellationToken,
    /// Samples for the rates of `GET …/stats`.
    pub rates: Rates,
    /// The last minutes of the queues whose counters were read.
    pub history: crate::history::History,
    ready: AtomicBool,
}

impl AppState {
    /// The state of a gateway.
    pub fn new(
        settings: Settings,
        live: Arc<LiveTopology>,
        admin: Arc<AdminStore>,
        health: Health,
        mover: sundial_router::mover::Status,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let turns = Arc::new(crate::batch::Turns::default());
        Arc::new(Self {
            live,
            admin,
            wakeups: Wakeups::default(),
            // One fair share of each Redis server for both.
            publishes: Publishes::new(turns.clone()),
            workers: Workers::new(turns),
            limits: settings.limits,
            bodies: settings.bodies,
            health,
            headroom: Default::default(),
            mover,
            access: Arc::new(crate::access::AdminAccess::new(
                settings.accounts,
                settings.admin_hosts,
            )),
            query_token: settings.query_token,
            shutdown,
            rates: Rates::default(),
            history: crate::history::History::default(),
            ready: AtomicBool::new(false),
        })
    }

    /// The pool as the current topology has it (a write re-reads it after a
    /// slow body, so that it lands in the layout that is current now).
    pub fn current_pool(&self, name: &str) -> Option<Arc<sundial_router::Pool>> {
        self.live.topology().pool(name).cloned()
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}
