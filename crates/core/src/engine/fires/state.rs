//! A schedule as its slot holds it (`lua/lib/fires.lua`): its definition,
//! packed as the fire script reads it ([`FireDef`]), and its fire state
//! with its planned fires ([`FireState`]), as text.

use bytes::Bytes;

use crate::PackedPolicy;

/// A schedule's definition as its slot holds it: what the fire script
/// needs to publish its job, and its timing, which only the pumps read
/// (the router's JSON: the engine never looks into it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireDef {
    /// The revision of the schedule table's row: a slot takes a
    /// definition only over an older one.
    pub rev: u64,
    /// How late past its due time a planned fire may be found and still
    /// fire; later, it is missed.
    pub grace_ms: u32,
    pub paused: bool,
    /// The job's TTL (0: never expires).
    pub ttl_ms: u64,
    pub tries: u16,
    pub priority: u8,
    pub policy: Option<PackedPolicy>,
    /// The job's attributes: a JSON object without its closing brace,
    /// which the fire script closes after the fire's time. Holds at least
    /// the schedule's name (`{"schedule":"<name>"`).
    pub attrs: String,
    /// When it fires, for the pumps (JSON).
    pub timing: String,
    /// The idempotency key each fire's job is published with ("" for
    /// none): a fire while the key names a job publishes nothing.
    pub key: String,
    /// How long the key holds after a publish (ms), as a publish's
    /// `dedup_ttl`; 0: until the job is done.
    pub key_window_ms: u64,
    pub body: Bytes,
}

impl FireDef {
    /// Packed as `lua/lib/fires.lua` reads it (`fire_def`).
    pub fn pack(&self) -> Bytes {
        let policy: &[u8] = self.policy.as_ref().map_or(&[], |p| p.as_slice());
        let mut out = Vec::with_capacity(
            48 + self.attrs.len() + self.timing.len() + self.key.len() + self.body.len(),
        );
        out.extend_from_slice(&self.rev.to_be_bytes()[2..]);
        out.extend_from_slice(&self.grace_ms.to_be_bytes());
        out.push(u8::from(self.paused));
        out.extend_from_slice(&self.ttl_ms.to_be_bytes()[2..]);
        out.extend_from_slice(&self.tries.to_be_bytes());
        out.push(self.priority);
        out.push(policy.len() as u8);
        out.extend_from_slice(policy);
        for text in [&self.attrs, &self.timing, &self.key] {
            let len = u16::try_from(text.len()).unwrap_or(u16::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&text.as_bytes()[..usize::from(len)]);
        }
        out.extend_from_slice(&self.key_window_ms.to_be_bytes()[2..]);
        out.extend_from_slice(&self.body);
        Bytes::from(out)
    }

    /// The definition packed in `raw`, or `None` when it is not one.
    pub fn unpack(raw: &[u8]) -> Option<Self> {
        let mut r = Reader(raw);
        let rev = r.uint(6)?;
        let grace_ms = r.uint(4)? as u32;
        let paused = r.uint(1)? == 1;
        let ttl_ms = r.uint(6)?;
        let tries = r.uint(2)? as u16;
        let priority = r.uint(1)? as u8;
        let policy_len = r.uint(1)? as usize;
        let policy = match r.take(policy_len)? {
            [] => None,
            p => Some(p.try_into().ok()?),
        };
        let attrs_len = r.uint(2)? as usize;
        let attrs = String::from_utf8(r.take(attrs_len)?.to_vec()).ok()?;
        let timing_len = r.uint(2)? as usize;
        let timing = String::from_utf8(r.take(timing_len)?.to_vec()).ok()?;
        let key_len = r.uint(2)? as usize;
        let key = String::from_utf8(r.take(key_len)?.to_vec()).ok()?;
        let key_window_ms = r.uint(6)?;
        Some(Self {
            rev,
            grace_ms,
            paused,
            ttl_ms,
            tries,
            priority,
            policy,
            attrs,
            timing,
            key,
            key_window_ms,
            body: Bytes::copy_from_slice(r.0),
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn uint(&mut self, n: usize) -> Option<u64> {
        Some(self.take(n)?.iter().fold(0, |v, b| v << 8 | u64::from(*b)))
    }
}

/// One planned fire of a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFire {
    /// The time it is for (ms): the `scheduled-at` of its job.
    pub at_ms: u64,
    /// When it is due: its time plus a jitter (ms, at least `at_ms`).
    pub due_ms: u64,
    /// The id of the job it publishes: minted in the slot's lane.
    pub id: String,
    /// Fire however late it is found (the plan found it due already):
    /// such a fire is never missed.
    pub late_ok: bool,
}

impl PlannedFire {
    fn text(&self) -> String {
        let how = if self.late_ok { 'c' } else { 'n' };
        format!("{}:{}:{}:{how}", self.at_ms, self.due_ms, self.id)
    }

    fn parse(s: &str) -> Option<Self> {
        let mut p = s.split(':');
        let fire = Self {
            at_ms: p.next()?.parse().ok()?,
            due_ms: p.next()?.parse().ok()?,
            id: p.next()?.to_owned(),
            late_ok: p.next()? == "c",
        };
        p.next().is_none().then_some(fire)
    }

    /// Planned fires as a plan's argument: space-separated.
    pub(super) fn join(fires: &[Self]) -> String {
        fires.iter().map(Self::text).collect::<Vec<_>>().join(" ")
    }
}

/// A schedule's last fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastFire {
    /// The time it was for (ms).
    pub at_ms: u64,
    /// When it published its job (ms, shard clock); for one written ahead
    /// (see [`super::FIRE_AHEAD_MS`]), when its job is due to be ready.
    pub published_ms: u64,
    pub id: String,
}

/// A schedule's fire state in its slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireState {
    /// The revision of the definition it was planned for.
    pub rev: u64,
    /// No fire at or before this time (ms) fires again.
    pub cursor_ms: u64,
    /// Fires published.
    pub fired: u64,
    /// Fires missed and skipped, as the plans counted them.
    pub missed: u64,
    pub last: Option<LastFire>,
    /// No fire is left (past its end) until it is revised.
    pub ended: bool,
    /// Parked: its slot (or namespace) moved, and the place it moved to
    /// takes its state over; it fires nothing here.
    pub parked: bool,
    /// Its planned fires, in due order.
    pub plan: Vec<PlannedFire>,
}

