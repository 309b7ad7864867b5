//! The Lua engine against a real Redis: every state change, checked both
//! through the engine and, with an independent client, in what Redis holds.
//! One module per scenario (`jobs`, `queues`, `dead_letter`, `timers`,
//! `shard`, `leases`, `cleanup`, `admin`, `backlog`, `moves`, `usage`, `ready_age`,
//! `listing`, `lifecycle`, `retries`, `dedup`, `priority`, `expiries`, `fires`), what they share in
//! `helpers`.
//!
//! The modules are one test binary on purpose: every integration test file
//! is linked on its own, and CI's time goes mostly to linking. Run one
//! scenario with `cargo test -p sundial-core --test engine <module>::`.

mod admin;
mod backlog;
mod cleanup;
mod dead_letter;
mod dedup;
mod expiries;
mod fires;
mod helpers;
mod jobs;
mod leases;
mod lifecycle;
mod listing;
mod moves;
mod priority;
mod queues;
mod ready_age;
mod retries;
mod shard;
mod timers;
mod usage;
