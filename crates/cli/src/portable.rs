//! `sundial namespace list`: a pool's namespaces; `sundial namespace
//! export|import`: a namespace's jobs as NDJSON, for backups and for moving
//! a tenant to another installation; `sundial namespace move|moving`:
//! moving it to another pool of this one.

use std::{
    fs::File,
    io::{BufRead, BufReader, Write},
};

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use crate::{
    client::{Client, Failure, JSON, Listener, Outcome, exit, seg},
    paths::pool_query,
    table,
};

/// Bytes of lines sent per import request: each request is stored before
/// the next is read, so a failure loses at most this much progress (an
/// import run again skips what is there).
const CHUNK: usize = 4 * 1024 * 1024;

#[derive(Debug, Subcommand)]
pub enum NamespaceCmd {
    /// Hold every queue's consumers of the namespace: they get no job
    /// until it resumes (admin API).
    Pause {
        /// The namespace (a tenant).
        ns: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
    /// Let the namespace's consumers get jobs again (a queue paused itself
    /// stays paused) (admin API).
    Resume {
        /// The namespace (a tenant).
        ns: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
    /// The namespaces of a pool that have a token, sorted.
    List {
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
    /// Move a namespace to another pool while its producers and workers go
    /// on: its tokens (of `--pool`) are served from the new pool, and its
    /// jobs are carried there.
    Move {
        /// The namespace (a tenant).
        ns: String,
        /// The pool to move it to.
        #[arg(long)]
        to: String,
        /// The pool of its tokens.
        #[arg(long, default_value = "default")]
        pool: String,
        /// Follow the move until it is done (exit 0), redrawing every
        /// `--every` seconds.
        #[arg(long)]
        watch: bool,
        /// Seconds between two looks, with `--watch`.
        #[arg(long, default_value_t = 2)]
        every: u64,
    },
    /// Where a namespace that moved (or moves) is served from, and how far
    /// its move has come.
    Moving {
        /// The namespace (a tenant).
        ns: String,
        /// The pool (`default` when left out).
        #[arg(long, default_value = "default")]
        pool: String,
        /// Follow the move until it is done (exit 0).
        #[arg(long)]
        watch: bool,
        /// Seconds between two looks, with `--watch`.
        #[arg(long, default_value_t = 2)]
        every: u64,
    },
    /// Write every job of a namespace as NDJSON (one job per line), to a
    /// file or to standard output.
    Export {
        /// The namespace (a tenant).
        ns: String,
        /// The pool (`default` when left out).
        #[arg(long, default_value = "default")]
        pool: String,
        /// The file to write (default: standard output).
        #[arg(long, short)]
        out: Option<String>,
    },
    /// Store the jobs of an NDJSON export in a namespace (any namespace
    /// and pool: the lines do not name them). Jobs whose id is there
    /// already are skipped, so an import may run again after a failure.
    Import {
        /// The namespace (a tenant).
        ns: String,
        /// The pool (`default` when left out).
        #[arg(long, default_value = "default")]
        pool: String,
        /// The file to read (default: standard input).
        file: Option<String>,
    },
}

/// `namespace list`: one name a line.
async fn list(c: &Client, pool: Option<&String>) -> Outcome {
    let answer = c
        .admin_get(&format!("/namespaces{}", pool_query(pool)))
        .await?;
    c.show(&answer, |a| {
        for ns in a["namespaces"].as_array().into_iter().flatten() {
            println!("{}", table::cell(ns));
        }
    });
    Ok(())
}

pub(crate) async fn run(c: Client, cmd: NamespaceCmd) -> Outcome {
    match cmd {
        NamespaceCmd::List { pool } => list(&c, pool.as_ref()).await,
        NamespaceCmd::Pause { ns, pool } => {
            crate::pauses::run(&c, &ns, None, pool.as_ref(), true).await
        }
        NamespaceCmd::Resume { ns, pool } => {
            crate::pauses::run(&c, &ns, None, pool.as_ref(), false).await
        }
        NamespaceCmd::Move {
            ns,
            to,
            pool,
            watch,
            every,
        } => {
            let path = format!("/namespaces/{}/move?pool={}", seg(&ns), seg(&pool));
            let r = c
                .call(
                    Listener::Admin,
                    Method::POST,
                    &path,
                    Some(json!({ "to": to })),
                )
                .await?;
            if watch {
                return follow(&c, &path, every).await;
            }
            c.show(&r.json, print_move);
            Ok(())
        }
        NamespaceCmd::Moving {
            ns,
            pool,
            watch,
            every,
        } => {
            let path = format!("/namespaces/{}/move?pool={}", seg(&ns), seg(&pool));
            if watch {
                return follow(&c, &path, every).await;
            }
            let v = c.admin_get(&path).await?;
            c.show(&v, print_move);
            Ok(())
        }
        NamespaceCmd::Export { ns, pool, out } => export(&c, &ns, &pool, out).await,
        NamespaceCmd::Import { ns, pool, file } => import(&c, &ns, &pool, file.as_deref()).await,
    }
}

/// `namespace export`: to the file `out`, or to standard output.
async fn export(c: &Client, ns: &str, pool: &str, out: Option<String>) -> Outcome {
    let path = format!("/namespaces/{}/export?pool={}", seg(ns), seg(pool));
    let written = match &out {
        Some(f) => {
            let mut file = File::create(f)
                .map_err(|e| Failure::new(exit::FAILED, format!("cannot create {f}: {e}")))?;
            c.admin_stream(&path, &mut file).await?
        }
        None => {
            let mut stdout = std::io::BufWriter::new(std::io::stdout());
            c.admin_stream(&path, &mut stdout).await?
        }
    };
    if let Some(f) = out {
        eprintln!("{ns}: {written} bytes written to {f}");
    }
    Ok(())
}

fn print_move(v: &serde_json::Value) {
    let s = |k: &str| crate::table::cell(&v[k]);
    let left = if v["jobs_left"].is_null() {
        String::new()
    } else {
        format!(", {} job(s) left in {}", s("jobs_left"), s("from"))
    };
    println!(
        "{} (tokens of pool {}): {} from {} to {}{left}; {} moved by this gateway",
        s("namespace"),
        s("pool"),
        s("state"),
        s("from"),
        s("to"),
        s("jobs_moved"),
    );
}

/// Prints the move every `every` seconds until it is done.
async fn follow(c: &Client, path: &str, every: u64) -> Outcome {
    loop {
        let v = c.admin_get(path).await?;
        c.show(&v, print_move);
        if v["state"] == "moved" {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_secs(every.max(1))).await;
    }
}

async fn import(c: &Client, ns: &str, pool: &str, file: Option<&str>) -> Outcome {
    let input: Box<dyn BufRead + Send> = match file {
        Some(f) if f != "-" => {
            Box::new(BufReader::new(File::open(f).map_err(|e| {
                Failure::new(exit::FAILED, format!("cannot open {f}: {e}"))
            })?))
        }
        _ => Box::new(BufReader::new(std::io::stdin())),
    };
    let path = format!("/namespaces/{}/import?pool={}", seg(ns), seg(pool));
    let (mut imported, mut existing, mut schedules) = (0u64, 0u64, 0u64);
    let mut chunk: Vec<u8> = Vec::new();
    // The input line the chunk starts at, to name a bad line as the
    // input numbers it.
    let (mut first, mut next) = (1u64, 1u64);
    let mut lines = input.split(b'\n');
    loop {
        let line = lines
            .next()
            .transpose()
            .map_err(|e| Failure::new(exit::FAILED, format!("cannot read the input: {e}")))?;
        let end = line.is_none();
        if let Some(mut l) = line {
            l.push(b'\n');
            chunk.extend_from_slice(&l);
            next += 1;
        }
        if chunk.len() >= CHUNK || (end && !chunk.is_empty()) {
            let sent = std::mem::take(&mut chunk);
            let r = c
                .call_raw(
                    Listener::Admin,
                    Method::POST,
                    &path,
                    Some((sent, JSON)),
                    None,
                )
                .await
                .map_err(|f| renumber(f, first, imported, existing))?;
            imported += r.json["imported"].as_u64().unwrap_or(0);
            existing += r.json["existing"].as_u64().unwrap_or(0);
            schedules += r.json["schedules"].as_u64().unwrap_or(0);
            first = next;
        }
        if end {
            break;
        }
    }
    let out = json!({ "pool": pool, "namespace": ns, "imported": imported, "existing": existing,
        "schedules": schedules });
    c.show(&out, print_import);
    let _ = std::io::stdout().flush();
    Ok(())
}

/// What an import stored.
fn print_import(out: &serde_json::Value) {
    let ns = table::cell(&out["namespace"]);
    let (imported, existing) = (&out["imported"], &out["existing"]);
    println!("{ns}: {imported} job(s) imported, {existing} there already");
    let schedules = out["schedules"].as_u64().unwrap_or(0);
    if schedules > 0 {
        println!(
            "{ns}: {schedules} schedule(s) imported, paused: resume each once it should fire \
             here (sundial schedule resume)"
        );
    }
}

/// A failure of the chunk that starts at input line `first`: its `line N`
/// made the input's, and what earlier chunks stored said.
fn renumber(f: Failure, first: u64, imported: u64, existing: u64) -> Failure {
    let message = match f
        .message
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(':'))
        .and_then(|(n, rest)| Some((n.parse::<u64>().ok()?, rest)))
    {
        Some((n, rest)) => format!("line {}:{rest}", first + n - 1),
        None => f.message,
    };
    Failure::new(
        f.code,
        format!("{message}; before this request: {imported} imported, {existing} there already"),
    )
}
