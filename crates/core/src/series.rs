//! Per-queue metric series, in a registry of their own beside the `metrics`
//! exporter, so that a queue's series go once nothing updated them for a
//! while (config `metrics.idle_series_secs`): a tenant that names queues
//! per end user would otherwise grow every process's memory and
//! Prometheus without bound. The exporter can only drop idle series by
//! kind, which would drop rare fixed counters too (and `increase()` misses
//! the first count of a series that comes back), so the per-queue series
//! live here and `/metrics` renders them after the exporter's text
//! ([`render`]).
//!
//! A caller keeps a [`Handle`] (no labels built per event); a handle whose
//! series went registers it again on its next use, from 0 (Prometheus
//! reads a counter that starts again as a reset).

use std::{
    collections::HashMap,
    fmt::Write as _,
    sync::{
        Arc, LazyLock, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Instant,
};

/// What a series counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Counter,
    Gauge,
    /// With these bucket bounds (seconds).
    Histogram(&'static [f64]),
}

type Labels = Vec<(&'static str, String)>;

/// One series: its value, and when it was last updated.
#[derive(Debug)]
pub struct Series {
    kind: Kind,
    /// Counter: the count; gauge: the value's bits; histogram: the count.
    value: AtomicU64,
    /// Histogram: per bucket (not cumulative), then the sum's bits.
    buckets: Vec<AtomicU64>,
    sum: AtomicU64,
    touched: AtomicU64,
    live: AtomicBool,
}

impl Series {
    fn new(kind: Kind) -> Self {
        let n = match kind {
            Kind::Histogram(bounds) => bounds.len() + 1,
            _ => 0,
        };
        Self {
            kind,
            value: AtomicU64::new(0),
            buckets: (0..n).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0f64.to_bits()),
            touched: AtomicU64::new(now_ms()),
            live: AtomicBool::new(true),
        }
    }

    fn touch(&self) {
        self.touched.store(now_ms(), Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    name: &'static str,
    labels: Labels,
}

/// A kept reference to one series, made again if its series went.
#[derive(Debug)]
pub struct Handle {
    key: Key,
    kind: Kind,
    series: RwLock<Arc<Series>>,
}

impl Handle {
    /// A handle on the series `name{labels}` (registered on first update).
    pub fn new(name: &'static str, labels: &[(&'static str, String)], kind: Kind) -> Self {
        let key = Key {
            name,
            labels: labels.to_vec(),
        };
        let series = RwLock::new(series(&key, kind));
        Self { key, kind, series }
    }

    fn live(&self) -> Arc<Series> {
        let s = self
            .series
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if s.live.load(Ordering::Relaxed) {
            return s;
        }
        let fresh = series(&self.key, self.kind);
        *self.series.write().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
        fresh
    }

    /// Adds `n` to a counter.
    pub fn increment(&self, n: u64) {
        let s = self.live();
        s.value.fetch_add(n, Ordering::Relaxed);
        s.touch();
    }

    /// Sets a gauge.
    pub fn set(&self, v: f64) {
        let s = self.live();
        s.value.store(v.to_bits(), Ordering::Relaxed);
        s.touch();
    }

    /// Records one observation of a histogram.
    pub fn record(&self, v: f64) {
        let s = self.live();
        if let Kind::Histogram(bounds) = s.kind {
            let i = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
            s.buckets[i].fetch_add(1, Ordering::Relaxed);
            s.value.fetch_add(1, Ordering::Relaxed);
            let _ = s
                .sum
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                    Some((f64::from_bits(bits) + v).to_bits())
                });
        }
        s.touch();
    }
}

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
/// After how long without an update a series goes (ms; `u64::MAX`: never).
static IDLE_MS: AtomicU64 = AtomicU64::new(u64::MAX);
static REGISTRY: LazyLock<RwLock<HashMap<Key, Arc<Series>>>> = LazyLock::new(RwLock::default);

/// This process's clock for [`idle_since`], in ms.
pub fn now_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64
}

/// Whether something last used at `used` ([`now_ms`]) is idle: unused for
/// the idle time.
pub fn idle_since(used: u64) -> bool {
    now_ms().saturating_sub(used) >= IDLE_MS.load(Ordering::Relaxed)
}

/// Sets after how long without an update a series goes (`None`: never).
pub fn set_idle(idle: Option<std::time::Duration>) {
    let ms = idle.map_or(u64::MAX, |d| d.as_millis() as u64);
    IDLE_MS.store(ms, Ordering::Relaxed);
}

fn series(key: &Key, kind: Kind) -> Arc<Series> {
    if let Some(s) = REGISTRY.read().unwrap_or_else(|p| p.into_inner()).get(key) {
        return s.clone();
    }
    // A process that is never scraped drops idle series here too.
    if idle_since(EXPIRED.load(Ordering::Relaxed)) {
        expire();
    }
    REGISTRY
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key.clone())
        .or_insert_with(|| Arc::new(Series::new(kind)))
        .clone()
}

