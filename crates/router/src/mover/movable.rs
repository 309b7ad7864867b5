//! Which moved slots of a pool may move now.
//!
//! A slot moves only once nothing can write to it at its old shard any
//! more: this gateway writes to the current layout, and every live gateway
//! (by its view, [`crate::view`]) knows that layout and writes to no layout
//! that places the slot at the old shard. Until then reads cover both
//! shards, as they do while a drain waits.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use sundial_core::Shard;

use super::task::{Move, What};
use crate::{Layout, Pool, Topology, placement::Dest, view};

/// The slots of `pool` that may move now, each once (from its old shard to
/// the shard that holds it in the current layout), with how many more are
/// held back (see [`hold_back`]), or why none may. Every live gateway's
/// view is read (this one's too): each must know the current layout, and
/// none may write to a layout that places the slot at the old shard (a
/// view lists, for a while after a reload, the layout it wrote to before).
pub(super) async fn movable(
    topology: &Arc<Topology>,
    pool: &Arc<Pool>,
) -> Result<(Vec<Move>, usize), String> {
    if pool.write_layout() != pool.layout() {
        return Err(format!(
            "this gateway still writes to {} until every gateway knows {}",
            pool.write_layout(),
            pool.layout()
        ));
    }
    let written = written(pool).await?;
    let mut out: Vec<Move> = Vec::new();
    let mut seen: HashSet<(String, u32)> = HashSet::new();
    'slots: for (from, slot, _) in pool.moved() {
        if !seen.insert((from.name().to_owned(), slot)) {
            continue;
        }
        for w in &written {
            match pool.placed(w, slot) {
                None => {
                    return Err(format!(
                        "a gateway writes to {w}, which this one does not know"
                    ));
                }
                Some(Some(s)) if s.same(from) => continue 'slots,
                Some(_) => {}
            }
        }
        out.push(Move {
            topology: topology.clone(),
            pool: pool.clone(),
            from: from.clone(),
            slot,
            dest: Dest::Shard(pool.current_shard(slot).name().to_owned()),
            what: What::Slot,
        });
    }
    let held_back = hold_back(pool, &mut out).await;
    Ok((out, held_back))
}

/// Every layout a live gateway writes to, by the views in `pool`'s shards;
/// why none may move if one does not know the current layout or writes to
/// something this version cannot read, or no shard answers.
async fn written(pool: &Pool) -> Result<HashSet<Layout>, String> {
    let mut written: HashSet<Layout> = HashSet::new();
    let mut answered = false;
    for shard in pool.shards() {
        let Ok(views) = view::read(shard).await else {
            continue;
        };
        answered = true;
        for v in views {
            if !v.known().contains(&pool.layout()) {
                return Err(format!(
                    "gateway {} does not know the current layout yet",
                    v.instance
                ));
            }
            if let Some(u) = v
                .unreadable
                .iter()
                .find(|u| u.kind == view::EntryKind::Writes)
            {
                return Err(format!("gateway {} writes to {:?}", v.instance, u.text));
            }
            written.extend(v.writes().cloned());
        }
    }
    if !answered {
        return Err("no shard of the pool answers".to_owned());
    }
    Ok(written)
}

/// Holds back (removes from `out`) each slot that moved back to a shard
/// that still holds some of its jobs in transit from the move away (a
/// mover died mid-batch), until a sweep has sent those where they were
/// bound, which still holds the slot: a copy made there before comes back
/// with the rest, and a job acked in transit loses its copy there first.
/// Moving the slot back before would bring such jobs back twice, or back
/// after their ack. A shard that does not answer holds back its slots
/// until the next check. Returns how many it held back.
async fn hold_back(pool: &Pool, out: &mut Vec<Move>) -> usize {
    let mut by_dest: HashMap<String, (&Shard, Vec<u32>)> = HashMap::new();
    for m in out.iter() {
        let now = pool.current_shard(m.slot);
        by_dest
            .entry(now.name().to_owned())
            .or_insert_with(|| (now, Vec::new()))
            .1
            .push(m.slot);
    }
    let mut held_back: HashSet<(String, u32)> = HashSet::new();
    for (name, (now, slots)) in by_dest {
        let counts = now.slots().transit(&slots).await.unwrap_or_default();
        for (i, &slot) in slots.iter().enumerate() {
            if counts.get(i).is_none_or(|n| *n > 0) {
                held_back.insert((name.clone(), slot));
            }
        }
    }
    out.retain(|m| !held_back.contains(&(m.dest.to_string(), m.slot)));
    held_back.len()
}
