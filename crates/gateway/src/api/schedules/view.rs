//! A schedule as the job API and the admin API answer it (its definition,
//! its next fires, and what its slot counts of it), and what both do to
//! change one: pause or resume it, and reload the gateway's copy.

use sundial_core::{FireState, keys};
use sundial_router::{
    admin::schedules::ScheduleId,
    schedule::{ScheduleDef, placed},
};

use sundial_router::Pool;

use crate::{
    api::{
        answers::schedules::{JobSpec, LastFire, ScheduleAnswer},
        error::ApiError,
    },
    state::AppState,
};

/// The next fires an answer shows.
const NEXT_SHOWN: usize = 5;

/// The answer for schedule `id`, as `def` holds it, with its slot's
/// `fires` when read.
pub(crate) fn answer(
    id: ScheduleId<'_>,
    def: &ScheduleDef,
    fires: Option<FireState>,
) -> ScheduleAnswer {
    let now = crate::api::queue::unix_ms();
    let next_ms = match def.recurrence() {
        Ok(when) if !def.paused => when.fires_after(now).take(NEXT_SHOWN).collect(),
        _ => Vec::new(),
    };
    ScheduleAnswer {
        namespace: id.ns.to_owned(),
        queue: id.queue.to_owned(),
        name: id.name.to_owned(),
        cron: def.cron.clone(),
        tz: def.tz.clone(),
        every: def.every,
        start_ms: def.start_ms,
        end_ms: def.end_ms,
        jitter_ms: def.jitter_ms,
        missed: def.missed.into(),
        grace_ms: def.grace_ms,
        paused: def.paused,
        job: JobSpec::of(&def.job),
        rev: def.rev,
        created_ms: def.created_ms,
        updated_ms: def.updated_ms,
        next_ms,
        fired: fires.as_ref().map(|f| f.fired),
        missed_fires: fires.as_ref().map(|f| f.missed),
        last: fires.and_then(|f| f.last).map(|l| LastFire {
            at_ms: l.at_ms,
            published_ms: l.published_ms,
            job_id: l.id,
        }),
    }
}

/// Schedule `id`'s fire state in its slot in `pool` (where its namespace
/// writes), if the slot holds it (of its current revision or an older
/// one); `def` is its definition, whose job's key may place it.
pub(crate) async fn fires(
    pool: &Pool,
    id: ScheduleId<'_>,
    def: &ScheduleDef,
) -> Result<Option<FireState>, ApiError> {
    let at = (id.name, def.job.dedup.as_deref());
    let slot = placed::slot_of(id.ns, id.queue, at, pool.slots(), pool.lanes());
    let Some(Some(shard)) = pool.placed(pool.write_layout(), slot) else {
        return Ok(None);
    };
    let member = keys::schedule_member(id.ns, id.queue, id.name);
    Ok(shard.fires().state(slot, &member).await?)
}

/// Reloads this gateway's copy of the tables after a change, so that its
/// answer and its next reads show it; a failure is logged, not answered:
/// the change is made, and the copy catches up at its next poll.
pub(crate) async fn reload(state: &AppState) {
    if let Err(e) = state.admin.reload().await {
        tracing::warn!(error = %e, "schedule changed; this gateway's copy catches up at its next poll");
    }
}

/// Pauses or resumes schedule `id` (whose slot is in `data`, the pool its
/// namespace writes to), and answers it as it is now.
pub(crate) async fn set_paused(
    state: &AppState,
    id: ScheduleId<'_>,
    data: &Pool,
    paused: bool,
) -> Result<ScheduleAnswer, ApiError> {
    let schedules = state.admin.schedules();
    let changed = schedules
        .set_paused(id, paused, crate::api::queue::unix_ms())
        .await?
        .ok_or(ApiError::NotFound("schedule not found"))?;
    if changed {
        reload(state).await;
        let what = if paused { "paused" } else { "resumed" };
        let (pool, ns, queue, name) = (id.pool, id.ns, id.queue, id.name);
        tracing::info!(pool, ns, queue, name, "schedule {what}");
    }
    let def = schedules
        .get(id)
        .ok_or(ApiError::NotFound("schedule not found"))?;
    Ok(answer(id, &def, fires(data, id, &def).await?))
}
