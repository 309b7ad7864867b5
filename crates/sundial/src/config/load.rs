//! Loading the config: embedded defaults, then the file, then `SUNDIAL_*`
//! variables; what each variable that sets nothing is called in a warning.
//!
//! Pools come from the file, with the variables' overrides: the built-in
//! pool (`default` at `redis://127.0.0.1:6379`) is there only when the file
//! lists no pools, so a file that lists `[pools.eu]` gets no pool it does
//! not name.

use std::path::Path;

use figment::{
    Figment,
    providers::{Env, Format, Serialized, Toml},
};

use super::{Config, admin};

/// Variables of the command line itself, not config keys: never called
/// ignored. (`SUNDIAL_CONFIG` names the file; the others are the CLI's.)
const COMMAND_LINE_VARS: [&str; 7] = [
    "CONFIG",
    "API_URL",
    "ADMIN_URL",
    "TOKEN",
    "ADMIN_USER",
    "ADMIN_PASSWORD",
    "WIPE_URL",
];

/// How many variables naming unknown keys are set aside before the load
/// gives up (each costs one more extraction).
const MAX_UNKNOWN: usize = 32;

impl Config {
    /// Loads and validates the configuration.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        let mut defaults = Config::default();
        let mut fig = Figment::new();
        if let Some(file) = file {
            anyhow::ensure!(
                file.exists(),
                "config file {} does not exist",
                file.display()
            );
            if Figment::from(Toml::file(file)).find_value("pools").is_ok() {
                defaults.pools.clear();
            }
            fig = fig.merge(Toml::file(file));
        }
        let fig = Figment::from(Serialized::defaults(defaults)).merge(fig);
        let (mut cfg, unknown) = extract(fig)?;
        cfg.ignored_env = ignored_vars();
        cfg.ignored_env.extend(unknown);
        // A variable the config reads a password from is in use.
        let read = secret_vars(&cfg);
        cfg.ignored_env.retain(|v| !read.contains(v));
        cfg.ignored_env.sort();
        cfg.accounts = admin::with_accounts_file(
            std::mem::take(&mut cfg.accounts),
            cfg.accounts_file.as_deref(),
        )?;
        cfg.validate()?;
        // Each pool's quota, as its namespaces are held to it: its own
        // fields over `[quotas]`.
        for pool in cfg.pools.values_mut() {
            pool.quotas = pool.quotas.over(&cfg.quotas);
        }
        Ok(cfg)
    }
}

impl Config {
    /// What `serve` and `pumpd` warn about at start that the config alone
    /// tells (`check-config` prints them too): variables that set nothing,
    /// and an open-file limit that cannot reach `http.max_connections`.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .ignored_env
            .iter()
            .map(|v| format!("environment variable {v} is ignored: it names no config key"))
            .collect();
        let wanted = self.open_files_wanted();
        if let Ok((_, hard)) = rlimit::getrlimit(rlimit::Resource::NOFILE)
            && hard < wanted
        {
            out.push(format!(
                "the open-file limit ({hard}) is below http.max_connections and \
                 http.admin_max_connections plus a margin ({wanted}): raise it (LimitNOFILE in \
                 systemd, ulimit -n) or lower http.max_connections"
            ));
        }
        out
    }

    /// Files a process wants open at most: every connection holds one,
    /// plus a margin for Redis connections, the config watcher and logs.
    pub fn open_files_wanted(&self) -> u64 {
        const OWN_FILES: u64 = 256;
        (self.http.max_connections + self.http.admin_max_connections) as u64 + OWN_FILES
    }
}

/// The config from `fig` with the `SUNDIAL_*` variables over it, and the
/// variables set aside because they name a key that a known table lacks
/// (`SUNDIAL_LIMITS__NOPE`): those are warned about, as the variables that
/// name no table are, rather than stopping the process. A key the file
/// gets wrong is still an error.
fn extract(fig: Figment) -> anyhow::Result<(Config, Vec<String>)> {
    let mut unknown: Vec<String> = Vec::new();
    loop {
        let tables = top_level_keys();
        let skip = unknown.clone();
        let env = Env::prefixed("SUNDIAL_")
            .filter(move |k| {
                tables.contains(&first_segment(k.as_str()))
                    && !skip
                        .iter()
                        .any(|s| s[SUNDIAL.len()..].eq_ignore_ascii_case(k.as_str()))
            })
            .split("__");
        match fig.clone().merge(env).extract::<Config>() {
            Ok(cfg) => return Ok((cfg, unknown)),
            Err(errors) => {
                let named: Vec<String> = errors
                    .clone()
                    .into_iter()
                    .filter_map(|e| unknown_var(&e))
                    .filter(|v| !unknown.contains(v))
                    .collect();
                if named.is_empty() || unknown.len() + named.len() > MAX_UNKNOWN {
                    return Err(admin::redacted(errors));
                }
                unknown.extend(named);
            }
        }
    }
}

const SUNDIAL: &str = "SUNDIAL_";

/// The set `SUNDIAL_*` variable that an unknown-field error is about, if
/// one is: its path and field, joined by `__`.
fn unknown_var(e: &figment::Error) -> Option<String> {
    let figment::error::Kind::UnknownField(field, _) = &e.kind else {
        return None;
    };
    let mut keys = e.path.clone();
    if keys.last() != Some(field) {
        keys.push(field.clone());
    }
    let want = format!("{SUNDIAL}{}", keys.join("__"));
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .find(|k| k.eq_ignore_ascii_case(&want))
}

/// The `SUNDIAL_*` variables that name no config table and are not the
/// command line's own.
fn ignored_vars() -> Vec<String> {
    let tables = top_level_keys();
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| {
            k.strip_prefix(SUNDIAL).is_some_and(|rest| {
                !COMMAND_LINE_VARS
                    .iter()
                    .any(|c| rest.eq_ignore_ascii_case(c))
                    && !tables.contains(&first_segment(rest))
            })
        })
        .collect()
}

/// The variables the config reads passwords from (`{ env = "…" }`,
/// wherever a password is taken: shards, Sentinels, clusters, the admin
/// Redis), found in its serialized form.
fn secret_vars(cfg: &Config) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let (1, Some(serde_json::Value::String(env))) = (m.len(), m.get("env")) {
                    out.push(env.clone());
                }
                m.values().for_each(|v| walk(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(v) = serde_json::to_value(cfg) {
        walk(&v, &mut out);
    }
    out
}

/// The config's top-level keys, lower case.
fn top_level_keys() -> Vec<String> {
    match serde_json::to_value(Config::default()) {
        Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// `LIMITS__DEFAULT_TTR` → `limits`.
fn first_segment(key: &str) -> String {
    key.split("__")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
}
