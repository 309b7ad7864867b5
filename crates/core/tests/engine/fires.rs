//! Schedules in their slots: a definition applied over an older revision
//! only; a planned fire that comes due publishes its job once, never
//! early, and arms the next; a fire found past its grace is missed and
//! the schedule asks to be planned again; every write fenced by the lease.

use std::time::Duration;

use bytes::Bytes;
use redis::Commands;
use sundial_core::{
    FIRE_AHEAD_MS, FireDef, FireOutcome, JobId, Plan, PlannedFire, QueueFires, Room, Shard, Usage,
    keys::SlotKeys,
};
use sundial_tests::RedisServer;

use crate::helpers::{now_sched, qn, shard};

const B: u32 = 3;
const MEMBER: &str = "ns/q/nightly";

fn def(rev: u64) -> FireDef {
    FireDef {
        rev,
        grace_ms: 1_000,
        paused: false,
        ttl_ms: 0,
        tries: 2,
        priority: 0,
        policy: None,
        attrs: r#"{"schedule":"nightly""#.to_owned(),
        timing: r#"{"every":1}"#.to_owned(),
        key: String::new(),
        key_window_ms: 0,
        body: Bytes::from_static(b"tick"),
    }
}

async fn fire(s: &Shard) -> FireOutcome {
    s.fires().fire(B, 100, None, &[]).await.expect("fire")
}

