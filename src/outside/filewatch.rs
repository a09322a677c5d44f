//! The directory watch both file reloaders share: the policy's
//! (`reload/watch.rs`) and the web config's (`web/watch.rs`). The kubelet
//! and cert-manager replace mounted files by swapping a `..data` symlink, so
//! a watch on a file goes dead after the first update: directories are
//! watched and any event that can mean a change makes the caller re-read by
//! path. Events are bridged from notify's thread into tokio by a one-slot
//! channel (a pending slot already means "re-read", so bursts coalesce),
//! then debounced. Opening, reading and closing without writing are counted
//! and dropped, so the reloaders' own reads cannot feed back.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::signal::unix::Signal;
use tokio::sync::mpsc;

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

/// The directory a file is watched through.
pub(crate) fn dir_of(path: &Path) -> PathBuf {
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

/// Watch `dirs` (not recursively): every relevant event, and every error,
/// sends on `tx`; `broken` is set when the watch itself needs renewing (the
/// kernel dropped events, a watched directory was removed, or notify
/// reported an error), which the caller does at its next periodic re-read.
/// On failure, the directory that could not be watched and why.
pub(crate) fn watch_dirs<'a>(
    dirs: impl IntoIterator<Item = &'a Path>,
    tx: &mpsc::Sender<()>,
    broken: &Arc<AtomicBool>,
    counts: &Arc<EventCounts>,
) -> Result<RecommendedWatcher, (PathBuf, notify::Error)> {
    let dirs: Vec<PathBuf> = dirs.into_iter().map(Path::to_path_buf).collect();
    let (tx, flag, counts, watched) = (tx.clone(), broken.clone(), counts.clone(), dirs.clone());
    let handler = move |res: notify::Result<Event>| {
        match res {
            Ok(ev) => {
                if !relevant(&ev.kind) {
                    counts.ignored.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                counts.relevant.fetch_add(1, Ordering::SeqCst);
                if ev.need_rescan()
                    || (matches!(ev.kind, EventKind::Remove(_))
                        && ev.paths.iter().any(|p| watched.contains(p)))
                {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "a directory watch reported an error; re-reading");
                flag.store(true, Ordering::Relaxed);
            }
        }
        // Full means a re-read is already pending; closed means we are stopping.
        let _ = tx.try_send(());
    };
    let first = dirs.first().cloned().unwrap_or_else(|| PathBuf::from("."));
    let mut w = notify::recommended_watcher(handler).map_err(|e| (first, e))?;
    for d in &dirs {
        w.watch(d, RecursiveMode::NonRecursive)
            .map_err(|e| (d.clone(), e))?;
    }
    Ok(w)
}

/// Wait until no event came for `quiet`, or at most ten times `quiet`.
pub(crate) async fn debounce(rx: &mut mpsc::Receiver<()>, quiet: Duration) {
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

pub(crate) async fn next_hangup(hangup: &mut Option<Signal>) -> Option<()> {
    match hangup {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use notify::EventKind;
    use notify::event::{
        AccessKind, AccessMode, CreateKind, DataChange, MetadataKind, ModifyKind, RemoveKind,
        RenameMode,
    };
    use std::path::{Path, PathBuf};

    use super::{dir_of, relevant};

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

    #[test]
    fn a_file_is_watched_through_its_directory() {
        assert_eq!(
            dir_of(Path::new("/etc/web/web.yml")),
            PathBuf::from("/etc/web")
        );
        assert_eq!(dir_of(Path::new("policy")), PathBuf::from("."));
    }
}
