//! Hot reload of every file the exporter re-reads — the policy, the candidate
//! policy, `--web.config.file` and the `--config` scrape sources — through
//! one mechanism, [`LastGood`], keeping the last good content in force.
//!
//! [`LastGood::reload_now`] re-reads its file by path (following the
//! kubelet's `file -> ..data/file` symlinks) with a deadline and at most one
//! read in flight ([`DeadlineReader`]), compares its SHA-256 with the content
//! in force, builds the new value on a helper thread under the same deadline
//! (a panic or a build that hangs is a failed reload, and a build still stuck
//! makes the next one fail at once), and only then hands it to its [`Load`]
//! implementation to put in force, all or nothing. A failure is logged once
//! per distinct failure for the automatic triggers, counted in the file's
//! [`ReloadStatus`] families and reported to the loader; what was in force
//! stays. What each file means is its [`Load`]: [`PolicyFile`] here,
//! `web::WebFile` and `sources::scrape_set::ScrapeSet` beside their parts.
//!
//! Triggers live beside it: [`spawn_watcher`] (inotify on the directories of
//! the files, SIGHUP, a periodic re-read) and [`Reloadables`] for
//! `POST /-/reload`, which reloads every file and answers one [`Report`].
//! See docs/reload.md.

mod http;
mod metrics;
mod policy;
mod watch;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_readiness_policy::sync::TolerantLock;
use sha2::{Digest, Sha256};

pub use http::{FileReport, ReloadFailure, Reloadable, Reloadables, Report, reload_handler};
pub use metrics::ReloadMetrics;
pub use policy::{PolicyFile, PolicySink, load, read_policy_file};
pub use watch::{WatchOptions, WatcherHandle, spawn_watcher};

pub use crate::metrics::reload_status::ReloadStatus;
use crate::outside::blocking::{DeadlineError, run_with_deadline};
use crate::outside::bounded_read::{DeadlineReader, ReadError};
use crate::runtime::clock::Clock;

/// The largest policy file read: the policy language's own size limit.
pub const MAX_POLICY_FILE_BYTES: u64 =
    etcd_readiness_policy::policy::limits::MAX_POLICY_BYTES as u64;

/// How long one reload's read (and, separately, its build) may take before
/// it counts as failed.
pub const DEFAULT_RELOAD_DEADLINE: Duration = Duration::from_secs(5);

/// The policy file's reloader (the live policy's and the candidate's).
pub type Reloader = LastGood<PolicyFile>;

/// Why a policy reload did not change the policy in force.
pub type ReloadError = LoadError<Box<etcd_readiness_policy::policy::Diagnostics>>;

/// How a reloaded file is named in messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Names {
    /// What the file holds, e.g. `policy`, `web config`.
    pub what: &'static str,
    /// What happens on a failure, e.g. `the previous policy stays in force`.
    pub kept: &'static str,
}

/// What asked for a reload; shown in logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadTrigger {
    /// A change seen in a watched directory (inotify).
    Watch,
    /// The periodic safety-net re-read.
    Resync,
    /// SIGHUP.
    Signal,
    /// `POST /-/reload`.
    Http,
    /// A direct call, e.g. from a test or at start-up.
    Manual,
    /// A TLS handshake with the files' material was refused.
    Refused,
}

impl ReloadTrigger {
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadTrigger::Watch => "watch",
            ReloadTrigger::Resync => "resync",
            ReloadTrigger::Signal => "signal",
            ReloadTrigger::Http => "http",
            ReloadTrigger::Manual => "manual",
            ReloadTrigger::Refused => "handshake",
        }
    }

    /// Automatic triggers repeat on their own; a failure they see again
    /// unchanged is not logged or counted a second time.
    fn is_automatic(self) -> bool {
        matches!(
            self,
            ReloadTrigger::Watch | ReloadTrigger::Resync | ReloadTrigger::Refused
        )
    }
}

impl fmt::Display for ReloadTrigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of a reload that did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The content differed and is now in force.
    Applied { sha256: String },
    /// The content is the one already in force; nothing was done.
    Unchanged { sha256: String },
}

/// A loader's own reason to refuse a file.
pub trait Problem: fmt::Display + fmt::Debug + Send + 'static {
    /// One line, for logs and status pages (`file:line:col` first where
    /// there is one).
    fn one_line(&self) -> String {
        self.to_string()
    }
    /// Everything a human needs, for the `POST /-/reload` answer.
    fn full_text(&self) -> String {
        self.to_string()
    }
    /// The file the problem is about where it is another than the one
    /// the reloader reads first (a set of files: its CA, its key).
    fn file(&self) -> Option<&Path> {
        None
    }
}

