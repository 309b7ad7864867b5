//! What a shard keeps of Sundial's once it left every pool, and its
//! removal (`sundial wipe-shard`).
//!
//! A shard that held slots keeps, once its jobs are gone, a bounded set of
//! keys: per slot it held, the queue table (`q`) and the running counters
//! (`c`), which outlive the jobs on purpose (a queue's totals and rates);
//! maybe a pump lease (`lease`, which expires); and the shard's own
//! `sd:meta` (format, slot and lane counts, layout pins), `sd:pumps` (pump
//! processes) and `sd:views` (gateway views, each `sd:view:*` expiring on
//! its own). Job records, timers, and ready and dead lists are gone with
//! the last job (Redis deletes an empty hash, list or sorted set). A
//! delayed job deleted before it was due leaves its id in the wheel list of
//! its second (`w:<second>`, indexed in `s`) until the pump reaches that
//! second, which never comes once the shard left. So at most 3 keys per
//! slot plus 3, and one list per second in which a delayed job was deleted
//! early, whatever the number of queues.

use fred::prelude::*;

use crate::{EngineError, Shard, keys};

/// What [`Shard::wipe`] found and removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wiped {
    /// The slot count the shard's `sd:meta` gave (or the most a pool may
    /// have, when it gave none).
    pub slots: u32,
    /// Keys removed.
    pub keys: u64,
}

/// The most slots a pool may have: swept when a shard no longer says.
const ALL_SLOTS: u32 = 16_384;

impl Shard {
    /// Removes every key of Sundial's from a shard that left its pool,
    /// after checking that it is not an admin Redis (it holds no token
    /// table), that it holds no job, that no live gateway announces
    /// a view in it (a gateway whose config still lists it) and that no
    /// live pump process runs on it. Refuses with the reason otherwise,
    /// having removed nothing.
    pub async fn wipe(&self) -> Result<Wiped, EngineError> {
        // The admin tables are not a shard's: a Redis that holds them is an
        // admin Redis (or the default pool's first shard, which holds them
        // when no `admin_redis` is set), and stays one.
        let tokens = self.admin_keys().table(keys::AdminTable::Tokens);
        let admin: bool = self
            .idempotent(tokens, |c| async move { c.exists(tokens).await })
            .await?;
        if admin {
            return Err(self.refuse(format!(
                "it holds the token table ({tokens}): it is an admin Redis; move the tables \
                 (admin_redis) before wiping it"
            )));
        }
        let slots = self.pinned_slots().await?.unwrap_or(ALL_SLOTS);
        let all: Vec<u32> = (0..slots).collect();
        let jobs: u64 = self.slot_jobs(&all).await?.iter().sum();
        if jobs > 0 {
            return Err(self.refuse(format!(
                "it still holds {jobs} job(s): it has not drained (GET /drains), or it is \
                 still in a pool"
            )));
        }
        let views = self.live_view_sets().await?;
        if !views.is_empty() {
            return Err(self.refuse(format!(
                "{} live gateway(s) still list it in their config (their views here expire \
                 within a minute of a reload without it)",
                views.len()
            )));
        }
        let pumps = self.pump_processes().await?;
        if let Some(p) = pumps.iter().find(|p| p.live) {
            return Err(self.refuse(format!(
                "pump process {} still runs on it (its heartbeat lapses after pump.lease_ttl_ms \
                 once its config no longer lists the shard)",
                p.id
            )));
        }
        let mut removed = 0u64;
        // Wheel lists outlive a delayed job deleted before its second: its
        // id stays listed until the pump reaches that second, which never
        // comes on a shard that left. The slot's wheel index names them.
        for slot in &all {
            let k = keys::SlotKeys::new(*slot);
            let index = k.wheel_index();
            let seconds: Vec<u64> = self
                .idempotent(&index, |c| {
                    let index = &index;
                    async move { c.zrange(index, 0, -1, None, false, None, false).await }
                })
                .await?;
            for second in seconds {
                let wheel = k.wheel(second);
                let n: u64 = self
                    .idempotent(&wheel, |c| {
                        let wheel = &wheel;
                        async move { c.del(wheel).await }
                    })
                    .await?;
                removed += n;
            }
        }
        for key in [
            keys::SlotKeys::counters,
            keys::SlotKeys::queues,
            keys::SlotKeys::lease,
            keys::SlotKeys::wheel_index,
            keys::SlotKeys::timer,
            keys::SlotKeys::jobs,
        ] {
            let n: Vec<u64> = self.per_slot("DEL", &all, key).await?;
            removed += n.iter().sum::<u64>();
        }
        for key in [keys::META, keys::PUMPS, keys::VIEWS] {
            let n: u64 = self
                .idempotent(key, |c| async move { c.del(key).await })
                .await?;
            removed += n;
        }
        Ok(Wiped {
            slots,
            keys: removed,
        })
    }

    /// The slot count this shard's `sd:meta` pins, if any.
    async fn pinned_slots(&self) -> Result<Option<u32>, EngineError> {
        self.idempotent(keys::META, |c| async move {
            c.hget(keys::META, keys::META_SLOTS).await
        })
        .await
    }

    fn refuse(&self, why: String) -> EngineError {
        EngineError::Unsafe {
            shard: self.name().to_owned(),
            what: format!("not wiped: {why}"),
        }
    }
}
