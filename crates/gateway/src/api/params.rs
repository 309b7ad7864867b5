//! Query parameters, parsed as lmstfy parses them (unsigned integers, its
//! error texts), with its defaults from the configured limits.

use std::borrow::Cow;

use axum::http::Uri;
use sundial_core::{Limits, job::MAX_CONSUME_COUNT};

use super::error::ApiError;

/// The longest `delay_ms` or `ttr_ms`: what lmstfy's seconds allow
/// (`u32::MAX` seconds).
const MAX_MS: u64 = u32::MAX as u64 * 1000;

/// The query string of a request. A lookup decodes the few short pairs a
/// request has, which costs less than building a map of them; a name given
/// twice counts its last value.
#[derive(Debug, Clone, Default)]
pub struct Params {
    /// Cloning a `Uri` shares its bytes.
    uri: Uri,
}

impl Params {
    pub fn new(uri: &Uri) -> Self {
        Self { uri: uri.clone() }
    }

    /// The decoded value of `name`.
    pub fn get(&self, name: &str) -> Option<Cow<'_, str>> {
        let query = self.uri.query()?;
        form_urlencoded::parse(query.as_bytes())
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v)
            .last()
    }

    /// Every decoded value of `name`, in order (a name given many times).
    pub fn all(&self, name: &str) -> Vec<Cow<'_, str>> {
        let Some(query) = self.uri.query() else {
            return Vec::new();
        };
        form_urlencoded::parse(query.as_bytes())
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v)
            .collect()
    }

    /// An unsigned parameter, `default` when absent, else 400 `invalid
    /// <name>` unless it parses (an empty value does not, as in lmstfy).
    pub(crate) fn uint<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, ApiError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| ApiError::bad(format!("invalid {name}"))),
        }
    }
}

/// What a publish asks for. `delay` and `ttl` are lmstfy's seconds;
/// `delay_ms`, Sundial's extension, overrides `delay` when given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PublishParams {
    pub(super) delay_ms: u64,
    pub(super) ttl: u32,
    pub(super) tries: u16,
    /// Sundial's extension: 0 (the default) to 255, higher consumed first.
    pub(super) priority: u8,
}

impl PublishParams {
    pub(super) fn parse(p: &Params, limits: &Limits) -> Result<Self, ApiError> {
        let delay: u32 = p.uint("delay", limits.default_delay_secs)?;
        let delay_ms = p.uint("delay_ms", u64::from(delay) * 1000)?;
        if delay_ms > MAX_MS {
            return Err(ApiError::bad("invalid delay_ms"));
        }
        let ttl = p.uint("ttl", limits.default_ttl_secs)?;
        let tries = p.uint("tries", limits.default_tries)?;
        if tries == 0 {
            return Err(ApiError::bad("tries shouldn't be zero"));
        }
        if ttl > 0 && u64::from(ttl) * 1000 < delay_ms {
            return Err(ApiError::bad("ttl is shorter than delay"));
        }
        let priority = p.uint("priority", 0)?;
        Ok(Self {
            delay_ms,
            ttl,
            tries,
            priority,
        })
    }

    pub(super) fn schedule(&self) -> sundial_core::Schedule {
        sundial_core::Schedule {
            delay_ms: self.delay_ms,
            ttl_ms: u64::from(self.ttl) * 1000,
            tries: self.tries,
            priority: self.priority,
            policy: None,
        }
    }
}

/// What a consume asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ConsumeParams {
    pub(super) ttr_ms: u64,
    /// Already capped to the configured maximum.
    pub(super) timeout_secs: u32,
    pub(super) count: u32,
}

impl ConsumeParams {
    pub(super) fn parse(p: &Params, limits: &Limits) -> Result<Self, ApiError> {
        let ttr: u32 = p.uint("ttr", limits.default_ttr_secs)?;
        let ttr_ms = p.uint("ttr_ms", u64::from(ttr) * 1000)?;
        if ttr_ms > MAX_MS {
            return Err(ApiError::bad("invalid ttr_ms"));
        }
        let timeout: u32 = p.uint("timeout", limits.default_timeout_secs)?;
        let count: u32 = p.uint("count", 1)?;
        if count == 0 || count > MAX_CONSUME_COUNT {
            return Err(ApiError::bad("invalid count"));
        }
        Ok(Self {
            ttr_ms,
            timeout_secs: timeout.min(limits.max_timeout_secs),
            count,
        })
    }
}

