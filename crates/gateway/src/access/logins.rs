//! Failed admin logins, counted per client address and user name, so that
//! a password cannot be guessed at the speed of the network: after
//! [`MAX_FAILURES`] failures within a [`WINDOW`], that user's logins from
//! that address are refused (429, even with the right password) until the
//! window ends. Other users, and the same user from elsewhere, go on.
//!
//! Counted in this gateway's memory, per gateway: an attacker that reaches
//! every gateway gets `MAX_FAILURES` per gateway per window. An IPv6
//! client counts by its /64, which one host usually holds whole. At most
//! [`MAX_ADDRESSES`] (address, user) pairs are tracked; past that, windows
//! that ended are dropped, then the oldest.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::Mutex,
    time::{Duration, Instant},
};

/// Failures an address may have in a window.
pub const MAX_FAILURES: u32 = 10;
/// How long a window lasts from an address's first failure.
pub const WINDOW: Duration = Duration::from_secs(60);
/// (address, user) pairs tracked at once.
const MAX_ADDRESSES: usize = 10_000;

/// Failures by (address, user): when its window began, and how many.
#[derive(Debug, Default)]
pub struct Logins {
    failures: Mutex<HashMap<(IpAddr, String), (Instant, u32)>>,
}

impl Logins {
    /// How long until `user` may try again from `addr`, if it has used up
    /// its window there.
    pub fn locked_for(&self, addr: IpAddr, user: &str) -> Option<Duration> {
        let now = Instant::now();
        let failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let (since, n) = failures.get(&key(addr, user))?;
        let left = WINDOW.checked_sub(now.duration_since(*since))?;
        (*n >= MAX_FAILURES && !left.is_zero()).then_some(left)
    }

    /// Counts a failed login of `user` from `addr`.
    pub fn failed(&self, addr: IpAddr, user: &str) {
        let now = Instant::now();
        let key = key(addr, user);
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= MAX_ADDRESSES && !failures.contains_key(&key) {
            failures.retain(|_, (since, _)| now.duration_since(*since) < WINDOW);
            if failures.len() >= MAX_ADDRESSES
                && let Some(oldest) = failures
                    .iter()
                    .min_by_key(|(_, (s, _))| *s)
                    .map(|(k, _)| k.clone())
            {
                failures.remove(&oldest);
            }
        }
        let entry = failures.entry(key).or_insert((now, 0));
        if now.duration_since(entry.0) >= WINDOW {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

/// What failures count under: the address (an IPv6 one's /64), and the
/// user's first 64 characters (so that long names cannot grow the map).
fn key(addr: IpAddr, user: &str) -> (IpAddr, String) {
    (counted(addr), user.chars().take(64).collect())
}

/// The address failures count under: an IPv6 address's /64.
fn counted(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_locked_at_an_address_after_its_failures_and_others_are_not() {
        let logins = Logins::default();
        let a: IpAddr = "192.0.2.1".parse().expect("ip");
        let b: IpAddr = "192.0.2.2".parse().expect("ip");
        for _ in 0..MAX_FAILURES - 1 {
            logins.failed(a, "ops");
        }
        assert_eq!(logins.locked_for(a, "ops"), None);
        logins.failed(a, "ops");
        let left = logins.locked_for(a, "ops").expect("locked");
        assert_eq!(logins.locked_for(a, "ci"), None, "another user");
        assert!(left <= WINDOW && left > WINDOW - Duration::from_secs(5));
        assert_eq!(logins.locked_for(b, "ops"), None);
    }

    #[test]
    fn an_ipv6_host_counts_by_its_slash_64_and_a_mapped_v4_as_v4() {
        let logins = Logins::default();
        for i in 0..MAX_FAILURES {
            let addr: IpAddr = format!("2001:db8:1:2::{:x}", i + 1).parse().expect("ip");
            logins.failed(addr, "ops");
        }
        let same_64: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("ip");
        let other_64: IpAddr = "2001:db8:1:3::1".parse().expect("ip");
        assert!(logins.locked_for(same_64, "ops").is_some());
        assert_eq!(logins.locked_for(other_64, "ops"), None);
        let v4: IpAddr = "192.0.2.7".parse().expect("ip");
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().expect("ip");
        for _ in 0..MAX_FAILURES {
            logins.failed(mapped, "ops");
        }
        assert!(logins.locked_for(v4, "ops").is_some());
    }

    #[test]
    fn tracked_addresses_stay_bounded() {
        let logins = Logins::default();
        for i in 0..(MAX_ADDRESSES as u32 + 50) {
            logins.failed(IpAddr::from(i.to_be_bytes()), "ops");
        }
        let n = logins.failures.lock().expect("lock").len();
        assert_eq!(n, MAX_ADDRESSES);
    }
}
