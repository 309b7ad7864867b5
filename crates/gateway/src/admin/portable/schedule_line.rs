//! A namespace's schedules in its export: one line each, before its jobs,
//! as `PUT /api/{ns}/{queue}/schedules/{name}` takes them, and stored again
//! by an import, paused (a schedule imported into another installation
//! would otherwise fire there as well as where it came from: resume it
//! once the old one is stopped).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sundial_core::job::check_queue;
use sundial_router::{
    admin::schedules::{Put, PutError, ScheduleId},
    schedule::spec::check_name,
};

use crate::{
    api::{answers::schedules::ScheduleSpec, schedules::MAX_TEMPLATE_BODY_BYTES},
    state::AppState,
};

/// A schedule's line in an export. It starts with its `schedule` field,
/// which is how an import tells it from a job's line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleLine {
    /// Its name.
    pub(crate) schedule: String,
    pub(crate) queue: String,
    /// Its definition, as `PUT` takes it.
    pub(crate) spec: ScheduleSpec,
    /// Whether it was paused when exported.
    #[serde(default)]
    pub(crate) paused: bool,
}

/// Whether line `text` is a schedule's (it starts as an export writes one).
pub(super) fn is_schedule(text: &[u8]) -> bool {
    text.starts_with(b"{\"schedule\"")
}

/// The lines of `ns`'s schedules under `pool`'s tokens, by queue and name.
pub(super) fn lines(state: &AppState, pool: &str, ns: &str) -> Bytes {
    let mut out = Vec::new();
    state.admin.schedules().for_each(|id, def| {
        if id.pool != pool || id.ns != ns {
            return;
        }
        let line = ScheduleLine {
            schedule: id.name.to_owned(),
            queue: id.queue.to_owned(),
            spec: ScheduleSpec::of(def),
            paused: def.paused,
        };
        if serde_json::to_writer(&mut out, &line).is_ok() {
            out.push(b'\n');
        }
    });
    Bytes::from(out)
}

/// Stores the schedule of line `text` in `ns` under `pool`'s tokens,
/// paused (over one of the same name too), its job's body at most 64 KiB
/// as a `PUT` takes it (the namespace's quota is not applied: an operator
/// imports); `Ok(true)` when it is new. The inner error says why the line
/// is not one (400). An interval counts from the import unless its spec
/// gives a start.
pub(super) async fn import(
    state: &AppState,
    pool: &str,
    ns: &str,
    text: &[u8],
    now_ms: u64,
) -> Result<Result<bool, String>, PutError> {
    let line: ScheduleLine = match serde_json::from_slice(text) {
        Ok(l) => l,
        Err(e) => return Ok(Err(format!("invalid schedule: {e}"))),
    };
    if let Err(e) = check_queue(&line.queue) {
        return Ok(Err(e.to_string()));
    }
    if let Err(e) = check_name(&line.schedule) {
        return Ok(Err(e.to_string()));
    }
    let job = &line.spec.job;
    let ttl = job.ttl.unwrap_or(state.limits.default_ttl_secs);
    let tries = job.tries.unwrap_or(state.limits.default_tries);
    let mut def = line.spec.definition(ttl, tries);
    if def.job.body().len() > MAX_TEMPLATE_BODY_BYTES {
        return Ok(Err("a schedule's job body is over 64 KiB".to_owned()));
    }
    def.paused = true;
    let id = ScheduleId {
        pool,
        ns,
        queue: &line.queue,
        name: &line.schedule,
    };
    let schedules = state.admin.schedules();
    match schedules.put(id, &def, now_ms).await {
        Ok(Put::Created(_)) => Ok(Ok(true)),
        // One of the same name keeps its pause as a change does: paused
        // here too.
        Ok(_) => schedules
            .set_paused(id, true, now_ms)
            .await
            .map(|_| Ok(false)),
        Err(PutError::Spec(e)) => Ok(Err(e.to_string())),
        Err(e) => Err(e),
    }
}
