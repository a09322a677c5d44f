//! The reload triggers that run on their own, for every reloaded file:
//! inotify on the directories of the file and of the files it names (through
//! [`crate::outside::filewatch`]), SIGHUP, and a periodic re-read as a safety net.
//!
//! The kubelet updates a ConfigMap or Secret volume by swapping the `..data`
//! symlink, so a watch on the file itself goes dead after the first update
//! and no event names the file. We therefore watch the directories, treat any
//! change in them as "maybe changed", wait for a short quiet period
//! (debounce) and re-read the file by path; [`LastGood::reload_now`] compares
//! hashes, so spurious events cost one small read. After each reload the
//! directories are computed again (a web config may now name certificates
//! elsewhere). Events are bridged from notify's thread into tokio by
//! a one-slot channel: a pending slot already means "re-read", so bursts
//! coalesce and an event that arrives during a reload causes one more.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::RecommendedWatcher;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{LastGood, Load, ReloadTrigger};
pub use crate::outside::filewatch::EventCounts;
use crate::outside::filewatch::{debounce, dir_of, next_hangup, watch_dirs};
use crate::runtime::supervise::Supervisor;

/// How the watcher behaves.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// Quiet time after a directory event before re-reading; a continuous
    /// stream of events delays the re-read by at most ten times this.
    pub debounce: Duration,
    /// Re-read the file this often whatever happens (`--policy.reload-interval`).
    pub resync_interval: Duration,
    /// Watch the directory with inotify. Turn off only where inotify does not
    /// work (some network filesystems); SIGHUP, POST and the re-read remain.
    pub inotify: bool,
    /// Reload on SIGHUP.
    pub sighup: bool,
    /// Reload when this is notified too (a TLS handshake refused with the
    /// files' material: they may have changed unseen).
    pub wake: Option<Arc<tokio::sync::Notify>>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            debounce: Duration::from_millis(100),
            resync_interval: Duration::from_secs(30),
            inotify: true,
            sighup: true,
            wake: None,
        }
    }
}

/// The running watcher. Dropping it stops the watcher: keep it for as long as
/// the policy should follow its file.
#[must_use = "dropping the handle stops the watcher"]
#[derive(Debug)]
pub struct WatcherHandle {
    task: JoinHandle<()>,
    stats: Arc<EventCounts>,
}

impl WatcherHandle {
    /// Stop watching.
    pub fn stop(self) {}

    /// The directory watch's event counts (shared across watcher restarts).
    pub fn events(&self) -> &EventCounts {
        &self.stats
    }
}

impl Drop for WatcherHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Start the watcher for `reloader`'s files as the task `name` of
/// `supervisor` (the runtime's: `policy-watcher`, `candidate-watcher`,
/// `web-config-watcher`, `scrape-config-watcher`, …: the same loop on each
/// file). Must be called within a tokio runtime. Never fails: a watch or
/// signal handler that cannot be set up is logged and the remaining triggers
/// still work (a failed watch is retried at every periodic re-read). If the
/// watcher loop panics, it is logged, counted and started again (with a
/// fresh inotify watch and SIGHUP handler) after a backoff.
pub fn spawn_watcher<L: Load>(
    name: &str,
    reloader: Arc<LastGood<L>>,
    opts: WatchOptions,
    supervisor: &Supervisor,
) -> WatcherHandle {
    let stats = Arc::new(EventCounts::default());
    let mut first = Some(Loop::new(reloader.clone(), opts.clone(), stats.clone()));
    let counts = stats.clone();
    let task = supervisor.spawn(name, move || {
        let l = first
            .take()
            .unwrap_or_else(|| Loop::new(reloader.clone(), opts.clone(), counts.clone()));
        run(l)
    });
    WatcherHandle { task, stats }
}

fn dirs_of(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    files.iter().map(|f| dir_of(f)).collect()
}

