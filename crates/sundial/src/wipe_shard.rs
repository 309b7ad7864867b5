//! `sundial wipe-shard --url URL --yes`: removes Sundial's keys from a Redis
//! that left its pool (the set is described in `sundial_core`'s
//! `engine/wipe.rs`).
//! Refuses, removing nothing, while the shard holds a job, while a live
//! gateway still lists it, or while a pump process runs on it.

use std::time::Duration;

use anyhow::Context;
use sundial_core::{Shard, ShardOptions};

/// How long the shard may take to answer.
const WAIT: Duration = Duration::from_secs(10);

pub async fn run(url: &str, yes: bool) -> anyhow::Result<()> {
    anyhow::ensure!(
        yes,
        "this removes every key of Sundial's from {}; add --yes to go ahead",
        redacted(url)
    );
    let shard = Shard::connect(redacted(url), &ShardOptions::new(url))?;
    shard
        .wait_connected(WAIT)
        .await
        .with_context(|| format!("{} did not answer within {WAIT:?}", redacted(url)))?;
    let wiped = shard.wipe().await?;
    println!(
        "wiped: {} key(s) of Sundial's removed ({} slots swept)",
        wiped.keys, wiped.slots
    );
    Ok(())
}

/// The URL without its password, for messages.
fn redacted(url: &str) -> String {
    match (url.split_once("://"), url.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, host))) => format!("{scheme}://…@{host}"),
        _ => url.to_owned(),
    }
}
