//! The URL a shard's config makes for the client (fred): its `url` as
//! given, or the `redis-sentinel://` or `redis-cluster://` URL of its
//! `sentinel` or `cluster` table, with credentials percent-encoded.

use super::shard::{ClusterConfig, ShardConfig};

impl ShardConfig {
    /// The URL to connect with: `url` as given, or the `redis-sentinel://`
    /// URL that `sentinel` describes, or the `redis-cluster://` URL of
    /// `cluster`.
    pub fn connect_url(&self) -> Result<String, String> {
        match (&self.url, &self.sentinel, &self.cluster) {
            (Some(url), None, None) => Ok(url.clone()),
            (None, None, Some(c)) => c.url(),
            (None, Some(s), None) => {
                let (first, rest) = s
                    .addresses
                    .split_first()
                    .ok_or_else(|| "sentinel.addresses is empty".to_owned())?;
                let auth = s
                    .password
                    .as_ref()
                    .map(|p| format!(":{}@", encode(p)))
                    .unwrap_or_default();
                let mut url = format!(
                    "redis-sentinel://{auth}{first}/{}?sentinelServiceName={}",
                    s.db,
                    encode(&s.master)
                );
                for node in rest {
                    url += &format!("&node={node}");
                }
                if let Some(p) = &s.sentinel_password {
                    url += &format!("&sentinelPassword={}", encode(p));
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
                .ok_or_else(|| format!("cluster node {n:?} needs a port (host:port)"))?;
            if host.is_empty() || host.contains(['@', '/', '?']) || port.parse::<u16>().is_err() {
                return Err(format!(
                    "cluster node {n:?} must be host:port or redis://host:port (credentials go in \
                     `username` and `password`)"
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
        let auth = match (&self.username, &self.password) {
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
    fn sentinel_shards_become_fred_sentinel_urls() {
        let mut s = shard(Some("a"), 1);
        s.url = None;
        s.sentinel = Some(SentinelConfig {
            addresses: vec!["10.0.0.1:26379".to_owned(), "10.0.0.2:26379".to_owned()],
            master: "jobs".to_owned(),
            password: Some("p@ss".to_owned()),
            sentinel_password: Some("s".to_owned()),
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
        c.password = Some("p@ss".to_owned());
        c.tls = true;
        c.nodes.truncate(1);
        s.cluster = Some(c.clone());
        assert_eq!(
            s.connect_url().expect("url"),
            "rediss-cluster://jobs:p%40ss@10.0.0.1:7000"
        );
        for bad in ["10.0.0.1", "redis://u:p@10.0.0.1:7000", "h:port", ":7000"] {
            c.nodes = vec![bad.to_owned()];
            s.cluster = Some(c.clone());
            assert!(s.connect_url().is_err(), "{bad}");
        }
        c.nodes.clear();
        s.cluster = Some(c);
        assert!(s.connect_url().is_err(), "no nodes");
        s.url = Some("redis://x:1".to_owned());
        assert!(s.connect_url().is_err(), "not both");
    }
}
