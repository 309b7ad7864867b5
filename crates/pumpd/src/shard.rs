//! The pumps of one shard: discovery of buckets and their wake-ups.

use std::{collections::HashMap, sync::Arc};

use fred::{clients::SubscriberClient, prelude::*};
use sundial_core::{Shard, job::check_namespace, keys};
use sundial_router::Pool;
use tokio::{sync::Notify, task::JoinSet};
use tokio_util::sync::CancellationToken;

use crate::{PumpOptions, bucket};

pub(crate) struct ShardPumps {
    pool: Arc<Pool>,
    shard: Shard,
    opts: PumpOptions,
    buckets: HashMap<(String, u32), Arc<Notify>>,
    tasks: JoinSet<()>,
}

impl ShardPumps {
    pub(crate) fn new(pool: Arc<Pool>, shard: Shard, opts: PumpOptions) -> Self {
        Self {
            pool,
            shard,
            opts,
            buckets: HashMap::new(),
            tasks: JoinSet::new(),
        }
    }

    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        let sub = match self.subscribe().await {
            Ok(sub) => Some(sub),
            Err(e) => {
                // Pumps still run on their idle timer; they just lose the
                // early wake-ups until the next start.
                tracing::error!(shard = self.shard.name(), error = %e, "cannot subscribe to timer announcements");
                None
            }
        };
        let mut messages = sub.as_ref().map(|s| s.message_rx());
        let mut reconnects = sub.as_ref().map(|s| s.reconnect_rx());
        let mut refresh = tokio::time::interval(self.opts.registry_refresh);
        loop {
            tokio::select! {
                _ = refresh.tick() => self.discover(&shutdown).await,
                msg = recv(&mut messages) => match msg {
                    Some(Ok(m)) => {
                        if let Some(tag) = m.value.as_str() {
                            self.announce(&tag, &shutdown);
                        }
                    }
                    // Lagged: some announcements were lost; wake everyone.
                    Some(Err(_)) => self.wake_all(),
                    None => messages = None,
                },
                r = recv(&mut reconnects) => match r {
                    // Announcements may have been missed while disconnected.
                    Some(_) => self.wake_all(),
                    None => reconnects = None,
                },
                () = shutdown.cancelled() => break,
            }
        }
        if let Some(sub) = sub {
            let _ = sub.quit().await;
        }
        while self.tasks.join_next().await.is_some() {}
    }

    async fn subscribe(&self) -> Result<SubscriberClient, sundial_core::EngineError> {
        let sub = self.shard.subscriber()?;
        let _handles = sub.init().await.map_err(|e| self.shard_err(e))?;
        let _manage = sub.manage_subscriptions();
        sub.subscribe(keys::TIMER_CHANNEL)
            .await
            .map_err(|e| self.shard_err(e))?;
        Ok(sub)
    }

    fn shard_err(&self, e: fred::error::Error) -> sundial_core::EngineError {
        self.shard.err(e)
    }

    /// Reads the registry and starts a task for every bucket not yet pumped.
    async fn discover(&mut self, shutdown: &CancellationToken) {
        match self.shard.namespaces().await {
            Ok(namespaces) => {
                for ns in namespaces {
                    for b in self.my_buckets(&ns) {
                        self.ensure(&ns, b, shutdown);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(shard = self.shard.name(), error = %e, "cannot read the namespace registry")
            }
        }
    }

    fn my_buckets(&self, ns: &str) -> Vec<u32> {
        self.pool
            .groups(ns)
            .into_iter()
            .filter(|(s, _)| s.name() == self.shard.name())
            .flat_map(|(_, b)| b)
            .collect()
    }

    /// A script said bucket `tag` is due sooner: wake its task (or start it).
    fn announce(&mut self, tag: &str, shutdown: &CancellationToken) {
        let Some((ns, b)) = keys::parse_bucket_tag(tag) else {
            return;
        };
        if check_namespace(ns).is_err() || b >= self.pool.buckets() {
            return;
        }
        self.ensure(ns, b, shutdown).notify_one();
    }

    fn ensure(&mut self, ns: &str, b: u32, shutdown: &CancellationToken) -> Arc<Notify> {
        if let Some(n) = self.buckets.get(&(ns.to_owned(), b)) {
            return n.clone();
        }
        let wake = Arc::new(Notify::new());
        self.buckets.insert((ns.to_owned(), b), wake.clone());
        self.tasks.spawn(bucket::run(
            self.pool.name().to_owned(),
            self.shard.clone(),
            ns.to_owned(),
            b,
            wake.clone(),
            self.opts.clone(),
            shutdown.clone(),
        ));
        wake
    }

    fn wake_all(&self) {
        for n in self.buckets.values() {
            n.notify_one();
        }
    }
}

/// Receives from an optional broadcast receiver; pending forever when absent.
async fn recv<T: Clone>(
    rx: &mut Option<tokio::sync::broadcast::Receiver<T>>,
) -> Option<Result<T, tokio::sync::broadcast::error::RecvError>> {
    match rx {
        Some(rx) => match rx.recv().await {
            Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
            other => Some(other),
        },
        None => std::future::pending().await,
    }
}
