//! What every long-running command does to its process: load the config,
//! start logging, raise the open-file limit, turn SIGINT and SIGTERM into a
//! shutdown, and keep its background loops running.

use std::{collections::HashMap, path::PathBuf, sync::Arc, time::Duration};

use futures::future::BoxFuture;
use sundial_router::{
    LiveTopology,
    admin::{AdminStore, homes::MoveState},
    reload::Reloader,
};
use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::{Config, telemetry};

/// The config a command runs with, and the file it came from.
#[derive(Debug)]
pub struct Source {
    pub path: Option<PathBuf>,
    /// The file's bytes as loaded: the baseline for noticing that it changed.
    pub bytes: Option<Vec<u8>>,
    pub config: Config,
}

impl Source {
    pub fn read(path: Option<PathBuf>) -> anyhow::Result<Self> {
        let bytes = path.as_deref().and_then(|f| std::fs::read(f).ok());
        let config = Config::load(path.as_deref())?;
        Ok(Self {
            path,
            bytes,
            config,
        })
    }

    /// A reloader of this file into `live`; with the token table (`admin`,
    /// a gateway's), it refuses a config that drops a pool tokens name.
    pub fn reloader(
        &self,
        live: Arc<LiveTopology>,
        admin: Option<Arc<AdminStore>>,
    ) -> Arc<Reloader> {
        Reloader::new(
            self.path.clone(),
            Box::new(move |path| {
                let config = Config::load(path)?;
                if let Some(admin) = &admin {
                    pools_for_tokens(&config, admin)?;
                }
                Ok(config.desired())
            }),
            live,
        )
    }

    /// Makes runs of the reloader's loop (SIGHUP, file changes, pinned
    /// layouts), for [`Background::add`].
    pub fn reload_loop(
        &self,
        reloader: &Arc<Reloader>,
    ) -> impl Fn(CancellationToken) -> BoxFuture<'static, ()> + Send + 'static {
        let reloader = reloader.clone();
        let (desired, bytes) = (self.config.desired(), self.bytes.clone());
        let (watch_file, every) = (self.config.watch_config, self.config.layout_check());
        move |stop| {
            let watch =
                reloader
                    .clone()
                    .watch(desired.clone(), bytes.clone(), watch_file, every, stop);
            Box::pin(watch)
        }
    }

    /// Starts logging (and says which `SUNDIAL_*` variables it ignored),
    /// raises the open-file limit, and returns the token that SIGINT or
    /// SIGTERM cancels.
    pub fn start(&self) -> CancellationToken {
        telemetry::init_logs(&self.config.log);
        for warning in self.config.warnings() {
            tracing::warn!("{warning}");
        }
        raise_file_limit();
        let shutdown = CancellationToken::new();
        tokio::spawn(on_signal(shutdown.clone()));
        shutdown
    }
}

/// Refuses a config that lacks a pool some tokens need: their requests
/// would fail (`pool not found`), at start or after a reload alike. A
/// namespace's tokens need its tokens' pool, or, once it moved, the pool
/// it moved to (and while it moves, both): a pool that every namespace
/// moved out of can be retired with their tokens kept.
pub fn pools_for_tokens(config: &Config, admin: &AdminStore) -> anyhow::Result<()> {
    let homes = admin.homes();
    let mut missing: std::collections::BTreeMap<String, usize> = Default::default();
    for ((pool, ns), n) in admin.tokens().pools() {
        let needed: Vec<String> = match homes.get(&pool, &ns) {
            Some(h) if h.state == MoveState::Moved => vec![h.to.clone()],
            Some(h) => h.holding().into_iter().map(str::to_owned).collect(),
            None => vec![pool],
        };
        for p in needed {
            if !config.pools.contains_key(&p) {
                *missing.entry(p).or_default() += n;
            }
        }
    }
    anyhow::ensure!(
        missing.is_empty(),
        "tokens need pools that the config does not list: {}. Their requests would fail: \
         list the pools again, move their namespaces out first (sundial namespace move), \
         or delete their tokens (sundial token list NS --pool POOL, then sundial token \
         delete)",
        missing
            .iter()
            .map(|(pool, n)| format!("{pool} ({n} token(s))"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// Raises the soft limit on open files to the hard limit (as Go's runtime
/// does): every connection, waiting workers' included, holds one, and the
/// common default of 1,024 would cap the gateway far below
/// `http.max_connections`. (A hard limit too low for it is among
/// [`Config::warnings`].)
fn raise_file_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot read or raise the open-file limit"),
    }
}

/// Keeps this process off transparent huge pages. mimalloc asks the kernel
/// for them (`MADV_HUGEPAGE`) on its arenas, and then a few kilobytes of
/// live data keep a whole 2 MiB page resident: measured with 5,000 idle
/// keep-alive connections, each cost about 21 KB of RSS with them and
/// 16 KB without (after one small request), and after the connections
/// closed the memory went back to the system only without them
/// (docs/BENCHMARKS.md, "Idle connections"). Set before the runtime's threads allocate much; a kernel that
/// refuses it leaves things as they were.
pub fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        eprintln!("sundial: cannot turn off transparent huge pages: {e}");
    }
}

