//! The Lua scripts, each prefixed with the shared helpers of `lua/lib/`
//! (`record.lua`, `counts.lua`, `keys.lua`, `expiry.lua`, `slot.lua`,
//! `transit.lua`, `fires.lua`, in that order),
//! run with `EVALSHA` and
//! loaded again when the shard answers `NOSCRIPT` (after a restart or a
//! failover to a replica that never saw them). The keys each is called
//! with are built in `engine::keysets`.
//!
//! Each script starts with a `#!lua` line that declares its flags (Redis
//! 7.0), so that Redis decides before a script runs whether it may, and
//! never stops one halfway:
//! - scripts that add jobs (publish, republish, a mover's copy, a
//!   schedule's fire) or schedules have no flag: when the shard is over
//!   its `maxmemory`, Redis refuses them whole with `OOM`, which the
//!   gateway answers 503 (and a pump retries: a fire waits, late, until
//!   memory is freed or its grace passes);
//! - the scripts that only read (peeks, a dead letter's head and list, an
//!   export's pages) are `no-writes`: Redis runs them at any memory level
//!   and would refuse one that tried to write;
//! - the others are `allow-oom` and run at any memory level: consume, ack,
//!   delete, expire, respawn and drop dead letters free memory or move a
//!   job that exists; leases, rate counters and schedules' plans (a few
//!   bytes each) keep the shard working; and
//!   admin writes are a few bytes that let an operator act (set a quota,
//!   revoke a token) on a Redis that a tenant filled.

use std::sync::LazyLock;

use fred::types::scripts::Script;

/// The source of `lua/<name>.lua`, prefixed with its flags line and the
/// shared helpers of `lua/lib/`.
macro_rules! script {
    ($name:ident, $flags:literal) => {
        concat!(
            $flags,
            "\n",
            include_str!("../lua/lib/record.lua"),
            "\n",
            include_str!("../lua/lib/counts.lua"),
            "\n",
            include_str!("../lua/lib/keys.lua"),
            "\n",
            include_str!("../lua/lib/expiry.lua"),
            "\n",
            include_str!("../lua/lib/slot.lua"),
            "\n",
            include_str!("../lua/lib/transit.lua"),
            "\n",
            include_str!("../lua/lib/fires.lua"),
            "\n",
            include_str!(concat!("../lua/", stringify!($name), ".lua"))
        )
    };
}

/// A script of this build, with its name and its place in [`Scripts::all`]
/// (so that a call finds its metrics without comparing SHAs).
#[derive(Debug)]
pub struct Named {
    pub name: &'static str,
    pub index: usize,
    pub script: Script,
}

/// Declares every script once: the `Scripts` table, its `all()` list in
/// the same order, and each script's name and index.
macro_rules! scripts {
    ($($name:ident: $flags:literal),* $(,)?) => {
        /// Every script, parsed once.
        #[derive(Debug)]
        pub struct Scripts {
            $(pub $name: Named,)*
        }

        /// How many scripts there are.
        pub const COUNT: usize = [$(stringify!($name)),*].len();

        /// The scripts of this build.
        pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
            let mut index = 0;
            let mut next = |name: &'static str, lua: &'static str| {
                let n = Named { name, index, script: Script::from_lua(lua) };
                index += 1;
                n
            };
            Scripts {
                $($name: next(stringify!($name), script!($name, $flags)),)*
            }
        });

        impl Scripts {
            /// All scripts, in the order of their `index`.
            pub fn all(&self) -> [&Named; COUNT] {
                [$(&self.$name),*]
            }
        }
    };
}

scripts! {
    publish: "#!lua",
    republish: "#!lua",
    serve: "#!lua flags=allow-oom",
    release: "#!lua flags=allow-oom",
    peek_job: "#!lua flags=no-writes",
    peek_queue: "#!lua flags=no-writes",
    ready_age: "#!lua flags=no-writes",
    job_list: "#!lua flags=no-writes",
    destroy: "#!lua flags=allow-oom",
    dead_peek: "#!lua flags=no-writes",
    dead_move: "#!lua flags=allow-oom",
    dead_list: "#!lua flags=no-writes",
    dead_pick: "#!lua flags=allow-oom",
    pump: "#!lua flags=allow-oom",
    fire: "#!lua",
    fires_due: "#!lua flags=no-writes",
    schedule_set: "#!lua",
    schedule_times: "#!lua flags=allow-oom",
    rate: "#!lua flags=allow-oom",
    quota_rate: "#!lua flags=allow-oom",
    backlog: "#!lua flags=allow-oom",
    queue_index: "#!lua flags=allow-oom",
    heartbeat: "#!lua flags=allow-oom",
    claim: "#!lua flags=allow-oom",
    table_change: "#!lua flags=allow-oom",
    token_rehash: "#!lua flags=allow-oom",
    wipe_slot: "#!lua flags=allow-oom",
    move_out: "#!lua flags=allow-oom",
    move_in: "#!lua",
    move_done: "#!lua flags=allow-oom",
    export: "#!lua flags=no-writes",
    usage_build: "#!lua flags=allow-oom",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_has_its_name_and_place() {
        assert_eq!(SCRIPTS.publish.name, "publish");
        assert_eq!(SCRIPTS.table_change.name, "table_change");
        for (i, s) in SCRIPTS.all().iter().enumerate() {
            assert_eq!(s.index, i, "{}", s.name);
        }
        let names: std::collections::BTreeSet<&str> =
            SCRIPTS.all().iter().map(|s| s.name).collect();
        assert_eq!(names.len(), COUNT, "names are distinct");
        let shas: std::collections::BTreeSet<String> = SCRIPTS
            .all()
            .iter()
            .map(|s| s.script.sha1().to_string())
            .collect();
        assert_eq!(shas.len(), COUNT, "scripts are distinct");
    }
}
