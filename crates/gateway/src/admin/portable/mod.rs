//! A namespace's jobs as NDJSON, for backups and for moving tenants between
//! installations: `GET /namespaces/{ns}/export` streams one line per job,
//! `POST /namespaces/{ns}/import` stores the lines of its body.
//!
//! A line (one JSON object; times in ms, relative to when it was read):
//!
//! ```text
//! {"queue":"q","job_id":"01…","state":"delayed","remain_tries":3,"delivered":false,
//!  "elapsed_ms":1200,"ttl_ms":86399000,"delay_ms":3598800,"attributes":null,"data":"aGk="}
//! ```
//!
//! `state` is `delayed` (with `delay_ms`, until due), `ready`, `reserved`
//! (with `ttr_ms`, until its TTR runs out) or `dead` (with `dead_for_ms`
//! when known); `ttl_ms` is 0 for a job that never expires; `data` is the
//! body in base64. The namespace is the route's, so an export may be
//! imported under another name or pool.
//!
//! Both stream with bounded memory: the export walks the namespace's slots
//! a page at a time (a few hundred jobs), each page one read-only script;
//! the import reads its body line by line and stores each slot's jobs in
//! batches, each batch one script. An import skips a job whose id exists
//! (so it may be run again after a failure, or over an export that holds a
//! job twice, as one taken while jobs change state may).
//!
//! The namespace's schedules come first, a line each
//! (`schedule_line.rs`: `{"schedule","queue","spec","paused"}`, the spec as
//! `PUT /api/{ns}/{queue}/schedules/{name}` takes it); an import stores
//! them paused.
//!
//! `line.rs` holds a job's line and its checks, `places.rs` where a
//! namespace's jobs are, `export.rs` and `import.rs` the two routes.

pub(super) mod export;
pub(super) mod import;
pub(crate) mod line;
mod places;
mod schedule_line;
