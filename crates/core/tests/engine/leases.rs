//! Pump leases: one owner at a time, passed to the process that ranks first,
//! fenced once passed.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::time::Duration;

use redis::Commands;
use sundial_core::keys::SlotKeys;
use sundial_tests::{RedisServer, wait_until_async};

use crate::helpers::{counts, publish, sched, shard, slot};

#[tokio::test]
async fn a_lease_has_one_owner_and_passes_to_the_process_that_ranks_first() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let (live, rejoined) = s.leases().heartbeat("p1", 5_000).await.expect("p1");
    assert_eq!(live, ["p1"]);
    assert!(rejoined, "a first heartbeat joins");
    assert!(
        !s.leases().heartbeat("p1", 5_000).await.expect("p1").1,
        "then renews"
    );
    assert!(
        s.leases()
            .claim(0, "p1")
            .await
            .expect("p1 takes a free lease")
    );
    assert!(!s.leases().claim(0, "p1").await.expect("already p1's"));
    let (live, _) = s.leases().heartbeat("p2", 5_000).await.expect("p2");
    assert_eq!(live.len(), 2);
    // p2 ranks first for slot 0 in its view: it takes the lease, whoever
    // holds it; p1 then moves nothing there (fencing).
    assert!(s.leases().claim(0, "p2").await.expect("p2 takes it"));
    let mut r = redis.client();
    let holder: Option<String> = r.get(SlotKeys::new(0).lease()).expect("get");
    assert_eq!(holder.as_deref(), Some("p2"));
    assert!(
        s.timers()
            .pump(0, 100, Some("p1"))
            .await
            .expect("pump")
            .fenced
    );
    assert!(
        !s.timers()
            .pump(0, 100, Some("p2"))
            .await
            .expect("pump")
            .fenced
    );
    // Giving up is compare-and-delete: only the holder's does anything.
    s.leases().give(0, "p1", None).await.expect("give");
    let holder: Option<String> = r.get(SlotKeys::new(0).lease()).expect("get");
    assert_eq!(holder.as_deref(), Some("p2"));
    s.leases().give(0, "p2", None).await.expect("give");
    let holder: Option<String> = r.get(SlotKeys::new(0).lease()).expect("get");
    assert_eq!(holder, None, "given up");
    assert!(s.leases().claim(1, "p2").await.expect("p2"));
    // Leaving the live set.
    s.leases().leave("p1").await.expect("leave");
    assert_eq!(
        s.leases().heartbeat("p2", 5_000).await.expect("p2").0,
        ["p2"]
    );
    let keys: Vec<String> = r.keys("sd:*").expect("keys");
    let mut keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["sd:pumps", "sd:{1}:lease"],
        "one key per leased slot and one per shard, and no expiring key to renew"
    );
}

#[tokio::test]
async fn a_lease_whose_holder_paused_passes_and_its_old_owner_is_fenced() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", sched(50, 0, 1), "x").await;
    let b = slot("q", &id);
    s.leases().heartbeat("old", 100).await.expect("old");
    assert!(s.leases().claim(b, "old").await.expect("old"));
    // The old owner pauses past its heartbeat; the new one, now first among
    // the live, takes over.
    wait_until_async(
        Duration::from_secs(5),
        "the old heartbeat to lapse",
        || async { s.leases().heartbeat("new", 5_000).await.expect("new").0 == ["new"] },
    )
    .await;
    assert!(s.leases().claim(b, "new").await.expect("new"));
    tokio::time::sleep(Duration::from_millis(60)).await; // let the job fall due
    let (_, rejoined) = s.leases().heartbeat("old", 100).await.expect("old");
    assert!(rejoined, "the old owner learns that it had lapsed");
    let o = s.timers().pump(b, 100, Some("old")).await.expect("pump");
    assert!(o.fenced, "the old owner moves nothing");
    assert_eq!(counts(&s, "q").await.expect("counts").delayed, 1);
    let o = s.timers().pump(b, 100, Some("new")).await.expect("pump");
    assert!(!o.fenced);
    assert_eq!(o.to_ready, 1);
}
