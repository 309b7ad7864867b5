//! A slot's due fires, fired, and the schedules that ask planned: the
//! missed fires their policies keep and the fires ahead, with job ids in
//! the slot's lane; and the fires counted in the metrics.

use sundial_core::{
    EngineError, FireOutcome, JobId, Plan, PlannedFire, Shard, ToPlan,
    series::{Handle, Kind},
};
use sundial_router::schedule::{self, Timing, placed};

use super::{
    keeper::{Fenced, SlotSchedules},
    rooms::Rooms,
};

/// The most fire calls of `limit` fires each that one step makes before it
/// plans: fires due together are all published before the plans they ask
/// for are made and stored, which can wait a second for an every-second
/// schedule (it asks with one fire still planned).
const FIRE_CALLS_MOST: u32 = 4;
/// The most plans one call stores: a call holds Redis for about 20 µs a
/// plan, and a thousand schedules due together ask together.
const PLANS_PER_CALL: usize = 100;

/// What a step fired: the slot's next fire, and the earliest due time of
/// the jobs it wrote ahead (see [`sundial_core::FIRE_AHEAD_MS`]), on the
/// shard's clock, as of `now_ms` (its last fire call's), which was when
/// `at` was; and how many jobs it wrote ahead.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fired {
    pub(crate) next_ms: Option<u64>,
    pub(crate) ready_ms: Option<u64>,
    pub(crate) written_ahead: u64,
    pub(crate) now_ms: u64,
    pub(crate) at: std::time::Instant,
}

impl SlotSchedules {
    /// Fires the slot's due fires (up to [`FIRE_CALLS_MOST`] calls of
    /// `limit`) and plans the schedules that asked, or defers their plans
    /// when it wrote jobs ahead (see [`SlotSchedules::plan_deferred`]).
    /// Returns the slot's next fire.
    pub(crate) async fn fire(
        &mut self,
        shard: &Shard,
        limit: u32,
    ) -> Result<Result<Fired, Fenced>, EngineError> {
        let Some((o, to_plan, at)) = self.fire_due(shard, limit).await? else {
            return Ok(Err(Fenced));
        };
        let fired = |next_ms| Fired {
            next_ms,
            ready_ms: o.ready_ms,
            written_ahead: o.written_ahead,
            now_ms: o.now_ms,
            at,
        };
        // Every ask waits in `deferred` (a schedule's latest), until now or
        // until the jobs written ahead are ready.
        self.deferred
            .extend(to_plan.into_iter().map(|t| (t.member.clone(), t)));
        if let Some(ready_ms) = o.ready_ms.filter(|_| !self.deferred.is_empty()) {
            // Planning holds Redis about 20 µs a plan, and every-second
            // schedules due together ask together: planned now, a
            // thousand would hold up the timer's move of the jobs just
            // written ahead. Most asked with a fire still planned; one
            // with none (new, revised, or out of plans) waits no more than
            // FIRE_AHEAD_MS and a pump call for its plan, and the slot's
            // next fire is known without them.
            self.deferred_until_ms = match self.deferred_until_ms {
                0 => ready_ms,
                until => until.min(ready_ms),
            };
            return Ok(Ok(fired(o.next_fire_ms)));
        }
        let mut next = o.next_fire_ms;
        if self
            .plan_deferred(shard, o.now_ms, &mut next)
            .await?
            .is_err()
        {
            return Ok(Err(Fenced));
        }
        // More due than one call fired: come back at once.
        let next = match o.next_fire_ms {
            Some(more) if more <= o.now_ms + sundial_core::FIRE_AHEAD_MS => Some(more),
            _ => next,
        };
        Ok(Ok(fired(next)))
    }

    /// Whether plans wait for the jobs written ahead with them, and the
    /// first of those is due by `now_ms`, or is `late_ms` past it: a pump
    /// call that moves a backlog does not hold them longer than that. A
    /// time further ahead than jobs are ever written (the shard's clock
    /// went back: a failover to a host behind) counts as due.
    pub(crate) fn plans_due(&self, now_ms: u64, late_ms: u64) -> bool {
        let until = self.deferred_until_ms;
        !self.deferred.is_empty()
            && (now_ms >= until.saturating_add(late_ms)
                || now_ms.saturating_add(sundial_core::FIRE_AHEAD_MS) < until)
    }

