//! `POST /-/reload`: reload the policy now, as Prometheus does for its
//! configuration. The HTTP surface mounts [`reload_handler`]; this module
//! writes no router.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{ReloadOutcome, ReloadTrigger, Reloader};

/// Re-read the policy file. 200 `policy reloaded` or `policy unchanged`; 500
/// with the full diagnostics (carets and `file:line:col`) when the file is
/// invalid or unreadable, in which case the previous policy stays in force.
///
/// Mount with a state that yields `Arc<Reloader>` (directly, or through
/// `FromRef` on the application state):
/// `Router::new().route("/-/reload", post(reload_handler))`.
pub async fn reload_handler(State(reloader): State<Arc<Reloader>>) -> Response {
    let result =
        tokio::task::spawn_blocking(move || reloader.reload_now(ReloadTrigger::Http)).await;
    let (status, body) = match result {
        Ok(Ok(ReloadOutcome::Applied { sha256 })) => (
            StatusCode::OK,
            format!("policy reloaded (sha256 {sha256})\n"),
        ),
        Ok(Ok(ReloadOutcome::Unchanged { sha256 })) => (
            StatusCode::OK,
            format!("policy unchanged (sha256 {sha256})\n"),
        ),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "policy reload failed; the previous policy stays in force\n\n{}\n",
                e.full_text().trim_end()
            ),
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("policy reload failed: {e}\n"),
        ),
    };
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}
