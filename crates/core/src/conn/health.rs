//! Whether a shard answers: waiting for it at startup, probing it, loading
//! the scripts ahead of the first requests, and the `INFO` of each primary
//! for the startup check.

use std::time::Duration;

use fred::{error::Error as RedisError, prelude::*, types::Value};

use super::connection::{Connection, Conns};

/// The client's error with an I/O failure said in words: the client
/// writes the system error's debug form (`Os { code: 111, kind:
/// ConnectionRefused, message: "Connection refused" }`), which becomes its
/// message (`Connection refused`).
fn readable(e: RedisError) -> RedisError {
    let details = e.details();
    let Some(start) = details.find("message: \"") else {
        return e;
    };
    let rest = &details[start + "message: \"".len()..];
    match rest.find('"') {
        Some(end) => RedisError::new(e.kind().clone(), rest[..end].to_owned()),
        None => e,
    }
}

/// What a probe of a shard found: see [`Connection::probe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The probe's round trip.
    pub took: Duration,
    /// Whether the shard holds Sundial's metadata.
    pub has_metadata: bool,
    /// The primaries of a cluster shard that did not answer, by address.
    pub primaries_down: Vec<String>,
}
use crate::{EngineError, keys, scripts::SCRIPTS};

impl Connection {
    /// Waits until the shard is connected, up to `timeout`, logging every
    /// few seconds which shard it waits for and the Redis client's last
    /// error; fails with that error.
    pub async fn wait_connected(&self, timeout: Duration) -> Result<(), EngineError> {
        const REPORT: Duration = Duration::from_secs(3);
        let start = tokio::time::Instant::now();
        let mut errors: Vec<_> = self
            .nodes()
            .iter()
            .flat_map(|n| {
                n.pool
                    .clients()
                    .iter()
                    .map(|c| c.error_rx())
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut last: Option<RedisError> = None;
        let mut reported = start;
        while !self.is_connected() {
            for rx in &mut errors {
                while let Ok((e, _)) = rx.try_recv() {
                    last = Some(readable(e));
                }
            }
            let now = tokio::time::Instant::now();
            if now >= start + timeout {
                return Err(match last {
                    Some(source) => EngineError::Unavailable {
                        shard: self.inner.name.clone(),
                        source,
                    },
                    None => self.unavailable("not connected"),
                });
            }
            if now >= reported + REPORT {
                reported = now;
                tracing::warn!(
                    shard = self.name(),
                    address = self.address(),
                    waited_s = (now - start).as_secs_f64().round() as u64,
                    timeout_s = timeout.as_secs_f64().round() as u64,
                    last_error = last
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_else(|| "none yet".to_owned()),
                    "waiting for the shard to answer"
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Loads every script (on every primary of a cluster), so that the
    /// first requests need no reload.
    pub async fn load_scripts(&self) -> Result<(), EngineError> {
        for node in self.primaries() {
            let client = self.client_of(&node, false)?;
            for s in SCRIPTS.all() {
                s.script
                    .load(&client)
                    .await
                    .map_err(|e| self.err_on(&node, e))?;
            }
        }
        Ok(())
    }

    /// One round trip, bounded by the command timeout, that also says
    /// whether the shard holds Sundial's metadata (`sd:meta`), which every
    /// shard in use has: one without it was restarted without its data, or
    /// flushed.
    ///
    /// On a cluster shard every primary is sent a `PING` too. The shard
    /// answers while one primary does; those that do not are named in
    /// [`Probe::primaries_down`] (their hash slots fail, the others serve).
    /// When the primary of the metadata is among them, whether the shard
    /// lost its data is not known, and it is not said to have.
    pub async fn probe(&self) -> Result<Probe, EngineError> {
        let start = std::time::Instant::now();
        let mut primaries_down = Vec::new();
        if let Conns::Cluster(c) = &self.inner.conns {
            let primaries = c.primaries();
            if primaries.is_empty() {
                return Err(self.unavailable_node("(none known: the slot map was not read)"));
            }
            let pings = futures::future::join_all(primaries.iter().map(|n| async move {
                let client = self.client_of(n, false)?;
                client
                    .ping::<Value>(None)
                    .await
                    .map_err(|e| self.err_on(n, e))
            }))
            .await;
            let mut first_error = None;
            for (node, ping) in primaries.iter().zip(pings) {
                if let Err(e) = ping {
                    primaries_down.push(node.addr.clone());
                    first_error.get_or_insert(e);
                }
            }
            if primaries_down.len() == primaries.len()
                && let Some(e) = first_error
            {
                return Err(e);
            }
        }
        let exists = self
            .idempotent(keys::META, |c| async move {
                c.exists::<i64, _>(keys::META).await
            })
            .await;
        let has_metadata = match exists {
            Ok(n) => n > 0,
            Err(_) if !primaries_down.is_empty() => true,
            Err(e) => return Err(e),
        };
        Ok(Probe {
            took: start.elapsed(),
            has_metadata,
            primaries_down,
        })
    }

    /// Hands the `INFO` of each primary of a cluster shard to `f`, in turn,
    /// with the primary's address, until `f` refuses one; a primary that is
    /// not connected, or does not answer, ends it with that error. Does
    /// nothing on other shards.
    pub(crate) async fn each_primary_info<F>(&self, mut f: F) -> Result<(), EngineError>
    where
        F: FnMut(&str, &str) -> Result<(), EngineError>,
    {
        let Conns::Cluster(c) = &self.inner.conns else {
            return Ok(());
        };
        for node in c.primaries() {
            let Some(client) = node.client() else {
                return Err(self.unavailable_node(&node.addr));
            };
            let info: String = client.info(None).await.map_err(|e| self.err(e))?;
            f(&node.addr, &info)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use fred::error::ErrorKind;

    use super::*;

    #[test]
    fn an_io_error_is_said_in_words() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let raw = RedisError::new(
            ErrorKind::IO,
            format!("{:?}", std::io::Error::from_raw_os_error(111)),
        );
        assert_eq!(readable(raw).details(), "Connection refused");
        let plain = RedisError::new(ErrorKind::IO, format!("{io:?}"));
        assert_eq!(readable(plain.clone()), plain, "no message: as it was");
    }
}
