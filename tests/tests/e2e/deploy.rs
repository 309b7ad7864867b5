//! What can be checked of `deploy/` without a cluster: every YAML and JSON
//! file parses, the Sundial configs in it load, and every metric the
//! alerts, dashboard and autoscaler use is one Sundial documents.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use sundial::Config;
use yaml_rust2::YamlLoader;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn files(ext: &[&str]) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &[&str], out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read dir") {
            let p = e.expect("entry").path();
            // A Helm chart's templates are YAML only once rendered
            // (tests/tests/e2e/helm.rs renders and checks them).
            if p.ends_with("templates") {
                continue;
            }
            if p.is_dir() {
                walk(&p, ext, out);
            } else if p
                .extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| ext.contains(&x))
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&deploy(), ext, &mut out);
    out.sort();
    out
}

fn load_config(toml: &str, what: &str) -> Config {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("sundial.toml");
    std::fs::write(&path, toml).expect("write");
    Config::load(Some(&path)).unwrap_or_else(|e| panic!("{what}: {e:#}"))
}

/// The example configs in `config/` load as `serve` would load them
/// (`Config::load` checks every pool and shard, including the URL each shard
/// kind becomes).
#[test]
fn every_example_config_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
    let mut seen = Vec::new();
    for e in std::fs::read_dir(&dir).expect("read config/") {
        let p = e.expect("entry").path();
        if p.extension().and_then(|x| x.to_str()) == Some("toml") {
            let text = std::fs::read_to_string(&p).expect("read");
            load_config(&text, &p.display().to_string());
            seen.push(p.file_name().expect("name").to_string_lossy().into_owned());
        }
    }
    seen.sort();
    for name in [
        "cluster.toml",
        "sentinel.toml",
        "sharded.toml",
        "sundial.toml",
    ] {
        assert!(seen.iter().any(|s| s == name), "{name} in {seen:?}");
    }
}

#[test]
fn every_yaml_and_json_file_parses() {
    let yamls = files(&["yaml", "yml"]);
    assert!(yamls.len() >= 6, "{yamls:?}");
    for p in yamls {
        let text = std::fs::read_to_string(&p).expect("read");
        let docs =
            YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(!docs.is_empty(), "{} is empty", p.display());
    }
    let jsons = files(&["json"]);
    assert!(!jsons.is_empty());
    for p in jsons {
        let text = std::fs::read_to_string(&p).expect("read");
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(
            v["panels"].as_array().is_some_and(|p| !p.is_empty()),
            "{}",
            p.display()
        );
    }
}

#[test]
fn the_sundial_configs_in_deploy_load() {
    let text = std::fs::read_to_string(deploy().join("kubernetes/base/configmap.yaml"))
        .expect("configmap");
    let docs = YamlLoader::load_from_str(&text).expect("yaml");
    let toml = docs[0]["data"]["sundial.toml"]
        .as_str()
        .expect("data.sundial.toml");
    assert!(
        toml.contains("admin_listen = \"0.0.0.0:7778\"") && !toml.contains("allow_open_admin"),
        "the admin API needs accounts in Kubernetes"
    );
    // The Deployment passes the accounts from a Secret (SUNDIAL_ACCOUNTS).
    let with_accounts = format!("{toml}\n[accounts]\nops = \"from-the-secret\"\n");
    let cfg = load_config(&with_accounts, "the ConfigMap's sundial.toml");
    assert!(cfg.watch_config, "the ConfigMap relies on file watching");
    let compose =
        std::fs::read_to_string(deploy().join("compose/sundial.toml")).expect("compose config");
    let cfg = load_config(&compose, "deploy/compose/sundial.toml");
    assert!(
        cfg.pools.contains_key("ha"),
        "the compose stack has a Sentinel pool"
    );
    for unit in ["sundial.service", "sundial-pumpd.service"] {
        let text = std::fs::read_to_string(deploy().join("systemd").join(unit)).expect("unit");
        assert!(
            text.contains("ExecStart=/usr/local/bin/sundial ") && text.contains("--config"),
            "{unit}"
        );
        assert!(
            text.contains("ExecReload=/bin/kill -HUP $MAINPID"),
            "{unit}: reload is SIGHUP"
        );
    }
}

