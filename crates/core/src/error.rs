//! Errors of the engine.
//!
//! Library code returns [`EngineError`]; the gateway maps
//! [`EngineError::Unavailable`] and [`EngineError::OutOfMemory`] to 503 and
//! the rest to 500. Only transport-class failures (connection refused or
//! lost, timeouts) are `Unavailable`: they are the ones a client may simply
//! retry. `OutOfMemory` is a shard over its `maxmemory` that refused a
//! script adding data before it ran: nothing was written.

use fred::error::{Error as RedisError, ErrorKind};

#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// The shard could not be reached or did not answer in time.
    #[error("redis shard {shard} unavailable: {source}")]
    Unavailable {
        shard: String,
        #[source]
        source: RedisError,
    },
    /// The shard is over its `maxmemory` and refused a script that adds
    /// data, before running it (see `scripts.rs`): nothing was written.
    #[error("redis shard {shard} out of memory: {source}")]
    OutOfMemory {
        shard: String,
        #[source]
        source: RedisError,
    },
    /// Redis answered with an error.
    #[error("redis shard {shard} error: {source}")]
    Redis {
        shard: String,
        #[source]
        source: RedisError,
    },
    /// A script answered something this version does not understand.
    #[error("unexpected reply from shard {shard}: {what}")]
    Reply { shard: String, what: String },
    /// A shard is configured in a way that would lose jobs.
    #[error("shard {shard}: {what}")]
    Unsafe { shard: String, what: String },
    /// A write was stored on the master but fewer replicas than the shard's
    /// `wait` asks for acknowledged it in time (503: the job may still be
    /// delivered, and may be lost if the master fails now).
    #[error(
        "shard {shard}: stored on the master but confirmed by {acked} of {wanted} replicas in time"
    )]
    NotReplicated {
        shard: String,
        acked: i64,
        wanted: u32,
    },
    /// A publication was refused because one of its job ids exists already
    /// (ids carry 80 random bits: in practice, never); nothing of it was
    /// stored.
    #[error("shard {shard}: a job id of this publication exists already")]
    Exists { shard: String },
}

impl EngineError {
    /// A write that lost its compare-and-swap to other writers each time
    /// it tried: nothing was written, and a retry may succeed, so it is
    /// answered as unavailable (503), not as a bug.
    pub fn contended(shard: &str, what: impl Into<String>) -> Self {
        Self::Unavailable {
            shard: shard.to_owned(),
            source: RedisError::new(ErrorKind::Unknown, what.into()),
        }
    }

    pub(crate) fn from_redis(shard: &str, source: RedisError) -> Self {
        let shard = shard.to_owned();
        match source.kind() {
            ErrorKind::IO | ErrorKind::Timeout | ErrorKind::Canceled | ErrorKind::Backpressure => {
                Self::Unavailable { shard, source }
            }
            // fred reports commands it could not route to a connected server
            // (e.g. during a reconnect) as routing errors.
            ErrorKind::Routing | ErrorKind::Sentinel => Self::Unavailable { shard, source },
            ErrorKind::Unknown if is_connection_loss(source.details()) => {
                Self::Unavailable { shard, source }
            }
            _ if is_transient_reply(source.details()) => Self::Unavailable { shard, source },
            _ if is_out_of_memory(source.details()) => Self::OutOfMemory { shard, source },
            _ => Self::Redis { shard, source },
        }
    }

    pub(crate) fn reply(shard: &str, what: impl Into<String>) -> Self {
        Self::Reply {
            shard: shard.to_owned(),
            what: what.into(),
        }
    }

    /// Whether the request may succeed if retried later (answer 503).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Self::Unavailable { .. } | Self::NotReplicated { .. } | Self::OutOfMemory { .. }
        )
    }
}

/// fred reports a connection lost under a command as `Unknown` errors with
/// these messages (fred 10, `router/commands.rs`, `protocol/command.rs`).
fn is_connection_loss(details: &str) -> bool {
    [
        "Failed to route command",
        "Too many failed write attempts",
        "Max attempts exceeded",
        "Missing expected connection",
    ]
    .iter()
    .any(|p| details.starts_with(p))
}

/// Replies by which a live Redis says "not now": loading a dataset, a replica
/// that is read-only after a failover, a busy script, a master gone.
fn is_transient_reply(details: &str) -> bool {
    [
        "LOADING",
        "READONLY",
        "BUSY",
        "MASTERDOWN",
        "TRYAGAIN",
        "CLUSTERDOWN",
        // A cluster hash slot that moved, or is moving, for longer than a
        // request waits for it.
        "MOVED ",
        "ASK ",
        // fred: a cluster transaction answered `MOVED` or `ASK`, not run.
        "Max redirections exceeded",
    ]
    .iter()
    .any(|p| details.starts_with(p))
}

/// Redis's refusal of a write over `maxmemory`: the reply itself when a
/// flagged script is refused before it runs, or wrapped in a script error
/// when a command inside one is.
fn is_out_of_memory(details: &str) -> bool {
    details.starts_with("OOM ") || details.contains("OOM command not allowed")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(kind: ErrorKind, details: &'static str) -> bool {
        EngineError::from_redis("s", RedisError::new(kind, details)).is_unavailable()
    }

    #[test]
    fn transport_faults_are_unavailable_and_the_rest_are_not() {
        assert!(classify(ErrorKind::IO, "connection reset"));
        assert!(classify(ErrorKind::Timeout, "Request timed out."));
        assert!(classify(ErrorKind::Unknown, "Failed to route command."));
        assert!(classify(
            ErrorKind::Unknown,
            "Too many failed write attempts."
        ));
        assert!(classify(
            ErrorKind::Unknown,
            "LOADING Redis is loading the dataset in memory"
        ));
        assert!(classify(
            ErrorKind::Unknown,
            "READONLY You can't write against a read only replica."
        ));
        assert!(!classify(ErrorKind::Unknown, "ERR Error running script"));
        assert!(!classify(
            ErrorKind::Unknown,
            "EXISTS 01ARZ3NDEKTSV4RRFFQ69G5FAV"
        ));
        assert!(!classify(ErrorKind::Parse, "bad reply"));
    }

    #[test]
    fn a_refusal_over_maxmemory_is_out_of_memory_and_may_be_retried() {
        for details in [
            "OOM command not allowed when used memory > 'maxmemory'.",
            "ERR Error running script (call to f_1): @user_script:9: \
             OOM command not allowed when used memory > 'maxmemory'.",
        ] {
            let e = EngineError::from_redis("p/s", RedisError::new(ErrorKind::Unknown, details));
            assert!(matches!(e, EngineError::OutOfMemory { .. }), "{e:?}");
            assert!(e.is_unavailable());
        }
    }
}
