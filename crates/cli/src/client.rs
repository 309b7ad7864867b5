//! One HTTP client for both listeners, and how a failed call becomes a
//! message and an exit code a shell user can act on.

use std::{fmt, time::Duration};

use clap::Args;
use reqwest::Method;
use serde_json::Value;

/// Exit codes (also in the README and `sundial --help`'s epilog).
pub mod exit {
    /// Done.
    pub const OK: u8 = 0;
    /// Refused as asked (bad input, a conflict), or an unexpected failure.
    pub const FAILED: u8 = 1;
    /// Bad command line (clap's own code).
    pub const USAGE: u8 = 2;
    /// Not found: the token, pool, queue or job; or no job to consume.
    pub const NOT_FOUND: u8 = 3;
    /// Not allowed: admin credentials, or the token or its scope.
    pub const DENIED: u8 = 4;
    /// Sundial or its Redis unreachable, or a rate limit: try again later.
    pub const UNAVAILABLE: u8 = 5;
}

/// Where Sundial is and who is asking: every operator command takes these.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection")]
pub struct Global {
    /// The admin API's base URL.
    #[arg(
        long,
        global = true,
        env = "SUNDIAL_ADMIN_URL",
        default_value = "http://127.0.0.1:7778"
    )]
    pub admin: String,
    /// The job API's base URL (publish, consume, peek, destroy).
    #[arg(
        long,
        global = true,
        env = "SUNDIAL_API_URL",
        default_value = "http://127.0.0.1:7777"
    )]
    pub api: String,
    /// Admin user, when the gateway has `accounts`.
    #[arg(long, global = true, env = "SUNDIAL_ADMIN_USER")]
    pub user: Option<String>,
    /// Admin password (prefer the environment variable: a command line is
    /// visible to other users of the machine).
    #[arg(
        long,
        global = true,
        env = "SUNDIAL_ADMIN_PASSWORD",
        hide_env_values = true
    )]
    pub password: Option<String>,
    /// A tenant token, for the job API.
    #[arg(long, global = true, env = "SUNDIAL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print Sundial's JSON answers instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// How long one request may take, in seconds (a consume waits its
    /// `--timeout` on top).
    #[arg(long, global = true, default_value_t = 30)]
    pub request_timeout: u64,
}

/// Which listener a call goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listener {
    Admin,
    Api,
}

/// Why a command failed, and its exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

pub(crate) type Outcome<T = ()> = Result<T, Failure>;

/// A successful answer's body.
#[derive(Debug)]
pub(crate) struct Reply {
    pub json: Value,
}

#[derive(Debug)]
pub(crate) struct Client {
    http: reqwest::Client,
    pub global: Global,
}

/// A JSON body's content type.
pub(crate) const JSON: &str = "application/json";
/// A form body's content type (fields that must stay out of the URL).
pub(crate) const FORM: &str = "application/x-www-form-urlencoded";

/// A token named in a path: by its id, never the secret, which a proxy's
/// access log would keep. The id is what the admin API shows (the first
/// 16 hex digits of the secret's SHA-256, with the token's `pool:`
/// prefix); one given as an id is sent as it is.
pub(crate) fn token_seg(token: &str) -> String {
    use sha2::{Digest, Sha256};
    let (prefix, secret) = match token.split_once(':') {
        Some((pool, secret)) => (format!("{pool}:"), secret),
        None => (String::new(), token),
    };
    let is_id = secret.len() == 16
        && secret
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if is_id {
        return seg(token);
    }
    let digest = format!("{:x}", Sha256::digest(secret.as_bytes()));
    seg(&format!("{prefix}{}", &digest[..16]))
}

