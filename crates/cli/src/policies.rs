//! `sundial queue policy …`: a queue's retry policy (admin API).

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Map, Value};

use crate::{
    client::{Client, Failure, Listener, Outcome, exit},
    paths::{pool_query, queue_path},
    table,
};

#[derive(Debug, Subcommand)]
pub enum PolicyCmd {
    /// The queue's retry policy (`{}`: none, lmstfy's retries).
    Get {
        /// The namespace (a tenant).
        namespace: String,
        /// The queue.
        queue: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
    /// Replace the queue's retry policy with the fields given; in force on
    /// every gateway within about 0.5 s, for jobs published from then on.
    Set {
        /// The namespace (a tenant).
        namespace: String,
        /// The queue.
        queue: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
        #[command(flatten)]
        fields: Fields,
    },
    /// Remove the queue's retry policy: later jobs are retried at once.
    Clear {
        /// The namespace (a tenant).
        namespace: String,
        /// The queue.
        queue: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
}

/// The policy's fields, as `policy set` takes them (docs/API.md).
#[derive(Debug, Args)]
pub struct Fields {
    /// How the delay before a retry grows: `fixed` or `exponential`.
    #[arg(long, value_parser = ["fixed", "exponential"])]
    backoff: Option<String>,
    /// The delay before the first retry, ms (needed with --backoff).
    #[arg(long)]
    initial_delay_ms: Option<u64>,
    /// Exponential: the factor from one delay to the next, 1 to 10 (default 2).
    #[arg(long)]
    multiplier: Option<f64>,
    /// Exponential: the longest delay, ms (default an hour).
    #[arg(long)]
    max_delay_ms: Option<u64>,
    /// Each delay moved by up to this share of it, at random (0 to 100).
    #[arg(long)]
    jitter_percent: Option<u8>,
    /// Tries of a job whose publish gives none.
    #[arg(long)]
    tries: Option<u16>,
    /// How long after its publish a job may still be retried, ms.
    #[arg(long)]
    max_retry_ms: Option<u64>,
}

impl Fields {
    /// The policy's JSON: the fields given.
    fn body(&self) -> Value {
        let mut out = Map::new();
        let mut put = |name: &str, v: Option<Value>| {
            if let Some(v) = v {
                out.insert(name.to_owned(), v);
            }
        };
        put("backoff", self.backoff.clone().map(Value::from));
        put("initial_delay_ms", self.initial_delay_ms.map(Value::from));
        put("multiplier", self.multiplier.map(Value::from));
        put("max_delay_ms", self.max_delay_ms.map(Value::from));
        put("jitter_percent", self.jitter_percent.map(Value::from));
        put("tries", self.tries.map(Value::from));
        put("max_retry_ms", self.max_retry_ms.map(Value::from));
        Value::Object(out)
    }
}

fn path(ns: &str, queue: &str, pool: Option<&String>) -> String {
    format!("{}/policy{}", queue_path(ns, queue), pool_query(pool))
}

pub(crate) async fn run(c: Client, cmd: PolicyCmd) -> Outcome {
    let answer = match cmd {
        PolicyCmd::Get {
            namespace,
            queue,
            pool,
        } => {
            c.admin_get(&path(&namespace, &queue, pool.as_ref()))
                .await?
        }
        PolicyCmd::Set {
            namespace,
            queue,
            pool,
            fields,
        } => {
            let body = fields.body();
            if body.as_object().is_some_and(Map::is_empty) {
                return Err(Failure::new(
                    exit::USAGE,
                    "give at least one field (`sundial queue policy set --help`), or use \
                     `policy clear`",
                ));
            }
            let path = path(&namespace, &queue, pool.as_ref());
            c.call(Listener::Admin, Method::PUT, &path, Some(body))
                .await?
                .json
        }
        PolicyCmd::Clear {
            namespace,
            queue,
            pool,
        } => {
            let path = path(&namespace, &queue, pool.as_ref());
            c.call(Listener::Admin, Method::DELETE, &path, None)
                .await?
                .json
        }
    };
    c.show(&answer, print);
    Ok(())
}

/// A row per field set.
fn print(answer: &Value) {
    println!(
        "queue {}/{} in pool {}",
        table::cell(&answer["namespace"]),
        table::cell(&answer["queue"]),
        table::cell(&answer["pool"])
    );
    let rows: Vec<Vec<String>> = answer["policy"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, v)| vec![name.clone(), table::cell(v)])
        .collect();
    if rows.is_empty() {
        println!("no retry policy: a failed job is ready again at once");
    } else {
        table::print(&["FIELD", "VALUE"], &rows);
    }
}
