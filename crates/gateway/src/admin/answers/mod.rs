//! The admin API's answers as types: each is serialised as it is sent, and
//! its schema in the OpenAPI document is derived from it
//! (`crate::openapi`), so that the two cannot drift.

pub mod info;
pub mod jobs;
pub mod limits;
pub mod namespaces;
pub mod pauses;
pub mod policies;
pub mod queues;
pub mod quotas;
pub mod tokens;
