//! Publish and consume load on two gateways, for the scenarios that move
//! jobs while clients go on.

use std::{
    collections::HashSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use sundial_tests::{Api, wait_until_async};

/// Producers and workers on two gateways, on queue `q` of namespace `ns`:
/// on each gateway `per` publishers (every `delayed`th job delayed by 1 s,
/// so that some wait in the timer while things move) and as many workers,
/// each job acknowledged on the other gateway. An ack that did nothing
/// shows as the job delivered twice (after its TTR of 30 s) or, if the
/// test ends first, as a job left at the end. With `busy_ok`, a publish
/// may be refused with 503 (nothing stored; its client would try again).
pub(super) struct Load {
    pub(super) stop_publishing: Arc<AtomicBool>,
    pub(super) stop_consuming: Arc<AtomicBool>,
    pub(super) published: Arc<Mutex<HashSet<String>>>,
    pub(super) consumed: Arc<Mutex<Vec<String>>>,
    pub(super) publishers: Vec<tokio::task::JoinHandle<()>>,
    pub(super) consumers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub(super) fn start(apis: &[Api; 2], per: usize, delayed: u64, busy_ok: bool) -> Self {
        let mut load = Self {
            stop_publishing: Arc::default(),
            stop_consuming: Arc::default(),
            published: Arc::default(),
            consumed: Arc::default(),
            publishers: Vec::new(),
            consumers: Vec::new(),
        };
        for (i, api) in apis.iter().enumerate() {
            for _ in 0..per {
                let (papi, stop, published) = (
                    api.clone(),
                    load.stop_publishing.clone(),
                    load.published.clone(),
                );
                load.publishers.push(tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let query = if n.is_multiple_of(delayed) {
                            "delay=1"
                        } else {
                            ""
                        };
                        let r = papi
                            .put(&format!("/api/ns/q?{query}"), format!("{i}-{n}").as_bytes())
                            .await;
                        match r.status {
                            201 => {
                                published
                                    .lock()
                                    .expect("lock")
                                    .insert(r.json["job_id"].as_str().expect("id").to_owned());
                            }
                            503 if busy_ok => {}
                            _ => panic!("publish during a move: {r:?}"),
                        }
                        n += 1;
                        tokio::time::sleep(Duration::from_millis(4)).await;
                    }
                }));
                let (api, stop, consumed) = (
                    api.clone(),
                    load.stop_consuming.clone(),
                    load.consumed.clone(),
                );
                let acker = apis[1 - i].clone();
                load.consumers.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let r = api.get("/api/ns/q?timeout=1&count=10&ttr=30").await;
                        match r.status {
                            200 => {
                                for j in r.json.as_array().expect("array") {
                                    let id = j["job_id"].as_str().expect("id").to_owned();
                                    let ack = acker.delete(&format!("/api/ns/q/job/{id}")).await;
                                    assert_eq!(ack.status, 204);
                                    consumed.lock().expect("lock").push(id);
                                }
                            }
                            404 => {}
                            other => panic!("consume during a move: {other} {r:?}"),
                        }
                    }
                }));
            }
        }
        load
    }

    /// Waits until `more` jobs more than now were published.
    pub(super) async fn progress(&self, what: &str, more: usize) {
        let before = self.published.lock().expect("lock").len();
        wait_until_async(Duration::from_secs(10), what, || {
            std::future::ready(self.published.lock().expect("lock").len() > before + more)
        })
        .await;
    }

    /// Stops publishing, waits for every published job to be consumed (or
    /// 30 s), stops the workers; returns the jobs published and those
    /// consumed, in order, each time it was delivered.
    pub(super) async fn finish(self) -> (HashSet<String>, Vec<String>) {
        self.stop_publishing.store(true, Ordering::Relaxed);
        for p in self.publishers {
            p.await.expect("publisher");
        }
        let expected = self.published.lock().expect("lock").clone();
        let consumed = self.consumed.clone();
        wait_until_async(
            Duration::from_secs(30),
            "every published job to be consumed",
            || std::future::ready(consumed.lock().expect("lock").len() >= expected.len()),
        )
        .await;
        self.stop_consuming.store(true, Ordering::Relaxed);
        for c in self.consumers {
            c.await.expect("consumer");
        }
        let consumed = self.consumed.lock().expect("lock").clone();
        let unique: HashSet<&String> = consumed.iter().collect();
        assert_eq!(unique.len(), consumed.len(), "no job was delivered twice");
        (expected, consumed)
    }
}
