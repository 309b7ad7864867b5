//! Sundial's end-to-end tests: the real binary, real `redis-server`
//! processes, HTTP requests. One module per area.
//!
//! All of them are one test binary on purpose: every integration test target
//! is linked on its own, with the whole service in it, and separate targets
//! cost CI most of its time and disk in linking. Run one area with
//! `cargo test -p sundial-tests --test e2e <module>::`.

mod admin;
mod api;
mod backlog;
mod cluster;
mod deploy;
mod durability;
mod faults;
mod http_abuse;
mod leases;
mod limits;
mod moves;
mod outages;
mod pools;
mod pumpd;
mod reload;
mod sentinel;
