//! `sundial usage [NS]`: what namespaces hold and did in a pool (admin
//! API `GET /usage`, or `GET /namespaces/{ns}/usage` for one).

use clap::Args;
use serde_json::Value;

use crate::{
    client::{Client, Global, Outcome, seg},
    paths::pool_query,
    table,
};

#[derive(Debug, Args)]
pub struct Usage {
    /// One namespace (every namespace of the pool when left out).
    namespace: Option<String>,
    /// The pool (`default` when left out).
    #[arg(long)]
    pool: Option<String>,
    #[command(flatten)]
    pub(crate) global: Global,
}

pub(crate) async fn run(c: Client, u: Usage) -> Outcome {
    let query = pool_query(u.pool.as_ref());
    let answer = match &u.namespace {
        Some(ns) => {
            c.admin_get(&format!("/namespaces/{}/usage{query}", seg(ns)))
                .await?
        }
        None => c.admin_get(&format!("/usage{query}")).await?,
    };
    c.show(&answer, print);
    Ok(())
}

/// A row per namespace; a bound after its usage when the quota sets one.
fn print(answer: &Value) {
    let lines: Vec<&Value> = match answer["namespaces"].as_array() {
        Some(all) => all.iter().collect(),
        None => vec![answer],
    };
    let of = |line: &Value, what: &str, bound: &str| {
        let used = table::cell(&line[what]);
        match line["limits"][bound].as_u64() {
            Some(max) => format!("{used}/{max}"),
            None => used,
        }
    };
    let rows: Vec<Vec<String>> = lines
        .iter()
        .map(|l| {
            let refused: u64 = l["refused"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, n)| n.as_u64())
                .sum();
            vec![
                table::cell(&l["namespace"]),
                of(l, "jobs", "max_jobs"),
                of(l, "bytes", "max_bytes"),
                of(l, "queues", "max_queues"),
                table::cell(&l["published"]),
                table::cell(&l["consumed"]),
                table::cell(&l["acked"]),
                refused.to_string(),
            ]
        })
        .collect();
    println!(
        "pool {} (used/bound where a quota sets one)",
        table::cell(&answer["pool"])
    );
    table::print(
        &[
            "NAMESPACE",
            "JOBS",
            "BYTES",
            "QUEUES",
            "PUBLISHED",
            "CONSUMED",
            "ACKED",
            "REFUSED",
        ],
        &rows,
    );
}
