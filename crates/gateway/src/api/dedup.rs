//! Idempotency keys of a publish (Sundial's extension): the
//! `Idempotency-Key` header or the `dedup` parameter, and how long a key
//! holds (`dedup_ttl`, `dedup_mode`). See `sundial_core::KeyMode`.

use axum::http::HeaderMap;
use sundial_core::{KeyMode, Keys, check_key};

use super::{error::ApiError, params::Params};

/// The longest window of a key, `dedup_ttl`: 30 days.
pub(super) const MAX_DEDUP_TTL_SECS: u64 = sundial_core::MAX_KEY_WINDOW_SECS;

/// The header that carries a publish's key.
const HEADER: &str = "idempotency-key";

/// How the keys of this request hold: `dedup_ttl=S` (a window of S
/// seconds), `dedup_mode=debounce`, or until the job is done (the
/// default, also `dedup_mode=until_done`).
fn mode(p: &Params) -> Result<Option<KeyMode>, ApiError> {
    let ttl = match p.get("dedup_ttl") {
        None => None,
        Some(v) => match v.parse::<u64>() {
            Ok(s) if (1..=MAX_DEDUP_TTL_SECS).contains(&s) => Some(s),
            _ => return Err(ApiError::bad("invalid dedup_ttl")),
        },
    };
    let debounce = match p.get("dedup_mode").as_deref() {
        None | Some("until_done") => false,
        Some("debounce") => true,
        Some(_) => return Err(ApiError::bad("invalid dedup_mode: until_done or debounce")),
    };
    Ok(match (ttl, debounce) {
        (Some(_), true) => return Err(ApiError::bad("dedup_ttl does not go with debounce")),
        (Some(s), false) => Some(KeyMode::Window(s * 1000)),
        (None, true) => Some(KeyMode::Debounce),
        (None, false) => p.get("dedup_mode").map(|_| KeyMode::UntilDone),
    })
}

/// `key` checked: 400 `invalid dedup: <why>` unless it may be one. A
/// parameter's bytes that are not UTF-8 decode to U+FFFD, which would make
/// different keys one: a key holding it is refused.
fn checked(key: String) -> Result<String, ApiError> {
    if key.contains('\u{FFFD}') {
        return Err(not_utf8());
    }
    check_key(&key).map_err(|why| ApiError::bad(format!("invalid dedup: {why}")))?;
    Ok(key)
}

/// The refusal of a key that is not UTF-8.
fn not_utf8() -> ApiError {
    ApiError::bad("invalid dedup: not UTF-8")
}

/// The request's header key, if any (a value that is not UTF-8 is
/// refused).
fn header_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match headers.get(HEADER) {
        None => Ok(None),
        Some(v) => std::str::from_utf8(v.as_bytes())
            .map(|s| Some(s.to_owned()))
            .map_err(|_| not_utf8()),
    }
}

/// The key of a publish of one job: `Idempotency-Key` or `dedup` (both:
/// they must agree). `None` without a key; 400 for `dedup_ttl` or
/// `dedup_mode` without one.
pub(super) fn single(p: &Params, headers: &HeaderMap) -> Result<Option<Keys>, ApiError> {
    let mode = mode(p)?;
    if p.all("dedup").len() > 1 {
        return Err(ApiError::bad("dedup given more than once"));
    }
    let key = match (header_key(headers)?, p.get("dedup")) {
        (Some(h), Some(d)) if h != d => {
            return Err(ApiError::bad("Idempotency-Key and dedup differ"));
        }
        (Some(h), _) => h,
        (None, Some(d)) => d.into_owned(),
        (None, None) => return without_key(mode),
    };
    Ok(Some(Keys {
        mode: mode.unwrap_or(KeyMode::UntilDone),
        keys: vec![checked(key)?],
    }))
}

/// The keys of a bulk of `n` jobs: `dedup` given once per element, in
/// order; or `Idempotency-Key: K`, which gives element `i` (from 0) the key
/// `K/i`, so that the same bulk sent again stores nothing twice.
pub(super) fn bulk(p: &Params, headers: &HeaderMap, n: usize) -> Result<Option<Keys>, ApiError> {
    let mode = mode(p)?;
    let listed = p.all("dedup");
    let keys: Vec<String> = match (header_key(headers)?, listed.is_empty()) {
        (Some(_), false) => {
            return Err(ApiError::bad(
                "give a bulk's keys as Idempotency-Key or as dedup, not both",
            ));
        }
        (Some(h), true) => {
            checked(h.clone())?;
            (0..n).map(|i| format!("{h}/{i}")).collect()
        }
        (None, false) if listed.len() != n => {
            return Err(ApiError::bad("dedup must be given once per job"));
        }
        (None, false) => listed.into_iter().map(|k| k.into_owned()).collect(),
        (None, true) => return without_key(mode),
    };
    let keys = keys.into_iter().map(checked).collect::<Result<_, _>>()?;
    Ok(Some(Keys {
        mode: mode.unwrap_or(KeyMode::UntilDone),
        keys,
    }))
}

