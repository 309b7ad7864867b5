//! The Lua scripts, each prefixed with `lua/lib.lua`, run with `EVALSHA` and
//! loaded again when the shard answers `NOSCRIPT` (after a restart or a
//! failover to a replica that never saw them).

use std::sync::LazyLock;

use fred::types::scripts::Script;

macro_rules! script {
    ($name:literal) => {
        concat!(
            include_str!("../lua/lib.lua"),
            "\n",
            include_str!(concat!("../lua/", $name, ".lua"))
        )
    };
}

/// Every script, parsed once.
#[derive(Debug)]
pub struct Scripts {
    pub publish: Script,
    pub republish: Script,
    pub consume: Script,
    pub release: Script,
    pub delete: Script,
    pub peek_job: Script,
    pub peek_queue: Script,
    pub counts: Script,
    pub destroy: Script,
    pub dead_peek: Script,
    pub dead_move: Script,
    pub pump: Script,
    pub rate: Script,
    pub lease: Script,
    pub lease_drop: Script,
    pub table_change: Script,
}

/// The scripts of this build.
pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    publish: Script::from_lua(script!("publish")),
    republish: Script::from_lua(script!("republish")),
    consume: Script::from_lua(script!("consume")),
    release: Script::from_lua(script!("release")),
    delete: Script::from_lua(script!("delete")),
    peek_job: Script::from_lua(script!("peek_job")),
    peek_queue: Script::from_lua(script!("peek_queue")),
    counts: Script::from_lua(script!("counts")),
    destroy: Script::from_lua(script!("destroy")),
    dead_peek: Script::from_lua(script!("dead_peek")),
    dead_move: Script::from_lua(script!("dead_move")),
    pump: Script::from_lua(script!("pump")),
    rate: Script::from_lua(script!("rate")),
    lease: Script::from_lua(script!("lease")),
    lease_drop: Script::from_lua(script!("lease_drop")),
    table_change: Script::from_lua(script!("table_change")),
});

impl Scripts {
    /// The name of a script of this build (for metrics), by its SHA-1.
    pub fn name_of(&self, script: &Script) -> &'static str {
        const NAMES: [&str; 16] = [
            "publish",
            "republish",
            "consume",
            "release",
            "delete",
            "peek_job",
            "peek_queue",
            "counts",
            "destroy",
            "dead_peek",
            "dead_move",
            "pump",
            "rate",
            "lease",
            "lease_drop",
            "table_change",
        ];
        self.all()
            .iter()
            .position(|s| s.sha1() == script.sha1())
            .map_or("unknown", |i| NAMES[i])
    }

    /// All scripts, for loading them up front.
    pub fn all(&self) -> [&Script; 16] {
        [
            &self.publish,
            &self.republish,
            &self.consume,
            &self.release,
            &self.delete,
            &self.peek_job,
            &self.peek_queue,
            &self.counts,
            &self.destroy,
            &self.dead_peek,
            &self.dead_move,
            &self.pump,
            &self.rate,
            &self.lease,
            &self.lease_drop,
            &self.table_change,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_has_its_name() {
        assert_eq!(SCRIPTS.name_of(&SCRIPTS.publish), "publish");
        assert_eq!(SCRIPTS.name_of(&SCRIPTS.pump), "pump");
        assert_eq!(SCRIPTS.name_of(&SCRIPTS.lease_drop), "lease_drop");
        let names: std::collections::BTreeSet<&str> =
            SCRIPTS.all().iter().map(|s| SCRIPTS.name_of(s)).collect();
        assert_eq!(
            names.len(),
            SCRIPTS.all().len(),
            "names are distinct and none is unknown"
        );
        assert!(!names.contains("unknown"));
    }
}
