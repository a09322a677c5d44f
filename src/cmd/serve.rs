//! `serve`: wires the parts. Flags → [`ServeConfig`] → policy compiled against
//! the catalogue → store, samplers, engine, HTTP servers (the main listener,
//! behind `--web.config.file`'s access control, and the optional plain probe
//! listener). [`start`] returns a
//! [`Running`] exporter (used by `main`, `demo` and the integration tests);
//! [`run`] adds logging, signals and graceful shutdown for the binary.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{ServeArgs, ServeConfig};
use crate::engine::{CandidateMetrics, CandidateSink, EngineHandle, EngineMetrics, Timing};
use crate::http::listen::ListenAddr;
use crate::http::longpoll::{Holds, held_cap};
use crate::http::server::{Server, ServerHandle, Transport, raise_nofile_limit};
use crate::http::{AppState, ConnectionMetrics, HttpMetrics, Lifecycle, app, probe_app};
use crate::reload::{
    LastGood, Load, ReloadMetrics, ReloadStatus, ReloadTrigger, Reloadable, Reloadables, Reloader,
    WatchOptions, WatcherHandle,
};
use crate::runtime::Runtime;
use crate::runtime::clock::Clock;
use crate::sources::backup::BackupSampler;
use crate::sources::etcd::{EtcdConfig, ReadFloor};
use crate::sources::etcd_metrics::EtcdMetricsSampler;
use crate::sources::owner::OwnerSampler;
use crate::sources::scrape_set::{PreparedSet, ScrapeReloader, ScrapeSet};
use crate::sources::tls_material::{
    CredentialFiles, Credentials, CredentialsReloader, TlsKind, TlsMetrics,
};
use crate::sources::{self, Prepared, RoundNotifier, Sampling, SourceMetrics};
use crate::web::{WebFile, WebMetrics, WebReloader, WebState};
use etcd_readiness_policy::policy::Policy;
use etcd_readiness_policy::signals::{Catalogue, SignalStore};

/// The catalogue for this configuration: the built-in signals plus those of
/// the `--config` scrape sources; sources that are not configured are
/// disabled, so a policy naming their signals is rejected at load time with
/// the flag that enables them.
pub fn catalogue_for(config: &ServeConfig) -> anyhow::Result<Catalogue> {
    let mut c = Catalogue::builtin();
    crate::sources::config::configure_catalogue(
        crate::sources::config::BuiltinSources {
            backup: config.backup.is_some(),
            owner: config.owner.is_some(),
            etcd_metrics: config.etcd_metrics.is_some(),
        },
        config.scrape.as_ref(),
        &mut c,
    )
    .map_err(|e| anyhow::anyhow!("--config: {e}"))?;
    Ok(c)
}

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

/// A running exporter. Dropping it stops every task it started.
pub struct Running {
    /// The main listener's address.
    pub addr: SocketAddr,
    /// The plain probe listener's address, with `--web.probe-listen-address`.
    pub probe_addr: Option<SocketAddr>,
    pub engine: EngineHandle,
    /// The policy file reloader, when `--policy` names a file.
    pub reloader: Option<Arc<Reloader>>,
    /// The candidate policy's reloader, with `--policy.candidate`.
    pub candidate_reloader: Option<Arc<Reloader>>,
    /// The web configuration in force, with `--web.config.file`.
    pub web: Option<Arc<WebState>>,
    /// The web configuration's reloader, with `--web.config.file`.
    pub web_reloader: Option<Arc<WebReloader>>,
    /// The `--config` scrape sources' reloader (it owns their tasks).
    pub scrape_reloader: Option<Arc<ScrapeReloader>>,
    /// The clock and the supervisor every task of this exporter runs on.
    pub runtime: Runtime,
    _watchers: Vec<WatcherHandle>,
    tasks: Vec<JoinHandle<()>>,
    servers: Vec<ServerHandle>,
    /// The one shutdown signal of the listeners (and their connections).
    shutdown: CancellationToken,
}

impl Running {
    /// The main listener's URL (`https://` when the web config turns TLS on).
    pub fn url(&self) -> String {
        let tls = self.web.as_ref().is_some_and(|w| w.tls_config().is_some());
        format!("{}://{}", if tls { "https" } else { "http" }, self.addr)
    }

    /// Stop serving (in-flight requests get `--web.shutdown-timeout` to
    /// finish, then every connection is closed) and stop the loops.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        for server in self.servers.drain(..) {
            let _ = server.wait().await;
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        // The servers (on their own threads) stop within their shutdown
        // timeout; the watchers and the scrape tasks stop with their handles.
        self.shutdown.cancel();
    }
}

