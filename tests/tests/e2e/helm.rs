//! The Helm chart (`deploy/helm/sundial`) and the kustomize base
//! (`deploy/kubernetes/base`), checked without a cluster. Each value set in
//! `tests/deploy/values/` is rendered (by `helm template` when `helm` is on
//! the PATH, else by `tests/deploy/render`, Go's text/template with sprig
//! from Debian's packages); every object is validated against Kubernetes'
//! schemas (kubernetes-validate, strict: an unknown field fails) and KEDA's
//! and prometheus-operator's (`tests/deploy/validate.mjs`); and the
//! sundial.toml the chart writes loads as `serve` loads it. `tests/run`
//! installs every tool these need; a missing one fails the test.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use base64::Engine;
use sundial::Config;
use yaml_rust2::{Yaml, YamlLoader};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart() -> PathBuf {
    root().join("deploy/helm/sundial")
}

fn value_sets() -> Vec<PathBuf> {
    let mut sets: Vec<PathBuf> = std::fs::read_dir(root().join("tests/deploy/values"))
        .expect("tests/deploy/values")
        .map(|e| e.expect("entry").path())
        .collect();
    sets.sort();
    assert!(sets.len() >= 3, "{sets:?}");
    sets
}

/// Runs a command; its stdout, or all it printed as the error.
fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e} (tests/run installs it)"));
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("utf-8"))
    } else {
        // Some validators print their findings on stdout.
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Builds the test renderer once (GOPATH mode, from Debian's Go packages).
fn renderer() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = root().join("target/deploy-render");
        let src = root().join("tests/deploy/render");
        let built = run(
            Command::new("go")
                .args(["build", "-o"])
                .arg(out.join("render"))
                .args(["main.go", "render.go"])
                .current_dir(&src)
                .env("GO111MODULE", "off")
                .env("GOPATH", "/usr/share/gocode")
                .env("GOCACHE", out.join("cache")),
            "go (golang-go, golang-github-masterminds-sprig-dev, golang-gopkg-yaml.v3-dev)",
        );
        if let Err(e) = built {
            panic!("building tests/deploy/render: {e}");
        }
        out.join("render")
    })
}

fn helm_on_path() -> bool {
    Command::new("helm").arg("version").output().is_ok()
}

/// The chart's manifests for these values, in namespace `jobs`.
fn render(values: &[&Path]) -> Result<String, String> {
    let mut cmd = if helm_on_path() {
        let mut c = Command::new("helm");
        c.arg("template");
        c
    } else {
        Command::new(renderer())
    };
    cmd.args(["sundial"]).arg(chart()).args(["-n", "jobs"]);
    for v in values {
        cmd.arg("-f").arg(v);
    }
    run(&mut cmd, "the chart's renderer")
}

