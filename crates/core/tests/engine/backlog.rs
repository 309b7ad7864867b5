//! A namespace's backlog quota on the admin Redis (`lua/backlog.lua`):
//! the estimate is the snapshot plus the admissions it may not hold, so
//! it is never under what the slots hold, and it comes back down once a
//! snapshot holds what was stored.

use sundial_core::{Admission, BacklogAsk, Shard, Usage};
use sundial_tests::RedisServer;

use crate::helpers::shard;

fn ask(jobs: u64, bytes: u64) -> BacklogAsk {
    BacklogAsk {
        add: Usage { jobs, bytes },
        max_jobs: 10,
        max_bytes: 1_000,
        stale_ms: 60_000,
    }
}

async fn admit(s: &Shard, entry: &str, jobs: u64, bytes: u64) -> Admission {
    s.admin()
        .backlog_admit("p", "ns", entry, ask(jobs, bytes))
        .await
        .expect("admit")
}

async fn snapshot(s: &Shard, jobs: u64, bytes: u64) -> bool {
    let began = s.admin().backlog_begin("p", "ns").await.expect("begin");
    s.admin()
        .backlog_snapshot("p", "ns", began, Usage { jobs, bytes })
        .await
        .expect("snapshot")
}

fn held(a: &Admission) -> (bool, u64, u64) {
    match a {
        Admission::Admitted { held, .. } => (true, held.jobs, held.bytes),
        Admission::Refused { held, .. } => (false, held.jobs, held.bytes),
        Admission::Unknown => panic!("no snapshot"),
    }
}

#[tokio::test]
async fn admissions_count_until_a_snapshot_holds_them_and_a_failed_write_gives_back() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    assert_eq!(admit(&s, "a", 1, 10).await, Admission::Unknown);
    assert!(snapshot(&s, 4, 100).await);
    assert_eq!(held(&admit(&s, "a", 3, 30).await), (true, 4, 100));
    // Pending: counted; a fourth job more would pass 10.
    assert_eq!(held(&admit(&s, "b", 3, 30).await), (true, 7, 130));
    match admit(&s, "c", 1, 10).await {
        Admission::Refused { bound, held, .. } => {
            assert_eq!(bound, "max_jobs");
            assert_eq!(
                held,
                Usage {
                    jobs: 10,
                    bytes: 160
                }
            );
        }
        other => panic!("{other:?}"),
    }
    // A write that stored nothing gives its jobs back at once.
    s.admin()
        .backlog_done("p", "ns", "b", false)
        .await
        .expect("done");
    assert_eq!(held(&admit(&s, "c", 1, 10).await), (true, 7, 130));
    // A write that ended stays counted until a snapshot begun after it.
    s.admin()
        .backlog_done("p", "ns", "a", true)
        .await
        .expect("done");
    s.admin()
        .backlog_done("p", "ns", "c", true)
        .await
        .expect("done");
    assert_eq!(held(&admit(&s, "d", 0, 0).await), (true, 8, 140));
    s.admin()
        .backlog_done("p", "ns", "d", true)
        .await
        .expect("done");
    // The slots now hold 8 jobs (4 + 3 + 1), read by this snapshot.
    assert!(snapshot(&s, 8, 140).await);
    assert_eq!(held(&admit(&s, "e", 0, 0).await), (true, 8, 140));
    // Bytes bound too.
    match admit(&s, "f", 1, 900).await {
        Admission::Refused { bound, .. } => assert_eq!(bound, "max_bytes"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_snapshot_never_drops_a_write_that_ended_after_it_began_nor_an_older_snapshot_wins() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    assert!(snapshot(&s, 0, 0).await);
    admit(&s, "a", 5, 50).await;
    // A snapshot begins, then the write ends: the slots may have been read
    // before it stored, so the entry stays.
    let began = s.admin().backlog_begin("p", "ns").await.expect("begin");
    s.admin()
        .backlog_done("p", "ns", "a", true)
        .await
        .expect("done");
    assert!(
        s.admin()
            .backlog_snapshot("p", "ns", began, Usage::default())
            .await
            .expect("snapshot")
    );
    assert_eq!(held(&admit(&s, "x", 0, 0).await), (true, 5, 50));
    // A snapshot begun earlier than the one kept is not taken.
    let late = s.admin().backlog_begin("p", "ns").await.expect("begin");
    assert!(snapshot(&s, 5, 50).await);
    assert!(
        !s.admin()
            .backlog_snapshot("p", "ns", late, Usage::default())
            .await
            .expect("snapshot")
    );
    assert_eq!(held(&admit(&s, "y", 0, 0).await), (true, 5, 50));
}

#[tokio::test]
async fn a_pending_admission_whose_gateway_died_ends_after_its_stale_time() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    assert!(snapshot(&s, 0, 0).await);
    admit(&s, "lost", 9, 90).await;
    let mut quick = ask(1, 10);
    quick.stale_ms = 50;
    tokio::time::sleep(std::time::Duration::from_millis(80)).await;
    // Taken as ended (its write may have landed): still counted, until a
    // snapshot begun after that.
    let a = s
        .admin()
        .backlog_admit("p", "ns", "next", quick)
        .await
        .expect("admit");
    assert_eq!(held(&a), (true, 9, 90));
    assert!(snapshot(&s, 0, 0).await);
    let a = s
        .admin()
        .backlog_admit("p", "ns", "last", quick)
        .await
        .expect("admit");
    assert_eq!(held(&a), (true, 1, 10), "only the admission just before");
}

#[tokio::test]
async fn a_write_that_stored_less_than_admitted_keeps_only_that_counted() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    assert!(snapshot(&s, 2, 20).await);
    // A pump's fire call: admitted for 5 jobs, it stored 2 of 30 bytes.
    assert_eq!(held(&admit(&s, "fires", 5, 500).await), (true, 2, 20));
    let shard = &s;
    let stored = |entry: &'static str, jobs, bytes| async move {
        let stored = Usage { jobs, bytes };
        let a = shard.admin();
        a.backlog_stored("p", "ns", entry, stored)
            .await
            .expect("stored");
    };
    stored("fires", 2, 30).await;
    assert_eq!(held(&admit(&s, "x", 0, 0).await), (true, 4, 50));
    // Never more than admitted: a larger report keeps the admission.
    assert_eq!(held(&admit(&s, "more", 1, 10).await), (true, 4, 50));
    stored("more", 9, 900).await;
    assert_eq!(held(&admit(&s, "y", 0, 0).await), (true, 5, 60));
    // A call that stored nothing gives its admission back at once; one
    // already ended is left as it was.
    assert_eq!(held(&admit(&s, "none", 3, 30).await), (true, 5, 60));
    stored("none", 0, 0).await;
    stored("fires", 0, 0).await;
    assert_eq!(held(&admit(&s, "z", 0, 0).await), (true, 5, 60));
}
