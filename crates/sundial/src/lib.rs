//! The `sundial` binary, as a library so that tests can load its config.
//!
//! - [`config`]: the config file and `SUNDIAL_*` variables (figment).
//! - [`telemetry`]: logs and the metrics recorder.
//! - [`serve`], [`pumpd`], [`check_config`], [`wipe_shard`]: one module per
//!   command.
//! - [`health`]: `/live`, `/ready` and `/metrics`, the same for every
//!   command that listens.
//! - [`process`]: what every long-running command does to its process
//!   (signals, the open-file limit).
//!
//! The crates below do the work: `sundial-gateway` (HTTP), `sundial-pumpd`
//! (timers), `sundial-router` (topology, tokens, reload, drains) and
//! `sundial-core` (the job engine). This crate only wires them.

pub mod check_config;
pub mod config;
pub mod health;
pub mod process;
pub mod pumpd;
pub mod serve;
pub mod telemetry;
pub mod wipe_shard;

pub use config::Config;
