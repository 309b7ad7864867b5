//! The script runner: `EVALSHA` on the node of a script's keys, the script
//! loaded and sent once more on `NOSCRIPT`, timed per script.

use fred::{
    error::Error as RedisError,
    prelude::*,
    types::{Key, Value},
};

use super::connection::Connection;
use crate::{EngineError, scripts::Named};

impl Connection {
    /// Runs a script, loading it first if the shard does not know it. Its
    /// keys lie in one cluster hash slot: the engine builds them in its
    /// `keysets`, which the startup check of a cluster shard verifies.
    ///
    /// On a cluster, a script that Redis refused because its hash slot is
    /// in the middle of a move (`TRYAGAIN` or `ASK`: it did not run; see
    /// [`SlotKeys::guard`](crate::keys::SlotKeys::guard)) or has moved
    /// (`MOVED`) is sent again, for up to
    /// [`HASH_SLOT_MOVE_WAIT`](super::resend::HASH_SLOT_MOVE_WAIT): moving a
    /// hash slot's keys takes milliseconds, so a reshard costs a request a
    /// short wait rather than a 503.
    pub(crate) async fn eval(
        &self,
        script: &Named,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, EngineError> {
        self.eval_on(false, script, keys, args)
            .await
            .map(|(v, _)| v)
    }

    /// A script call on the node of its keys' hash slot (on its publish
    /// pool if `wait`); returns the reply and the connection that gave it.
    pub(super) async fn eval_on(
        &self,
        wait: bool,
        script: &Named,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<(Value, Client), EngineError> {
        let start = std::time::Instant::now();
        let hash_slot = keys.first().map_or(0, |k| self.hash_slot_of(k));
        // As `Key`s, whose bytes are shared: a call sent again (NOSCRIPT, a
        // hash slot on the move) copies no key.
        let keys: Vec<Key> = keys.into_iter().map(Key::from).collect();
        let result = self
            .resend_while_moving(hash_slot, wait, |c| {
                let (keys, args) = (&keys, &args);
                async move {
                    let v = self.eval_once(&c, script, keys, args).await?;
                    Ok((v, c))
                }
            })
            .await;
        if let Some(h) = self.inner.timings.get(script.index) {
            h[usize::from(result.is_err())].record(start.elapsed().as_secs_f64());
        }
        result
    }

    /// One [`eval`](Self::eval), with the script loaded (on that node) and
    /// sent once more if a restarted or failed-over node answers `NOSCRIPT`
    /// (it did not run the first time).
    async fn eval_once(
        &self,
        client: &Client,
        script: &Named,
        keys: &[Key],
        args: &[Value],
    ) -> Result<Value, RedisError> {
        let call = client.with_options(&self.inner.eval_options);
        let sha = script.script.sha1().clone();
        match call
            .evalsha(sha.clone(), keys.to_vec(), args.to_vec())
            .await
        {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                script.script.load(client).await?;
                call.evalsha(sha, keys.to_vec(), args.to_vec()).await
            }
            result => result,
        }
    }
}