    /// Plans the schedules that asked (`deferred`) as of `now_ms`, and
    /// stores the plans; `next_fire` becomes the slot's next fire after
    /// them when a call was made. The asks are kept for the next step when
    /// a call fails (a plan over a state that moved since is refused, and
    /// its schedule asks again).
    pub(crate) async fn plan_deferred(
        &mut self,
        shard: &Shard,
        now_ms: u64,
        next_fire: &mut Option<u64>,
    ) -> Result<Result<(), Fenced>, EngineError> {
        let plans: Vec<Plan> = self
            .deferred
            .values()
            .filter_map(|t| self.plan(t, now_ms))
            .collect();
        let owner = Some(self.owner.as_str());
        for chunk in plans.chunks(PLANS_PER_CALL) {
            let Some((after, stored)) = shard.fires().store_plans(self.slot, owner, chunk).await?
            else {
                return Ok(Err(Fenced));
            };
            *next_fire = after;
            for (p, _) in chunk
                .iter()
                .zip(&stored)
                .filter(|(p, s)| **s && p.skipped > 0)
            {
                self.count(&p.member, "missed", p.skipped);
            }
        }
        self.deferred.clear();
        self.deferred_until_ms = 0;
        Ok(Ok(()))
    }

    /// The rooms of the slot's namespaces held to a quota, for a fire call
    /// of `limit` (none while the book is not current).
    async fn rooms(&self, shard: &Shard, limit: u32) -> Result<Rooms, EngineError> {
        let Some((quotas, spaces)) = self.book.borrow().quotas(&self.pool, self.slot) else {
            return Ok(Rooms::default());
        };
        let held = quotas.held(shard, &self.pool, &spaces);
        quotas.rooms(shard, self.slot, held, limit).await
    }

    /// Fires what is due, a call of `limit` at a time, while more are due
    /// (at most [`FIRE_CALLS_MOST`] calls). Returns the last call's
    /// outcome (with the earliest job any call wrote ahead, and the number
    /// all wrote) and when it came, and the schedules that asked to be
    /// planned, in the order they asked; or `None` when the lease was lost.
    async fn fire_due(
        &self,
        shard: &Shard,
        limit: u32,
    ) -> Result<Option<(FireOutcome, Vec<ToPlan>, std::time::Instant)>, EngineError> {
        let owner = Some(self.owner.as_str());
        let mut asked: Vec<ToPlan> = Vec::new();
        let mut calls = 0;
        let (mut ready_ms, mut written_ahead) = (None, 0);
        loop {
            let rooms = self.rooms(shard, limit).await?;
            // Before the call: the shard's clock it answers with was read
            // after this, so a wake-up counted from here is never late.
            let at = std::time::Instant::now();
            let o = shard
                .fires()
                .fire(self.slot, limit, owner, &rooms.rooms)
                .await;
            rooms.ended(o.as_ref()).await;
            let mut o = o?;
            if o.fenced {
                return Ok(None);
            }
            calls += 1;
            ready_ms = ready_ms.into_iter().chain(o.ready_ms).min();
            written_ahead += o.written_ahead;
            (o.ready_ms, o.written_ahead) = (ready_ms, written_ahead);
            self.record(&o);
            asked.append(&mut o.to_plan);
            // More due within the call's reach than it could fire.
            let more = o
                .next_fire_ms
                .is_some_and(|at| at <= o.now_ms + sundial_core::FIRE_AHEAD_MS);
            if !more || calls >= FIRE_CALLS_MOST {
                return Ok(Some((o, asked, at)));
            }
        }
    }

    /// The fires of schedule `t` from its state, at `now_ms`.
    fn plan(&self, t: &ToPlan, now_ms: u64) -> Option<Plan> {
        let timing = serde_json::from_str::<Timing>(&t.timing)
            .map_err(|e| e.to_string())
            .and_then(|t| Ok((t.recurrence().map_err(|e| e.to_string())?, t)));
        let (when, timing) = match timing {
            Ok(t) => t,
            Err(why) => {
                tracing::warn!(
                    pool = self.pool,
                    slot = self.slot,
                    schedule = t.member,
                    why,
                    "a schedule's timing does not read; not planned"
                );
                return None;
            }
        };
        let p = schedule::plan(&timing, &when, t.cursor_ms, now_ms, |max| {
            rand::random_range(0..=max)
        });
        let name = t.member.splitn(3, '/').nth(2).unwrap_or_default();
        // The lane the slot's definition was placed by: its key's, or its
        // name's.
        let lane = placed::lane_of(name, Some(t.key.as_str()), self.lanes);
        let fires = p
            .fires
            .iter()
            .map(|f| PlannedFire {
                at_ms: f.at_ms,
                due_ms: f.due_ms,
                id: JobId::mint_in_lane(true, lane, self.lanes)
                    .as_str()
                    .to_owned(),
                late_ok: f.late_ok,
            })
            .collect();
        Some(Plan {
            member: t.member.clone(),
            rev: t.rev,
            cursor_ms: t.cursor_ms,
            new_cursor_ms: p.cursor_ms,
            skipped: p.skipped,
            fires,
        })
    }

