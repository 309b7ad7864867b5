//! What a shard keeps of Sundial's once it left every pool, and its
//! removal (`sundial wipe-shard`).
//!
//! A shard that held slots keeps, once its jobs are gone, a bounded set of
//! keys: per slot it held, the queue table (`q`) and the running counters
//! (`c`), which outlive the jobs on purpose (a queue's totals and rates),
//! the pump lease (`lease`, which names its last holder and does not
//! expire) and the wheel index (`s`); and the shard's own `sd:meta`
//! (format, slot and lane counts, layout pins), `sd:pumps` (pump processes)
//! and `sd:views` (gateway views, each `sd:view:*` expiring on its own).
//! Schedules (`sc`, `sn`, `f`) move with their slots, and a shard that
//! still holds one is not wiped.
//! Job records and timers are gone with the last job (Redis deletes an
//! empty hash or sorted set). Ids can outlive their job in lists: a delayed
//! job deleted before it was due stays in the wheel list of its second
//! (`w:<second>`, indexed in `s`) until the pump reaches that second, which
//! never comes once the shard left; and a job deleted from far inside a
//! long ready or dead list stays listed there (`r:<ns>/<queue>`,
//! `d:<ns>/<queue>`) until a consume or respawn reaches it. So at most 4
//! keys per slot plus 3, and those lists, whatever the number of tenants.
//! Admin tables (tokens, limits, the queue index), when this Redis also
//! holds them, are not a shard's and are kept.

use fred::{prelude::*, types::Value};

use crate::{EngineError, Shard, keys, scripts::SCRIPTS};

/// What [`Shard::wipe`] found and removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wiped {
    /// The slot count the shard's `sd:meta` gave.
    pub slots: u32,
    /// Keys removed.
    pub keys: u64,
    /// Whether the Redis holds admin tables (tokens), which were kept.
    pub admin_kept: bool,
}

impl Shard {
    /// Removes every key of Sundial's from a shard that left its pool,
    /// after checking that it holds no job, that no live gateway announces
    /// a view in it (a gateway whose config still lists it) and that no
    /// live pump process runs on it; refuses with the reason otherwise,
    /// having removed nothing. Admin tables that this Redis also holds are
    /// kept (and said so in [`Wiped::admin_kept`]).
    pub async fn wipe(&self) -> Result<Wiped, EngineError> {
        let slots = self.slot_count_to_wipe().await?;
        let all: Vec<u32> = (0..slots).collect();
        self.refuse_if_used(&all).await?;
        let mut removed = self.wipe_slots(all).await?;
        // The shard's own keys last; the admin tables (tokens, limits, the
        // queue index), if this Redis held them, are not a shard's: kept.
        for key in [keys::PUMPS, keys::VIEWS, keys::META] {
            let n: u64 = self
                .conn()
                .idempotent(key, |c| async move { c.del(key).await })
                .await?;
            removed += n;
        }
        let tokens = self.admin().keys().table(keys::AdminTable::Tokens);
        let admin_kept: bool = self
            .conn()
            .idempotent(tokens, |c| async move { c.exists(tokens).await })
            .await?;
        Ok(Wiped {
            slots,
            keys: removed,
            admin_kept,
        })
    }

    /// The slot count of a shard of this build's format: an older one
    /// keeps its jobs under other keys, and a Redis without `sd:meta` is
    /// not a shard.
    async fn slot_count_to_wipe(&self) -> Result<u32, EngineError> {
        let (format, slots) = self.meta_format_and_slots().await?;
        match format {
            Some(f) if f == keys::FORMAT || keys::OLDER_FORMATS.contains(&f) => {}
            Some(f) => {
                return Err(self.refuse(format!(
                    "it holds Sundial's data format {f}, not {}: run the build that reads it",
                    keys::FORMAT
                )));
            }
            None => return Err(self.refuse("it has no sd:meta: not a Sundial shard".into())),
        }
        slots.ok_or_else(|| self.refuse("its sd:meta names no slot count".into()))
    }

    /// Refuses a shard still in use: writers first, then jobs (as a drain
    /// retires a layout), since a gateway that still lists the shard may
    /// still write to it.
    async fn refuse_if_used(&self, all: &[u32]) -> Result<(), EngineError> {
        let views = self.layouts().live_view_sets().await?;
        if !views.is_empty() {
            return Err(self.refuse(format!(
                "{} live gateway(s) still list it in their config (a gateway withdraws its view \
                 when a reload drops the shard; a view also expires once not renewed)",
                views.len()
            )));
        }
        let pumps = self.leases().processes().await?;
        if let Some(p) = pumps.iter().find(|p| p.live) {
            return Err(self.refuse(format!(
                "pump process {} still runs on it (its heartbeat lapses after pump.lease_ttl_ms \
                 once its config no longer lists the shard)",
                p.id
            )));
        }
        let jobs: u64 = self.slots().jobs(all).await?.iter().sum();
        if jobs > 0 {
            return Err(self.refuse(format!(
                "it still holds {jobs} job(s): it has not drained (GET /drains), or it is \
                 still in a pool"
            )));
        }
        let schedules: u64 = self.slots().schedules(all).await?.iter().sum();
        if schedules > 0 {
            return Err(self.refuse(format!(
                "it still holds {schedules} schedule(s): they have not moved with their slots,                  or it is still in a pool"
            )));
        }
        Ok(())
    }

    /// Wipes each slot in one script that refuses a slot a job reached
    /// since; returns how many keys went.
    async fn wipe_slots(&self, all: Vec<u32>) -> Result<u64, EngineError> {
        let mut removed = 0u64;
        for slot in all {
            let k = keys::SlotKeys::new(slot);
            let args: Vec<Value> = vec![k.prefix().into()];
            let n = self
                .conn()
                .eval(&SCRIPTS.wipe_slot, super::keysets::wipe_slot(&k), args)
                .await?;
            match n.as_i64() {
                Some(n) if n >= 0 => removed += n as u64,
                _ => {
                    return Err(self.refuse(format!(
                        "a job or a schedule reached slot {slot} while it was wiped (a gateway \
                         or pump still \
                         uses the shard); the slots before it are wiped, sd:meta is kept: run \
                         it again once nothing uses the shard"
                    )));
                }
            }
        }
        Ok(removed)
    }

    /// The data format and slot count this shard's `sd:meta` pins.
    async fn meta_format_and_slots(&self) -> Result<(Option<u32>, Option<u32>), EngineError> {
        self.conn()
            .idempotent(keys::META, |c| async move {
                c.hmget(keys::META, vec![keys::META_FORMAT, keys::META_SLOTS])
                    .await
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
