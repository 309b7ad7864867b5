//! Pump leases, on [`Leases`] (`shard.leases()`): which process may move a
//! slot's timers. A slot's lease names one owner at a time and the pump
//! script checks it (fencing), so a process whose lease passed moves
//! nothing. Leases do not expire: a process proves it is alive with a
//! heartbeat per shard ([`Leases::heartbeat`]), ranks the live processes
//! per slot, takes the slots it ranks first for ([`Leases::claim`]) and
//! hands the others it holds to the process that ranks first
//! ([`Leases::give`]).
//! So a steady process costs one heartbeat per shard per round, however
//! many slots it pumps.

use fred::{prelude::*, types::Value};

use super::keysets;
use crate::{
    EngineError, Shard,
    keys::{self, SlotKeys},
    scripts::SCRIPTS,
};

/// A shard's lease operations: see the module's docs.
#[derive(Clone, Copy, Debug)]
pub struct Leases<'a>(&'a Shard);

impl Shard {
    /// Pump leases and the pump processes' membership: heartbeat, leave,
    /// claim, give, processes, holders.
    pub fn leases(&self) -> Leases<'_> {
        Leases(self)
    }
}

/// A pump process as a shard's membership records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PumpProcess {
    /// The process's owner id (what its leases name).
    pub id: String,
    /// When its heartbeat runs out, ms on this shard's clock.
    pub expires_at_ms: u64,
    /// Whether that is still ahead (a process that stopped without leaving
    /// stays listed until the next heartbeat of another process).
    pub live: bool,
}

impl Leases<'_> {
    /// Records that `owner` is alive for `ttl_ms`, and returns the live pump
    /// processes (it included) and whether `owner` was not live before this
    /// heartbeat (its first, or one after a lapse: leases it believes it
    /// holds may have passed to others meanwhile).
    pub async fn heartbeat(
        self,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<(Vec<String>, bool), EngineError> {
        let args: Vec<Value> = vec![owner.into(), (ttl_ms.max(1) as i64).into()];
        let v = self
            .0
            .conn()
            .eval(&SCRIPTS.heartbeat, keysets::heartbeat(), args)
            .await?;
        let mut parts = match v {
            Value::Array(parts) if parts.len() == 2 => parts.into_iter(),
            other => {
                return Err(self
                    .0
                    .conn()
                    .bad_reply(format!("heartbeat answered {other:?}")));
            }
        };
        let rejoined = parts.next().and_then(|v| v.as_i64()) == Some(1);
        let live = parts
            .next()
            .map(Value::into_array)
            .unwrap_or_default()
            .into_iter()
            .filter_map(Value::into_string)
            .collect();
        Ok((live, rejoined))
    }

    /// Removes `owner` from the live pump processes (its shutdown).
    pub async fn leave(self, owner: &str) -> Result<(), EngineError> {
        let args: Vec<Value> = vec![owner.into(), 0.into()];
        self.0
            .conn()
            .eval(&SCRIPTS.heartbeat, keysets::heartbeat(), args)
            .await
            .map(drop)
    }

    /// Takes `slot`'s lease for `owner`, who ranks first for it among the
    /// live processes it knows, whoever holds it now. Returns whether the
    /// lease was taken from another holder or from nobody (`false`: it was
    /// already `owner`'s).
    pub async fn claim(self, slot: u32, owner: &str) -> Result<bool, EngineError> {
        let args: Vec<Value> = vec![owner.into(), "take".into()];
        let v = self
            .0
            .conn()
            .eval(&SCRIPTS.claim, keysets::claim(&SlotKeys::new(slot)), args)
            .await?;
        match v.as_i64() {
            Some(1) => Ok(false),
            Some(2) => Ok(true),
            _ => Err(self.0.conn().bad_reply(format!("claim answered {v:?}"))),
        }
    }

    /// Gives up `slot`'s lease if `owner` holds it: to `to` (the process
    /// that ranks first for it, so that its lease and its own view agree),
    /// or to nobody.
    pub async fn give(self, slot: u32, owner: &str, to: Option<&str>) -> Result<(), EngineError> {
        let args: Vec<Value> = vec![owner.into(), "give".into(), to.unwrap_or_default().into()];
        self.0
            .conn()
            .eval(&SCRIPTS.claim, keysets::claim(&SlotKeys::new(slot)), args)
            .await
            .map(drop)
    }

    /// The pump processes this shard's membership lists, with the shard's
    /// clock read in the same transaction to tell the live ones.
    pub async fn processes(self) -> Result<Vec<PumpProcess>, EngineError> {
        let (time, members): ((String, String), Vec<(String, f64)>) = self
            .0
            .conn()
            .idempotent(keys::PUMPS, |c| async move {
                let tx = c.multi();
                let time = fred::types::CustomCommand::new_static(
                    "TIME",
                    fred::types::ClusterHash::Random,
                    false,
                );
                let _: () = tx.custom(time, Vec::<Value>::new()).await?;
                let _: () = tx
                    .zrange(keys::PUMPS, 0, -1, None, false, None, true)
                    .await?;
                tx.exec(true).await
            })
            .await?;
        let now_ms =
            time.0.parse::<u64>().unwrap_or(0) * 1000 + time.1.parse::<u64>().unwrap_or(0) / 1000;
        Ok(members
            .into_iter()
            .map(|(id, score)| PumpProcess {
                id,
                expires_at_ms: score as u64,
                live: score as u64 > now_ms,
            })
            .collect())
    }

    /// Who holds each of `slots`' pump leases here (`None`: nobody), in the
    /// order of `slots`.
    pub async fn holders(self, slots: &[u32]) -> Result<Vec<Option<String>>, EngineError> {
        self.0.slots().per_slot("GET", slots, SlotKeys::lease).await
    }
}
