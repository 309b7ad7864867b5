//! `sundial queue …` and `sundial deadletter …`

use std::time::Duration;

use base64::Engine as _;
use clap::{ArgGroup, Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    client::{Client, Failure, Listener, Outcome, exit, seg},
    table,
};

#[derive(Debug, Subcommand)]
pub enum QueueCmd {
    /// A namespace's queues with their backlog and rates (admin API).
    List {
        namespace: String,
        #[arg(long)]
        pool: Option<String>,
    },
    /// One queue's backlog, totals and rates (admin API).
    Stats {
        namespace: String,
        queue: String,
        #[arg(long)]
        pool: Option<String>,
    },
    /// The job at the head of the queue (job API: needs a token).
    Peek { namespace: String, queue: String },
    /// Delete the queue's ready jobs (job API: needs a token with `manage`).
    Destroy {
        namespace: String,
        queue: String,
        /// Yes, delete them.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum DeadCmd {
    /// The dead jobs, oldest first: id, tries, when it died, a body preview.
    List {
        namespace: String,
        queue: String,
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
    namespace: String,
    queue: String,
    #[arg(long)]
    pool: Option<String>,
    /// These job ids (comma-separated).
    #[arg(long, value_delimiter = ',')]
    ids: Vec<String>,
    /// Every dead job of the queue.
    #[arg(long)]
    all: bool,
}

/// Follows an admin listing's `next_cursor` from its first page: the
/// entries under `field` of each page of `base` (a path ending in `?` or
/// `&`), at most `max` of them (0: all).
async fn pages(
    c: &Client,
    base: &str,
    pool: Option<&String>,
    field: &str,
    max: u64,
) -> Outcome<Vec<Value>> {
    let mut all = Vec::new();
    let mut cursor = String::new();
    while max == 0 || (all.len() as u64) < max {
        let want = if max == 0 {
            500
        } else {
            (max - all.len() as u64).min(500)
        };
        let mut path = format!("{base}limit={want}&cursor={}", seg(&cursor));
        if let Some(p) = pool {
            path.push_str(&format!("&pool={}", seg(p)));
        }
        let page = c.admin_get(&path).await?;
        all.extend(page[field].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(next) => next.clone_into(&mut cursor),
            None => break,
        }
    }
    Ok(all)
}

fn pool_query(pool: Option<&String>) -> String {
    pool.map(|p| format!("?pool={}", seg(p)))
        .unwrap_or_default()
}

fn queue_path(ns: &str, queue: &str) -> String {
    format!("/namespaces/{}/queues/{}", seg(ns), seg(queue))
}

fn stats_row(q: &Value) -> Vec<String> {
    [
        "queue",
        "ready",
        "delayed",
        "reserved",
        "dead",
        "published_total",
        "consumed_total",
        "publish_rate",
        "consume_rate",
    ]
    .iter()
    .map(|f| table::cell(&q[*f]))
    .collect()
}

const STATS_HEADER: [&str; 9] = [
    "QUEUE",
    "READY",
    "DELAYED",
    "RESERVED",
    "DEAD",
    "PUBLISHED",
    "CONSUMED",
    "PUBLISH/S",
    "CONSUME/S",
];

pub(crate) async fn run(c: Client, cmd: QueueCmd) -> Outcome {
    match cmd {
        QueueCmd::List { namespace, pool } => {
            let base = format!("/namespaces/{}/queues?", seg(&namespace));
            let all = pages(&c, &base, pool.as_ref(), "queues", 0).await?;
            c.show(&Value::Array(all), |all| {
                let rows: Vec<Vec<String>> = all
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(stats_row)
                    .collect();
                table::print(&STATS_HEADER, &rows);
            });
        }
        QueueCmd::Stats {
            namespace,
            queue,
            pool,
        } => {
            let q = c
                .admin_get(&format!(
                    "{}{}",
                    queue_path(&namespace, &queue),
                    pool_query(pool.as_ref())
                ))
                .await?;
            c.show(&q, |q| table::print(&STATS_HEADER, &[stats_row(q)]));
        }
        QueueCmd::Peek { namespace, queue } => {
            let r = c
                .call(
                    Listener::Api,
                    Method::GET,
                    &format!("/api/{}/{}/peek", seg(&namespace), seg(&queue)),
                    None,
                )
                .await?;
            c.show(&r.json, print_job);
        }
        QueueCmd::Destroy {
            namespace,
            queue,
            yes,
        } => {
            if !yes {
                return Err(Failure::new(
                    exit::USAGE,
                    format!(
                        "this deletes every ready job of {namespace}/{queue}; add --yes to go ahead"
                    ),
                ));
            }
            destroy(&c, &namespace, &queue).await?;
        }
    }
    Ok(())
}

/// Prints a job as the job API returns it (body in base64 from consume,
/// as text from peek).
pub(crate) fn print_job(j: &Value) {
    let body = j["data"].as_str().unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap_or_else(|_| body.as_bytes().to_vec());
    println!("job_id        {}", table::cell(&j["job_id"]));
    if !j["queue"].is_null() {
        println!("queue         {}", table::cell(&j["queue"]));
    }
    println!("remain_tries  {}", table::cell(&j["remain_tries"]));
    println!("ttl           {}", table::cell(&j["ttl"]));
    println!("body          {}", table::preview(&bytes, 200));
}

/// Deletes the ready jobs in one request, and shows their count fall
/// meanwhile (read through the admin API, when it can be).
async fn destroy(c: &Client, ns: &str, queue: &str) -> Outcome {
    // The token's pool (its `pool:` prefix) is the one the queue lives in.
    let pool = c
        .global
        .token
        .as_deref()
        .and_then(|t| t.split_once(':'))
        .map(|(pool, _)| pool.to_owned());
    let stats = format!("{}{}", queue_path(ns, queue), pool_query(pool.as_ref()));
    let before = c
        .admin_get(&stats)
        .await
        .ok()
        .and_then(|s| s["ready"].as_u64());
    let bar = before.map(|n| bar(n, "deleting ready jobs"));
    let target = format!("/api/{}/{}", seg(ns), seg(queue));
    let delete = c.call(Listener::Api, Method::DELETE, &target, None);
    tokio::pin!(delete);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let done = loop {
        tokio::select! {
            r = &mut delete => break r,
            _ = tick.tick() => {
                if let (Some(bar), Some(before)) = (&bar, before)
                    && let Ok(s) = c.admin_get(&stats).await
                    && let Some(ready) = s["ready"].as_u64()
                {
                    bar.set_position(before.saturating_sub(ready));
                }
            }
        }
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    done?;
    let left = c.admin_get(&stats).await.ok().map(|s| s["ready"].clone());
    let out =
        json!({ "destroyed": format!("{ns}/{queue}"), "ready_before": before, "ready_left": left });
    c.show(&out, |_| {
        println!(
            "destroyed the ready jobs of {ns}/{queue}{}",
            match before {
                Some(n) => format!(" ({n} before)"),
                None => String::new(),
            }
        );
    });
    Ok(())
}

/// A progress bar on stderr (drawn only on a terminal).
pub(crate) fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({elapsed})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
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
            c.show(&Value::Array(jobs), |jobs| {
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
                            table::time(&j["published_at_ms"]),
                            table::time(&j["died_at_ms"]),
                            table::cell(&j["ttl"]),
                            table::cell(&j["body_size"]),
                            table::preview(&preview, 40),
                        ]
                    })
                    .collect();
                table::print(
                    &[
                        "JOB ID",
                        "PUBLISHED (UTC)",
                        "DIED (UTC)",
                        "TTL",
                        "BYTES",
                        "BODY",
                    ],
                    &rows,
                );
            });
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
    let path = format!(
        "{}/deadletter/{op}{}",
        queue_path(&which.namespace, &which.queue),
        pool_query(which.pool.as_ref())
    );
    let call = |mut body: Value| {
        if let Some((k, v)) = &extra {
            body[*k] = v.clone();
        }
        let path = path.clone();
        async move {
            c.call(Listener::Admin, Method::POST, &path, Some(body))
                .await
                .map(|r| r.json)
        }
    };
    let (mut done, mut not_found, mut left) = (0u64, Vec::new(), Value::Null);
    if which.all {
        let stats = c
            .admin_get(&format!(
                "{}{}",
                queue_path(&which.namespace, &which.queue),
                pool_query(which.pool.as_ref())
            ))
            .await?;
        let total = stats["dead"].as_u64().unwrap_or(0);
        let bar = bar(total, op);
        loop {
            let r = call(json!({ "all": true, "limit": BATCH })).await?;
            let n = r[done_field].as_u64().unwrap_or(0);
            done += n;
            bar.inc(n);
            left = r["deadletter_size"].clone();
            // Done when a call finds nothing more, the dead letter is
            // empty, or as many as it held at the start were taken: jobs
            // that die meanwhile (a respawned job that fails again) would
            // otherwise keep this going for ever.
            if n == 0 || left.as_u64() == Some(0) || done >= total {
                break;
            }
        }
        bar.finish_and_clear();
    } else {
        for chunk in which.ids.chunks(BATCH as usize) {
            let r = call(json!({ "ids": chunk })).await?;
            done += r[done_field].as_u64().unwrap_or(0);
            not_found.extend(r["not_found"].as_array().cloned().unwrap_or_default());
            left = r["deadletter_size"].clone();
        }
    }
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
