//! The fair share of a busy Redis server: a gateway's calls beyond the
//! server's pooled connections wait in turn by namespace, so a namespace
//! that floods many queues does not put its calls ahead of another's.

use std::time::{Duration, Instant};

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token};

/// A's publishes to `queues` queues at once and B's one, sent while Redis
/// is paused: B's is answered right after the call that was running, not
/// after A's calls that came before it.
#[tokio::test]
async fn a_namespace_flooding_many_queues_does_not_go_ahead_of_another() {
    let redis = RedisServer::start();
    let mut cfg = SundialConfig::new(redis.url());
    // One connection, so one call at a time: calls past it wait.
    cfg.pools = Some(format!(
        "[pools.default]\nshards = [{{ url = \"{}\", connections = 1 }}]\n",
        redis.url()
    ));
    let gw = Sundial::start(&cfg);
    let a = Api::new(gw.api(), Some(&create_token(&gw.admin(), "a").await));
    let b = Api::new(gw.api(), Some(&create_token(&gw.admin(), "b").await));
    // Each namespace's queues are known (the queue index's admission).
    for q in 0..24 {
        assert_eq!(a.put(&format!("/api/a/q{q}"), b"warm").await.status, 201);
    }
    assert_eq!(b.put("/api/b/q", b"warm").await.status, 201);

    let queues = 24;
    let mut c = redis.client();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(600)
        .arg("ALL")
        .query(&mut c)
        .expect("pause");
    let start = Instant::now();
    let mut answers = Vec::new();
    // Large bodies, so that each of A's calls takes Redis long enough (to
    // copy and log it) for the order of the answers to show.
    let body = vec![b'x'; 512 * 1024];
    for q in 0..queues {
        let (a, body) = (a.clone(), body.clone());
        answers.push(tokio::spawn(async move {
            let r = a.put(&format!("/api/a/q{q}"), &body).await;
            (r.status, Instant::now())
        }));
    }
    // A's calls are all in line before B's comes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = b.put("/api/b/q", b"quiet").await;
    let b_done = Instant::now();
    assert_eq!(r.status, 201, "{r:?}");
    assert!(
        start.elapsed() >= Duration::from_millis(500),
        "B was answered while Redis was paused: the test did not hold the calls"
    );
    let mut before_b = 0;
    for a in answers {
        let (status, at) = a.await.expect("task");
        assert_eq!(status, 201);
        before_b += usize::from(at < b_done);
    }
    // In arrival order B's call would follow all of A's. By turns, B's
    // namespace, which has had none of the calls, goes next after the one
    // that was running (a few of A's answers may still reach the client
    // first).
    assert!(
        before_b <= 4,
        "{before_b} of A's {queues} publishes were answered before B's"
    );
}