/// Applies `def(1)` and returns the outcome of the fire call that finds
/// it due to be planned.
async fn applied(s: &Shard) -> FireOutcome {
    let applied = s
        .fires()
        .apply(B, None, &[(MEMBER.to_owned(), def(1), None)])
        .await;
    assert_eq!(applied.expect("apply"), Some(vec![true]));
    let o = fire(s).await;
    assert_eq!(o.fired, 0);
    assert_eq!(o.to_plan.len(), 1, "a new schedule asks for its plan");
    assert_eq!(o.to_plan[0].member, MEMBER);
    assert_eq!(o.to_plan[0].timing, r#"{"every":1}"#);
    o
}

/// Applies `def(1)` with its job's idempotency key `key`, and returns the
/// outcome of the fire call that finds it due to be planned.
async fn applied_keyed(s: &Shard, key: &str) -> FireOutcome {
    let keyed = FireDef {
        key: key.to_owned(),
        ..def(1)
    };
    s.fires()
        .apply(B, None, &[(MEMBER.to_owned(), keyed, None)])
        .await
        .expect("apply");
    fire(s).await
}

fn planned(at_ms: u64, due_ms: u64, late_ok: bool) -> PlannedFire {
    PlannedFire {
        at_ms,
        due_ms,
        id: JobId::mint(true).as_str().to_owned(),
        late_ok,
    }
}

fn plan(o: &FireOutcome, fires: Vec<PlannedFire>) -> Plan {
    Plan {
        member: MEMBER.to_owned(),
        rev: o.to_plan[0].rev,
        cursor_ms: o.to_plan[0].cursor_ms,
        new_cursor_ms: o.to_plan[0].cursor_ms,
        skipped: 0,
        fires,
    }
}

/// A plan of one fire at `at_ms` for each schedule that `o` asked to plan.
fn one_fire_each(o: &FireOutcome, at_ms: u64) -> Vec<Plan> {
    o.to_plan
        .iter()
        .map(|t| Plan {
            member: t.member.clone(),
            rev: t.rev,
            cursor_ms: t.cursor_ms,
            new_cursor_ms: t.cursor_ms,
            skipped: 0,
            fires: vec![planned(at_ms, at_ms, true)],
        })
        .collect()
}

/// What a call's fires did in `queue`.
fn per(queue: &str, fired: u64, duplicates: u64, refused: u64) -> QueueFires {
    QueueFires {
        queue: queue.to_owned(),
        fired,
        duplicates,
        refused,
    }
}

async fn ready(s: &Shard) -> u64 {
    s.queues().counts(B, &qn("q")).await.expect("counts").ready
}

#[tokio::test]
async fn a_due_fire_publishes_its_job_once_never_early_and_arms_the_next() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let o = applied(&s).await;
    let now = o.now_ms;
    let fires = vec![
        planned(now + 300, now + 350, false),
        planned(now + 600, now + 600, false),
    ];
    let (first, second) = (fires[0].clone(), fires[1].clone());
    let stored = s.fires().store_plans(B, None, &[plan(&o, fires)]).await;
    assert_eq!(stored.expect("store"), Some((Some(now + 350), vec![true])));
    let pumped = s.timers().pump(B, 100, None).await.expect("pump");
    assert_eq!(
        pumped.next_fire_ms,
        Some(now + 350),
        "the pump sees the next fire"
    );

    // Not before it is due.
    let early = fire(&s).await;
    assert_eq!((early.fired, ready(&s).await), (0, 0));
    assert_eq!(early.next_fire_ms, Some(now + 350));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let o = fire(&s).await;
    assert_eq!(o.fired, 1);
    assert!(o.now_ms >= now + 350, "never early");
    assert_eq!(o.lateness_ms, vec![o.now_ms - (now + 350)]);
    assert_eq!(o.per_queue, vec![per("ns/q", 1, 0, 0)]);
    assert_eq!(o.next_fire_ms, Some(now + 600), "the next fire is armed");
    assert_eq!(
        o.to_plan.len(),
        1,
        "one planned fire left: it asks for more"
    );
    assert_eq!(o.to_plan[0].cursor_ms, now + 300);

    let id = JobId::parse(&first.id).expect("an id");
    let job = s
        .jobs()
        .peek(B, &qn("q"), &id)
        .await
        .expect("peek")
        .expect("published");
    assert_eq!(job.body, Bytes::from_static(b"tick"));
    assert_eq!(job.tries_left, 2);
    let attrs: serde_json::Value = serde_json::from_str(&job.attrs).expect("json");
    assert_eq!(attrs["schedule"], "nightly");
    assert_eq!(attrs["scheduled-at"], (now + 300).to_string());

    // A plan made from the state before that fire is stale.
    let stale = plan(
        &applied_state(&o, now),
        vec![planned(now + 300, now + 300, true)],
    );
    let stored = s
        .fires()
        .store_plans(B, None, &[stale])
        .await
        .expect("store");
    assert_eq!(stored.map(|(_, s)| s), Some(vec![false]));

    tokio::time::sleep(Duration::from_millis(300)).await;
    let o = fire(&s).await;
    assert_eq!((o.fired, ready(&s).await), (1, 2));
    let state = s.fires().states(B).await.expect("states");
    let st = &state[0].1;
    assert_eq!((st.fired, st.cursor_ms), (2, now + 600));
    assert_eq!(
        st.last.as_ref().map(|l| l.id.as_str()),
        Some(second.id.as_str())
    );
    assert!(st.plan.is_empty());
    // Its plan is empty: it waits to be planned, asked again a second on.
    let waits: f64 = redis::Client::open(redis.url())
        .expect("client")
        .get_connection()
        .expect("conn")
        .zscore(SlotKeys::new(B).fires(), MEMBER)
        .expect("zscore");
    assert_eq!(waits as u64, o.now_ms + 1_000);
}

/// The outcome as a plan from the state before the first fire would see it.
fn applied_state(o: &FireOutcome, cursor: u64) -> FireOutcome {
    let mut o = o.clone();
    o.to_plan[0].cursor_ms = cursor;
    o
}

