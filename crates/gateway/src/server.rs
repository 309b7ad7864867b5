//! Serving HTTP/1.1 with bounds, for both listeners: a cap on open
//! connections (when it is reached, the connection that has waited longest
//! with no request in flight closes to make room: `room`), a deadline for a request's head (from the first byte, or
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
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceExt;

mod activity;
mod room;

use activity::{Activity, Tracked};
use room::Room;

/// The bounds of one listener.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Open connections at most. A new one closes the connection that has
    /// waited longest with no request in flight; when every one has a
    /// request in flight, new clients wait in the kernel's accept queue
    /// until one closes.
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
    let room = Arc::new(Room::default());
    let open = metrics::gauge!("sundial_http_connections", "listener" => which.name());
    let tracker = TaskTracker::new();
    let mut warned_full: Option<Instant> = None;
    loop {
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
        let full = Full {
            which,
            max: limits.max_connections,
            warned: &mut warned_full,
        };
        let Some(permit) = slot(&slots, &room, full, &shutdown).await else {
            break;
        };
        // In the room before the next accept, so that it can make room.
        let activity = Arc::new(Activity::new());
        let place = room.enter(activity.clone());
        let _ = stream.set_nodelay(true);
        let (app, limits, shutdown, open) =
            (app.clone(), limits.clone(), shutdown.clone(), open.clone());
        tracker.spawn(async move {
            open.increment(1.0);
            let conn = Conn {
                stream,
                peer,
                activity,
                place,
            };
            connection(conn, which, app, &limits, shutdown).await;
            open.decrement(1.0);
            drop(permit);
        });
    }
    tracker.close();
    tracker.wait().await;
}

/// A full listener, for the warning it logs.
struct Full<'a> {
    which: Listener,
    max: usize,
    /// When it last warned that it is full.
    warned: &'a mut Option<Instant>,
}

/// A slot for a connection just accepted: a free one, else the one that
/// the connection waiting longest with no request in flight gives up
/// (`room`); when every connection has a request in flight, the first
/// that closes (or a room made once one goes idle). `None` at shutdown.
async fn slot(
    slots: &Arc<Semaphore>,
    room: &Room,
    full: Full<'_>,
    shutdown: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    loop {
        if let Ok(p) = slots.clone().try_acquire_owned() {
            return Some(p);
        }
        // A connection with no request in flight makes room (it counts
        // itself once it closes); else, all being busy, wait, and look
        // again for one that has gone idle.
        if !room.evict_one()
            && full
                .warned
                .is_none_or(|t| t.elapsed() > Duration::from_secs(10))
        {
            tracing::warn!(
                listener = full.which.name(),
                max = full.max,
                "connection limit reached with a request in flight on each; new clients wait \
                 until one closes or goes idle"
            );
            *full.warned = Some(Instant::now());
        }
        tokio::select! {
            p = slots.clone().acquire_owned() => return p.ok(),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
            () = shutdown.cancelled() => return None,
        }
    }
}

/// An accepted connection, listed in its listener's room.
struct Conn {
    stream: TcpStream,
    peer: std::net::SocketAddr,
    activity: Arc<Activity>,
    place: room::Place,
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
            // In flight until the answer's body is sent, not only its head:
            // a streaming export is not a connection that waits.
            let resp = app.oneshot(req).await;
            resp.map(|r| {
                r.map(|body| {
                    axum::body::Body::new(http_body_util::BodyExt::map_frame(body, move |f| {
                        let _ = &guard;
                        f
                    }))
                })
            })
        }
    })
}

/// Counts (and logs at debug) a connection the gateway closed, and why.
fn closed(which: Listener, reason: &'static str) {
    metrics::counter!(
        "sundial_http_connections_closed_total",
        "listener" => which.name(),
        "reason" => reason
    )
    .increment(1);
    tracing::debug!(listener = which.name(), reason, "connection closed");
}

/// Serves one connection until it closes, a deadline passes, or shutdown
/// (then it finishes its request in flight and closes).
async fn connection(
    Conn {
        stream,
        peer,
        activity,
        place,
    }: Conn,
    which: Listener,
    app: Router,
    limits: &HttpLimits,
    shutdown: CancellationToken,
) {
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
        // Bodies are queued behind the head, not copied into a buffer that
        // would keep the largest answer's size (`Tracked` is vectored).
        .writev(true)
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
                    closed(which, kind);
                    return;
                }
            }
            // Closed for room: at once unless a request began meanwhile.
            () = place.evicted.cancelled(), if !draining => {
                if activity.waiting_since().is_some() {
                    closed(which, "room");
                    return;
                }
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
            () = shutdown.cancelled(), if !draining => {
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
        }
    }
}
