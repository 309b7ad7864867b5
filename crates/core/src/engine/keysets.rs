//! The keys each script is called with, in the order the script takes them
//! (`KEYS[1]`, …). Every call builds its keys here, and the startup check of
//! a cluster shard ([`samples`], through [`check_single_hash_slot`])
//! refuses a build in which some script's keys lie in several cluster hash
//! slots.
//!
//! Every script that writes to a slot declares the slot's
//! [`guard`](SlotKeys::guard) last, so that it never starts while a cluster
//! moves the slot's keys (the scripts do not read it). So do the reads
//! that also read keys they cannot declare (a queue's priority lists,
//! wheel lists), which a cluster would otherwise refuse mid-move with an
//! error no one retries; reads of declared keys only do without it.

use crate::keys::{self, AdminKeys, SlotKeys};

/// `publish.lua`.
pub(crate) fn publish(k: &SlotKeys, qualified: &str) -> Vec<String> {
    vec![
        k.jobs(),
        k.timer(),
        k.counters(),
        k.ready(qualified),
        k.wheel_index(),
        k.queues(),
        k.guard(),
    ]
}

/// `republish.lua`: a publish's keys, with the queue's dead list before
/// the guard.
pub(crate) fn republish(k: &SlotKeys, qualified: &str) -> Vec<String> {
    let mut keys = publish(k, qualified);
    // Before the guard, which stays last.
    keys.insert(keys.len() - 1, k.dead(qualified));
    keys
}

/// `serve.lua`.
pub(crate) fn serve(k: &SlotKeys, qualified: &str) -> Vec<String> {
    vec![
        k.jobs(),
        k.timer(),
        k.counters(),
        k.ready(qualified),
        k.dead(qualified),
        k.queues(),
        k.transit(),
        k.guard(),
    ]
}

/// `destroy.lua`.
pub(crate) fn destroy(k: &SlotKeys, qualified: &str) -> Vec<String> {
    vec![
        k.jobs(),
        k.timer(),
        k.counters(),
        k.ready(qualified),
        k.guard(),
    ]
}

/// `release.lua`.
pub(crate) fn release(k: &SlotKeys, qualified: &str) -> Vec<String> {
    vec![
        k.jobs(),
        k.timer(),
        k.counters(),
        k.ready(qualified),
        k.dead(qualified),
        k.wheel_index(),
        k.queues(),
        k.transit(),
        k.guard(),
    ]
}

/// `peek_job.lua`.
pub(crate) fn peek_job(k: &SlotKeys) -> Vec<String> {
    vec![k.jobs(), k.queues(), k.transit()]
}

/// `peek_queue.lua`.
pub(crate) fn peek_queue(k: &SlotKeys, qualified: &str) -> Vec<String> {
    vec![k.jobs(), k.ready(qualified), k.guard()]
}

/// `ready_age.lua`: the slot's jobs hash, then the ready lists of
/// `queues` (qualified), then the guard.
pub(crate) fn ready_age(k: &SlotKeys, queues: &[String]) -> Vec<String> {
    let mut keys = vec![k.jobs()];
    keys.extend(queues.iter().map(|q| k.ready(q)));
    keys.push(k.guard());
    keys
}

/// `job_list.lua`.
pub(crate) fn job_list(k: &SlotKeys, qualified: &str) -> Vec<String> {
    vec![
        k.jobs(),
        k.timer(),
        k.wheel_index(),
        k.queues(),
        k.ready(qualified),
        k.dead(qualified),
        k.guard(),
    ]
}

/// `dead_peek.lua`.
pub(crate) fn dead_peek(k: &SlotKeys, qualified: &str) -> Vec<String> {
    vec![k.jobs(), k.dead(qualified)]
}

/// `dead_list.lua`.
pub(crate) fn dead_list(k: &SlotKeys, qualified: &str) -> Vec<String> {
    vec![k.jobs(), k.dead(qualified)]
}

/// `dead_pick.lua`: `dead_move`'s keys, with the queue table before the
/// guard.
pub(crate) fn dead_pick(k: &SlotKeys, qualified: &str) -> Vec<String> {
    let mut keys = dead_move(k, qualified);
    keys.insert(keys.len() - 1, k.queues());
    keys
}

/// `dead_move.lua`.
pub(crate) fn dead_move(k: &SlotKeys, qualified: &str) -> Vec<String> {
    vec![
        k.jobs(),
        k.timer(),
        k.counters(),
        k.dead(qualified),
        k.ready(qualified),
        k.guard(),
    ]
}

