//! Logs and the metrics recorder.

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

/// Installs the Prometheus recorder and returns the handle `/metrics` renders.
pub fn init_metrics() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0,
        ])?
        // Publish to first delivery includes delays: seconds to a day.
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(
                "sundial_job_first_delivery_seconds".to_owned(),
            ),
            &[
                0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
                21600.0, 86400.0,
            ],
        )?
        .install_recorder()?;
    describe();
    Ok(handle)
}

/// Gives every metric its `# HELP` text and unit. docs/METRICS.md says more
/// (labels, how to aggregate); a test checks that every metric the binary
/// exports is described here.
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        "sundial_queue_jobs",
        "Live jobs of a queue in a state (ready, delayed, reserved, dead), in the slots this process pumps"
    );
    describe_gauge!(
        "sundial_consumers_waiting",
        "Consumers in a long poll on this gateway now"
    );
    describe_counter!(
        "sundial_http_requests_total",
        "HTTP requests answered, by route template, method and status"
    );
    describe_histogram!(
        "sundial_http_request_duration_seconds",
        Unit::Seconds,
        "Time to answer an HTTP request, by route template, method and status"
    );
    describe_gauge!(
        "sundial_http_connections",
        "Open HTTP connections, by listener"
    );
    describe_counter!(
        "sundial_http_connections_closed_total",
        "HTTP connections the gateway closed because a timer passed (idle, header timeout)"
    );
    describe_counter!(
        "sundial_rate_limited_total",
        "Requests refused by a token's rate limit"
    );
    describe_histogram!(
        "sundial_redis_script_seconds",
        Unit::Seconds,
        "Time of each Redis script call, network included"
    );
    describe_histogram!(
        "sundial_replica_wait_seconds",
        Unit::Seconds,
        "On a shard with wait: how long a publish waited for its replicas"
    );
    describe_counter!(
        "sundial_replica_waits_total",
        "On a shard with wait: publishes whose writes the replicas confirmed in time, or not"
    );
    describe_counter!(
        "sundial_jobs_published_total",
        "Jobs published (a bulk publish counts each job)"
    );
    describe_counter!("sundial_jobs_consumed_total", "Jobs delivered to consumers");
    describe_counter!(
        "sundial_jobs_acked_total",
        "Jobs acknowledged or cancelled by id"
    );
    describe_counter!(
        "sundial_jobs_deleted_total",
        "Jobs deleted in bulk: queue destroy, dead-letter delete"
    );
    describe_counter!("sundial_jobs_respawned_total", "Dead jobs respawned");
    describe_counter!(
        "sundial_pump_jobs_total",
        "Jobs the pumps moved: made ready, retried after TTR, sent to the dead letter, expired"
    );
    describe_histogram!(
        "sundial_job_first_delivery_seconds",
        Unit::Seconds,
        "From publish to a job's first delivery, delay included (shard clock)"
    );
    describe_gauge!(
        "sundial_pump_leases_held",
        "Slot pump leases this process holds"
    );
    describe_counter!(
        "sundial_pump_leases_acquired_total",
        "Slot pump leases this process took"
    );
    describe_counter!(
        "sundial_pump_leases_lost_total",
        "Slot pump leases this process held and lost without giving them up"
    );
    describe_gauge!(
        "sundial_pump_lag_seconds",
        Unit::Seconds,
        "How late this process's most behind slot found its oldest due job at its last pump call"
    );
    describe_histogram!(
        "sundial_pump_lateness_seconds",
        Unit::Seconds,
        "How late pump calls found the earliest due entry they handled"
    );
    describe_counter!("sundial_reloads_total", "Config reloads, by result");
    describe_gauge!(
        "sundial_shard_up",
        "1 while the shard answers this process's probe, else 0"
    );
    describe_counter!(
        "sundial_shard_data_lost_total",
        "Times the shard was found without Sundial's metadata (restarted without its data, or flushed)"
    );
    describe_gauge!(
        "sundial_drain_slots_pending",
        "Moved slots whose old shard still holds jobs"
    );
    describe_gauge!(
        "sundial_drain_jobs_left",
        "Jobs still at the old shards of moved slots, with the jobs in transit at those slots' other places"
    );
    describe_counter!(
        "sundial_mover_jobs_total",
        "Jobs whose move this gateway's mover completed (copied to their new place, let go at the old shard)"
    );
    describe_gauge!(
        "sundial_mover_slots",
        "Slots this gateway's mover is moving now"
    );
    describe_counter!(
        "sundial_namespace_moved_jobs_total",
        "Jobs of a namespace moving to another pool that this gateway's mover carried out of the pool"
    );
}
