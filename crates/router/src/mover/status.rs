//! What this gateway's mover reports: per pool, whether it moves, waits or
//! idles and how many jobs it moved (`GET /drains`, `GET /pools/{pool}`);
//! per namespace moving out of a pool, the jobs it carried
//! (`GET /namespaces/{ns}/move`).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, MutexGuard},
};

use serde::Serialize;

/// What this gateway's mover does in the pool: it copies the jobs that
/// moved slots still hold at their old shard to the shard that holds them
/// now, once every live gateway writes them there. Each gateway reports
/// its own mover; a slot is moved by one gateway at a time.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct MoverStatus {
    /// `idle`: nothing drains; `moving`: moved slots may move (this gateway
    /// moves those whose mover lease it holds); `waiting`: they may not yet
    /// (see `reason`).
    pub state: MoverState,
    /// Why the mover waits, for every moved slot (`waiting`: e.g. a live
    /// gateway that does not know the current layout yet) or for some
    /// (`moving`: slots held back until their new shard holds none of their
    /// jobs in transit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Slots this gateway is moving now.
    pub slots_moving: u64,
    /// Jobs whose move this gateway completed in this pool since it started
    /// (copied to their new place, and let go at the old shard).
    pub jobs_moved: u64,
}

/// What a mover is doing in a pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MoverState {
    #[default]
    Idle,
    Moving,
    Waiting,
}

impl MoverStatus {
    fn idle() -> Self {
        Self {
            state: MoverState::Idle,
            ..Self::default()
        }
    }
}

/// The mover's status, shared by the mover (which writes it) and those who
/// report it (which read it). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Status {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    pools: BTreeMap<String, MoverStatus>,
    /// (pool it leaves, namespace) → jobs moved.
    namespaces: HashMap<(String, String), u64>,
}

impl Status {
    /// What the mover does in `pool`.
    pub fn of(&self, pool: &str) -> MoverStatus {
        self.lock()
            .pools
            .get(pool)
            .cloned()
            .unwrap_or_else(MoverStatus::idle)
    }

    /// Jobs this gateway moved of namespace `ns` out of pool `from`.
    pub fn namespace_moved(&self, from: &str, ns: &str) -> u64 {
        self.lock()
            .namespaces
            .get(&(from.to_owned(), ns.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Changes what the mover reports of `pool`.
    pub(crate) fn set(&self, pool: &str, f: impl FnOnce(&mut MoverStatus)) {
        let mut inner = self.lock();
        let s = inner
            .pools
            .entry(pool.to_owned())
            .or_insert_with(MoverStatus::idle);
        f(s);
        metrics::gauge!("sundial_mover_slots", "pool" => pool.to_owned())
            .set(s.slots_moving as f64);
    }

    /// Counts `n` jobs whose move completed in `pool` (of namespace `ns`,
    /// moving out of it, when that is what moved them), in the status and
    /// the metrics.
    pub(crate) fn moved(&self, pool: &str, ns: Option<&str>, n: u64) {
        if n == 0 {
            return;
        }
        self.set(pool, |s| s.jobs_moved += n);
        metrics::counter!("sundial_mover_jobs_total", "pool" => pool.to_owned()).increment(n);
        if let Some(ns) = ns {
            *self
                .lock()
                .namespaces
                .entry((pool.to_owned(), ns.to_owned()))
                .or_default() += n;
            metrics::counter!("sundial_namespace_moved_jobs_total", "pool" => pool.to_owned(), "namespace" => ns.to_owned()).increment(n);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}
