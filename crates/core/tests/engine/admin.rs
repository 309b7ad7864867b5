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
    use sundial_core::{RateGrant, RateTake};
    let redis = RedisServer::start();
    let s = shard(&redis).await;
    let a = s.admin();
    let bucket = sundial_core::keys::quota_rate("p", "ns", 'p');
    // 10 jobs a second: ten at once, then none until 100 ms passed.
    let g = a
        .quota_rate(&bucket, 10, 8, RateTake::All)
        .await
        .expect("take");
    assert_eq!((g.granted, g.drawn), (8, 8));
    let g = a
        .quota_rate(&bucket, 10, 3, RateTake::All)
        .await
        .expect("take");
    assert_eq!(g.granted, 0, "all or none: 2 left");
    assert!(
        (90..=100).contains(&g.retry_after_ms),
        "one more in 100 ms: {g:?}"
    );
    let g = a
        .quota_rate(&bucket, 10, 3, RateTake::Some)
        .await
        .expect("take");
    assert_eq!((g.granted, g.drawn), (2, 10), "some: what is left");
    let g: RateGrant = a
        .quota_rate(&bucket, 10, 1, RateTake::Some)
        .await
        .expect("take");
    assert_eq!(g.granted, 0);
    assert!((1..=100).contains(&g.retry_after_ms), "{g:?}");
    // Given back, then taken again.
    let g = a
        .quota_rate(&bucket, 10, 4, RateTake::Refund)
        .await
        .expect("refund");
    assert_eq!(g.drawn, 6);
    let g = a
        .quota_rate(&bucket, 10, 4, RateTake::All)
        .await
        .expect("take");
    assert_eq!(g.granted, 4);
    // Paced: a job per 100 ms once empty.
    tokio::time::sleep(std::time::Duration::from_millis(250)).await; // refills with time, by design
    let g = a
        .quota_rate(&bucket, 10, 5, RateTake::Some)
        .await
        .expect("take");
    assert_eq!(g.granted, 2, "{g:?}");
    // A bulk larger than a second's worth goes only into a full bucket.
    let other = sundial_core::keys::quota_rate("p", "ns", 'c');
    let g = a
        .quota_rate(&other, 10, 25, RateTake::All)
        .await
        .expect("take");
    assert_eq!(g.granted, 25);
    let g = a
        .quota_rate(&other, 10, 1, RateTake::All)
        .await
        .expect("take");
    assert!(
        (1_500..=1_600).contains(&g.retry_after_ms),
        "once a second is left: {g:?}"
    );
    // The bucket's key expires once it is full again.
    let ttl: i64 = redis.client().pttl(&other).expect("PTTL");
    assert!((2_400..=2_600).contains(&ttl), "{ttl}");
}
