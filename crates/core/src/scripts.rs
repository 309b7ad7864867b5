//! The Lua scripts, each prefixed with `lua/lib.lua`, run with `EVALSHA` and
//! loaded again when the shard answers `NOSCRIPT` (after a restart or a
//! failover to a replica that never saw them). The keys each is called
//! with are built in `engine::keysets`.

use std::sync::LazyLock;

use fred::types::scripts::Script;

/// The source of `lua/<name>.lua`, prefixed with `lua/lib.lua`.
macro_rules! script {
    ($name:ident) => {
        concat!(
            include_str!("../lua/lib.lua"),
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
    ($($name:ident),* $(,)?) => {
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
                $($name: next(stringify!($name), script!($name)),)*
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
    publish,
    republish,
    serve,
    release,
    peek_job,
    peek_queue,
    destroy,
    dead_peek,
    dead_move,
    dead_list,
    dead_pick,
    pump,
    rate,
    heartbeat,
    claim,
    table_change,
    token_rehash,
    wipe_slot,
    move_out,
    move_in,
    move_done,
    export,
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
