//! Redis Cluster: the harness's cluster, and Sundial's key layout against
//! a real cluster's hash slots (the ground the cluster shard kind of
//! issue 11 builds on).

use std::collections::HashSet;

use sundial_core::keys::{self, SlotKeys};
use sundial_tests::{CLUSTER_SLOTS, RedisCluster};

#[test]
fn every_key_of_a_sundial_slot_lands_in_one_cluster_slot_and_slots_spread_over_the_masters() {
    let cluster = RedisCluster::start(3, 0);
    // Every slot is served, by one of the three masters.
    let masters: HashSet<usize> = [0, CLUSTER_SLOTS / 2, CLUSTER_SLOTS - 1]
        .into_iter()
        .map(|s| cluster.master_of(s))
        .collect();
    assert_eq!(masters.len(), 3, "three masters share the slots");

    // The keys a script of one Sundial slot touches, with the queue and
    // wheel-second names the scripts build inside: one cluster slot each.
    let qualified = keys::qualified("shop", "emails");
    let mut landed = HashSet::new();
    for slot in 0..128 {
        let k = SlotKeys::new(slot);
        let all = [
            k.jobs(),
            k.timer(),
            k.counters(),
            k.wheel_index(),
            k.wheel(1_764_000_000),
            k.queues(),
            k.lease(),
            k.ready(&qualified),
            k.dead(&qualified),
        ];
        let slots: HashSet<u16> = all.iter().map(|key| cluster.key_slot(key)).collect();
        assert_eq!(slots.len(), 1, "slot {slot}'s keys {all:?} span {slots:?}");
        landed.insert(cluster.master_of(*slots.iter().next().expect("one")));
    }
    assert_eq!(landed.len(), 3, "128 Sundial slots use every master");

    // A write sent to a node that does not serve the key's slot is
    // redirected, not served: the cluster really is sharded.
    let key = SlotKeys::new(7).jobs();
    let owner = cluster.master_of(cluster.key_slot(&key));
    let other = (0..3).find(|&i| i != owner).expect("another master");
    let refused: redis::RedisResult<i64> = redis::cmd("HSET")
        .arg(&key)
        .arg("id")
        .arg("x")
        .query(&mut cluster.nodes()[other].client());
    let err = refused.expect_err("a node that does not own the slot refuses");
    assert_eq!(err.code(), Some("MOVED"), "{err}");
    let stored: i64 = redis::cmd("HSET")
        .arg(&key)
        .arg("id")
        .arg("x")
        .query(&mut cluster.nodes()[owner].client())
        .expect("the owner serves it");
    assert_eq!(stored, 1);
}
