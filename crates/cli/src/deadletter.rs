//! `sundial deadletter …`: a queue's dead jobs, listed, respawned or
//! deleted through the admin API.

use base64::Engine as _;
use clap::{ArgGroup, Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    client::{Client, Failure, Listener, Outcome, exit},
    paths::{pool_query, queue_path},
    queues::{bar, pages},
    table,
};

#[derive(Debug, Subcommand)]
pub enum DeadCmd {
    /// The dead jobs, oldest first: id, priority, when it died, why, a
    /// body preview.
    List {
        /// The namespace (a tenant).
        namespace: String,
        /// The queue.
        queue: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
        /// At most this many (all of them: 0).
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
    /// Move dead jobs back to ready, each with one try.
    Respawn {
        #[command(flatten)]
        which: Which,
        /// Their new TTL in seconds (0: never expire; default: the gateway's).
        #[arg(long)]
        ttl: Option<u64>,
    },
    /// Delete dead jobs.
    Delete {
        #[command(flatten)]
        which: Which,
        /// Yes, delete them (needed with --all).
        #[arg(long)]
        yes: bool,
    },
}

/// Which dead jobs a respawn or delete takes.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("jobs").required(true).args(["ids", "all"])))]
pub struct Which {
    /// The namespace (a tenant).
    namespace: String,
    /// The queue.
    queue: String,
    /// The pool (`default` when left out).
    #[arg(long)]
    pool: Option<String>,
    /// These job ids (comma-separated).
    #[arg(long, value_delimiter = ',')]
    ids: Vec<String>,
    /// Every dead job of the queue.
    #[arg(long)]
    all: bool,
}

pub(crate) async fn run_dead(c: Client, cmd: DeadCmd) -> Outcome {
    match cmd {
        DeadCmd::List {
            namespace,
            queue,
            pool,
            limit,
        } => {
            let base = format!("{}/deadletter?preview=64&", queue_path(&namespace, &queue));
            let jobs = pages(&c, &base, pool.as_ref(), "jobs", limit).await?;
            c.show(&Value::Array(jobs), print_dead);
        }
        DeadCmd::Respawn { which, ttl } => {
            let extra = ttl.map(|t| ("ttl", json!(t)));
            change(&c, &which, "respawn", "respawned", extra).await?;
        }
        DeadCmd::Delete { which, yes } => {
            if which.all && !yes {
                return Err(Failure::new(
                    exit::USAGE,
                    format!(
                        "this deletes every dead job of {}/{}; add --yes to go ahead",
                        which.namespace, which.queue
                    ),
                ));
            }
            change(&c, &which, "delete", "deleted", None).await?;
        }
    }
    Ok(())
}

/// The dead jobs as a table, a body preview each.
fn print_dead(jobs: &Value) {
    let rows: Vec<Vec<String>> = jobs
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            let preview = base64::engine::general_purpose::STANDARD
                .decode(j["body_preview"].as_str().unwrap_or_default())
                .unwrap_or_default();
            vec![
                table::cell(&j["job_id"]),
                table::cell(&j["priority"]),
                table::time(&j["published_at_ms"]),
                table::time(&j["died_at_ms"]),
                table::cell(&j["ttl"]),
                table::cell(&j["delivery"]),
                reason(&j["reason"]),
                table::cell(&j["body_size"]),
                table::preview(&preview, 40),
            ]
        })
        .collect();
    table::print(
        &[
            "JOB ID",
            "PRIORITY",
            "PUBLISHED (UTC)",
            "DIED (UTC)",
            "TTL",
            "DELIVERIES",
            "REASON",
            "BYTES",
            "BODY",
        ],
        &rows,
    );
}

/// A dead job's last failure, cut to fit a column; `-` when none was
/// recorded.
fn reason(v: &Value) -> String {
    match v.as_str() {
        Some(r) if !r.is_empty() => table::preview(r.as_bytes(), 40),
        _ => "-".to_owned(),
    }
}

/// How many jobs one respawn or delete call takes with `--all`.
const BATCH: u64 = 1000;

