//! Reading request bodies with a hard size limit (no unbounded buffering).

use axum::body::{Body, Bytes};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::ApiError;

/// Reads at most `limit` bytes; more is 413 with `too_large` as the message.
pub(super) async fn read(
    body: Body,
    limit: usize,
    too_large: &'static str,
) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ApiError::TooLarge(too_large))
        }
        Err(_) => Err(ApiError::bad("failed to read body")),
    }
}