    fn record(&self, o: &FireOutcome) {
        for q in &o.per_queue {
            for (outcome, n) in [
                ("fired", q.fired),
                ("duplicate", q.duplicates),
                ("refused", q.refused),
            ] {
                if n > 0 {
                    self.count(&q.queue, outcome, n);
                }
            }
        }
        let lateness = metrics::histogram!("sundial_schedule_fire_lateness_seconds", "pool" => self.pool.clone());
        for late in &o.lateness_ms {
            lateness.record(*late as f64 / 1000.0);
        }
    }

    /// Counts `n` fires of `outcome` of the queue of `member_or_queue`
    /// (`<ns>/<queue>`, and a schedule's name after it or not).
    fn count(&self, member_or_queue: &str, outcome: &str, n: u64) {
        let mut parts = member_or_queue.splitn(3, '/');
        let (Some(ns), Some(queue)) = (parts.next(), parts.next()) else {
            return;
        };
        let labels = [
            ("pool", self.pool.clone()),
            ("namespace", ns.to_owned()),
            ("queue", queue.to_owned()),
            ("outcome", outcome.to_owned()),
        ];
        Handle::new("sundial_schedule_fires_total", &labels, Kind::Counter).increment(n);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use sundial_core::{FireDef, keys};
    use sundial_router::schedule::Missed;
    use tokio::sync::Notify;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use std::sync::Arc;

    use tokio::sync::watch;

    use crate::schedules::book::{Book, Entry, Page};
    use crate::{
        options::PumpOptions,
        permits::CallPermits,
        slot::{Ended, Lags, SlotPump, run},
    };

    /// An every-second schedule anchored at `anchor_ms`, as its slot holds it.
    fn every_second(anchor_ms: u64) -> Arc<FireDef> {
        let timing = Timing {
            cron: None,
            tz: None,
            every: Some(1),
            anchor_ms,
            start_ms: None,
            end_ms: None,
            jitter_ms: 0,
            grace_ms: 60_000,
            missed: Missed::Skip,
        };
        Arc::new(FireDef {
            rev: 1,
            grace_ms: 60_000,
            paused: false,
            ttl_ms: 0,
            tries: 1,
            priority: 0,
            policy: None,
            attrs: r#"{"schedule":"tick""#.to_owned(),
            timing: serde_json::to_string(&timing).expect("json"),
            key: String::new(),
            key_window_ms: 0,
            body: Bytes::from_static(b"tick"),
        })
    }

    #[tokio::test]
    async fn a_slot_loop_fires_its_schedules_and_stops_once_they_go() {
        let redis = sundial_tests::RedisServer::start();
        let slot = keys::slot_of("ns", "q", keys::schedule_lane("tick", 1), 8);
        let shard = crate::testing::leased_shard(&redis, slot).await;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        let entry = Entry {
            def: every_second(now),
            also: None,
            quota_pool: "p".into(),
        };
        let page: Page = [("ns/q/tick".to_owned(), entry)].into();
        let (book, pages) =
            watch::channel(Arc::new(Book::of(vec![(("p".to_owned(), slot), page)])));
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            SlotPump {
                pool: "p".to_owned(),
                shard: shard.clone(),
                slot,
                owner: "me".to_owned(),
                wake: Arc::new(Notify::new()),
                opts: PumpOptions::default(),
                lag: Lags::default(),
                calls: CallPermits::new(4),
                schedules: Some(SlotSchedules::new(
                    "p".to_owned(),
                    slot,
                    1,
                    "me".to_owned(),
                    pages,
                    Box::new(crate::schedules::keeper::Here),
                )),
                written_ahead: 0,
            },
            stop.clone(),
        ));
        let ready = || async {
            shard
                .queues()
                .counts(slot, "ns/q")
                .await
                .expect("counts")
                .ready
        };
        tokio::time::sleep(Duration::from_millis(2_600)).await;
        let fired = ready().await;
        assert!((2..=3).contains(&fired), "fired {fired} in 2.6 s");
        let states = shard.fires().states(slot).await.expect("states");
        let st = &states[0].1;
        assert_eq!(st.fired, fired);
        let last = st.last.as_ref().expect("a last fire");
        assert_eq!((last.at_ms - now) % 1000, 0, "on the interval");
        assert!(last.published_ms >= last.at_ms, "never early");

