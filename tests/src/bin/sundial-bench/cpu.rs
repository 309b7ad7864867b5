//! CPU time of the gateway and of Redis, per request and per job.

/// CPU time of the gateway process and of Redis over a measurement.
pub(crate) struct CpuMeter {
    pub(crate) gateway: Option<u32>,
    pub(crate) redis: Option<String>,
}

/// CPU seconds used so far (gateway, Redis), and the script calls Redis
/// has served (`EVALSHA`).
pub(crate) type CpuSample = (Option<f64>, Option<f64>, Option<u64>);

impl CpuMeter {
    /// `redis` may name several Redis servers, separated by commas (the
    /// masters of a cluster): their figures are summed.
    pub(crate) fn sample(&self) -> CpuSample {
        (
            self.gateway.and_then(process_cpu),
            self.redis.as_deref().and_then(|r| sum(r, redis_cpu)),
            self.redis.as_deref().and_then(|r| sum(r, script_calls)),
        )
    }

    /// "gateway CPU … µs/request; Redis CPU … µs/job; … script calls/job"
    /// since `before`.
    pub(crate) fn report(&self, before: CpuSample, requests: u64, jobs: u64) -> String {
        let after = self.sample();
        let per = |b: Option<f64>, a: Option<f64>, n: u64| match (b, a) {
            (Some(b), Some(a)) if n > 0 => format!("{:.1}", (a - b) * 1e6 / n as f64),
            _ => "n/a".to_owned(),
        };
        let calls = match (before.2, after.2) {
            (Some(b), Some(a)) if jobs > 0 => format!("{:.2}", (a - b) as f64 / jobs as f64),
            _ => "n/a".to_owned(),
        };
        format!(
            "gateway CPU {} µs/request ({requests} requests); Redis CPU {} µs/job; {calls} script calls/job",
            per(before.0, after.0, requests),
            per(before.1, after.1, jobs),
        )
    }
}

impl CpuMeter {
    /// "gateway … % of a core; Redis … % of a core" since `before`, over
    /// `secs` seconds.
    pub(crate) fn share(&self, before: CpuSample, secs: f64) -> String {
        let after = self.sample();
        let pct = |b: Option<f64>, a: Option<f64>| match (b, a) {
            (Some(b), Some(a)) => format!("{:.1}", (a - b) * 100.0 / secs),
            _ => "n/a".to_owned(),
        };
        format!(
            "gateway CPU {}% of a core; Redis CPU {}% of a core",
            pct(before.0, after.0),
            pct(before.1, after.1),
        )
    }
}

/// `each` of every comma-separated URL of `urls`, summed; `None` if one
/// cannot be read.
fn sum<T: std::iter::Sum>(urls: &str, each: fn(&str) -> Option<T>) -> Option<T> {
    urls.split(',').map(each).sum()
}

/// User plus system CPU seconds of a process, from `/proc/<pid>/stat`.
fn process_cpu(pid: u32) -> Option<f64> {
    // Linux reports these in clock ticks of USER_HZ, 100 on every mainstream
    // architecture.
    const TICKS_PER_SEC: f64 = 100.0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), from field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SEC)
}

/// The `EVALSHA` calls a Redis has served (`INFO commandstats`).
fn script_calls(url: &str) -> Option<u64> {
    let mut c = redis::Client::open(url).ok()?.get_connection().ok()?;
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut c).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))?
        .split(',')
        .next()?
        .parse()
        .ok()
}

/// `used_cpu_user` plus `used_cpu_sys` of a Redis, in seconds.
fn redis_cpu(url: &str) -> Option<f64> {
    let mut c = redis::Client::open(url).ok()?.get_connection().ok()?;
    let info: String = redis::cmd("INFO").arg("cpu").query(&mut c).ok()?;
    let field = |name: &str| -> Option<f64> {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?
            .trim()
            .parse()
            .ok()
    };
    Some(field("used_cpu_user")? + field("used_cpu_sys")?)
}

/// Calls and microseconds per command, summed over every Redis of `urls`
/// (`INFO commandstats`); empty if one cannot be read.
pub(crate) fn command_times(urls: &str) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut out = std::collections::BTreeMap::new();
    for url in urls.split(',') {
        let Some(info) = redis::Client::open(url)
            .and_then(|c| c.get_connection())
            .and_then(|mut c| {
                redis::cmd("INFO")
                    .arg("commandstats")
                    .query::<String>(&mut c)
            })
            .ok()
        else {
            return std::collections::BTreeMap::new();
        };
        for line in info.lines() {
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let field = |k: &str| -> u64 {
                rest.split(',')
                    .find_map(|f| f.strip_prefix(k))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            let e = out.entry(name.to_owned()).or_insert((0, 0));
            e.0 += field("calls=");
            e.1 += field("usec=");
        }
    }
    out
}

/// The `n` commands that took Redis longest between two readings of
/// [`command_times`]: "name calls=… ms=…", longest first.
pub(crate) fn top_commands(
    before: &std::collections::BTreeMap<String, (u64, u64)>,
    after: &std::collections::BTreeMap<String, (u64, u64)>,
    n: usize,
) -> String {
    let mut d: Vec<(&String, u64, u64)> = after
        .iter()
        .map(|(k, (c, u))| {
            let (bc, bu) = before.get(k).copied().unwrap_or((0, 0));
            (k, c.saturating_sub(bc), u.saturating_sub(bu))
        })
        .collect();
    d.sort_by_key(|e| std::cmp::Reverse(e.2));
    d.iter()
        .take(n)
        .map(|(k, c, u)| format!("{k} calls={c} ms={}", u / 1000))
        .collect::<Vec<_>>()
        .join("; ")
}
