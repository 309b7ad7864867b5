//! Operations on single jobs, on [`Jobs`] (`shard.jobs()`): publishing
//! (`publish`), what workers take and give back (`serve`), and a job read
//! or given back by id here. Each is one script call on one slot.

mod publish;
mod serve;

use fred::types::Value;

use super::{
    decode::{Delivery, Fields, JobView},
    keysets,
};
use crate::{EngineError, JobId, Shard, keys::SlotKeys, scripts::SCRIPTS};

pub use publish::{NewJob, Publication, Schedule};
pub use serve::{Ack, Acked, Served, Touch, Touched, Want};

/// A shard's job operations: see the module's docs.
#[derive(Clone, Copy, Debug)]
pub struct Jobs<'a>(&'a Shard);

impl Shard {
    /// Operations on single jobs: publish, serve workers, ack, release,
    /// peek by id.
    pub fn jobs(&self) -> Jobs<'_> {
        Jobs(self)
    }
}

impl Jobs<'_> {
    /// Gives a reserved job back (its consumer went away before it could be
    /// answered): back to the head of its queue, its try restored. Fenced on
    /// the reservation, so a job that moved on since is left alone.
    pub async fn release(self, d: &Delivery) -> Result<bool, EngineError> {
        let k = SlotKeys::new(d.slot);
        let keys = keysets::release(&k, &d.job.queue);
        let args: Vec<Value> = vec![
            d.job.id.as_str().into(),
            (d.deadline_ms as i64).into(),
            self.0.ready_channel(d.slot, &d.job.queue).into(),
            d.job.queue.as_str().into(),
        ];
        let v = self.0.conn().eval(&SCRIPTS.release, keys, args).await?;
        Ok(v.as_i64() == Some(1))
    }

    /// Reads a job by id, in any state; `None` when it does not exist in the
    /// queue or has expired.
    pub async fn peek(
        self,
        slot: u32,
        qualified: &str,
        id: &JobId,
    ) -> Result<Option<JobView>, EngineError> {
        let k = SlotKeys::new(slot);
        let v = self
            .0
            .conn()
            .eval(
                &SCRIPTS.peek_job,
                keysets::peek_job(&k),
                vec![qualified.into(), id.as_str().into()],
            )
            .await?;
        if v.is_null() {
            return Ok(None);
        }
        Fields::new(self.0.conn(), v)?.view().map(Some)
    }
}