#[tokio::test]
async fn a_fire_past_its_grace_is_missed_unless_its_plan_says_fire_late() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let short = FireDef {
        grace_ms: 100,
        ..def(1)
    };
    let f = s.fires();
    f.apply(B, None, &[(MEMBER.to_owned(), short, None)])
        .await
        .expect("apply");
    let o = fire(&s).await;
    let cursor = o.to_plan[0].cursor_ms;
    let on_time = vec![
        planned(cursor + 1, cursor + 1, false),
        planned(cursor + 2, cursor + 2, false),
    ];
    f.store_plans(B, None, &[plan(&o, on_time)])
        .await
        .expect("store");
    // Found 200 ms after it was due, with a grace of 100 ms: missed, and
    // nothing of its plan fires.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let o = fire(&s).await;
    assert_eq!((o.fired, ready(&s).await), (0, 0));
    assert_eq!(o.to_plan.len(), 1, "missed: planned again");
    assert_eq!(o.to_plan[0].cursor_ms, cursor, "the cursor stays");
    // The plan that comes back fires them however late (the pumps'
    // policy for missed fires chose them), and counts those it skipped.
    let catch_up = vec![
        planned(cursor + 1, cursor + 1, true),
        planned(cursor + 2, cursor + 2, true),
    ];
    let mut p = plan(&o, catch_up);
    p.skipped = 3;
    f.store_plans(B, None, &[p]).await.expect("store");
    let o = fire(&s).await;
    assert_eq!((o.fired, ready(&s).await), (2, 2));
    let st = &f.states(B).await.expect("states")[0].1;
    assert_eq!((st.missed, st.fired, st.cursor_ms), (3, 2, cursor + 2));
    // A fire at or before the cursor never fires again.
    let again = vec![planned(cursor + 2, cursor + 2, true)];
    f.store_plans(B, None, &[plan(&o, again)])
        .await
        .expect("store");
    assert_eq!(fire(&s).await.fired, 0);
}

#[tokio::test]
async fn a_planned_id_stored_already_publishes_nothing() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let o = applied(&s).await;
    let at = o.to_plan[0].cursor_ms + 1;
    let fire_at = planned(at, at, true);
    let job = sundial_core::NewJob {
        id: JobId::parse(&fire_at.id).expect("id"),
        attrs: String::new(),
        body: Bytes::from_static(b"there"),
    };
    s.jobs()
        .publish(B, &qn("q"), &now_sched(1), &[job])
        .await
        .expect("publish");
    s.fires()
        .store_plans(B, None, &[plan(&o, vec![fire_at])])
        .await
        .expect("store");
    let o = fire(&s).await;
    assert_eq!((o.fired, ready(&s).await), (0, 1), "the job is not doubled");
    let st = &s.fires().states(B).await.expect("states")[0].1;
    assert_eq!((st.fired, st.cursor_ms), (0, at), "the fire is handled");
}

#[tokio::test]
async fn a_definition_applies_over_an_older_revision_only() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let o = applied(&s).await;
    let f = s.fires();
    let member = MEMBER.to_owned();
    assert_eq!(
        f.apply(B, None, &[(member.clone(), def(1), None)])
            .await
            .expect("apply"),
        Some(vec![true]),
        "the same: held already"
    );
    let paused = FireDef {
        paused: true,
        ..def(2)
    };
    assert_eq!(
        f.apply(B, None, &[(member.clone(), paused, None)])
            .await
            .expect("apply"),
        Some(vec![true])
    );
    assert_eq!(
        f.definition(B, MEMBER)
            .await
            .expect("read")
            .map(|d| d.paused),
        Some(true)
    );
    let older = f.apply(B, None, &[(member.clone(), def(1), None)]).await;
    assert_eq!(older.expect("apply"), Some(vec![false]), "older: refused");
    let o2 = fire(&s).await;
    assert!(
        o2.to_plan.is_empty() && o2.next_fire_ms.is_none(),
        "a paused schedule is not due"
    );
    // Resumed: its fires start after now, and its plan is made again.
    assert_eq!(
        f.apply(B, None, &[(member.clone(), def(3), None)])
            .await
            .expect("apply"),
        Some(vec![true])
    );
    let o3 = fire(&s).await;
    assert_eq!(o3.to_plan.len(), 1);
    assert_eq!(o3.to_plan[0].rev, 3);
    assert!(o3.to_plan[0].cursor_ms >= o.now_ms);
    // Removed only up to the revision given.
    assert_eq!(
        f.remove(B, None, &[(member.clone(), 2)])
            .await
            .expect("remove"),
        Some(vec![false])
    );
    assert_eq!(
        f.remove(B, None, &[(member.clone(), 3)])
            .await
            .expect("remove"),
        Some(vec![true])
    );
    assert!(f.states(B).await.expect("states").is_empty());
    assert_eq!(f.definition(B, MEMBER).await.expect("read"), None);
    assert!(fire(&s).await.next_fire_ms.is_none());
}