/// Why a reload did not change what is in force.
#[derive(Debug)]
pub enum LoadError<E> {
    Read {
        names: Names,
        path: PathBuf,
        source: ReadError,
    },
    NotUtf8 {
        names: Names,
        path: PathBuf,
        offset: usize,
    },
    TimedOut {
        names: Names,
        path: PathBuf,
        after: Duration,
    },
    /// An earlier build timed out and is still running.
    Busy { names: Names, path: PathBuf },
    Panicked {
        names: Names,
        path: PathBuf,
        message: String,
    },
    /// The loader refused the content (invalid, or a change that needs a
    /// restart).
    Invalid(E),
}

impl<E: Problem> fmt::Display for LoadError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Read {
                names,
                path,
                source,
            } => write!(
                f,
                "cannot read {} file {}: {source}; {} (check the file exists and, in \
                 Kubernetes, that the ConfigMap or Secret has the key)",
                names.what,
                path.display(),
                names.kept
            ),
            LoadError::NotUtf8 {
                names,
                path,
                offset,
            } => write!(
                f,
                "{} file {} is not valid UTF-8 (first bad byte at offset {offset}); {}",
                names.what,
                path.display(),
                names.kept
            ),
            LoadError::TimedOut { names, path, after } => write!(
                f,
                "{} reload of {} did not finish within {after:?}; {}",
                names.what,
                path.display(),
                names.kept
            ),
            LoadError::Busy { names, path } => write!(
                f,
                "{} reload of {}: an earlier reload is still stuck, not starting another; {}",
                names.what,
                path.display(),
                names.kept
            ),
            LoadError::Panicked {
                names,
                path,
                message,
            } => write!(
                f,
                "{} reload of {} failed ({message}); {}",
                names.what,
                path.display(),
                names.kept
            ),
            LoadError::Invalid(e) => f.write_str(&e.one_line()),
        }
    }
}

impl<E: Problem> std::error::Error for LoadError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl<E: Problem> LoadError<E> {
    /// The full text for a human: for an invalid policy every problem with
    /// the source line and carets; otherwise the one-line message.
    pub fn full_text(&self) -> String {
        match self {
            LoadError::Invalid(e) => e.full_text(),
            other => other.to_string(),
        }
    }

    /// One line, for logs and status. For an invalid policy this starts
    /// with `file:line:col`.
    pub fn one_line(&self) -> String {
        self.to_string()
    }

    /// The file the failure is about: the one the loader's problem names,
    /// else `own`, the file the reloader reads first.
    pub fn file<'a>(&'a self, own: &'a Path) -> &'a Path {
        match self {
            LoadError::Invalid(e) => e.file().unwrap_or(own),
            _ => own,
        }
    }
}