/// Respawns or deletes the chosen dead jobs: the named ids in calls of at
/// most [`BATCH`], or all of them batch by batch with a progress bar.
async fn change(
    c: &Client,
    which: &Which,
    op: &str,
    done_field: &str,
    extra: Option<(&str, Value)>,
) -> Outcome {
    let change = Change {
        c,
        path: format!(
            "{}/deadletter/{op}{}",
            queue_path(&which.namespace, &which.queue),
            pool_query(which.pool.as_ref())
        ),
        done_field,
        extra,
    };
    let (done, not_found, left) = if which.all {
        let (done, left) = change.all(which, op).await?;
        (done, Vec::new(), left)
    } else {
        change.ids(&which.ids).await?
    };
    let out = json!({ done_field: done, "not_found": not_found, "deadletter_size": left });
    c.show(&out, |_| {
        println!(
            "{done_field} {done} dead jobs; {} left in the dead letter",
            table::cell(&left)
        );
        if !not_found.is_empty() {
            println!(
                "not dead jobs of {}/{}: {}",
                which.namespace,
                which.queue,
                table::cell(&Value::Array(not_found.clone()))
            );
        }
    });
    if !not_found.is_empty() && done == 0 {
        return Err(Failure::new(
            exit::NOT_FOUND,
            "none of those ids is a dead job of the queue",
        ));
    }
    Ok(())
}

/// One respawn or delete, call by call.
struct Change<'a> {
    c: &'a Client,
    path: String,
    /// Where an answer says how many it took (`respawned`, `deleted`).
    done_field: &'a str,
    /// A field every call's body carries besides the jobs (a respawn's TTL).
    extra: Option<(&'a str, Value)>,
}

impl Change<'_> {
    /// One call with `body` (and the extra field); its answer.
    async fn call(&self, mut body: Value) -> Outcome<Value> {
        if let Some((k, v)) = &self.extra {
            body[*k] = v.clone();
        }
        self.c
            .call(Listener::Admin, Method::POST, &self.path, Some(body))
            .await
            .map(|r| r.json)
    }

    /// The whole dead letter, [`BATCH`] at a time with a progress bar: how
    /// many were taken, and the dead letter's size after.
    async fn all(&self, which: &Which, op: &str) -> Outcome<(u64, Value)> {
        let stats = self
            .c
            .admin_get(&format!(
                "{}{}",
                queue_path(&which.namespace, &which.queue),
                pool_query(which.pool.as_ref())
            ))
            .await?;
        let total = stats["dead"].as_u64().unwrap_or(0);
        let bar = bar(total, op);
        let mut done = 0u64;
        let left = loop {
            let r = self.call(json!({ "all": true, "limit": BATCH })).await?;
            let n = r[self.done_field].as_u64().unwrap_or(0);
            done += n;
            bar.inc(n);
            let left = r["deadletter_size"].clone();
            // Done when a call finds nothing more, the dead letter is
            // empty, or as many as it held at the start were taken: jobs
            // that die meanwhile (a respawned job that fails again) would
            // otherwise keep this going for ever.
            if n == 0 || left.as_u64() == Some(0) || done >= total {
                break left;
            }
        };
        bar.finish_and_clear();
        Ok((done, left))
    }

    /// The named ids, in calls of at most [`BATCH`]: how many were taken,
    /// the ids that were not dead jobs of the queue, and the dead letter's
    /// size after.
    async fn ids(&self, ids: &[String]) -> Outcome<(u64, Vec<Value>, Value)> {
        let (mut done, mut not_found, mut left) = (0u64, Vec::new(), Value::Null);
        for chunk in ids.chunks(BATCH as usize) {
            let r = self.call(json!({ "ids": chunk })).await?;
            done += r[self.done_field].as_u64().unwrap_or(0);
            not_found.extend(r["not_found"].as_array().cloned().unwrap_or_default());
            left = r["deadletter_size"].clone();
        }
        Ok((done, not_found, left))
    }
}
