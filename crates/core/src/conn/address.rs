//! Where a shard's connection dials, said for people: the addresses of its
//! URL without credentials, for errors and logs.

use fred::types::config::{Server, ServerConfig};

/// `host:port`, the cluster's or the sentinels' seed addresses, or the
/// socket's path.
pub(super) fn address_of(server: &ServerConfig) -> String {
    // In address order: the client keeps seed nodes in no fixed order.
    let hosts = |h: &[Server]| {
        let mut all: Vec<String> = h.iter().map(|s| format!("{}:{}", s.host, s.port)).collect();
        all.sort();
        all.join(", ")
    };
    match server {
        ServerConfig::Centralized { server } => format!("{}:{}", server.host, server.port),
        ServerConfig::Clustered { hosts: h, .. } => format!("cluster nodes {}", hosts(h)),
        ServerConfig::Sentinel {
            hosts: h,
            service_name,
            ..
        } => format!("master {service_name} of sentinels {}", hosts(h)),
        ServerConfig::Unix { path } => format!("socket {}", path.display()),
    }
}

/// The database a Unix-socket URL selects: its `db` query parameter
/// (`redis+unix:///run/redis.sock?db=3`), which the client's own parsing
/// leaves out (a socket's path takes the place where other URLs name the
/// database). Any other parameter is refused, by name only.
pub fn unix_database(url: &str) -> Result<Option<u8>, String> {
    let Some((_, query)) = url.split_once('?') else {
        return Ok(None);
    };
    let mut db = None;
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "db" {
            return Err(format!(
                "a unix socket url takes one parameter, db=N; not {key:?}"
            ));
        }
        let n = value.parse::<u8>().map_err(|_| {
            format!("a unix socket url's db={value} is not a database number (0 to 255)")
        })?;
        db = Some(n);
    }
    Ok(db)
}

#[cfg(test)]
mod tests {
    use fred::types::config::Config;

    use super::*;

    #[test]
    fn a_unix_urls_database_is_its_db_parameter() {
        assert_eq!(unix_database("redis+unix:///run/r.sock"), Ok(None));
        assert_eq!(unix_database("redis+unix:///run/r.sock?db=3"), Ok(Some(3)));
        let e = unix_database("redis+unix:///run/r.sock?db=x").expect_err("not a number");
        assert!(e.contains("db=x"), "{e}");
        let e = unix_database("redis+unix:///run/r.sock?password=p").expect_err("other");
        assert!(e.contains("\"password\"") && !e.contains("=p"), "{e}");
    }

    #[test]
    fn an_address_names_where_it_dials_and_no_password() {
        for (url, said) in [
            ("redis://u:secret@10.0.0.1:6380/2", "10.0.0.1:6380"),
            (
                "redis-cluster://u:secret@a:7000?node=b:7001",
                "cluster nodes a:7000, b:7001",
            ),
            (
                "redis-sentinel://:secret@s1:26379/0?sentinelServiceName=jobs&node=s2:26379",
                "master jobs of sentinels s1:26379, s2:26379",
            ),
            ("redis+unix:///run/redis.sock", "socket /run/redis.sock"),
        ] {
            let config = Config::from_url(url).expect(url);
            assert_eq!(address_of(&config.server), said, "{url}");
        }
    }
}
