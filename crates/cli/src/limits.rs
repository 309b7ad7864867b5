//! `sundial limit …`

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use crate::{
    client::{Client, Listener, Outcome, seg, token_seg},
    table,
};

#[derive(Debug, Subcommand)]
pub enum LimitCmd {
    /// Show a token's rate limit.
    Get { namespace: String, token: String },
    /// Set (create or replace) a token's rate limit.
    Set {
        /// The namespace (a tenant).
        namespace: String,
        /// The token or its id.
        token: String,
        /// Consumes per interval (0: no limit).
        #[arg(long, default_value_t = 0)]
        read: u64,
        /// Publishes per interval (0: no limit).
        #[arg(long, default_value_t = 0)]
        write: u64,
        /// The window, in seconds.
        #[arg(long)]
        interval: u64,
    },
    /// Remove a token's rate limit.
    Delete { namespace: String, token: String },
    /// Every token that has a limit.
    List,
}

fn path(ns: &str, token: &str) -> String {
    format!("/token/{}/{}/limit", seg(ns), token_seg(token))
}

pub(crate) async fn run(c: Client, cmd: LimitCmd) -> Outcome {
    match cmd {
        LimitCmd::Get { namespace, token } => {
            let r = c.admin_get(&path(&namespace, &token)).await?;
            c.show(&r, |l| {
                table::print(
                    &["READ", "WRITE", "INTERVAL (S)"],
                    &[vec![
                        table::cell(&l["read"]),
                        table::cell(&l["write"]),
                        table::cell(&l["interval"]),
                    ]],
                );
            });
        }
        LimitCmd::Set {
            namespace,
            token,
            read,
            write,
            interval,
        } => {
            let body = json!({ "read": read, "write": write, "interval": interval });
            let r = c
                .call(
                    Listener::Admin,
                    Method::PUT,
                    &path(&namespace, &token),
                    Some(body),
                )
                .await?;
            c.show(&r.json, |_| {
                println!("limit set: {read} consumes and {write} publishes per {interval} s (0 = no limit)");
            });
        }
        LimitCmd::Delete { namespace, token } => delete(&c, &namespace, &token).await?,
        LimitCmd::List => list(&c).await?,
    }
    Ok(())
}

/// Removes a token's limit, and says whether it had one.
async fn delete(c: &Client, ns: &str, token: &str) -> Outcome {
    // The delete succeeds whether or not there was a limit, or a
    // token: look first, to say which.
    c.admin_get(&format!("/token/{}/{}/scope", seg(ns), token_seg(token)))
        .await?;
    let had = c.admin_get(&path(ns, token)).await.is_ok();
    let r = c
        .call(Listener::Admin, Method::DELETE, &path(ns, token), None)
        .await?;
    c.show(&r.json, |_| {
        println!(
            "{}",
            if had {
                "limit removed"
            } else {
                "the token had no limit"
            }
        );
    });
    Ok(())
}

/// Every token that has a limit, a row each.
async fn list(c: &Client) -> Outcome {
    let r = c.admin_get("/limits").await?;
    c.show(&r, |r| {
        let rows: Vec<Vec<String>> = r
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| {
                vec![
                    table::cell(&l["namespace"]),
                    table::cell(&l["token"]),
                    table::cell(&l["limiter"]["read"]),
                    table::cell(&l["limiter"]["write"]),
                    table::cell(&l["limiter"]["interval"]),
                ]
            })
            .collect();
        table::print(
            &["NAMESPACE", "TOKEN ID", "READ", "WRITE", "INTERVAL (S)"],
            &rows,
        );
    });
    Ok(())
}
