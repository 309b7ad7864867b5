//! The URL a shard's config makes for the client (fred): its `url` as
//! given, or the `redis-sentinel://` or `redis-cluster://` URL of its
//! `sentinel` or `cluster` table, with credentials percent-encoded.

use super::{
    secret::Secret,
    shard::{ClusterConfig, ShardConfig},
};

impl ShardConfig {
    /// The URL to connect with: `url` as given, or the `redis-sentinel://`
    /// URL that `sentinel` describes, or the `redis-cluster://` URL of
    /// `cluster`.
    pub fn connect_url(&self) -> Result<String, String> {
        match (&self.url, &self.sentinel, &self.cluster) {
            (Some(url), None, None) => redis_url(url, self.password.as_ref()),
            (None, None, Some(c)) => c.url(),
            (None, Some(s), None) => {
                let (first, rest) = s
                    .addresses
                    .split_first()
                    .ok_or_else(|| "sentinel.addresses is empty".to_owned())?;
                let auth = match &s.password {
                    Some(p) => format!(":{}@", encode(&p.read()?)),
                    None => String::new(),
                };
                let mut url = format!(
                    "redis-sentinel://{auth}{first}/{}?sentinelServiceName={}",
                    s.db,
                    encode(&s.master)
                );
                for node in rest {
                    url += &format!("&node={node}");
                }
                if let Some(p) = &s.sentinel_password {
                    url += &format!("&sentinelPassword={}", encode(&p.read()?));
                }
                Ok(url)
            }
            (None, None, None) => {
                Err("needs a `url`, a `sentinel` or a `cluster` table".to_owned())
            }
            _ => Err("give one of `url`, `sentinel` and `cluster`, not several".to_owned()),
        }
    }
}

/// The schemes a shard's `url` may have: plain and TLS (`rediss`), for a
/// server, a Sentinel set (`-sentinel`), a cluster (`-cluster`) or a
/// server's Unix socket (`redis+unix:///path`, or `unix:///path`).
const SCHEMES: [&str; 8] = [
    "redis",
    "rediss",
    "redis-sentinel",
    "rediss-sentinel",
    "redis-cluster",
    "rediss-cluster",
    "redis+unix",
    "unix",
];

/// A shard's (or `admin_redis`'s) URL as the client reads it, with
/// `password` (read now) over any the URL holds. Refused when its scheme
/// is not a Redis one (an `https://` URL would otherwise be dialled in
/// plain text), naming only the scheme; `unix://` becomes `redis+unix://`.
pub fn redis_url(url: &str, password: Option<&Secret>) -> Result<String, String> {
    let url = checked_scheme(url)?;
    match password {
        Some(p) => Ok(with_password(&url, &p.read()?)),
        None => Ok(url),
    }
}

fn checked_scheme(url: &str) -> Result<String, String> {
    let (scheme, rest) = url.split_once("://").unwrap_or_default();
    if scheme.eq_ignore_ascii_case("unix") || scheme.eq_ignore_ascii_case("redis+unix") {
        sundial_core::conn::unix_database(url)?;
        return Ok(format!("redis+unix://{rest}"));
    }
    if SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme)) {
        return Ok(url.to_owned());
    }
    let said = if scheme.is_empty() {
        "has no scheme".to_owned()
    } else {
        format!("has the scheme `{scheme}`, which is not Redis's")
    };
    Err(format!(
        "url {said}: use redis://, rediss:// (TLS), redis-sentinel://, redis-cluster:// (or \
         their rediss- forms), redis+unix:///path, or a `sentinel` or `cluster` table"
    ))
}

impl ClusterConfig {
    /// The `redis-cluster://` (or `rediss-cluster://`) URL fred reads.
    fn url(&self) -> Result<String, String> {
        let mut addrs = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let addr = n
                .strip_prefix("redis://")
                .or_else(|| n.strip_prefix("rediss://"))
                .unwrap_or(n)
                .trim_end_matches('/');
            let (host, port) = addr
                .rsplit_once(':')
                .ok_or_else(|| format!("cluster node {:?} needs a port (host:port)", shown(n)))?;
            if host.is_empty() || host.contains(['@', '/', '?']) || port.parse::<u16>().is_err() {
                return Err(format!(
                    "cluster node {:?} must be host:port or redis://host:port (credentials go in \
                     `username` and `password`)",
                    shown(n)
                ));
            }
            addrs.push(addr);
        }
        let (first, rest) = addrs
            .split_first()
            .ok_or_else(|| "cluster.nodes is empty".to_owned())?;
        let scheme = if self.tls {
            "rediss-cluster"
        } else {
            "redis-cluster"
        };
        let password = self.password.as_ref().map(|p| p.read()).transpose()?;
        let auth = match (&self.username, &password) {
            (None, None) => String::new(),
            (user, password) => format!(
                "{}:{}@",
                user.as_deref().map(encode).unwrap_or_default(),
                password.as_deref().map(encode).unwrap_or_default()
            ),
        };
        let mut url = format!("{scheme}://{auth}{first}");
        for (i, node) in rest.iter().enumerate() {
            url += if i == 0 { "?" } else { "&" };
            url += &format!("node={node}");
        }
        Ok(url)
    }
}

/// A cluster node as an error may quote it: without what comes before an
/// `@` (credentials, which belong in `username` and `password`).
fn shown(node: &str) -> String {
    match node.rsplit_once('@') {
        Some((_, host)) => format!("…@{host}"),
        None => node.to_owned(),
    }
}

