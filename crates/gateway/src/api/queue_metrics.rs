//! Per-queue metric handles, made once per (pool, namespace, queue).
//!
//! Building a metric's labels on every request (three strings, a key hashed
//! into the registry) cost about a tenth of the gateway's throughput; these
//! handles are looked up by `&str` and cost no allocation once made. Each
//! series is registered on its first event, not with the queue: a gateway
//! serving thousands of tenants exports only what happened (a queue that is
//! only published to has one series, not six). The series are per-queue
//! series (`sundial_core::series`): they go once idle for
//! `metrics.idle_series_secs`, and a queue unused that long leaves this
//! table too, so that neither grows with every queue name ever used.

use std::{
    collections::HashMap,
    sync::{
        Arc, LazyLock, OnceLock, RwLock,
        atomic::{AtomicU64, Ordering},
    },
};

use sundial_core::series::{self, Handle, Kind};
use sundial_router::admin::{AdminStore, queues::Listed};

/// What is counted per queue.
#[derive(Debug, Clone, Copy)]
pub(super) enum Event {
    Published,
    Consumed,
    Acked,
    Deleted,
    Respawned,
}

const COUNTERS: [&str; 5] = [
    "sundial_jobs_published_total",
    "sundial_jobs_consumed_total",
    "sundial_jobs_acked_total",
    "sundial_jobs_deleted_total",
    "sundial_jobs_respawned_total",
];

#[derive(Debug)]
pub(super) struct Handles {
    labels: [(&'static str, String); 3],
    counters: [OnceLock<Handle>; 5],
    /// `sundial_job_first_delivery_seconds`
    first_delivery: OnceLock<Handle>,
    /// When the queue was last looked up (`series::now_ms`).
    used: AtomicU64,
    /// When this process last added the queue to its namespace's queue
    /// index: see [`published`].
    listed: Listed,
}

impl Handles {
    fn new(pool: &str, ns: &str, queue: &str) -> Self {
        Self {
            labels: [
                ("pool", pool.to_owned()),
                ("namespace", ns.to_owned()),
                ("queue", queue.to_owned()),
            ],
            counters: Default::default(),
            first_delivery: OnceLock::new(),
            used: AtomicU64::new(series::now_ms()),
            listed: Listed::default(),
        }
    }

    pub(super) fn count(&self, event: Event, n: u64) {
        if n > 0 {
            let i = event as usize;
            self.counters[i]
                .get_or_init(|| Handle::new(COUNTERS[i], &self.labels, Kind::Counter))
                .increment(n);
        }
    }

    /// Records a job's time from publish to first delivery.
    pub(super) fn first_delivery(&self, secs: f64) {
        self.first_delivery
            .get_or_init(|| {
                let kind = Kind::Histogram(FIRST_DELIVERY_BUCKETS);
                Handle::new("sundial_job_first_delivery_seconds", &self.labels, kind)
            })
            .record(secs);
    }
}

/// `sundial_job_first_delivery_seconds`'s buckets: delays of seconds to a
/// day.
const FIRST_DELIVERY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0,
];

type ByQueue = HashMap<String, Arc<Handles>>;
/// When queues idle for the idle time last left [`HANDLES`].
static SWEPT: AtomicU64 = AtomicU64::new(0);

/// Pool → namespace → queue → handles. Read under a shared lock on every
/// request; written once per queue.
static HANDLES: LazyLock<RwLock<HashMap<String, HashMap<String, ByQueue>>>> =
    LazyLock::new(RwLock::default);

/// The handles of one queue.
pub(super) fn of(pool: &str, ns: &str, queue: &str) -> Arc<Handles> {
    if let Some(h) = HANDLES
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(pool)
        .and_then(|p| p.get(ns))
        .and_then(|n| n.get(queue))
    {
        h.used.store(series::now_ms(), Ordering::Relaxed);
        return h.clone();
    }
    let mut all = HANDLES.write().unwrap_or_else(|p| p.into_inner());
    if series::idle_since(SWEPT.load(Ordering::Relaxed)) {
        SWEPT.store(series::now_ms(), Ordering::Relaxed);
        for by_ns in all.values_mut() {
            for queues in by_ns.values_mut() {
                queues.retain(|_, h| !series::idle_since(h.used.load(Ordering::Relaxed)));
            }
            by_ns.retain(|_, queues| !queues.is_empty());
        }
    }
    if let Some(h) = all
        .get(pool)
        .and_then(|p| p.get(ns))
        .and_then(|n| n.get(queue))
    {
        return h.clone();
    }
    let h = Arc::new(Handles::new(pool, ns, queue));
    all.entry(pool.to_owned())
        .or_default()
        .entry(ns.to_owned())
        .or_default()
        .insert(queue.to_owned(), h.clone());
    h
}

/// When this process last listed `queue` in its namespace's index.
pub(super) fn listed(pool: &str, ns: &str, queue: &str) -> Listed {
    of(pool, ns, queue).listed.clone()
}

/// Counts `n` jobs published to `queue`, and keeps the queue in its
/// namespace's index (for the admin listing).
pub(super) fn published(admin: &AdminStore, tenant: &super::tenant::Tenant, queue: &str, n: u64) {
    let (pool, ns) = (tenant.pool().name(), tenant.ns.as_str());
    let h = of(pool, ns, queue);
    h.count(Event::Published, n);
    admin.queues().note(&h.listed, pool, ns, queue);
}

/// Adds `n` jobs of `queue` to one of the `sundial_jobs_*_total` counters
/// (labels: pool, namespace, queue).
pub(super) fn count(event: Event, tenant: &super::tenant::Tenant, queue: &str, n: u64) {
    of(tenant.pool().name(), &tenant.ns, queue).count(event, n);
}