#[tokio::test]
async fn every_write_is_fenced_by_the_lease() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    assert!(s.leases().claim(B, "me").await.expect("claim"));
    let f = s.fires();
    let defs = [(MEMBER.to_owned(), def(1), None)];
    assert_eq!(f.apply(B, Some("other"), &defs).await.expect("apply"), None);
    assert_eq!(
        f.apply(B, Some("me"), &defs).await.expect("apply"),
        Some(vec![true])
    );
    assert!(
        f.fire(B, 100, Some("other"), &[])
            .await
            .expect("fire")
            .fenced
    );
    let o = f.fire(B, 100, Some("me"), &[]).await.expect("fire");
    assert!(!o.fenced);
    let p = plan(&o, vec![planned(o.now_ms, o.now_ms, true)]);
    let plans = std::slice::from_ref(&p);
    assert_eq!(
        f.store_plans(B, Some("other"), plans).await.expect("store"),
        None
    );
    assert!(
        f.store_plans(B, Some("me"), plans)
            .await
            .expect("store")
            .is_some()
    );
    let gone = [(MEMBER.to_owned(), 1)];
    assert_eq!(
        f.remove(B, Some("other"), &gone).await.expect("remove"),
        None
    );
}

#[tokio::test]
async fn a_plan_of_no_fire_ends_the_schedule_until_it_is_revised() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let o = applied(&s).await;
    let stored = s
        .fires()
        .store_plans(B, None, &[plan(&o, Vec::new())])
        .await;
    assert_eq!(stored.expect("store"), Some((None, vec![true])));
    let st = &s.fires().states(B).await.expect("states")[0].1;
    assert!(st.ended);
    assert!(fire(&s).await.to_plan.is_empty());
    let f = s.fires();
    f.apply(B, None, &[(MEMBER.to_owned(), def(2), None)])
        .await
        .expect("apply");
    assert!(!f.states(B).await.expect("states")[0].1.ended);
    assert_eq!(fire(&s).await.to_plan.len(), 1);
}

#[tokio::test]
async fn a_parked_schedule_fires_nothing_and_its_state_is_taken_over_where_it_moved() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let o = applied(&s).await;
    let cursor = o.to_plan[0].cursor_ms;
    let f = s.fires();
    let due = vec![planned(cursor + 1, cursor + 1, true)];
    f.store_plans(B, None, &[plan(&o, due)])
        .await
        .expect("store");
    let o = fire(&s).await;
    assert_eq!(o.fired, 1);
    let before = f.states(B).await.expect("states")[0].1.clone();

    // Parked: it fires nothing more here, and keeps its state.
    let next = vec![planned(cursor + 2, cursor + 2, true)];
    f.store_plans(B, None, &[plan(&o, next)])
        .await
        .expect("store");
    let parked = f.park(B, None, &[MEMBER.to_owned()]).await.expect("park");
    assert_eq!(parked, Some(vec![true]));
    let o = fire(&s).await;
    assert_eq!((o.fired, o.next_fire_ms), (0, None), "parked: not due");
    let st = f.states(B).await.expect("states")[0].1.clone();
    assert!(st.parked && st.plan.is_empty());
    assert_eq!((st.fired, st.cursor_ms), (before.fired, before.cursor_ms));

    // Where it moved (another slot here, as another shard would be): the
    // same definition takes the parked state over, cursor and counts.
    let to = B + 1;
    let took = f
        .apply(to, None, &[(MEMBER.to_owned(), def(1), Some(st.clone()))])
        .await
        .expect("apply");
    assert_eq!(took, Some(vec![true]));
    let there = f.states(to).await.expect("states")[0].1.clone();
    assert!(!there.parked);
    assert_eq!((there.fired, there.cursor_ms), (st.fired, st.cursor_ms));
    let o = s.fires().fire(to, 100, None, &[]).await.expect("fire");
    assert_eq!(
        o.to_plan[0].cursor_ms, st.cursor_ms,
        "planned from its cursor"
    );
    // Its own parked state comes back to life with its cursor when the
    // definition is applied over it again.
    let back = f
        .apply(B, None, &[(MEMBER.to_owned(), def(1), None)])
        .await
        .expect("apply");
    assert_eq!(back, Some(vec![true]));
    let again = f.states(B).await.expect("states")[0].1.clone();
    assert!(!again.parked);
    assert_eq!(again.cursor_ms, st.cursor_ms);
    // The place it moved to drops a parked copy only: this one is active
    // again, and stays.
    let gone = [(MEMBER.to_owned(), 1)];
    assert_eq!(
        f.drop_parked(B, &gone).await.expect("drop"),
        Some(vec![false])
    );
    assert_eq!(f.states(B).await.expect("states").len(), 1);
    f.park(B, None, &[MEMBER.to_owned()]).await.expect("park");
    assert_eq!(
        f.drop_parked(B, &gone).await.expect("drop"),
        Some(vec![true])
    );
    assert!(f.states(B).await.expect("states").is_empty());
}

