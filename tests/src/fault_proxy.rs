//! A TCP proxy between Sundial and a Redis that injects network faults:
//! latency, a stall (connections stay open but nothing passes), resets, and
//! healing. It runs on a thread of its own, so sync and async tests can
//! drive it alike.

use std::{net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Bytes pass through.
    None,
    /// Every chunk waits this long before it is passed on.
    Latency(Duration),
    /// Connections are accepted and kept, but no byte passes either way
    /// until the fault changes (then what was held passes): a partition
    /// or a hung server, as a client sees it.
    Stall,
    /// Every connection is reset, and new ones are reset at once.
    Reset,
}

/// A running proxy. Stopped on drop.
#[derive(Debug)]
pub struct FaultProxy {
    port: u16,
    fault: watch::Sender<Fault>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Self {
        let std_listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("bind the fault proxy");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let port = std_listener.local_addr().expect("addr").port();
        let (fault, faults) = watch::channel(Fault::None);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let upstream: SocketAddr = ([127, 0, 0, 1], upstream).into();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("proxy runtime");
            rt.block_on(async move {
                let listener = TcpListener::from_std(std_listener).expect("listener");
                tokio::select! {
                    () = accept_loop(listener, upstream, faults) => {}
                    _ = stopped => {}
                }
            });
        });
        Self {
            port,
            fault,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<proxy port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sets the fault in force (for existing and new connections).
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// Lets traffic pass again.
    pub fn heal(&self) {
        self.set(Fault::None);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, faults: watch::Receiver<Fault>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(connection(client, upstream, faults.clone()));
    }
}

/// One proxied connection: waits out a stall before connecting upstream,
/// then passes bytes both ways under the fault in force.
async fn connection(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut faults: watch::Receiver<Fault>,
) {
    if !wait_passable(&mut faults).await {
        reset(client);
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        reset(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    loop {
        if !wait_passable(&mut faults).await {
            reset(client);
            reset(server);
            return;
        }
        let latency = match *faults.borrow() {
            Fault::Latency(d) => d,
            _ => Duration::ZERO,
        };
        let passed = tokio::select! {
            r = client.read(&mut up) => pass(r, &up, &mut server, latency).await,
            r = server.read(&mut down) => pass(r, &down, &mut client, latency).await,
            // Look at the new fault before reading more.
            _ = faults.changed() => true,
        };
        if !passed {
            return;
        }
    }
}

/// Passes what one read got to the other side; false when the connection
/// is over.
async fn pass(
    read: std::io::Result<usize>,
    buf: &[u8],
    to: &mut TcpStream,
    latency: Duration,
) -> bool {
    let n = match read {
        Ok(0) | Err(_) => return false,
        Ok(n) => n,
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    to.write_all(&buf[..n]).await.is_ok()
}

/// Waits while the fault is a stall; false if it is a reset.
async fn wait_passable(faults: &mut watch::Receiver<Fault>) -> bool {
    loop {
        let f = *faults.borrow_and_update();
        match f {
            Fault::Reset => return false,
            Fault::Stall => {
                if faults.changed().await.is_err() {
                    return false;
                }
            }
            Fault::None | Fault::Latency(_) => return true,
        }
    }
}

/// Closes with a RST, as a dropped connection looks to its peer.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}