/// `delivery`, the delivery a worker's ack, touch or release is fenced on
/// (Sundial's extension): `None` when absent; 400 `invalid delivery` unless
/// it is a delivery number (1 or more).
pub(super) fn delivery(p: &Params) -> Result<Option<u32>, ApiError> {
    match p.get("delivery") {
        None => Ok(None),
        Some(_) => match p.uint::<u32>("delivery", 0)? {
            0 => Err(ApiError::bad("invalid delivery")),
            n => Ok(Some(n)),
        },
    }
}

/// The TTR a touch sets: `ttr` seconds (default `limits.default_ttr`), or
/// `ttr_ms`, which overrides it; from 1 ms to `limits.max_ttr`.
pub(super) fn touch_ttr_ms(p: &Params, limits: &Limits) -> Result<u64, ApiError> {
    let ttr: u32 = p.uint("ttr", limits.default_ttr_secs)?;
    let ttr_ms = p.uint("ttr_ms", u64::from(ttr) * 1000)?;
    let max = u64::from(limits.max_ttr_secs) * 1000;
    if ttr_ms == 0 {
        let name = if p.get("ttr_ms").is_some() {
            "ttr_ms"
        } else {
            "ttr"
        };
        return Err(ApiError::bad(format!("invalid {name}")));
    }
    if ttr_ms > max {
        return Err(ApiError::bad(format!(
            "ttr over limits.max_ttr ({} s)",
            limits.max_ttr_secs
        )));
    }
    Ok(ttr_ms)
}

/// The longest reason a release may keep with its job, in bytes.
pub(super) const MAX_REASON_BYTES: usize = 1024;

/// What a release asks for (Sundial's extension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ReleaseParams {
    /// `delay` seconds or `delay_ms`; `None` when neither is given (the
    /// queue's retry policy decides).
    pub(super) delay_ms: Option<u64>,
    /// `spend_try`: `true` (the default) or `false`.
    pub(super) spend_try: bool,
    /// `reason`, at most [`MAX_REASON_BYTES`]; empty when absent.
    pub(super) reason: String,
}

impl ReleaseParams {
    pub(super) fn parse(p: &Params) -> Result<Self, ApiError> {
        let delay_ms = match (p.get("delay"), p.get("delay_ms")) {
            (None, None) => None,
            (_, Some(_)) => Some(p.uint::<u64>("delay_ms", 0)?),
            (Some(_), None) => Some(u64::from(p.uint::<u32>("delay", 0)?) * 1000),
        };
        if delay_ms.is_some_and(|d| d > MAX_MS) {
            return Err(ApiError::bad("invalid delay_ms"));
        }
        let spend_try = match p.get("spend_try").as_deref() {
            None | Some("true") | Some("1") => true,
            Some("false") | Some("0") => false,
            Some(_) => return Err(ApiError::bad("invalid spend_try: true or false")),
        };
        let reason = p.get("reason").unwrap_or_default().into_owned();
        if reason.len() > MAX_REASON_BYTES {
            return Err(ApiError::bad(format!(
                "reason too long: at most {MAX_REASON_BYTES} bytes"
            )));
        }
        Ok(Self {
            delay_ms,
            spend_try,
            reason,
        })
    }
}

/// `limit` of the dead-letter calls: default 1, at least 1.
pub(super) fn limit(p: &Params) -> Result<u64, ApiError> {
    match p.uint("limit", 1u64)? {
        0 => Err(ApiError::bad("invalid limit")),
        n => Ok(n),
    }
}

