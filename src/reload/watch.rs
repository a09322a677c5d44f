//! The reload triggers that run on their own: inotify on the policy file's
//! parent directory (through [`crate::filewatch`], shared with the web
//! config's watcher), SIGHUP, and a periodic re-read as a safety net.
//!
//! The kubelet updates a ConfigMap volume by swapping the `..data` symlink, so
//! a watch on the file itself goes dead after the first update and no event
//! names the file. We therefore watch the directory, treat any change in it as
//! "maybe changed", wait for a short quiet period (debounce) and re-read the
//! file by path; [`Reloader::reload_now`] compares hashes, so spurious events
//! cost one small read. Events are bridged from notify's thread into tokio by
//! a one-slot channel: a pending slot already means "re-read", so bursts
//! coalesce and an event that arrives during a reload causes one more.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::RecommendedWatcher;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{ReloadTrigger, Reloader};
pub use crate::filewatch::EventCounts;
use crate::filewatch::{debounce, dir_of, next_hangup, watch_dirs};
use crate::supervise::Supervisor;

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
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            debounce: Duration::from_millis(100),
            resync_interval: Duration::from_secs(30),
            inotify: true,
            sighup: true,
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

/// Start the watcher for `reloader`'s file. Must be called within a tokio
/// runtime. Never fails: a watch or signal handler that cannot be set up is
/// logged and the remaining triggers still work (a failed watch is retried at
/// every periodic re-read). The watcher runs supervised by a supervisor of
/// its own; use [`spawn_watcher_supervised`] to report to the exporter's.
pub fn spawn_watcher(reloader: Arc<Reloader>, opts: WatchOptions) -> WatcherHandle {
    spawn_watcher_supervised(reloader, opts, &Supervisor::new())
}

/// [`spawn_watcher`] as the task `policy-watcher` of `supervisor`: if the
/// watcher loop panics, it is logged, counted and started again (with a
/// fresh inotify watch and SIGHUP handler) after a backoff.
pub fn spawn_watcher_supervised(
    reloader: Arc<Reloader>,
    opts: WatchOptions,
    supervisor: &Supervisor,
) -> WatcherHandle {
    spawn_watcher_named("policy-watcher", reloader, opts, supervisor)
}

/// [`spawn_watcher_supervised`] as the task `name`: the candidate policy's
/// watcher is `candidate-watcher`, the same loop on its own file.
pub fn spawn_watcher_named(
    name: &str,
    reloader: Arc<Reloader>,
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

impl Loop {
    /// Set up the watch and the SIGHUP handler (before returning, so a SIGHUP
    /// sent right after is not lost).
    fn new(reloader: Arc<Reloader>, opts: WatchOptions, stats: Arc<EventCounts>) -> Loop {
        let dir = dir_of(reloader.path());
        let (tx, rx) = mpsc::channel(1);
        let broken = Arc::new(AtomicBool::new(false));
        let watcher = if opts.inotify {
            watch(&dir, &tx, &broken, &stats)
        } else {
            None
        };
        let hangup = if opts.sighup {
            signal(SignalKind::hangup())
                .inspect_err(|e| {
                    tracing::error!(error = %e, "cannot handle SIGHUP; reload via POST /-/reload or wait for the periodic re-read");
                })
                .ok()
        } else {
            None
        };
        Loop {
            reloader,
            opts,
            dir,
            tx,
            rx,
            broken,
            stats,
            watcher,
            hangup,
        }
    }
}

/// Watch the policy's directory; log and carry on without inotify if it fails.
fn watch(
    dir: &Path,
    tx: &mpsc::Sender<()>,
    broken: &Arc<AtomicBool>,
    stats: &Arc<EventCounts>,
) -> Option<RecommendedWatcher> {
    match watch_dirs([dir], tx, broken, stats) {
        Ok(w) => {
            tracing::debug!(dir = %dir.display(), "watching the policy directory");
            Some(w)
        }
        Err((dir, e)) => {
            tracing::error!(
                dir = %dir.display(), error = %e,
                "cannot watch the policy directory; changes are picked up by the periodic \
                 re-read, SIGHUP or POST /-/reload (retrying the watch at each re-read)"
            );
            None
        }
    }
}

struct Loop {
    reloader: Arc<Reloader>,
    opts: WatchOptions,
    dir: PathBuf,
    tx: mpsc::Sender<()>,
    rx: mpsc::Receiver<()>,
    broken: Arc<AtomicBool>,
    stats: Arc<EventCounts>,
    watcher: Option<RecommendedWatcher>,
    hangup: Option<Signal>,
}

async fn run(mut l: Loop) {
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
                    l.watcher = watch(&l.dir, &l.tx, &l.broken, &l.stats);
                }
                ReloadTrigger::Resync
            }
            Some(()) = next_hangup(&mut l.hangup) => ReloadTrigger::Signal,
        };
        reload(&l.reloader, trigger).await;
    }
}

async fn reload(reloader: &Arc<Reloader>, trigger: ReloadTrigger) {
    let r = reloader.clone();
    match tokio::task::spawn_blocking(move || r.reload_now(trigger)).await {
        Ok(Ok(outcome)) => tracing::debug!(%trigger, ?outcome, "policy re-read"),
        // Logged by the reloader with the details.
        Ok(Err(_)) => {}
        Err(e) => tracing::error!(%trigger, error = %e, "policy reload task failed"),
    }
}