impl FireState {
    /// The state written as `raw`, or `None` when it is not one.
    pub fn parse(raw: &str) -> Option<Self> {
        let mut w = raw.split_ascii_whitespace();
        let mut num = || w.next()?.parse::<u64>().ok();
        let (rev, cursor_ms, fired, missed) = (num()?, num()?, num()?, num()?);
        let (last_at, last_pub) = (num()?, num()?);
        let last_id = w.next()?;
        let (ended, parked) = match w.next()? {
            "0" => (false, false),
            "1" => (true, false),
            "p" => (false, true),
            _ => return None,
        };
        let plan = w.map(PlannedFire::parse).collect::<Option<Vec<_>>>()?;
        let last = (last_id != "-").then(|| LastFire {
            at_ms: last_at,
            published_ms: last_pub,
            id: last_id.to_owned(),
        });
        Some(Self {
            rev,
            cursor_ms,
            fired,
            missed,
            last,
            ended,
            parked,
            plan,
        })
    }

    /// Written as the scripts read it (`fire_state` in `lua/lib/fires.lua`).
    pub fn text(&self) -> String {
        let (last_at, last_pub, last_id) = match &self.last {
            Some(l) => (l.at_ms, l.published_ms, l.id.as_str()),
            None => (0, 0, "-"),
        };
        let ended = match (self.ended, self.parked) {
            (_, true) => "p",
            (true, false) => "1",
            (false, false) => "0",
        };
        let head = format!(
            "{} {} {} {} {last_at} {last_pub} {last_id} {ended}",
            self.rev, self.cursor_ms, self.fired, self.missed
        );
        if self.plan.is_empty() {
            head
        } else {
            format!("{head} {}", PlannedFire::join(&self.plan))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_packs_and_unpacks() {
        let def = FireDef {
            rev: 1_764_403_200_123,
            grace_ms: 60_000,
            paused: true,
            ttl_ms: 86_400_000,
            tries: 3,
            priority: 7,
            policy: Some([9; 16]),
            attrs: r#"{"schedule":"nightly""#.to_owned(),
            timing: r#"{"every":60}"#.to_owned(),
            key: "nightly-report".to_owned(),
            key_window_ms: 3_600_000,
            body: Bytes::from_static(b"\x00body\xff"),
        };
        assert_eq!(FireDef::unpack(&def.pack()), Some(def.clone()));
        let bare = FireDef {
            policy: None,
            key: String::new(),
            key_window_ms: 0,
            ..def
        };
        assert_eq!(FireDef::unpack(&bare.pack()), Some(bare));
        assert_eq!(FireDef::unpack(b"\x00\x01"), None);
    }

    #[test]
    fn a_state_reads_as_the_scripts_write_it() {
        let st = FireState::parse("5 1000 2 1 900 905 1ABC 0 1100:1150:1XYZ:n 1200:1200:1QRS:c")
            .expect("a state");
        assert_eq!((st.rev, st.cursor_ms, st.fired, st.missed), (5, 1000, 2, 1));
        assert_eq!(st.last.as_ref().map(|l| l.published_ms), Some(905));
        assert!(!st.ended);
        assert_eq!(st.plan.len(), 2);
        assert!(!st.plan[0].late_ok && st.plan[1].late_ok);
        assert_eq!(
            PlannedFire::join(&st.plan),
            "1100:1150:1XYZ:n 1200:1200:1QRS:c"
        );
        let raw = "5 1000 2 1 900 905 1ABC 0 1100:1150:1XYZ:n 1200:1200:1QRS:c";
        assert_eq!(st.text(), raw, "written as read");
        let fresh = FireState::parse("5 1000 0 0 0 0 - 1").expect("a state");
        assert!(fresh.last.is_none() && fresh.ended && fresh.plan.is_empty());
        assert_eq!(fresh.text(), "5 1000 0 0 0 0 - 1");
        let parked = FireState::parse("5 1000 0 0 0 0 - p").expect("a state");
        assert!(parked.parked && !parked.ended);
        assert_eq!(FireState::parse("5 1000 0 0 0 0 - x"), None);
        assert_eq!(FireState::parse("5 1000 0"), None);
    }
}
