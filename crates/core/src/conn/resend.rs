//! Commands sent again while a Redis Cluster hash slot moves: a command the
//! cluster refused before running it (`TRYAGAIN`, `ASK`, `MOVED`) is sent
//! where the hash slot lives now.

use std::time::Duration;

use fred::{error::Error as RedisError, prelude::*};

use super::connection::{Connection, Conns};
use crate::EngineError;

/// How long a command waits for a cluster hash slot that is being moved
/// between nodes (see [`Connection::eval`]) before it fails as unavailable.
pub(crate) const HASH_SLOT_MOVE_WAIT: Duration = Duration::from_secs(1);

/// fred's words for a transaction that a cluster node answered `MOVED` or
/// `ASK` (not run; see `Node::connect`).
const MULTI_REDIRECTED: &str = "Max redirections exceeded";

impl Connection {
    /// Runs `op`, a read or a write that may run twice, on a connection to
    /// the node that serves `key`'s hash slot (any on other shards). On a
    /// cluster, one refused because its hash slot moved or is moving (see
    /// [`not_run_hash_slot_moving`]) is sent again for up to
    /// [`HASH_SLOT_MOVE_WAIT`], as [`eval`](Self::eval) does.
    pub(crate) async fn idempotent<T, F, Fut>(&self, key: &str, op: F) -> Result<T, EngineError>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        self.resend_while_moving(self.hash_slot_of(key), false, op)
            .await
    }

    /// Runs `op` on a connection to the node that serves `hash_slot` (of its
    /// publish pool if `wait`). On a cluster, while the cluster refuses it
    /// because its hash slot moved or is moving
    /// ([`not_run_hash_slot_moving`]: it did not run), sends it again for up
    /// to [`HASH_SLOT_MOVE_WAIT`]: at once to the node a `MOVED` names,
    /// after growing pauses while the hash slot is half moved (`ASK`,
    /// `TRYAGAIN`).
    pub(super) async fn resend_while_moving<T, F, Fut>(
        &self,
        hash_slot: u16,
        wait: bool,
        op: F,
    ) -> Result<T, EngineError>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        let start = std::time::Instant::now();
        let mut pause = Duration::from_millis(5);
        let mut followed = false;
        loop {
            let node = self.route(hash_slot).await?;
            let client = self.client_of(&node, wait)?;
            match op(client).await {
                Err(e)
                    if not_run_hash_slot_moving(&e)
                        && start.elapsed() + pause < HASH_SLOT_MOVE_WAIT =>
                {
                    let moved = e.details().starts_with("MOVED ");
                    if let Conns::Cluster(c) = &self.inner.conns {
                        if moved {
                            c.moved(e.details());
                        } else if e.details().starts_with(MULTI_REDIRECTED) {
                            // Which node fred did not say: read the map.
                            c.read_map(false).await;
                        }
                    }
                    // The first `MOVED` is followed at once; anything else
                    // waits for the move to end.
                    if !moved || followed {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_millis(100));
                    }
                    followed |= moved;
                }
                Err(e) => return Err(self.err_on(&node, e)),
                Ok(v) => return Ok(v),
            }
        }
    }
}

/// Whether a cluster refused a command before running it because the
/// command's hash slot is moving or has moved: `TRYAGAIN`, or a redirection
/// (`MOVED`, `ASK`). Such a command may be sent again.
fn not_run_hash_slot_moving(e: &RedisError) -> bool {
    ["TRYAGAIN", "MOVED ", "ASK ", MULTI_REDIRECTED]
        .iter()
        .any(|p| e.details().starts_with(p))
}
