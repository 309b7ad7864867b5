//! Sundial's end-to-end tests: the real binary, real `redis-server`
//! processes, HTTP requests. One module per area.
//!
//! All of them are one test binary on purpose: every integration test target
//! is linked on its own, with the whole service in it, and separate targets
//! cost CI most of its time and disk in linking. Run one area with
//! `cargo test -p sundial-tests --test e2e <module>::`.

/// Runs each named scenario (an `async fn(ShardKind)`) on a standalone
/// shard and on a Redis Cluster shard, as tests `<module>::standalone::<name>`
/// and `<module>::cluster::<name>`.
macro_rules! on_every_shard_kind {
    ($($name:ident),* $(,)?) => {
        mod standalone {
            $(#[tokio::test]
            async fn $name() {
                super::$name(sundial_tests::ShardKind::Standalone).await;
            })*
        }
        mod cluster {
            $(#[tokio::test]
            async fn $name() {
                super::$name(sundial_tests::ShardKind::Cluster).await;
            })*
        }
    };
}

mod admin;
mod api;
mod attention;
mod autoscaling;
mod backlog;
mod cli;
mod cli_overview;
mod cluster;
mod config;
mod dashboard;
mod dedup;
mod deploy;
mod docs;
mod durability;
mod examples;
mod faults;
mod helm;
mod http_abuse;
mod job_listing;
mod leases;
mod lifecycle;
mod limits;
mod moves;
mod openapi;
mod operators;
mod outages;
mod pause;
mod pools;
mod portable;
mod priority;
mod probes;
mod pumpd;
mod reload;
mod retries;
mod schedule_keys;
mod schedule_quotas;
mod schedules;
mod scopes;
mod security;
mod sentinel;
mod tenants;
mod tls;