#[tokio::test]
async fn a_fire_whose_key_names_a_live_job_publishes_nothing_until_it_is_done() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let f = s.fires();
    let o = applied_keyed(&s, "report").await;
    let now = o.now_ms;
    let fires = vec![
        planned(now + 100, now + 100, true),
        planned(now + 200, now + 200, true),
        planned(now + 900, now + 900, true),
    ];
    let (first, third) = (fires[0].clone(), fires[2].clone());
    f.store_plans(B, None, &[plan(&o, fires)])
        .await
        .expect("store");
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The first fire publishes with the key; the second finds it named.
    let o = fire(&s).await;
    assert_eq!(o.fired, 1);
    assert_eq!(o.per_queue, vec![per("ns/q", 1, 1, 0)]);
    assert_eq!(ready(&s).await, 1);
    let st = f.state(B, MEMBER).await.expect("state").expect("held");
    assert_eq!(st.cursor_ms, now + 200, "the duplicate fire is handled");
    assert_eq!(st.last.map(|l| l.id), Some(first.id.clone()));

    // Once that job is done, the key is free: the next fire publishes.
    let id = JobId::parse(&first.id).expect("an id");
    assert!(s.jobs().delete(B, &qn("q"), &id).await.expect("delete"));
    tokio::time::sleep(Duration::from_millis(700)).await;
    let o = fire(&s).await;
    assert_eq!(o.per_queue, vec![per("ns/q", 1, 0, 0)]);
    let st = f.state(B, MEMBER).await.expect("state").expect("held");
    assert_eq!(st.last.map(|l| l.id), Some(third.id));
}

#[tokio::test]
async fn schedules_of_one_queue_fired_together_keep_their_own_retry_policies() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    // Two packed policies that differ only after a NUL byte.
    let policies = [
        [1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7],
        [1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8],
    ];
    let members = ["ns/q/a", "ns/q/b"];
    let defs: Vec<_> = members
        .iter()
        .zip(policies)
        .map(|(m, p)| {
            (
                (*m).to_owned(),
                FireDef {
                    policy: Some(p),
                    ..def(1)
                },
                None,
            )
        })
        .collect();
    let f = s.fires();
    f.apply(B, None, &defs).await.expect("apply");
    let o = fire(&s).await;
    let now = o.now_ms;
    let plans = one_fire_each(&o, now + 100);
    assert_eq!(plans.len(), 2);
    f.store_plans(B, None, &plans).await.expect("store");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fire(&s).await.fired, 2, "both in one call");

    let mut c = redis::Client::open(redis.url())
        .expect("client")
        .get_connection()
        .expect("conn");
    for p in &plans {
        let i = members.iter().position(|m| *m == p.member).expect("member");
        let record: Vec<u8> = c
            .hget(SlotKeys::new(B).jobs(), &p.fires[0].id)
            .expect("hget");
        assert!(
            record.windows(16).any(|w| w == policies[i]),
            "{} was published with its own policy",
            p.member
        );
    }
}