/// What one reloadable file means: how to build its content and how to put
/// it in force. [`LastGood`] does the rest (reading, hashing, deadlines,
/// panics, logs, metrics).
pub trait Load: Send + Sync + 'static {
    /// What the file builds into.
    type Value: Send + 'static;
    type Error: Problem;
    /// The largest file read.
    fn limit(&self) -> u64;
    /// Build from the file's text. Runs on a helper thread under the
    /// reload deadline; may read the files the text names.
    fn build(&self, path: &Path, text: String) -> Result<Self::Value, Self::Error>;
    /// The SHA-256 identifying `value` when it depends on more than the
    /// file's bytes (the web config's certificates); `None`: the file's.
    /// A loader returning `Some` is always built, so a rotated certificate
    /// behind an unchanged file is seen.
    fn identity(&self, _value: &Self::Value) -> Option<String> {
        None
    }
    /// Whether [`Load::identity`] can differ from the file's hash.
    fn reads_other_files(&self) -> bool {
        false
    }
    /// Put `value` in force, all or nothing: an error changes nothing and
    /// fails the reload. Returns a one-line summary for the log.
    fn apply(&self, value: Self::Value, change: &Change<'_>) -> Result<String, Self::Error>;
    /// The last attempt failed (`Some(one line)`) or succeeded again after
    /// failing (`None`).
    fn report(&self, _failure: Option<String>) {}
    /// The file's status families.
    fn status(&self) -> &ReloadStatus;
    /// Files besides the reloaded one whose directories the watcher
    /// watches (the web config's certificates).
    fn other_files(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// What a reload replaces: the hashes of what was and what will be in
/// force, and why.
#[derive(Clone, Copy, Debug)]
pub struct Change<'a> {
    pub old: Option<&'a str>,
    pub sha256: &'a str,
    pub trigger: ReloadTrigger,
}

#[derive(Debug, Default)]
struct InForce {
    /// SHA-256 of what is in force.
    sha256: Option<String>,
    /// Identifies the last failure (content hash or error text) while the
    /// last attempt failed; `None` after a success.
    failure: Option<String>,
}

/// Re-reads one file and puts a changed, good content in force; anything
/// else leaves the last good one.
pub struct LastGood<L: Load> {
    path: PathBuf,
    names: Names,
    loader: Arc<L>,
    /// Held for a whole reload, so concurrent triggers are serialised. Never
    /// held across work that can hang: the read and the build each run on a
    /// helper thread and are waited for at most `deadline`.
    state: Mutex<InForce>,
    /// Reads the file with a deadline, one read in flight at most.
    reader: DeadlineReader,
    /// A build that timed out and still runs: the next fails at once.
    building: Arc<AtomicBool>,
    /// How long a read (and, separately, a build) may take.
    deadline: Duration,
    /// How many times the file was read, for diagnostics and tests.
    reads: AtomicU64,
    /// The runtime's clock: when a load succeeded.
    clock: Clock,
}

impl<L: Load> fmt::Debug for LastGood<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // try_lock: formatting must not deadlock inside a reload.
        let in_force = self.state.try_lock().ok().and_then(|s| s.sha256.clone());
        f.debug_struct("LastGood")
            .field("what", &self.names.what)
            .field("path", &self.path)
            .field("sha256_in_force", &in_force)
            .finish_non_exhaustive()
    }
}

impl<L: Load> LastGood<L> {
    /// A reloader of `path` through `loader`. `in_force` is the hash of what
    /// the loader already has in force (loaded at start-up), shown by the
    /// metrics as a successful load; with `None` the first
    /// [`LastGood::reload_now`] applies whatever the file holds.
    pub fn new(
        path: impl Into<PathBuf>,
        names: Names,
        loader: L,
        in_force: Option<String>,
        clock: Clock,
    ) -> LastGood<L> {
        if in_force.is_some() {
            loader.status().mark_success(false, clock.wall());
        }
        LastGood {
            path: path.into(),
            names,
            loader: Arc::new(loader),
            state: Mutex::new(InForce {
                sha256: in_force,
                failure: None,
            }),
            reader: DeadlineReader::default(),
            building: Arc::new(AtomicBool::new(false)),
            deadline: DEFAULT_RELOAD_DEADLINE,
            reads: AtomicU64::new(0),
            clock,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn names(&self) -> Names {
        self.names
    }

    pub fn loader(&self) -> &L {
        &self.loader
    }

    /// The file and the others the loader names, for the watcher.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.path.clone()];
        files.extend(self.loader.other_files());
        files
    }

    /// SHA-256 (hex) of what is in force, if anything is.
    pub fn sha256_in_force(&self) -> Option<String> {
        self.lock().sha256.clone()
    }

    /// How many times the file has been read (every trigger reads it once).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InForce> {
        self.state.locked()
    }

