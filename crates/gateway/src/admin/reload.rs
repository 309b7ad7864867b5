//! `POST /reload`: the pools reloaded from the config now.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use sundial_router::reload::Reloader;

use super::answers;
use crate::api::error::ApiError;

/// Reload the pools
///
/// Reloads the pools from the config file now. A refused config leaves the
/// pools as they were.
#[utoipa::path(
    post,
    path = "/reload",
    operation_id = "reloadPools",
    tag = "pools",
    responses(
        (status = 200, description = "Reloaded.", body = crate::admin::answers::info::Reloaded),
        (status = 400, description = "The new config was refused (`reload failed, pools unchanged: <why>`). Messages: `reload failed, pools unchanged: …`.", body = crate::api::answers::ErrorBody<'_>),
    ),
    extensions(("x-sundial-extension" = json!(true))),
)]
pub(super) async fn reload(axum::Extension(reloader): axum::Extension<Arc<Reloader>>) -> Response {
    match reloader.reload("admin API").await {
        Ok(summary) => {
            let answer = answers::info::Reloaded {
                msg: answers::info::ReloadedMsg::Reloaded,
                changes: summary,
            };
            axum::Json(answer).into_response()
        }
        Err(e) => ApiError::bad(format!("reload failed, pools unchanged: {e:#}")).into_response(),
    }
}
