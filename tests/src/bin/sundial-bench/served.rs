//! The gateway's own view of B's calls in `noisy`: the mean time it took to
//! answer them and the mean time of their script calls, read from its
//! `/metrics` before and after a phase. Beside B's times at the client,
//! it tells what B waits for in the gateway (its answer) from what it waits
//! for outside (the network stack, and the load generator's core).

use std::collections::HashMap;

/// Sums and counts of the histograms that only B's calls feed in `noisy`
/// (A only publishes): by what they time.
#[derive(Debug, Default)]
pub(crate) struct Served(HashMap<&'static str, (f64, f64)>);

/// What each timed thing is: a name, and label values all of which its
/// series carry.
const TIMED: [(&str, &str, &[&str]); 3] = [
    (
        "consume answer",
        "sundial_http_request_duration_seconds",
        &["route=\"/api/{ns}/{queue}\"", "method=\"GET\""],
    ),
    (
        "ack answer",
        "sundial_http_request_duration_seconds",
        &[
            "route=\"/api/{ns}/{queue}/job/{job_id}\"",
            "method=\"DELETE\"",
        ],
    ),
    (
        "their script calls (consume, ack)",
        "sundial_redis_script_seconds",
        &["script=\"serve\""],
    ),
];

impl Served {
    /// Reads them from the admin listener's `/metrics`.
    pub(crate) async fn read(http: &reqwest::Client, admin: &str) -> anyhow::Result<Self> {
        let text = http
            .get(format!("{admin}/metrics"))
            .send()
            .await?
            .text()
            .await?;
        let mut out = HashMap::new();
        for (what, name, labels) in TIMED {
            let e: &mut (f64, f64) = out.entry(what).or_default();
            for line in text.lines() {
                let Some((series, value)) = line.rsplit_once(' ') else {
                    continue;
                };
                if !labels.iter().all(|l| series.contains(l)) {
                    continue;
                }
                let v: f64 = value.parse().unwrap_or(0.0);
                if series.starts_with(&format!("{name}_sum{{")) {
                    e.0 += v;
                } else if series.starts_with(&format!("{name}_count{{")) {
                    e.1 += v;
                }
            }
        }
        Ok(Self(out))
    }

    /// The means between `before` and this reading, as one line.
    pub(crate) fn since(&self, before: &Served) -> String {
        let mut parts = Vec::new();
        for (what, _, _) in TIMED {
            let (s1, c1) = self.0.get(what).copied().unwrap_or_default();
            let (s0, c0) = before.0.get(what).copied().unwrap_or_default();
            if c1 > c0 {
                parts.push(format!("{what} {:.3}", (s1 - s0) / (c1 - c0) * 1000.0));
            }
        }
        format!("as the gateway saw them (mean ms): {}", parts.join("; "))
    }
}
