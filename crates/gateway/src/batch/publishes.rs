//! Publishes in groups: the publications of one queue in one slot that
//! wait while a call for it runs share the next call.

use std::future::Future;

use sundial_core::{EngineError, KeyHit, Outcome, Publication, Shard};

use super::lines::{Lines, Op};

/// Publications, each all or nothing (see [`Outcome`]).
#[derive(Debug)]
pub struct PublishOp;

impl Op for PublishOp {
    type Item = Publication;
    type Out = Outcome;
    fn size(p: &Publication) -> usize {
        p.jobs.iter().map(|j| j.body.len()).sum()
    }
    /// Body bytes.
    const LIMIT: usize = 1024 * 1024;
    const REPLICATED: bool = true;
    fn call(
        shard: &Shard,
        slot: u32,
        qualified: &str,
        items: &[Publication],
    ) -> impl Future<Output = Result<Vec<Outcome>, EngineError>> + Send {
        shard.jobs().publish_many(slot, qualified, items)
    }
}

/// The group commit of publishes.
pub type Publishes = Lines<PublishOp>;

impl Publishes {
    /// Stores `publication` (jobs of `qualified` in `slot` on `shard`), in a
    /// call of its own or with others that wait for the same queue (its
    /// namespace's `weight`: see `super::turns`). Answers the jobs that
    /// its keys answered instead (none without keys).
    pub async fn publish(
        &self,
        shard: &Shard,
        slot: u32,
        qualified: &str,
        weight: u64,
        publication: Publication,
    ) -> Result<Vec<KeyHit>, EngineError> {
        match self
            .submit(shard, slot, qualified, weight, publication)
            .await?
        {
            Outcome::Stored(hits) => Ok(hits),
            Outcome::Exists => Err(EngineError::Exists {
                shard: shard.name().to_owned(),
            }),
        }
    }
}
