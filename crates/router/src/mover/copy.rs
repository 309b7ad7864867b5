//! Steps 2 and 3 of a batch of a slot's move: copying the jobs read back
//! where they are bound, and letting their transit entries go (with the
//! copies of jobs acknowledged in transit). Where a job goes is
//! [`crate::placement`]'s answer.

use std::collections::HashMap;

use sundial_core::{EngineError, InTransit, Mark, Shard, Taken};

use super::task::Move;
use crate::placement::{self, Dest};

/// The copy marks a batch left at the new places: (shard, slot, ids).
pub(super) type Marks = Vec<(Shard, u32, Vec<Mark>)>;

/// Step 2: copies the jobs read back where their entries send them.
/// Returns the ids whose entries may go (copied, there already, or acked
/// in transit; not those bound to a pool this gateway does not know, which
/// stay in transit), and the marks the copies left.
pub(super) async fn copy(m: &Move, read: &Taken) -> Result<(Vec<String>, Marks), EngineError> {
    let mut by_place: HashMap<(String, u32), (&Shard, Vec<InTransit>)> = HashMap::new();
    let mut done = Vec::new();
    for j in &read.jobs {
        if j.acked {
            done.push(j.id.clone());
            continue;
        }
        let dest: Dest = j.dest.parse().unwrap_or_else(|never| match never {});
        let Some((shard, slot)) =
            placement::transit_place(&m.topology, &m.pool, m.slot, &dest, &j.queue, &j.id)
        else {
            tracing::warn!(
                pool = m.pool.name(),
                slot = m.slot,
                dest = j.dest,
                "a job in transit to a pool this gateway's config does not list stays in transit"
            );
            continue;
        };
        by_place
            .entry((shard.name().to_owned(), slot))
            .or_insert_with(|| (shard, Vec::new()))
            .1
            .push(j.clone());
    }
    let mut marks = Vec::new();
    for ((_, slot), (to, jobs)) in by_place {
        to.mover().store(slot, read.now_ms, &jobs, true).await?;
        done.extend(jobs.iter().map(|j| j.id.clone()));
        marks.push((to.clone(), slot, jobs.iter().map(InTransit::mark).collect()));
    }
    Ok((done, marks))
}

/// Step 3: lets the transit entries of a settled batch go, and deletes the
/// copies of jobs acked in transit (wherever a copy may be, see
/// [`placement::copy_places`]), then their marks. A mark bound to a pool
/// this gateway's config lacks stays, for a gateway that has it. Returns
/// how many jobs' moves it completed.
pub(super) async fn finish(m: &Move, ids: &[String]) -> Result<u64, EngineError> {
    let (went, deleted) = m.from.mover().done(m.slot, ids).await?;
    let mut forget = Vec::with_capacity(deleted.len());
    for (id, mark) in &deleted {
        let dest: Dest = mark.dest.parse().unwrap_or_else(|never| match never {});
        let Some(places) = placement::copy_places(
            &m.topology,
            &m.pool,
            m.slot,
            &m.from,
            &dest,
            &mark.queue,
            id,
        ) else {
            continue;
        };
        for (shard, slot) in places {
            shard.jobs().delete(slot, &mark.queue, id).await?;
        }
        forget.push(id.as_str().to_owned());
    }
    m.from.mover().forget(m.slot, &forget).await?;
    Ok(went)
}