        // The schedule leaves the table: it leaves the slot, and fires no more.
        book.send_replace(Arc::new(Book::of(Vec::new())));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(shard.fires().states(slot).await.expect("states").is_empty());
        let after = ready().await;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(ready().await, after, "no fire once it went");
        stop.cancel();
        assert_eq!(task.await.expect("slot task"), Ended::Stopped);
    }

    /// A fire step that writes jobs ahead leaves the plans its schedules
    /// asked for until the pump call that makes those jobs ready has run:
    /// planning a thousand schedules due together would hold that call
    /// up. Then they are stored, and the slot's next fire is theirs.
    #[tokio::test]
    async fn plans_asked_by_a_step_that_wrote_ahead_are_stored_after_the_jobs_are_ready() {
        let redis = sundial_tests::RedisServer::start();
        let slot = keys::slot_of("ns", "q", keys::schedule_lane("tick", 1), 8);
        let shard = crate::testing::leased_shard(&redis, slot).await;
        let member = "ns/q/tick".to_owned();
        let def = (*every_second(0)).clone();
        let applied = shard
            .fires()
            .apply(slot, Some("me"), &[(member.clone(), def, None)])
            .await
            .expect("apply");
        assert_eq!(applied, Some(vec![true]));
        let asked = shard
            .fires()
            .fire(slot, 10, Some("me"), &[])
            .await
            .expect("fire");
        let t = &asked.to_plan[0];
        // One fire left, due within the window the pumps write ahead.
        let due = asked.now_ms + sundial_core::FIRE_AHEAD_MS / 2;
        let one = Plan {
            member: member.clone(),
            rev: t.rev,
            cursor_ms: t.cursor_ms,
            new_cursor_ms: t.cursor_ms,
            skipped: 0,
            fires: vec![PlannedFire {
                at_ms: due,
                due_ms: due,
                id: JobId::mint_in_lane(true, 0, 1).as_str().to_owned(),
                late_ok: true,
            }],
        };
        let stored = shard.fires().store_plans(slot, Some("me"), &[one]).await;
        assert_eq!(stored.expect("store").map(|s| s.1), Some(vec![true]));

        let (_book, pages) = watch::channel(Arc::new(Book::of(Vec::new())));
        let mut s = SlotSchedules::new(
            "p".into(),
            slot,
            1,
            "me".into(),
            pages,
            Box::new(crate::schedules::keeper::Here),
        );
        let fired = s.fire(&shard, 10).await.expect("fire").expect("held");
        assert_eq!((fired.written_ahead, fired.ready_ms), (1, Some(due)));
        let states = shard.fires().states(slot).await.expect("states");
        assert!(states[0].1.plan.is_empty(), "not planned yet");
        assert!(!s.plans_due(due - 1, 0), "not before the jobs are due");
        assert!(s.plans_due(due, 0));
        assert!(!s.plans_due(due, 50), "a backlog's call holds them a while");
        assert!(s.plans_due(due + 50, 50), "but not longer");
        let behind = due - sundial_core::FIRE_AHEAD_MS - 1;
        assert!(
            s.plans_due(behind, 0),
            "a clock that went back does not hold them"
        );

        // The pump call that makes the job ready, then the plans.
        tokio::time::sleep(Duration::from_millis(sundial_core::FIRE_AHEAD_MS)).await;
        let o = shard
            .timers()
            .pump(slot, 100, Some("me"))
            .await
            .expect("pump");
        assert_eq!(o.to_ready, 1);
        let mut next = o.next_fire_ms;
        let planned = s.plan_deferred(&shard, o.now_ms, &mut next).await;
        planned.expect("plan").expect("held");
        assert!(!s.plans_due(u64::MAX, 0), "nothing is left to plan");
        let states = shard.fires().states(slot).await.expect("states");
        let plan = &states[0].1.plan;
        assert!(plan.len() >= 2, "planned ahead: {plan:?}");
        assert_eq!(
            next,
            Some(plan[0].due_ms),
            "the slot's next fire is the plan's first"
        );
        assert!(plan[0].due_ms > o.now_ms);
    }
}
