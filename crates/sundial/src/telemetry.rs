//! Logs and the metrics recorder.

use metrics::Unit;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::LogConfig;

/// Installs the tracing subscriber: `RUST_LOG` if set, else `log.level`;
/// text or JSON lines on stderr.
pub fn init_logs(cfg: &LogConfig) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&cfg.level));
    let registry = tracing_subscriber::registry().with(filter);
    if cfg.format == "json" {
        registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .init();
    } else {
        // Colours only on a terminal: log files and collectors get plain text.
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        registry
            .with(fmt::layer().with_ansi(ansi).with_writer(std::io::stderr))
            .init();
    }
}

/// Installs the Prometheus recorder and returns the handle `/metrics` renders;
/// per-queue series (`sundial_core::series`) go once idle for `idle`
/// (`None`: never).
pub fn init_metrics(idle: Option<std::time::Duration>) -> anyhow::Result<PrometheusHandle> {
    sundial_core::series::set_idle(idle);
    let handle = PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0,
        ])?
        .install_recorder()?;
    describe();
    metrics::gauge!(
        "sundial_build_info",
        "version" => env!("CARGO_PKG_VERSION"),
        "commit" => sundial_gateway::BUILD_COMMIT
    )
    .set(1.0);
    Ok(handle)
}

/// The `# HELP` text of metric `name` (for the per-queue series, which
/// `/metrics` renders after the exporter's).
pub fn help(name: &str) -> &'static str {
    METRICS.iter().find(|m| m.1 == name).map_or("", |m| m.3)
}

/// Gives every metric its `# HELP` text and unit. docs/METRICS.md says more
/// (labels, how to aggregate); a test checks that every metric the binary
/// exports is described here.
fn describe() {
    for &(kind, name, unit, help) in METRICS {
        metrics::with_recorder(|r| match kind {
            Kind::Counter => r.describe_counter(name.into(), unit, help.into()),
            Kind::Gauge => r.describe_gauge(name.into(), unit, help.into()),
            Kind::Histogram => r.describe_histogram(name.into(), unit, help.into()),
        });
    }
}

