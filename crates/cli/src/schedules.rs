//! `sundial schedule set|list|show|delete|pause|resume`: a queue's
//! schedules over the job API, with a tenant's token (`--token` or
//! `SUNDIAL_TOKEN`: scope `manage` to change them, `read` to list them).

use base64::Engine as _;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Map, Value, json};

use crate::{
    client::{Client, Failure, JSON, Listener, Outcome, exit, seg},
    jobs::read_body,
    table,
};

#[derive(Debug, Subcommand)]
pub enum ScheduleCmd {
    /// Create or change a schedule: a cron expression (--cron, in --tz) or
    /// an interval (--every), and the job each fire publishes. Prints its
    /// next fires.
    Set(Box<Set>),
    /// A queue's schedules, with their next and last fire.
    List(Queue),
    /// One schedule, in full.
    Show(Named),
    /// Delete a schedule (the jobs it published stay).
    Delete(Named),
    /// Pause a schedule: it fires nothing until resumed.
    Pause(Named),
    /// Resume a schedule: it fires from its next time after now.
    Resume(Named),
}

#[derive(Debug, Args)]
pub struct Queue {
    /// The namespace (a tenant).
    namespace: String,
    /// The queue.
    queue: String,
}

#[derive(Debug, Args)]
pub struct Named {
    #[command(flatten)]
    queue: Queue,
    /// The schedule's name.
    name: String,
}

#[derive(Debug, Args)]
pub struct Set {
    #[command(flatten)]
    schedule: Named,
    /// The job's body; `-` (or nothing) reads it from stdin.
    body: Option<String>,
    /// A cron expression, 5 fields or 6 (seconds first), quoted.
    #[arg(long, conflicts_with = "every", required_unless_present = "every")]
    cron: Option<String>,
    /// With --cron: an IANA time zone (default UTC).
    #[arg(long, requires = "cron")]
    tz: Option<String>,
    /// Seconds between fires.
    #[arg(long)]
    every: Option<u64>,
    /// No fire before this time (Unix ms).
    #[arg(long)]
    start_ms: Option<u64>,
    /// No fire after this time (Unix ms).
    #[arg(long)]
    end_ms: Option<u64>,
    /// Each fire waits a random 0 to this many ms.
    #[arg(long)]
    jitter_ms: Option<u64>,
    /// Fires missed in an outage: skip, once (default), or catch-up=N.
    #[arg(long)]
    missed: Option<String>,
    /// How late a fire may be and still fire (ms; default 60000).
    #[arg(long)]
    grace_ms: Option<u64>,
    /// The job's TTL in seconds (0: forever).
    #[arg(long)]
    ttl: Option<u64>,
    /// The job's tries.
    #[arg(long)]
    tries: Option<u64>,
    /// The job's priority, 0 to 255.
    #[arg(long, value_parser = clap::value_parser!(u8))]
    priority: Option<u8>,
    /// An attribute of the job, `key=value` (repeatable).
    #[arg(long = "attr", value_name = "KEY=VALUE")]
    attrs: Vec<String>,
    /// An idempotency key for the job: a fire while the key names a job
    /// (until it is done, or for --dedup-ttl) publishes nothing.
    #[arg(long)]
    dedup: Option<String>,
    /// With --dedup: seconds the key holds after each publish.
    #[arg(long, requires = "dedup")]
    dedup_ttl: Option<u64>,
}

pub(crate) async fn run(c: Client, cmd: ScheduleCmd) -> Outcome {
    match cmd {
        ScheduleCmd::Set(s) => set(&c, *s).await,
        ScheduleCmd::List(q) => {
            let path = format!("{}/schedules", queue_path(&q));
            let r = c.call(Listener::Api, Method::GET, &path, None).await?;
            c.show(&r.json, print_list);
            Ok(())
        }
        ScheduleCmd::Show(n) => {
            let r = c.call(Listener::Api, Method::GET, &path(&n), None).await?;
            c.show(&r.json, print_one);
            Ok(())
        }
        ScheduleCmd::Delete(n) => {
            c.call(Listener::Api, Method::DELETE, &path(&n), None)
                .await?;
            if !c.global.json {
                println!("deleted schedule {}", n.name);
            }
            Ok(())
        }
        ScheduleCmd::Pause(n) => change(&c, &n, "pause").await,
        ScheduleCmd::Resume(n) => change(&c, &n, "resume").await,
    }
}

fn queue_path(q: &Queue) -> String {
    format!("/api/{}/{}", seg(&q.namespace), seg(&q.queue))
}

fn path(n: &Named) -> String {
    format!("{}/schedules/{}", queue_path(&n.queue), seg(&n.name))
}

async fn change(c: &Client, n: &Named, what: &str) -> Outcome {
    let path = format!("{}/{what}", path(n));
    let r = c.call(Listener::Api, Method::POST, &path, None).await?;
    c.show(&r.json, print_one);
    Ok(())
}