/// No key: fine unless the request asked how keys should hold.
fn without_key(mode: Option<KeyMode>) -> Result<Option<Keys>, ApiError> {
    match mode {
        None => Ok(None),
        Some(_) => Err(ApiError::bad(
            "dedup_ttl and dedup_mode need a key (Idempotency-Key or dedup)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Uri;

    fn params(q: &str) -> Params {
        Params::new(&format!("/api/ns/q?{q}").parse::<Uri>().expect("uri"))
    }

    fn err(r: Result<Option<Keys>, ApiError>) -> String {
        r.expect_err("refused").to_string()
    }

    #[test]
    fn a_single_key_from_the_header_or_the_parameter() {
        let mut h = HeaderMap::new();
        assert_eq!(single(&params(""), &h).expect("none"), None);
        let k = single(&params("dedup=a&dedup_ttl=60"), &h).expect("key");
        assert_eq!(
            k,
            Some(Keys {
                mode: KeyMode::Window(60_000),
                keys: vec!["a".into()]
            })
        );
        h.insert(HEADER, "b".parse().expect("value"));
        let k = single(&params("dedup_mode=debounce"), &h).expect("key");
        assert_eq!(
            k.map(|k| (k.mode, k.keys)),
            Some((KeyMode::Debounce, vec!["b".into()]))
        );
        assert_eq!(
            err(single(&params("dedup=c"), &h)),
            "Idempotency-Key and dedup differ"
        );
        assert!(single(&params("dedup=b"), &h).is_ok(), "the same key twice");
        assert_eq!(
            err(single(&params("dedup=b&dedup=c"), &HeaderMap::new())),
            "dedup given more than once"
        );
    }

    #[test]
    fn keys_that_are_not_utf8_are_refused_and_utf8_headers_taken() {
        let h = HeaderMap::new();
        // Two different bytes that a lossy decoding would make one key.
        assert_eq!(
            err(single(&params("dedup=%FF"), &h)),
            "invalid dedup: not UTF-8"
        );
        assert_eq!(
            err(single(&params("dedup=%FE"), &h)),
            "invalid dedup: not UTF-8"
        );
        let mut h = HeaderMap::new();
        h.insert(
            HEADER,
            axum::http::HeaderValue::from_bytes("ключ".as_bytes()).expect("value"),
        );
        let k = single(&params(""), &h).expect("key");
        assert_eq!(k.map(|k| k.keys), Some(vec!["ключ".into()]));
        h.insert(
            HEADER,
            axum::http::HeaderValue::from_bytes(b"\xff").expect("value"),
        );
        assert_eq!(err(single(&params(""), &h)), "invalid dedup: not UTF-8");
    }

    #[test]
    fn bad_keys_and_modes_are_refused() {
        let h = HeaderMap::new();
        assert_eq!(err(single(&params("dedup="), &h)), "invalid dedup: empty");
        let long = "k".repeat(257);
        assert_eq!(
            err(single(&params(&format!("dedup={long}")), &h)),
            "invalid dedup: longer than 256 bytes"
        );
        assert_eq!(
            err(single(&params("dedup=a%0Ab"), &h)),
            "invalid dedup: contains a control character"
        );
        assert_eq!(
            err(single(&params("dedup=a&dedup_ttl=0"), &h)),
            "invalid dedup_ttl"
        );
        assert_eq!(
            err(single(&params("dedup=a&dedup_ttl=2592001"), &h)),
            "invalid dedup_ttl"
        );
        assert_eq!(
            err(single(&params("dedup=a&dedup_mode=sometimes"), &h)),
            "invalid dedup_mode: until_done or debounce"
        );
        assert_eq!(
            err(single(
                &params("dedup=a&dedup_ttl=5&dedup_mode=debounce"),
                &h
            )),
            "dedup_ttl does not go with debounce"
        );
        assert_eq!(
            err(single(&params("dedup_ttl=5"), &h)),
            "dedup_ttl and dedup_mode need a key (Idempotency-Key or dedup)"
        );
    }

    #[test]
    fn a_bulks_keys_one_per_job_or_from_the_header() {
        let mut h = HeaderMap::new();
        let k = bulk(&params("dedup=a&dedup=b"), &h, 2).expect("keys");
        assert_eq!(k.map(|k| k.keys), Some(vec!["a".into(), "b".into()]));
        assert_eq!(
            err(bulk(&params("dedup=a"), &h, 2)),
            "dedup must be given once per job"
        );
        assert_eq!(
            err(bulk(&params("dedup=a&dedup="), &h, 2)),
            "invalid dedup: empty"
        );
        h.insert(HEADER, "batch-7".parse().expect("value"));
        let k = bulk(&params(""), &h, 3).expect("keys");
        assert_eq!(
            k.map(|k| k.keys),
            Some(vec![
                "batch-7/0".into(),
                "batch-7/1".into(),
                "batch-7/2".into()
            ])
        );
        assert!(bulk(&params("dedup=a&dedup=b"), &h, 2).is_err(), "not both");
    }
}
