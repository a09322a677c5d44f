//! The files `serve` follows, each with its reloader and watcher: the
//! policy (into the engine and the etcd reads' floor), the candidate policy,
//! the web config, the `--config` scrape sources, the sources' TLS files and
//! etcd's password file; and what `POST /-/reload` reloads.

use std::sync::Arc;

use super::metrics::FileMetrics;
use crate::config::ServeConfig;
use crate::engine::{CandidateMetrics, CandidateSink, EngineHandle};
use crate::reload::{
    LastGood, Load, ReloadMetrics, ReloadTrigger, Reloadable, Reloadables, Reloader, WatchOptions,
    WatcherHandle,
};
use crate::runtime::Runtime;
use crate::runtime::clock::Clock;
use crate::sources::etcd::ReadFloor;
use crate::sources::scrape_set::{PreparedSet, ScrapeReloader};
use crate::sources::tls_material::{CredentialFiles, Credentials, CredentialsReloader, TlsKind};
use crate::web::{WebFile, WebReloader, WebState};
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
    fn watch<L: Load>(
        &mut self,
        name: &str,
        reloader: &Arc<LastGood<L>>,
        config: &ServeConfig,
        runtime: &Runtime,
    ) {
        self.watch_woken(name, reloader, config, runtime, None);
    }

    /// [`Self::watch`], also re-reading when `wake` is notified.
    fn watch_woken<L: Load>(
        &mut self,
        name: &str,
        reloader: &Arc<LastGood<L>>,
        config: &ServeConfig,
        runtime: &Runtime,
        wake: Option<Arc<tokio::sync::Notify>>,
    ) {
        let opts = WatchOptions {
            resync_interval: config.policy_reload_interval,
            wake,
            ..WatchOptions::default()
        };
        self.watchers.push(crate::reload::spawn_watcher(
            name,
            reloader.clone(),
            opts,
            &runtime.supervisor,
        ));
    }

    /// Each set of the sources' TLS files and etcd's password file: re-read
    /// on a change, periodically, on SIGHUP and (TLS) when a handshake with
    /// it is refused.
    fn start_credentials(
        &mut self,
        config: &ServeConfig,
        credentials: Vec<Credentials>,
        files: &FileMetrics,
        runtime: &Runtime,
    ) {
        for creds in credentials {
            let status = match creds.kind() {
                TlsKind::Etcd => files.etcd_tls.clone(),
                TlsKind::Backup => files.backup_tls.clone(),
            };
            let r = CredentialFiles::reloader(
                creds.clone(),
                status.unwrap_or_default(),
                files.tls.clone(),
                runtime.clock.clone(),
            );
            let wake = Some(creds.recheck());
            self.watch_woken(creds.kind().watcher(), &r, config, runtime, wake);
            self.tls.push(r);
        }
        if let (Some(auth), Some(status)) = (&config.etcd.auth, &files.etcd_password) {
            let r = crate::sources::etcd_auth::PasswordFile::reloader(
                auth.clone(),
                status.clone(),
                runtime.clock.clone(),
            );
            self.watch("etcd-password-watcher", &r, config, runtime);
            self.password = Some(r);
        }
    }
}

/// Every file `serve` follows, each with its reloader and watcher: the
/// `--config` scrape sources (whose tasks their reloader owns), the policy
/// (the built-in one is shown as loaded without a reloader), the candidate
/// policy, the web config, the sources' TLS files.
pub(super) async fn start_reloaders(
    config: &ServeConfig,
    catalogue: &Arc<Catalogue>,
    engine: &EngineHandle,
    files: FileMetrics,
    (scrape, credentials): (Option<PreparedSet>, Vec<Credentials>),
    runtime: &Runtime,
    read_floor: &ReadFloor,
) -> (Reloaders, Option<Arc<WebState>>) {
    let mut reloaders = Reloaders::default();
    reloaders.start_credentials(config, credentials, &files, runtime);
    // The scrape sources run under their reloader, which restarts those a
    // changed --config changes.
    if let (Some(prepared), Some((path, sha))) = (scrape, &config.scrape_file) {
        let r = prepared.start().reloader(path.clone(), sha.clone());
        reloaders.watch("scrape-config-watcher", &r, config, runtime);
        reloaders.scrape = Some(r);
    }
    // The policy in force came from --policy: watch it (ConfigMap-safe),
    // re-read it periodically, on SIGHUP and on POST /-/reload. The
    // built-in policy is shown as loaded without a reloader.
    let initial = engine.policy_status().policy.clone();
    match config.policy.file() {
        Some(path) => {
            let sink = Arc::new(LivePolicy {
                engine: engine.clone(),
                read_floor: read_floor.clone(),
            });
            let r = Arc::new(Reloader::policy(
                path,
                catalogue.clone(),
                sink,
                files.policy,
                Some(&initial),
                runtime.clock.clone(),
            ));
            reloaders.watch("policy-watcher", &r, config, runtime);
            reloaders.policy = Some(r);
        }
        None => files.policy.loaded(initial.sha256(), runtime.clock.wall()),
    }
    if let (Some(path), Some(metrics)) = (&config.policy_candidate, files.candidate) {
        let r = start_candidate(path, catalogue, engine, metrics, &runtime.clock).await;
        reloaders.watch("candidate-watcher", &r, config, runtime);
        reloaders.candidate = Some(r);
    }
    let web = match (config.web.config.clone(), files.web) {
        (Some(c), Some(m)) => {
            tracing::info!(path = %c.path.display(), summary = %c.summary(), "web config loaded");
            let web = WebState::new(c, m, runtime.clock.clone());
            let r = WebFile::reloader(web.clone());
            reloaders.watch("web-config-watcher", &r, config, runtime);
            reloaders.web = Some(r);
            Some(web)
        }
        _ => None,
    };

    (reloaders, web)
}

/// The candidate policy's reloader: the policy's reloader on its own file,
/// into the engine's candidate slot, loaded once before it is returned. That
/// first load is a reload like any other: a broken candidate is logged,
/// exported and shown, and serving goes on.
async fn start_candidate(
    path: &std::path::Path,
    catalogue: &Arc<Catalogue>,
    engine: &EngineHandle,
    (reload, verdicts): (ReloadMetrics, CandidateMetrics),
    clock: &Clock,
) -> Arc<Reloader> {
    engine.set_candidate_metrics(verdicts);
    engine.set_candidate_reload_error(None);
    let sink = Arc::new(CandidateSink(engine.clone()));
    let r = Arc::new(Reloader::candidate(
        path.to_path_buf(),
        catalogue.clone(),
        sink,
        reload,
        clock.clone(),
    ));
    let first = r.clone();
    let _ = tokio::task::spawn_blocking(move || first.reload_now(ReloadTrigger::Manual)).await;
    r
}
