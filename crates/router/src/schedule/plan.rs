//! Planning a schedule's fires, as the pumps do for its slot: from the
//! slot's cursor (the last fire handled) and the shard's clock, the missed
//! fires its policy keeps, then the fires ahead, a few at a time, each
//! with its jitter drawn. The slot's fire script publishes them as they
//! come due (`sundial_core`'s `lua/fire.lua`).

use serde::{Deserialize, Serialize};

use super::{Missed, Recurrence, ScheduleDef, SpecError};

/// The most fires one plan holds: each fire reads and writes its
/// schedule's whole state, plan included, so a longer plan costs every
/// fire more (with 32, a fire of an every-second schedule took 1.7 times
/// the Redis time it takes with 8), while a shorter one asks for plans
/// more often.
pub const PLAN_MOST: usize = 8;
/// A plan stops at the first fire this far ahead (ms) once it holds two
/// fires ahead: an every-second schedule is planned 8 s ahead, an
/// every-ten-seconds one a minute ahead, an hourly one two fires ahead.
pub const PLAN_AHEAD_MS: u64 = 60_000;
/// The most fires late within their grace that one plan fires: older
/// ones count as missed (a grace of hours over an every-second schedule
/// would otherwise fire thousands at once after an outage).
pub const LATE_MOST: usize = 100;
/// The most missed fires one plan counts (the fires are not walked past
/// it: an every-second schedule misses 86,400 a day).
pub const MISSED_COUNTED_MOST: usize = 10_000;

/// When a schedule fires and what it does with fires it missed: the part
/// of its definition that planning reads, kept as JSON in its slot so that
/// a pump plans from the slot alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    pub anchor_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    #[serde(default)]
    pub jitter_ms: u64,
    pub grace_ms: u64,
    pub missed: Missed,
}

impl Timing {
    /// The timing of `def`.
    pub fn of(def: &ScheduleDef) -> Self {
        Self {
            cron: def.cron.clone(),
            tz: def.tz.clone(),
            every: def.every,
            anchor_ms: def.anchor_ms,
            start_ms: def.start_ms,
            end_ms: def.end_ms,
            jitter_ms: def.jitter_ms,
            grace_ms: def.grace_ms,
            missed: def.missed,
        }
    }

    /// When it fires.
    pub fn recurrence(&self) -> Result<Recurrence, SpecError> {
        super::spec::recurrence(
            self.cron.as_deref(),
            self.tz.as_deref(),
            self.every,
            self.anchor_ms,
            (self.start_ms, self.end_ms),
        )
    }
}

/// One fire of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fire {
    /// The time it is for (ms).
    pub at_ms: u64,
    /// When it is due: its time plus its jitter.
    pub due_ms: u64,
    /// Fire however late it is found: the plan found it due already.
    pub late_ok: bool,
}

/// What a plan makes of a schedule's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The cursor past the missed fires skipped (the cursor planned from
    /// when none was).
    pub cursor_ms: u64,
    /// Missed fires skipped (counted up to [`MISSED_COUNTED_MOST`]).
    pub skipped: u64,
    /// In due order; none when the schedule has no fire left.
    pub fires: Vec<Fire>,
}