/// `pump.lua`.
pub(crate) fn pump(k: &SlotKeys) -> Vec<String> {
    vec![
        k.jobs(),
        k.timer(),
        k.counters(),
        k.wheel_index(),
        k.lease(),
        k.queues(),
        k.fires(),
        k.guard(),
    ]
}

/// `fires_due.lua`: the slot's fire zset.
pub(crate) fn fires_due(k: &SlotKeys) -> Vec<String> {
    vec![k.fires()]
}

/// `fire.lua`: a pump's keys, then the schedules' definitions and fire
/// states, before the guard.
pub(crate) fn fire(k: &SlotKeys) -> Vec<String> {
    let mut keys = pump(k);
    // Before the guard, which stays last.
    let guard = keys.pop();
    keys.extend([k.schedules(), k.fire_states()]);
    keys.extend(guard);
    keys
}

/// `schedule_set.lua`.
pub(crate) fn schedule_set(k: &SlotKeys) -> Vec<String> {
    vec![
        k.schedules(),
        k.fire_states(),
        k.fires(),
        k.lease(),
        k.guard(),
    ]
}

/// `schedule_times.lua`.
pub(crate) fn schedule_times(k: &SlotKeys) -> Vec<String> {
    vec![k.fire_states(), k.fires(), k.lease(), k.guard()]
}

/// `wipe_slot.lua`.
pub(crate) fn wipe_slot(k: &SlotKeys) -> Vec<String> {
    vec![
        k.jobs(),
        k.timer(),
        k.wheel_index(),
        k.counters(),
        k.queues(),
        k.lease(),
        k.transit(),
        k.copies(),
        k.mover(),
        k.schedules(),
        k.fire_states(),
        k.fires(),
        k.guard(),
    ]
}

/// `usage_build.lua`.
pub(crate) fn usage_build(k: &SlotKeys) -> Vec<String> {
    vec![k.jobs(), k.queues(), k.transit(), k.guard()]
}

/// `move_out.lua`.
pub(crate) fn move_out(k: &SlotKeys) -> Vec<String> {
    vec![
        k.jobs(),
        k.timer(),
        k.counters(),
        k.queues(),
        k.wheel_index(),
        k.transit(),
        k.mover(),
        k.guard(),
    ]
}

/// `move_in.lua`.
pub(crate) fn move_in(k: &SlotKeys) -> Vec<String> {
    vec![
        k.jobs(),
        k.timer(),
        k.counters(),
        k.queues(),
        k.wheel_index(),
        k.copies(),
        k.guard(),
    ]
}

/// `export.lua` (reads only: no guard).
pub(crate) fn export(k: &SlotKeys) -> Vec<String> {
    vec![k.jobs(), k.timer(), k.queues(), k.transit(), k.guard()]
}

/// `move_done.lua`.
pub(crate) fn move_done(k: &SlotKeys) -> Vec<String> {
    vec![k.transit(), k.guard()]
}

/// `move_done.lua`, removing copy marks.
pub(crate) fn move_unmark(k: &SlotKeys) -> Vec<String> {
    vec![k.copies(), k.guard()]
}

/// `claim.lua`.
pub(crate) fn claim(k: &SlotKeys) -> Vec<String> {
    vec![k.lease()]
}

/// `heartbeat.lua`.
pub(crate) fn heartbeat() -> Vec<String> {
    vec![keys::PUMPS.to_owned()]
}

/// `rate.lua`.
pub(crate) fn rate(counter: &str) -> Vec<String> {
    vec![counter.to_owned()]
}

/// `quota_rate.lua`: a namespace's bucket.
pub(crate) fn quota_rate(bucket: &str) -> Vec<String> {
    vec![bucket.to_owned()]
}

/// `backlog.lua`: a namespace's snapshot, pending and ended admissions
/// (one hash tag).
pub(crate) fn backlog(pool: &str, ns: &str) -> Vec<String> {
    let base = keys::backlog(pool, ns);
    let (pending, ended) = (format!("{base}:p"), format!("{base}:d"));
    vec![base, pending, ended]
}

/// `queue_index.lua`: a namespace's queue index.
pub(crate) fn queue_index(index: &str) -> Vec<String> {
    vec![index.to_owned()]
}