#[test]
fn every_metric_used_in_deploy_is_documented() {
    let documented =
        std::fs::read_to_string(deploy().join("../docs/METRICS.md")).expect("METRICS.md");
    let mut used = BTreeSet::new();
    for p in files(&["yaml", "yml", "json"]) {
        let text = std::fs::read_to_string(&p).expect("read");
        let mut rest = text.as_str();
        while let Some(i) = rest.find("sundial_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            rest = &rest[i + name.len().max(1)..];
            // Skip names that are not metrics (e.g. `sundial_` in a label).
            if name.len() > "sundial_".len() {
                used.insert(name);
            }
        }
    }
    assert!(used.len() >= 8, "{used:?}");
    for name in used {
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(&name);
        assert!(
            documented.contains(&format!("`{base}`")),
            "{name} is used in deploy/ but not in docs/METRICS.md"
        );
    }
}

/// Every metric docs/METRICS.md lists is on a panel of the Grafana
/// dashboard, so that what Sundial measures can be seen without writing a
/// query first.
#[test]
fn every_metric_is_on_a_dashboard_panel() {
    let documented =
        std::fs::read_to_string(deploy().join("../docs/METRICS.md")).expect("METRICS.md");
    let dashboard =
        std::fs::read_to_string(deploy().join("grafana/sundial.json")).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).expect("json");
    let exprs: Vec<&str> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    let names: Vec<&str> = documented
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| name)
        .filter(|n| n.starts_with("sundial_"))
        .collect();
    assert!(names.len() >= 30, "{names:?}");
    for name in names {
        let on_a_panel = exprs.iter().any(|e| {
            e.match_indices(name).any(|(i, _)| {
                let next = e[i + name.len()..].chars().next();
                // The name whole, or a histogram's series of it.
                next.is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_')
                    || e[i + name.len()..].starts_with("_bucket")
                    || e[i + name.len()..].starts_with("_count")
            })
        });
        assert!(
            on_a_panel,
            "{name} is on no panel of deploy/grafana/sundial.json"
        );
    }
}

/// promtool: on the PATH, or as `tests/run` unpacks it into
/// `target/promtool`.
fn promtool_binary() -> PathBuf {
    let unpacked = deploy().join("../target/promtool/usr/bin/promtool");
    if std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok()
    {
        PathBuf::from("promtool")
    } else {
        unpacked
    }
}

fn promtool(args: &[&str], dir: &Path) -> String {
    let out = std::process::Command::new(promtool_binary())
        .args(args)
        .current_dir(dir)
        .output()
        .expect(
            "promtool (Debian's prometheus package; tests/run unpacks it into target/promtool)",
        );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {text}");
    text
}

/// The alert rules and scrape config are what Prometheus accepts, and each
/// alert fires on what it should, with the labels and text operators get,
/// and not on a look-alike (`tests/deploy/alerts_test.yml`).
#[test]
fn the_alerts_pass_promtool_and_their_unit_tests() {
    let prometheus = deploy().join("prometheus");
    promtool(&["check", "rules", "alerts.yml"], &prometheus);
    promtool(&["check", "config", "prometheus.yml"], &prometheus);
    let tests = deploy().join("../tests/deploy");
    let out = promtool(&["test", "rules", "alerts_test.yml"], &tests);
    assert!(out.contains("SUCCESS"), "{out}");
    // Every alert has a test.
    let rules = std::fs::read_to_string(prometheus.join("alerts.yml")).expect("alerts");
    let cases = std::fs::read_to_string(tests.join("alerts_test.yml")).expect("tests");
    for alert in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            cases.contains(&format!("alertname: {alert}")),
            "{alert} has no test in tests/deploy/alerts_test.yml"
        );
    }
}
