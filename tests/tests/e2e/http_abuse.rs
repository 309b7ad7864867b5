//! Requests that try to hurt the gateway: slow heads and bodies, bodies in
//! one-byte pieces, oversized bulks, `HEAD` on consume, thousands of idle
//! connections, malformed requests. Each is bounded in time and memory
//! (read from the process), takes no job and stores nothing.
//!
//! Length: each test is one scenario, written top to bottom as an operator
//! would run it (start, act, break something, check what Redis and clients
//! see), so some run past 60 lines; splitting them would scatter one story.

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

use sundial_tests::{Api, RedisServer, Sundial, SundialConfig, create_token, wait_until};

/// A gateway with short HTTP timeouts, so that the tests see them pass.
fn gateway(redis: &RedisServer, http: &str) -> Sundial {
    let mut cfg = SundialConfig::new(redis.url());
    cfg.extra = format!("[http]\n{http}\n");
    Sundial::start(&cfg)
}

/// Resident memory of a process, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    s
}

/// Whether the server closed `s` (a read returns 0 or an error at once).
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(5)))
        .expect("timeout");
    let mut buf = [0u8; 512];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// Reads a whole `Connection: close` answer: status and body.
fn answer(s: &mut TcpStream) -> (u16, String) {
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    let status = raw.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

async fn size(api: &Api, q: &str) -> u64 {
    api.get(&format!("/api/ns/{q}/size")).await.json["size"]
        .as_u64()
        .expect("size")
}

#[tokio::test]
async fn slow_and_silent_clients_are_cut_off() {
    let redis = RedisServer::start();
    // The idle timeout is long: only the head and body timers may act here.
    let gw = gateway(
        &redis,
        "header_timeout_ms = 1000\nbody_timeout_ms = 1500\nidle_timeout_ms = 20000",
    );
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let port = gw.api_port;

    // Slow heads: a byte now and then, never a whole head.
    let mut slow_heads: Vec<TcpStream> = (0..200).map(|_| connect(port)).collect();
    // The same on a keep-alive connection, after one good request.
    let mut second_heads: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = connect(port);
            s.write_all(b"GET /api/ns/q/size HTTP/1.1\r\nHost: x\r\n\r\n")
                .expect("request");
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            let mut buf = [0u8; 512];
            assert!(s.read(&mut buf).expect("an answer") > 0);
            s
        })
        .collect();
    // Silent: connected, nothing sent.
    let mut silent: Vec<TcpStream> = (0..50).map(|_| connect(port)).collect();
    // Slow bodies: a whole head, then a byte now and then.
    let head = format!(
        "PUT /api/ns/slow HTTP/1.1\r\nHost: x\r\nX-Token: {token}\r\nContent-Length: 100\r\nConnection: close\r\n\r\n"
    );
    let mut slow_bodies: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut s = connect(port);
            s.write_all(head.as_bytes()).expect("head");
            s
        })
        .collect();
    let start = Instant::now();
    for s in slow_heads.iter_mut().chain(second_heads.iter_mut()) {
        s.write_all(b"GET /api/ns/q HTTP/1.1\r\n")
            .expect("first bytes");
    }
    // Keep trickling until the server hangs up on every slow head.
    let mut heads_closed = None;
    while heads_closed.is_none() && start.elapsed() < Duration::from_secs(8) {
        for s in slow_heads
            .iter_mut()
            .chain(second_heads.iter_mut())
            .chain(slow_bodies.iter_mut())
        {
            let _ = s.write_all(b"x");
        }
        std::thread::sleep(Duration::from_millis(200));
        if slow_heads
            .iter_mut()
            .chain(second_heads.iter_mut())
            .all(closed_by_server)
        {
            heads_closed = Some(start.elapsed());
        }
    }
    let heads_closed = heads_closed.expect("slow heads closed within 8 s");
    // The bound is 1 s; the rest is margin for a busy machine.
    assert!(heads_closed < Duration::from_secs(5), "{heads_closed:?}");
    wait_until(
        Duration::from_secs(5),
        "silent clients to be closed",
        || silent.iter_mut().all(closed_by_server),
    );
    for s in &mut slow_bodies {
        let (status, body) = answer(s);
        assert_eq!(status, 408, "{body}");
        assert_eq!(body, r#"{"error":"request body too slow"}"#);
    }
    let took = start.elapsed();
    assert!(took < Duration::from_secs(10), "bounded: {took:?}");
    assert_eq!(size(&api, "slow").await, 0, "nothing stored");
    eprintln!(
        "220 slow heads (20 of them after a first request) closed {heads_closed:?} after they began \
         (bound 1 s); 50 silent and 50 slow bodies (408) done by {took:?} (bound 1.5 s)"
    );
}

