//! `sundial check-config`: loads a config as `serve` would, says what it
//! found and what `serve` would warn about (without reaching Redis), and
//! exits (non-zero with the reason if it is invalid or `serve` would refuse
//! it).

use std::path::Path;

use crate::Config;

pub fn run(file: Option<&Path>) -> anyhow::Result<()> {
    let config = Config::load(file)?;
    config.check_admin_exposure()?;
    for warning in config.warnings() {
        eprintln!("warning: {warning}");
    }
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
