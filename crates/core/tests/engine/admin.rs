//! The admin tables: a token rehashed with its limit.

use redis::Commands;
use sundial_tests::RedisServer;

use crate::helpers::shard;

#[tokio::test]
async fn a_token_is_rehashed_with_its_limit_and_never_brought_back_once_revoked() {
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let mut c = redis.client();
    let _: () = c.hset("sd:tokens", "p/ns/plain", "old").expect("HSET");
    let _: () = c.hset("sd:limits", "p/ns/plain", "{}").expect("HSET");
    let (plain, hashed) = ("p/ns/plain", "p/ns/sha256:abc");
    assert!(
        s.admin()
            .token_rehash(plain, hashed, "{\"description\":\"old\"}")
            .await
            .expect("rehash")
    );
    let tokens: Vec<(String, String)> = c.hgetall("sd:tokens").expect("HGETALL");
    let limits: Vec<(String, String)> = c.hgetall("sd:limits").expect("HGETALL");
    assert_eq!(
        tokens,
        [(hashed.to_owned(), "{\"description\":\"old\"}".to_owned())]
    );
    assert_eq!(limits, [(hashed.to_owned(), "{}".to_owned())]);
    let version: i64 = c.get("sd:tokens:version").expect("GET");
    assert_eq!(version, 1);
    // Revoked before the rewrite reaches it: nothing is written.
    let _: () = c.hdel("sd:tokens", hashed).expect("HDEL");
    assert!(
        !s.admin()
            .token_rehash(plain, hashed, "{}")
            .await
            .expect("rehash")
    );
    let tokens: Vec<(String, String)> = c.hgetall("sd:tokens").expect("HGETALL");
    assert!(tokens.is_empty(), "{tokens:?}");
    let version: i64 = c.get("sd:tokens:version").expect("GET");
    assert_eq!(version, 1, "no change, no new version");
}

#[tokio::test]
async fn a_rate_bucket_grants_a_second_of_jobs_then_paces_and_takes_refunds() {
    use sundial_core::RateTake;
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let a = s.admin();
    let bucket = sundial_core::keys::quota_rate("p", "ns", 'p');
    let take = |n, how| {
        let bucket = bucket.clone();
        async move { a.quota_rate(&bucket, 4, n, how).await.expect("rate") }
    };
    // 4 jobs a second: a second's worth at once, then one per 250 ms. (Each
    // step below runs well within 250 ms of the one before, or the refill
    // it would allow is in its bounds.)
    let g = take(3, RateTake::All).await;
    assert_eq!((g.granted, g.drawn), (3, 3));
    let g = take(2, RateTake::All).await;
    assert_eq!(g.granted, 0, "all or none: 1 left");
    assert!(
        (1..=250).contains(&g.retry_after_ms),
        "one more in 250 ms: {g:?}"
    );
    let g = take(3, RateTake::Some).await;
    assert_eq!((g.granted, g.drawn), (1, 4), "some: what is left");
    let g = take(3, RateTake::Some).await;
    assert_eq!(g.granted, 0);
    assert!(
        (1..=250).contains(&g.retry_after_ms),
        "one job is enough for some, not three: {g:?}"
    );
    // Given back, then taken again.
    let g = take(2, RateTake::Refund).await;
    assert!(g.drawn <= 2, "{g:?}");
    let g = take(2, RateTake::All).await;
    assert_eq!(g.granted, 2);
    // A bulk larger than a second's worth goes only into a full bucket,
    // and then holds the bucket for as long as it is over a second's.
    let other = sundial_core::keys::quota_rate("p", "ns", 'c');
    let bulk = |n| {
        let other = other.clone();
        async move {
            a.quota_rate(&other, 4, n, RateTake::All)
                .await
                .expect("rate")
        }
    };
    assert_eq!(bulk(10).await.granted, 10);
    let g = bulk(1).await;
    assert_eq!(g.granted, 0);
    assert!((1_500..=1_750).contains(&g.retry_after_ms), "{g:?}");
    let ttl: i64 = redis.client().pttl(&other).expect("PTTL");
    assert!(
        (2_000..=2_501).contains(&ttl),
        "gone once full again: {ttl}"
    );
    // Paced: after a second, a second's worth again, no more.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await; // refills with time, by design
    let g = take(9, RateTake::Some).await;
    assert!((3..=4).contains(&g.granted), "{g:?}");
}
