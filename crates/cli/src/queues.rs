//! `sundial queue …`, and what `sundial deadletter …` shares with it
//! (admin listings page by page, queue paths, progress bars).

use std::time::Duration;

use base64::Engine as _;
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    client::{Client, Failure, Listener, Outcome, exit, seg},
    paths::{pool_query, queue_path},
    table,
};

#[derive(Debug, Subcommand)]
pub enum QueueCmd {
    /// A namespace's queues with their backlog and rates (admin API).
    List {
        /// The namespace (a tenant).
        namespace: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
    /// One queue's backlog, totals and rates (admin API).
    Stats {
        /// The namespace (a tenant).
        namespace: String,
        /// The queue.
        queue: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
    /// The job at the head of the queue (job API: needs a token).
    Peek { namespace: String, queue: String },
    /// Read, set or clear the queue's retry policy (admin API).
    #[command(subcommand)]
    Policy(crate::policies::PolicyCmd),
    /// Hold the queue's consumers: they get no job until it resumes
    /// (publishes, timers and TTRs go on); every gateway within about
    /// 0.5 s (admin API).
    Pause {
        /// The namespace (a tenant).
        namespace: String,
        /// The queue.
        queue: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
    /// Let the queue's consumers get jobs again (admin API).
    Resume {
        /// The namespace (a tenant).
        namespace: String,
        /// The queue.
        queue: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
    /// Delete the queue's ready jobs (job API: needs a token with `manage`).
    Destroy {
        /// The namespace (a tenant).
        namespace: String,
        /// The queue.
        queue: String,
        /// Yes, delete them.
        #[arg(long)]
        yes: bool,
    },
}

/// Follows an admin listing's `next_cursor` from its first page: the
/// entries under `field` of each page of `base` (a path ending in `?` or
/// `&`), at most `max` of them (0: all).
pub(crate) async fn pages(
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

/// The fields of a queue's stats, as a row shows them; 1..7 are its counts.
pub(crate) const STATS_FIELDS: [&str; 10] = [
    "queue",
    "ready",
    "delayed",
    "reserved",
    "dead",
    "published_total",
    "consumed_total",
    "publish_rate",
    "consume_rate",
    "paused",
];

fn stats_row(q: &Value) -> Vec<String> {
    STATS_FIELDS.iter().map(|f| table::cell(&q[*f])).collect()
}

pub(crate) const STATS_HEADER: [&str; 10] = [
    "QUEUE",
    "READY",
    "DELAYED",
    "RESERVED",
    "DEAD",
    "PUBLISHED",
    "CONSUMED",
    "PUBLISH/S",
    "CONSUME/S",
    "PAUSED",
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
        } => stats(&c, &namespace, &queue, pool.as_ref()).await?,
        QueueCmd::Policy(cmd) => crate::policies::run(c, cmd).await?,
        QueueCmd::Pause {
            namespace,
            queue,
            pool,
        } => crate::pauses::run(&c, &namespace, Some(&queue), pool.as_ref(), true).await?,
        QueueCmd::Resume {
            namespace,
            queue,
            pool,
        } => crate::pauses::run(&c, &namespace, Some(&queue), pool.as_ref(), false).await?,
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

/// `queue stats`: one queue's backlog and rates; a queue never seen is not
/// found.
async fn stats(c: &Client, namespace: &str, queue: &str, pool: Option<&String>) -> Outcome {
    let q = c
        .admin_get(&format!(
            "{}{}",
            queue_path(namespace, queue),
            pool_query(pool)
        ))
        .await?;
    // The API answers zeros for a queue it never saw; a name typed
    // wrong is not found here (exit 3), not a queue with nothing.
    let never = STATS_FIELDS[1..7].iter().all(|f| q[*f].as_u64() == Some(0));
    if never {
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!(
                "no queue {queue} in namespace {namespace}: it holds no job and was \
                 never published to"
            ),
        ));
    }
    c.show(&q, |q| table::print(&STATS_HEADER, &[stats_row(q)]));
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
