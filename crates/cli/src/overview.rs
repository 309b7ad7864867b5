//! `sundial stats`: every namespace's queues at a glance, with their
//! backlog and rates (admin API: the namespace list, then each namespace's
//! queue listing, page by page).

use clap::Args;
use serde_json::Value;

use crate::{
    client::{Client, Global, Outcome, seg},
    paths::pool_query,
    queues::{STATS_FIELDS, STATS_HEADER, pages},
    table,
};

#[derive(Debug, Args)]
pub struct Stats {
    /// The pool (`default` when left out).
    #[arg(long)]
    pool: Option<String>,
    /// Only queues that hold jobs in some state (ready, delayed, reserved
    /// or dead).
    #[arg(long)]
    busy: bool,
    #[command(flatten)]
    pub(crate) global: Global,
}

/// Whether a queue's listing entry shows a job in some state.
fn holds_jobs(q: &Value) -> bool {
    ["ready", "delayed", "reserved", "dead"]
        .iter()
        .any(|s| q[*s].as_u64().is_some_and(|n| n > 0))
}

pub(crate) async fn run(c: Client, s: Stats) -> Outcome {
    let list = c
        .admin_get(&format!("/namespaces{}", pool_query(s.pool.as_ref())))
        .await?;
    let mut all = Vec::new();
    for ns in list["namespaces"].as_array().into_iter().flatten() {
        let Some(ns) = ns.as_str() else { continue };
        let base = format!("/namespaces/{}/queues?", seg(ns));
        for mut q in pages(&c, &base, s.pool.as_ref(), "queues", 0).await? {
            if s.busy && !holds_jobs(&q) {
                continue;
            }
            q["namespace"] = Value::from(ns);
            all.push(q);
        }
    }
    c.show(&Value::Array(all), print);
    Ok(())
}

fn print(all: &Value) {
    let header: Vec<&str> = std::iter::once("NAMESPACE").chain(STATS_HEADER).collect();
    let rows: Vec<Vec<String>> = all
        .as_array()
        .into_iter()
        .flatten()
        .map(|q| {
            std::iter::once(table::cell(&q["namespace"]))
                .chain(STATS_FIELDS.iter().map(|f| table::cell(&q[*f])))
                .collect()
        })
        .collect();
    table::print(&header, &rows);
}