/// Plans the fires after `cursor_ms` at `now_ms` (shard clock). A fire
/// whose time is more than its grace and jitter before `now_ms` was
/// missed, and so is one older than the [`LATE_MOST`] latest due: of
/// those, the latest its policy keeps fire at once, the others are
/// skipped. The later ones fire at their time plus a jitter that
/// `jitter(max)` draws (0 to `max`).
pub fn plan(
    t: &Timing,
    when: &Recurrence,
    cursor_ms: u64,
    now_ms: u64,
    mut jitter: impl FnMut(u64) -> u64,
) -> Planned {
    let mut missed_until = now_ms.saturating_sub(t.grace_ms.saturating_add(t.jitter_ms));
    let late = when.latest(missed_until.max(cursor_ms), now_ms, LATE_MOST + 1);
    if late.len() > LATE_MOST {
        missed_until = late[0];
    }
    let mut out = Planned {
        cursor_ms,
        skipped: 0,
        fires: Vec::new(),
    };
    let mut from = cursor_ms;
    if missed_until > cursor_ms {
        let kept = when.latest(cursor_ms, missed_until, t.missed.most());
        let missed = when
            .fires_after(cursor_ms)
            .take_while(|&at| at <= missed_until)
            .take(MISSED_COUNTED_MOST)
            .count();
        out.skipped = missed.saturating_sub(kept.len()) as u64;
        out.cursor_ms = match kept.first() {
            Some(&first) => first - 1,
            None => when
                .latest(cursor_ms, missed_until, 1)
                .first()
                .copied()
                .unwrap_or(cursor_ms),
        };
        out.fires.extend(kept.iter().map(|&at| Fire {
            at_ms: at,
            due_ms: at,
            late_ok: true,
        }));
        from = missed_until;
    }
    let mut ahead = 0;
    for at in when.fires_after(from) {
        if out.fires.len() >= PLAN_MOST || (ahead >= 2 && at > now_ms + PLAN_AHEAD_MS) {
            break;
        }
        let due_ms = at + jitter(t.jitter_ms).min(t.jitter_ms);
        if at > now_ms {
            ahead += 1;
        }
        out.fires.push(Fire {
            at_ms: at,
            due_ms,
            late_ok: due_ms <= now_ms,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::spec::tests::every;

    const T: u64 = 1_780_000_000_000;

    /// An every-`secs` schedule anchored at `T`, with a grace of a second.
    fn timing(secs: u64, missed: Missed) -> (Timing, Recurrence) {
        let mut def = every(secs);
        def.anchor_ms = T;
        def.grace_ms = 1_000;
        def.missed = missed;
        let t = Timing::of(&def);
        let when = t.recurrence().expect("a recurrence");
        (t, when)
    }

    fn times(p: &Planned) -> Vec<u64> {
        p.fires.iter().map(|f| (f.at_ms - T) / 1000).collect()
    }

    #[test]
    fn a_plan_holds_a_few_fires_ahead() {
        let (t, when) = timing(1, Missed::Skip);
        let p = plan(&t, &when, T, T + 500, |_| 0);
        assert_eq!(p.fires.len(), PLAN_MOST, "an every-second schedule");
        assert_eq!(times(&p)[..3], [1, 2, 3]);
        assert_eq!((p.cursor_ms, p.skipped), (T, 0));
        assert!(p.fires.iter().all(|f| !f.late_ok && f.due_ms == f.at_ms));
        let (t, when) = timing(3600, Missed::Skip);
        let p = plan(&t, &when, T, T + 500, |_| 0);
        assert_eq!(times(&p), [3600, 7200], "an hourly one: two ahead");
    }

    #[test]
    fn missed_fires_are_skipped_or_kept_as_the_policy_says() {
        // Nine fires (1 to 9 s) are more than the grace late at 10.5 s;
        // the one at 10 s is late within it, and fires.
        let now = T + 10_500;
        let (t, when) = timing(1, Missed::Skip);
        let p = plan(&t, &when, T, now, |_| 0);
        assert_eq!((p.skipped, p.cursor_ms), (9, T + 9_000));
        assert_eq!(times(&p)[..2], [10, 11]);
        assert!(p.fires[0].late_ok && !p.fires[1].late_ok);

        let (t, when) = timing(1, Missed::Once);
        let p = plan(&t, &when, T, now, |_| 0);
        assert_eq!((p.skipped, p.cursor_ms), (8, T + 8_999));
        assert_eq!(times(&p)[..3], [9, 10, 11]);
        assert!(p.fires[0].late_ok && p.fires[0].due_ms == p.fires[0].at_ms);

        let (t, when) = timing(1, Missed::CatchUp(3));
        let p = plan(&t, &when, T, now, |_| 0);
        assert_eq!((p.skipped, p.cursor_ms), (6, T + 6_999));
        assert_eq!(times(&p)[..5], [7, 8, 9, 10, 11]);

        let (t, when) = timing(1, Missed::CatchUp(100));
        let p = plan(&t, &when, T, now, |_| 0);
        assert_eq!((p.skipped, times(&p)[0]), (0, 1), "fewer missed than kept");
    }

    #[test]
    fn a_long_outage_is_counted_without_walking_it_all() {
        let (t, when) = timing(1, Missed::Once);
        let day = 86_400_000;
        let p = plan(&t, &when, T, T + day, |_| 0);
        assert_eq!(p.skipped, MISSED_COUNTED_MOST as u64 - 1);
        assert_eq!(p.fires[0].at_ms, T + day - 1_000, "the latest missed");
    }

    #[test]
    fn a_long_grace_fires_at_most_the_latest_hundred_late_fires() {
        let (mut t, when) = timing(1, Missed::Once);
        t.grace_ms = 86_400_000;
        // An hour late: 3,600 fires within the grace.
        let p = plan(&t, &when, T, T + 3_600_500, |_| 0);
        let hundred = LATE_MOST as u64;
        assert_eq!(p.skipped, 3_600 - hundred - 1, "older than the latest 100");
        assert_eq!(times(&p)[..2], [3_600 - hundred, 3_600 - hundred + 1]);
        assert_eq!(p.fires.len(), PLAN_MOST, "the rest in the plans after");
        assert!(p.fires.iter().all(|f| f.late_ok));
    }

    #[test]
    fn jitter_delays_a_fire_within_its_bound_and_never_brings_it_early() {
        let (mut t, when) = timing(60, Missed::Skip);
        t.jitter_ms = 5_000;
        let p = plan(&t, &when, T, T + 500, |max| max + 7);
        assert!(
            p.fires
                .iter()
                .all(|f| f.due_ms == f.at_ms + 5_000 && !f.late_ok)
        );
    }

    #[test]
    fn a_schedule_past_its_end_plans_nothing() {
        let mut def = every(1);
        def.anchor_ms = T;
        def.end_ms = Some(T + 2_000);
        let t = Timing::of(&def);
        let when = t.recurrence().expect("a recurrence");
        let p = plan(&t, &when, T, T + 500, |_| 0);
        assert_eq!(times(&p), [1, 2]);
        let p = plan(&t, &when, T + 2_000, T + 2_500, |_| 0);
        assert!(p.fires.is_empty(), "ended");
    }
}
