//! `sundial check-config`: loads a config as `serve` would, says what it
//! found, and exits (non-zero with the reason if it is invalid).

use std::path::Path;

use crate::Config;

pub fn run(file: Option<&Path>) -> anyhow::Result<()> {
    let config = Config::load(file)?;
    println!("{}", summary(&config));
    Ok(())
}

fn summary(config: &Config) -> String {
    let pools: Vec<String> = config
        .pools
        .iter()
        .map(|(n, p)| {
            format!(
                "{n} ({} shard(s), {} slots, {} lane(s))",
                p.shards.len(),
                p.slots,
                p.lanes
            )
        })
        .collect();
    format!(
        "config ok: api {}, admin {}, pools: {}",
        config.listen,
        config.admin_listen,
        pools.join(", ")
    )
}
