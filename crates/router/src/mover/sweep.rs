//! Sweeps: the slots whose shards hold transit entries that no move will
//! finish (a move cut short by a reload that moved the slot back, a mover
//! that died), found every few checks and finished like a move that takes
//! nothing: each entry goes where it is bound, or to the slot's shard now
//! ([`crate::placement::transit_place`]).

use std::sync::Arc;

use super::task::{Move, What};
use crate::{Topology, placement::Dest};

/// Every this many checks, each shard's slots are swept.
pub(super) const SWEEP_EVERY: u64 = 12;

/// The slots of every pool whose shards hold transit entries, to finish.
pub(super) async fn sweeps(topology: &Arc<Topology>) -> Vec<Move> {
    let mut out = Vec::new();
    for pool in topology.pools() {
        for (shard, slots) in pool.groups() {
            let Ok(counts) = shard.slots().transit(slots).await else {
                continue;
            };
            for (&slot, n) in slots.iter().zip(counts) {
                if n > 0 {
                    out.push(Move {
                        topology: topology.clone(),
                        pool: pool.clone(),
                        from: shard.clone(),
                        slot,
                        dest: Dest::Shard(pool.current_shard(slot).name().to_owned()),
                        what: What::Sweep,
                    });
                }
            }
        }
    }
    out
}
