//! `sundial wipe-shard --url URL --yes`: removes Sundial's keys from a Redis
//! that left its pool (the set is described in `sundial_core`'s
//! `engine/wipe.rs`).
//! Refuses, removing nothing, a Redis that is not a shard of this build's
//! format, and while a live gateway still lists the shard, a pump process
//! runs on it, or it holds a job.

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
    shard.wait_connected(WAIT).await.with_context(|| {
        format!(
            "{} did not answer within {} s",
            redacted(url),
            WAIT.as_secs()
        )
    })?;
    let wiped = shard.wipe().await?;
    println!(
        "wiped: {} key(s) of Sundial's removed ({} slots swept)",
        wiped.keys, wiped.slots
    );
    if wiped.admin_kept {
        println!(
            "kept: the admin tables (tokens, limits, queue index) this Redis also holds; \
             they are not the shard's"
        );
    }
    Ok(())
}

/// The URL without its password or query (a Sentinel URL's query may hold
/// one), for messages.
fn redacted(url: &str) -> String {
    let url = url.split_once('?').map_or(url, |(u, _)| u);
    match (url.split_once("://"), url.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, host))) => format!("{scheme}://…@{host}"),
        _ => url.to_owned(),
    }
}
