//! Serving HTTP/1.1 with bounds, for both listeners: a cap on open
//! connections, a deadline for a request's head (from the first byte, or
//! from the accept), an idle timeout between keep-alive requests, and JSON
//! bodies on the errors that hyper answers by itself. (Bodies are bounded by
//! their readers: see `api::body`.)
//!
//! axum's own `serve` has none of these bounds, so this module drives hyper
//! directly: one task per connection, which watches the connection's
//! activity and closes it when a deadline passes with no request in flight.
//! The watchdog looks at least every head timeout rather than being woken
//! on every request (two extra task wake-ups and timer registrations per
//! request), so a deadline is enforced within one head timeout of passing
//! at worst.
//! A long poll is a request in flight, so it is never cut by these timers.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{Router, extract::Request};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceExt;

mod activity;

use activity::{Activity, Tracked};

/// The bounds of one listener.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Open connections at most; further clients wait in the kernel's
    /// accept queue until one closes.
    pub max_connections: usize,
    /// How long a request's head may take, from its first byte (or from the
    /// accept, for a new connection).
    pub header_timeout: Duration,
    /// How long a keep-alive connection may sit idle between requests.
    pub idle_timeout: Duration,
    /// The largest request head, in bytes (hyper answers 431 past it).
    pub max_head_bytes: usize,
}

/// Which listener, for logs and metrics.
#[derive(Debug, Clone, Copy)]
pub enum Listener {
    Api,
    Admin,
}

impl Listener {
    fn name(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Admin => "admin",
        }
    }
}

/// Serves `app` on `listener` until `shutdown`, then lets the requests in
/// flight finish (the caller bounds how long it waits for this future).
pub async fn serve(
    listener: TcpListener,
    which: Listener,
    app: Router,
    limits: HttpLimits,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let open = metrics::gauge!("sundial_http_connections", "listener" => which.name());
    let tracker = TaskTracker::new();
    let mut warned_full: Option<Instant> = None;
    loop {
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if warned_full.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(
                        listener = which.name(),
                        max = limits.max_connections,
                        "connection limit reached; new clients wait until a connection closes"
                    );
                    warned_full = Some(Instant::now());
                }
                tokio::select! {
                    p = slots.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                    () = shutdown.cancelled() => break,
                }
            }
        };
        let accepted = tokio::select! {
            r = listener.accept() => r,
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, most likely: wait for some to free
                // up rather than spin.
                tracing::warn!(listener = which.name(), error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (app, limits, shutdown, open) =
            (app.clone(), limits.clone(), shutdown.clone(), open.clone());
        tracker.spawn(async move {
            open.increment(1.0);
            connection((stream, peer), which, app, &limits, shutdown).await;
            open.decrement(1.0);
            drop(permit);
        });
    }
    tracker.close();
    tracker.wait().await;
}

/// The connection's requests to `app`, each marked in `activity` while in
/// flight, and told the client's address (`ConnectInfo`).
fn service(
    app: Router,
    activity: Arc<Activity>,
    peer: std::net::SocketAddr,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<axum::response::Response, std::convert::Infallible>> + Send,
> + Clone {
    hyper::service::service_fn(move |req: Request<Incoming>| {
        let guard = activity.begin();
        let app = app.clone();
        async move {
            let mut req = req.map(axum::body::Body::new);
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            let resp = app.oneshot(req).await;
            drop(guard);
            resp
        }
    })
}

/// Serves one connection until it closes, a deadline passes, or shutdown
/// (then it finishes its request in flight and closes).
async fn connection(
    (stream, peer): (TcpStream, std::net::SocketAddr),
    which: Listener,
    app: Router,
    limits: &HttpLimits,
    shutdown: CancellationToken,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked {
        inner: stream,
        activity: activity.clone(),
        rewrite: None,
    });
    let service = service(app, activity.clone(), peer);
    // hyper's own header timer (30 s by default once a timer is set) also
    // runs while a keep-alive connection idles: ours replace it.
    let conn = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .max_buf_size(limits.max_head_bytes.max(8192))
        .serve_connection(io, service);
    tokio::pin!(conn);
    let mut draining = false;
    loop {
        let deadline = activity.deadline(limits);
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(listener = which.name(), error = %e, "connection ended with an error");
                }
                return;
            }
            () = tokio::time::sleep_until(deadline.into()) => {
                if let Some(kind) = activity.expired(limits) {
                    metrics::counter!(
                        "sundial_http_connections_closed_total",
                        "listener" => which.name(),
                        "reason" => kind
                    )
                    .increment(1);
                    tracing::debug!(listener = which.name(), reason = kind, "connection closed");
                    return;
                }
            }
            () = shutdown.cancelled(), if !draining => {
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
        }
    }
}