#[tokio::test]
async fn a_body_in_one_byte_pieces_costs_little_memory() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "body_timeout_ms = 60000");
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let port = gw.api_port;
    let pid = gw.pid();
    // Large enough that the allocator's fixed costs (a few MB of segments)
    // do not hide a cost per byte.
    const N: usize = 1_000_000;
    // The same body sent at once first: the allocator's own growth for a
    // body this size is then in the baseline, and what is measured below is
    // what the one-byte pieces add.
    let r = api.put("/api/ns/warm", &vec![b'w'; N]).await;
    assert_eq!(r.status, 201, "{r:?}");
    let before = rss(pid);
    let sender = std::thread::spawn(move || {
        let mut s = connect(port);
        let head = format!(
            "PUT /api/ns/pieces HTTP/1.1\r\nHost: x\r\nX-Token: {token}\r\nContent-Length: {N}\r\nConnection: close\r\n\r\n"
        );
        s.write_all(head.as_bytes()).expect("head");
        for i in 0..N {
            // One byte per write, Nagle off: one byte per TCP segment.
            s.write_all(&[b'a' + (i % 26) as u8]).expect("a byte");
        }
        answer(&mut s)
    });
    let mut peak = before;
    while !sender.is_finished() {
        peak = peak.max(rss(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, body) = sender.join().expect("sender");
    assert_eq!(status, 201, "{body}");
    let grew = peak.saturating_sub(before);
    eprintln!("a {N}-byte body in 1-byte segments: RSS grew by {grew} bytes at most");
    // The body once, its buffer's growth, and the copy sent to Redis: a few
    // times N, not thousands (it was 480 MB, 2,400 N). The bound leaves room
    // for the allocator: a worker thread's first large allocation may touch
    // a fresh arena, and one CI run saw 12.6 N from that alone.
    assert!(
        grew < 40 * N as u64,
        "RSS grew by {grew} bytes for a {N}-byte body"
    );
    let job = api.get("/api/ns/pieces").await;
    assert_eq!(job.status, 200);
    assert_eq!(size(&api, "pieces").await, 0);
}

#[tokio::test]
async fn oversized_bodies_are_refused_and_store_nothing() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "max_bulk_bytes = 100000");
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));

    // A bulk over the byte bound, though under 64 elements.
    let big: Vec<String> = (0..20)
        .map(|_| format!("\"{}\"", "x".repeat(10_000)))
        .collect();
    let body = format!("[{}]", big.join(","));
    let r = api.put("/api/ns/bulk/bulk", body.as_bytes()).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(r.json["error"], "bulk body too large");

    // The same without a Content-Length: refused while streaming.
    let mut s = connect(gw.api_port);
    let head = format!(
        "PUT /api/ns/bulk/bulk HTTP/1.1\r\nHost: x\r\nX-Token: {token}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).expect("head");
    for chunk in body.as_bytes().chunks(4096) {
        let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
        if s.write_all(&framed).is_err() {
            break; // refused before the end
        }
    }
    let _ = s.write_all(b"0\r\n\r\n");
    let (status, answer_body) = answer(&mut s);
    assert_eq!(status, 413, "{answer_body}");
    assert_eq!(answer_body, r#"{"error":"bulk body too large"}"#);

    // A single job over 1 MiB.
    let r = api.put("/api/ns/one", &vec![b'x'; 1024 * 1024 + 1]).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(r.json["error"], "body too large");
    assert_eq!(size(&api, "bulk").await, 0);
    assert_eq!(size(&api, "one").await, 0);
}

#[tokio::test]
async fn head_and_unknown_methods_are_405_and_take_nothing() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "");
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let id = api.publish("ns", "q", "tries=3", b"keep me").await;
    for _ in 0..3 {
        let r = api
            .call(reqwest::Method::HEAD, "/api/ns/q?timeout=0", None, &[])
            .await;
        assert_eq!(r.status, 405, "{r:?}");
    }
    for method in ["POST", "PATCH", "OPTIONS"] {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let r = api.call(m, "/api/ns/q", None, &[]).await;
        assert_eq!(r.status, 405, "{method}: {r:?}");
        assert_eq!(r.json["error"], "method not allowed");
    }
    let r = Api::new(gw.admin(), None)
        .call(reqwest::Method::PUT, "/ready", None, &[])
        .await;
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.json["error"], "method not allowed");
    // The job is untouched: still ready, no try spent.
    let r = api.get("/api/ns/q").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["job_id"], id.as_str());
    assert_eq!(r.json["remain_tries"], 2, "only this consume spent a try");
}

