//! Which addresses a push may connect to. By default only public ones:
//! an endpoint that names (or resolves to) a loopback, private, shared,
//! link-local (the cloud metadata services live there), multicast or
//! otherwise special address is refused, so that a subscription cannot
//! make a pump process call into the network it runs in. The operator
//! may allow named networks (`push.allow_networks`, CIDRs): the tests'
//! local receivers, or an internal service on purpose.
//!
//! It is for the address each connection goes to, after name
//! resolution, so that a name that resolves to a public address when a
//! subscription is saved and to a private one later (DNS rebinding) gets
//! nothing; and for an endpoint written as an address.
//!
//! An IPv6 address that carries an IPv4 address (mapped, compatible,
//! translated, NAT64) is judged by that address alone, against the
//! allowed networks too: allowing an IPv6 range never opens the IPv4
//! addresses written inside it. Teredo, 6to4 and local-use NAT64
//! addresses are refused outright (the first two are deprecated, and
//! where the last carries its IPv4 address depends on the network).
//!
//! Rust's own `is_global` and `is_shared` are not stable yet: the ranges
//! are listed here, from the IANA special-purpose registries.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::LazyLock,
};

use ipnet::IpNet;

/// Special-purpose IPv4 ranges a push never reaches unless allowed, with
/// the name an error gives them.
const V4: &[(&str, &str)] = &[
    ("0.0.0.0/8", "a \"this network\""),
    ("10.0.0.0/8", "a private"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT)"),
    ("127.0.0.0/8", "a loopback"),
    ("169.254.0.0/16", "a link-local (cloud metadata)"),
    ("172.16.0.0/12", "a private"),
    ("192.0.0.0/24", "an IETF protocol"),
    ("192.0.2.0/24", "a documentation"),
    ("192.168.0.0/16", "a private"),
    ("198.18.0.0/15", "a benchmarking"),
    ("198.51.100.0/24", "a documentation"),
    ("203.0.113.0/24", "a documentation"),
    ("224.0.0.0/4", "a multicast"),
    ("240.0.0.0/4", "a reserved"),
];

/// Special-purpose IPv6 ranges, as [`V4`]. Those that embed an IPv4
/// address are judged by it ([`embedded_v4`]) before these are looked at.
const V6: &[(&str, &str)] = &[
    ("::/128", "an unspecified"),
    ("::1/128", "a loopback"),
    ("100::/64", "a discard-only"),
    ("64:ff9b:1::/48", "a local-use NAT64"),
    ("2001::/32", "a Teredo"),
    ("2001::/23", "an IETF protocol"),
    ("2001:db8::/32", "a documentation"),
    ("2002::/16", "a 6to4"),
    ("3fff::/20", "a documentation"),
    ("5f00::/16", "a segment-routing (SRv6)"),
    ("fec0::/10", "a site-local"),
    ("fc00::/7", "a unique-local (private)"),
    ("fe80::/10", "a link-local"),
    ("ff00::/8", "a multicast"),
];

/// An address a push may not reach, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{ip} is {range} address, which a push may not reach unless `push.allow_networks` allows it"
)]
pub struct Refused {
    pub ip: IpAddr,
    /// The range's name, with its article ("a loopback").
    pub range: &'static str,
}

/// A network in `push.allow_networks` that does not read as a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("push.allow_networks: {0:?} is not a network (a CIDR such as 10.1.0.0/16 or fd00::/8)")]
pub struct BadNetwork(pub String);

/// The networks a push may reach besides the public ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Networks {
    allowed: Vec<IpNet>,
}

impl Networks {
    /// `push.allow_networks` read: each a CIDR (`10.1.0.0/16`), or an
    /// address alone for that address.
    pub fn parse<S: AsRef<str>>(list: &[S]) -> Result<Self, BadNetwork> {
        let allowed = list
            .iter()
            .map(|s| {
                let s = s.as_ref().trim();
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| BadNetwork(s.to_owned()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { allowed })
    }

    /// Whether a push may connect to `ip`: a public address, or one of an
    /// allowed network.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refused> {
        // Judged by the IPv4 address it carries, if any, alone.
        let judged = match ip {
            IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
            IpAddr::V4(_) => ip,
        };
        let Some(range) = special(judged) else {
            return Ok(());
        };
        if self.allowed.iter().any(|n| n.contains(&judged)) {
            return Ok(());
        }
        Err(Refused { ip, range })
    }
}

/// The special range `ip` falls in, if any (an IPv6 address that
/// carries an IPv4 one is passed as that one: see `check`).
fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(_) => find(ip),
    }
}

fn special_v4(v4: Ipv4Addr) -> Option<&'static str> {
    if v4.is_broadcast() {
        return Some("a broadcast");
    }
    find(IpAddr::V4(v4))
}

/// [`V4`] and [`V6`] read once (every connection is checked).
static TABLES: LazyLock<Vec<(IpNet, &'static str)>> = LazyLock::new(|| {
    V4.iter()
        .chain(V6)
        // The tables are constants, each checked by a test.
        .filter_map(|(net, name)| Some((net.parse().ok()?, *name)))
        .collect()
});

fn find(ip: IpAddr) -> Option<&'static str> {
    TABLES
        .iter()
        .find_map(|(net, name)| net.contains(&ip).then_some(*name))
}

