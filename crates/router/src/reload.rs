//! Hot reload of the pools: on a change of the config file, on SIGHUP, and
//! on `POST /reload` (admin API).
//!
//! A reload builds the whole new topology off to the side (reusing the
//! connections of unchanged shards), checks it as a start would (every shard
//! answers, is safe, and agrees on its data format, slot and lane counts and
//! ring membership), and refuses to drop a pool that still holds jobs. Only then does it swap it in
//! with one store; requests in flight finish on the topology they started
//! with, and pumps follow the new one (long-poll wake-ups need not: each
//! shard connection owns its subscriber). A failed reload
//! keeps the old topology, logs why, answers the admin call with the error
//! and counts `sundial_reloads_total{result="failure"}`.
//!
//! Only `pools` are reloaded; other keys (listeners, limits, accounts, log)
//! need a restart, and a reload that changes them says so in its log. The
//! reloader reads the file through a [`Load`] that the binary provides (it
//! owns the config format); those that follow the topology (the token
//! store, pumps) watch [`LiveTopology::changes`].

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use anyhow::Context;
use notify::Watcher;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::{
    Layout, LiveTopology, PoolConfig, Topology,
    prepare::{RELOAD_WAIT, pinned_except, prepare},
};

/// What a reload reads from the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub pools: BTreeMap<String, PoolConfig>,
    /// Every other key, in any stable form: when it differs from the last
    /// one applied, the log says that a restart is needed.
    pub others: String,
}

/// Reads the config file (from the path given, or the environment alone).
pub type Load = dyn Fn(Option<&std::path::Path>) -> anyhow::Result<Desired> + Send + Sync;

/// How long a burst of file events is let pass before a reload (editors
/// write in steps).
const DEBOUNCE: Duration = Duration::from_millis(200);

pub struct Reloader {
    path: Option<PathBuf>,
    load: Box<Load>,
    live: Arc<LiveTopology>,
    /// One reload at a time; also holds the config last applied.
    applied: Mutex<Option<Desired>>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Reloader {
    /// A reloader of the file at `path` (read with `load`) into `live`.
    pub fn new(path: Option<PathBuf>, load: Box<Load>, live: Arc<LiveTopology>) -> Arc<Self> {
        // Both series exist from start, at 0: an alert on the failures'
        // increase then sees a process's first failed reload.
        for result in ["success", "failure"] {
            metrics::counter!("sundial_reloads_total", "result" => result).increment(0);
        }
        Arc::new(Self {
            path,
            load,
            live,
            applied: Mutex::new(None),
        })
    }

    /// Reloads now; returns a one-line account of what changed.
    pub async fn reload(&self, trigger: &str) -> anyhow::Result<String> {
        let mut applied = self.applied.lock().await;
        let result = self.apply(&mut applied).await;
        match &result {
            Ok(summary) => {
                metrics::counter!("sundial_reloads_total", "result" => "success").increment(1);
                tracing::info!(trigger, summary, "config reloaded");
            }
            Err(e) => {
                metrics::counter!("sundial_reloads_total", "result" => "failure").increment(1);
                tracing::error!(
                    trigger,
                    error = format!("{e:#}"),
                    "config reload failed; keeping the current pools"
                );
            }
        }
        result
    }

    async fn apply(&self, applied: &mut Option<Desired>) -> anyhow::Result<String> {
        let config = (self.load)(self.path.as_deref())?;
        let current = self.live.topology();
        for pool in current.pools() {
            if config.pools.contains_key(pool.name()) {
                continue;
            }
            for shard in pool.shards() {
                let holds = shard
                    .slots()
                    .hold_jobs(pool.slots())
                    .await
                    .with_context(|| {
                        format!("cannot tell whether pool {} still holds jobs", pool.name())
                    })?;
                anyhow::ensure!(
                    !holds,
                    "pool {} still holds jobs (shard {}); drain it before removing it",
                    pool.name(),
                    shard.name()
                );
            }
        }
        let topology = prepare(&config.pools, Some(&current), RELOAD_WAIT).await?;
        let summary = summarize(&current, &topology);
        self.live.store(topology);
        if applied
            .as_ref()
            .is_some_and(|old| old.others != config.others)
        {
            tracing::warn!(
                "the config file changed keys besides `pools`; those take effect at the next restart"
            );
        }
        *applied = Some(config);
        Ok(summary)
    }

    /// Reloads on SIGHUP, with `watch_config` when the config file changes,
    /// and when the layouts pinned in the shards differ from those this
    /// process holds (checked every `layout_check`), until `shutdown`.
    pub fn watch(
        self: Arc<Self>,
        started: Desired,
        started_bytes: Option<Vec<u8>>,
        watch_file: bool,
        layout_check: Duration,
        shutdown: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        // Set up here, before the caller reports ready, not in the spawned
        // loop: a change made in between would otherwise become the baseline
        // and never be applied. The baseline is the file as it was loaded.
        // (A loop started again after a panic keeps what was applied since.)
        if let Ok(mut applied) = self.applied.try_lock()
            && applied.is_none()
        {
            *applied = Some(started);
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let watcher = self
            .path
            .as_ref()
            .filter(|_| watch_file)
            .and_then(|p| file_watcher(p, tx));
        let hup = hangups();
        self.run(watcher, rx, hup, started_bytes, layout_check, shutdown)
    }

    async fn run(
        self: Arc<Self>,
        _watcher: Option<notify::RecommendedWatcher>,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<()>,
        mut hup: tokio::sync::mpsc::UnboundedReceiver<()>,
        mut last: Option<Vec<u8>>,
        layout_check: Duration,
        shutdown: CancellationToken,
    ) {
        let mut layouts = tokio::time::interval(layout_check);
        layouts.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_attempt = None;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = layouts.tick() => {
                    // Another process retired a drained layout, or moved to a
                    // new one: follow. The same difference is tried once, so a
                    // reload that keeps failing does not flood the log.
                    match self.pinned_differs().await {
                        Some(pinned) if last_attempt.as_ref() != Some(&pinned) => {
                            last_attempt = Some(pinned);
                            let _ = self.reload("shard layouts changed").await;
                        }
                        _ => {}
                    }
                }
                Some(()) = hup.recv() => {
                    let _ = self.reload("SIGHUP").await;
                }
                Some(()) = rx.recv() => {
                    // Let a burst of events pass, then reload only if the
                    // content really changed (editors and Kubernetes touch
                    // files and links without changing them).
                    tokio::time::sleep(DEBOUNCE).await;
                    while rx.try_recv().is_ok() {}
                    let now = self.path.as_ref().and_then(|p| std::fs::read(p).ok());
                    if now.is_some() && now != last {
                        last = now;
                        let _ = self.reload("config file changed").await;
                    }
                }
            }
        }
    }
}

