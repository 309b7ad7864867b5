//! `sundial pool …` and `sundial drain …`

use std::{collections::HashMap, time::Duration};

use clap::Subcommand;
use indicatif::MultiProgress;
use serde_json::{Value, json};

use crate::{
    client::{Client, Outcome, seg},
    queues::bar,
    table,
};

#[derive(Debug, Subcommand)]
pub enum PoolCmd {
    /// Shards with their health and slots, pump processes with the leases
    /// they hold, cluster primaries, drains: of one pool, or of all.
    Status { pool: Option<String> },
}

#[derive(Debug, Subcommand)]
pub enum DrainCmd {
    /// Layouts whose moved slots still drain, with their progress.
    Status {
        /// Follow the drains until none is left (exit 0), redrawing every
        /// `--every` seconds.
        #[arg(long)]
        watch: bool,
        /// Seconds between two looks, with `--watch`.
        #[arg(long, default_value_t = 2)]
        every: u64,
    },
}

pub(crate) async fn run(c: Client, cmd: PoolCmd) -> Outcome {
    let PoolCmd::Status { pool } = cmd;
    let names: Vec<String> = match pool {
        Some(p) => vec![p],
        None => serde_json::from_value(c.admin_get("/pools").await?).unwrap_or_default(),
    };
    let mut all = Vec::new();
    for name in names {
        all.push(c.admin_get(&format!("/pools/{}", seg(&name))).await?);
    }
    c.show(&Value::Array(all.clone()), |_| {
        for (i, p) in all.iter().enumerate() {
            if i > 0 {
                println!();
            }
            print_pool(p);
        }
    });
    Ok(())
}

fn print_pool(p: &Value) {
    println!(
        "pool {}: {} slots, {} lanes, layout {}",
        table::cell(&p["pool"]),
        table::cell(&p["slots"]),
        table::cell(&p["lanes"]),
        table::cell(&p["layout"])
    );
    let shards = p["shards"].as_array().cloned().unwrap_or_default();
    let rows: Vec<Vec<String>> = shards.iter().map(shard_row).collect();
    table::print(
        &[
            "SHARD",
            "KIND",
            "WEIGHT",
            "SLOTS",
            "HELD",
            "HEALTH",
            "PING MS",
            "UNLEASED",
            "PUMPS (process=leases)",
        ],
        &rows,
    );
    print_primaries(&shards);
    match &p["draining"] {
        Value::Array(d) if d.is_empty() => println!("\nno drain"),
        Value::Array(d) => {
            println!();
            print_drains(&p["pool"], d);
        }
        other => println!("\ndrains unreadable: {}", table::cell(&other["error"])),
    }
}

/// A shard's row: its health, slots, and the pump processes that hold
/// its leases.
fn shard_row(s: &Value) -> Vec<String> {
    let h = &s["health"];
    let up = match h["up"].as_bool() {
        Some(true) => "up".to_owned(),
        Some(false) => format!("DOWN ({})", table::cell(&h["error"])),
        None => "unknown".to_owned(),
    };
    let pumps = &s["pumps"];
    let (processes, unleased) = match pumps["error"].as_str() {
        Some(e) => (format!("unreadable: {e}"), "-".to_owned()),
        None => (
            pumps["processes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    format!(
                        "{}={}{}",
                        table::cell(&p["id"]),
                        table::cell(&p["leases"]),
                        if p["live"] == true { "" } else { " (gone)" }
                    )
                })
                .collect::<Vec<_>>()
                .join(" "),
            table::cell(&pumps["unleased"]),
        ),
    };
    vec![
        table::cell(&s["name"]),
        table::cell(&s["kind"]),
        table::cell(&s["weight"]),
        table::cell(&s["slots"]),
        table::cell(&s["slots_held"]),
        up,
        h["ping_ms"]
            .as_f64()
            .map_or("-".to_owned(), |p| format!("{p:.1}")),
        unleased,
        processes,
    ]
}

/// The primaries of the shards that are Redis Clusters, if any.
fn print_primaries(shards: &[Value]) {
    let primaries: Vec<Vec<String>> = shards
        .iter()
        .flat_map(|s| {
            s["cluster_primaries"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |n| {
                    vec![
                        table::cell(&s["name"]),
                        table::cell(&n["addr"]),
                        if n["connected"] == true { "yes" } else { "NO" }.to_owned(),
                        table::cell(&n["hash_slots"]),
                        table::cell(&n["pool_slots"]),
                    ]
                })
        })
        .collect();
    if !primaries.is_empty() {
        println!();
        table::print(
            &[
                "SHARD",
                "CLUSTER PRIMARY",
                "CONNECTED",
                "HASH SLOTS",
                "POOL SLOTS",
            ],
            &primaries,
        );
    }
}

