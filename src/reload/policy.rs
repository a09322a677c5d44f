//! The policy file as a [`Load`]: compile against the catalogue, hand the
//! compiled [`Policy`] to a [`PolicySink`] (the engine's live slot, or its
//! candidate slot), and keep `etcd_readiness_policy_info` on the hash in
//! force. Also the start-up read ([`load`]), so that both report errors the
//! same way.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{
    Change, LastGood, Load, LoadError, MAX_POLICY_FILE_BYTES, Names, Problem, ReloadError,
    ReloadMetrics, ReloadStatus,
};
use crate::outside::bounded_read::read_bounded;
use crate::runtime::clock::Clock;
use etcd_readiness_policy::policy::{Diagnostics, Policy};
use etcd_readiness_policy::signals::Catalogue;

/// Where a successfully compiled policy goes (the engine implements this).
///
/// Both methods are called with the reloader's lock held, so calls never
/// interleave; they must not call back into the [`LastGood`].
pub trait PolicySink: Send + Sync + 'static {
    /// Put `policy` in force. Only ever called with a policy that compiled.
    fn apply(&self, policy: Arc<Policy>);
    /// The last reload attempt failed (`Some(one-line reason)`, starting with
    /// `file:line:col` for an invalid policy), or succeeded again (`None`).
    fn reload_failed(&self, error: Option<String>);
}

const POLICY: Names = Names {
    what: "policy",
    kept: "the previous policy stays in force",
};

const CANDIDATE: Names = Names {
    what: "candidate policy",
    kept: "the previous candidate stays (the policy in force is not affected)",
};

impl Problem for Box<Diagnostics> {
    fn one_line(&self) -> String {
        self.as_ref().one_line()
    }
    fn full_text(&self) -> String {
        self.to_string()
    }
}

/// A policy file compiled against `catalogue` into `sink`.
pub struct PolicyFile {
    catalogue: Arc<Catalogue>,
    sink: Arc<dyn PolicySink>,
    metrics: ReloadMetrics,
}

impl Load for PolicyFile {
    type Value = Policy;
    type Error = Box<Diagnostics>;

    fn limit(&self) -> u64 {
        MAX_POLICY_FILE_BYTES
    }

    fn build(&self, path: &Path, text: String) -> Result<Policy, Box<Diagnostics>> {
        Policy::compile(&path.display().to_string(), &text, &self.catalogue).map_err(Box::new)
    }

    fn apply(&self, policy: Policy, change: &Change<'_>) -> Result<String, Box<Diagnostics>> {
        let summary = policy.summary();
        self.sink.apply(Arc::new(policy));
        self.metrics.set_in_force(change.old, change.sha256);
        Ok(summary)
    }

    fn report(&self, failure: Option<String>) {
        self.sink.reload_failed(failure);
    }

    fn status(&self) -> &ReloadStatus {
        self.metrics.status()
    }
}

impl LastGood<PolicyFile> {
    /// The reloader of the policy at `path`, checked against `catalogue`.
    ///
    /// `initial` is the policy the sink already has (loaded at start-up, e.g.
    /// with [`load`]); its hash becomes the one in force and the metrics show
    /// it as a successful load. With `None`, the first reload applies
    /// whatever the file holds.
    pub fn policy(
        path: impl Into<PathBuf>,
        catalogue: Arc<Catalogue>,
        sink: Arc<dyn PolicySink>,
        metrics: ReloadMetrics,
        initial: Option<&Policy>,
        clock: Clock,
    ) -> LastGood<PolicyFile> {
        let in_force = initial.map(|p| {
            metrics.set_in_force(None, p.sha256());
            p.sha256().to_string()
        });
        let loader = PolicyFile {
            catalogue,
            sink,
            metrics,
        };
        LastGood::new(path, POLICY, loader, in_force, clock)
    }

    /// The candidate policy's reloader (`--policy.candidate`): the same, with
    /// messages that say a failure leaves the live policy alone; its first
    /// reload applies whatever the file holds.
    pub fn candidate(
        path: impl Into<PathBuf>,
        catalogue: Arc<Catalogue>,
        sink: Arc<dyn PolicySink>,
        metrics: ReloadMetrics,
        clock: Clock,
    ) -> LastGood<PolicyFile> {
        let loader = PolicyFile {
            catalogue,
            sink,
            metrics,
        };
        LastGood::new(path, CANDIDATE, loader, None, clock)
    }

    pub fn metrics(&self) -> &ReloadMetrics {
        &self.loader().metrics
    }
}

/// Read and compile the policy at `path`, reporting errors as a reload does.
pub fn load(path: &Path, catalogue: &Catalogue) -> Result<Policy, ReloadError> {
    let (text, _) = read_policy_file(path)?;
    Policy::compile(&path.display().to_string(), &text, catalogue)
        .map_err(|d| LoadError::Invalid(Box::new(d)))
}

/// Read the policy file as the reloader does (non-blocking open, regular
/// files only, at most [`MAX_POLICY_FILE_BYTES`]): its text and SHA-256.
pub fn read_policy_file(path: &Path) -> Result<(String, String), ReloadError> {
    super::decode(POLICY, path, read_bounded(path, MAX_POLICY_FILE_BYTES))
}