impl Reloader {
    /// The layouts pinned in the shards (beyond each pool's current one),
    /// when they differ from those this process holds.
    async fn pinned_differs(&self) -> Option<BTreeMap<String, BTreeSet<Layout>>> {
        let topology = self.live.topology();
        let mut pinned = BTreeMap::new();
        let mut held = BTreeMap::new();
        for pool in topology.pools() {
            pinned.insert(
                pool.name().to_owned(),
                pinned_except(pool.shards(), pool.layout()).await.ok()?,
            );
            held.insert(
                pool.name().to_owned(),
                pool.draining().cloned().collect::<BTreeSet<_>>(),
            );
        }
        (pinned != held).then_some(pinned)
    }
}

/// Watches the config file's directory (editors replace the file; a
/// Kubernetes ConfigMap swaps a symlink) and signals on any event.
fn file_watcher(
    path: &std::path::Path,
    tx: tokio::sync::mpsc::UnboundedSender<()>,
) -> Option<notify::RecommendedWatcher> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if ev.is_ok() {
            let _ = tx.send(());
        }
    })
    .map_err(|e| tracing::warn!(error = %e, "cannot watch the config file; reload with SIGHUP or POST /reload"))
    .ok()?;
    watcher
        .watch(dir, notify::RecursiveMode::NonRecursive)
        .map_err(|e| tracing::warn!(error = %e, dir = %dir.display(), "cannot watch the config directory"))
        .ok()?;
    Some(watcher)
}

/// SIGHUP as a stream of unit messages (nothing on platforms without it).
fn hangups() -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    #[cfg(unix)]
    if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                if tx.send(()).is_err() {
                    return;
                }
            }
        });
    }
    rx
}

fn summarize(old: &Topology, new: &Topology) -> String {
    let names = |t: &Topology| -> Vec<String> { t.pools().map(|p| p.name().to_owned()).collect() };
    let (before, after) = (names(old), names(new));
    let added: Vec<&String> = after.iter().filter(|p| !before.contains(p)).collect();
    let removed: Vec<&String> = before.iter().filter(|p| !after.contains(p)).collect();
    let reconnected = new
        .shards()
        .filter(|s| !old.shards().any(|o| o.same(s)))
        .count();
    format!("pools added {added:?}, removed {removed:?}; {reconnected} shard connection(s) new")
}
