//! Acks and consumes in groups (`Workers`), and the jobs reserved for a
//! consumer (`Reserved`), given back if the consumer goes away before it
//! has them.

use sundial_core::{Ack, Acked, Delivery, EngineError, Shard, Touch, Touched, Want};

use super::lines::{Lines, Op};

/// Jobs reserved for one consumer: what a consume call answers it, and
/// what a pass has gathered so far. If they are dropped before they are
/// handed over (the client hung up while its call ran, or while a later slot
/// was asked), they are given back rather than left reserved for nobody
/// until their TTR.
#[derive(Debug, Default)]
pub struct Reserved {
    jobs: Vec<(Shard, Delivery)>,
}

impl Reserved {
    /// Adds jobs reserved for the same consumer.
    pub fn append(&mut self, mut other: Reserved) {
        self.jobs.append(&mut other.jobs);
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// The jobs, now the client's.
    pub fn answered(mut self) -> Vec<Delivery> {
        std::mem::take(&mut self.jobs)
            .into_iter()
            .map(|(_, d)| d)
            .collect()
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if self.jobs.is_empty() {
            return;
        }
        let jobs = std::mem::take(&mut self.jobs);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                // Each release goes back to the head of its queue: the last
                // first, so that the oldest is served first again.
                for (shard, d) in jobs.into_iter().rev() {
                    release(&shard, &d).await;
                }
            });
        }
    }
}

/// Gives back a job reserved for a client that went away.
async fn release(shard: &Shard, d: &Delivery) {
    match shard.jobs().give_back(d).await {
        Ok(_) => tracing::debug!(job_id = d.job.id, "consumer went away; job released"),
        Err(e) => {
            tracing::warn!(job_id = d.job.id, error = %e, "consumer went away; release failed, the job returns after its TTR")
        }
    }
}

/// What a worker asks of a queue: an ack, or jobs.
#[derive(Debug)]
pub enum Work {
    /// Delete a job: in whatever state it is, or fenced on a delivery.
    Ack(Ack),
    /// Extend a reserved job's hold.
    Touch(Touch),
    /// Reserve jobs.
    Take(Want),
}

/// What a [`Work`] is answered.
#[derive(Debug)]
pub enum Done {
    /// How the ack ended there.
    Acked(Acked),
    /// How the touch ended there.
    Touched(Touched),
    /// The jobs reserved for the consumer.
    Taken(Reserved),
}

/// Acks and consumes, in groups. A worker acks one job and asks for the
/// next, so the two arrive together: the acks and consumes of a queue that
/// ask a slot while a call for it runs share the next call, which makes
/// the acks first and then serves the consumers in arrival order. Under a
/// load that starts a second call, order holds within each call: an ack
/// and a consume from different requests that overlapped may run in
/// either order.
#[derive(Debug)]
pub struct WorkOp;

/// The group commit of acks and consumes.
pub type Workers = Lines<WorkOp>;

impl Op for WorkOp {
    type Item = Work;
    type Out = Done;
    fn size(w: &Work) -> usize {
        match w {
            Work::Ack(_) | Work::Touch(_) => 0,
            Work::Take(want) => want.count as usize,
        }
    }
    /// Jobs taken: as many as one request may ask for. Bodies may be up to
    /// 1 MiB each, and a call holds the records it takes in Redis's Lua
    /// memory until it returns, so a call takes no more than one request
    /// could on its own.
    const LIMIT: usize = 100;
    /// A worker brings two operations (its ack and its next consume), so
    /// 16 is the same load as 8 publishes. In alternated bench rounds
    /// (consume + ack, 32 workers) 16 beat both 8 (which made 0.22 calls
    /// per job instead of 0.15, and cost Redis more per job) and no
    /// second call at all.
    const SECOND_CALL_AT: usize = 16;
    async fn call(
        shard: &Shard,
        slot: u32,
        qualified: &str,
        items: &[Work],
    ) -> Result<Vec<Done>, EngineError> {
        let mut acks = Vec::new();
        let mut touches = Vec::new();
        let mut wants = Vec::new();
        for w in items {
            match w {
                Work::Ack(ack) => acks.push(ack.clone()),
                Work::Touch(touch) => touches.push(touch.clone()),
                Work::Take(want) => wants.push(*want),
            }
        }
        let served = shard
            .jobs()
            .serve(slot, qualified, &acks, &touches, &wants)
            .await?;
        let mut acked = served.acked.into_iter();
        let mut touched = served.touched.into_iter();
        let mut taken = served.taken.into_iter();
        // `serve` answers each ack and want, in order, or fails.
        items
            .iter()
            .map(|w| match w {
                Work::Ack(_) => acked.next().map(Done::Acked),
                Work::Touch(_) => touched.next().map(Done::Touched),
                Work::Take(_) => taken.next().map(|jobs| {
                    Done::Taken(Reserved {
                        jobs: jobs.into_iter().map(|d| (shard.clone(), d)).collect(),
                    })
                }),
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| mismatch(shard))
    }
}

/// An answer of the wrong kind or count: a defect, reported as a bad reply.
fn mismatch(shard: &Shard) -> EngineError {
    EngineError::Reply {
        shard: shard.name().to_owned(),
        what: "a worker call answered out of step with what it was asked".to_owned(),
    }
}

impl Workers {
    /// Acks a job of `qualified` in `slot` on `shard`, in a call of its
    /// own or with other acks and consumes of the same queue.
    pub async fn ack(
        &self,
        shard: &Shard,
        slot: u32,
        qualified: &str,
        weight: u64,
        ack: Ack,
    ) -> Result<Acked, EngineError> {
        match self
            .submit(shard, slot, qualified, weight, Work::Ack(ack))
            .await?
        {
            Done::Acked(how) => Ok(how),
            _ => Err(mismatch(shard)),
        }
    }

    /// Touches a job of `qualified` in `slot` on `shard`, in a call of its
    /// own or with other acks, touches and consumes of the same queue.
    pub async fn touch(
        &self,
        shard: &Shard,
        slot: u32,
        qualified: &str,
        weight: u64,
        touch: Touch,
    ) -> Result<Touched, EngineError> {
        match self
            .submit(shard, slot, qualified, weight, Work::Touch(touch))
            .await?
        {
            Done::Touched(how) => Ok(how),
            _ => Err(mismatch(shard)),
        }
    }

    /// Reserves jobs of `qualified` in `slot` on `shard` for one consumer,
    /// in a call of its own or with other acks and consumes of the same
    /// queue.
    pub async fn consume(
        &self,
        shard: &Shard,
        slot: u32,
        qualified: &str,
        weight: u64,
        want: Want,
    ) -> Result<Reserved, EngineError> {
        match self
            .submit(shard, slot, qualified, weight, Work::Take(want))
            .await?
        {
            Done::Taken(jobs) => Ok(jobs),
            _ => Err(mismatch(shard)),
        }
    }
}
