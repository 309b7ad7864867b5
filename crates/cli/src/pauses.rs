//! `sundial queue pause|resume` and `sundial namespace pause|resume`: a
//! queue's or a whole namespace's consumers held, and let go (admin API).

use reqwest::Method;
use serde_json::Value;

use crate::{
    client::{Client, Listener, Outcome, seg},
    paths::{pool_query, queue_path},
    table,
};

/// Pauses (`pause`) or resumes a queue, or with `queue` `None` a whole
/// namespace, and prints what holds it now.
pub(crate) async fn run(
    c: &Client,
    ns: &str,
    queue: Option<&str>,
    pool: Option<&String>,
    pause: bool,
) -> Outcome {
    let base = match queue {
        Some(q) => queue_path(ns, q),
        None => format!("/namespaces/{}", seg(ns)),
    };
    let path = format!("{base}/pause{}", pool_query(pool));
    let method = if pause { Method::PUT } else { Method::DELETE };
    let answer = c.call(Listener::Admin, method, &path, None).await?.json;
    c.show(&answer, print);
    Ok(())
}

/// One line: what is paused, since when, and what still holds a queue.
fn print(a: &Value) {
    let what = match a["queue"].as_str() {
        Some(q) => format!("queue {}/{q}", table::cell(&a["namespace"])),
        None => format!("namespace {}", table::cell(&a["namespace"])),
    };
    let state = if a["paused"] == true {
        "paused: its consumers get no job until it resumes"
    } else if a["namespace_paused"] == true {
        "resumed, but its namespace is paused: its consumers still get no job"
    } else {
        "not paused"
    };
    println!("{what} in pool {}: {state}", table::cell(&a["pool"]));
}
