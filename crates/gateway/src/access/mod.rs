//! Who may use an admin listener ([`AdminAccess`]), checked before any
//! route runs: the gateway's, and `sundial pumpd`'s (metrics and health).
//!
//! - **The name a request is addressed to** ([`known_host`], every route):
//!   an IP address, `localhost`, or a name in `admin_hosts`. A web page
//!   whose name an attacker rebinds to this listener's address (DNS
//!   rebinding) reaches it from the victim's browser as its own origin, with
//!   its own name in `Host`: that name is unknown here, so it gets 421.
//! - **Where a browser sent it from** ([`cross_site`], guarded routes): a
//!   page of another origin may not change anything, nor read tenant data
//!   except by a top-level navigation.
//! - **Who sent it** ([`basic_auth`], guarded routes): the `accounts`,
//!   with failed logins limited per client address ([`logins`]).

use std::{
    net::{Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

use axum::{
    extract::{ConnectInfo, Request, State},
    http::{HeaderMap, Method, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

use crate::api::error::ApiError;

pub mod logins;

/// An admin listener's accounts and names, and the failed logins seen.
#[derive(Debug, Default)]
pub struct AdminAccess {
    /// Basic-auth accounts (user → password); none = no auth.
    accounts: std::collections::BTreeMap<String, String>,
    /// Names answered to besides IP addresses and `localhost`.
    hosts: Vec<String>,
    logins: logins::Logins,
}

impl AdminAccess {
    pub fn new(accounts: std::collections::BTreeMap<String, String>, hosts: Vec<String>) -> Self {
        Self {
            accounts,
            hosts,
            logins: logins::Logins::default(),
        }
    }
}

/// Refuses, with 421, a request addressed to a name that is not this
/// listener's (see the module): the authority of an absolute-form target
/// (`GET http://name/…`), which wins over `Host` (RFC 9112), else `Host`.
/// A request with more than one `Host` is 400; one without it (HTTP/1.0,
/// some scripts; never a browser's) passes.
pub async fn known_host(
    State(state): State<Arc<AdminAccess>>,
    req: Request,
    next: Next,
) -> Response {
    let hosts = req.headers().get_all(header::HOST).iter().count();
    let named = match req.uri().authority() {
        Some(authority) => Some(Ok(authority.as_str())),
        None => req.headers().get(header::HOST).map(|h| h.to_str()),
    };
    match named {
        _ if hosts > 1 => ApiError::bad("more than one Host header").into_response(),
        // No browser leaves it out: a client without one names nothing.
        None => next.run(req).await,
        Some(Ok(host)) if host_is_known(&state.hosts, host) => next.run(req).await,
        Some(host) => {
            let shown: String = host
                .unwrap_or("?")
                .chars()
                .take(100)
                .filter(|c| !c.is_control())
                .collect();
            ApiError::Misdirected(format!(
                "the admin listener does not answer to the name {shown:?}: reach it by IP \
                 address or localhost, or add the name to admin_hosts"
            ))
            .into_response()
        }
    }
}

/// Whether `authority` (`host`, `host:port`, `[v6]` or `[v6]:port`) names
/// this listener: an IP address, `localhost`, or one of `names` (lower
/// case), compared without case.
pub(crate) fn host_is_known(names: &[String], authority: &str) -> bool {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        match rest.split_once(']') {
            Some((v6, port)) if port.is_empty() || port.strip_prefix(':').is_some_and(is_port) => {
                return v6.parse::<Ipv6Addr>().is_ok();
            }
            _ => return false,
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) if is_port(port) => host,
            Some(_) => return false,
            None => authority,
        }
    };
    host.parse::<Ipv4Addr>().is_ok()
        || host.eq_ignore_ascii_case("localhost")
        || names.iter().any(|n| n.eq_ignore_ascii_case(host))
}

/// One to five digits.
fn is_port(digits: &str) -> bool {
    (1..=5).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
}

/// The guarded routes: refuses a cross-site request with 403, then asks
/// for an account's credentials when accounts are configured. An address
/// with too many failed logins for a user gets 429 until its window ends
/// ([`logins`]).
pub async fn basic_auth(
    State(state): State<Arc<AdminAccess>>,
    req: Request,
    next: Next,
) -> Response {
    if cross_site(&state.hosts, req.method(), req.uri().path(), req.headers()) {
        return ApiError::Forbidden("cross-site request refused".to_owned()).into_response();
    }
    if state.accounts.is_empty() {
        return next.run(req).await;
    }
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    // A request without credentials guesses nothing (a browser asks first
    // without them): it is neither locked out nor counted.
    if let Some((user, password)) = credentials(&req) {
        if let Some(left) = peer.and_then(|ip| state.logins.locked_for(ip, &user)) {
            metrics::counter!("sundial_admin_logins_refused_total").increment(1);
            return locked_out(left);
        }
        if password_matches(state.accounts.get(&user).map(String::as_str), &password) {
            return next.run(req).await;
        }
        metrics::counter!("sundial_admin_login_failures_total").increment(1);
        if let Some(ip) = peer {
            state.logins.failed(ip, &user);
        }
    }
    let mut resp = ApiError::Unauthorized("unauthorized").into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Basic realm=\"sundial\""),
    );
    resp
}