#[tokio::test]
async fn a_namespace_held_to_a_quota_stores_no_more_than_was_admitted_and_nothing_when_refused() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let members = ["ns/q/a", "ns/q/b", "ns/q/c", "other/q/d"];
    let defs: Vec<_> = members
        .iter()
        .map(|m| ((*m).to_owned(), def(1), None))
        .collect();
    let f = s.fires();
    f.apply(B, None, &defs).await.expect("apply");
    let o = fire(&s).await;
    let now = o.now_ms;
    let plans = one_fire_each(&o, now + 500);
    f.store_plans(B, None, &plans).await.expect("store");
    assert!(
        f.due(B, 100, 0).await.expect("due").is_empty(),
        "none due yet"
    );
    let ahead = f.due(B, 100, 2_000).await.expect("due");
    assert_eq!(ahead.len(), 4, "due within 2 s");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut due = f.due(B, 100, 0).await.expect("due");
    due.sort();
    assert_eq!(due, members, "what the pump counts before it admits");
    let held = |room| vec![("ns".to_owned(), room)];
    let room = |jobs, bytes| Room::Admitted(Usage { jobs, bytes });
    let stored = |o: &FireOutcome| o.stored.clone();
    let ns_usage = || async { s.slots().namespace_usage(&[B], "ns").await.expect("usage") };

    // None admitted yet: the held namespace's schedules wait 25 ms (for
    // the pump to admit them again), the other's fires.
    let o = f.fire(B, 100, None, &held(room(0, 0))).await.expect("fire");
    assert_eq!(o.per_queue, vec![per("other/q", 1, 0, 0)]);
    assert_eq!(stored(&o), vec![("ns".to_owned(), Usage::default())]);
    assert_eq!(
        o.next_fire_ms,
        Some(o.now_ms + 25 + FIRE_AHEAD_MS),
        "they wait, not at once"
    );
    // Their entries are scored FIRE_AHEAD_MS later, as a pump calls that
    // long before an entry's score.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(f.due(B, 100, FIRE_AHEAD_MS).await.expect("due").len(), 3);

    // Two jobs admitted: two fire, the third waits; the call says what
    // they stored, as the slot counts it.
    let o = f
        .fire(B, 100, None, &held(room(2, 1 << 20)))
        .await
        .expect("fire");
    assert_eq!(
        (o.fired, o.per_queue.clone()),
        (2, vec![per("ns/q", 2, 0, 0)])
    );
    let two = o.stored[0].1;
    assert_eq!(two.jobs, 2);
    assert_eq!(
        ns_usage().await,
        two,
        "what the fires stored, as the slot counts it"
    );
    assert_eq!(
        o.next_fire_ms,
        Some(o.now_ms + 25 + FIRE_AHEAD_MS),
        "the third waits"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(f.due(B, 100, FIRE_AHEAD_MS).await.expect("due").len(), 1);

    // Bytes for less than one fire: it waits, whatever the jobs.
    let o = f
        .fire(B, 100, None, &held(room(5, two.bytes / 2 - 1)))
        .await
        .expect("fire");
    assert_eq!(
        (o.fired, stored(&o)),
        (0, vec![("ns".to_owned(), Usage::default())])
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let left = f.due(B, 100, FIRE_AHEAD_MS).await.expect("due");
    assert_eq!(left.len(), 1);

    // Refused: the last is handled, published nothing, and counts refused.
    let o = f
        .fire(B, 100, None, &held(Room::Refused))
        .await
        .expect("fire");
    assert_eq!(
        (o.fired, o.per_queue.clone()),
        (0, vec![per("ns/q", 0, 0, 1)])
    );
    assert!(f.due(B, 100, 0).await.expect("due").is_empty());
    assert_eq!(ready(&s).await, 2, "only the admitted fires were published");
    let st = f.state(B, &left[0]).await.expect("state").expect("held");
    assert_eq!(
        st.cursor_ms,
        now + 500,
        "the refused fire is not fired again"
    );
    assert_eq!((st.fired, st.last), (0, None));
}

/// A fire that comes due within [`FIRE_AHEAD_MS`] is written ahead: a
/// delayed job, counted from its due time, that the slot's timer makes
/// ready at that time and not before.
#[tokio::test]
async fn a_fire_due_within_the_ahead_window_is_written_as_a_delayed_job_ready_at_its_time() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let mut o = applied(&s).await;
    // The fire is planned 40 ms out; a machine slow enough to pass that
    // before the call tries again once the schedule asks for a plan.
    let (fire_at, written) = loop {
        let at = o.now_ms + FIRE_AHEAD_MS - 10;
        let p = plan(&o, vec![planned(at - 10, at, true)]);
        s.fires().store_plans(B, None, &[p]).await.expect("store");
        let w = fire(&s).await;
        if w.now_ms < at {
            break (at, w);
        }
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        o = fire(&s).await;
    };
    assert_eq!(written.fired, 1);
    assert_eq!(written.ready_ms, Some(fire_at), "the timer is told when");
    assert_eq!(written.written_ahead, 1);
    assert_eq!(written.lateness_ms, vec![0]);
    assert_eq!(written.per_queue, vec![per("ns/q", 1, 0, 0)]);
    let counts = s.queues().counts(B, &qn("q")).await.expect("counts");
    assert_eq!(counts.delayed, 1);
    let ready_before = counts.ready;
    let st = s
        .fires()
        .state(B, MEMBER)
        .await
        .expect("state")
        .expect("held");
    let id = JobId::parse(&st.last.expect("its last fire").id).expect("an id");
    let job = s
        .jobs()
        .peek(B, &qn("q"), &id)
        .await
        .expect("peek")
        .expect("stored");
    assert_eq!(
        (job.state, job.elapsed_ms),
        (sundial_core::state::DELAYED, 0)
    );
    let attrs: serde_json::Value = serde_json::from_str(&job.attrs).expect("json");
    assert_eq!(attrs["scheduled-at"], (fire_at - 10).to_string());

    // The timer moves it when it is due, never before.
    let mut pumped = s.timers().pump(B, 100, None).await.expect("pump");
    while pumped.now_ms < fire_at {
        assert_eq!(pumped.to_ready, 0, "never early");
        assert_eq!(ready(&s).await, ready_before);
        tokio::time::sleep(Duration::from_millis(5)).await;
        pumped = s.timers().pump(B, 100, None).await.expect("pump");
    }
    assert_eq!(ready(&s).await, ready_before + 1);
    let job = s
        .jobs()
        .peek(B, &qn("q"), &id)
        .await
        .expect("peek")
        .expect("stored");
    assert_eq!(job.state, sundial_core::state::READY);
    assert!(
        job.elapsed_ms <= pumped.now_ms - fire_at + 5,
        "it counts from its due time: {} ms",
        job.elapsed_ms
    );
}

