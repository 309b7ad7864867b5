//! What every handler shares.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
};

/// Shard → namespace → queues.
type Registered = HashMap<String, HashMap<String, HashSet<String>>>;

use sundial_core::{EngineError, Limits, Shard};
use sundial_router::{LiveTopology, health::Health, tokens::TokenStore};
use tokio_util::sync::CancellationToken;

use crate::{api::body::Bodies, wakeups::Wakeups};

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
}

#[derive(Debug)]
pub struct AppState {
    pub live: Arc<LiveTopology>,
    pub tokens: Arc<TokenStore>,
    /// Long polls' wake-ups, per shard connection and queue.
    pub wakeups: Wakeups,
    pub limits: Limits,
    /// Bounds on request bodies (size, time, shared memory).
    pub bodies: Bodies,
    /// Every shard's last health check.
    pub health: Health,
    pub accounts: BTreeMap<String, String>,
    /// Cancelled when the gateway shuts down: long polls end with a 404.
    pub shutdown: CancellationToken,
    /// Samples for the rates of `GET …/stats`.
    pub rates: Rates,
    /// Queues this process has registered: shard → namespace → queues.
    /// Read on every publish (no allocation), written once per queue.
    registered: RwLock<Registered>,
    ready: AtomicBool,
}

impl AppState {
    /// The state of a gateway.
    pub fn new(
        settings: Settings,
        live: Arc<LiveTopology>,
        tokens: Arc<TokenStore>,
        health: Health,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            live,
            tokens,
            wakeups: Wakeups::default(),
            limits: settings.limits,
            bodies: settings.bodies,
            health,
            accounts: settings.accounts,
            shutdown,
            rates: Rates::default(),
            registered: RwLock::default(),
            ready: AtomicBool::new(false),
        })
    }

    /// The pool as the current topology has it (a write re-reads it after a
    /// slow body, so that it lands in the layout that is current now).
    pub fn current_pool(&self, name: &str) -> Option<Arc<sundial_router::Pool>> {
        self.live.topology().pool(name).cloned()
    }

    /// Records the queue in the shard's registry once per process.
    pub async fn register(&self, shard: &Shard, ns: &str, queue: &str) -> Result<(), EngineError> {
        let known = self
            .registered
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(shard.name())
            .and_then(|n| n.get(ns))
            .is_some_and(|q| q.contains(queue));
        if known {
            return Ok(());
        }
        shard.register(ns, queue).await?;
        self.registered
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(shard.name().to_owned())
            .or_default()
            .entry(ns.to_owned())
            .or_default()
            .insert(queue.to_owned());
        Ok(())
    }

    /// Forgets what this process registered on a shard (it lost its data),
    /// so that the next publish to each queue registers it again.
    pub fn forget_registered(&self, shard: &str) {
        self.registered
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(shard);
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}