    /// Re-read the file now; apply it if it changed and builds. Blocking
    /// (a small file read and a build, each bounded by the deadline): from
    /// async code, call it through `tokio::task::spawn_blocking` as the
    /// watcher and the handler do.
    pub fn reload_now(&self, trigger: ReloadTrigger) -> Result<ReloadOutcome, LoadError<L::Error>> {
        let mut state = self.lock();
        self.reads.fetch_add(1, Ordering::Relaxed);
        let read = self
            .reader
            .read(&self.path, self.loader.limit(), self.deadline);
        let (text, file_sha) = match self.decode(read) {
            Ok(read) => read,
            Err(e) => {
                let key = e.to_string();
                return Err(self.fail(&mut state, trigger, key, e));
            }
        };
        let built = if !self.loader.reads_other_files() && self.is_in_force(&state, &file_sha) {
            None
        } else {
            match self.build_bounded(text) {
                Ok(v) => Some(v),
                // The content identifies an invalid file: repeats are quiet.
                Err(e @ LoadError::Invalid(_)) if !self.loader.reads_other_files() => {
                    return Err(self.fail(&mut state, trigger, file_sha, e));
                }
                Err(e) => {
                    let key = e.to_string();
                    return Err(self.fail(&mut state, trigger, key, e));
                }
            }
        };
        let sha = built
            .as_ref()
            .and_then(|v| self.loader.identity(v))
            .unwrap_or(file_sha);
        let value = match built {
            Some(v) if !self.is_in_force(&state, &sha) => v,
            _ => {
                if state.failure.take().is_some() {
                    // The file went bad and came back to what is in force.
                    tracing::info!(
                        path = %self.path.display(), sha256 = %sha, %trigger,
                        "{} file is back to the one in force; reload error cleared",
                        self.names.what
                    );
                    self.loader.status().mark_success(true, self.clock.wall());
                    self.loader.report(None);
                }
                return Ok(ReloadOutcome::Unchanged { sha256: sha });
            }
        };
        let change = Change {
            old: state.sha256.as_deref(),
            sha256: &sha,
            trigger,
        };
        let summary = match self.loader.apply(value, &change) {
            Ok(s) => s,
            Err(e) => {
                let e = LoadError::Invalid(e);
                let key = e.to_string();
                return Err(self.fail(&mut state, trigger, key, e));
            }
        };
        self.loader.status().mark_success(true, self.clock.wall());
        if state.failure.take().is_some() {
            self.loader.report(None);
        }
        tracing::info!(
            path = %self.path.display(), sha256 = %sha, %trigger, %summary,
            "{} reloaded", self.names.what
        );
        state.sha256 = Some(sha.clone());
        Ok(ReloadOutcome::Applied { sha256: sha })
    }

    fn is_in_force(&self, state: &InForce, sha: &str) -> bool {
        state.sha256.as_deref() == Some(sha)
    }

    fn decode(
        &self,
        read: Result<Vec<u8>, ReadError>,
    ) -> Result<(String, String), LoadError<L::Error>> {
        decode(self.names, &self.path, read)
    }

    /// Build on a helper thread: a panic or a build slower than the
    /// deadline is a failed reload, not a dead or wedged reloader; while a
    /// timed-out build still runs, the next fails at once instead of
    /// parking one more thread.
    fn build_bounded(&self, text: String) -> Result<L::Value, LoadError<L::Error>> {
        let (names, path) = (self.names, self.path.clone());
        if self.building.swap(true, Ordering::AcqRel) {
            return Err(LoadError::Busy { names, path });
        }
        let (loader, flag, p) = (self.loader.clone(), self.building.clone(), path.clone());
        let work = move || {
            let r = loader.build(&p, text);
            flag.store(false, Ordering::Release);
            r
        };
        match run_with_deadline("reload-build", self.deadline, work) {
            Ok(r) => r.map_err(LoadError::Invalid),
            Err(DeadlineError::TimedOut { after }) => {
                Err(LoadError::TimedOut { names, path, after })
            }
            Err(e) => {
                // The thread is gone (it panicked or never started).
                self.building.store(false, Ordering::Release);
                Err(LoadError::Panicked {
                    names,
                    path,
                    message: e.to_string(),
                })
            }
        }
    }

    fn fail(
        &self,
        state: &mut InForce,
        trigger: ReloadTrigger,
        key: String,
        error: LoadError<L::Error>,
    ) -> LoadError<L::Error> {
        let repeat = trigger.is_automatic() && state.failure.as_deref() == Some(key.as_str());
        let line = error.one_line();
        let path = error.file(&self.path).display();
        if repeat {
            tracing::debug!(%path, %trigger, error = %line,
                "{} file still unusable", self.names.what);
        } else {
            tracing::warn!(
                %path, %trigger, error = %line,
                "{} reload failed; {}", self.names.what, self.names.kept
            );
            self.loader.status().mark_failure();
        }
        state.failure = Some(key);
        self.loader.report(Some(line));
        error
    }
}

