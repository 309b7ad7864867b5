//! The examples in `examples/` (a producer and a worker in Python, Node and
//! Go), run as the examples' README tells a user to run them, against a real
//! gateway: checked by their exit codes and output, then by what the API and
//! Redis hold afterwards.
//!
//! The interpreters and Go come from Debian's packages, which `tests/run`
//! installs; a missing one fails the test rather than skipping it.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::File,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token};

#[tokio::test]
async fn python_producer_and_worker_run_against_a_gateway() {
    producer_and_worker(Lang::Python).await;
}

#[tokio::test]
async fn node_producer_and_worker_run_against_a_gateway() {
    producer_and_worker(Lang::Node).await;
}

#[tokio::test]
async fn go_producer_and_worker_run_against_a_gateway() {
    producer_and_worker(Lang::Go).await;
}

#[derive(Debug, Clone, Copy)]
enum Lang {
    Python,
    Node,
    Go,
}

impl Lang {
    /// The program that runs the examples, how to ask its version, and the
    /// Debian package that provides it.
    fn tool(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Lang::Python => ("python3", "--version", "python3"),
            Lang::Node => ("node", "--version", "nodejs"),
            Lang::Go => ("go", "version", "golang-go"),
        }
    }

    /// Fails the test, saying what to install, when the tool is missing.
    fn require(self) {
        let lang = self;
        let (tool, version, package) = lang.tool();
        let status = Command::new(tool)
            .arg(version)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        assert!(
            status.as_ref().is_ok_and(|s| s.success()),
            "`{tool}` is needed to run the {lang:?} examples and is missing or broken \
             ({status:?}): tests/run installs it (Debian package {package})"
        );
    }

    /// `role` (`producer` or `worker`) with `args`, as the examples' README
    /// runs it. `scratch` holds Go's caches.
    fn command(self, role: &str, args: &[&str], scratch: &Path) -> Command {
        let dir = examples_dir();
        match self {
            Lang::Python => {
                let mut c = Command::new("python3");
                c.arg(dir.join("python").join(format!("{role}.py")))
                    .env("PYTHONDONTWRITEBYTECODE", "1");
                c.args(args);
                c
            }
            Lang::Node => {
                let mut c = Command::new("node");
                c.arg(dir.join("node").join(format!("{role}.mjs")));
                c.args(args);
                c
            }
            Lang::Go => {
                // Built first, outside the run's time bound, and run as a
                // program of its own (so that a kill reaches it: `go run`
                // would leave it behind). Caches in the test's own
                // directory (HOME may be read-only); no network: the
                // module has no dependencies.
                let bin = scratch.join(role);
                let built = Command::new("go")
                    .current_dir(dir.join("go"))
                    .args(["build", "-o"])
                    .arg(&bin)
                    .arg(format!("./{role}"))
                    .env("GOCACHE", scratch.join("gocache"))
                    .env("GOPATH", scratch.join("gopath"))
                    .env("GOPROXY", "off")
                    .env("GOTOOLCHAIN", "local")
                    .env("GOWORK", "off")
                    .env("GOFLAGS", "")
                    .output()
                    .expect("run go build");
                assert!(
                    built.status.success(),
                    "go build ./{role}: {}",
                    String::from_utf8_lossy(&built.stderr)
                );
                let mut c = Command::new(bin);
                c.args(args);
                c
            }
        }
    }
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// What an example program did.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The stdout lines that start with `word `, split on spaces.
    fn lines(&self, word: &str) -> Vec<Vec<&str>> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with(&format!("{word} ")))
            .map(|l| l.split(' ').collect())
            .collect()
    }
}