/// When idle series were last dropped ([`now_ms`]).
static EXPIRED: AtomicU64 = AtomicU64::new(0);

/// Drops the series idle for longer than the idle time; returns how many
/// are left.
pub fn expire() -> usize {
    EXPIRED.store(now_ms(), Ordering::Relaxed);
    let mut all = REGISTRY.write().unwrap_or_else(|p| p.into_inner());
    all.retain(|_, s| {
        let keep = !idle_since(s.touched.load(Ordering::Relaxed));
        if !keep {
            s.live.store(false, Ordering::Relaxed);
        }
        keep
    });
    all.len()
}

/// The series in Prometheus's text format, each metric under its `# HELP`
/// (from `help`) and `# TYPE` lines, after dropping idle ones.
pub fn render(help: impl Fn(&str) -> &'static str) -> String {
    expire();
    let all = REGISTRY.read().unwrap_or_else(|p| p.into_inner());
    let mut by_name: Vec<(&Key, &Arc<Series>)> = all.iter().collect();
    by_name.sort_by(|a, b| (a.0.name, &a.0.labels).cmp(&(b.0.name, &b.0.labels)));
    let mut out = String::new();
    let mut last = "";
    for (key, s) in by_name {
        if key.name != last {
            last = key.name;
            let kind = match s.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram(_) => "histogram",
            };
            let _ = writeln!(
                out,
                "# HELP {} {}\n# TYPE {} {kind}",
                key.name,
                help(key.name),
                key.name
            );
        }
        line(&mut out, key, s);
    }
    out
}

fn labels(labels: &Labels, le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    format!("{{{}}}", parts.join(","))
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn line(out: &mut String, key: &Key, s: &Series) {
    let value = s.value.load(Ordering::Relaxed);
    match s.kind {
        Kind::Counter => {
            let _ = writeln!(out, "{}{} {value}", key.name, labels(&key.labels, None));
        }
        Kind::Gauge => {
            let v = f64::from_bits(value);
            let _ = writeln!(out, "{}{} {v}", key.name, labels(&key.labels, None));
        }
        Kind::Histogram(bounds) => {
            let mut seen = 0;
            for (i, b) in bounds.iter().enumerate() {
                seen += s.buckets[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "{}_bucket{} {seen}",
                    key.name,
                    labels(&key.labels, Some(&b.to_string()))
                );
            }
            seen += s.buckets[bounds.len()].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{}_bucket{} {seen}",
                key.name,
                labels(&key.labels, Some("+Inf"))
            );
            let sum = f64::from_bits(s.sum.load(Ordering::Relaxed));
            let _ = writeln!(out, "{}_sum{} {sum}", key.name, labels(&key.labels, None));
            let _ = writeln!(
                out,
                "{}_count{} {seen}",
                key.name,
                labels(&key.labels, None)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_render_and_go_once_idle_and_a_kept_handle_registers_again() {
        let q = |queue: &str| vec![("queue", queue.to_owned())];
        let c = Handle::new("test_jobs_total", &q("a"), Kind::Counter);
        c.increment(2);
        let g = Handle::new("test_backlog", &q("a"), Kind::Gauge);
        g.set(1.5);
        const B: &[f64] = &[0.1, 1.0];
        let h = Handle::new("test_seconds", &q("a"), Kind::Histogram(B));
        h.record(0.05);
        h.record(0.5);
        h.record(5.0);
        let text = render(|_| "help");
        assert!(
            text.contains("# TYPE test_jobs_total counter\ntest_jobs_total{queue=\"a\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("test_backlog{queue=\"a\"} 1.5\n"), "{text}");
        for want in [
            "test_seconds_bucket{queue=\"a\",le=\"0.1\"} 1\n",
            "test_seconds_bucket{queue=\"a\",le=\"1\"} 2\n",
            "test_seconds_bucket{queue=\"a\",le=\"+Inf\"} 3\n",
            "test_seconds_sum{queue=\"a\"} 5.55\n",
            "test_seconds_count{queue=\"a\"} 3\n",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        set_idle(Some(std::time::Duration::from_millis(30)));
        std::thread::sleep(std::time::Duration::from_millis(50));
        g.set(2.0);
        let text = render(|_| "help");
        assert!(!text.contains("test_jobs_total"), "idle series go: {text}");
        assert!(text.contains("test_backlog{queue=\"a\"} 2\n"), "{text}");
        c.increment(1);
        let text = render(|_| "help");
        assert!(
            text.contains("test_jobs_total{queue=\"a\"} 1\n"),
            "back from 0: {text}"
        );
        set_idle(None);
    }
}
