//! Hot reload of the policy file, keeping the last good policy in force.
//!
//! The [`Reloader`] owns the policy path and the hash of the content in force.
//! [`Reloader::reload_now`] re-reads the file by its path (following the
//! kubelet's `policy -> ..data/policy` symlinks), and only when the content
//! differs compiles it completely and hands the new [`Policy`] to a
//! [`PolicySink`] (the engine). An unreadable or invalid file never replaces
//! the policy in force: the failure is logged with `file:line:col`, reported to
//! the sink and shown by the reload metrics ([`ReloadMetrics`]).
//!
//! Triggers live beside it: [`spawn_watcher`] (inotify on the file's parent
//! directory, SIGHUP, a periodic re-read) and [`reload_handler`] for
//! `POST /-/reload`. See docs/reload.md.

mod http;
mod metrics;
mod watch;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};

pub use http::reload_handler;
pub use metrics::ReloadMetrics;
pub use watch::{
    WatchOptions, WatcherHandle, spawn_watcher, spawn_watcher_named, spawn_watcher_supervised,
};

use crate::bounded_read::{DeadlineReader, ReadError, read_bounded};
use crate::policy::{Diagnostics, Policy};
use crate::signals::Catalogue;
use crate::supervise::{DeadlineError, run_with_deadline};

/// The largest policy file read: the policy language's own size limit.
pub const MAX_POLICY_FILE_BYTES: u64 = crate::policy::limits::MAX_POLICY_BYTES as u64;

/// How long one reload (read and compile) may take before it counts as failed.
pub const DEFAULT_RELOAD_DEADLINE: Duration = Duration::from_secs(5);

/// Where a successfully compiled policy goes (the engine implements this).
///
/// Both methods are called with the reloader's lock held, so calls never
/// interleave; they must not call back into the [`Reloader`].
pub trait PolicySink: Send + Sync + 'static {
    /// Put `policy` in force. Only ever called with a policy that compiled.
    fn apply(&self, policy: Arc<Policy>);
    /// The last reload attempt failed (`Some(one-line reason)`, starting with
    /// `file:line:col` for an invalid policy), or succeeded again (`None`).
    fn reload_failed(&self, error: Option<String>);
}

/// What asked for a reload; shown in logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadTrigger {
    /// A change seen in the policy file's directory (inotify).
    Watch,
    /// The periodic safety-net re-read.
    Resync,
    /// SIGHUP.
    Signal,
    /// `POST /-/reload`.
    Http,
    /// A direct call, e.g. from a test or at start-up.
    Manual,
}

impl ReloadTrigger {
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadTrigger::Watch => "watch",
            ReloadTrigger::Resync => "resync",
            ReloadTrigger::Signal => "signal",
            ReloadTrigger::Http => "http",
            ReloadTrigger::Manual => "manual",
        }
    }

    /// Automatic triggers repeat on their own; a failure they see again
    /// unchanged is not logged or counted a second time.
    fn is_automatic(self) -> bool {
        matches!(self, ReloadTrigger::Watch | ReloadTrigger::Resync)
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
    /// The file's content differed and its policy is now in force.
    Applied { sha256: String },
    /// The file holds the policy already in force; nothing was done.
    Unchanged { sha256: String },
}

/// Why a reload did not change the policy in force.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(
        "cannot read policy file {path}: {source}; the previous policy stays in force \
         (check the file exists and, in Kubernetes, that the ConfigMap has the key)"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: ReadError,
    },
    #[error(
        "policy reload of {path} did not finish within {after:?}; the previous policy stays in force"
    )]
    TimedOut { path: PathBuf, after: Duration },
    #[error("policy reload of {path} failed ({message}); the previous policy stays in force")]
    Panicked { path: PathBuf, message: String },
    #[error(
        "policy file {path} is not valid UTF-8 (first bad byte at offset {offset}); \
         the previous policy stays in force"
    )]
    NotUtf8 { path: PathBuf, offset: usize },
    #[error("policy is invalid, the previous policy stays in force: {}", .0.one_line())]
    Invalid(Box<Diagnostics>),
}