/// Encodes one path segment (a namespace, queue, or token id).
pub(crate) fn seg(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

impl Client {
    pub(crate) fn new(global: Global) -> Outcome<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(global.request_timeout.max(1)))
            .build()
            .map_err(|e| Failure::new(exit::FAILED, format!("cannot make an HTTP client: {e}")))?;
        Ok(Self { http, global })
    }

    /// Calls `method path` on `to`; an answer other than 2xx is a
    /// [`Failure`] that says what to do about it.
    pub(crate) async fn call(
        &self,
        to: Listener,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Outcome<Reply> {
        self.call_raw(
            to,
            method,
            path,
            body.map(|b| (b.to_string().into_bytes(), JSON)),
            None,
        )
        .await
    }

    /// [`Self::call`] with a raw body and its content type ([`JSON`] or
    /// [`FORM`]), and a longer timeout for a long poll.
    pub(crate) async fn call_raw(
        &self,
        to: Listener,
        method: Method,
        path: &str,
        body: Option<(Vec<u8>, &'static str)>,
        extra_wait: Option<Duration>,
    ) -> Outcome<Reply> {
        let base = match to {
            Listener::Admin => &self.global.admin,
            Listener::Api => &self.global.api,
        };
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let mut req = self.http.request(method.clone(), &url);
        if let Some(wait) = extra_wait {
            req = req.timeout(Duration::from_secs(self.global.request_timeout.max(1)) + wait);
        }
        req = self.credentials(req, to)?;
        if let Some((body, kind)) = body {
            req = req.header("Content-Type", kind).body(body);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| unreachable(&e, to, &method, &url))?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if (200..300).contains(&status) {
            return Ok(Reply { json });
        }
        Err(refused(status, &json, to, &method, path))
    }

    /// `req` with what `to` needs to know the caller: the admin account,
    /// or the tenant's token (which the job API cannot do without).
    fn credentials(
        &self,
        req: reqwest::RequestBuilder,
        to: Listener,
    ) -> Outcome<reqwest::RequestBuilder> {
        match to {
            Listener::Admin => match &self.global.user {
                Some(user) => Ok(req.basic_auth(user, self.global.password.as_deref())),
                None => Ok(req),
            },
            Listener::Api => {
                let Some(token) = &self.global.token else {
                    return Err(Failure::new(
                        exit::DENIED,
                        "this command uses the job API and needs a token: --token or SUNDIAL_TOKEN",
                    ));
                };
                Ok(req.header("X-Token", token))
            }
        }
    }

    /// `GET path` on the admin API, its body written to `out` as it
    /// arrives (no time limit on the whole; each chunk within
    /// `--request-timeout`). Returns the bytes written.
    pub(crate) async fn admin_stream(
        &self,
        path: &str,
        out: &mut (dyn std::io::Write + Send),
    ) -> Outcome<u64> {
        let url = format!("{}{path}", self.global.admin.trim_end_matches('/'));
        let wait = Duration::from_secs(self.global.request_timeout.max(1));
        let http = reqwest::Client::builder()
            .connect_timeout(wait)
            .build()
            .map_err(|e| Failure::new(exit::FAILED, format!("cannot make an HTTP client: {e}")))?;
        let mut req = http.get(&url);
        if let Some(user) = &self.global.user {
            req = req.basic_auth(user, self.global.password.as_deref());
        }
        let cut = |why: String| {
            Failure::new(
                exit::UNAVAILABLE,
                format!(
                    "GET {url}: {why}; is Sundial running there? (--admin or SUNDIAL_ADMIN_URL)"
                ),
            )
        };
        let mut resp = tokio::time::timeout(wait, req.send())
            .await
            .map_err(|_| cut("no answer in time".into()))?
            .map_err(|e| cut(e.to_string()))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let text = resp.text().await.unwrap_or_default();
            let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
            return Err(refused(status, &json, Listener::Admin, &Method::GET, path));
        }
        let mut written = 0u64;
        loop {
            let chunk = tokio::time::timeout(wait, resp.chunk())
                .await
                .map_err(|_| cut("the answer stopped coming".into()))?
                .map_err(|e| {
                    Failure::new(
                        exit::UNAVAILABLE,
                        format!(
                            "GET {url}: the answer broke off ({e}): what was written is incomplete"
                        ),
                    )
                })?;
            let Some(chunk) = chunk else { break };
            out.write_all(&chunk)
                .map_err(|e| Failure::new(exit::FAILED, format!("cannot write: {e}")))?;
            written += chunk.len() as u64;
        }
        out.flush()
            .map_err(|e| Failure::new(exit::FAILED, format!("cannot write: {e}")))?;
        Ok(written)
    }
}

/// What a call that got no answer says: why, and which flag names the
/// address it tried.
fn unreachable(e: &reqwest::Error, to: Listener, method: &Method, url: &str) -> Failure {
    let why = if e.is_timeout() {
        "no answer in time".to_owned()
    } else if e.is_connect() {
        "cannot connect".to_owned()
    } else {
        e.to_string()
    };
    let flag = match to {
        Listener::Admin => "--admin or SUNDIAL_ADMIN_URL",
        Listener::Api => "--api or SUNDIAL_API_URL",
    };
    Failure::new(
        exit::UNAVAILABLE,
        format!("{method} {url}: {why}; is Sundial running there? ({flag})"),
    )
}

/// What a refused call says, with a hint and the exit code for its status.
fn refused(status: u16, json: &Value, to: Listener, method: &Method, path: &str) -> Failure {
    let said = json
        .get("error")
        .or_else(|| json.get("msg"))
        .and_then(Value::as_str)
        .map_or_else(|| json.to_string(), str::to_owned);
    let (code, hint) = match (status, to) {
        (401, Listener::Admin) => (
            exit::DENIED,
            " (the admin API wants --user and --password, or SUNDIAL_ADMIN_USER and SUNDIAL_ADMIN_PASSWORD)",
        ),
        (401, Listener::Api) => (exit::DENIED, " (check --token or SUNDIAL_TOKEN)"),
        (403, _) => (
            exit::DENIED,
            " (the token's scope: see `sundial token scope`)",
        ),
        (404, _) => (exit::NOT_FOUND, ""),
        (429, _) => (exit::UNAVAILABLE, " (rate limited: try again later)"),
        (503, _) => (exit::UNAVAILABLE, " (try again later)"),
        _ => (exit::FAILED, ""),
    };
    Failure::new(code, format!("{said}{hint} [{method} {path}: {status}]"))
}

impl Client {
    pub(crate) async fn admin_get(&self, path: &str) -> Outcome<Value> {
        Ok(self
            .call(Listener::Admin, Method::GET, path, None)
            .await?
            .json)
    }

    /// Prints `json` pretty when `--json` was given, else runs `table`.
    pub(crate) fn show(&self, json: &Value, table: impl FnOnce(&Value)) {
        if self.global.json {
            println!("{}", serde_json::to_string_pretty(json).unwrap_or_default());
        } else {
            table(json);
        }
    }
}
