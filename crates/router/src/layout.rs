//! A pool's shard layout (its ring membership), and how shards pin it.
//!
//! Every shard of a pool pins the pool's current layout and the earlier
//! ones whose moved slots still drain (`sd:meta`), so that a process that
//! starts, or reloads, finds out which layouts to read from. The text form,
//! `name:weight,...`, is what the shards hold: it must never change for a
//! given membership.

use std::{fmt, str::FromStr};

use serde::{Serialize, Serializer};
use sundial_core::{EngineError, Shard};

/// A ring membership: shard names with their weights. Ordered as its text
/// form, as the pinned strings always were (so lists of layouts keep the
/// order they had in the shards, the logs and `GET /drains`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Sorted by their text `name:weight` (the order shards have always
    /// pinned), names unique.
    members: Vec<(String, u32)>,
}

impl Layout {
    /// The layout of these (name, weight) members, in any order.
    pub fn new<'a>(members: impl IntoIterator<Item = (&'a str, u32)>) -> Self {
        let mut members: Vec<(String, u32)> = members
            .into_iter()
            .map(|(n, w)| (n.to_owned(), w))
            .collect();
        members.sort_by_cached_key(|(n, w)| format!("{n}:{w}"));
        Self { members }
    }

    /// The members, as (name, weight).
    pub fn members(&self) -> impl Iterator<Item = (&str, u32)> {
        self.members.iter().map(|(n, w)| (n.as_str(), *w))
    }

    /// The shards that hold slots in this layout (a weight above 0).
    pub fn holders(&self) -> impl Iterator<Item = &str> {
        self.members().filter(|(_, w)| *w > 0).map(|(n, _)| n)
    }
}

impl Ord for Layout {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.to_string().cmp(&other.to_string())
    }
}

impl PartialOrd for Layout {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, weight)) in self.members.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{name}:{weight}")?;
        }
        Ok(())
    }
}

impl FromStr for Layout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut members = Vec::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let member = part
                .rsplit_once(':')
                .and_then(|(n, w)| Some((n, w.parse::<u32>().ok()?)))
                .filter(|(n, _)| !n.is_empty())
                .ok_or_else(|| format!("unreadable ring membership {s:?}"))?;
            if members.iter().any(|(n, _)| *n == member.0) {
                return Err(format!("ring membership {s:?} names a shard twice"));
            }
            members.push(member);
        }
        Ok(Self::new(members))
    }
}

/// Serialized as its text form, as the admin API shows it.
impl Serialize for Layout {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl utoipa::PartialSchema for Layout {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .description(Some(
                "A shard layout (ring membership) in its text form, `name:weight,...`.",
            ))
            .examples(["a:1,b:1"])
            .into()
    }
}

impl utoipa::ToSchema for Layout {}

/// The layouts a shard pins: the current one (if any) and those that drain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins {
    pub current: Option<Layout>,
    pub draining: Vec<Layout>,
}

impl Pins {
    /// Reads a shard's pins; an unreadable one is an error, not a guess.
    pub async fn read(shard: &Shard) -> Result<Self, EngineError> {
        let (current, draining) = shard.layouts().pins().await?;
        let parse = |s: &str| {
            s.parse::<Layout>().map_err(|e| EngineError::Reply {
                shard: shard.name().to_owned(),
                what: format!("pinned layout: {e}"),
            })
        };
        Ok(Self {
            current: current.as_deref().map(parse).transpose()?,
            draining: draining
                .iter()
                .map(|s| parse(s))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Pins `current` and `draining` in a shard.
    pub async fn write(
        shard: &Shard,
        current: &Layout,
        draining: &[Layout],
    ) -> Result<(), EngineError> {
        let draining: Vec<String> = draining.iter().map(ToString::to_string).collect();
        shard
            .layouts()
            .set_pins(&current.to_string(), &draining)
            .await
    }

    /// Every layout pinned, current or draining.
    pub fn all(self) -> impl Iterator<Item = Layout> {
        self.current.into_iter().chain(self.draining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips_and_keeps_the_pinned_order() {
        for text in ["a:1", "a:1,b:2", "a-b:1,a:1", "x:0,y:3"] {
            let layout: Layout = text.parse().expect("layout");
            assert_eq!(layout.to_string(), text);
        }
        // The order shards have always pinned: by the text `name:weight`.
        let l = Layout::new([("a", 1), ("a-b", 1)]);
        assert_eq!(l.to_string(), "a-b:1,a:1");
        assert_eq!(Layout::new([("b", 2), ("a", 1)]).to_string(), "a:1,b:2");
    }

    #[test]
    fn layouts_order_as_their_text() {
        let parse = |s: &str| s.parse::<Layout>().expect("layout");
        assert!(
            parse("a:10,b:1") < parse("a:9,b:1"),
            "as text, not as numbers"
        );
        assert!(parse("a-b:1") < parse("a:1"));
    }

    #[test]
    fn unreadable_layouts_are_refused() {
        for bad in ["a", "a:x", ":1", "a:1,a:2", "a:-1"] {
            assert!(bad.parse::<Layout>().is_err(), "{bad}");
        }
        assert_eq!("".parse::<Layout>().expect("empty").members().count(), 0);
    }

    #[test]
    fn holders_are_the_members_with_weight() {
        let l: Layout = "a:1,b:0,c:2".parse().expect("layout");
        assert_eq!(l.holders().collect::<Vec<_>>(), ["a", "c"]);
    }
}
