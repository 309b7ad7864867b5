//! Sundial's HTTP gateway: the lmstfy-compatible job API and the admin API.
//!
//! - [`api`]: the public job API, one file per resource.
//! - [`admin`]: tokens, limits, reload, pools, info and drains, on a second
//!   listener.
//! - [`state`]: what every handler shares ([`state::AppState`]).
//! - [`wakeups`]: long polls woken through Redis pub/sub.
//! - [`http`]: the middleware both listeners get (request ids, metrics,
//!   logs, JSON errors, `HEAD` refused).
//! - [`server`]: the HTTP/1 accept loop and its bounds (connections,
//!   header and idle timeouts, head size).
//!
//! What the gateway routes to, and keeping that current, is the control
//! plane's (`sundial-router`); the binary (`crates/sundial`) wires the two.
//!
//! Errors: handlers return [`api::error::ApiError`].

/// The commit this build was made from (`build.rs`), or `unknown`.
pub const BUILD_COMMIT: &str = env!("SUNDIAL_BUILD_COMMIT");
/// The version and commit, as `sundial --version` says them.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("SUNDIAL_BUILD_COMMIT"),
    ")"
);

pub mod access;
pub mod admin;
pub mod api;
pub mod batch;
pub mod document;
pub mod history;
pub mod http;
pub mod openapi;
pub mod refusals;
pub mod server;
pub mod state;
pub mod wakeups;

/// Whether a number is 0: serde's `skip_serializing_if` for the fields an
/// answer or an export line leaves out at 0 (so lmstfy's clients see no
/// new field for a job that uses no extension).
pub(crate) fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}