/// What a metric is, for [`describe`].
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric the binary exports: its kind, name, unit and help text.
const METRICS: &[(Kind, &str, Option<Unit>, &str)] = &[
    (
        Kind::Gauge,
        "sundial_queue_jobs",
        None,
        "Live jobs of a queue in a state (ready, delayed, reserved, dead), in the slots this process pumps",
    ),
    (
        Kind::Gauge,
        "sundial_queue_oldest_ready_seconds",
        Some(Unit::Seconds),
        "How long a queue's next ready job has been ready (since published, due, retried or respawned), in the slots this process pumps",
    ),
    (
        Kind::Gauge,
        "sundial_namespace_jobs",
        None,
        "Jobs a namespace holds in every state, in the slots this process pumps",
    ),
    (
        Kind::Gauge,
        "sundial_namespace_bytes",
        None,
        "Bytes a namespace's jobs hold (ids and records, bodies included), in the slots this process pumps",
    ),
    (
        Kind::Gauge,
        "sundial_namespace_queues",
        None,
        "Queues a namespace uses (its queue index), as this gateway's last sweep of the index found",
    ),
    (
        Kind::Gauge,
        "sundial_queue_paused",
        None,
        "1 while a queue is paused itself (its consumers get no job), 0 once it resumed",
    ),
    (
        Kind::Gauge,
        "sundial_namespace_paused",
        None,
        "1 while a whole namespace is paused (no queue of it gives jobs), 0 once it resumed",
    ),
    (
        Kind::Gauge,
        "sundial_consumers_waiting",
        None,
        "Consumers in a long poll on this gateway now",
    ),
    (
        Kind::Counter,
        "sundial_http_requests_total",
        None,
        "HTTP requests answered, by route template, method and status",
    ),
    (
        Kind::Histogram,
        "sundial_http_request_duration_seconds",
        Some(Unit::Seconds),
        "Time to answer an HTTP request, by route template, method and status",
    ),
    (
        Kind::Gauge,
        "sundial_http_connections",
        None,
        "Open HTTP connections, by listener",
    ),
    (
        Kind::Counter,
        "sundial_http_connections_closed_total",
        None,
        "HTTP connections the gateway closed: a timer passed (idle, header_timeout), or to let a new client in on a full listener (room)",
    ),
    (
        Kind::Counter,
        "sundial_admin_login_failures_total",
        None,
        "Admin requests whose basic-auth credentials were wrong",
    ),
    (
        Kind::Counter,
        "sundial_admin_logins_refused_total",
        None,
        "Admin requests refused with 429: their user had too many failed logins from their address within a minute",
    ),
    (
        Kind::Counter,
        "sundial_rate_limited_total",
        None,
        "Requests refused by a token's rate limit",
    ),
    (
        Kind::Counter,
        "sundial_quota_refusals_total",
        None,
        "Requests refused by a namespace quota, by quota",
    ),
    (
        Kind::Histogram,
        "sundial_redis_script_seconds",
        Some(Unit::Seconds),
        "Time of each Redis script call, network included",
    ),
    (
        Kind::Histogram,
        "sundial_replica_wait_seconds",
        Some(Unit::Seconds),
        "On a shard with wait: how long a publish waited for its replicas",
    ),
    (
        Kind::Counter,
        "sundial_replica_waits_total",
        None,
        "On a shard with wait: publishes whose writes the replicas confirmed in time, or not",
    ),
    (
        Kind::Counter,
        "sundial_jobs_published_total",
        None,
        "Jobs published (a bulk publish counts each job)",
    ),
    (
        Kind::Counter,
        "sundial_jobs_consumed_total",
        None,
        "Jobs delivered to consumers",
    ),
    (
        Kind::Counter,
        "sundial_jobs_acked_total",
        None,
        "Jobs acknowledged or cancelled by id",
    ),
    (
        Kind::Counter,
        "sundial_jobs_deleted_total",
        None,
        "Jobs deleted in bulk: queue destroy, dead-letter delete",
    ),
    (
        Kind::Counter,
        "sundial_jobs_respawned_total",
        None,
        "Dead jobs respawned",
    ),
    (
        Kind::Counter,
        "sundial_pump_jobs_total",
        None,
        "Jobs the pumps moved: made ready, retried after TTR, sent to the dead letter, expired",
    ),
    (
        Kind::Histogram,
        "sundial_job_first_delivery_seconds",
        Some(Unit::Seconds),
        "From publish to a job's first delivery, delay included (shard clock)",
    ),
    (
        Kind::Gauge,
        "sundial_pump_leases_held",
        None,
        "Slot pump leases this process holds",
    ),
    (
        Kind::Counter,
        "sundial_pump_leases_acquired_total",
        None,
        "Slot pump leases this process took",
    ),
    (
        Kind::Counter,
        "sundial_pump_leases_lost_total",
        None,
        "Slot pump leases this process held and lost without giving them up",
    ),
    (
        Kind::Gauge,
        "sundial_pump_lag_seconds",
        Some(Unit::Seconds),
        "How late this process's most behind slot found its oldest due job at its last pump call",
    ),
    (
        Kind::Histogram,
        "sundial_pump_lateness_seconds",
        Some(Unit::Seconds),
        "How late pump calls found the earliest due entry they handled",
    ),
    (
        Kind::Counter,
        "sundial_schedule_fires_total",
        None,
        "Fires of a queue's schedules: a job published, a fire missed and skipped, a fire whose job's idempotency key named a job already, or a fire its namespace's quota refused",
    ),
    (
        Kind::Histogram,
        "sundial_schedule_fire_lateness_seconds",
        Some(Unit::Seconds),
        "How long after it was due each schedule's fire published its job (0 when written ahead)",
    ),
    (
        Kind::Gauge,
        "sundial_build_info",
        None,
        "Always 1: the build's version and commit, as labels",
    ),
    (
        Kind::Counter,
        "sundial_reloads_total",
        None,
        "Config reloads, by result",
    ),
    (
        Kind::Gauge,
        "sundial_shard_up",
        None,
        "1 while the shard answers this process's probe, else 0",
    ),
    (
        Kind::Gauge,
        "sundial_shard_primaries_down",
        None,
        "Primaries of a cluster shard that do not answer (their hash slots fail; the others serve)",
    ),
    (
        Kind::Counter,
        "sundial_shard_data_lost_total",
        None,
        "Times the shard was found without Sundial's metadata (restarted without its data, or flushed)",
    ),
    (
        Kind::Gauge,
        "sundial_drain_slots_pending",
        None,
        "Moved slots whose old shard still holds jobs",
    ),
    (
        Kind::Gauge,
        "sundial_drain_jobs_left",
        None,
        "Jobs still at the old shards of moved slots, with the jobs in transit at those slots' other places",
    ),
    (
        Kind::Counter,
        "sundial_mover_jobs_total",
        None,
        "Jobs whose move this gateway's mover completed (copied to their new place, let go at the old shard)",
    ),
    (
        Kind::Gauge,
        "sundial_mover_slots",
        None,
        "Slots this gateway's mover is moving now",
    ),
    (
        Kind::Counter,
        "sundial_namespace_moved_jobs_total",
        None,
        "Jobs of a namespace moving to another pool that this gateway's mover carried out of the pool",
    ),
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// docs/METRICS.md's tables and this binary's metrics are the same set:
    /// a documented metric exists (so a dashboard or alert that uses one,
    /// which `tests/tests/e2e/deploy.rs` holds to the docs, names a real
    /// metric), and every metric is documented.
    #[test]
    fn the_documented_metrics_are_the_exported_ones() {
        let docs = include_str!("../../../docs/METRICS.md");
        let documented: BTreeSet<&str> = docs
            .lines()
            .filter_map(|l| l.strip_prefix("| `sundial_"))
            .filter_map(|l| l.split_once('`'))
            .map(|(name, _)| name)
            .collect();
        let exported: BTreeSet<&str> = super::METRICS
            .iter()
            .map(|(_, name, _, _)| name.strip_prefix("sundial_").expect("prefix"))
            .collect();
        assert!(exported.len() >= 30, "{exported:?}");
        assert_eq!(documented, exported);
    }
}
