//! `sundial publish` and `sundial consume`: the job API by hand, for
//! debugging a queue (workers use a client library; see `examples/`).

use std::{io::Read as _, time::Duration};

use clap::Args;
use reqwest::Method;
use serde_json::Value;

use crate::{
    client::{Client, Failure, Global, JSON, Listener, Outcome, exit, seg},
    queues::print_job,
    table,
};

#[derive(Debug, Args)]
pub struct Publish {
    /// The namespace (a tenant).
    namespace: String,
    /// The queue.
    queue: String,
    /// The body; `-` (or nothing) reads it from stdin.
    body: Option<String>,
    /// Seconds before it is ready.
    #[arg(long, default_value_t = 0)]
    delay: u64,
    /// Seconds it lives (0: forever).
    #[arg(long)]
    ttl: Option<u64>,
    /// Deliveries before it goes to the dead letter.
    #[arg(long)]
    tries: Option<u64>,
    /// Its priority, 0 to 255: of the queue's ready jobs, the highest is
    /// consumed first.
    #[arg(long, value_parser = clap::value_parser!(u8))]
    priority: Option<u8>,
    /// An idempotency key: a later publish with it in the queue stores
    /// nothing and answers this job's id (printed with "duplicate"),
    /// while this job exists.
    #[arg(long)]
    key: Option<String>,
    /// With --key: the key holds this many seconds after this publish,
    /// however the job ended.
    #[arg(long, requires = "key", conflicts_with = "debounce")]
    dedup_ttl: Option<u64>,
    /// With --key: while the job with the key waits (delayed, never
    /// delivered), this publish replaces its body and schedule.
    #[arg(long, requires = "key")]
    debounce: bool,
    #[command(flatten)]
    pub(crate) global: Global,
}

#[derive(Debug, Args)]
pub struct Consume {
    /// The namespace (a tenant).
    namespace: String,
    /// One queue, or several comma-separated.
    queue: String,
    /// Seconds to wait for a job (0: answer at once).
    #[arg(long, default_value_t = 0)]
    timeout: u64,
    /// Seconds the worker has before the job is delivered again.
    #[arg(long)]
    ttr: Option<u64>,
    /// Up to this many jobs (one queue only).
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Acknowledge (delete) each job once printed. With --json, each job is
    /// one line of JSON.
    #[arg(long)]
    ack: bool,
    #[command(flatten)]
    pub(crate) global: Global,
}

fn query(pairs: &[(&str, Option<u64>)]) -> String {
    let q: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| Some(format!("{k}={}", (*v)?)))
        .collect();
    if q.is_empty() {
        String::new()
    } else {
        format!("?{}", q.join("&"))
    }
}

/// A job's body given on the command line, or read from stdin when it
/// is `-` or left out.
pub(crate) fn read_body(given: Option<&str>) -> Outcome<Vec<u8>> {
    match given {
        Some(b) if b != "-" => Ok(b.as_bytes().to_vec()),
        _ => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).map_err(|e| {
                Failure::new(
                    exit::FAILED,
                    format!("cannot read the body from stdin: {e}"),
                )
            })?;
            Ok(buf)
        }
    }
}

pub(crate) async fn publish(c: Client, p: Publish) -> Outcome {
    let body = read_body(p.body.as_deref())?;
    let mut path = format!(
        "/api/{}/{}{}",
        seg(&p.namespace),
        seg(&p.queue),
        query(&[
            ("delay", Some(p.delay)),
            ("ttl", p.ttl),
            ("tries", p.tries),
            ("priority", p.priority.map(u64::from)),
            ("dedup_ttl", p.dedup_ttl)
        ])
    );
    if let Some(key) = &p.key {
        path.push_str(&format!("&dedup={}", seg(key)));
        if p.debounce {
            path.push_str("&dedup_mode=debounce");
        }
    }
    let r = c
        .call_raw(Listener::Api, Method::PUT, &path, Some((body, JSON)), None)
        .await?;
    c.show(&r.json, |r| {
        let how = if r["duplicate"] == true {
            " (duplicate: nothing stored)"
        } else if r["replaced"] == true {
            " (replaced the waiting job)"
        } else {
            ""
        };
        println!("{}{how}", table::cell(&r["job_id"]));
    });
    Ok(())
}

pub(crate) async fn consume(c: Client, p: Consume) -> Outcome {
    let path = format!(
        "/api/{}/{}{}",
        seg(&p.namespace),
        p.queue.split(',').map(seg).collect::<Vec<_>>().join(","),
        query(&[
            ("timeout", Some(p.timeout)),
            ("ttr", p.ttr),
            ("count", (p.count > 1).then_some(p.count)),
        ])
    );
    let r = c
        .call_raw(
            Listener::Api,
            Method::GET,
            &path,
            None,
            Some(Duration::from_secs(p.timeout)),
        )
        .await
        .map_err(|f| match f.code {
            exit::NOT_FOUND if f.message.starts_with("no job available") => {
                Failure::new(exit::NOT_FOUND, "no job available")
            }
            _ => f,
        })?;
    // One job is an object, several an array (lmstfy's shapes).
    let jobs: Vec<Value> = match &r.json {
        Value::Array(a) => a.clone(),
        one => vec![one.clone()],
    };
    // Every job is printed before any is acknowledged, so that a failed
    // ack loses nothing that was not shown; a failed ack does not stop the
    // others.
    for (i, job) in jobs.iter().enumerate() {
        if c.global.json {
            println!("{}", serde_json::to_string(job).unwrap_or_default());
        } else {
            if i > 0 {
                println!();
            }
            print_job(job);
        }
    }
    if !p.ack {
        left_reserved(jobs.len());
        return Ok(());
    }
    ack_all(&c, &p, &jobs).await
}

/// Acknowledges every job of a consume, each tried whatever became of
/// the others; fails with how many stay reserved.
async fn ack_all(c: &Client, p: &Consume, jobs: &[Value]) -> Outcome {
    let (mut failed, mut first) = (0, None);
    for job in jobs {
        let queue = job["queue"].as_str().unwrap_or(&p.queue);
        let id = job["job_id"].as_str().unwrap_or_default();
        let path = format!("/api/{}/{}/job/{}", seg(&p.namespace), seg(queue), seg(id));
        if let Err(f) = c.call(Listener::Api, Method::DELETE, &path, None).await {
            failed += 1;
            first.get_or_insert((id.to_owned(), f));
        }
    }
    match first {
        None => Ok(()),
        Some((id, f)) => Err(Failure::new(
            f.code,
            format!(
                "{failed} of {} job(s) were not acknowledged and stay reserved until their \
                 TTR (first: {id}: {})",
                jobs.len(),
                f.message
            ),
        )),
    }
}

/// Says on stderr (a script reading stdout sees only the jobs) that a
/// consume without `--ack` left `n` jobs reserved.
fn left_reserved(n: usize) {
    if n > 0 {
        eprintln!(
            "sundial: {n} job(s) left reserved, a try spent: each comes back after its TTR \
             (or goes to the dead letter on its last try); --ack deletes them once printed"
        );
    }
}
