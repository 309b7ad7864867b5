//! `sundial job list|show`: a queue's jobs in any state, page by page, or
//! one by id, through the admin API (no token needed).

use base64::Engine as _;
use clap::{Subcommand, ValueEnum};
use serde_json::Value;

use crate::{
    client::{Client, Outcome, seg},
    paths::{pool_query, queue_path},
    queues::pages,
    table,
};

#[derive(Debug, Subcommand)]
pub enum JobCmd {
    /// A queue's jobs in one state: id, tries, when published, the time of
    /// its state, TTL, a body preview.
    List {
        /// The namespace (a tenant).
        namespace: String,
        /// The queue.
        queue: String,
        /// Which jobs.
        #[arg(long, value_enum, default_value_t = State::Ready)]
        state: State,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
        /// At most this many (all of them: 0).
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
    /// One job by id, in whatever state it is.
    Show {
        /// The namespace (a tenant).
        namespace: String,
        /// The queue.
        queue: String,
        /// The job's id.
        id: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
}

/// A job state, as `--state` takes it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum State {
    Ready,
    Delayed,
    Reserved,
    Dead,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Delayed => "delayed",
            Self::Reserved => "reserved",
            Self::Dead => "dead",
        }
    }

    /// The listing's field for the time of this state, and its column.
    fn time(self) -> (&'static str, &'static str) {
        match self {
            Self::Ready => ("ready_since_ms", "READY SINCE (UTC)"),
            Self::Delayed => ("due_at_ms", "DUE (UTC)"),
            Self::Reserved => ("ttr_deadline_ms", "TTR ENDS (UTC)"),
            Self::Dead => ("died_at_ms", "DIED (UTC)"),
        }
    }
}

pub(crate) async fn run(c: Client, cmd: JobCmd) -> Outcome {
    match cmd {
        JobCmd::List {
            namespace,
            queue,
            state,
            pool,
            limit,
        } => {
            let base = format!(
                "{}/jobs?state={}&preview=64&",
                queue_path(&namespace, &queue),
                state.name()
            );
            let jobs = pages(&c, &base, pool.as_ref(), "jobs", limit).await?;
            c.show(&Value::Array(jobs), |jobs| print(jobs, state));
        }
        JobCmd::Show {
            namespace,
            queue,
            id,
            pool,
        } => {
            let path = format!(
                "{}/jobs/{}{}",
                queue_path(&namespace, &queue),
                seg(&id),
                pool_query(pool.as_ref())
            );
            let job = c.admin_get(&path).await?;
            c.show(&job, show);
        }
    }
    Ok(())
}

fn body(j: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(j["body_preview"].as_str().unwrap_or_default())
        .unwrap_or_default()
}

fn print(jobs: &Value, state: State) {
    let (field, column) = state.time();
    let rows: Vec<Vec<String>> = jobs
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            vec![
                table::cell(&j["job_id"]),
                table::cell(&j["remain_tries"]),
                table::cell(&j["priority"]),
                table::time(&j["published_at_ms"]),
                table::time(&j[field]),
                table::cell(&j["ttl"]),
                table::cell(&j["body_size"]),
                table::preview(&body(j), 40),
            ]
        })
        .collect();
    let header = [
        "JOB ID",
        "TRIES",
        "PRIORITY",
        "PUBLISHED (UTC)",
        column,
        "TTL",
        "BYTES",
        "BODY",
    ];
    table::print(&header, &rows);
}

fn show(j: &Value) {
    for (label, field) in [
        ("job", "job_id"),
        ("state", "state"),
        ("tries left", "remain_tries"),
        ("priority", "priority"),
        ("published", "elapsed_ms"),
        ("ttl", "ttl"),
        ("bytes", "body_size"),
        ("attributes", "attributes"),
    ] {
        let value = match field {
            "elapsed_ms" => format!("{} ms ago", table::cell(&j[field])),
            "ttl" if j[field] == 0 => "never expires".to_owned(),
            "ttl" => format!("{} s", table::cell(&j[field])),
            _ => table::cell(&j[field]),
        };
        println!("{label:<11} {value}");
    }
    println!("{:<11} {}", "body", table::preview(&body(j), 200));
}
