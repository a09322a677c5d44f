//! The reload triggers that run on their own: inotify on the policy file's
//! parent directory, SIGHUP, and a periodic re-read as a safety net.
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{ReloadTrigger, Reloader};
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

/// What the directory watch has received so far, by class. The watcher counts
/// an event before it decides on it, so a test can wait for the events its own
/// file operations raise and then check how they were classified, instead of
/// watching a wall-clock window for reads that should not happen.
#[derive(Debug, Default)]
pub struct EventCounts {
    /// Events that can mean the content changed: each schedules a re-read.
    relevant: AtomicU64,
    /// Events that cannot (open, read, close without writing): dropped.
    ignored: AtomicU64,
}

impl EventCounts {
    /// Events that scheduled a re-read.
    pub fn relevant(&self) -> u64 {
        self.relevant.load(Ordering::SeqCst)
    }

    /// Events dropped as unable to change the content (our own reads among them).
    pub fn ignored(&self) -> u64 {
        self.ignored.load(Ordering::SeqCst)
    }
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
    let stats = Arc::new(EventCounts::default());
    let mut first = Some(Loop::new(reloader.clone(), opts.clone(), stats.clone()));
    let counts = stats.clone();
    let task = supervisor.spawn("policy-watcher", move || {
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
        let dir = watch_dir_of(reloader.path());
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

fn watch_dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Whether an event can mean the file's content changed. Opening and reading
/// (including our own reads) cannot; a close after writing can.
pub(crate) fn relevant(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

fn watch(
    dir: &Path,
    tx: &mpsc::Sender<()>,
    broken: &Arc<AtomicBool>,
    stats: &Arc<EventCounts>,
) -> Option<RecommendedWatcher> {
    let tx = tx.clone();
    let flag = broken.clone();
    let stats = stats.clone();
    let watched = dir.to_path_buf();
    let handler = move |res: notify::Result<Event>| {
        match res {
            Ok(ev) => {
                if !relevant(&ev.kind) {
                    stats.ignored.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                stats.relevant.fetch_add(1, Ordering::SeqCst);
                if ev.need_rescan()
                    || (matches!(ev.kind, EventKind::Remove(_)) && ev.paths.contains(&watched))
                {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "policy directory watch reported an error; re-reading the policy");
                flag.store(true, Ordering::Relaxed);
            }
        }
        // Full means a re-read is already pending; closed means we are stopping.
        let _ = tx.try_send(());
    };
    let result = notify::recommended_watcher(handler)
        .and_then(|mut w| w.watch(dir, RecursiveMode::NonRecursive).map(|()| w));
    match result {
        Ok(w) => {
            tracing::debug!(dir = %dir.display(), "watching the policy directory");
            Some(w)
        }
        Err(e) => {
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

/// Wait until no event came for `quiet`, or at most ten times `quiet`.
async fn debounce(rx: &mut mpsc::Receiver<()>, quiet: Duration) {
    let limit = tokio::time::Instant::now() + quiet * 10;
    loop {
        let wait = quiet.min(limit.saturating_duration_since(tokio::time::Instant::now()));
        if wait.is_zero() {
            return;
        }
        match tokio::time::timeout(wait, rx.recv()).await {
            Ok(Some(())) => continue,
            Ok(None) | Err(_) => return,
        }
    }
}

async fn next_hangup(hangup: &mut Option<Signal>) -> Option<()> {
    match hangup {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
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

#[cfg(test)]
mod tests {
    use notify::EventKind;
    use notify::event::{
        AccessKind, AccessMode, CreateKind, DataChange, MetadataKind, ModifyKind, RemoveKind,
        RenameMode,
    };

    use super::relevant;

    /// Which events schedule a re-read: everything but opening, reading and
    /// closing without writing (so the watcher's own reads cannot).
    #[test]
    fn only_events_that_can_change_the_content_are_relevant() {
        let table: &[(EventKind, bool)] = &[
            (EventKind::Access(AccessKind::Open(AccessMode::Read)), false),
            (EventKind::Access(AccessKind::Read), false),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Read)),
                false,
            ),
            (EventKind::Access(AccessKind::Any), false),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                true,
            ),
            (EventKind::Create(CreateKind::File), true),
            (EventKind::Modify(ModifyKind::Data(DataChange::Any)), true),
            (
                EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
                true,
            ),
            (EventKind::Modify(ModifyKind::Name(RenameMode::To)), true),
            (EventKind::Remove(RemoveKind::File), true),
            (EventKind::Any, true),
            (EventKind::Other, true),
        ];
        for (kind, expected) in table {
            assert_eq!(relevant(kind), *expected, "{kind:?}");
        }
    }
}
