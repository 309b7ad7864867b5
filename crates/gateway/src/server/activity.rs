//! What a connection is doing ([`Activity`]), and the TCP stream that
//! reports it ([`Tracked`]) and gives hyper's own error answers a JSON body.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};

use super::HttpLimits;

/// What a connection is doing, as its reads, writes and requests show.
/// Times are milliseconds since the accept.
#[derive(Debug)]
pub(super) struct Activity {
    start: Instant,
    in_flight: AtomicU32,
    last_io_ms: AtomicU64,
    /// When the head now being read began (ms + 1), 0 if none is.
    head_since: AtomicU64,
}

/// Ends a request's time in flight when dropped.
pub(super) struct InFlight(pub(super) Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Activity {
    pub(super) fn new() -> Self {
        Self {
            start: Instant::now(),
            in_flight: AtomicU32::new(0),
            last_io_ms: AtomicU64::new(0),
            // A new connection owes its first head from the accept on.
            head_since: AtomicU64::new(1),
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn touch(&self) {
        self.last_io_ms.store(self.now_ms(), Ordering::Release);
    }

    fn read(&self) {
        self.touch();
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let _ = self.head_since.compare_exchange(
                0,
                self.now_ms() + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    pub(super) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(0, Ordering::Release);
        InFlight(self.clone())
    }

    /// Since when this connection has waited with no request in flight:
    /// for a head (its first from the accept, or one begun since), or idle
    /// since its last read or write. `None` while a request is in flight.
    pub(super) fn waiting_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let ms = match self.head_since.load(Ordering::Acquire) {
            0 => self.last_io_ms.load(Ordering::Acquire),
            since => since - 1,
        };
        Some(self.start + Duration::from_millis(ms))
    }

    /// When the current deadline passes: that of the head being read, else
    /// of the idle connection; a request in flight has none.
    fn current_deadline(&self, limits: &HttpLimits) -> Option<Instant> {
        let at = |ms: u64, d: Duration| self.start + Duration::from_millis(ms) + d;
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(match self.head_since.load(Ordering::Acquire) {
            0 => at(self.last_io_ms.load(Ordering::Acquire), limits.idle_timeout),
            since => at(since - 1, limits.header_timeout),
        })
    }

    /// When the watchdog looks again: the current deadline, but no later
    /// than a head timeout from now, since a head may begin meanwhile (the
    /// state changes without waking the watchdog, which would cost wake-ups
    /// and timer registrations on every request).
    pub(super) fn deadline(&self, limits: &HttpLimits) -> Instant {
        let recheck = Instant::now() + limits.header_timeout;
        self.current_deadline(limits)
            .map_or(recheck, |d| d.min(recheck))
    }

    /// Which deadline passed, if one did.
    pub(super) fn expired(&self, limits: &HttpLimits) -> Option<&'static str> {
        match self.current_deadline(limits) {
            Some(d) if Instant::now() >= d => {}
            _ => return None,
        }
        Some(if self.head_since.load(Ordering::Acquire) == 0 {
            "idle"
        } else {
            "header_timeout"
        })
    }
}

/// A TCP stream that reports its reads and writes to [`Activity`], and
/// gives hyper's own error answers (400, 414, 431 on a request it cannot
/// parse, sent with an empty body) a JSON body like every other error.
pub(super) struct Tracked {
    pub(super) inner: TcpStream,
    pub(super) activity: Arc<Activity>,
    /// A JSON answer being written in place of hyper's: the bytes and how
    /// many are written, and how many of hyper's bytes it replaces.
    pub(super) rewrite: Option<(Vec<u8>, usize, usize)>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.rewrite.is_none()
            && let Some(json) = json_for_hyper_error(buf)
        {
            self.rewrite = Some((json, 0, buf.len()));
        }
        let this = &mut *self;
        if let Some((bytes, written, replaces)) = &mut this.rewrite {
            while *written < bytes.len() {
                match Pin::new(&mut this.inner).poll_write(cx, &bytes[*written..]) {
                    Poll::Ready(Ok(n)) => *written += n,
                    other => return other,
                }
            }
            let n = *replaces;
            this.rewrite = None;
            this.activity.touch();
            return Poll::Ready(Ok(n));
        }
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        r
    }

    /// Vectored, so that hyper queues an answer's body behind its head
    /// instead of copying it into the connection's write buffer, which
    /// would keep the size of the largest answer for as long as the
    /// connection lives (358 KB of RSS per connection after
    /// `/openapi.json`, measured).
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        // A head hyper wrote for its own error comes first, alone: the
        // rewrite replaces it as `poll_write` does.
        let first = bufs.iter().find(|b| !b.is_empty());
        if self.rewrite.is_some() || first.is_some_and(|b| json_for_hyper_error(b).is_some()) {
            return self.poll_write(cx, first.map_or(&[][..], |b| &b[..]));
        }
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// hyper answers a request it cannot parse with a bare head (`HTTP/1.1 400
/// Bad Request`, `content-length: 0`, no content type), and then closes.
/// Our own answers always carry a JSON content type, so a head of that
/// shape is hyper's: returns the JSON answer to send instead.
pub(super) fn json_for_hyper_error(buf: &[u8]) -> Option<Vec<u8>> {
    let (status, message) = if buf.starts_with(b"HTTP/1.1 400 ") {
        ("400 Bad Request", "malformed request")
    } else if buf.starts_with(b"HTTP/1.1 414 ") {
        ("414 URI Too Long", "request URI too long")
    } else if buf.starts_with(b"HTTP/1.1 431 ") {
        (
            "431 Request Header Fields Too Large",
            "request headers too large",
        )
    } else {
        return None;
    };
    let head = std::str::from_utf8(buf).ok()?;
    let head = head.split("\r\n\r\n").next()?.to_ascii_lowercase();
    if !head.contains("\r\ncontent-length: 0") || head.contains("\r\ncontent-type:") {
        return None;
    }
    let body = format!("{{\"error\":\"{message}\"}}");
    Some(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> HttpLimits {
        HttpLimits {
            max_connections: 10,
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            max_head_bytes: 16 * 1024,
        }
    }

    #[test]
    fn hyper_error_heads_get_a_json_body() {
        let hyper_400 = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let out =
            String::from_utf8(json_for_hyper_error(hyper_400).expect("rewritten")).expect("utf8");
        assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
        assert!(out.ends_with("{\"error\":\"malformed request\"}"), "{out}");
        assert!(out.contains("content-length: 29\r\n"), "{out}");
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n{\"error\":\"invalid\"}";
        assert_eq!(json_for_hyper_error(ours), None, "our own answers pass");
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(json_for_hyper_error(ok), None);
        let long = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert!(json_for_hyper_error(long).is_some());
    }

    #[test]
    fn a_connection_owes_its_head_from_the_accept_then_idles() {
        let l = limits();
        let a = Arc::new(Activity::new());
        let d = a.current_deadline(&l).expect("a deadline");
        assert!(d <= a.start + l.header_timeout, "new: header deadline");
        assert_eq!(a.expired(&l), None, "not yet");
        let guard = a.begin();
        assert_eq!(a.current_deadline(&l), None, "in flight: none");
        assert!(
            a.deadline(&l) <= Instant::now() + l.header_timeout,
            "but a recheck"
        );
        a.read(); // body bytes while in flight start no head
        drop(guard);
        let d = a.current_deadline(&l).expect("idle");
        assert!(
            d > Instant::now() + l.header_timeout,
            "idle after a request: the idle timeout applies"
        );
        assert!(
            a.deadline(&l) <= Instant::now() + l.header_timeout,
            "rechecked sooner"
        );
        a.read(); // the next request's first byte
        let d = a.current_deadline(&l).expect("a head");
        assert!(d <= Instant::now() + l.header_timeout);
    }

    #[test]
    fn deadlines_pass() {
        let l = HttpLimits {
            header_timeout: Duration::ZERO,
            idle_timeout: Duration::ZERO,
            ..limits()
        };
        let a = Arc::new(Activity::new());
        assert_eq!(a.expired(&l), Some("header_timeout"));
        let guard = a.begin();
        assert_eq!(a.expired(&l), None, "a request in flight has no deadline");
        drop(guard);
        assert_eq!(a.expired(&l), Some("idle"));
    }
}
