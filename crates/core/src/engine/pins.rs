//! The layouts pinned in a shard (the pool's current ring membership and
//! the earlier ones that still drain), and the views that live gateways
//! announce of the layouts they may write to. Layouts are opaque strings
//! here; the router gives them meaning.

use fred::{prelude::*, types::Value};

use crate::{EngineError, Shard, keys};

impl Shard {
    /// The pool's layouts as pinned in this shard: the current ring
    /// membership (if any) and the earlier ones that still drain.
    pub async fn ring_pins(&self) -> Result<(Option<String>, Vec<String>), EngineError> {
        let (ring, draining): (Option<String>, Option<String>) = self
            .idempotent(|c| c.hmget(keys::META, vec![keys::META_RING, keys::META_DRAINING]))
            .await?;
        let draining = draining
            .map(|d| {
                parse_string_list(&d)
                    .ok_or_else(|| self.bad_reply(format!("unreadable draining pin {d:?}")))
            })
            .transpose()?
            .unwrap_or_default();
        Ok((ring, draining))
    }

    /// Pins the pool's layouts in this shard.
    pub async fn set_ring_pins(
        &self,
        current: &str,
        draining: &[String],
    ) -> Result<(), EngineError> {
        let fields = vec![
            (keys::META_RING, current.to_owned()),
            (keys::META_DRAINING, string_list(draining)),
        ];
        self.idempotent(|c| c.hset::<(), _, _>(keys::META, fields.clone()))
            .await
    }

    /// Announces the layouts a gateway instance may write to, for `ttl`.
    pub async fn announce_view(
        &self,
        instance: &str,
        layouts: &[String],
        ttl: std::time::Duration,
    ) -> Result<(), EngineError> {
        let listed = string_list(layouts);
        let _: Vec<Value> = self
            .idempotent(|client| {
                let listed = &listed;
                async move {
                    let pipe = client.pipeline();
                    let _: () = pipe.sadd(keys::VIEWS, instance).await?;
                    let _: () = pipe
                        .set(
                            keys::view(instance),
                            listed.as_str(),
                            Some(fred::types::Expiration::PX(ttl.as_millis() as i64)),
                            None,
                            false,
                        )
                        .await?;
                    pipe.all().await
                }
            })
            .await?;
        Ok(())
    }

    /// Withdraws a gateway instance's view (at shutdown).
    pub async fn withdraw_view(&self, instance: &str) -> Result<(), EngineError> {
        let client = self.client()?;
        let _: i64 = client
            .del(keys::view(instance))
            .await
            .map_err(|e| self.err(e))?;
        let _: i64 = client
            .srem(keys::VIEWS, instance)
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The layouts that live gateway instances may write to; forgets
    /// instances whose view expired.
    pub async fn live_views(&self) -> Result<Vec<String>, EngineError> {
        let client = self.client()?;
        let instances: Vec<String> = client
            .smembers(keys::VIEWS)
            .await
            .map_err(|e| self.err(e))?;
        let mut layouts = Vec::new();
        for instance in instances {
            let v: Option<String> = client
                .get(keys::view(&instance))
                .await
                .map_err(|e| self.err(e))?;
            match v.and_then(|v| parse_string_list(&v)) {
                Some(l) => layouts.extend(l),
                None => {
                    let _: i64 = client
                        .srem(keys::VIEWS, &instance)
                        .await
                        .map_err(|e| self.err(e))?;
                }
            }
        }
        Ok(layouts)
    }
}

/// A list of signatures as a JSON array of strings.
fn string_list(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

fn parse_string_list(s: &str) -> Option<Vec<String>> {
    serde_json::from_str(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_lists_round_trip() {
        for l in [
            vec![],
            vec!["a:1".to_owned()],
            vec!["a:1,b:2".to_owned(), "a:1".to_owned()],
        ] {
            assert_eq!(parse_string_list(&string_list(&l)), Some(l));
        }
        assert_eq!(parse_string_list("nope"), None);
    }
}