/// A schedule whose job has an idempotency key is not written ahead: its
/// key is checked at the fire's time, as a publish then would.
#[tokio::test]
async fn a_keyed_fire_is_not_written_ahead() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let f = s.fires();
    let o = applied_keyed(&s, "tick").await;
    let at = o.now_ms + FIRE_AHEAD_MS - 10;
    let p = plan(&o, vec![planned(at, at, true)]);
    f.store_plans(B, None, &[p]).await.expect("store");
    let early = fire(&s).await;
    if early.now_ms < at {
        assert_eq!((early.fired, early.ready_ms, ready(&s).await), (0, None, 0));
        assert_eq!(
            early.next_fire_ms,
            Some(at + FIRE_AHEAD_MS),
            "called again at its time"
        );
        let counts = s.queues().counts(B, &qn("q")).await.expect("counts");
        assert_eq!(counts.delayed, 0, "nothing written ahead");
        tokio::time::sleep(Duration::from_millis(at - early.now_ms + 5)).await;
        let o = fire(&s).await;
        assert_eq!(o.fired, 1);
    }
    assert_eq!(ready(&s).await, 1, "ready at once at its time");
}

/// Plans made for a schedule before it was parked (a pump stores its plans
/// a step after they were asked for) are refused: the parked state stays
/// parked, neither ended by an empty plan nor armed by another, for the
/// place it moved to to take over.
#[tokio::test]
async fn a_plan_made_before_its_schedule_was_parked_is_refused() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let o = applied(&s).await;
    let f = s.fires();
    let parked = f.park(B, None, &[MEMBER.to_owned()]).await.expect("park");
    assert_eq!(parked, Some(vec![true]));
    let at = o.to_plan[0].cursor_ms + 1_000;
    for fires in [Vec::new(), vec![planned(at, at, true)]] {
        let stored = f.store_plans(B, None, &[plan(&o, fires)]).await;
        assert_eq!(stored.expect("store"), Some((None, vec![false])));
        let st = f.states(B).await.expect("states")[0].1.clone();
        assert!(st.parked && !st.ended && st.plan.is_empty(), "{st:?}");
    }
    assert_eq!(fire(&s).await.next_fire_ms, None, "nothing is armed");
}