/// Build and start everything for `config`. `extend` may register more metric
/// families (e.g. the policy reloader's) before the registry is frozen.
pub async fn start(config: ServeConfig) -> anyhow::Result<Running> {
    start_with(config, |_| {}).await
}

/// Every metric family `serve` exports, registered explicitly (each
/// component registers its own) before the registry is frozen.
struct Metrics {
    engine: EngineMetrics,
    sources: SourceMetrics,
    http: HttpMetrics,
    etcd: crate::sources::etcd::Families,
    files: FileMetrics,
}

/// The families of the reloaded files (each with its reload status).
struct FileMetrics {
    policy: ReloadMetrics,
    candidate: Option<(ReloadMetrics, CandidateMetrics)>,
    web: Option<WebMetrics>,
    scrape: Option<ReloadStatus>,
    /// The sources' TLS files: problems and validity, and each set's
    /// reload status.
    tls: TlsMetrics,
    etcd_tls: Option<ReloadStatus>,
    backup_tls: Option<ReloadStatus>,
    etcd_password: Option<ReloadStatus>,
}

fn register_metrics(
    config: &ServeConfig,
    runtime: &Runtime,
    extend: impl FnOnce(&mut Registry),
) -> (Metrics, Arc<Registry>) {
    let mut registry = Registry::default();
    let r = &mut registry;
    let metrics = Metrics {
        engine: EngineMetrics::register(r),
        sources: SourceMetrics::register(r),
        http: HttpMetrics::register(r),
        etcd: crate::sources::etcd::Families::register(r),
        files: FileMetrics {
            policy: ReloadMetrics::register(r),
            candidate: config.policy_candidate.as_ref().map(|_| {
                (
                    ReloadMetrics::register_candidate(r),
                    CandidateMetrics::register(r),
                )
            }),
            web: config.web.config.as_ref().map(|_| WebMetrics::register(r)),
            scrape: config
                .scrape_file
                .as_ref()
                .map(|_| crate::sources::scrape_set::register_status(r)),
            tls: TlsMetrics::register(r),
            etcd_tls: config
                .etcd
                .tls
                .as_ref()
                .map(|_| crate::sources::tls_material::register_status(r, TlsKind::Etcd)),
            etcd_password: config
                .etcd
                .auth
                .as_ref()
                .map(|_| crate::sources::etcd_auth::register_status(r)),
            backup_tls: config
                .backup
                .as_ref()
                .filter(|b| b.tls != Default::default())
                .map(|_| crate::sources::tls_material::register_status(r, TlsKind::Backup)),
        },
    };
    runtime.supervisor.register(r);
    crate::metrics::process::register(r, runtime.clock.wall());
    extend(r);
    (metrics, Arc::new(registry))
}

/// The sources built before anything starts: the optional samplers, the
/// `--config` set, and the TLS credentials their reloaders keep current.
struct PreparedSources {
    samplers: Vec<Prepared>,
    scrape: Option<PreparedSet>,
    credentials: Vec<Credentials>,
}

/// The optional sources, each built once from its spec — its flags, or
/// `--config` — before anything starts (a bad flag or file fails here) and
/// rebuilt from the same spec after a panic. A spec shares its source's
/// credentials, so a rebuilt sampler uses the material in force.
fn prepare_sources(
    config: &ServeConfig,
    catalogue: &Arc<Catalogue>,
    sampling: &Sampling,
    scrape_status: Option<ReloadStatus>,
) -> anyhow::Result<PreparedSources> {
    let scrape = match (&config.scrape, &config.scrape_file, scrape_status) {
        (Some(c), Some((path, _)), Some(status)) => Some(
            ScrapeSet::prepare(path, c, catalogue.clone(), sampling.clone(), status)
                .context("--config")?,
        ),
        _ => None,
    };
    let mut prepared = Vec::new();
    let mut credentials: Vec<Credentials> = config.etcd.tls.iter().cloned().collect();
    if let Some(b) = config.backup.clone() {
        let cat = catalogue.clone();
        // Its error names the flags and says the exporter cannot start.
        let creds = crate::sources::backup::backup_credentials(&b.tls)?;
        credentials.extend(creds.clone());
        let spec = move || BackupSampler::with_credentials(b.clone(), creds.clone(), &cat);
        prepared.push(sources::prepare(spec).context("--backup.url")?);
    }
    if let Some(o) = config.owner.clone() {
        let cat = catalogue.clone();
        let spec = move || OwnerSampler::new(o.clone(), &cat);
        prepared.push(sources::prepare(spec).context("--owner.name")?);
    }
    if let Some(m) = config.etcd_metrics.clone() {
        let cat = catalogue.clone();
        // An https:// URL takes the etcd source's files, and their reloader.
        let creds = config
            .etcd
            .tls
            .clone()
            .filter(|_| m.url.starts_with("https://"));
        let spec = move || EtcdMetricsSampler::with_credentials(m.clone(), creds.clone(), &cat);
        prepared.push(sources::prepare(spec).context("--etcd.metrics-url")?);
    }
    Ok(PreparedSources {
        samplers: prepared,
        scrape,
        credentials,
    })
}