/// Cancels `shutdown` on SIGINT or SIGTERM.
async fn on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutting down: no new requests, finishing those in flight");
    shutdown.cancel();
}

/// Makes one run of a background loop.
type Start = Box<dyn Fn(CancellationToken) -> BoxFuture<'static, ()> + Send>;

/// A command's background loops (token poller, health probes, reload,
/// drains, pumps). Each runs until its stop token is
/// cancelled; one that ends before (it panicked) is logged and started
/// again after a second, so a bug in one loop degrades, never silently
/// stops, what it keeps up to date.
pub struct Background {
    loops: HashMap<&'static str, Start>,
    stop: CancellationToken,
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background")
            .field("loops", &self.loops.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Default for Background {
    fn default() -> Self {
        Self {
            loops: HashMap::new(),
            stop: CancellationToken::new(),
        }
    }
}

/// How long a loop that ended waits before it is started again.
const RESTART_AFTER: Duration = Duration::from_secs(1);

impl Background {
    /// Adds a loop; `start` makes a run of it that ends when its token is
    /// cancelled.
    pub fn add<F>(
        &mut self,
        name: &'static str,
        start: impl Fn(CancellationToken) -> F + Send + 'static,
    ) where
        F: Future<Output = ()> + Send + 'static,
    {
        self.loops
            .insert(name, Box::new(move |stop| Box::pin(start(stop))));
    }

    /// Runs every loop, restarting those that end, until [`Running::stop`].
    /// Each loop's first run is made here, before this returns, so that
    /// what it sets up (a file watcher, a baseline) is in place before the
    /// caller reports ready.
    pub fn start(self) -> Running {
        let stop = self.stop.clone();
        let mut tasks = JoinSet::new();
        let mut names: HashMap<Id, &'static str> = HashMap::new();
        for (name, start) in &self.loops {
            names.insert(tasks.spawn(start(stop.clone())).id(), name);
        }
        Running {
            stop: stop.clone(),
            supervisor: tokio::spawn(supervise(self.loops, tasks, names, stop)),
        }
    }
}

/// The loops of a started [`Background`].
#[derive(Debug)]
pub struct Running {
    stop: CancellationToken,
    supervisor: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops every loop and waits for them to end.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.supervisor.await;
    }
}

async fn supervise(
    loops: HashMap<&'static str, Start>,
    mut tasks: JoinSet<()>,
    mut names: HashMap<Id, &'static str>,
    stop: CancellationToken,
) {
    loop {
        let ended = tokio::select! {
            // Stop first: loops return when it is cancelled, and one that
            // did is not a loop that ended too early.
            biased;
            () = stop.cancelled() => break,
            Some(ended) = tasks.join_next_with_id() => ended,
        };
        let (id, why) = match ended {
            Ok((id, ())) => (id, "it returned".to_owned()),
            Err(e) => (e.id(), e.to_string()),
        };
        let Some(name) = names.remove(&id) else {
            continue;
        };
        tracing::error!(
            task = name,
            why,
            "a background loop ended; starting it again"
        );
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(RESTART_AFTER) => {}
        }
        if let Some(start) = loops.get(name) {
            names.insert(tasks.spawn(start(stop.clone())).id(), name);
        }
    }
    while tasks.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_panics_is_started_again_and_all_stop_together() {
        let runs = Arc::new(AtomicU32::new(0));
        let mut background = Background::default();
        let counted = runs.clone();
        background.add("flaky", move |stop: CancellationToken| {
            let run = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                assert!(run > 0, "the first run dies");
                stop.cancelled().await;
            }
        });
        let running = background.start();
        tokio::time::sleep(RESTART_AFTER * 3).await;
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "restarted once, then runs on"
        );
        running.stop().await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}