/// The IPv4 address an IPv6 address carries: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-translated (`::ffff:0:a.b.c.d`, SIIT),
/// IPv4-compatible (`::a.b.c.d`, deprecated, but some stacks still route
/// it) or NAT64 (`64:ff9b::a.b.c.d`, which a NAT64 gateway forwards to
/// that IPv4 address).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let o = v6.octets();
    let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    match v6.segments() {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => Some(tail),
        // `::` and `::1` are IPv6's own, not IPv4-compatible.
        [0, 0, 0, 0, 0, 0, _, _] if v6 != Ipv6Addr::UNSPECIFIED && v6 != Ipv6Addr::LOCALHOST => {
            Some(tail)
        }
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(ip: &str) -> Option<&'static str> {
        let ip: IpAddr = ip.parse().expect("address");
        Networks::default().check(ip).err().map(|r| r.range)
    }

    #[test]
    fn the_tables_read() {
        for (net, _) in V4.iter().chain(V6) {
            assert!(net.parse::<IpNet>().is_ok(), "{net}");
        }
        assert_eq!(TABLES.len(), V4.len() + V6.len(), "none left out");
    }

    #[test]
    fn public_addresses_pass_and_special_ones_are_refused_by_name() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
        ] {
            assert_eq!(refused(ip), None, "{ip}");
        }
        for (ip, range) in [
            ("127.0.0.1", "a loopback"),
            ("127.255.0.9", "a loopback"),
            ("10.1.2.3", "a private"),
            ("172.31.255.255", "a private"),
            ("192.168.1.1", "a private"),
            ("169.254.169.254", "a link-local (cloud metadata)"),
            ("100.100.100.200", "a shared (carrier-grade NAT)"),
            ("0.0.0.0", "a \"this network\""),
            ("224.0.0.1", "a multicast"),
            ("255.255.255.255", "a broadcast"),
            ("::1", "a loopback"),
            ("::", "an unspecified"),
            ("fe80::1", "a link-local"),
            ("fd00:ec2::254", "a unique-local (private)"),
            ("ff02::1", "a multicast"),
            ("2002:7f00:1::1", "a 6to4"),
            ("2002:808:808::1", "a 6to4"),
            ("2001:0:4136:e378::1", "a Teredo"),
            ("2001:2::1", "an IETF protocol"),
            ("64:ff9b:1::a9fe:a9fe", "a local-use NAT64"),
            ("fec0::1", "a site-local"),
            ("3fff::1", "a documentation"),
        ] {
            assert_eq!(refused(ip), Some(range), "{ip}");
        }
        // Just outside the private ranges.
        assert_eq!(refused("172.32.0.1"), None);
        assert_eq!(refused("11.0.0.1"), None);
    }

    #[test]
    fn ipv6_addresses_that_carry_an_ipv4_address_are_judged_by_it() {
        assert_eq!(refused("::ffff:127.0.0.1"), Some("a loopback"));
        assert_eq!(
            refused("::ffff:169.254.169.254"),
            Some("a link-local (cloud metadata)")
        );
        assert_eq!(refused("::10.0.0.1"), Some("a private"));
        assert_eq!(refused("64:ff9b::a00:1"), Some("a private"));
        assert_eq!(refused("::ffff:0:7f00:1"), Some("a loopback"), "translated");
        assert_eq!(refused("::ffff:8.8.8.8"), None);
        assert_eq!(refused("64:ff9b::808:808"), None);
    }

    #[test]
    fn allowed_networks_open_what_they_name_and_nothing_else() {
        let n = Networks::parse(&["127.0.0.0/8", "fd00::/8", "10.9.9.9"]).expect("networks");
        let ok = |ip: &str| n.check(ip.parse().expect("address")).is_ok();
        assert!(ok("127.0.0.1"));
        assert!(
            ok("::ffff:127.0.0.1"),
            "judged by the IPv4 address it carries"
        );
        assert!(ok("fd00::5"));
        assert!(ok("10.9.9.9"));
        assert!(!ok("10.9.9.8"));
        assert!(!ok("169.254.169.254"));
        assert!(!ok("::1"), "IPv6 loopback is not 127.0.0.0/8");
    }

    #[test]
    fn allowing_an_ipv6_range_opens_no_ipv4_address_written_inside_it() {
        let n = Networks::parse(&["::/0", "64:ff9b::/96"]).expect("networks");
        let ok = |ip: &str| n.check(ip.parse().expect("address")).is_ok();
        assert!(ok("fd00::5"), "IPv6 itself is allowed");
        assert!(ok("fe80::1"));
        for ip in [
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:0:a9fe:a9fe",
            "::10.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!ok(ip), "{ip}");
        }
    }

    #[test]
    fn a_network_that_does_not_read_is_named() {
        assert_eq!(
            Networks::parse(&["10.0.0.0/8", "10.0.0.0/33"]),
            Err(BadNetwork("10.0.0.0/33".to_owned()))
        );
        assert_eq!(
            Networks::parse(&["localhost"]),
            Err(BadNetwork("localhost".to_owned()))
        );
        let e = Networks::default()
            .check("127.0.0.1".parse().expect("address"))
            .expect_err("loopback");
        assert_eq!(
            e.to_string(),
            "127.0.0.1 is a loopback address, which a push may not reach unless `push.allow_networks` allows it"
        );
    }
}
