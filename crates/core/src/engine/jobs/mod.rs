//! Operations on single jobs, on [`Jobs`] (`shard.jobs()`): publishing
//! (`publish`), what workers take, hold and ack (`serve`), a job given
//! back (`release`), and a job read by id here. Each is one script call on
//! one slot.

mod dedup;
mod publish;
mod release;
mod serve;

use super::{
    decode::{Fields, JobView},
    keysets,
};
use crate::{EngineError, JobId, Shard, keys::SlotKeys, scripts::SCRIPTS};

pub use dedup::{
    BadKey, KeyHit, KeyMode, Keys, MAX_KEY_BYTES, MAX_KEY_WINDOW_SECS, Outcome, check_key, key_lane,
};
pub use publish::{NewJob, PackedPolicy, Publication, Schedule};
pub use release::{Release, Released};
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
