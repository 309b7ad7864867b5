//! Reading request bodies within bounds: a size limit checked before the
//! first byte (from `Content-Length`) and while streaming, a deadline for
//! the whole body, and a memory budget shared by every body being read.
//!
//! Each chunk is copied into one buffer and dropped, so a body of N bytes
//! holds at most about 2 N (the buffer's growth), however small the pieces
//! it arrives in: keeping hyper's chunks instead would pin a read buffer of
//! several KiB per chunk. The budget is taken for the buffer's capacity as
//! it grows (a client that declares a large body and trickles it holds only
//! what it sent), and held until the request is done with the body.

use std::{sync::Arc, time::Duration};

use axum::body::{Body, Bytes};
use bytes::BytesMut;
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;

/// The bounds every body reader shares (one per gateway).
#[derive(Debug, Clone)]
pub struct Bodies {
    /// KiB of buffer that bodies being read may hold together.
    budget: Arc<Semaphore>,
    budget_kib: usize,
    /// How long a whole body may take to arrive.
    timeout: Duration,
    /// The largest bulk publish body, in bytes.
    pub max_bulk: usize,
}

impl Bodies {
    pub fn new(budget_bytes: usize, timeout: Duration, max_bulk: usize) -> Self {
        let budget_kib = budget_bytes.div_ceil(1024).max(1);
        Self {
            budget: Arc::new(Semaphore::new(budget_kib)),
            budget_kib,
            timeout,
            max_bulk,
        }
    }

    /// How long a body (or, for a body read as a stream, each of its
    /// chunks) may take to arrive.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Takes room for `bytes` more of buffer, or says the gateway is busy.
    pub(crate) fn take(&self, bytes: usize) -> Result<OwnedSemaphorePermit, ApiError> {
        let kib = bytes.div_ceil(1024).max(1);
        if kib > self.budget_kib {
            return Err(ApiError::Busy);
        }
        self.budget
            .clone()
            .try_acquire_many_owned(kib as u32)
            .map_err(|_| ApiError::Busy)
    }
}

/// A body read in full, with the share of the budget it holds.
#[derive(Debug)]
pub(crate) struct Read {
    pub(crate) bytes: Bytes,
    _room: OwnedSemaphorePermit,
}

/// Reads at most `limit` bytes; more is 413 with `too_large` as the
/// message, a body slower than the deadline 408, no room in the budget 503.
pub(crate) async fn read(
    bodies: &Bodies,
    body: Body,
    limit: usize,
    too_large: &'static str,
) -> Result<Read, ApiError> {
    let hint = axum::body::HttpBody::size_hint(&body);
    let deadline = tokio::time::Instant::now() + bodies.timeout;
    if hint.lower() > limit as u64 {
        drain(body, hint.lower(), deadline).await;
        return Err(ApiError::TooLarge(too_large));
    }
    // Room is taken as bytes arrive, not for what the client declares: a
    // client that declares 1 MiB and trickles holds only what it sent.
    let expected = hint.exact().map_or(0, |n| n as usize).min(limit);
    let mut cap = expected.clamp(1, FIRST_ROOM);
    let mut room = bodies.take(cap)?;
    let mut buf = BytesMut::with_capacity(cap);
    let mut body = body;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(ApiError::RequestTimeout("request body too slow")),
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(ApiError::bad("failed to read body")),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let need = buf.len() + data.len();
        if need > limit {
            drop(buf);
            drain(body, 0, deadline).await;
            return Err(ApiError::TooLarge(too_large));
        }
        if need > cap {
            // Grow as a Vec would, within the limit (and the declared
            // length, when there is one), and pay for it first.
            let mut grown = need.max(cap * 2).min(limit);
            if expected >= need {
                grown = grown.min(expected);
            }
            room.merge(bodies.take(grown - cap)?);
            buf.reserve(grown - buf.len());
            cap = grown;
        }
        buf.extend_from_slice(&data);
    }
    Ok(Read {
        bytes: buf.freeze(),
        _room: room,
    })
}

/// The room a body gets before its first bytes.
const FIRST_ROOM: usize = 64 * 1024;

/// The most of a refused body that is read and thrown away.
const DRAIN_MAX: u64 = 16 * 1024 * 1024;

/// Reads and drops the rest of a refused body (at most [`DRAIN_MAX`], by the
/// deadline), holding none of it. A client that is still sending when the
/// connection closes gets a reset and may never read its 413; most clients
/// send the whole body before they read the answer.
async fn drain(mut body: Body, declared: u64, deadline: tokio::time::Instant) {
    if declared > DRAIN_MAX {
        return;
    }
    let mut seen = 0u64;
    while seen <= DRAIN_MAX {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                seen += frame.data_ref().map_or(0, |d| d.len() as u64);
            }
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(pieces: Vec<&'static [u8]>) -> Body {
        let stream = futures::stream::iter(
            pieces
                .into_iter()
                .map(|p| Ok::<_, std::io::Error>(Bytes::from_static(p))),
        );
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn a_body_arrives_whole_however_it_is_cut() {
        let b = Bodies::new(1 << 20, Duration::from_secs(5), 1 << 20);
        let r = read(&b, chunked(vec![b"he", b"l", b"lo"]), 10, "too large")
            .await
            .expect("read");
        assert_eq!(&r.bytes[..], b"hello");
    }

    #[tokio::test]
    async fn too_large_is_413_before_and_while_reading() {
        let b = Bodies::new(1 << 20, Duration::from_secs(5), 1 << 20);
        let err = read(&b, Body::from(vec![0u8; 11]), 10, "body too large")
            .await
            .expect_err("declared too large");
        assert!(matches!(err, ApiError::TooLarge("body too large")));
        let err = read(&b, chunked(vec![b"123456", b"78901"]), 10, "body too large")
            .await
            .expect_err("streamed too large");
        assert!(matches!(err, ApiError::TooLarge(_)));
    }

    #[tokio::test]
    async fn the_budget_is_shared_and_given_back() {
        let b = Bodies::new(4 * 1024, Duration::from_secs(5), 1 << 20);
        let first = read(&b, Body::from(vec![1u8; 3 * 1024]), 1 << 20, "x")
            .await
            .expect("fits");
        let err = read(&b, Body::from(vec![2u8; 2 * 1024]), 1 << 20, "x")
            .await
            .expect_err("no room while the first is held");
        assert!(matches!(err, ApiError::Busy));
        drop(first);
        read(&b, Body::from(vec![2u8; 2 * 1024]), 1 << 20, "x")
            .await
            .expect("room again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_body_times_out() {
        let b = Bodies::new(1 << 20, Duration::from_secs(2), 1 << 20);
        let stream = futures::stream::unfold(0u32, |i| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"x")), i + 1))
        });
        let err = read(&b, Body::from_stream(stream), 1 << 20, "x")
            .await
            .expect_err("too slow");
        assert!(matches!(err, ApiError::RequestTimeout(_)));
    }
}
