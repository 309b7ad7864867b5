//! What gateways tell each other through the shards, and who this process
//! is when it does.
//!
//! Every gateway renews its *view* in every shard of every pool it serves
//! (`sd:view:<instance>`, listed in `sd:views`; see `sundial_core::keys`):
//! a list of entries, each a [`ViewEntry`], whose text form is what Redis
//! holds:
//!
//! | entry | text | says |
//! | --- | --- | --- |
//! | [`ViewEntry::Writes`] | `<layout>` | the gateway may write to that layout of the pool |
//! | [`ViewEntry::Knows`] | `knows <layout>` | it knows (reads) that layout |
//! | [`ViewEntry::Move`] | `home <pool>/<ns> <to> <state>` | it knows that move of a namespace, in that state |
//!
//! Layout names never hold a space. Versions before `knows` entries wrote
//! only the layouts they may write to; a view that marks none it knows
//! stands for them by those ([`View::known`]). Nothing else in the
//! workspace reads or writes these strings: the drain loop announces
//! views, and `writes`, the mover and drains read them through [`View`].

use std::{fmt, str::FromStr, sync::LazyLock, time::Duration};

use sundial_core::{EngineError, Shard};

use crate::{Layout, admin::homes::MoveState};

/// This process's name in the views: one per process, so that a topology
/// built on a reload can leave this gateway's own (older) view out.
pub static INSTANCE: LazyLock<String> = LazyLock::new(|| ulid::Ulid::new().to_string());

/// How long after a reload a gateway still counts as a writer of its
/// previous layout: a publish re-reads the topology after its body, so its
/// write lands within a command timeout of choosing its layout.
pub const WRITE_GRACE: Duration = Duration::from_secs(10);

const KNOWS: &str = "knows ";
const MOVE: &str = "home ";

/// One entry of a gateway's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewEntry {
    /// A layout the gateway may write to.
    Writes(Layout),
    /// A layout the gateway knows (reads).
    Knows(Layout),
    /// A namespace's move between pools that the gateway knows.
    Move(MoveEntry),
}

/// A namespace's move as a view names it: the namespace `ns` of tokens of
/// `pool`, moving to pool `to`, in `state` (`Err`: a state this version
/// does not know, as written; the gateway knows the move all the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveEntry {
    pub pool: String,
    pub ns: String,
    pub to: String,
    pub state: Result<MoveState, String>,
}

/// The kind of an entry, as its text's start tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Writes,
    Knows,
    Move,
}

/// An entry this version cannot read (written by another version, or
/// damaged), with the kind its start says it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable view entry {text:?}")]
pub struct Unreadable {
    pub kind: EntryKind,
    pub text: String,
}

impl fmt::Display for ViewEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Writes(l) => write!(f, "{l}"),
            Self::Knows(l) => write!(f, "{KNOWS}{l}"),
            Self::Move(m) => {
                let state = m.state.as_ref().map_or_else(String::as_str, |s| s.as_str());
                write!(f, "{MOVE}{}/{} {} {state}", m.pool, m.ns, m.to)
            }
        }
    }
}

impl FromStr for ViewEntry {
    type Err = Unreadable;

    fn from_str(s: &str) -> Result<Self, Unreadable> {
        let unreadable = |kind| Unreadable {
            kind,
            text: s.to_owned(),
        };
        if let Some(layout) = s.strip_prefix(KNOWS) {
            return layout
                .parse()
                .map(Self::Knows)
                .map_err(|_| unreadable(EntryKind::Knows));
        }
        if let Some(rest) = s.strip_prefix(MOVE) {
            return parse_move(rest)
                .map(Self::Move)
                .ok_or_else(|| unreadable(EntryKind::Move));
        }
        s.parse()
            .map(Self::Writes)
            .map_err(|_| unreadable(EntryKind::Writes))
    }
}

/// `<pool>/<ns> <to> <state>`; the state is whatever follows `<to> `.
fn parse_move(s: &str) -> Option<MoveEntry> {
    let mut words = s.splitn(3, ' ');
    let (named, to, state) = (words.next()?, words.next()?, words.next()?);
    let (pool, ns) = named.split_once('/')?;
    if [pool, ns, to].iter().any(|w| w.is_empty()) {
        return None;
    }
    Some(MoveEntry {
        pool: pool.to_owned(),
        ns: ns.to_owned(),
        to: to.to_owned(),
        state: state.parse().map_err(|_| state.to_owned()),
    })
}

/// One live gateway's view, as read from a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub instance: String,
    pub entries: Vec<ViewEntry>,
    /// The entries this version cannot read.
    pub unreadable: Vec<Unreadable>,
}

impl View {
    /// The view of `instance` from its entries' text.
    pub fn parse(instance: String, entries: &[String]) -> Self {
        let (mut read, mut unreadable) = (Vec::new(), Vec::new());
        for e in entries {
            match e.parse() {
                Ok(entry) => read.push(entry),
                Err(u) => unreadable.push(u),
            }
        }
        Self {
            instance,
            entries: read,
            unreadable,
        }
    }

    /// The layouts the gateway may write to.
    pub fn writes(&self) -> impl Iterator<Item = &Layout> {
        self.entries.iter().filter_map(|e| match e {
            ViewEntry::Writes(l) => Some(l),
            _ => None,
        })
    }

    /// The layouts the gateway knows: those it marks, or, for a view of a
    /// version that marks none, those it may write to.
    pub fn known(&self) -> Vec<&Layout> {
        let marked: Vec<&Layout> = self
            .entries
            .iter()
            .filter_map(|e| match e {
                ViewEntry::Knows(l) => Some(l),
                _ => None,
            })
            .collect();
        if marked.is_empty() {
            self.writes().collect()
        } else {
            marked
        }
    }

