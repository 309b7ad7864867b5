//! The layouts a shard knows of, on [`Layouts`] (`shard.layouts()`): those
//! pinned in it (the pool's current ring membership and the earlier ones
//! that still drain), and the views that live gateways announce of the
//! layouts they may write to. Layouts are opaque strings here; the router
//! gives them meaning.

use fred::prelude::*;

use crate::{EngineError, Shard, keys};

/// A shard's layout pins and gateway views: see the module's docs.
#[derive(Clone, Copy, Debug)]
pub struct Layouts<'a>(&'a Shard);

impl Shard {
    /// The layouts pinned in this shard, and the gateways' views of those
    /// they write to.
    pub fn layouts(&self) -> Layouts<'_> {
        Layouts(self)
    }
}

impl Layouts<'_> {
    /// The pool's layouts as pinned in this shard: the current ring
    /// membership (if any) and the earlier ones that still drain.
    pub async fn pins(self) -> Result<(Option<String>, Vec<String>), EngineError> {
        let (ring, draining): (Option<String>, Option<String>) = self
            .0
            .conn()
            .idempotent(keys::META, |c| async move {
                c.hmget(keys::META, vec![keys::META_RING, keys::META_DRAINING])
                    .await
            })
            .await?;
        let draining = draining
            .map(|d| {
                parse_string_list(&d).ok_or_else(|| {
                    self.0
                        .conn()
                        .bad_reply(format!("unreadable draining pin {d:?}"))
                })
            })
            .transpose()?
            .unwrap_or_default();
        Ok((ring, draining))
    }

    /// Pins the pool's layouts in this shard.
    pub async fn set_pins(self, current: &str, draining: &[String]) -> Result<(), EngineError> {
        let fields = vec![
            (keys::META_RING, current.to_owned()),
            (keys::META_DRAINING, string_list(draining)),
        ];
        self.0
            .conn()
            .idempotent(keys::META, |c| {
                let fields = fields.clone();
                async move { c.hset::<(), _, _>(keys::META, fields).await }
            })
            .await
    }

    /// Announces the layouts a gateway instance may write to, for `ttl`.
    pub async fn announce_view(
        self,
        instance: &str,
        layouts: &[String],
        ttl: std::time::Duration,
    ) -> Result<(), EngineError> {
        let listed = string_list(layouts);
        // Two keys, in two cluster hash slots on a cluster: two commands.
        let view = keys::view(instance);
        self.0
            .conn()
            .idempotent(&view, |c| {
                let (view, listed) = (&view, &listed);
                async move {
                    c.set::<(), _, _>(
                        view,
                        listed.as_str(),
                        Some(fred::types::Expiration::PX(ttl.as_millis() as i64)),
                        None,
                        false,
                    )
                    .await
                }
            })
            .await?;
        let _: i64 = self
            .0
            .conn()
            .idempotent(keys::VIEWS, |c| async move {
                c.sadd(keys::VIEWS, instance).await
            })
            .await?;
        Ok(())
    }

    /// Withdraws a gateway instance's view (at shutdown).
    pub async fn withdraw_view(self, instance: &str) -> Result<(), EngineError> {
        let view = keys::view(instance);
        let _: i64 = self
            .0
            .conn()
            .idempotent(&view, |c| {
                let view = &view;
                async move { c.del(view).await }
            })
            .await?;
        let _: i64 = self
            .0
            .conn()
            .idempotent(keys::VIEWS, |c| async move {
                c.srem(keys::VIEWS, instance).await
            })
            .await?;
        Ok(())
    }

    /// Each live gateway instance with the entries of its view; forgets
    /// instances whose view expired.
    pub async fn live_view_sets(self) -> Result<Vec<(String, Vec<String>)>, EngineError> {
        let instances: Vec<String> = self
            .0
            .conn()
            .idempotent(
                keys::VIEWS,
                |c| async move { c.smembers(keys::VIEWS).await },
            )
            .await?;
        let mut views = Vec::new();
        for instance in instances {
            let view = keys::view(&instance);
            let v: Option<String> = self
                .0
                .conn()
                .idempotent(&view, |c| {
                    let view = &view;
                    async move { c.get(view).await }
                })
                .await?;
            match v.and_then(|v| parse_string_list(&v)) {
                Some(l) => views.push((instance, l)),
                None => {
                    let instance = &instance;
                    let _: i64 = self
                        .0
                        .conn()
                        .idempotent(keys::VIEWS, |c| async move {
                            c.srem(keys::VIEWS, instance).await
                        })
                        .await?;
                }
            }
        }
        Ok(views)
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
