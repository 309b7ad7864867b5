//! Acks that race the mover: a job carried between an ack's two lookups,
//! a job acked in transit to another pool, and a slot moved back after its
//! mover died mid-batch; no acked job comes back.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::time::Duration;

use redis::Commands;
use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until_async};

use super::common::{SLOTS, TwoPools, draining, each_once, held, pool, reload, where_is};

#[tokio::test]
async fn an_ack_whose_job_the_mover_carries_between_its_lookups_still_acks_it() {
    use sundial_core::{JobId, MoveMode, Shard, ShardOptions, keys};
    use sundial_tests::{Fault, FaultProxy};
    let (a, b) = (RedisServer::start(), RedisServer::start());
    // The gateway reaches shard a through a proxy that can hold its
    // commands, and waits long for a (the test plays the mover meanwhile).
    let proxy = FaultProxy::start(a.port());
    let shard_a = |w: u32| {
        format!(
            "{{ name = \"a\", url = \"{}\", weight = {w}, timeout_ms = 20000 }}",
            proxy.url()
        )
    };
    let pool_of = |shards: &[String]| {
        format!(
            "[pools.default]\nslots = {SLOTS}\nlanes = 8\nshards = [{}]\n",
            shards.join(", ")
        )
    };
    let mut cfg = SundialConfig::new(a.url());
    cfg.extra = "watch_config = false\nlayout_check_ms = 300\n[mover]\nenabled = false".to_owned();
    cfg.pools = Some(pool_of(&[shard_a(1)]));
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let id = api.put("/api/ns/q", b"carried").await.json["job_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let slot = keys::slot_of("ns", "q", JobId::parse(&id).expect("id").lane(8), SLOTS);

    // Every slot moves to b; writes go there once the gateway settles them.
    let shard_b = format!("{{ name = \"b\", url = \"{}\", weight = 1 }}", b.url());
    cfg.pools = Some(pool_of(&[shard_a(0), shard_b]));
    reload(&mut gw, &cfg).await;
    let admin = Api::new(gw.admin(), None);
    wait_until_async(
        Duration::from_secs(30),
        "writes on the new layout",
        || async {
            let r = admin.get("/drains").await.json;
            r["pools"][0]["writes"] == r["pools"][0]["current"]
        },
    )
    .await;

    // The ack looks at b (nothing yet), then waits on a.
    proxy.set(Fault::Stall);
    let ack = {
        let api = api.clone();
        let path = format!("/api/ns/q/job/{id}");
        tokio::spawn(async move { api.delete(&path).await.status })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Meanwhile the job moves: taken out at a, copied to b, let go at a.
    let shard = |r: &RedisServer, name: &str| {
        Shard::connect(name, &ShardOptions::new(r.url())).expect("connect")
    };
    let (from, to) = (shard(&a, "default/a"), shard(&b, "default/b"));
    from.wait_connected(Duration::from_secs(5))
        .await
        .expect("a");
    to.wait_connected(Duration::from_secs(5)).await.expect("b");
    let lease = Duration::from_secs(30);
    let taken = from
        .mover()
        .take(slot, "test", lease, MoveMode::Take, 10, to.name(), "0", "")
        .await
        .expect("take")
        .expect("lease");
    assert_eq!(taken.jobs.len(), 1, "the job is taken");
    to.mover()
        .store(slot, taken.now_ms, &taken.jobs, true)
        .await
        .expect("copy");
    from.mover()
        .done(slot, std::slice::from_ref(&id))
        .await
        .expect("let go");
    from.mover().release(slot, "test").await.expect("release");
    let on_b: Option<Vec<u8>> = b
        .client()
        .hget(keys::SlotKeys::new(slot).jobs(), &id)
        .expect("hget");
    assert!(on_b.is_some(), "the copy is at b");

    // The ack's look at a now finds nothing there; it must find the copy.
    proxy.heal();
    assert_eq!(ack.await.expect("ack"), 204);
    let on_b: Option<Vec<u8>> = b
        .client()
        .hget(keys::SlotKeys::new(slot).jobs(), &id)
        .expect("hget");
    assert!(on_b.is_none(), "the ack deleted the copy at b");
    assert_eq!(api.get(&format!("/api/ns/q/job/{id}")).await.status, 404);
}

#[tokio::test]
async fn a_job_acked_in_transit_to_another_pool_loses_its_copy_there_when_a_sweep_finishes_it() {
    // What a namespace's mover that died after its copy leaves behind, once
    // the job was acked in transit: its copy in the new pool, and at the
    // old shard the mark of the ack (`transit_acked` in `lua/lib/transit.lua`). A
    // sweep of the old shard, not the namespace's move, finishes it.
    let t = TwoPools::start().await;
    let (a, b, api, admin) = (&t.a, &t.b, &t.api, &t.admin);
    let id = api
        .publish("ns", "q", "delay=3600", b"acked in transit")
        .await;
    let (_, slot) = where_is(&id, &[("a", a)]).expect("held at a");
    // The copy: the job exported from its pool and imported into `b`.
    let r = admin.get("/namespaces/ns/export").await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = admin
        .call(
            reqwest::Method::POST,
            "/namespaces/ns/import?pool=b",
            Some(format!("{}\n", r.json).into_bytes()),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(held(&[b]).get(&id), Some(&1), "the copy in the new pool");
    // The ack at the old shard, and the mark it would have left in transit.
    assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);
    let mut mark = b"x".to_vec();
    mark.extend(4u16.to_be_bytes());
    mark.extend(b"ns/q@b");
    let transit = sundial_core::keys::SlotKeys::new(slot).transit();
    let _: () = a
        .client()
        .hset(&transit, &id, mark)
        .expect("write the mark");
    // The sweep (every twelve layout checks) deletes the copy where the
    // mark says it went, then the mark.
    wait_until_async(
        Duration::from_secs(30),
        "the sweep to finish the mark",
        || {
            let mut c = a.client();
            let left: u64 = c.hlen(&transit).expect("hlen");
            std::future::ready(left == 0)
        },
    )
    .await;
    assert!(held(&[a, b]).is_empty(), "{:?}", held(&[a, b]));
    let r = api.get("/api/ns/q/size").await;
    assert_eq!(r.json["size"], 0, "{r:?}");
}

#[tokio::test]
async fn a_slot_moved_back_while_its_jobs_were_in_transit_brings_back_no_acked_job() {
    moved_back_mid_batch(false).await;
}

#[tokio::test]
async fn a_slot_moved_back_after_its_copies_were_all_acked_brings_none_back() {
    moved_back_mid_batch(true).await;
}

/// A slot moves from a to b; its mover dies between its copy and letting
/// the entries go; jobs are acked (at b, or in transit at a; with
/// `all_acked`, every job of the slot at b, so that b holds none of it);
/// the slot moves back to a. Every job that was not acked is held once,
/// at a, and no acked one comes back.
async fn moved_back_mid_batch(all_acked: bool) {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut cfg = SundialConfig::new(a.url());
    // No mover at first: the test plays one that dies mid-batch.
    let mover = |enabled: bool| {
        format!(
            "watch_config = false\nlayout_check_ms = 300\n\
             [mover]\nenabled = {enabled}\nsettle_ms = 1000"
        )
    };
    cfg.extra = mover(false);
    cfg.pools = Some(pool(&[("a", &a, 1)]));
    let mut gw = Sundial::start(&cfg);
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    // One by one: each job gets its own lane (a bulk's share one), so
    // each of the queue's 8 slots holds about 15.
    let mut old = Vec::new();
    for _ in 0..120 {
        old.push(api.publish("ns", "q", "delay=3600", b"old").await);
    }
    // b joins; a job published now to a slot that moved lands at b.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 1)]));
    reload(&mut gw, &cfg).await;
    // Writes switch once the gateway sees that every gateway knows the new
    // layout; the first job that lands at b names a slot that moved.
    let mut new = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let slot = loop {
        let id = api.publish("ns", "q", "delay=3600", b"new").await;
        let at_b = where_is(&id, &[("b", &b)]);
        new.push(id);
        if let Some((_, slot)) = at_b {
            break slot;
        }
        assert!(std::time::Instant::now() < deadline, "no job lands at b");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // (New jobs published before the switch may be there too.)
    let in_slot: Vec<&String> = old
        .iter()
        .chain(&new)
        .filter(|id| where_is(id, &[("a", &a)]) == Some(("a".to_owned(), slot)))
        .collect();
    assert!(
        in_slot.len() >= 2,
        "{} of the old jobs in slot {slot}",
        in_slot.len()
    );

    // A mover takes the slot's old jobs out at a and copies them to b, then
    // dies before letting the entries go. Its lease outlasts the move of
    // the slot back to a, had that not waited for the entries at a (15 s).
    let shard = |name: &str, r: &RedisServer| {
        sundial_core::Shard::connect(name, &sundial_core::ShardOptions::new(r.url()))
            .expect("connect")
    };
    let (sa, sb) = (shard("default/a", &a), shard("default/b", &b));
    sa.wait_connected(Duration::from_secs(5)).await.expect("a");
    sb.wait_connected(Duration::from_secs(5)).await.expect("b");
    let t = sa
        .mover()
        .take(
            slot,
            "dead mover",
            Duration::from_secs(15),
            sundial_core::MoveMode::Take,
            1000,
            "default/b",
            "0",
            "",
        )
        .await
        .expect("take")
        .expect("lease");
    assert_eq!(t.jobs.len(), in_slot.len());
    let c = sb
        .mover()
        .store(slot, t.now_ms, &t.jobs, true)
        .await
        .expect("copy");
    assert_eq!(c.copied, in_slot.len() as u64);
    let job = |id: &str| sundial_core::JobId::parse(id).expect("id");
    let mut acked: Vec<String> = Vec::new();
    if all_acked {
        // Workers ack every job of the slot at b: the copies, and the new
        // job published there.
        for id in in_slot.iter().copied().chain(new.last()) {
            assert!(
                sb.jobs()
                    .delete(slot, "ns/q", &job(id))
                    .await
                    .expect("ack at b")
            );
            acked.push(id.clone());
        }
    } else {
        // A worker acks one of the copies at b; another ack reaches a job's
        // transit entry at a (while its copy at b lives).
        assert!(
            sb.jobs()
                .delete(slot, "ns/q", &job(in_slot[0]))
                .await
                .expect("ack at b")
        );
        assert!(
            sa.jobs()
                .delete(slot, "ns/q", &job(in_slot[1]))
                .await
                .expect("ack in transit")
        );
        acked.extend([in_slot[0].clone(), in_slot[1].clone()]);
    }

    // The slot moves back to a, with a mover now: the entries at a are
    // finished first (their copies are at b), then b's jobs move back.
    cfg.pools = Some(pool(&[("a", &a, 1), ("b", &b, 0)]));
    cfg.extra = mover(true);
    gw.rewrite(&cfg);
    // Stopped cleanly, it withdraws its view at once (killed, the others
    // would wait for it to expire before they move anything).
    gw.signal("TERM");
    assert!(gw.wait_exit(Duration::from_secs(10)).is_some());
    gw.restart();
    let admin = Api::new(gw.admin(), None);
    wait_until_async(Duration::from_secs(90), "the drain to end", || async {
        draining(&admin).await == 0
    })
    .await;
    let ids: Vec<String> = old
        .iter()
        .chain(&new)
        .filter(|id| !acked.contains(id))
        .cloned()
        .collect();
    each_once(&[&a, &b], &ids);
    assert!(held(&[&b]).is_empty(), "every job back at a");
    for id in &acked {
        let r = api.get(&format!("/api/ns/q/job/{id}")).await;
        assert_eq!(r.status, 404, "an acked job stays acked: {r:?}");
    }
}
