//! What a token may do: its scopes (publish, consume, read, manage) and,
//! optionally, the queues it may touch.
//!
//! A token made without a scope, and every token made before scopes
//! existed, holds all four on every queue of its namespace: lmstfy's clients
//! see no difference.

use std::{fmt, sync::Arc};

use sundial_core::job::check_queue;

/// One right of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Publish, bulk publish, republish.
    Publish,
    /// Consume, acknowledge, republish. An acknowledgement is lmstfy's
    /// `DELETE …/job/{id}`: it deletes any job of the token's queues by
    /// id, in any state, not only one this worker holds.
    Consume,
    /// Peek a job or a queue, size, stats, dead-letter peek and size.
    Read,
    /// Destroy a queue, respawn or delete its dead letter.
    Manage,
}

impl Scope {
    pub const ALL: [Self; 4] = [Self::Publish, Self::Consume, Self::Read, Self::Manage];

    pub fn name(self) -> &'static str {
        match self {
            Self::Publish => "publish",
            Self::Consume => "consume",
            Self::Read => "read",
            Self::Manage => "manage",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// At most this many queue names or prefixes in one grant.
pub const MAX_QUEUES: usize = 100;

/// A token's scopes and queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    scopes: u8,
    /// `None`: every queue of the namespace. Otherwise exact names, and
    /// prefixes written `name*`.
    queues: Option<Arc<[String]>>,
}

impl Default for Grant {
    fn default() -> Self {
        Self::full()
    }
}

impl Grant {
    /// Every scope on every queue: tokens made without a scope.
    pub fn full() -> Self {
        Self {
            scopes: Scope::ALL.iter().fold(0, |b, s| b | s.bit()),
            queues: None,
        }
    }

    /// A grant of `scopes` (all of them when empty is not allowed: at least
    /// one) on `queues` (`None`: every queue). Checks every name.
    pub fn new(scopes: &[Scope], queues: Option<Vec<String>>) -> Result<Self, String> {
        if scopes.is_empty() {
            return Err("a token needs at least one scope".to_owned());
        }
        if let Some(qs) = &queues {
            if qs.is_empty() {
                return Err("the queue list is empty; leave it out to allow every queue".to_owned());
            }
            if qs.len() > MAX_QUEUES {
                return Err(format!("at most {MAX_QUEUES} queues per token"));
            }
            for q in qs {
                let name = q.strip_suffix('*').unwrap_or(q);
                // `*` alone would mean every queue: say so by leaving the list out.
                if check_queue(name).is_err() {
                    return Err(format!("invalid queue name or prefix: {q:?}"));
                }
            }
        }
        let mut queues = queues;
        if let Some(qs) = &mut queues {
            qs.sort();
            qs.dedup();
        }
        Ok(Self {
            scopes: scopes.iter().fold(0, |b, s| b | s.bit()),
            queues: queues.map(Into::into),
        })
    }

    /// Reads scopes and queues as an operator writes them: comma-separated
    /// (`publish,read`; `emails,reports-*`). An empty or absent queue list
    /// means every queue.
    pub fn parse(scopes: &str, queues: Option<&str>) -> Result<Self, String> {
        let scopes = split(scopes)
            .map(|s| {
                Scope::parse(s)
                    .ok_or_else(|| format!("unknown scope {s:?}: publish, consume, read or manage"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // An absent or empty list is no list; a list with a blank name in
        // it (`a,,b`, ` , `) is a mistake, not "every queue".
        let queues = match queues.map(str::trim).filter(|q| !q.is_empty()) {
            None => None,
            Some(q) if q.split(',').any(|n| n.trim().is_empty()) => {
                return Err(format!("a queue name in {q:?} is empty"));
            }
            Some(q) => Some(split(q).map(str::to_owned).collect::<Vec<_>>()),
        };
        Self::new(&scopes, queues)
    }

    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes & scope.bit() != 0
    }

    /// Whether `queue` is one this grant names (or it names none).
    pub fn allows_queue(&self, queue: &str) -> bool {
        let Some(qs) = &self.queues else {
            return true;
        };
        qs.iter().any(|q| match q.strip_suffix('*') {
            Some(prefix) => queue.starts_with(prefix),
            None => q == queue,
        })
    }

    /// Every scope on every queue.
    pub fn is_full(&self) -> bool {
        *self == Self::full()
    }

    pub fn scopes(&self) -> Vec<Scope> {
        Scope::ALL.into_iter().filter(|s| self.allows(*s)).collect()
    }

    pub fn queues(&self) -> Option<&[String]> {
        self.queues.as_deref()
    }

    /// The scopes' names, for JSON.
    pub fn scope_names(&self) -> Vec<&'static str> {
        self.scopes().into_iter().map(Scope::name).collect()
    }

    /// As stored: names for the scopes.
    pub(crate) fn from_names(
        scopes: &[String],
        queues: Option<Vec<String>>,
    ) -> Result<Self, String> {
        let scopes = scopes
            .iter()
            .map(|s| Scope::parse(s).ok_or_else(|| format!("unknown scope {s:?}")))
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(&scopes, queues)
    }
}

fn split(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_grant_allows_everything() {
        let g = Grant::full();
        assert!(Scope::ALL.iter().all(|s| g.allows(*s)));
        assert!(g.allows_queue("anything"));
        assert!(g.is_full());
        assert_eq!(
            Grant::parse("manage,read,consume,publish", None).expect("grant"),
            g
        );
    }

    #[test]
    fn scopes_and_queues_narrow_a_grant() {
        let g = Grant::parse("publish, read", Some("emails,reports-*")).expect("grant");
        assert!(g.allows(Scope::Publish) && g.allows(Scope::Read));
        assert!(!g.allows(Scope::Consume) && !g.allows(Scope::Manage));
        assert!(g.allows_queue("emails"));
        assert!(!g.allows_queue("emails2"));
        assert!(g.allows_queue("reports-daily"));
        assert!(g.allows_queue("reports-"));
        assert!(!g.allows_queue("report"));
        assert!(!g.is_full());
        assert_eq!(g.scope_names(), ["publish", "read"]);
    }

    #[test]
    fn bad_grants_are_refused() {
        assert!(Grant::parse("", None).is_err());
        assert!(Grant::parse("write", None).is_err());
        assert!(Grant::parse("read", Some("*")).is_err());
        assert!(Grant::parse("read", Some("_hidden")).is_err());
        assert!(Grant::parse("read", Some("a b")).is_err());
        let many = (0..=MAX_QUEUES)
            .map(|i| format!("q{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(Grant::parse("read", Some(&many)).is_err());
        // An empty list is no list; a blank name in one is refused.
        assert!(
            Grant::parse("read", Some(" "))
                .expect("grant")
                .queues()
                .is_none()
        );
        assert!(Grant::parse("read", Some(" , ")).is_err());
        assert!(Grant::parse("read", Some("a,,b")).is_err());
    }
}
