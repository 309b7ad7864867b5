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