fn print_drains(pool: &Value, drains: &[Value]) {
    let rows: Vec<Vec<String>> = drains
        .iter()
        .map(|d| {
            let moved = d["slots_moved"].as_u64().unwrap_or(0);
            let pending = d["slots_pending"].as_u64().unwrap_or(0);
            vec![
                table::cell(pool),
                table::cell(&d["layout"]),
                format!("{}/{moved}", moved.saturating_sub(pending)),
                table::cell(&d["jobs_left"]),
                table::cell(&d["writers"]),
            ]
        })
        .collect();
    table::print(
        &[
            "POOL",
            "DRAINING LAYOUT",
            "SLOTS DRAINED",
            "JOBS LEFT",
            "WRITERS",
        ],
        &rows,
    );
}

/// `{"pools":[{"pool","draining":[…]}]}` → (pool, layout report) pairs.
fn drains_of(r: &Value) -> Vec<(Value, Value)> {
    r["pools"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| {
            p["draining"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|d| (p["pool"].clone(), d))
        })
        .collect()
}

pub(crate) async fn run_drain(c: Client, cmd: DrainCmd) -> Outcome {
    let DrainCmd::Status { watch, every } = cmd;
    let r = c.admin_get("/drains").await?;
    if !watch {
        let drains = drains_of(&r);
        c.show(&r, |_| {
            if drains.is_empty() {
                println!("no drain");
            }
            for (pool, d) in &drains {
                print_drains(pool, std::slice::from_ref(d));
            }
        });
        return Ok(());
    }
    watch_drains(&c, r, every).await
}

/// Follows the drains until none is left: a bar per draining layout on a
/// terminal; otherwise (and with --json) a line each time the numbers
/// change.
async fn watch_drains(c: &Client, mut r: Value, every: u64) -> Outcome {
    let bars = MultiProgress::new();
    let mut shown: HashMap<String, indicatif::ProgressBar> = HashMap::new();
    let mut last = Value::Null;
    loop {
        let drains = drains_of(&r);
        let now = json!(
            drains
                .iter()
                .map(|(p, d)| json!([p, d]))
                .collect::<Vec<_>>()
        );
        if now != last {
            if c.global.json {
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else if bars.is_hidden() {
                print_drain_lines(&drains);
            }
            last = now;
        }
        for (pool, d) in &drains {
            draw_drain(&bars, &mut shown, pool, d);
        }
        if drains.is_empty() {
            for b in shown.values() {
                b.finish_and_clear();
            }
            if !c.global.json {
                println!("no drain");
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(every.max(1))).await;
        r = c.admin_get("/drains").await?;
    }
}

/// The drains, a line each (for a log rather than a terminal).
fn print_drain_lines(drains: &[(Value, Value)]) {
    for (pool, d) in drains {
        println!(
            "pool {} layout {}: {}/{} slots drained, {} jobs left, {} writers",
            table::cell(pool),
            table::cell(&d["layout"]),
            d["slots_moved"]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(d["slots_pending"].as_u64().unwrap_or(0)),
            table::cell(&d["slots_moved"]),
            table::cell(&d["jobs_left"]),
            table::cell(&d["writers"]),
        );
    }
}

/// Brings the bar of one draining layout up to date (made on first sight).
fn draw_drain(
    bars: &MultiProgress,
    shown: &mut HashMap<String, indicatif::ProgressBar>,
    pool: &Value,
    d: &Value,
) {
    let key = format!("{}/{}", table::cell(pool), table::cell(&d["layout"]));
    let moved = d["slots_moved"].as_u64().unwrap_or(0);
    let b = shown
        .entry(key.clone())
        .or_insert_with(|| bars.add(bar(moved, &format!("draining {key}"))));
    b.set_length(moved);
    b.set_position(moved.saturating_sub(d["slots_pending"].as_u64().unwrap_or(0)));
    b.set_message(format!(
        "draining {key}, {} jobs left",
        table::cell(&d["jobs_left"])
    ));
}
