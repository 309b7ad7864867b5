//! The KEDA recipe (`deploy/kubernetes/keda-worker.yaml`) and the Helm
//! chart's KEDA objects against a real gateway: each trigger's value is
//! read as KEDA would read it (the Prometheus query evaluated over the
//! gateway's `/metrics`, the metrics-api field from `GET …/stats`). With jobs reserved and none
//! ready, some trigger is above zero, so KEDA keeps a worker; once they are
//! acked, every trigger is at zero, so scaling to zero is left to KEDA.

use std::time::Duration;

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token};
use yaml_rust2::{Yaml, YamlLoader};

/// The triggers of the recipe's ScaledObject and of those the Helm chart
/// makes for worker `emails-worker` (on shop/emails) in its value sets: one
/// on the job API's stats, one through Prometheus.
fn triggers() -> Vec<Yaml> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/kubernetes/keda-worker.yaml"
    );
    let mut texts = vec![std::fs::read_to_string(path).expect("keda-worker.yaml")];
    for set in ["apart.yaml", "prometheus.yaml"] {
        texts.push(crate::helm::render_value_set(set));
    }
    let mut triggers = Vec::new();
    for text in texts {
        let docs = YamlLoader::load_from_str(&text).expect("yaml");
        let scaled = docs
            .into_iter()
            .find(|d| {
                d["kind"].as_str() == Some("ScaledObject")
                    && d["spec"]["scaleTargetRef"]["name"].as_str() == Some("emails-worker")
            })
            .expect("a ScaledObject");
        assert_eq!(scaled["spec"]["minReplicaCount"].as_i64(), Some(0));
        triggers.extend(
            scaled["spec"]["triggers"]
                .as_vec()
                .expect("triggers")
                .clone(),
        );
    }
    // Each way of reading the backlog is here at least twice.
    assert!(triggers.len() >= 6, "{triggers:?}");
    triggers
}

/// `sum(name{label="v", label=~"a|b"})` over a Prometheus text exposition:
/// the one form of query the recipe uses.
fn sum(query: &str, exposition: &str) -> f64 {
    let inner = query
        .strip_prefix("sum(")
        .and_then(|q| q.strip_suffix(')'))
        .expect("sum(…)");
    let (name, matchers) = inner.split_once('{').expect("matchers");
    let matchers: Vec<(&str, bool, Vec<&str>)> = matchers
        .trim_end_matches('}')
        .split(", ")
        .map(|m| {
            let (label, regex, value) = match m.split_once("=~") {
                Some((l, v)) => (l, true, v),
                None => {
                    let (l, v) = m.split_once('=').expect("label=value");
                    (l, false, v)
                }
            };
            let value = value.trim_matches('"');
            let values = if regex {
                value.split('|').collect()
            } else {
                vec![value]
            };
            (label.trim(), regex, values)
        })
        .collect();
    exposition
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| {
            matchers.iter().all(|(label, _, values)| {
                values
                    .iter()
                    .any(|v| l.contains(&format!("{label}=\"{v}\"")))
            })
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Each trigger's value now, as KEDA would read it.
async fn values(gw: &Sundial, token: &str) -> Vec<(String, f64)> {
    let metrics = reqwest::get(format!("{}/metrics", gw.admin()))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let api = Api::new(gw.api(), Some(token));
    let mut out = Vec::new();
    for t in triggers() {
        let meta = &t["metadata"];
        match t["type"].as_str() {
            Some("prometheus") => {
                let q = meta["query"].as_str().expect("query");
                out.push((q.to_owned(), sum(q, &metrics)));
            }
            Some("metrics-api") => {
                let url = meta["url"].as_str().expect("url");
                let path = &url[url.find("/api/").expect("an /api/ url")..];
                let field = meta["valueLocation"].as_str().expect("valueLocation");
                let r = api.get(path).await;
                assert_eq!(r.status, 200, "{r:?}");
                let v = r.json[field].as_f64().expect("a number");
                out.push((format!("{path} {field}"), v));
            }
            other => panic!("a trigger this test cannot read: {other:?}"),
        }
    }
    out
}

#[tokio::test]
async fn the_keda_recipe_keeps_a_worker_while_jobs_are_reserved() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    cfg.pump_extra = "metrics_interval_ms = 100".to_owned();
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "shop").await;
    let api = Api::new(gw.api(), Some(&token));
    let mut ids = Vec::new();
    for _ in 0..3 {
        api.publish("shop", "emails", "", b"mail").await;
    }
    for _ in 0..3 {
        let r = api.get("/api/shop/emails?ttr=600").await;
        assert_eq!(r.status, 200, "{r:?}");
        ids.push(r.json["job_id"].as_str().expect("id").to_owned());
    }
    // None ready, three reserved: some trigger must still ask for a worker.
    // The gauges refresh every pump metrics interval: wait for the query.
    let query_at = |seen: &[(String, f64)], want: f64| {
        seen.iter()
            .any(|(q, v)| q.starts_with("sum(") && *v == want)
    };
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = values(&gw, &token).await;
        if query_at(&seen, 3.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        seen.iter().any(|(_, v)| *v > 0.0),
        "every trigger is at zero while workers hold jobs: {seen:?}"
    );
    for (q, v) in &seen {
        if q.starts_with("sum(") || q.ends_with(" reserved") {
            assert_eq!(*v, 3.0, "{q}: {seen:?}");
        }
    }

    // Acked: nothing ready or reserved, every trigger at zero.
    for id in &ids {
        assert_eq!(
            api.delete(&format!("/api/shop/emails/job/{id}"))
                .await
                .status,
            204
        );
    }
    for _ in 0..100 {
        seen = values(&gw, &token).await;
        if seen.iter().all(|(_, v)| *v == 0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen.iter().all(|(_, v)| *v == 0.0), "{seen:?}");
}