/// The chart's manifests for one of `tests/deploy/values/`.
pub(crate) fn render_value_set(name: &str) -> String {
    let set = root().join("tests/deploy/values").join(name);
    render(&[&set]).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn docs(text: &str) -> Vec<Yaml> {
    YamlLoader::load_from_str(text)
        .expect("rendered YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Yaml], kind: &str, name: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn kinds(docs: &[Yaml]) -> Vec<String> {
    let mut k: Vec<String> = docs
        .iter()
        .map(|d| d["kind"].as_str().expect("kind").to_owned())
        .collect();
    k.sort();
    k
}

/// Validates manifests offline: built-in kinds strictly against
/// Kubernetes 1.30's schemas, custom resources against KEDA's and
/// prometheus-operator's.
fn validate(manifests: &str, what: &str) {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("manifests.yaml");
    std::fs::write(&file, manifests).expect("write");
    let validator = root().join("target/pyvenv/bin/kubernetes-validate");
    let core = run(
        Command::new(&validator)
            .args(["--strict", "-k", "1.30.0", "--quiet", "--no-warn"])
            .arg(&file),
        "target/pyvenv/bin/kubernetes-validate",
    );
    if let Err(e) = core {
        panic!("{what}: not valid Kubernetes objects: {e}");
    }
    let custom = run(
        Command::new("node")
            .arg(root().join("tests/deploy/validate.mjs"))
            .arg(&file),
        "node with tests/deploy/node_modules",
    );
    if let Err(e) = custom {
        panic!("{what}: not valid custom resources: {e}");
    }
}

#[test]
fn every_value_set_renders_objects_that_validate() {
    for set in value_sets() {
        let what = set.display().to_string();
        let text = render(&[&set]).unwrap_or_else(|e| panic!("{what}: {e}"));
        validate(&text, &what);
        let kinds = kinds(&docs(&text));
        for needed in ["ConfigMap", "Deployment", "Service", "Service"] {
            assert!(kinds.iter().any(|k| k == needed), "{what}: {kinds:?}");
        }
    }
}

#[test]
fn the_kustomize_base_builds_objects_that_validate() {
    let text = run(
        Command::new("kubectl")
            .arg("kustomize")
            .arg(root().join("deploy/kubernetes/base")),
        "kubectl",
    )
    .unwrap_or_else(|e| panic!("kubectl kustomize: {e}"));
    validate(&text, "deploy/kubernetes/base");
    let docs = docs(&text);
    assert_eq!(
        kinds(&docs),
        [
            "ConfigMap",
            "Deployment",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Service"
        ]
    );
    let image =
        find(&docs, "Deployment", "sundial")["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(image, Some(format!("sundial:{version}").as_str()));
    let example = std::fs::read_to_string(root().join("deploy/kubernetes/keda-worker.yaml"))
        .expect("keda-worker.yaml");
    validate(&example, "deploy/kubernetes/keda-worker.yaml");
}

#[test]
fn the_chart_runs_this_version() {
    let meta = std::fs::read_to_string(chart().join("Chart.yaml")).expect("Chart.yaml");
    let meta = &YamlLoader::load_from_str(&meta).expect("yaml")[0];
    assert_eq!(
        meta["appVersion"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "Chart.yaml's appVersion follows the workspace's version"
    );
}

/// The ConfigMap's sundial.toml, loaded as `serve` loads it, with the
/// accounts file the pods mount from the admin Secret (or, for a Secret of
/// the user's, one like it).
fn chart_config(docs: &[Yaml], what: &str) -> (Config, String) {
    let toml = find(docs, "ConfigMap", "sundial")["data"]["sundial.toml"]
        .as_str()
        .expect("sundial.toml")
        .to_owned();
    let dir = tempfile::tempdir().expect("tmp");
    let accounts = match docs.iter().find(|d| d["kind"].as_str() == Some("Secret")) {
        Some(secret) => {
            let b64 = secret["data"]["accounts.toml"]
                .as_str()
                .expect("accounts.toml");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64");
            String::from_utf8(bytes).expect("utf-8")
        }
        None => "ops = \"ek3-Tq9-zz1-Lm4\"\n".to_owned(),
    };
    let accounts_path = dir.path().join("accounts.toml");
    std::fs::write(&accounts_path, accounts).expect("write");
    // The mounted Secrets, as files: each holds a password.
    let secrets = dir.path().join("secrets");
    for file in toml.split("\"/etc/sundial/secrets/").skip(1) {
        let file = secrets.join(file.split('"').next().expect("path"));
        std::fs::create_dir_all(file.parent().expect("dir")).expect("mkdir");
        std::fs::write(&file, "a-redis-password\n").expect("write");
    }
    let local = toml
        .replace(
            "/etc/sundial/accounts/accounts.toml",
            accounts_path.to_str().expect("path"),
        )
        .replace("/etc/sundial/secrets", secrets.to_str().expect("path"));
    let path = dir.path().join("sundial.toml");
    std::fs::write(&path, local).expect("write");
    let cfg = Config::load(Some(&path)).unwrap_or_else(|e| panic!("{what}: {e:#}\n{toml}"));
    cfg.check_admin_exposure()
        .unwrap_or_else(|e| panic!("{what}: serve would refuse to start: {e:#}"));
    (cfg, toml)
}

/// The Secrets a config names as files, `/etc/sundial/secrets/NAME/KEY`.
fn secret_files(toml: &str) -> Vec<String> {
    let mut names: Vec<String> = toml
        .split("/etc/sundial/secrets/")
        .skip(1)
        .map(|rest| rest.split('/').next().expect("name").to_owned())
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_chart_writes_a_config_that_serve_loads() {
    for set in value_sets() {
        let what = set.display().to_string();
        let values = std::fs::read_to_string(&set).expect("values");
        let values = &YamlLoader::load_from_str(&values).expect("yaml")[0];
        let docs = docs(&render(&[&set]).unwrap_or_else(|e| panic!("{what}: {e}")));
        let (cfg, toml) = chart_config(&docs, &what);
        let pools: Vec<&str> = values["pools"]
            .as_hash()
            .expect("pools")
            .keys()
            .map(|k| k.as_str().expect("name"))
            .collect();
        assert_eq!(
            cfg.pools.keys().map(String::as_str).collect::<Vec<_>>(),
            pools
        );
        assert_eq!(cfg.listen.port(), 7777, "{what}");
        assert_eq!(cfg.admin_listen.port(), 7778, "{what}");
        let apart = values["pumpd"]["enabled"].as_bool() == Some(true);
        assert_eq!(cfg.pump.enabled, !apart, "{what}: pumps run once");
        let deployments: Vec<&Yaml> = docs
            .iter()
            .filter(|d| d["kind"].as_str() == Some("Deployment"))
            .collect();
        assert_eq!(deployments.len(), if apart { 2 } else { 1 }, "{what}");
        // No password in the ConfigMap: every one is a mounted Secret.
        assert!(!toml.contains("password = \""), "{what}: {toml}");
        for name in secret_files(&toml) {
            for d in &deployments {
                let pod = &d["spec"]["template"]["spec"];
                let volume = pod["volumes"]
                    .as_vec()
                    .expect("volumes")
                    .iter()
                    .find(|v| v["secret"]["secretName"].as_str() == Some(name.as_str()))
                    .unwrap_or_else(|| panic!("{what}: no volume of Secret {name}"));
                let mounted = pod["containers"][0]["volumeMounts"]
                    .as_vec()
                    .expect("mounts")
                    .iter()
                    .any(|m| {
                        m["name"] == volume["name"]
                            && m["mountPath"].as_str()
                                == Some(format!("/etc/sundial/secrets/{name}").as_str())
                    });
                assert!(mounted, "{what}: Secret {name} is not mounted");
            }
        }
    }
}

fn values_file(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("values.yaml");
    std::fs::write(&path, yaml).expect("write");
    path
}

#[test]
fn the_chart_refuses_values_that_would_lose_jobs_or_not_start() {
    let dir = tempfile::tempdir().expect("tmp");
    let no_pools = values_file(dir.path(), "replicas: 1\n");
    let e = render(&[&no_pools]).expect_err("no pools");
    assert!(e.contains("needs a `default` pool"), "{e}");
    let minimal = root().join("tests/deploy/values/minimal.yaml");
    // Scaling to zero on ready jobs alone stops workers that hold jobs.
    let ready_only = values_file(
        dir.path(),
        "keda:\n  workers:\n    - {name: w, namespace: shop, queue: q, states: [ready], token: {secret: t, key: token}}\n",
    );
    let e = render(&[&minimal, &ready_only]).expect_err("ready only");
    assert!(e.contains("states must include reserved"), "{e}");
    let no_token = values_file(
        dir.path(),
        "keda:\n  workers:\n    - {name: w, namespace: shop, queue: q}\n",
    );
    let e = render(&[&minimal, &no_token]).expect_err("no token");
    assert!(e.contains("token {secret, key}"), "{e}");
    let fraction = values_file(dir.path(), "config:\n  limits: {default_ttr: 1.5}\n");
    let e = render(&[&minimal, &fraction]).expect_err("a fraction");
    assert!(e.contains("not a whole number"), "{e}");
}

#[test]
fn the_notes_say_how_to_get_a_first_token() {
    let minimal = root().join("tests/deploy/values/minimal.yaml");
    let out = run(
        Command::new(renderer())
            .args(["--notes", "sundial"])
            .arg(chart())
            .args(["-n", "jobs", "-f"])
            .arg(&minimal),
        "the chart's renderer",
    )
    .expect("render");
    let notes = out.split("NOTES:").nth(1).expect("NOTES");
    for needed in [
        "kubectl -n jobs port-forward deploy/sundial 7778:7778",
        "get secret sundial-admin -o jsonpath='{.data.password}'",
        "sundial token create",
        "http://sundial.jobs:7777",
    ] {
        assert!(notes.contains(needed), "{needed} in {notes}");
    }
}