/// `ttl` of a respawn: the configured default when absent, 0 = never expire.
pub(super) fn respawn_ttl_ms(p: &Params, limits: &Limits) -> Result<u64, ApiError> {
    Ok(u64::from(p.uint::<u32>("ttl", limits.default_ttl_secs)?) * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        let query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish();
        Params::new(&format!("/?{query}").parse().expect("uri"))
    }

    #[test]
    fn a_touch_ttr_is_bounded_by_the_configured_maximum() {
        let l = Limits::default();
        let ttr = |q: &[(&str, &str)]| touch_ttr_ms(&params(q), &l);
        assert_eq!(ttr(&[]).expect("default"), 120_000);
        assert_eq!(ttr(&[("ttr", "30")]).expect("30 s"), 30_000);
        assert_eq!(ttr(&[("ttr", "30"), ("ttr_ms", "250")]).expect("ms"), 250);
        assert_eq!(ttr(&[("ttr", "43200")]).expect("the maximum"), 43_200_000);
        let err = |q: &[(&str, &str)]| msg(ttr(q).expect_err("refused"));
        assert_eq!(
            err(&[("ttr", "43201")]),
            "ttr over limits.max_ttr (43200 s)"
        );
        assert_eq!(
            err(&[("ttr_ms", "43200001")]),
            "ttr over limits.max_ttr (43200 s)"
        );
        assert_eq!(err(&[("ttr", "0")]), "invalid ttr");
        assert_eq!(err(&[("ttr_ms", "0")]), "invalid ttr_ms");
        assert_eq!(err(&[("ttr", "-5")]), "invalid ttr");
    }

    #[test]
    fn a_release_reads_its_delay_try_and_reason() {
        let p = ReleaseParams::parse(&params(&[])).expect("defaults");
        assert_eq!(
            p,
            ReleaseParams {
                delay_ms: None,
                spend_try: true,
                reason: String::new()
            }
        );
        let p = ReleaseParams::parse(&params(&[
            ("delay", "3"),
            ("spend_try", "false"),
            ("reason", "db down"),
        ]))
        .expect("given");
        assert_eq!(
            (p.delay_ms, p.spend_try, p.reason.as_str()),
            (Some(3000), false, "db down")
        );
        let p = ReleaseParams::parse(&params(&[("delay", "3"), ("delay_ms", "5")])).expect("ms");
        assert_eq!(p.delay_ms, Some(5));
        let p = ReleaseParams::parse(&params(&[("delay", "0")])).expect("zero");
        assert_eq!(p.delay_ms, Some(0));
        let err = |q: &[(&str, &str)]| msg(ReleaseParams::parse(&params(q)).expect_err("bad"));
        assert_eq!(err(&[("delay", "-1")]), "invalid delay");
        assert_eq!(err(&[("delay_ms", "x")]), "invalid delay_ms");
        assert_eq!(
            err(&[("spend_try", "no")]),
            "invalid spend_try: true or false"
        );
        let long = "x".repeat(MAX_REASON_BYTES + 1);
        assert_eq!(
            err(&[("reason", &long)]),
            "reason too long: at most 1024 bytes"
        );
        let at_max = "é".repeat(MAX_REASON_BYTES / 2);
        assert!(ReleaseParams::parse(&params(&[("reason", &at_max)])).is_ok());
    }

    #[test]
    fn a_delivery_is_a_number_from_one() {
        assert_eq!(delivery(&params(&[])).expect("absent"), None);
        assert_eq!(delivery(&params(&[("delivery", "7")])).expect("7"), Some(7));
        for bad in ["0", "-1", "", "x", "4294967296"] {
            let e = delivery(&params(&[("delivery", bad)])).expect_err(bad);
            assert_eq!(msg(e), "invalid delivery", "{bad}");
        }
    }

    #[test]
    fn values_are_decoded_and_the_last_one_counts() {
        let p = Params::new(&"/?a=1&b=x%20y+z&a=2&c".parse().expect("uri"));
        assert_eq!(p.get("a").as_deref(), Some("2"));
        assert_eq!(p.get("b").as_deref(), Some("x y z"));
        assert_eq!(p.get("c").as_deref(), Some(""));
        assert_eq!(p.get("d"), None);
        assert_eq!(Params::new(&"/".parse().expect("uri")).get("a"), None);
    }

    fn msg(e: ApiError) -> String {
        e.to_string()
    }

    #[test]
    fn publish_defaults_and_errors_match_lmstfy() {
        let l = Limits::default();
        let p = PublishParams::parse(&params(&[]), &l).expect("defaults");
        assert_eq!(
            p,
            PublishParams {
                delay_ms: 0,
                ttl: 86_400,
                tries: 1,
                priority: 0,
            }
        );
        let err =
            |q: &[(&str, &str)]| msg(PublishParams::parse(&params(q), &l).expect_err("invalid"));
        assert_eq!(err(&[("delay", "-1")]), "invalid delay");
        assert_eq!(err(&[("delay", "")]), "invalid delay", "empty, as lmstfy");
        assert_eq!(err(&[("tries", "")]), "invalid tries");
        assert_eq!(err(&[("delay", "4294967296")]), "invalid delay");
        assert_eq!(err(&[("ttl", "x")]), "invalid ttl");
        assert_eq!(err(&[("tries", "65536")]), "invalid tries");
        assert_eq!(err(&[("tries", "0")]), "tries shouldn't be zero");
        assert_eq!(err(&[("priority", "256")]), "invalid priority");
        assert_eq!(err(&[("priority", "-1")]), "invalid priority");
        assert_eq!(err(&[("priority", "high")]), "invalid priority");
        let top = PublishParams::parse(&params(&[("priority", "255")]), &l).expect("255");
        assert_eq!(top.schedule().priority, 255);
        assert_eq!(
            err(&[("delay", "10"), ("ttl", "5")]),
            "ttl is shorter than delay"
        );
        let forever =
            PublishParams::parse(&params(&[("delay", "10"), ("ttl", "0")]), &l).expect("ttl 0");
        assert_eq!(forever.ttl, 0);
    }

    #[test]
    fn milliseconds_override_seconds() {
        let l = Limits::default();
        let p =
            PublishParams::parse(&params(&[("delay", "5"), ("delay_ms", "250")]), &l).expect("ok");
        assert_eq!(p.delay_ms, 250);
        assert_eq!(
            PublishParams::parse(&params(&[("delay", "2")]), &l)
                .expect("ok")
                .delay_ms,
            2_000
        );
        let err = PublishParams::parse(&params(&[("delay_ms", "1500"), ("ttl", "1")]), &l)
            .expect_err("ttl");
        assert_eq!(msg(err), "ttl is shorter than delay");
        let err = PublishParams::parse(&params(&[("delay_ms", "x")]), &l).expect_err("bad");
        assert_eq!(msg(err), "invalid delay_ms");
        let c = ConsumeParams::parse(&params(&[("ttr", "9"), ("ttr_ms", "150")]), &l).expect("ok");
        assert_eq!(c.ttr_ms, 150);
        let err = ConsumeParams::parse(&params(&[("ttr_ms", "-1")]), &l).expect_err("bad");
        assert_eq!(msg(err), "invalid ttr_ms");
    }

    #[test]
    fn consume_caps_timeout_and_checks_count() {
        let l = Limits::default();
        let c = ConsumeParams::parse(&params(&[("timeout", "100000")]), &l).expect("ok");
        assert_eq!(c.timeout_secs, 600);
        assert_eq!(c.ttr_ms, 120_000);
        let err =
            |q: &[(&str, &str)]| msg(ConsumeParams::parse(&params(q), &l).expect_err("invalid"));
        assert_eq!(err(&[("count", "0")]), "invalid count");
        assert_eq!(err(&[("count", "101")]), "invalid count");
        assert_eq!(err(&[("ttr", "-5")]), "invalid ttr");
        assert_eq!(err(&[("timeout", "1.5")]), "invalid timeout");
    }

    #[test]
    fn dead_letter_limit() {
        assert_eq!(limit(&params(&[])).expect("default"), 1);
        assert_eq!(
            msg(limit(&params(&[("limit", "0")])).expect_err("zero")),
            "invalid limit"
        );
    }
}