/// A read's bytes as text and their SHA-256.
fn decode<E>(
    names: Names,
    path: &Path,
    read: Result<Vec<u8>, ReadError>,
) -> Result<(String, String), LoadError<E>> {
    let bytes = read.map_err(|source| LoadError::Read {
        names,
        path: path.to_path_buf(),
        source,
    })?;
    let sha = hex::encode(Sha256::digest(&bytes));
    let text = String::from_utf8(bytes).map_err(|e| LoadError::NotUtf8 {
        names,
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    Ok((text, sha))
}

#[cfg(test)]
mod tests {
    //! The mechanism itself, through a loader whose build does what the
    //! file says: `ok`, `panic`, or `block` until released. The reads are
    //! of real files; the policy's, web config's and `--config`'s loaders
    //! are tested through `serve` in `tests/`.
    use super::*;
    use std::sync::mpsc;

    #[derive(Debug, thiserror::Error)]
    #[error("refused")]
    struct Refused;
    impl Problem for Refused {}

    struct Scripted {
        status: ReloadStatus,
        applied: Mutex<Vec<String>>,
        release: Mutex<Option<mpsc::Receiver<()>>>,
    }

    impl Load for Scripted {
        type Value = String;
        type Error = Refused;
        fn limit(&self) -> u64 {
            1024
        }
        fn build(&self, _: &Path, text: String) -> Result<String, Refused> {
            match text.trim() {
                "panic" => panic!("the build panicked"),
                "block" => {
                    let rx = self.release.lock().unwrap().take();
                    if let Some(rx) = rx {
                        let _ = rx.recv();
                    }
                    Ok(text)
                }
                "refuse" => Err(Refused),
                _ => Ok(text),
            }
        }
        fn apply(&self, v: String, _: &Change<'_>) -> Result<String, Refused> {
            self.applied.lock().unwrap().push(v);
            Ok(String::new())
        }
        fn status(&self) -> &ReloadStatus {
            &self.status
        }
    }

    const NAMES: Names = Names {
        what: "test file",
        kept: "the previous one stays",
    };

    fn fixture(
        content: &str,
        deadline: Duration,
    ) -> (
        tempfile::TempDir,
        PathBuf,
        LastGood<Scripted>,
        mpsc::Sender<()>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, content).unwrap();
        let (tx, rx) = mpsc::channel();
        let loader = Scripted {
            status: ReloadStatus::default(),
            applied: Mutex::new(Vec::new()),
            release: Mutex::new(Some(rx)),
        };
        let mut r = LastGood::new(&path, NAMES, loader, None, Clock::node());
        r.deadline = deadline;
        (dir, path, r, tx)
    }

    #[test]
    fn a_panicking_build_is_a_failed_reload_and_the_last_good_stays() {
        let (_d, path, r, _tx) = fixture("one", DEFAULT_RELOAD_DEADLINE);
        assert!(matches!(
            r.reload_now(ReloadTrigger::Manual),
            Ok(ReloadOutcome::Applied { .. })
        ));
        std::fs::write(&path, "panic").unwrap();
        let e = r.reload_now(ReloadTrigger::Manual).unwrap_err();
        assert!(matches!(e, LoadError::Panicked { .. }), "{e}");
        assert!(e.to_string().contains("the build panicked"), "{e}");
        assert_eq!(*r.loader().applied.lock().unwrap(), ["one"]);
        assert!(!r.loader().status.last_reload_successful());
        assert_eq!(r.loader().status.reloads(false), 1);
        // The reloader still works.
        std::fs::write(&path, "two").unwrap();
        assert!(r.reload_now(ReloadTrigger::Manual).is_ok());
        assert_eq!(*r.loader().applied.lock().unwrap(), ["one", "two"]);
    }

    #[test]
    fn a_stuck_build_times_out_and_the_next_fails_at_once_until_it_ends() {
        let (_d, path, r, release) = fixture("block", Duration::from_millis(100));
        let e = r.reload_now(ReloadTrigger::Manual).unwrap_err();
        assert!(matches!(e, LoadError::TimedOut { .. }), "{e}");
        std::fs::write(&path, "two").unwrap();
        let e = r.reload_now(ReloadTrigger::Manual).unwrap_err();
        assert!(matches!(e, LoadError::Busy { .. }), "{e}");
        release.send(()).unwrap();
        // The flag clears when the stuck build returns (bounded wait).
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while r.building.load(Ordering::Acquire) {
            assert!(
                std::time::Instant::now() < end,
                "the stuck build never ended"
            );
            std::thread::yield_now();
        }
        assert!(r.reload_now(ReloadTrigger::Manual).is_ok());
        assert_eq!(*r.loader().applied.lock().unwrap(), ["two"]);
    }

    #[test]
    fn an_automatic_trigger_counts_the_same_failure_once_an_explicit_one_always() {
        let (_d, _path, r, _tx) = fixture("refuse", DEFAULT_RELOAD_DEADLINE);
        for t in [
            ReloadTrigger::Watch,
            ReloadTrigger::Resync,
            ReloadTrigger::Watch,
        ] {
            assert!(matches!(r.reload_now(t), Err(LoadError::Invalid(Refused))));
        }
        assert_eq!(r.loader().status.reloads(false), 1);
        r.reload_now(ReloadTrigger::Http).unwrap_err();
        assert_eq!(r.loader().status.reloads(false), 2);
    }
}