async fn set(c: &Client, s: Set) -> Outcome {
    let body = read_body(s.body.as_deref())?;
    let spec = spec(&s, &body)?;
    let r = c
        .call_raw(
            Listener::Api,
            Method::PUT,
            &path(&s.schedule),
            Some((spec.to_string().into_bytes(), JSON)),
            None,
        )
        .await?;
    c.show(&r.json, print_one);
    Ok(())
}

/// The PUT's body for `s`, its job's body `body`.
fn spec(s: &Set, body: &[u8]) -> Outcome<Value> {
    let mut out = Map::new();
    out.insert("job".into(), job(s, body)?.into());
    for (k, v) in [("cron", s.cron.clone()), ("tz", s.tz.clone())] {
        if let Some(v) = v {
            out.insert(k.into(), v.into());
        }
    }
    for (k, v) in [
        ("every", s.every),
        ("start_ms", s.start_ms),
        ("end_ms", s.end_ms),
        ("jitter_ms", s.jitter_ms),
        ("grace_ms", s.grace_ms),
    ] {
        if let Some(v) = v {
            out.insert(k.into(), v.into());
        }
    }
    if let Some(m) = &s.missed {
        out.insert("missed".into(), missed(m)?);
    }
    Ok(out.into())
}

/// The job of `s`, its body `body`.
fn job(s: &Set, body: &[u8]) -> Outcome<Map<String, Value>> {
    let mut job = Map::new();
    let data = base64::engine::general_purpose::STANDARD.encode(body);
    job.insert("data".into(), data.into());
    let numbers = [
        ("ttl", s.ttl),
        ("tries", s.tries),
        ("priority", s.priority.map(u64::from)),
        ("dedup_ttl", s.dedup_ttl),
    ];
    for (k, v) in numbers {
        if let Some(v) = v {
            job.insert(k.into(), v.into());
        }
    }
    let mut attrs = Map::new();
    for a in &s.attrs {
        let (k, v) = a
            .split_once('=')
            .ok_or_else(|| Failure::new(exit::USAGE, format!("--attr {a:?}: give KEY=VALUE")))?;
        attrs.insert(k.into(), v.into());
    }
    if !attrs.is_empty() {
        job.insert("attributes".into(), attrs.into());
    }
    if let Some(key) = &s.dedup {
        job.insert("dedup".into(), key.as_str().into());
    }
    Ok(job)
}

/// `--missed`: `skip`, `once` or `catch-up=N`, as the API takes it.
fn missed(m: &str) -> Outcome<Value> {
    match m {
        "skip" | "once" => Ok(json!(m)),
        other => match other
            .strip_prefix("catch-up=")
            .and_then(|n| n.parse::<u64>().ok())
        {
            Some(n) => Ok(json!({ "catch_up": n })),
            None => Err(Failure::new(
                exit::USAGE,
                format!("--missed {m:?}: skip, once or catch-up=N"),
            )),
        },
    }
}

/// When a schedule fires: its cron expression and zone, or its interval.
fn when(s: &Value) -> String {
    match (s["cron"].as_str(), s["every"].as_u64()) {
        (Some(cron), _) => format!("{cron} ({})", s["tz"].as_str().unwrap_or("UTC")),
        (None, Some(every)) => format!("every {every} s"),
        _ => "-".to_owned(),
    }
}

fn print_list(r: &Value) {
    let rows: Vec<Vec<String>> = r["schedules"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|s| {
            vec![
                table::cell(&s["name"]),
                when(s),
                if s["paused"] == true {
                    "paused"
                } else {
                    "active"
                }
                .to_owned(),
                table::time(&s["next_ms"][0]),
                table::time(&s["last"]["at_ms"]),
                table::cell(&s["fired"]),
                table::cell(&s["missed_fires"]),
            ]
        })
        .collect();
    table::print(
        &[
            "NAME",
            "WHEN",
            "STATE",
            "NEXT (UTC)",
            "LAST (UTC)",
            "FIRED",
            "MISSED",
        ],
        &rows,
    );
}

fn print_one(s: &Value) {
    println!(
        "schedule {}/{}/{}",
        table::cell(&s["namespace"]),
        table::cell(&s["queue"]),
        table::cell(&s["name"])
    );
    println!("  when:    {}", when(s));
    println!(
        "  state:   {}",
        if s["paused"] == true {
            "paused"
        } else {
            "active"
        }
    );
    println!(
        "  missed:  {} (grace {} ms, jitter {} ms)",
        s["missed"],
        table::cell(&s["grace_ms"]),
        table::cell(&s["jitter_ms"])
    );
    let next: Vec<String> = s["next_ms"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(table::time)
        .collect();
    println!(
        "  next:    {}",
        if next.is_empty() {
            "-".to_owned()
        } else {
            next.join(", ")
        }
    );
    println!(
        "  last:    {} (job {})",
        table::time(&s["last"]["at_ms"]),
        table::cell(&s["last"]["job_id"])
    );
    println!(
        "  fired:   {}, missed {}",
        table::cell(&s["fired"]),
        table::cell(&s["missed_fires"])
    );
}