/// `url` with `password` in its userinfo, over any password it holds (its
/// user kept). A socket's URL gets the host `localhost`, which the client
/// needs beside credentials and ignores.
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, host) = match authority.rsplit_once('@') {
        Some((info, host)) => (info.split_once(':').map_or(info, |(u, _)| u), host),
        None => ("", authority),
    };
    let host = if host.is_empty() { "localhost" } else { host };
    format!("{scheme}://{user}:{}@{host}{tail}", encode(password))
}

/// Percent-encodes what may not stand in a URL's userinfo or query.
fn encode(s: &str) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    /// Everything but RFC 3986's unreserved characters.
    const RESERVED: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    utf8_percent_encode(s, RESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::super::shard::{SentinelConfig, tests::shard};
    use super::*;

    #[test]
    fn a_unix_url_takes_a_database_and_nothing_else() {
        assert_eq!(
            redis_url("unix:///run/r.sock?db=2", None).as_deref(),
            Ok("redis+unix:///run/r.sock?db=2")
        );
        assert!(redis_url("unix:///run/r.sock?db=300", None).is_err());
        assert!(redis_url("redis+unix:///run/r.sock?x=1", None).is_err());
    }

    #[test]
    fn only_redis_schemes_are_taken() {
        for ok in [
            "redis://h:1",
            "rediss://u:p@h:1/2",
            "redis-sentinel://h:1?sentinelServiceName=m",
            "redis-cluster://h:1",
            "rediss-cluster://h:1",
            "redis+unix:///run/redis.sock",
        ] {
            assert_eq!(redis_url(ok, None).as_deref(), Ok(ok));
        }
        assert_eq!(
            redis_url("unix:///run/redis.sock", None).as_deref(),
            Ok("redis+unix:///run/redis.sock")
        );
        for bad in ["https://u:secret@h:1", "http://h:1", "h:6379", "tcp://h:1"] {
            let e = redis_url(bad, None).expect_err(bad);
            assert!(!e.contains("secret"), "{e}");
            assert!(e.contains("redis://"), "{e}");
        }
        assert!(
            redis_url("https://h:1", None)
                .expect_err("https")
                .contains("`https`")
        );
    }

    #[test]
    fn a_password_given_apart_goes_into_the_url() {
        let mut s = shard(Some("a"), 1);
        s.password = Some(super::super::Secret::from("p@ss/w"));
        for (url, want) in [
            ("redis://h:1/2", "redis://:p%40ss%2Fw@h:1/2"),
            ("rediss://jobs:old@h:1", "rediss://jobs:p%40ss%2Fw@h:1"),
            (
                "unix:///run/r.sock",
                "redis+unix://:p%40ss%2Fw@localhost/run/r.sock",
            ),
        ] {
            s.url = Some(url.to_owned());
            assert_eq!(s.connect_url().as_deref(), Ok(want), "{url}");
        }
    }

    #[test]
    fn sentinel_shards_become_fred_sentinel_urls() {
        let mut s = shard(Some("a"), 1);
        s.url = None;
        s.sentinel = Some(SentinelConfig {
            addresses: vec!["10.0.0.1:26379".to_owned(), "10.0.0.2:26379".to_owned()],
            master: "jobs".to_owned(),
            password: Some("p@ss".into()),
            sentinel_password: Some("s".into()),
            db: 2,
        });
        assert_eq!(
            s.connect_url().expect("url"),
            "redis-sentinel://:p%40ss@10.0.0.1:26379/2?sentinelServiceName=jobs&node=10.0.0.2:26379&sentinelPassword=s"
        );
        s.url = Some("redis://x:1".to_owned());
        assert!(s.connect_url().is_err(), "not both");
        s.url = None;
        s.sentinel = None;
        assert!(s.connect_url().is_err(), "not neither");
    }

    #[test]
    fn cluster_shards_become_fred_cluster_urls() {
        let mut s = shard(Some("c"), 1);
        s.url = None;
        let mut c = ClusterConfig {
            nodes: vec![
                "redis://10.0.0.1:7000".to_owned(),
                "10.0.0.2:7001".to_owned(),
                "redis://10.0.0.3:7002/".to_owned(),
            ],
            username: None,
            password: None,
            tls: false,
        };
        s.cluster = Some(c.clone());
        assert_eq!(
            s.connect_url().expect("url"),
            "redis-cluster://10.0.0.1:7000?node=10.0.0.2:7001&node=10.0.0.3:7002"
        );
        c.username = Some("jobs".to_owned());
        c.password = Some("p@ss".into());
        c.tls = true;
        c.nodes.truncate(1);
        s.cluster = Some(c.clone());
        assert_eq!(
            s.connect_url().expect("url"),
            "rediss-cluster://jobs:p%40ss@10.0.0.1:7000"
        );
        for bad in [
            "10.0.0.1",
            "redis://u:hunter2@10.0.0.1:7000",
            "h:port",
            ":7000",
        ] {
            c.nodes = vec![bad.to_owned()];
            s.cluster = Some(c.clone());
            let e = s.connect_url().expect_err(bad);
            assert!(!e.contains("hunter2"), "no password in {e}");
        }
        c.nodes.clear();
        s.cluster = Some(c);
        assert!(s.connect_url().is_err(), "no nodes");
        s.url = Some("redis://x:1".to_owned());
        assert!(s.connect_url().is_err(), "not both");
    }
}
