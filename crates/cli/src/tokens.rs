//! `sundial token …`

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    client::{Client, FORM, Listener, Outcome, seg, token_seg},
    table,
};

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Create a token; it is shown this once (Redis keeps only its digest).
    Create {
        /// The namespace (a tenant).
        namespace: String,
        /// What the token is for (shown in listings).
        #[arg(long, short)]
        description: String,
        /// The pool its tenant's jobs live in.
        #[arg(long)]
        pool: Option<String>,
        /// Choose the secret (20 characters at least) instead of a new one.
        #[arg(long)]
        secret: Option<String>,
        /// Limit it to some of publish, consume, read, manage (comma-separated).
        #[arg(long)]
        scope: Option<String>,
        /// Limit it to these queues (comma-separated; `name*` for a prefix).
        #[arg(long, requires = "scope")]
        queues: Option<String>,
    },
    /// List a namespace's tokens, by id.
    List {
        /// The namespace (a tenant).
        namespace: String,
        /// The pool (`default` when left out).
        #[arg(long)]
        pool: Option<String>,
    },
    /// Revoke a token (by the token or its id); every gateway refuses it
    /// within about half a second.
    Revoke { namespace: String, token: String },
    /// Show a token's scope or, with --scope or --queues, change it.
    Scope {
        /// The namespace (a tenant).
        namespace: String,
        /// The token or its id.
        token: String,
        /// The new scopes: publish, consume, read, manage (comma-separated).
        #[arg(long)]
        scope: Option<String>,
        /// The new queue list (comma-separated; `name*` for a prefix).
        #[arg(long, conflicts_with = "all_queues")]
        queues: Option<String>,
        /// Allow every queue again.
        #[arg(long)]
        all_queues: bool,
    },
    /// Rewrite tokens stored in plaintext by an earlier version as digests.
    /// Run it once every gateway runs this version.
    Migrate,
}

fn path(ns: &str, token: &str, tail: &str) -> String {
    format!("/token/{}/{}{tail}", seg(ns), token_seg(token))
}

fn list_of(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

pub(crate) async fn run(c: Client, cmd: TokenCmd) -> Outcome {
    match cmd {
        TokenCmd::Create {
            namespace,
            description,
            pool,
            secret,
            scope,
            queues,
        } => {
            // A form body, not the query: a chosen secret stays out of
            // every URL (and so out of proxies' access logs).
            let form = form_urlencoded(&[
                ("description", Some(description)),
                ("pool", pool),
                ("token", secret),
                ("scope", scope),
                ("queues", queues),
            ]);
            create(&c, &namespace, form).await
        }
        TokenCmd::List { namespace, pool } => list(&c, &namespace, pool).await,
        TokenCmd::Revoke { namespace, token } => revoke(&c, &namespace, &token).await,
        TokenCmd::Scope {
            namespace,
            token,
            scope,
            queues,
            all_queues,
        } => {
            set_scope(
                &c,
                &path(&namespace, &token, "/scope"),
                scope,
                queues,
                all_queues,
            )
            .await
        }
        TokenCmd::Migrate => {
            let r = c
                .call(Listener::Admin, Method::POST, "/tokens/migrate", None)
                .await?;
            c.show(&r.json, |r| {
                println!("migrated {} tokens", table::cell(&r["migrated"]));
            });
            Ok(())
        }
    }
}

/// Creates a token of `ns` with the fields of `form`, and shows it.
async fn create(c: &Client, ns: &str, form: String) -> Outcome {
    let r = c
        .call_raw(
            Listener::Admin,
            Method::POST,
            &format!("/token/{}", seg(ns)),
            Some((form.into_bytes(), FORM)),
            None,
        )
        .await?;
    c.show(&r.json, |t| {
        println!("token    {}", table::cell(&t["token"]));
        describe(t);
        eprintln!("Keep the token now: Sundial stores only its digest and will not show it again.");
    });
    Ok(())
}

/// Lists the tokens of `ns` (in `pool`), a row each.
async fn list(c: &Client, ns: &str, pool: Option<String>) -> Outcome {
    let query = pool
        .map(|p| format!("?pool={}", seg(&p)))
        .unwrap_or_default();
    let r = c.admin_get(&format!("/token/{}{query}", seg(ns))).await?;
    c.show(&r, |r| {
        let rows: Vec<Vec<String>> = r["details"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                vec![
                    table::cell(&t["id"]),
                    table::cell(&t["scopes"]),
                    queues_cell(&t["queues"]),
                    table::time(&t["created_at_ms"]),
                    table::cell(&t["stored"]),
                    table::cell(&t["description"]),
                ]
            })
            .collect();
        table::print(
            &[
                "ID",
                "SCOPES",
                "QUEUES",
                "CREATED (UTC)",
                "STORED",
                "DESCRIPTION",
            ],
            &rows,
        );
    });
    Ok(())
}

/// Revokes a token of `ns`, once it is known to exist.
async fn revoke(c: &Client, ns: &str, token: &str) -> Outcome {
    // The delete answers 204 whether or not the token existed:
    // look first, so that a typo is not reported as done.
    let found = c.admin_get(&path(ns, token, "/scope")).await?;
    c.call(Listener::Admin, Method::DELETE, &path(ns, token, ""), None)
        .await?;
    c.show(&json!({ "revoked": found["id"] }), |_| {
        println!("revoked {}", table::cell(&found["id"]));
    });
    Ok(())
}

/// Shows the token's scope at `p` or, when any change is asked, changes
/// it (what is not named stays) and shows the result.
async fn set_scope(
    c: &Client,
    p: &str,
    scope: Option<String>,
    queues: Option<String>,
    all_queues: bool,
) -> Outcome {
    let current = c.admin_get(p).await?;
    let t = if scope.is_none() && queues.is_none() && !all_queues {
        current
    } else {
        let scopes = match scope {
            Some(s) => json!(list_of(&s)),
            None => current["scopes"].clone(),
        };
        let queues = match (queues, all_queues) {
            (Some(q), _) => json!(list_of(&q)),
            (None, true) => Value::Null,
            (None, false) => current["queues"].clone(),
        };
        let body = json!({ "scopes": scopes, "queues": queues });
        c.call(Listener::Admin, Method::PUT, p, Some(body))
            .await?
            .json
    };
    c.show(&t, describe);
    Ok(())
}

/// A token's id, scope and the rest, one per line.
fn describe(t: &Value) {
    println!("id       {}", table::cell(&t["id"]));
    println!("scopes   {}", table::cell(&t["scopes"]));
    println!("queues   {}", queues_cell(&t["queues"]));
    println!("created  {}", table::time(&t["created_at_ms"]));
    println!("stored   {}", table::cell(&t["stored"]));
    println!("about    {}", table::cell(&t["description"]));
}

/// A query string of the pairs that have a value.
fn form_urlencoded(pairs: &[(&str, Option<String>)]) -> String {
    pairs
        .iter()
        .filter_map(|(k, v)| Some(format!("{k}={}", seg(v.as_deref()?))))
        .collect::<Vec<_>>()
        .join("&")
}

/// A token's queues: `all` when it names none.
fn queues_cell(q: &Value) -> String {
    if q.is_null() {
        "all".to_owned()
    } else {
        table::cell(q)
    }
}