/// 429 for an address whose failed logins used up its window.
fn locked_out(left: std::time::Duration) -> Response {
    let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    let error = format!(
        "too many failed logins from this address (at most {} a minute): retry in {secs} s",
        logins::MAX_FAILURES
    );
    let body = axum::Json(crate::api::answers::ErrorBody { error: &error });
    let mut resp = (axum::http::StatusCode::TOO_MANY_REQUESTS, body).into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, secs.max(1).into());
    resp
}

/// Whether a browser sent this from a page of another origin. A browser
/// that holds the admin password (the dashboard's) sends it along with a
/// form, `fetch`, image or script of any page: such a change could mint a
/// token, and such a read could run an export. Browsers mark them with
/// `Sec-Fetch-Site`, or with an `Origin` that is not this listener's (a
/// name of [`host_is_known`] and the request's own `Host`). Only a
/// top-level navigation to the dashboard's page (a link followed) passes.
/// The CLI and curl send neither header.
pub(crate) fn cross_site(
    names: &[String],
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> bool {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, host)| host);
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let ours = origin_host.is_some_and(|o| Some(o) == host && host_is_known(names, o));
        if !ours {
            return true;
        }
    }
    let Some(site) = headers.get("sec-fetch-site") else {
        return false;
    };
    if matches!(site.as_bytes(), b"same-origin" | b"none") {
        return false;
    }
    // Only the dashboard's page (and the addresses that lead to it) may be
    // opened from elsewhere: an export or
    // `/info` opened in a window would run with the operator's password.
    let dashboard = matches!(path, "/" | "/dashboard" | "/dashboard/");
    let read = dashboard && matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    let navigation = headers
        .get("sec-fetch-mode")
        .is_some_and(|m| m.as_bytes() == b"navigate")
        && headers
            .get("sec-fetch-dest")
            .is_some_and(|d| d.as_bytes() == b"document");
    !(read && navigation)
}

/// The basic-auth user and password a request carries.
fn credentials(req: &Request) -> Option<(String, String)> {
    use headers::{Authorization, Header, authorization::Basic};
    // The scheme is case-insensitive (RFC 9110); so is this decoder.
    let mut values = req.headers().get_all(header::AUTHORIZATION).iter();
    let Authorization(creds) = Authorization::<Basic>::decode(&mut values).ok()?;
    Some((creds.username().to_owned(), creds.password().to_owned()))
}

/// Compares the SHA-256 digests in constant time, so that neither the
/// password's length nor its first wrong byte shows in the time taken, and
/// takes as long for an unknown user as for a known one.
fn password_matches(expected: Option<&str>, given: &str) -> bool {
    use sha2::{Digest, Sha256};
    use subtle::ConstantTimeEq;
    let digest = |s: &str| Sha256::digest(s.as_bytes());
    let (known, expected) = match expected {
        Some(e) => (true, digest(e)),
        None => (false, digest(given)),
    };
    let same: bool = expected.as_slice().ct_eq(digest(given).as_slice()).into();
    known && same
}

#[cfg(test)]
mod tests;