    /// The state in which the gateway knows the move of namespace `ns` of
    /// `pool` to pool `to` (`None`: it knows no such move; `Some(Err)`: it
    /// knows it, in a state this version does not know).
    pub fn knows_move(&self, pool: &str, ns: &str, to: &str) -> Option<Result<MoveState, &str>> {
        self.entries.iter().find_map(|e| match e {
            ViewEntry::Move(m) if m.pool == pool && m.ns == ns && m.to == to => {
                Some(m.state.as_ref().map(|s| *s).map_err(String::as_str))
            }
            _ => None,
        })
    }
}

/// The views of every live gateway in `shard` (a view that expired is
/// forgotten on the way).
pub async fn read(shard: &Shard) -> Result<Vec<View>, EngineError> {
    Ok(shard
        .layouts()
        .live_view_sets()
        .await?
        .into_iter()
        .map(|(instance, entries)| View::parse(instance, &entries))
        .collect())
}

/// A view's entries in their text form, made once for all the shards it
/// is announced in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered(Vec<String>);

impl Rendered {
    pub fn new(entries: &[ViewEntry]) -> Self {
        Self(entries.iter().map(ToString::to_string).collect())
    }
}

/// Announces `view` as this gateway's view in `shard`, for `ttl`.
pub async fn announce(shard: &Shard, view: &Rendered, ttl: Duration) -> Result<(), EngineError> {
    shard.layouts().announce_view(&INSTANCE, &view.0, ttl).await
}

/// Withdraws this gateway's view from `shard`.
pub async fn withdraw(shard: &Shard) -> Result<(), EngineError> {
    shard.layouts().withdraw_view(&INSTANCE).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(s: &str) -> Layout {
        s.parse().expect("layout")
    }

    #[test]
    fn every_entry_round_trips_through_its_text() {
        let entries = [
            ViewEntry::Writes(layout("a:1,b:1")),
            ViewEntry::Knows(layout("a:1,b:1,c:0")),
            ViewEntry::Move(MoveEntry {
                pool: "a".into(),
                ns: "ns".into(),
                to: "b".into(),
                state: Ok(MoveState::Moving),
            }),
        ];
        let texts = ["a:1,b:1", "knows a:1,b:1,c:0", "home a/ns b moving"];
        for (entry, text) in entries.iter().zip(texts) {
            assert_eq!(entry.to_string(), text);
            assert_eq!(text.parse::<ViewEntry>().as_ref(), Ok(entry));
        }
        for state in [MoveState::Announced, MoveState::Moving, MoveState::Moved] {
            let e = ViewEntry::Move(MoveEntry {
                pool: "p".into(),
                ns: "n".into(),
                to: "q".into(),
                state: Ok(state),
            });
            assert_eq!(e.to_string().parse::<ViewEntry>(), Ok(e));
        }
    }

    #[test]
    fn an_unreadable_entry_keeps_the_kind_its_start_names() {
        for (text, kind) in [
            ("knows a:x", EntryKind::Knows),
            ("home a/ns b", EntryKind::Move),
            ("home a b moving", EntryKind::Move),
            ("home /ns b moving", EntryKind::Move),
            ("a:x", EntryKind::Writes),
        ] {
            assert_eq!(
                text.parse::<ViewEntry>(),
                Err(Unreadable {
                    kind,
                    text: text.to_owned()
                }),
                "{text}"
            );
        }
    }

    #[test]
    fn a_view_knows_what_it_marks_or_else_what_it_writes() {
        // This version: known layouts are marked; the written ones are not
        // all of them.
        let view = View::parse(
            "g".into(),
            &[
                "a:1,b:1".to_owned(),
                "knows a:1,b:1".to_owned(),
                "knows a:1,b:1,c:1".to_owned(),
            ],
        );
        assert_eq!(view.known(), [&layout("a:1,b:1"), &layout("a:1,b:1,c:1")]);
        // An earlier version's view lists only what it may write to.
        let old = View::parse("g".into(), &["a:1,b:1".to_owned()]);
        assert_eq!(old.known(), [&layout("a:1,b:1")]);
        // A marked entry is never read as a layout that writers hold.
        let marked = View::parse("g".into(), &["knows a:1".to_owned()]);
        assert_eq!(marked.writes().count(), 0);
    }

    #[test]
    fn a_view_names_the_state_of_each_move_it_knows() {
        let view = View::parse(
            "g".into(),
            &[
                "home a/ns b announced".to_owned(),
                "home a/other b moving".to_owned(),
            ],
        );
        assert_eq!(
            view.knows_move("a", "ns", "b"),
            Some(Ok(MoveState::Announced))
        );
        assert_eq!(
            view.knows_move("a", "other", "b"),
            Some(Ok(MoveState::Moving))
        );
        assert_eq!(view.knows_move("a", "ns", "c"), None);
        // A state of another version: the move is known, in no state this
        // version can act on.
        let later = View::parse("g".into(), &["home a/ns b paused".to_owned()]);
        assert_eq!(later.knows_move("a", "ns", "b"), Some(Err("paused")));
        let entry = ViewEntry::Move(MoveEntry {
            pool: "a".into(),
            ns: "ns".into(),
            to: "b".into(),
            state: Err("paused".into()),
        });
        assert_eq!(entry.to_string(), "home a/ns b paused");
    }
}
