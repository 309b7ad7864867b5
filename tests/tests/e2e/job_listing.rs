//! A queue's jobs listed by state and looked up by id on the admin API
//! (`GET /namespaces/{ns}/queues/{queue}/jobs`, `…/jobs/{id}`), and the
//! CLI's `sundial job list|show` over them, against a real gateway.

use std::{collections::BTreeSet, time::Duration};

use sundial_tests::{
    Api, ShardKind, Store, Sundial, SundialConfig, create_token, wait_until_async,
};

/// Every job of a listing, following `next_cursor` with pages of `limit`.
async fn all(admin: &Api, path: &str, limit: u64) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    for _ in 0..1000 {
        let r = admin
            .get(&format!("{path}&limit={limit}&cursor={cursor}"))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        out.extend(r.json["jobs"].as_array().cloned().unwrap_or_default());
        match r.json["next_cursor"].as_str() {
            Some(c) => c.clone_into(&mut cursor),
            None => return out,
        }
    }
    panic!("{path}: the listing never ends");
}

fn ids(jobs: &[serde_json::Value]) -> BTreeSet<String> {
    jobs.iter()
        .map(|j| j["job_id"].as_str().expect("id").to_owned())
        .collect()
}

on_every_shard_kind!(an_operator_lists_a_queues_jobs_by_state_and_finds_one_by_id);

async fn an_operator_lists_a_queues_jobs_by_state_and_finds_one_by_id(kind: ShardKind) {
    let store = Store::start(kind);
    let mut cfg = SundialConfig::new(store.url());
    cfg.pools = Some(format!(
        "[pools.default]\nslots = 16\nlanes = 4\nshards = [{{ url = \"{}\" }}]\n",
        store.url()
    ));
    let gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let admin = Api::new(gw.admin(), None);
    let mut ready = BTreeSet::new();
    for i in 0..6 {
        ready.insert(
            api.publish("ns", "q", "", format!("job {i}").as_bytes())
                .await,
        );
    }
    let mut delayed = BTreeSet::new();
    for i in 0..3 {
        delayed.insert(
            api.publish("ns", "q", "delay=3600", format!("later {i}").as_bytes())
                .await,
        );
    }
    let taken = api.get("/api/ns/q?ttr=600").await;
    let reserved = taken.json["job_id"].as_str().expect("a job").to_owned();
    ready.remove(&reserved);
    let dead = api.publish("ns", "d", "tries=1", b"doomed").await;
    assert_eq!(api.get("/api/ns/d?ttr=1").await.status, 200);
    wait_until_async(Duration::from_secs(10), "the job to die", || async {
        api.get("/api/ns/d/deadletter/size").await.json["size"] == 1
    })
    .await;

    let base = "/namespaces/ns/queues/q/jobs?preview=3";
    for limit in [50, 1, 2] {
        let listed = all(&admin, base, limit).await;
        assert_eq!(ids(&listed), ready, "ready, pages of {limit}");
        assert_eq!(listed.len(), ready.len(), "each once");
        let j = &listed[0];
        assert_eq!(j["body_preview"], "am9i", "the first 3 bytes, base64: {j}");
        assert_eq!(
            (j["body_size"].as_u64(), j["remain_tries"].as_u64()),
            (Some(5), Some(1))
        );
        assert_eq!(j["ready_since_ms"], j["published_at_ms"], "{j}");
    }
    let listed = all(&admin, &format!("{base}&state=delayed"), 2).await;
    assert_eq!(ids(&listed), delayed);
    for j in &listed {
        let due =
            j["due_at_ms"].as_u64().expect("due") - j["published_at_ms"].as_u64().expect("pub");
        assert_eq!(due, 3_600_000, "{j}");
    }
    let listed = all(&admin, &format!("{base}&state=reserved"), 50).await;
    assert_eq!(ids(&listed), BTreeSet::from([reserved.clone()]));
    assert!(
        listed[0]["ttr_deadline_ms"].as_u64().is_some(),
        "{listed:?}"
    );
    let listed = all(&admin, "/namespaces/ns/queues/d/jobs?state=dead", 50).await;
    assert_eq!(ids(&listed), BTreeSet::from([dead.clone()]));
    assert!(listed[0]["died_at_ms"].as_u64().is_some(), "{listed:?}");

    // By id, in whatever state.
    for (id, queue, state) in [
        (&reserved, "q", "reserved"),
        (ready.first().expect("one"), "q", "ready"),
        (delayed.first().expect("one"), "q", "delayed"),
        (&dead, "d", "dead"),
    ] {
        let r = admin
            .get(&format!("/namespaces/ns/queues/{queue}/jobs/{id}"))
            .await;
        assert_eq!(
            (r.status, r.json["state"].as_str()),
            (200, Some(state)),
            "{r:?}"
        );
    }
    let missing = "01ABCDEFGHJKMNPQRSTVWXYZ00";
    let r = admin
        .get(&format!("/namespaces/ns/queues/q/jobs/{missing}"))
        .await;
    assert_eq!(r.status, 404, "{r:?}");
    for (path, status) in [
        ("/namespaces/ns/queues/q/jobs/not-an-id", 400),
        ("/namespaces/ns/queues/q/jobs?state=gone", 400),
        ("/namespaces/ns/queues/q/jobs?cursor=x", 400),
        ("/namespaces/ns/queues/q/jobs?limit=0", 400),
        ("/namespaces/ns/queues/q/jobs?preview=100000", 400),
        ("/namespaces/ns/queues/q/jobs?pool=nope", 404),
    ] {
        let r = admin.get(path).await;
        assert_eq!(r.status, status, "{path}: {r:?}");
        assert!(r.json["error"].is_string(), "{path}: {r:?}");
    }

    // The CLI over the same routes.
    let r = gw.cli(&["job", "list", "ns", "q", "--state", "delayed"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with("JOB ID")
            && r.stdout.contains("PRIORITY")
            && r.stdout.contains("DUE (UTC)"),
        "{r:?}"
    );
    assert_eq!(r.stdout.lines().count(), 1 + delayed.len(), "{r:?}");
    let r = gw.cli(&["job", "show", "ns", "d", &dead], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("state       dead")
            && r.stdout.contains("priority    0")
            && r.stdout.contains("doomed"),
        "{r:?}"
    );
    let r = gw.cli(&["job", "show", "ns", "q", missing], &[]);
    assert_eq!(r.code, 3, "not found: {r:?}");
}