/// `table_change.lua`: a table and the version all the tables share.
pub(crate) fn table_change(admin: &AdminKeys, table: keys::AdminTable) -> Vec<String> {
    vec![admin.table(table).to_owned(), admin.version.to_owned()]
}

/// `token_rehash.lua`: both tables and their version.
pub(crate) fn token_rehash(admin: &AdminKeys) -> Vec<String> {
    vec![
        admin.tokens.to_owned(),
        admin.limits.to_owned(),
        admin.version.to_owned(),
    ]
}

/// Every script's keys, for a sample slot and queue, as a cluster shard
/// would call them.
pub(crate) fn samples() -> Vec<(&'static str, Vec<String>)> {
    let k = SlotKeys::new(0);
    let q = keys::qualified("ns", "q");
    let admin = AdminKeys::of(true);
    vec![
        ("publish", publish(&k, &q)),
        ("republish", republish(&k, &q)),
        ("serve", serve(&k, &q)),
        ("release", release(&k, &q)),
        ("destroy", destroy(&k, &q)),
        ("peek_job", peek_job(&k)),
        ("peek_queue", peek_queue(&k, &q)),
        ("job_list", job_list(&k, &q)),
        (
            "ready_age",
            ready_age(&k, &[q.clone(), keys::qualified("ns", "r")]),
        ),
        ("dead_peek", dead_peek(&k, &q)),
        ("dead_move", dead_move(&k, &q)),
        ("dead_list", dead_list(&k, &q)),
        ("dead_pick", dead_pick(&k, &q)),
        ("pump", pump(&k)),
        ("fire", fire(&k)),
        ("fires_due", fires_due(&k)),
        ("schedule_set", schedule_set(&k)),
        ("schedule_times", schedule_times(&k)),
        ("claim", claim(&k)),
        ("heartbeat", heartbeat()),
        ("rate", rate(&keys::rate("p", "ns", "t", 'r'))),
        ("quota_rate", quota_rate(&keys::quota_rate("p", "ns", 'p'))),
        ("backlog", backlog("p", "ns")),
        ("queue_index", queue_index(&admin.queues("p", "ns"))),
        ("token_rehash", token_rehash(admin)),
        ("wipe_slot", wipe_slot(&k)),
        ("usage_build", usage_build(&k)),
        ("move_out", move_out(&k)),
        ("move_in", move_in(&k)),
        ("move_done", move_done(&k)),
        ("move_done", move_unmark(&k)),
        ("export", export(&k)),
    ]
    .into_iter()
    // Every admin table, as its changes name it: a table added later is
    // checked without a word here.
    .chain(
        keys::AdminTable::ALL
            .into_iter()
            .map(|t| ("table_change", table_change(admin, t))),
    )
    .collect()
}

/// Checks that the keys a script is called with lie in one Redis Cluster
/// hash slot, as every script must (a cluster runs a script on the node of
/// its keys, and refuses keys of several hash slots); says which keys do
/// not.
fn single_hash_slot(script: &str, keys: &[String]) -> Result<(), String> {
    let Some((first, rest)) = keys.split_first() else {
        return Ok(());
    };
    let hash_slot = keys::hash_slot(first);
    match rest.iter().find(|k| keys::hash_slot(k) != hash_slot) {
        None => Ok(()),
        Some(other) => Err(format!(
            "script {script} would touch keys in two cluster slots ({first} in {hash_slot}, \
             {other} in {}); a cluster cannot run it",
            keys::hash_slot(other)
        )),
    }
}

/// The startup check of a cluster shard: every script's keys, as the calls
/// build them ([`samples`]), lie in one cluster hash slot.
pub(crate) fn check_single_hash_slot() -> Result<(), String> {
    for (script, keys) in samples() {
        single_hash_slot(script, &keys)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_touches_one_cluster_slot() {
        assert_eq!(check_single_hash_slot(), Ok(()));
        let names: std::collections::BTreeSet<&str> = samples().iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names.len(),
            crate::scripts::COUNT,
            "every script is checked"
        );
        let err = single_hash_slot("x", &["sd:{1}:j".to_owned(), "sd:{2}:j".to_owned()]);
        assert!(err.is_err_and(|e| e.contains("two cluster slots")));
        assert!(
            single_hash_slot(
                "table_change",
                &[
                    crate::keys::TOKENS.to_owned(),
                    crate::keys::TOKENS_VERSION.to_owned()
                ]
            )
            .is_err(),
            "the single-Redis admin names would not run on a cluster"
        );
    }
}
