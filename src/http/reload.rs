//! `POST /-/reload`, only with `--web.enable-lifecycle` ([`Lifecycle`]):
//! every reloadable file re-read now, one reload at a time in a task of its
//! own, concurrent requests joining it ([`ReloadFlight`]).

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::Response;
use etcd_readiness_policy::sync::TolerantLock;

use super::{AppState, TEXT, respond};

/// `--web.enable-lifecycle`, added to [`app`]'s router as an axum
/// `Extension`. Without it `POST /-/reload` answers 403, as Prometheus does
/// without the flag.
#[derive(Clone, Debug, Default)]
pub struct Lifecycle {
    pub enabled: bool,
    /// The reload in flight, which concurrent POSTs join.
    pub flight: Arc<ReloadFlight>,
}

/// What a reload answered: the status and the text body.
type ReloadAnswer = (StatusCode, String);

/// Coalesces `POST /-/reload`: one reload runs at a time, in a task of its
/// own (so a client that goes away does not abandon it); requests arriving
/// while it runs wait for its answer instead of starting another (before,
/// 500 concurrent reloads spawned ~480 OS threads and kept ~30 MB).
#[derive(Debug, Default)]
pub struct ReloadFlight {
    in_flight: std::sync::Mutex<Option<tokio::sync::watch::Receiver<Option<ReloadAnswer>>>>,
    runs: std::sync::atomic::AtomicU64,
    joined: std::sync::atomic::AtomicU64,
}

impl ReloadFlight {
    /// Run `reload` unless one is in flight; either way, its answer.
    pub async fn run<F, Fut>(self: &Arc<Self>, reload: F) -> ReloadAnswer
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = ReloadAnswer> + Send + 'static,
    {
        use std::sync::atomic::Ordering::Relaxed;
        let mut rx = {
            let mut slot = self.in_flight.locked();
            match &*slot {
                Some(rx) => {
                    self.joined.fetch_add(1, Relaxed);
                    rx.clone()
                }
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    *slot = Some(rx.clone());
                    self.runs.fetch_add(1, Relaxed);
                    let work = reload();
                    let done = FlightDone {
                        flight: self.clone(),
                        tx,
                    };
                    tokio::spawn(async move {
                        let answer = work.await;
                        // Over before it answers: a request from now on
                        // starts a reload of its own, which sees any change
                        // made since this one read the files.
                        done.flight.end(&done.tx);
                        done.tx.send_replace(Some(answer));
                    });
                    rx
                }
            }
        };
        let answer = rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|a| a.clone());
        answer.unwrap_or((
            StatusCode::INTERNAL_SERVER_ERROR,
            "reload failed: the reload ended without an answer\n".to_string(),
        ))
    }

    fn end(&self, tx: &tokio::sync::watch::Sender<Option<ReloadAnswer>>) {
        let mut slot = self.in_flight.locked();
        if slot
            .as_ref()
            .is_some_and(|rx| rx.same_channel(&tx.subscribe()))
        {
            *slot = None;
        }
    }

    /// Reloads run, and requests that joined one in flight instead.
    pub fn counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.runs.load(Relaxed), self.joined.load(Relaxed))
    }
}

/// The sender of a flight's answer (dropped without one if the reload
/// panicked: the waiters then get a 500, and the slot is freed).
struct FlightDone {
    flight: Arc<ReloadFlight>,
    tx: tokio::sync::watch::Sender<Option<ReloadAnswer>>,
}

impl Drop for FlightDone {
    fn drop(&mut self) {
        self.flight.end(&self.tx);
    }
}

/// `POST /-/reload`: re-read every reloadable file now (as Prometheus
/// does), only with `--web.enable-lifecycle`; one line per file, 500 when
/// one failed (its full diagnostics follow; the others are still reloaded).
pub(super) async fn reload(
    State(s): State<AppState>,
    lifecycle: Option<Extension<Lifecycle>>,
) -> Response {
    let Some(Extension(lifecycle)) = lifecycle.filter(|l| l.enabled) else {
        return respond(
            StatusCode::FORBIDDEN,
            TEXT,
            "Lifecycle API is not enabled (start with --web.enable-lifecycle); SIGHUP and file changes still reload\n".to_string(),
        );
    };
    let files = s.reloadables.clone();
    let (status, body) = lifecycle
        .flight
        .run(move || async move {
            let report = files.reload_all(crate::reload::ReloadTrigger::Http).await;
            (report.status(), report.text())
        })
        .await;
    respond(status, TEXT, body)
}
