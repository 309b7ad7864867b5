//! A namespace's move to another pool, whole: its preconditions and start
//! (asked by the admin API), each step after (taken by every gateway's
//! mover), and its end. The states are [`crate::admin::homes`]'s; each is
//! announced by every gateway in its view before the next begins.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use sundial_core::EngineError;

use super::task::{Move, What};
use crate::{
    Topology,
    admin::{
        AdminStore,
        homes::{Home, MoveState},
    },
    placement::{self, Dest},
    view::{self, WRITE_GRACE},
};

/// Why a namespace's move cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The pool to move to is not in this gateway's config.
    #[error("pool not found")]
    NoPool,
    /// The token table has never been loaded.
    #[error("the token table is not loaded")]
    TokensUnknown,
    /// The pool named has no token of the namespace.
    #[error("namespace not found")]
    NoNamespace,
    /// The namespace already is where it would move.
    #[error("{0}")]
    Pointless(String),
    /// Something else moves it, or holds the name, or changed meanwhile.
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Starts moving namespace `ns` (its tokens of `token_pool`, and its jobs
/// wherever they are served from now) to pool `to`: its home becomes
/// `announced`. Returns that home.
pub async fn start(
    topology: &Topology,
    admin: &AdminStore,
    token_pool: &str,
    ns: &str,
    to: &str,
) -> Result<Home, StartError> {
    let (current, from) = may_start(topology, admin, token_pool, ns, to)?;
    let home = Home {
        to: to.to_owned(),
        from,
        state: MoveState::Announced,
        since_ms: unix_ms(),
    };
    if !admin
        .homes()
        .set(token_pool, ns, Some(&home), current.as_ref())
        .await?
    {
        return Err(StartError::Conflict(
            "the namespace's home changed meanwhile: look again".to_owned(),
        ));
    }
    tracing::info!(
        pool = token_pool,
        namespace = ns,
        from = home.from,
        to = home.to,
        "namespace move started"
    );
    Ok(home)
}

/// Whether namespace `ns` of `token_pool` may start moving to pool `to`:
/// if so, its home now and the pool it would move from.
fn may_start(
    topology: &Topology,
    admin: &AdminStore,
    token_pool: &str,
    ns: &str,
    to: &str,
) -> Result<(Option<Home>, String), StartError> {
    if topology.pool(to).is_none() {
        return Err(StartError::NoPool);
    }
    let owners = admin
        .tokens()
        .namespaces(token_pool)
        .ok_or(StartError::TokensUnknown)?;
    if !owners.iter().any(|n| n == ns) {
        return Err(StartError::NoNamespace);
    }
    let current = admin.homes().get(token_pool, ns);
    if let Some(h) = current.as_ref().filter(|h| h.state != MoveState::Moved) {
        return Err(StartError::Conflict(format!(
            "namespace {ns} is moving already, to pool {} ({})",
            h.to,
            h.state.as_str()
        )));
    }
    let from = current
        .as_ref()
        .map_or_else(|| token_pool.to_owned(), |h| h.to.clone());
    if from == to {
        return Err(StartError::Pointless(format!(
            "namespace {ns} is in pool {from} already"
        )));
    }
    // Another tenant may have the same name in that pool.
    if to != token_pool
        && admin
            .tokens()
            .namespaces(to)
            .is_some_and(|n| n.iter().any(|n| n == ns))
    {
        return Err(StartError::Conflict(format!(
            "pool {to} has a namespace {ns} of its own (tokens of that pool): moving would mix two tenants"
        )));
    }
    Ok((current, from))
}

/// One namespace's move as this gateway's mover follows it.
#[derive(Debug)]
pub(super) struct Step<'a> {
    pub(super) topology: &'a Arc<Topology>,
    pub(super) admin: &'a AdminStore,
    /// The pool of its tokens.
    pub(super) token_pool: &'a str,
    pub(super) ns: &'a str,
    pub(super) home: &'a Home,
}

