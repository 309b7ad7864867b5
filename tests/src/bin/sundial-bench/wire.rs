//! A lean HTTP/1.1 keep-alive client for the hot loops of `publish` and
//! `consume`.
//!
//! The load generator shares Redis's core in the bench's placement, so what
//! it spends per request is taken from Redis. A general client (`reqwest`)
//! spent about 27 µs of that core per request: URL parsing, header maps,
//! a JSON parse of every answer. Here a request is bytes built once (or,
//! for an ack, one `format!`), and an answer is read only as far as its
//! status and body. Setup requests (token, fill) keep using `reqwest`.

use anyhow::{Context, bail};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// One keep-alive connection, one request at a time.
pub(crate) struct Conn {
    stream: TcpStream,
    /// Room for an answer, zeroed once (not per read): its first `filled`
    /// bytes are the answer being read, and nothing more (the gateway does
    /// not pipeline).
    buf: Vec<u8>,
    filled: usize,
}

impl Conn {
    /// Connects to the host and port of `base` (`http://host:port`).
    pub(crate) async fn connect(base: &str) -> anyhow::Result<Self> {
        let addr = base
            .strip_prefix("http://")
            .context("the API URL must start with http://")?
            .trim_end_matches('/');
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connect to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            buf: vec![0; 16 * 1024],
            filled: 0,
        })
    }

    /// Sends `request` (head and body, whole) and reads the answer: its
    /// status and body. The body is valid until the next call.
    pub(crate) async fn call(&mut self, request: &[u8]) -> anyhow::Result<(u16, &[u8])> {
        self.stream.write_all(request).await?;
        self.filled = 0;
        let head_end = loop {
            if let Some(i) = find(&self.buf[..self.filled], b"\r\n\r\n") {
                break i + 4;
            }
            self.fill().await?;
        };
        let head =
            std::str::from_utf8(&self.buf[..head_end]).context("answer head is not UTF-8")?;
        let status: u16 = head
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line: {}", head.lines().next().unwrap_or("")))?;
        let mut length = 0usize;
        for line in head.split("\r\n").skip(1) {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().context("bad content-length")?;
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                bail!("chunked answers are not read by this client");
            }
        }
        while self.filled < head_end + length {
            self.fill().await?;
        }
        Ok((status, &self.buf[head_end..head_end + length]))
    }

    async fn fill(&mut self) -> anyhow::Result<()> {
        if self.filled == self.buf.len() {
            self.buf.resize(2 * self.buf.len(), 0);
        }
        let n = self.stream.read(&mut self.buf[self.filled..]).await?;
        self.filled += n;
        if n == 0 {
            bail!("the gateway closed the connection");
        }
        Ok(())
    }
}

/// A request's bytes: `method path`, the token, and a body (none when empty).
pub(crate) fn request(method: &str, path: &str, token: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nhost: sundial\r\nx-token: {token}\r\n");
    if !body.is_empty() || method == "PUT" {
        r.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    r.push_str("\r\n");
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    r
}

/// Every `job_id` in a consume answer (one job, or an array of them),
/// found by scanning rather than by parsing the JSON.
pub(crate) fn job_ids(body: &[u8]) -> impl Iterator<Item = &str> {
    const KEY: &[u8] = b"\"job_id\":\"";
    let mut rest = body;
    std::iter::from_fn(move || {
        let at = find(rest, KEY)? + KEY.len();
        let len = rest[at..].iter().position(|&b| b == b'"')?;
        let id = std::str::from_utf8(&rest[at..at + len]).ok();
        rest = &rest[at + len..];
        id
    })
}

/// Every job in a consume answer with its delivery number (the first
/// `"delivery":N` after its `job_id`; 0 when there is none), found by
/// scanning as [`job_ids`] does.
pub(crate) fn deliveries(body: &[u8]) -> Vec<(&str, u32)> {
    const KEY: &[u8] = b"\"delivery\":";
    let ids: Vec<&str> = job_ids(body).collect();
    let mut rest = body;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let after = find(rest, id.as_bytes()).map_or(rest.len(), |at| at + id.len());
        rest = &rest[after..];
        let n = find(rest, KEY).map_or(0, |at| {
            let digits = &rest[at + KEY.len()..];
            let len = digits.iter().take_while(|b| b.is_ascii_digit()).count();
            std::str::from_utf8(&digits[..len])
                .ok()
                .and_then(|d| d.parse().ok())
                .unwrap_or(0)
        });
        out.push((id, n));
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_job_id() {
        let one = br#"{"msg":"new job","namespace":"n","queue":"q","job_id":"01AB","data":"x"}"#;
        assert_eq!(job_ids(one).collect::<Vec<_>>(), ["01AB"]);
        let many = br#"[{"job_id":"a1","data":"\"job_id\""},{"job_id":"b2"}]"#;
        assert_eq!(job_ids(many).collect::<Vec<_>>(), ["a1", "b2"]);
        assert_eq!(job_ids(b"{}").count(), 0);
    }

    #[test]
    fn pairs_each_job_with_its_delivery() {
        let one = br#"{"msg":"new job","job_id":"01AB","data":"x","delivery":3,"reason":null}"#;
        assert_eq!(deliveries(one), [("01AB", 3)]);
        let many = br#"[{"job_id":"a1","delivery":1},{"job_id":"b2","delivery":12}]"#;
        assert_eq!(deliveries(many), [("a1", 1), ("b2", 12)]);
    }
}