#[tokio::test]
async fn malformed_requests_get_json_errors() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "max_head_bytes = 16384");
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GARBAGE\r\n\r\n".to_vec(), 400),
        (
            b"GET /api/ns/q HTTP/1.1\r\nBad Header\r\n\r\n".to_vec(),
            400,
        ),
        (
            format!(
                "GET /api/ns/q HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
                "y".repeat(40_000)
            )
            .into_bytes(),
            431,
        ),
    ];
    for (request, want) in cases {
        let mut s = connect(gw.api_port);
        s.write_all(&request).expect("request");
        let (status, body) = answer(&mut s);
        assert_eq!(status, want, "{}", String::from_utf8_lossy(&request[..20]));
        let json: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{body:?} is not JSON: {e}"));
        assert!(json["error"].is_string(), "{json}");
    }
    // axum's own extractor rejections (here: a path that is not UTF-8).
    let r = sundial_tests::Api::new(gw.admin(), None)
        .call(reqwest::Method::DELETE, "/token/%FF%FE/x", None, &[])
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    let message = r.json["error"].as_str().unwrap_or_default();
    assert!(message.contains("UTF-8"), "axum's reason, as JSON: {r:?}");
    assert_eq!(
        r.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
}

#[tokio::test]
async fn thousands_of_idle_connections_are_bounded_and_closed() {
    // The test opens 5,000 sockets itself.
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let redis = RedisServer::start();
    let gw = gateway(&redis, "idle_timeout_ms = 3000\nheader_timeout_ms = 3000");
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let pid = gw.pid();
    let before = rss(pid);
    const N: usize = 5_000;
    let mut conns = Vec::with_capacity(N);
    for _ in 0..N {
        let mut s = connect(gw.api_port);
        // One real request each, then idle on keep-alive.
        s.write_all(b"GET /api/ns/q/size HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("request");
        conns.push(s);
    }
    for s in &mut conns {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).expect("an answer");
        assert!(n > 0);
    }
    let open = rss(pid);
    // Still serving others meanwhile.
    api.publish("ns", "q", "", b"still here").await;
    let per_conn = open.saturating_sub(before) / N as u64;
    eprintln!("{N} idle keep-alive connections: about {per_conn} bytes of RSS each");
    let start = Instant::now();
    wait_until(
        Duration::from_secs(20),
        "idle connections to be closed",
        || conns.iter_mut().all(closed_by_server),
    );
    eprintln!("all closed {:?} after the last request", start.elapsed());
    let metrics = Api::new(gw.admin(), None).get("/metrics").await;
    let text = metrics.json.as_str().unwrap_or_default().to_owned();
    assert!(
        text.contains("sundial_http_connections_closed_total{listener=\"api\",reason=\"idle\"}"),
        "counted: {text}"
    );
}

#[tokio::test]
async fn a_request_refused_before_its_body_is_read_is_told_to_reconnect() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "");
    let token = create_token(&gw.admin(), "ns").await;
    // A wrong token, and a body announced but not yet sent: the 401 comes
    // before the body, so the connection can carry nothing more, and the
    // answer says so.
    let mut s = connect(gw.api_port);
    s.write_all(
        b"PUT /api/ns/q HTTP/1.1\r\nHost: x\r\nX-Token: wrong\r\nContent-Length: 100000\r\n\r\npart",
    )
    .expect("write");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).expect("an answer");
    let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    // A refusal of a request without a body keeps the connection.
    let mut s = connect(gw.api_port);
    s.write_all(b"GET /api/ns/q HTTP/1.1\r\nHost: x\r\nX-Token: wrong\r\n\r\n")
        .expect("write");
    let n = s.read(&mut buf).expect("an answer");
    let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
    // And a publish with a body that succeeds keeps it too.
    let mut s = connect(gw.api_port);
    let publish = format!(
        "PUT /api/ns/q HTTP/1.1\r\nHost: x\r\nX-Token: {token}\r\nContent-Length: 4\r\n\r\nkept"
    );
    s.write_all(publish.as_bytes()).expect("write");
    let n = s.read(&mut buf).expect("an answer");
    let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 201"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
}

/// What keeps an idle connection's memory small (docs/BENCHMARKS.md, "Idle
/// connections"): the process is off transparent huge pages, and a large
/// answer is written from its own buffer, twice on one connection.
#[tokio::test]
async fn the_gateway_is_off_huge_pages_and_writes_large_answers_whole() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "");
    let status = std::fs::read_to_string(format!("/proc/{}/status", gw.pid())).expect("status");
    match status.lines().find_map(|l| l.strip_prefix("THP_enabled:")) {
        Some(v) => assert_eq!(v.trim(), "0", "transparent huge pages are on"),
        None => eprintln!("this kernel does not report THP_enabled; not checked"),
    }
    let document = sundial_tests::contract::document_text();
    let mut s = connect(gw.api_port);
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    for _ in 0..2 {
        s.write_all(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("request");
        let mut got = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        let body_at = loop {
            let n = s.read(&mut chunk).expect("read");
            assert!(n > 0, "closed early");
            got.extend_from_slice(&chunk[..n]);
            if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        while got.len() < body_at + document.len() {
            let n = s.read(&mut chunk).expect("read");
            assert!(n > 0, "the answer was cut");
            got.extend_from_slice(&chunk[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200"), "{:?}", &got[..20]);
        assert_eq!(&got[body_at..], document, "the whole document, once");
    }
}