impl ReloadError {
    /// The full text for a human: for an invalid policy every problem with the
    /// source line and carets; otherwise the one-line message.
    pub fn full_text(&self) -> String {
        match self {
            ReloadError::Invalid(d) => d.to_string(),
            other => other.to_string(),
        }
    }

    /// One line, for logs and for [`PolicySink::reload_failed`]. For an invalid
    /// policy this starts with `file:line:col`.
    pub fn one_line(&self) -> String {
        match self {
            ReloadError::Invalid(d) => d.one_line(),
            other => other.to_string(),
        }
    }
}

/// Read and compile the policy at `path`. Used by [`Reloader`] and suitable
/// for the initial load at start-up, so both report errors the same way.
pub fn load(path: &Path, catalogue: &Catalogue) -> Result<Policy, ReloadError> {
    let (text, _) = read_policy_file(path)?;
    compile(path, &text, catalogue)
}

/// Read the policy file as the reloader does (non-blocking open, regular
/// files only, at most [`MAX_POLICY_FILE_BYTES`]): its text and SHA-256.
pub fn read_policy_file(path: &Path) -> Result<(String, String), ReloadError> {
    decode(path, read_bounded(path, MAX_POLICY_FILE_BYTES))
}

fn decode(path: &Path, read: Result<Vec<u8>, ReadError>) -> Result<(String, String), ReloadError> {
    let bytes = read.map_err(|source| ReloadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let sha = hex::encode(Sha256::digest(&bytes));
    let text = String::from_utf8(bytes).map_err(|e| ReloadError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    Ok((text, sha))
}

fn compile(path: &Path, text: &str, catalogue: &Catalogue) -> Result<Policy, ReloadError> {
    Policy::compile(&path.display().to_string(), text, catalogue)
        .map_err(|d| ReloadError::Invalid(Box::new(d)))
}

#[derive(Debug, Default)]
struct InForce {
    /// SHA-256 of the content whose policy is in force.
    sha256: Option<String>,
    /// Identifies the last failure (content hash or error text) while the
    /// last attempt failed; `None` after a success.
    failure: Option<String>,
}

/// Re-reads the policy file and puts a changed, valid policy in force.
pub struct Reloader {
    path: PathBuf,
    catalogue: Arc<Catalogue>,
    sink: Arc<dyn PolicySink>,
    metrics: ReloadMetrics,
    /// Held for a whole reload, so concurrent triggers are serialised. Never
    /// held across a read that can hang: the read and the compile each run
    /// on a helper thread and are waited for at most `deadline`.
    state: Mutex<InForce>,
    /// Reads the file with a deadline, one read in flight at most.
    reader: DeadlineReader,
    /// How long a read (and, separately, a compile) may take.
    deadline: Duration,
    /// How many times the file was read, for diagnostics and tests.
    reads: AtomicU64,
}

impl fmt::Debug for Reloader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // try_lock: formatting must not deadlock inside a reload.
        let in_force = self.state.try_lock().ok().and_then(|s| s.sha256.clone());
        f.debug_struct("Reloader")
            .field("path", &self.path)
            .field("sha256_in_force", &in_force)
            .finish_non_exhaustive()
    }
}

