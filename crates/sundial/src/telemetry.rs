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
    Ok(handle)
}
