//! The files `serve` follows, each with its reloader and watcher: the
//! policy (into the engine and the etcd reads' floor), the candidate policy,
//! the web config, the `--config` scrape sources, the sources' TLS files and
//! etcd's password file; and what `POST /-/reload` reloads.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::graph::{Followed, Wiring};
use super::metrics::FileMetrics;
use crate::engine::{CandidateMetrics, CandidateSink, EngineHandle};
use crate::reload::{
    LastGood, Load, ReloadMetrics, ReloadStatus, ReloadTrigger, Reloadable, Reloadables, Reloader,
    WatchOptions, WatcherHandle,
};
use crate::runtime::Runtime;
use crate::sources::etcd::ReadFloor;
use crate::sources::etcd_auth::PasswordFile;
use crate::sources::scrape_set::{PreparedSet, ScrapeReloader};
use crate::sources::tls_material::{CredentialFiles, Credentials, CredentialsReloader, TlsKind};
use crate::web::{WebConfig, WebFile, WebMetrics, WebReloader, WebState};
use etcd_readiness_policy::policy::Policy;
use etcd_readiness_policy::signals::Catalogue;

/// Where a reloaded policy goes: the engine, and the etcd reads' deadline,
/// which follows what the policy compares their latency with.
struct LivePolicy {
    engine: EngineHandle,
    read_floor: ReadFloor,
}

impl crate::reload::PolicySink for LivePolicy {
    fn apply(&self, policy: Arc<Policy>) {
        self.read_floor.follow(&policy);
        self.engine.set_policy(policy);
    }

    fn reload_failed(&self, error: Option<String>) {
        self.engine.set_reload_error(error);
    }
}

/// The reloaders of the files `serve` follows, their watchers, and what
/// `POST /-/reload` reloads.
#[derive(Default)]
pub(super) struct Reloaders {
    pub(super) policy: Option<Arc<Reloader>>,
    pub(super) candidate: Option<Arc<Reloader>>,
    pub(super) web: Option<Arc<WebReloader>>,
    pub(super) scrape: Option<Arc<ScrapeReloader>>,
    pub(super) tls: Vec<Arc<CredentialsReloader>>,
    pub(super) password: Option<Arc<crate::sources::etcd_auth::PasswordReloader>>,
    pub(super) watchers: Vec<WatcherHandle>,
}

impl Reloaders {
    /// In the order `POST /-/reload` reports them.
    pub(super) fn reloadables(&self) -> Reloadables {
        let mut all = Reloadables::default();
        let web = self.web.clone().map(|r| r as Arc<dyn Reloadable>);
        let scrape = self.scrape.clone().map(|r| r as Arc<dyn Reloadable>);
        let policy = self.policy.clone().map(|r| r as Arc<dyn Reloadable>);
        let candidate = self.candidate.clone().map(|r| r as Arc<dyn Reloadable>);
        for r in [web, scrape, policy, candidate].into_iter().flatten() {
            all.push(r);
        }
        for r in &self.tls {
            all.push(r.clone() as Arc<dyn Reloadable>);
        }
        if let Some(r) = &self.password {
            all.push(r.clone() as Arc<dyn Reloadable>);
        }
        all
    }

    /// Watch `reloader`'s files as the supervised task `name`.
    fn watch<L: Load>(&mut self, name: &str, reloader: &Arc<LastGood<L>>, inputs: &Inputs) {
        self.watch_woken(name, reloader, inputs, None);
    }

    /// [`Self::watch`], also re-reading when `wake` is notified.
    fn watch_woken<L: Load>(
        &mut self,
        name: &str,
        reloader: &Arc<LastGood<L>>,
        inputs: &Inputs,
        wake: Option<Arc<tokio::sync::Notify>>,
    ) {
        let opts = WatchOptions {
            resync_interval: inputs.resync,
            wake,
            ..WatchOptions::default()
        };
        self.watchers.push(crate::reload::spawn_watcher(
            name,
            reloader.clone(),
            opts,
            &inputs.runtime.supervisor,
        ));
    }

    /// A set of the sources' TLS files: re-read on a change, periodically,
    /// on SIGHUP and when a handshake with it is refused.
    fn start_tls(
        &mut self,
        creds: &Credentials,
        status: Option<ReloadStatus>,
        files: &FileMetrics,
        inputs: &Inputs,
    ) {
        let r = CredentialFiles::reloader(
            creds.clone(),
            status.unwrap_or_default(),
            files.tls.clone(),
            inputs.runtime.clock.clone(),
        );
        let wake = Some(creds.recheck());
        self.watch_woken(creds.kind().watcher(), &r, inputs, wake);
        self.tls.push(r);
    }