impl Reloader {
    /// A reloader for the policy at `path`, checked against `catalogue`.
    ///
    /// `initial` is the policy the sink already has (loaded at start-up, e.g.
    /// with [`load`]); its hash becomes the one in force and the metrics show
    /// it as a successful load. With `None`, the first [`Reloader::reload_now`]
    /// applies whatever the file holds.
    pub fn new(
        path: impl Into<PathBuf>,
        catalogue: Arc<Catalogue>,
        sink: Arc<dyn PolicySink>,
        metrics: ReloadMetrics,
        initial: Option<&Policy>,
    ) -> Reloader {
        let mut state = InForce::default();
        if let Some(p) = initial {
            state.sha256 = Some(p.sha256().to_string());
            metrics.set_in_force(None, p.sha256());
            metrics.mark_success(false);
        }
        Reloader {
            path: path.into(),
            catalogue,
            sink,
            metrics,
            state: Mutex::new(state),
            reader: DeadlineReader::default(),
            deadline: DEFAULT_RELOAD_DEADLINE,
            reads: AtomicU64::new(0),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// SHA-256 (hex) of the content in force, if any policy is.
    pub fn sha256_in_force(&self) -> Option<String> {
        self.lock().sha256.clone()
    }

    /// How many times the file has been read (every trigger reads it once).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    pub fn metrics(&self) -> &ReloadMetrics {
        &self.metrics
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InForce> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Re-read the file now; apply it if it changed and compiles. Blocking
    /// (a small file read and a compile, each bounded by the deadline): from
    /// async code, call it through `tokio::task::spawn_blocking` as the
    /// watcher and handler do. A read or compile that exceeds the deadline or
    /// panics is a failed reload; the policy in force stays.
    pub fn reload_now(&self, trigger: ReloadTrigger) -> Result<ReloadOutcome, ReloadError> {
        let mut state = self.lock();
        self.reads.fetch_add(1, Ordering::Relaxed);
        let read = self
            .reader
            .read(&self.path, MAX_POLICY_FILE_BYTES, self.deadline);
        let (text, sha) = match decode(&self.path, read) {
            Ok(read) => read,
            Err(e) => {
                let key = e.to_string();
                return Err(self.fail(&mut state, trigger, key, e));
            }
        };
        if state.sha256.as_deref() == Some(sha.as_str()) {
            if state.failure.take().is_some() {
                // The file went bad and came back to the policy in force.
                tracing::info!(
                    path = %self.path.display(), sha256 = %sha, %trigger,
                    "policy file is back to the policy in force; reload error cleared"
                );
                self.metrics.mark_success(true);
                self.sink.reload_failed(None);
            }
            return Ok(ReloadOutcome::Unchanged { sha256: sha });
        }
        let policy = match self.compile_bounded(text) {
            Ok(p) => Arc::new(p),
            Err(e @ ReloadError::Invalid(_)) => return Err(self.fail(&mut state, trigger, sha, e)),
            Err(e) => {
                let key = e.to_string();
                return Err(self.fail(&mut state, trigger, key, e));
            }
        };
        let summary = policy.summary();
        self.sink.apply(policy);
        self.metrics.set_in_force(state.sha256.as_deref(), &sha);
        self.metrics.mark_success(true);
        if state.failure.take().is_some() {
            self.sink.reload_failed(None);
        }
        tracing::info!(
            path = %self.path.display(), sha256 = %sha, %trigger, %summary,
            "policy reloaded"
        );
        state.sha256 = Some(sha.clone());
        Ok(ReloadOutcome::Applied { sha256: sha })
    }

    /// Compile on a helper thread: a panic or a compile slower than the
    /// deadline is a failed reload, not a dead or wedged reloader.
    fn compile_bounded(&self, text: String) -> Result<Policy, ReloadError> {
        let (path, catalogue) = (self.path.clone(), self.catalogue.clone());
        let work = move || compile(&path, &text, &catalogue);
        match run_with_deadline("policy-compile", self.deadline, work) {
            Ok(r) => r,
            Err(DeadlineError::TimedOut { after }) => Err(ReloadError::TimedOut {
                path: self.path.clone(),
                after,
            }),
            Err(e) => Err(ReloadError::Panicked {
                path: self.path.clone(),
                message: e.to_string(),
            }),
        }
    }

    fn fail(
        &self,
        state: &mut InForce,
        trigger: ReloadTrigger,
        key: String,
        error: ReloadError,
    ) -> ReloadError {
        let repeat = trigger.is_automatic() && state.failure.as_deref() == Some(key.as_str());
        if repeat {
            tracing::debug!(path = %self.path.display(), %trigger, error = %error.one_line(),
                "policy file still unusable");
        } else {
            tracing::warn!(
                path = %self.path.display(), %trigger, error = %error.one_line(),
                "policy reload failed; the previous policy stays in force"
            );
            self.metrics.mark_failure();
        }
        state.failure = Some(key);
        self.sink.reload_failed(Some(error.one_line()));
        error
    }
}
