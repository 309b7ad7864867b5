//! A slot's due fires, fired ([`Fires::fire`]): the call and its answer;
//! and which schedules are due ([`Fires::due`]), for a pump to admit their
//! fires under their namespaces' quotas first.

use fred::types::Value;

use super::Fires;
use crate::{
    EngineError, Usage,
    engine::{decode::Fields, keysets},
    keys::SlotKeys,
    scripts::SCRIPTS,
};

/// How far ahead of its due time a fire call writes a fire: as a delayed
/// job, which the slot's timer makes ready at that time. A pump calls for
/// fires this long before the slot's next one is due.
pub const FIRE_AHEAD_MS: u64 = 50;

/// A schedule that asked to be planned: it has one planned fire or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToPlan {
    /// `<ns>/<queue>/<name>`.
    pub member: String,
    /// The revision and cursor to plan from (see [`FireState`]).
    pub rev: u64,
    pub cursor_ms: u64,
    /// Its timing, as its definition holds it.
    pub timing: String,
    /// Its job's idempotency key, as its definition holds it ("" for
    /// none): the lane it was placed by, where its jobs' ids go.
    pub key: String,
}

/// What one fire call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FireOutcome {
    /// Jobs published.
    pub fired: u64,
    /// The slot's next planned fire (ms, shard clock); `now_ms` when more
    /// are due (within [`FIRE_AHEAD_MS`]) than the call could fire.
    pub next_fire_ms: Option<u64>,
    pub now_ms: u64,
    /// The earliest due time of the jobs the call wrote ahead: when the
    /// slot's timer must make the first of them ready.
    pub ready_ms: Option<u64>,
    /// Jobs the call wrote ahead.
    pub written_ahead: u64,
    /// The slot's lease was not held: nothing was fired.
    pub fenced: bool,
    /// Schedules to plan.
    pub to_plan: Vec<ToPlan>,
    /// How late each fire was published after it was due (ms; 0 for one
    /// written ahead).
    pub lateness_ms: Vec<u64>,
    /// Per namespace held to a quota (named in the call's rooms): what its
    /// fires stored (nothing for one refused).
    pub stored: Vec<(String, Usage)>,
    /// Per qualified queue fired into: what its fires did.
    pub per_queue: Vec<QueueFires>,
}

/// What a fire call's fires did in one queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueFires {
    /// `<ns>/<queue>`.
    pub queue: String,
    /// Jobs published.
    pub fired: u64,
    /// Fires that published nothing because their job's idempotency key
    /// named a job.
    pub duplicates: u64,
    /// Fires that published nothing because a quota of their namespace
    /// refused them.
    pub refused: u64,
}

/// How a fire call holds a namespace to its quotas: fires that store at
/// most the jobs and bytes admitted (one that does not fit what is left
/// stays due), or none, each handled and counted refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    Admitted(Usage),
    Refused,
}

impl Fires<'_> {
    /// Fires up to `limit` due fires of `slot`'s schedules, for `owner`;
    /// the namespaces named in `rooms` only as their room says (the
    /// others freely).
    pub async fn fire(
        self,
        slot: u32,
        limit: u32,
        owner: Option<&str>,
        rooms: &[(String, Room)],
    ) -> Result<FireOutcome, EngineError> {
        let k = SlotKeys::new(slot);
        let mut args: Vec<Value> = vec![
            k.prefix().into(),
            i64::from(limit).into(),
            self.0.ready_channel_prefix(slot).into(),
            owner.unwrap_or_default().into(),
            self.0.timer_channel(slot).into(),
            i64::from(slot).into(),
            FIRE_AHEAD_MS.to_string().into(),
        ];
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for (ns, room) in rooms {
            let (jobs, bytes) = match room {
                Room::Admitted(u) => (int(u.jobs), int(u.bytes)),
                Room::Refused => (-1, 0),
            };
            args.extend([ns.as_str().into(), jobs.into(), bytes.into()]);
        }
        let v = self
            .0
            .conn()
            .eval(&SCRIPTS.fire, keysets::fire(&k), args)
            .await?;
        self.outcome(v)
    }

    /// A `fire.lua` answer read.
    fn outcome(self, v: Value) -> Result<FireOutcome, EngineError> {
        let mut f = Fields::new(self.0.conn(), v)?;
        if f.len() == 1 {
            return Ok(FireOutcome {
                fenced: true,
                ..Default::default()
            });
        }
        let mut out = FireOutcome {
            fired: f.uint()?,
            next_fire_ms: u64::try_from(f.int()?).ok(),
            now_ms: f.uint()?,
            ready_ms: u64::try_from(f.int()?).ok(),
            written_ahead: f.uint()?,
            ..Default::default()
        };
        for _ in 0..f.uint()? {
            out.to_plan.push(ToPlan {
                member: f.string()?,
                rev: f
                    .string()?
                    .parse()
                    .map_err(|_| self.0.conn().bad_reply("a revision"))?,
                cursor_ms: f
                    .string()?
                    .parse()
                    .map_err(|_| self.0.conn().bad_reply("a cursor"))?,
                timing: f.string()?,
                key: f.string()?,
            });
        }
        for _ in 0..f.uint()? {
            out.lateness_ms.push(f.uint()?);
        }
        for _ in 0..f.uint()? {
            let ns = f.string()?;
            let (jobs, bytes) = (f.uint()?, f.uint()?);
            out.stored.push((ns, Usage { jobs, bytes }));
        }
        while f.len() >= 4 {
            out.per_queue.push(QueueFires {
                queue: f.string()?,
                fired: f.uint()?,
                duplicates: f.uint()?,
                refused: f.uint()?,
            });
        }
        Ok(out)
    }

    /// The members (`<ns>/<queue>/<name>`) of up to `limit` of `slot`'s
    /// schedules whose next planned fire is due, or comes due within
    /// `ahead_ms`, by due time.
    pub async fn due(
        self,
        slot: u32,
        limit: u32,
        ahead_ms: u64,
    ) -> Result<Vec<String>, EngineError> {
        let k = SlotKeys::new(slot);
        let v = self
            .0
            .conn()
            .eval(
                &SCRIPTS.fires_due,
                keysets::fires_due(&k),
                vec![i64::from(limit).into(), ahead_ms.to_string().into()],
            )
            .await?;
        let mut f = Fields::new(self.0.conn(), v)?;
        let mut out = Vec::with_capacity(f.len());
        while f.len() > 0 {
            out.push(f.string()?);
        }
        Ok(out)
    }
}