/// The reloaders of the files `serve` follows, their watchers, and what
/// `POST /-/reload` reloads.
#[derive(Default)]
struct Reloaders {
    policy: Option<Arc<Reloader>>,
    candidate: Option<Arc<Reloader>>,
    web: Option<Arc<WebReloader>>,
    scrape: Option<Arc<ScrapeReloader>>,
    tls: Vec<Arc<CredentialsReloader>>,
    password: Option<Arc<crate::sources::etcd_auth::PasswordReloader>>,
    watchers: Vec<WatcherHandle>,
}

impl Reloaders {
    /// In the order `POST /-/reload` reports them.
    fn reloadables(&self) -> Reloadables {
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

/// Everything `serve` builds before any task runs (a bad flag, file or
/// policy fails here): the catalogue, the samplers' shared parts (store,
/// notifier, runtime), the engine, the sources prepared from their specs,
/// and the metric families not yet handed to their owner.
struct Built {
    catalogue: Arc<Catalogue>,
    sampling: Sampling,
    engine: EngineHandle,
    sources: PreparedSources,
    registry: Arc<Registry>,
    http: HttpMetrics,
    etcd: crate::sources::etcd::Families,
    files: FileMetrics,
    /// What the policy in force compares the etcd reads' latency with.
    read_floor: ReadFloor,
}

/// Catalogue and policy, the one runtime, metrics, the engine, the sources.
fn build(config: &ServeConfig, extend: impl FnOnce(&mut Registry)) -> anyhow::Result<Built> {
    let catalogue = Arc::new(catalogue_for(config)?);
    let policy = Policy::compile(&config.policy_path, &config.policy_text, &catalogue)
        .map_err(|d| anyhow::anyhow!("invalid policy:\n{d}"))?;
    // Run-time state, not configuration: what the policy in force still
    // compares the etcd reads' latency with, followed by its reloads.
    let read_floor = ReadFloor::default();
    read_floor.follow(&policy);
    let store = Arc::new(SignalStore::new(&catalogue));
    // The one clock, read here and nowhere below (crate::runtime::clock),
    // and the one supervisor: every task is handed this runtime.
    let runtime = Runtime::new(Clock::node());
    let notifier = RoundNotifier::new();
    let (mut metrics, registry) = register_metrics(config, &runtime, extend);
    let sampling = Sampling {
        store: store.clone(),
        notifier: notifier.clone(),
        metrics: metrics.sources.clone(),
        runtime: runtime.clone(),
    };
    // Every source is built from its spec before anything starts.
    let status = metrics.files.scrape.take();
    let sources = prepare_sources(config, &catalogue, &sampling, status)?;
    let engine = EngineHandle::new(
        Arc::new(policy),
        catalogue.clone(),
        store,
        notifier,
        metrics.engine,
        timing(config),
        runtime,
    );
    Ok(Built {
        catalogue,
        sampling,
        engine,
        sources,
        registry,
        http: metrics.http,
        etcd: metrics.etcd,
        files: metrics.files,
        read_floor,
    })
}

/// [`start`] with a hook to register extra metric families. Reads top to
/// bottom as the data flows: everything [`build`] makes, the listeners'
/// sockets, engine and sources running, reloaders, listeners serving.
pub async fn start_with(
    config: ServeConfig,
    extend: impl FnOnce(&mut prometheus_client::registry::Registry),
) -> anyhow::Result<Running> {
    let Built {
        catalogue,
        sampling,
        engine,
        sources,
        registry,
        http,
        etcd,
        files,
        read_floor,
    } = build(&config, extend)?;
    let runtime = sampling.runtime.clone();
    let (listener, probe_listener) = bind_listeners(&config).await?;
    let addr = listener.local_addr()?;

    let tasks = spawn_sampling(
        &config,
        &engine,
        (&catalogue, &sampling),
        (etcd, &read_floor),
        sources.samplers,
    );

    let (reloaders, web) = start_reloaders(
        &config,
        &catalogue,
        &engine,
        files,
        (sources.scrape, sources.credentials),
        &runtime,
        &read_floor,
    )
    .await;

    let shutdown = CancellationToken::new();
    let state = AppState {
        holds: main_holds(&config, &shutdown, &http),
        engine: engine.clone(),
        catalogue,
        store: sampling.store.clone(),
        registry,
        http_metrics: http,
        telemetry_path: config.telemetry_path.clone(),
        started: runtime.clock.now(),
        reloadables: reloaders.reloadables(),
        candidate_path: config.policy_candidate.clone(),
        runtime: runtime.clone(),
    };
    let (servers, probe_addr) = start_listeners(
        &config,
        state,
        listener,
        probe_listener,
        web.as_ref(),
        &runtime,
        &shutdown,
    )
    .await?;
    tracing::info!(%addr, probe = ?probe_addr, endpoint = %config.etcd.endpoint, policy = %config.policy_path, "serving");
    Ok(Running {
        addr,
        probe_addr,
        engine,
        reloader: reloaders.policy,
        candidate_reloader: reloaders.candidate,
        web,
        web_reloader: reloaders.web,
        scrape_reloader: reloaders.scrape,
        runtime,
        _watchers: reloaders.watchers,
        tasks,
        servers,
        shutdown,
    })
}

/// The engine's task, the etcd source's and every other sampler's. Every
/// long-running task is supervised (see crate::runtime::supervise): a panic
/// is logged, counted and the task is built again from its spec.
fn spawn_sampling(
    config: &ServeConfig,
    engine: &EngineHandle,
    (catalogue, sampling): (&Catalogue, &Sampling),
    (etcd, read_floor): (crate::sources::etcd::Families, &ReadFloor),
    samplers: Vec<Prepared>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = vec![engine.spawn()];
    tasks.push(crate::sources::etcd::spawn(
        etcd_config_for_this_process(&config.etcd, &sampling.runtime.clock),
        catalogue,
        sampling.clone(),
        etcd,
        read_floor.clone(),
    ));
    tasks.extend(samplers.into_iter().map(|p| p.spawn(sampling)));
    tasks
}

/// What the engine needs to judge staleness, from the sampling flags.
fn timing(config: &ServeConfig) -> Timing {
    Timing {
        sample_interval: config.sample_interval,
        sample_timeout: config.sample_timeout,
    }
}

/// The main listener's long polls: a quarter of its connection cap (the
/// cap `Server::new` computes), answered at once on `shutdown`.
fn main_holds(
    config: &ServeConfig,
    shutdown: &CancellationToken,
    http: &HttpMetrics,
) -> Arc<Holds> {
    let cap = crate::http::server::effective_cap(
        config.http.max_connections,
        crate::http::server::nofile_soft_limit(),
    );
    Holds::new("main", held_cap(cap), shutdown.clone(), http.long_polls())
}

/// Every file `serve` follows, each with its reloader and watcher: the
/// `--config` scrape sources (whose tasks their reloader owns), the policy
/// (the built-in one is shown as loaded without a reloader), the candidate
/// policy, the web config, the sources' TLS files.
async fn start_reloaders(
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
    match &config.policy_file {
        Some(path) => {
            let sink = Arc::new(LivePolicy {
                engine: engine.clone(),
                read_floor: read_floor.clone(),
            });
            let r = Arc::new(Reloader::policy(
                path.clone(),
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

/// The main listener's socket and the probe listener's, bound before any
/// task starts so that a port in use fails the start.
async fn bind_listeners(
    config: &ServeConfig,
) -> anyhow::Result<(TcpListener, Option<TcpListener>)> {
    let bind = |a: ListenAddr, flag: &str| {
        a.bind()
            .and_then(TcpListener::from_std)
            .with_context(|| format!("cannot listen on {flag} {a}"))
    };
    let listener = bind(config.listen, "--web.listen-address")?;
    let probe_listener = match config.web.probe_listen {
        Some(a) => Some(bind(a, "--web.probe-listen-address")?),
        None => None,
    };
    Ok((listener, probe_listener))
}

/// The main listener (everything, behind --web.config.file's TLS, auth and
/// headers when it is set) and the probe listener, each on its own thread,
/// both stopped by `shutdown`.
async fn start_listeners(
    config: &ServeConfig,
    state: AppState,
    listener: TcpListener,
    probe_listener: Option<TcpListener>,
    web: Option<&Arc<WebState>>,
    runtime: &Runtime,
    shutdown: &CancellationToken,
) -> anyhow::Result<(Vec<ServerHandle>, Option<SocketAddr>)> {
    let lifecycle = Lifecycle {
        enabled: config.web.lifecycle,
        ..Lifecycle::default()
    };
    let mut main_router = app(state.clone()).layer(axum::Extension(lifecycle));
    let mut transport = Transport::Plain;
    if let Some(w) = web {
        main_router = crate::web::protect(main_router, w.clone());
        if w.tls_config().is_some() {
            let w = w.clone();
            transport = Transport::Tls(Arc::new(move || w.tls_config()));
        }
    }
    let mut servers = Vec::new();
    let server = Server::new(
        config.http,
        state.http_metrics.connections(),
        state.runtime.clock.clone(),
    );
    servers.push(server.spawn(
        "main",
        listener,
        main_router,
        transport,
        &runtime.supervisor,
        shutdown.clone(),
    )?);
    // The probe listener: plain HTTP, probes only, a small cap of its own
    // (the kubelet opens one connection per probe), its own thread, so
    // neither TLS handshakes nor floods on the main port can delay it. Its
    // connection counts are not exported (they would add to the main
    // listener's families).
    let mut probe_addr = None;
    if let Some(pl) = probe_listener {
        probe_addr = Some(pl.local_addr()?);
        let limits = crate::http::server::Limits {
            max_connections: config.http.max_connections.min(PROBE_MAX_CONNECTIONS),
            ..config.http
        };
        let probe = Server::new(
            limits,
            ConnectionMetrics::default(),
            state.runtime.clock.clone(),
        );
        let holds = Holds::new(
            "probe",
            held_cap(probe.cap()),
            shutdown.clone(),
            state.http_metrics.long_polls(),
        );
        servers.push(probe.spawn(
            "probe",
            pl,
            probe_app(AppState { holds, ..state }),
            Transport::Plain,
            &runtime.supervisor,
            shutdown.clone(),
        )?);
    }
    for s in &mut servers {
        s.started().await;
    }
    Ok((servers, probe_addr))
}

/// The probe listener's connection cap.
pub const PROBE_MAX_CONNECTIONS: usize = 16;

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// `etcd` with what this process's own CPU limit implies: under a CFS quota
/// the exporter can be frozen for up to one period, which must not outdate a
/// healthy answer (see [`crate::runtime::cpuquota`]).
fn etcd_config_for_this_process(etcd: &EtcdConfig, clock: &Clock) -> EtcdConfig {
    let mut etcd = etcd.clone();
    if let Some(q) = clock.cpu_quota() {
        etcd.freeze = q.longest_freeze();
        tracing::info!(
            limit_millicores = %q.millicores(),
            quota = ?q.quota,
            period = ?q.period,
            trust = ?etcd.trust().base,
            "CPU limit: the exporter can be frozen for up to one CFS period, so a pending etcd call \
             outdates the last answer only after that period and a margin"
        );
    }
    if clock.has_cpu_pressure() {
        tracing::debug!(
            "CPU pressure (PSI) available: time the node's CPU is contended while an etcd call \
             is pending extends its trust, up to {:?}",
            etcd.trust().contended_max
        );
    } else {
        tracing::info!(
            "no CPU pressure information (/proc/pressure/cpu): a pending etcd call is trusted \
             for {:?} however busy the node is",
            etcd.trust().base
        );
    }
    etcd
}

/// The tokio runtime of the binary's commands, or the exit code after saying why not.
pub fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|e| {
        eprintln!("error: cannot start the tokio runtime: {e}");
        ExitCode::FAILURE
    })
}

/// The `serve` subcommand.
pub fn run(args: ServeArgs) -> ExitCode {
    crate::runtime::logging::init(args.log_level, args.log_format);
    let config = match ServeConfig::from_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // More descriptors for connections where the hard limit allows; the
    // server keeps its connection cap below whatever soft limit is in force.
    match raise_nofile_limit() {
        Ok(n) => tracing::debug!(nofile = n, "RLIMIT_NOFILE"),
        Err(e) => tracing::warn!(error = %e, "cannot raise RLIMIT_NOFILE"),
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let code = rt.block_on(async move {
        let running = match start(config).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        };
        shutdown_signal().await;
        tracing::info!("shutting down");
        running.shutdown().await;
        ExitCode::SUCCESS
    });
    // A blocking task (a file read, a system DNS lookup) must not hold the
    // exit past the shutdown deadline.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}