impl Step<'_> {
    /// One step: from `announced` to `moving` once every live gateway (its
    /// view in the shards of either pool) knows the move; then, once every
    /// live gateway writes to the new pool, and has for [`WRITE_GRACE`] by
    /// this gateway's clock (`all_writing`: when it first saw that, per
    /// move), and the old pool does not drain (its slot mover would carry
    /// the namespace's jobs between its own shards), the places that may
    /// hold its jobs in the old pool, to move (`Some`). `None`: not yet.
    pub(super) async fn advance(
        &self,
        all_writing: &mut HashMap<(String, String, u64), Instant>,
    ) -> Result<Option<Vec<Move>>, EngineError> {
        let (topology, home) = (self.topology, self.home);
        let (Some(from), Some(to)) = (topology.pool(&home.from), topology.pool(&home.to)) else {
            return Ok(None);
        };
        let (all_know, all_write) = self.known_by_all().await?;
        match home.state {
            MoveState::Announced if all_know => {
                self.set(
                    MoveState::Moving,
                    "every gateway knows the namespace's move: writes go to its new pool",
                )
                .await?;
                Ok(None)
            }
            MoveState::Moving if all_write => {
                let key = (
                    self.token_pool.to_owned(),
                    self.ns.to_owned(),
                    home.since_ms,
                );
                let seen = *all_writing.entry(key).or_insert_with(Instant::now);
                if seen.elapsed() < WRITE_GRACE || from.draining().next().is_some() {
                    return Ok(None);
                }
                let queues: Vec<String> = placement::namespace_queues(from, self.admin, self.ns)
                    .await?
                    .into_iter()
                    .collect();
                // The new pool lists them (as a publish there would add them).
                self.admin.queues().add(to.name(), self.ns, &queues).await?;
                let moves = placement::namespace_places(from, self.ns, &queues)
                    .into_iter()
                    .map(|(shard, slot)| Move {
                        topology: topology.clone(),
                        pool: from.clone(),
                        from: shard.clone(),
                        slot,
                        dest: Dest::Pool(home.to.clone()),
                        what: What::Namespace {
                            ns: self.ns.to_owned(),
                            epoch: home.since_ms,
                        },
                    })
                    .collect();
                Ok(Some(moves))
            }
            _ => Ok(None),
        }
    }

    /// Whether every live gateway that serves either pool (its view is in
    /// that pool's shards) knows the move, and whether every one writes to
    /// the new pool (knows it `moving`). One whose config lacks a pool
    /// names no move in its view, and so holds it.
    async fn known_by_all(&self) -> Result<(bool, bool), EngineError> {
        let (mut all_know, mut all_write) = (true, true);
        let (from, to) = (&self.home.from, &self.home.to);
        let pools = [from, to].map(|p| self.topology.pool(p));
        for shard in pools.iter().flatten().flat_map(|p| p.shards()) {
            for v in view::read(shard).await? {
                let known = v.knows_move(self.token_pool, self.ns, to);
                all_know &= known.is_some();
                all_write &= known == Some(Ok(MoveState::Moving));
            }
        }
        Ok((all_know, all_write))
    }

    /// Moves the home on to `state` (if no other gateway did), logging `why`.
    pub(super) async fn set(&self, state: MoveState, why: &str) -> Result<(), EngineError> {
        let mut next = self.home.clone();
        next.state = state;
        next.since_ms = unix_ms();
        if self
            .admin
            .homes()
            .set(self.token_pool, self.ns, Some(&next), Some(self.home))
            .await?
        {
            tracing::info!(
                pool = self.token_pool,
                namespace = self.ns,
                to = self.home.to,
                "{why}"
            );
        }
        Ok(())
    }
}

/// Whether the old pool still holds any of namespace `ns`'s jobs at the
/// places of `moves`: its queues' counts there, and entries in transit.
pub(super) async fn left(moves: &[Move], ns: &str) -> Result<bool, EngineError> {
    let prefix = format!("{ns}/");
    for m in moves {
        if m.from
            .slots()
            .transit(&[m.slot])
            .await?
            .first()
            .copied()
            .unwrap_or(0)
            > 0
        {
            return Ok(true);
        }
        let counts = m.from.slots().counts(&[m.slot]).await?;
        if counts
            .iter()
            .any(|(q, c)| q.starts_with(&prefix) && c.iter().any(|n| *n > 0))
        {
            return Ok(true);
        }
    }
    Ok(false)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
