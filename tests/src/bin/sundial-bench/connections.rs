//! `connections`: what idle keep-alive connections cost the gateway. Opens
//! `count` connections in steps of a fifth; each sends one request of the
//! kind asked, reads its whole answer, and then idles. Reports the
//! gateway's resident memory per open connection at each step, then closes
//! them all and reads it again 5 s and 30 s later (whether it goes back).

use std::{
    io::{Read, Write},
    net::TcpStream,
    sync::Arc,
    time::Duration,
};

use anyhow::{Context, bail};

use crate::{Ctx, idle::rss_mb};

const MIB: f64 = 1024.0 * 1024.0;

/// One request on a connection, then idle.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum Kind {
    /// None: connect only.
    None,
    /// `GET /api/{ns}/q/size`.
    Size,
    /// A publish of the run's body (`--size`).
    Publish,
    /// `GET /openapi.json`: a large answer.
    Openapi,
}

pub(crate) async fn connections(ctx: Arc<Ctx>, count: usize, kind: Kind) -> anyhow::Result<()> {
    let pid = ctx.cpu.gateway.context("connections needs --gateway-pid")?;
    let addr = ctx.api.trim_start_matches("http://").to_owned();
    let rss = || rss_mb(pid).map_or(0.0, |m| m * MIB);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = rss();
    let mut open: Vec<TcpStream> = Vec::with_capacity(count);
    let step = count.div_ceil(5).max(1);
    while open.len() < count {
        let n = step.min(count - open.len());
        let (ctx, addr) = (ctx.clone(), addr.clone());
        let more = tokio::task::spawn_blocking(move || open_some(&ctx, &addr, n, kind)).await??;
        open.extend(more);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let per = (rss() - before) / open.len() as f64;
        println!(
            "connections kind={kind:?} open={} gateway_rss_mib={:.1} per_connection_bytes={per:.0}",
            open.len(),
            rss() / MIB
        );
    }
    drop(open);
    for wait in [5, 25] {
        tokio::time::sleep(Duration::from_secs(wait)).await;
        println!(
            "connections kind={kind:?} closed_for_s={} gateway_rss_mib={:.1} above_start_mib={:.1}",
            if wait == 5 { 5 } else { 30 },
            rss() / MIB,
            (rss() - before) / MIB
        );
    }
    Ok(())
}

fn open_some(ctx: &Ctx, addr: &str, n: usize, kind: Kind) -> anyhow::Result<Vec<TcpStream>> {
    let request = match kind {
        Kind::None => Vec::new(),
        Kind::Size => format!(
            "GET /api/{}/q/size HTTP/1.1\r\nHost: b\r\nX-Token: {}\r\n\r\n",
            ctx.ns, ctx.token
        )
        .into_bytes(),
        Kind::Publish => {
            let mut r = format!(
                "PUT /api/{}/q HTTP/1.1\r\nHost: b\r\nX-Token: {}\r\nContent-Length: {}\r\n\r\n",
                ctx.ns,
                ctx.token,
                ctx.body.len()
            )
            .into_bytes();
            r.extend_from_slice(&ctx.body);
            r
        }
        Kind::Openapi => b"GET /openapi.json HTTP/1.1\r\nHost: b\r\n\r\n".to_vec(),
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(addr)?;
        if !request.is_empty() {
            s.write_all(&request)?;
            read_answer(&mut s)?;
        }
        out.push(s);
    }
    Ok(out)
}

/// Reads one answer whole (its head, and a body of `Content-Length`).
fn read_answer(s: &mut TcpStream) -> anyhow::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let (head_end, length) = loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            bail!("the gateway closed the connection");
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            if !head.starts_with("http/1.1 2") {
                bail!("answered {}", head.lines().next().unwrap_or(""));
            }
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, length);
        }
    };
    while buf.len() < head_end + length {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            bail!("the answer was cut");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}