/// Runs `cmd` to its end with the gateway's URL and `token` (and no other
/// `SUNDIAL_*` setting from the environment), plus `env`; output goes to
/// files in `scratch`, so no pipe can fill. Killed, and the test failed,
/// after `timeout`.
fn run(
    mut cmd: Command,
    gw: &Sundial,
    token: &str,
    env: &[(&str, &str)],
    scratch: &Path,
    name: &str,
    timeout: Duration,
) -> Run {
    for var in [
        "SUNDIAL_DELAY",
        "SUNDIAL_TTR",
        "SUNDIAL_POLL",
        "SUNDIAL_EXIT_AFTER",
        "SUNDIAL_EXIT_IDLE",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("SUNDIAL_API_URL", gw.api())
        .env("SUNDIAL_TOKEN", token)
        .env("SUNDIAL_NAMESPACE", "ns")
        .env("SUNDIAL_QUEUE", "q")
        .envs(env.iter().copied());
    let out = scratch.join(format!("{name}.out"));
    let err = scratch.join(format!("{name}.err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&out).expect("stdout file"))
        .stderr(File::create(&err).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("start {name} ({cmd:?}): {e}"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the example") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let run = Run {
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "{name} did not finish within {timeout:?}\n--- stdout\n{}--- stderr\n{}",
        run.stdout,
        run.stderr
    );
    run
}

/// The producer publishes ten jobs, every fifth asking to fail and the
/// seventh taking two seconds; the worker, with a TTR of one second, touches
/// the long one until it is done, acks eight (each once, with its delivery),
/// releases the two others with a reason on both their tries, sees them land
/// in the dead letter, and stops.
async fn producer_and_worker(lang: Lang) {
    lang.require();
    let redis = RedisServer::start();
    let gw = Sundial::start(&SundialConfig::new(redis.url()));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let dir = tempfile::tempdir().expect("temp dir");
    let scratch = dir.path();

    let p = run(
        lang.command("producer", &["10"], scratch),
        &gw,
        &token,
        &[],
        scratch,
        "producer",
        Duration::from_secs(120),
    );
    assert_eq!(p.code, Some(0), "{p:?}");
    let published = p.lines("published");
    assert_eq!(published.len(), 10, "{p:?}");
    // n -> job id, in publishing order.
    let mut ids = BTreeMap::new();
    for (i, line) in published.iter().enumerate() {
        assert_eq!(line.len(), 3, "published <id> n=<n>: {p:?}");
        assert_eq!(line[1].len(), 26, "a job id: {p:?}");
        assert_eq!(line[2], format!("n={}", i + 1), "{p:?}");
        ids.insert(i + 1, line[1].to_owned());
    }
    let failing = [ids[&5].clone(), ids[&10].clone()];

    let w = run(
        lang.command("worker", &[], scratch),
        &gw,
        &token,
        &[
            ("SUNDIAL_TTR", "1"),
            ("SUNDIAL_POLL", "1"),
            ("SUNDIAL_EXIT_AFTER", "10"),
            ("SUNDIAL_EXIT_IDLE", "30"),
        ],
        scratch,
        "worker",
        Duration::from_secs(120),
    );
    assert_eq!(w.code, Some(0), "{w:?}");
    assert_eq!(
        w.stdout.lines().last(),
        Some("summary acked=8 dead=2"),
        "{w:?}"
    );

    // The eight good jobs, each acked once.
    let acked: BTreeSet<(String, String)> = w
        .lines("acked")
        .iter()
        .map(|l| (l[1].to_owned(), l[2..].join(" ")))
        .collect();
    let expected: BTreeSet<(String, String)> = ids
        .iter()
        .filter(|&(n, _)| n % 5 != 0)
        .map(|(n, id)| (id.clone(), format!("n={n}")))
        .collect();
    assert_eq!(w.lines("acked").len(), 8, "{w:?}");
    assert_eq!(acked, expected, "{w:?}");

    // The long job, held past its TTR by touches: acked once (above), by
    // the delivery that got it first.
    let touched = w.lines("touched");
    assert!(touched.len() >= 3, "touched every third of a TTR: {w:?}");
    assert!(
        touched.iter().all(|l| l[1] == ids[&7] && l[2] == "n=7"),
        "{w:?}"
    );
    assert!(w.lines("lost").is_empty(), "{w:?}");

    // The two failing jobs, each delivered twice: one try left, then none.
    let failed = w.lines("failed");
    assert_eq!(failed.len(), 4, "{w:?}");
    for (id, n) in [(&failing[0], 5), (&failing[1], 10)] {
        let tries: Vec<&str> = failed
            .iter()
            .filter(|l| l[1] == id.as_str())
            .map(|l| {
                assert_eq!(l[2], format!("n={n}"), "{w:?}");
                l[3]
            })
            .collect();
        assert_eq!(tries, ["remain_tries=1", "remain_tries=0"], "{id}: {w:?}");
    }

    // The dead letter, as the worker saw it grow: its last size is 2 and its
    // head one of the failing jobs.
    let dead = w.lines("dead");
    let last = dead.last().unwrap_or_else(|| panic!("a dead line: {w:?}"));
    assert_eq!(last[1], "2", "{w:?}");
    let head = last[2].strip_prefix("head=").expect("head=<id>");
    assert!(failing.iter().any(|id| id == head), "{w:?}");

    // What the API says, independently of the worker's account.
    let r = api.get("/api/ns/q/deadletter/size").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["size"], 2, "{r:?}");
    let r = api.get("/api/ns/q/size").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["size"], 0, "{r:?}");
    let r = api.get("/api/ns/q/stats").await;
    for (state, n) in [("ready", 0), ("delayed", 0), ("reserved", 0), ("dead", 2)] {
        assert_eq!(r.json[state], n, "{state}: {r:?}");
    }
    for (n, id) in &ids {
        let r = api.get(&format!("/api/ns/q/job/{id}")).await;
        if n % 5 == 0 {
            assert_eq!(r.status, 200, "a dead job still exists: {r:?}");
            assert_eq!(r.json["remain_tries"], 0, "{r:?}");
            assert_eq!(r.json["reason"], "asked to fail", "{r:?}");
            assert_eq!(r.json["delivery"], 2, "{r:?}");
        } else {
            assert_eq!(r.status, 404, "acked job n={n} is gone: {r:?}");
            assert_eq!(r.json["error"], "job not found", "{r:?}");
        }
    }
    // And what Redis holds: the two dead jobs' records, nothing else.
    assert_eq!(redis.job_records(), 2);
}
