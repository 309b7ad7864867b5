//! `sundial quota …`: a namespace's quota (admin API).

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Map, Value};

use crate::{
    client::{Client, Failure, Listener, Outcome, exit, seg},
    paths::pool_query,
    table,
};

#[derive(Debug, Subcommand)]
pub enum QuotaCmd {
    /// What a namespace is held to, what it sets, and its pool's quota.
    Get {
        /// The namespace (a tenant).
        namespace: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
    /// Set some of a namespace's bounds (the others stay as they are; 0
    /// lifts a bound its pool sets), in one change that another made at the
    /// same time does not undo.
    Set {
        /// The namespace (a tenant).
        namespace: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
        #[command(flatten)]
        bounds: Bounds,
    },
    /// Remove what a namespace sets: its pool's quota holds again.
    Clear {
        /// The namespace (a tenant).
        namespace: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
}

/// The bounds `quota set` can give, each left as it is when not given.
#[derive(Debug, Args)]
pub struct Bounds {
    /// Jobs held, in every state (the backlog).
    #[arg(long)]
    max_jobs: Option<u64>,
    /// Bytes held by those jobs (ids and records, bodies included).
    #[arg(long)]
    max_bytes: Option<u64>,
    /// Queues published to.
    #[arg(long)]
    max_queues: Option<u64>,
    /// Schedules held (1,000 unless set; 0: no bound).
    #[arg(long)]
    max_schedules: Option<u64>,
    /// Jobs published per second (a bulk counts each job).
    #[arg(long)]
    publish_rate: Option<u64>,
    /// Jobs consumed per second.
    #[arg(long)]
    consume_rate: Option<u64>,
    /// Bytes of one job's body.
    #[arg(long)]
    max_body: Option<u64>,
    /// Seconds of one job's delay.
    #[arg(long)]
    max_delay: Option<u64>,
    /// Seconds of one job's TTL.
    #[arg(long)]
    max_ttl: Option<u64>,
    /// Tries of one job.
    #[arg(long)]
    max_tries: Option<u64>,
    /// The namespace's share of a busy Redis server's calls against the
    /// other namespaces', and of a nearly full shard's memory (1 unless
    /// set; at most 1000).
    #[arg(long)]
    weight: Option<u64>,
    /// A bound the namespace no longer sets (its pool's holds again), by
    /// name, e.g. `--unset max_jobs`; may be given more than once.
    #[arg(
        long,
        value_name = "BOUND",
        value_parser = clap::builder::PossibleValuesParser::new(BOUND_NAMES)
    )]
    unset: Vec<String>,
}

/// The bounds' names, as `--unset` takes them.
const BOUND_NAMES: [&str; 11] = [
    "max_jobs",
    "max_bytes",
    "max_queues",
    "max_schedules",
    "publish_rate",
    "consume_rate",
    "max_body",
    "max_delay",
    "max_ttl",
    "max_tries",
    "weight",
];

impl Bounds {
    /// The change asked: each bound given with its value, each unset one
    /// with `null`.
    fn patch(&self) -> Result<Map<String, Value>, Failure> {
        let mut out: Map<String, Value> = self
            .given()
            .into_iter()
            .map(|(name, v)| (name.to_owned(), v.into()))
            .collect();
        for name in &self.unset {
            if out.contains_key(name) {
                return Err(Failure::new(
                    exit::USAGE,
                    format!(
                        "--{} and --unset {name} ask for opposite things: give one",
                        name.replace('_', "-")
                    ),
                ));
            }
            out.insert(name.clone(), Value::Null);
        }
        Ok(out)
    }

    /// (name, value) of each bound given.
    fn given(&self) -> Vec<(&'static str, u64)> {
        let values = [
            self.max_jobs,
            self.max_bytes,
            self.max_queues,
            self.max_schedules,
            self.publish_rate,
            self.consume_rate,
            self.max_body,
            self.max_delay,
            self.max_ttl,
            self.max_tries,
            self.weight,
        ];
        BOUND_NAMES
            .into_iter()
            .zip(values)
            .filter_map(|(name, v)| Some((name, v?)))
            .collect()
    }
}

fn path(ns: &str, pool: Option<&String>) -> String {
    format!("/namespaces/{}/quota{}", seg(ns), pool_query(pool))
}

pub(crate) async fn run(c: Client, cmd: QuotaCmd) -> Outcome {
    let answer = match cmd {
        QuotaCmd::Get { namespace, pool } => c.admin_get(&path(&namespace, pool.as_ref())).await?,
        QuotaCmd::Set {
            namespace,
            pool,
            bounds,
        } => {
            let path = path(&namespace, pool.as_ref());
            let patch = bounds.patch()?;
            if patch.is_empty() {
                return Err(Failure::new(
                    exit::USAGE,
                    "give at least one bound (`sundial quota set --help`)",
                ));
            }
            // The gateway applies it over what the namespace sets then.
            let body = Value::Object(patch);
            c.call(Listener::Admin, Method::PATCH, &path, Some(body))
                .await?
                .json
        }
        QuotaCmd::Clear { namespace, pool } => {
            let path = path(&namespace, pool.as_ref());
            c.call(Listener::Admin, Method::DELETE, &path, None)
                .await?
                .json
        }
    };
    c.show(&answer, print);
    Ok(())
}

/// A row per bound: what holds, what the namespace sets, the pool's.
fn print(answer: &Value) {
    let rows: Vec<Vec<String>> = answer["quota"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, held)| {
            vec![
                name.clone(),
                table::cell(held),
                table::cell(&answer["set"][name]),
                table::cell(&answer["pool_quota"][name]),
            ]
        })
        .collect();
    println!(
        "namespace {} in pool {} (- : no bound, a weight of 1; 0 set: the pool's bound lifted)",
        table::cell(&answer["namespace"]),
        table::cell(&answer["pool"])
    );
    table::print(&["BOUND", "HELD TO", "SET", "POOL"], &rows);
}