impl<L: Load> Loop<L> {
    /// Set up the watch and the SIGHUP handler (before returning, so a SIGHUP
    /// sent right after is not lost).
    fn new(reloader: Arc<LastGood<L>>, opts: WatchOptions, stats: Arc<EventCounts>) -> Loop<L> {
        let dirs = dirs_of(&reloader.files());
        let (tx, rx) = mpsc::channel(1);
        let broken = Arc::new(AtomicBool::new(false));
        let what = reloader.names().what;
        let watcher = if opts.inotify {
            watch(what, &dirs, &tx, &broken, &stats)
        } else {
            None
        };
        let hangup = if opts.sighup {
            signal(SignalKind::hangup())
                .inspect_err(|e| {
                    tracing::error!(error = %e, "cannot handle SIGHUP for the {what} file; reload via POST /-/reload or wait for the periodic re-read");
                })
                .ok()
        } else {
            None
        };
        Loop {
            reloader,
            opts,
            dirs,
            tx,
            rx,
            broken,
            stats,
            watcher,
            hangup,
        }
    }
}

/// Watch `dirs`; log and carry on without inotify if it fails.
fn watch(
    what: &str,
    dirs: &BTreeSet<PathBuf>,
    tx: &mpsc::Sender<()>,
    broken: &Arc<AtomicBool>,
    stats: &Arc<EventCounts>,
) -> Option<RecommendedWatcher> {
    match watch_dirs(dirs.iter().map(PathBuf::as_path), tx, broken, stats) {
        Ok(w) => {
            tracing::debug!(?dirs, "watching the {what} file's directories");
            Some(w)
        }
        Err((dir, e)) => {
            tracing::error!(
                dir = %dir.display(), error = %e,
                "cannot watch the {what} file's directory; changes are picked up by the periodic \
                 re-read, SIGHUP or POST /-/reload (retrying the watch at each re-read)"
            );
            None
        }
    }
}

struct Loop<L: Load> {
    reloader: Arc<LastGood<L>>,
    opts: WatchOptions,
    dirs: BTreeSet<PathBuf>,
    tx: mpsc::Sender<()>,
    rx: mpsc::Receiver<()>,
    broken: Arc<AtomicBool>,
    stats: Arc<EventCounts>,
    watcher: Option<RecommendedWatcher>,
    hangup: Option<Signal>,
}

async fn run<L: Load>(mut l: Loop<L>) {
    let period = l.opts.resync_interval.max(Duration::from_millis(10));
    let mut resync = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The file may have changed between the start-up load and the watch.
    reload(&l.reloader, ReloadTrigger::Resync).await;
    loop {
        let trigger = tokio::select! {
            Some(()) = l.rx.recv() => {
                debounce(&mut l.rx, l.opts.debounce).await;
                ReloadTrigger::Watch
            }
            _ = resync.tick() => {
                if l.opts.inotify && (l.watcher.is_none() || l.broken.swap(false, Ordering::Relaxed)) {
                    // Drop the old watch first: its directory may be gone.
                    l.watcher = None;
                    l.watcher = watch(l.reloader.names().what, &l.dirs, &l.tx, &l.broken, &l.stats);
                }
                ReloadTrigger::Resync
            }
            Some(()) = next_hangup(&mut l.hangup) => ReloadTrigger::Signal,
            () = woken(l.opts.wake.as_deref()) => ReloadTrigger::Refused,
        };
        reload(&l.reloader, trigger).await;
        // The file may now name files elsewhere (a web config's certificates).
        let now = dirs_of(&l.reloader.files());
        if l.opts.inotify && now != l.dirs {
            l.watcher = None;
            l.watcher = watch(l.reloader.names().what, &now, &l.tx, &l.broken, &l.stats);
            l.dirs = now;
        }
    }
}

async fn woken(wake: Option<&tokio::sync::Notify>) {
    match wake {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

async fn reload<L: Load>(reloader: &Arc<LastGood<L>>, trigger: ReloadTrigger) {
    let r = reloader.clone();
    let what = reloader.names().what;
    match tokio::task::spawn_blocking(move || r.reload_now(trigger)).await {
        Ok(Ok(outcome)) => tracing::debug!(%trigger, ?outcome, "{what} file re-read"),
        // Logged by the reloader with the details.
        Ok(Err(_)) => {}
        Err(e) => tracing::error!(%trigger, error = %e, "{what} reload task failed"),
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
