//! A queue's jobs listed by state (`Queues::list_jobs`, the admin API's job
//! listing): every job of the queue in that state once, none of another
//! queue or state, with the time of its state, however small the pages and
//! the read budget per call.

use std::{collections::BTreeSet, time::Duration};

use sundial_core::{ListAsk, ListState, ListedJob, Shard};
use sundial_tests::{RedisServer, wait_until_async};

use crate::helpers::{consume, now_sched, publish, qn, sched, shard, slot, slots_of};

/// Every job of `queue` in `state`, following each slot's pages of `want`
/// jobs, reading at most `budget` entries per call.
async fn list_all(
    s: &Shard,
    queue: &str,
    state: ListState,
    want: u64,
    budget: u64,
) -> Vec<ListedJob> {
    let mut out = Vec::new();
    for b in slots_of(queue) {
        let mut at = (0, 0);
        for call in 0.. {
            assert!(call < 10_000, "the listing of slot {b} never ends");
            let page = s
                .queues()
                .list_jobs(
                    b,
                    &qn(queue),
                    ListAsk {
                        state,
                        at,
                        want,
                        budget,
                        preview: 3,
                    },
                )
                .await
                .expect("list");
            assert!(page.jobs.len() as u64 <= want, "{page:?}");
            out.extend(page.jobs);
            match page.next {
                Some(next) => at = next,
                None => break,
            }
        }
    }
    out
}

fn ids(jobs: &[ListedJob]) -> BTreeSet<String> {
    let all: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
    let set: BTreeSet<String> = all.iter().cloned().collect();
    assert_eq!(set.len(), all.len(), "a job listed twice: {all:?}");
    set
}

#[tokio::test]
async fn each_state_lists_its_own_jobs_once_with_the_time_of_their_state() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let ready: BTreeSet<String> = {
        let mut v = BTreeSet::new();
        for i in 0..7 {
            v.insert(
                publish(&s, "q", now_sched(1), &format!("ready {i}"))
                    .await
                    .to_string(),
            );
        }
        v
    };
    let mut delayed = BTreeSet::new();
    // Due soon (on the timer zset) and later (in the wheel's lists).
    for i in 0..3 {
        delayed.insert(
            publish(&s, "q", sched(1_500, 0, 1), &format!("soon {i}"))
                .await
                .to_string(),
        );
        delayed.insert(
            publish(&s, "q", sched(60_000, 0, 1), &format!("later {i}"))
                .await
                .to_string(),
        );
    }
    // Another queue's jobs in every state share the slots' keys.
    for i in 0..5 {
        publish(&s, "other", now_sched(1), &format!("o{i}")).await;
        publish(&s, "other", sched(60_000, 0, 1), &format!("od{i}")).await;
    }
    consume(&s, &["other"], 2, 60_000)
        .await
        .expect("consume other");
    let taken = consume(&s, &["q"], 2, 60_000).await.expect("consume");
    let reserved: BTreeSet<String> = taken.iter().map(|d| d.job.id.clone()).collect();
    let ready: BTreeSet<String> = ready.difference(&reserved).cloned().collect();

    for (want, budget) in [(500, 1000), (2, 1000), (1, 1), (3, 2)] {
        let what = format!("pages of {want}, {budget} entries a call");
        let listed = list_all(&s, "q", ListState::Ready, want, budget).await;
        assert_eq!(ids(&listed), ready, "ready, {what}");
        for j in &listed {
            assert_eq!((j.at_ms, j.tries_left), (j.published_ms, 1), "{j:?}");
            assert!(j.body_size >= 7 && j.body_preview.len() == 3, "{j:?}");
        }
        let listed = list_all(&s, "q", ListState::Delayed, want, budget).await;
        assert_eq!(ids(&listed), delayed, "delayed, {what}");
        for j in &listed {
            let delay = j.at_ms - j.published_ms;
            assert!(delay == 1_500 || delay == 60_000, "due at its delay: {j:?}");
        }
        let listed = list_all(&s, "q", ListState::Reserved, want, budget).await;
        assert_eq!(ids(&listed), reserved, "reserved, {what}");
        for j in &listed {
            let ttr = j.at_ms - j.published_ms;
            assert!((59_000..=61_000).contains(&ttr), "its TTR deadline: {j:?}");
            assert_eq!(j.tries_left, 0, "{j:?}");
        }
        assert!(
            list_all(&s, "q", ListState::Dead, want, budget)
                .await
                .is_empty()
        );
    }
}

#[tokio::test]
async fn a_dead_job_is_listed_with_when_it_died_and_a_queue_never_seen_lists_nothing() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let id = publish(&s, "q", now_sched(1), "doomed").await;
    consume(&s, &["q"], 1, 50).await.expect("consume");
    let b = slot("q", &id);
    wait_until_async(Duration::from_secs(10), "the job to die", || async {
        s.timers().pump(b, 100, None).await.expect("pump").dead == 1
    })
    .await;
    let listed = list_all(&s, "q", ListState::Dead, 10, 100).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, id.as_str());
    assert!(listed[0].at_ms >= listed[0].published_ms + 50, "{listed:?}");
    for state in ListState::ALL {
        assert!(
            list_all(&s, "never", state, 10, 100).await.is_empty(),
            "{state:?}"
        );
    }
}
