//! A thin HTTP client for tests: every call returns status, JSON and
//! headers, and is checked against the OpenAPI document ([`crate::contract`]).

use reqwest::{Method, header::HeaderMap};
use serde_json::Value;

/// An answer from Sundial.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub json: Value,
    pub headers: HeaderMap,
}

/// Calls one Sundial listener with one token.
#[derive(Debug, Clone)]
pub struct Api {
    pub base: String,
    pub token: Option<String>,
    pub http: reqwest::Client,
    /// HTTP basic auth (user, password), for the admin listener.
    pub basic: Option<(String, String)>,
    /// Whether answers are checked against the OpenAPI document (all but
    /// pumpd's probe listener, which the document does not describe).
    pub contract: bool,
}

impl Api {
    pub fn new(base: impl Into<String>, token: Option<&str>) -> Self {
        Self {
            base: base.into(),
            token: token.map(str::to_owned),
            http: reqwest::Client::new(),
            basic: None,
            contract: true,
        }
    }

    /// A client of pumpd's probe and metrics listener: a listener of its
    /// own (docs/OPERATIONS.md), not in the OpenAPI document, so its
    /// answers are not checked against it.
    pub fn pumpd(base: impl Into<String>) -> Self {
        Self {
            contract: false,
            ..Self::new(base, None)
        }
    }

    /// The same, sending HTTP basic auth with every call.
    pub fn with_basic_auth(mut self, user: &str, password: &str) -> Self {
        self.basic = Some((user.to_owned(), password.to_owned()));
        self
    }

    /// Sends `method path` with an optional body and extra headers.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.header("X-Token", t);
        }
        if let Some((user, password)) = &self.basic {
            req = req.basic_auth(user, Some(password));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        let resp = req.send().await.expect("request sent");
        let status = resp.status().as_u16();
        // The path that answered: the client follows redirects.
        let answered = answered_path(&self.base, path, resp.url());
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.expect("response body");
        let content_type = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if self.contract {
            crate::contract::check(method.as_str(), &answered, status, content_type, &bytes);
        }
        let json = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Resp {
            status,
            json,
            headers,
        }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.call(Method::GET, path, None, &[]).await
    }

    pub async fn put(&self, path: &str, body: &[u8]) -> Resp {
        self.call(Method::PUT, path, Some(body.to_vec()), &[]).await
    }

    pub async fn patch(&self, path: &str, body: &[u8]) -> Resp {
        self.call(Method::PATCH, path, Some(body.to_vec()), &[])
            .await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.call(Method::DELETE, path, None, &[]).await
    }

    pub async fn post(&self, path: &str) -> Resp {
        self.call(Method::POST, path, None, &[]).await
    }

    /// Publishes and returns the job id (panics unless 201).
    pub async fn publish(&self, ns: &str, queue: &str, query: &str, body: &[u8]) -> String {
        let r = self.put(&format!("/api/{ns}/{queue}?{query}"), body).await;
        assert_eq!(r.status, 201, "publish: {r:?}");
        r.json["job_id"].as_str().expect("job_id").to_owned()
    }
}

/// The path (below `base`'s own path) of the URL that answered, with its
/// query; `asked` when no redirect was followed.
fn answered_path(base: &str, asked: &str, url: &reqwest::Url) -> String {
    let asked_url = format!("{base}{asked}");
    if url.as_str() == asked_url {
        return asked.to_owned();
    }
    let prefix = reqwest::Url::parse(base).map_or_else(|_| String::new(), |b| b.path().to_owned());
    let path = url.path();
    path.strip_prefix(prefix.trim_end_matches('/'))
        .unwrap_or(path)
        .to_owned()
}

/// A token's id as the admin API shows it: the first 16 hex digits of the
/// secret's SHA-256, with the token's `pool:` prefix. Computed here, not by
/// Sundial's code, so that tests check the scheme.
pub fn token_id(token: &str) -> String {
    use sha2::{Digest, Sha256};
    let (prefix, secret) = match token.split_once(':') {
        Some((pool, secret)) => (format!("{pool}:"), secret),
        None => (String::new(), token),
    };
    let hex = format!("{:x}", Sha256::digest(secret.as_bytes()));
    format!("{prefix}{}", &hex[..16])
}

/// Creates a token for `ns` through the admin API at `admin_base`.
pub async fn create_token(admin_base: &str, ns: &str) -> String {
    Api::new(admin_base, None).create_token(ns).await
}

impl Api {
    /// Creates a token for `ns` through this admin API client (with its
    /// basic auth, if it has one).
    pub async fn create_token(&self, ns: &str) -> String {
        let r = self.post(&format!("/token/{ns}?description=test")).await;
        assert_eq!(r.status, 201, "create token: {r:?}");
        r.json["token"].as_str().expect("token").to_owned()
    }
}
