//! Requests refused by namespace quotas, counted in this process and added
//! to the admin Redis's counts every second (`Admin::add_refusals`), for
//! the usage report: a refusal costs no Redis call of its own, and a
//! flood of refusals one write per namespace and quota a second.

use std::{
    collections::BTreeMap,
    sync::{Arc, LazyLock, Mutex},
    time::Duration,
};

use sundial_router::admin::AdminStore;
use tokio_util::sync::CancellationToken;

type Pending = BTreeMap<(String, String, String), u64>;
static PENDING: LazyLock<Mutex<Pending>> = LazyLock::new(Mutex::default);

/// Counts one refusal of `quota` for namespace `ns` of `pool`.
pub fn note(pool: &str, ns: &str, quota: &str) {
    let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    *p.entry((pool.to_owned(), ns.to_owned(), quota.to_owned()))
        .or_default() += 1;
}

/// Adds the refusals counted here to the admin Redis every second, until
/// `stop` (and once more then); what cannot be written is kept for the
/// next time.
pub async fn keep_flushed(admin: Arc<AdminStore>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            () = stop.cancelled() => true,
        };
        let taken = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
        let redis = admin.redis();
        let mut left = taken.into_iter();
        while let Some(((pool, ns, quota), n)) = left.next() {
            if let Err(e) = redis.admin().add_refusals(&pool, &ns, &quota, n).await {
                tracing::debug!(error = %e, "cannot count quota refusals in the admin Redis; keeping them");
                let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
                for (k, n) in std::iter::once(((pool, ns, quota), n)).chain(left) {
                    *p.entry(k).or_default() += n;
                }
                break;
            }
        }
        if last {
            return;
        }
    }
}
