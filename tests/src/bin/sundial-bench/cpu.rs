//! CPU time of the gateway and of Redis, per request and per job, and
//! whether an AOF rewrite, or the host's steal of this machine's cores,
//! overlapped the measurement.

/// CPU time of the gateway process and of Redis over a measurement.
pub(crate) struct CpuMeter {
    pub(crate) gateway: Option<u32>,
    pub(crate) redis: Option<String>,
}

/// CPU seconds used so far by the gateway and by Redis, the script calls
/// Redis has served (`EVALSHA`), and its AOF rewrites.
#[derive(Clone)]
pub(crate) struct CpuSample {
    gateway: Option<f64>,
    pub(crate) redis: Option<f64>,
    calls: Option<u64>,
    rewrites: Option<Rewrites>,
    steal: Option<Vec<u64>>,
}

/// The AOF rewrites of Redis so far (`INFO persistence`), summed over
/// servers: those started, whether one is running, and the CPU seconds of
/// Redis's children that ended (a rewrite's own process, or an RDB save
/// for a replica; they run on Redis's core and so take from it and from
/// the load generator).
#[derive(Clone, Copy)]
struct Rewrites {
    done: u64,
    running: bool,
    child_cpu: f64,
}

impl CpuMeter {
    /// `redis` may name several Redis servers, separated by commas (the
    /// masters of a cluster): their figures are summed.
    pub(crate) fn sample(&self) -> CpuSample {
        let redis = self.redis.as_deref();
        CpuSample {
            gateway: self.gateway.and_then(process_cpu),
            redis: redis.and_then(|r| sum(r, redis_cpu)),
            calls: redis.and_then(|r| sum(r, script_calls)),
            rewrites: redis.and_then(rewrites),
            steal: steal(),
        }
    }

    /// "gateway CPU … µs/request; Redis CPU … µs/job; … script calls/job"
    /// since `before`, and "; an AOF rewrite ran" if one ran in between:
    /// a rewrite costs a round much of its rate, so a reader must be able
    /// to tell those rounds apart; and the host's steal in between
    /// ([`steal_note`]).
    pub(crate) fn report(&self, before: CpuSample, requests: u64, jobs: u64) -> String {
        let after = self.sample();
        let per = |b: Option<f64>, a: Option<f64>, n: u64| match (b, a) {
            (Some(b), Some(a)) if n > 0 => format!("{:.1}", (a - b) * 1e6 / n as f64),
            _ => "n/a".to_owned(),
        };
        let calls = match (before.calls, after.calls) {
            (Some(b), Some(a)) if jobs > 0 => format!("{:.2}", (a - b) as f64 / jobs as f64),
            _ => "n/a".to_owned(),
        };
        format!(
            "gateway CPU {} µs/request ({requests} requests); Redis CPU {} µs/job; {calls} script calls/job{}{}",
            per(before.gateway, after.gateway, requests),
            per(before.redis, after.redis, jobs),
            rewrite_note(before.rewrites, after.rewrites),
            steal_note(before.steal.as_deref(), after.steal.as_deref()),
        )
    }
}

/// "; an AOF rewrite ran" if one ran between the two readings, with the
/// CPU of Redis's children that ended in between (Redis counts a child's
/// CPU when it ends), else nothing.
fn rewrite_note(before: Option<Rewrites>, after: Option<Rewrites>) -> String {
    let (Some(b), Some(a)) = (before, after) else {
        return String::new();
    };
    if a.done == b.done && !a.running && !b.running {
        return String::new();
    }
    let cpu = a.child_cpu - b.child_cpu;
    if cpu < 0.05 {
        return "; an AOF rewrite ran".to_owned();
    }
    format!("; an AOF rewrite ran ({cpu:.1} s of CPU in Redis's children that ended)")
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
            "gateway CPU {}% of a core; Redis CPU {}% of a core{}{}",
            pct(before.gateway, after.gateway),
            pct(before.redis, after.redis),
            rewrite_note(before.rewrites, after.rewrites),
            steal_note(before.steal.as_deref(), after.steal.as_deref()),
        )
    }
}

/// The time each core of this machine was ready to run but the host (a
/// hypervisor) ran something else, so far, in clock ticks (`steal`, the
/// eighth figure of each `cpuN` line of `/proc/stat`); `None` where the
/// file cannot be read.
fn steal() -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| l.split_whitespace().nth(8)?.parse().ok())
        .collect()
}

/// "; the host took … ms from core 0, … ms from core 1 (steal)" when
/// it took any between the two readings, else nothing. A virtual
/// machine's cores are stopped for that long, in pieces of up to tens of
/// milliseconds, whatever runs on them: latencies measured then are the
/// host's as much as the service's.
fn steal_note(before: Option<&[u64]>, after: Option<&[u64]>) -> String {
    let (Some(b), Some(a)) = (before, after) else {
        return String::new();
    };
    // Clock ticks of USER_HZ (100 a second), as in `process_cpu`.
    const MS_PER_TICK: u64 = 10;
    let taken: Vec<String> = b
        .iter()
        .zip(a)
        .enumerate()
        .filter(|(_, (b, a))| a > b)
        .map(|(core, (b, a))| format!("{} ms from core {core}", (a - b) * MS_PER_TICK))
        .collect();
    if taken.is_empty() {
        return String::new();
    }
    format!("; the host took {} (steal)", taken.join(", "))
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
    info(url, "commandstats")?
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))?
        .split(',')
        .next()?
        .parse()
        .ok()
}

/// A section of `INFO` of a Redis.
fn info(url: &str, section: &str) -> Option<String> {
    let mut c = redis::Client::open(url).ok()?.get_connection().ok()?;
    redis::cmd("INFO").arg(section).query(&mut c).ok()
}

/// The field `name` of an `INFO` answer.
fn info_field<T: std::str::FromStr>(info: &str, name: &str) -> Option<T> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?
        .trim()
        .parse()
        .ok()
}

/// `used_cpu_user` plus `used_cpu_sys` of a Redis, in seconds.
fn redis_cpu(url: &str) -> Option<f64> {
    let info = info(url, "cpu")?;
    Some(info_field::<f64>(&info, "used_cpu_user")? + info_field::<f64>(&info, "used_cpu_sys")?)
}

/// The AOF rewrites of every Redis of `urls`, summed.
fn rewrites(urls: &str) -> Option<Rewrites> {
    let mut sum = Rewrites {
        done: 0,
        running: false,
        child_cpu: 0.0,
    };
    for url in urls.split(',') {
        let persistence = info(url, "persistence")?;
        let cpu = info(url, "cpu")?;
        sum.done += info_field::<u64>(&persistence, "aof_rewrites")?;
        sum.running |= info_field::<u8>(&persistence, "aof_rewrite_in_progress")? == 1;
        sum.child_cpu += info_field::<f64>(&cpu, "used_cpu_user_children")?
            + info_field::<f64>(&cpu, "used_cpu_sys_children")?;
    }
    Some(sum)
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