    /// The policy in force, from --policy: watched (ConfigMap-safe), re-read
    /// periodically, on SIGHUP and on POST /-/reload. The built-in policy
    /// (`path` `None`) is shown as loaded without a reloader.
    fn start_policy(&mut self, path: Option<&Path>, metrics: ReloadMetrics, inputs: &Inputs) {
        let initial = inputs.engine.policy_status().policy.clone();
        let Some(path) = path else {
            metrics.loaded(initial.sha256(), inputs.runtime.clock.wall());
            return;
        };
        let sink = Arc::new(LivePolicy {
            engine: inputs.engine.clone(),
            read_floor: inputs.read_floor.clone(),
        });
        let r = Arc::new(Reloader::policy(
            path,
            inputs.catalogue.clone(),
            sink,
            metrics,
            Some(&initial),
            inputs.runtime.clock.clone(),
        ));
        self.watch("policy-watcher", &r, inputs);
        self.policy = Some(r);
    }

    /// The web config, into the main listener's [`WebState`].
    fn start_web(
        &mut self,
        config: &WebConfig,
        metrics: WebMetrics,
        inputs: &Inputs,
    ) -> Arc<WebState> {
        tracing::info!(path = %config.path.display(), summary = %config.summary(), "web config loaded");
        let web = WebState::new(config.clone(), metrics, inputs.runtime.clock.clone());
        let r = WebFile::reloader(web.clone());
        self.watch("web-config-watcher", &r, inputs);
        self.web = Some(r);
        web
    }
}

/// What the reloaders are started from: the graph (whose files they
/// follow), and the parts those files configure.
pub(super) struct Inputs<'a> {
    pub(super) wiring: &'a Wiring,
    pub(super) catalogue: &'a Arc<Catalogue>,
    pub(super) engine: &'a EngineHandle,
    pub(super) runtime: &'a Runtime,
    /// What the policy in force compares the etcd reads' latency with.
    pub(super) read_floor: &'a ReadFloor,
    /// How often a followed file is re-read when nothing says it changed.
    pub(super) resync: Duration,
}

/// A reloader and a watcher for each file of [`Wiring::files`], in its
/// order, and nothing else: the sources' TLS files (each set's
/// [`Credentials`] as the prepared sources hold them), etcd's password file,
/// the `--config` scrape sources (whose tasks their reloader owns), the
/// policy, the candidate policy, the web config.
pub(super) async fn start_reloaders(
    inputs: &Inputs<'_>,
    mut files: FileMetrics,
    (scrape, credentials): (Option<PreparedSet>, Vec<Credentials>),
) -> (Reloaders, Option<Arc<WebState>>) {
    let mut reloaders = Reloaders::default();
    let mut scrape = scrape;
    let mut web = None;
    let creds = |kind| credentials.iter().find(|c| c.kind() == kind);
    for file in &inputs.wiring.files {
        match file {
            Followed::EtcdTls(_) => {
                if let Some(c) = creds(TlsKind::Etcd) {
                    reloaders.start_tls(c, files.etcd_tls.take(), &files, inputs);
                }
            }
            Followed::BackupTls(_) => {
                if let Some(c) = creds(TlsKind::Backup) {
                    reloaders.start_tls(c, files.backup_tls.take(), &files, inputs);
                }
            }
            Followed::EtcdPassword(auth) => {
                let status = files.etcd_password.take().unwrap_or_default();
                let r = PasswordFile::reloader(auth.clone(), status, inputs.runtime.clock.clone());
                reloaders.watch("etcd-password-watcher", &r, inputs);
                reloaders.password = Some(r);
            }
            // The scrape sources run under their reloader, which restarts
            // those a changed --config changes.
            Followed::ScrapeConfig(path, sha) => {
                if let Some(prepared) = scrape.take() {
                    let r = prepared.start().reloader(path.clone(), sha.clone());
                    reloaders.watch("scrape-config-watcher", &r, inputs);
                    reloaders.scrape = Some(r);
                }
            }
            Followed::Policy(path) => {
                reloaders.start_policy(path.as_deref(), files.policy.clone(), inputs)
            }
            Followed::Candidate(path) => {
                if let Some(metrics) = files.candidate.take() {
                    let r = start_candidate(path, inputs, metrics).await;
                    reloaders.watch("candidate-watcher", &r, inputs);
                    reloaders.candidate = Some(r);
                }
            }
            Followed::Web(config) => {
                if let Some(metrics) = files.web.take() {
                    web = Some(reloaders.start_web(config, metrics, inputs));
                }
            }
        }
    }
    (reloaders, web)
}

/// The candidate policy's reloader: the policy's reloader on its own file,
/// into the engine's candidate slot, loaded once before it is returned. That
/// first load is a reload like any other: a broken candidate is logged,
/// exported and shown, and serving goes on.
async fn start_candidate(
    path: &Path,
    inputs: &Inputs<'_>,
    (reload, verdicts): (ReloadMetrics, CandidateMetrics),
) -> Arc<Reloader> {
    let engine = inputs.engine;
    engine.set_candidate_metrics(verdicts);
    engine.set_candidate_reload_error(None);
    let sink = Arc::new(CandidateSink(engine.clone()));
    let r = Arc::new(Reloader::candidate(
        path.to_path_buf(),
        inputs.catalogue.clone(),
        sink,
        reload,
        inputs.runtime.clock.clone(),
    ));
    let first = r.clone();
    let _ = tokio::task::spawn_blocking(move || first.reload_now(ReloadTrigger::Manual)).await;
    r
}
