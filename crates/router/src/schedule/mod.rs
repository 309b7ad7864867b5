//! Schedules (issue 33): jobs that a queue publishes by itself, on a cron
//! expression in a time zone or at a fixed interval.
//!
//! - [`recurrence`]: when a schedule fires, as instants (Unix ms): the
//!   next fire after a time, and the latest fires in a span, within the
//!   schedule's optional start and end.
//! - [`missed`]: what a schedule does with the fires it missed while
//!   nothing could fire them (skip them, fire once, or catch up a few).
//! - [`spec`]: a schedule's definition as the schedule table holds it
//!   (when, its window, jitter, grace and missed-fire policy, and the job
//!   it publishes), checked, and revised over the row before it.
//! - [`placed`]: a schedule as its slot holds it, for the fire script.
//! - [`plan`]: the fires the pumps plan ahead from a slot's state: the
//!   missed fires a policy keeps, then the next ones, with their jitter.
//!
//! Every calendar and daylight-saving decision is made here, in Rust, by
//! the `croner` crate over `jiff`'s time zones, with the time zone
//! database built into the binary, so that every gateway (which checks and
//! previews a schedule) and every pump (which fires it) computes the same
//! instants whatever image it runs on. The slot's scripts only ever see
//! instants. Nothing here speaks HTTP or Redis.

pub mod missed;
pub mod placed;
pub mod plan;
pub mod recurrence;
pub mod spec;

pub use missed::Missed;
pub use placed::fire_def;
pub use plan::{Planned, Timing, plan};
pub use recurrence::{Recurrence, RecurrenceError};
pub use spec::{JobTemplate, ScheduleDef, SpecError};
