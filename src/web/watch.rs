//! What re-reads `--web.config.file` on its own: inotify on the directories
//! of the file and of every certificate, key and CA it names (cert-manager
//! and the kubelet replace Secret files by swapping a `..data` symlink, so
//! directories are watched, not files), SIGHUP, and a periodic re-read as a
//! safety net. The directory watch, its debounce and the rule that our own
//! reads (access events) are ignored are the policy watcher's
//! ([`crate::filewatch`]), and
//! [`super::WebState::reload_now`] compares hashes, so a spurious event
//! costs a few small reads. The task runs under the [`Supervisor`] as
//! `web-config-watcher`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::RecommendedWatcher;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::WebState;
use crate::filewatch::{EventCounts, debounce, dir_of, next_hangup, watch_dirs};
use crate::supervise::Supervisor;

/// Quiet time after a change before re-reading (a Secret update is a burst
/// of events).
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Watch and re-read under `supervisor`; `resync` is the periodic re-read.
pub fn spawn_watcher(
    web: Arc<WebState>,
    supervisor: &Supervisor,
    resync: Duration,
) -> JoinHandle<()> {
    supervisor.spawn("web-config-watcher", move || run(web.clone(), resync))
}

fn dirs_of(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    files.iter().map(|f| dir_of(f)).collect()
}

/// Watch `dirs`; log and carry on without inotify if it fails.
fn watch(
    dirs: &BTreeSet<PathBuf>,
    tx: &mpsc::Sender<()>,
    broken: &Arc<AtomicBool>,
    counts: &Arc<EventCounts>,
) -> Option<RecommendedWatcher> {
    match watch_dirs(dirs.iter().map(PathBuf::as_path), tx, broken, counts) {
        Ok(w) => Some(w),
        Err((dir, e)) => {
            tracing::error!(dir = %dir.display(), error = %e,
                "cannot watch a web config directory; relying on the periodic re-read and SIGHUP (retrying at each re-read)");
            None
        }
    }
}

async fn run(web: Arc<WebState>, resync: Duration) {
    let (tx, mut rx) = mpsc::channel(1);
    let mut dirs = dirs_of(&web.current().files);
    let broken = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(EventCounts::default());
    let mut watcher = watch(&dirs, &tx, &broken, &counts);
    let mut hangup: Option<Signal> = signal(SignalKind::hangup())
        .inspect_err(|e| tracing::error!(error = %e, "cannot handle SIGHUP for the web config"))
        .ok();
    let period = resync.max(Duration::from_millis(100));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The files may have changed between the start-up load and the watch.
    reload(&web, "resync", true).await;
    loop {
        let (trigger, automatic) = tokio::select! {
            Some(()) = rx.recv() => {
                debounce(&mut rx, DEBOUNCE).await;
                ("watch", true)
            }
            _ = tick.tick() => ("resync", true),
            Some(()) = next_hangup(&mut hangup) => ("signal", false),
        };
        reload(&web, trigger, automatic).await;
        // The file may now name files elsewhere; a failed watch is retried.
        let now = dirs_of(&web.current().files);
        if now != dirs || watcher.is_none() || broken.swap(false, Ordering::Relaxed) {
            // Drop the old watch first: its directory may be gone.
            drop(watcher.take());
            watcher = watch(&now, &tx, &broken, &counts);
            dirs = now;
        }
    }
}

async fn reload(web: &Arc<WebState>, trigger: &'static str, automatic: bool) {
    let w = web.clone();
    match tokio::task::spawn_blocking(move || w.reload_now(trigger, automatic)).await {
        Ok(Ok(outcome)) => tracing::debug!(%trigger, ?outcome, "web config re-read"),
        // Logged by reload_now.
        Ok(Err(_)) => {}
        Err(e) => tracing::error!(%trigger, error = %e, "web config reload task failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn each_directory_once() {
        let d = dirs_of(&[
            PathBuf::from("/etc/web/web.yml"),
            PathBuf::from("/etc/web/tls.crt"),
            PathBuf::from("/etc/ca/ca.crt"),
            PathBuf::from("web.yml"),
        ]);
        let want: BTreeSet<PathBuf> = ["/etc/web", "/etc/ca", "."]
            .iter()
            .map(|p| Path::new(p).to_path_buf())
            .collect();
        assert_eq!(d, want);
    }
}
