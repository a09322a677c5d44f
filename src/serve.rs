//! `serve`: wires the parts. Flags → [`ServeConfig`] → policy compiled against
//! the catalogue → store, samplers, engine, HTTP servers (the main listener,
//! behind `--web.config.file`'s access control, and the optional plain probe
//! listener). [`start`] returns a
//! [`Running`] exporter (used by `main`, `demo` and the integration tests);
//! [`run`] adds logging, signals and graceful shutdown for the binary.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::config::{ServeArgs, ServeConfig};
use crate::engine::{CandidateMetrics, CandidateSink, EngineHandle, Timing};
use crate::http::server::{Server, ServerHandle, Transport, raise_nofile_limit};
use crate::http::{AppState, ConnectionMetrics, Lifecycle, app, probe_app};
use crate::web::{WebMetrics, WebState};
use prometheus_client::registry::Registry;

use crate::engine::EngineMetrics;
use crate::http::HttpMetrics;
use crate::policy::Policy;
use crate::reload::{ReloadMetrics, Reloader, WatchOptions, WatcherHandle};
use crate::signals::{Catalogue, SignalStore};
use crate::sources::RoundNotifier;
use crate::sources::SourceMetrics;
use crate::sources::backup::BackupSampler;
use crate::sources::etcd::EtcdConfig;
use crate::sources::etcd_metrics::EtcdMetricsSampler;
use crate::sources::identity::MemberInfo;
use crate::sources::owner::OwnerSampler;
use crate::sources::scrape::ScrapeSampler;

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

/// The engine is where reloaded policies go.
impl crate::reload::PolicySink for EngineHandle {
    fn apply(&self, policy: Arc<Policy>) {
        self.set_policy(policy);
    }

    fn reload_failed(&self, error: Option<String>) {
        self.set_reload_error(error);
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
    _watcher: Option<WatcherHandle>,
    _candidate_watcher: Option<WatcherHandle>,
    tasks: Vec<JoinHandle<()>>,
    servers: Vec<ServerHandle>,
    shutdown: Option<tokio::sync::watch::Sender<bool>>,
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
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(true);
        }
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
        // Dropping `shutdown` stops the server (on its own thread) within
        // its shutdown timeout.
    }
}

/// Build and start everything for `config`. `extend` may register more metric
/// families (e.g. the policy reloader's) before the registry is frozen.
pub async fn start(config: ServeConfig) -> anyhow::Result<Running> {
    start_with(config, |_| {}).await
}

/// [`start`] with a hook to register extra metric families.
pub async fn start_with(
    config: ServeConfig,
    extend: impl FnOnce(&mut prometheus_client::registry::Registry),
) -> anyhow::Result<Running> {
    let catalogue = Arc::new(catalogue_for(&config)?);
    let policy = Policy::compile(&config.policy_path, &config.policy_text, &catalogue)
        .map_err(|d| anyhow::anyhow!("invalid policy:\n{d}"))?;
    // Build every sampler before starting anything: a bad flag fails here.
    let backup = match &config.backup {
        Some(b) => Some(BackupSampler::new(b.clone(), &catalogue).context("--backup.url")?),
        None => None,
    };
    let owner = match &config.owner {
        Some(o) => Some(OwnerSampler::new(o.clone(), &catalogue).context("--owner.name")?),
        None => None,
    };
    let etcd_metrics = match &config.etcd_metrics {
        Some(m) => {
            Some(EtcdMetricsSampler::new(m.clone(), &catalogue).context("--etcd.metrics-url")?)
        }
        None => None,
    };
    let scrapes = match &config.scrape {
        Some(c) => ScrapeSampler::all(c, &catalogue).context("--config")?,
        None => Vec::new(),
    };
    let store = Arc::new(SignalStore::new(&catalogue));
    let notifier = RoundNotifier::new();
    // Each component registers its own families; the registry is frozen
    // (an Arc) before serving.
    let mut registry = Registry::default();
    let engine_metrics = EngineMetrics::register(&mut registry);
    let source_metrics = SourceMetrics::register(&mut registry);
    let http_metrics = HttpMetrics::register(&mut registry);
    let reload_metrics = ReloadMetrics::register(&mut registry);
    let candidate_metrics = config.policy_candidate.as_ref().map(|_| {
        (
            ReloadMetrics::register_candidate(&mut registry),
            CandidateMetrics::register(&mut registry),
        )
    });
    let member_info = MemberInfo::register(&mut registry);
    let web_metrics = config
        .web
        .config
        .as_ref()
        .map(|_| WebMetrics::register(&mut registry));
    notifier.supervisor().register(&mut registry);
    crate::metrics::process::register(&mut registry);
    extend(&mut registry);
    let registry = Arc::new(registry);
    let engine = EngineHandle::new(
        Arc::new(policy),
        catalogue.clone(),
        store.clone(),
        notifier.clone(),
        engine_metrics,
        Timing {
            sample_interval: config.sample_interval,
            sample_timeout: config.sample_timeout,
        },
    );
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on --web.listen-address {}", config.listen))?;
    let addr = listener.local_addr()?;
    let probe_listener = match config.web.probe_listen {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("cannot listen on --web.probe-listen-address {a}"))?,
        ),
        None => None,
    };

    // Every long-running task is supervised (see crate::supervise): a panic
    // is logged, counted and the task is built again from its config.
    let mut tasks = Vec::new();
    tasks.push(engine.spawn());
    tasks.push(crate::sources::etcd::spawn(
        etcd_config_for_this_process(&config.etcd),
        &catalogue,
        store.clone(),
        notifier.clone(),
        source_metrics.clone(),
        Some(member_info),
    ));
    if let (Some(b), Some(cfg)) = (backup, config.backup.clone()) {
        let cat = catalogue.clone();
        tasks.push(crate::sources::spawn(
            b,
            move || BackupSampler::new(cfg.clone(), &cat),
            store.clone(),
            notifier.clone(),
            source_metrics.clone(),
        ));
    }
    if let (Some(o), Some(cfg)) = (owner, config.owner.clone()) {
        let cat = catalogue.clone();
        tasks.push(crate::sources::spawn(
            o,
            move || OwnerSampler::new(cfg.clone(), &cat),
            store.clone(),
            notifier.clone(),
            source_metrics.clone(),
        ));
    }
    if let (Some(m), Some(cfg)) = (etcd_metrics, config.etcd_metrics.clone()) {
        let cat = catalogue.clone();
        tasks.push(crate::sources::spawn(
            m,
            move || EtcdMetricsSampler::new(cfg.clone(), &cat),
            store.clone(),
            notifier.clone(),
            source_metrics.clone(),
        ));
    }
    let scrape_cfgs = config.scrape.iter().flat_map(|c| c.sources.iter().cloned());
    for (s, cfg) in scrapes.into_iter().zip(scrape_cfgs) {
        let cat = catalogue.clone();
        tasks.push(crate::sources::spawn(
            s,
            move || ScrapeSampler::new(cfg.clone(), &cat),
            store.clone(),
            notifier.clone(),
            source_metrics.clone(),
        ));
    }

    // The policy in force came from --policy: watch it (ConfigMap-safe),
    // re-read it periodically, on SIGHUP and on POST /-/reload.
    let initial = engine.policy_status().policy.clone();
    let reloader = Arc::new(Reloader::new(
        config.policy_file.clone().unwrap_or_default(),
        catalogue.clone(),
        Arc::new(engine.clone()),
        reload_metrics,
        Some(&initial),
    ));
    let (reloader, watcher) = match &config.policy_file {
        Some(_) => {
            let watcher = crate::reload::spawn_watcher_supervised(
                reloader.clone(),
                WatchOptions {
                    resync_interval: config.policy_reload_interval,
                    ..WatchOptions::default()
                },
                notifier.supervisor(),
            );
            (Some(reloader), Some(watcher))
        }
        None => (None, None),
    };
    // The candidate: the same Reloader and watcher on its own file, into the
    // engine's candidate slot. Its first load is a reload like any other: a
    // broken candidate is logged, exported and shown, and serving goes on.
    let (candidate_reloader, candidate_watcher) =
        match (&config.policy_candidate, candidate_metrics) {
            (Some(path), Some((reload, verdicts))) => {
                engine.set_candidate_metrics(verdicts);
                engine.set_candidate_reload_error(None);
                let r = Arc::new(Reloader::new(
                    path.clone(),
                    catalogue.clone(),
                    Arc::new(CandidateSink(engine.clone())),
                    reload,
                    None,
                ));
                let first = r.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    first.reload_now(crate::reload::ReloadTrigger::Manual)
                })
                .await;
                let watcher = crate::reload::spawn_watcher_named(
                    "candidate-watcher",
                    r.clone(),
                    WatchOptions {
                        resync_interval: config.policy_reload_interval,
                        ..WatchOptions::default()
                    },
                    notifier.supervisor(),
                );
                (Some(r), Some(watcher))
            }
            _ => (None, None),
        };

    let state = AppState {
        engine: engine.clone(),
        registry,
        http_metrics,
        telemetry_path: config.telemetry_path.clone(),
        started: Instant::now(),
        reloader: reloader.clone(),
        candidate_reloader: candidate_reloader.clone(),
    };
    // The main listener: everything, behind --web.config.file's TLS, auth
    // and headers when it is set.
    let web = match (config.web.config.clone(), web_metrics) {
        (Some(c), Some(m)) => {
            tracing::info!(path = %c.path.display(), summary = %c.summary(), "web config loaded");
            let web = WebState::new(c, m);
            tasks.push(crate::web::spawn_watcher(
                web.clone(),
                notifier.supervisor(),
                config.policy_reload_interval,
            ));
            Some(web)
        }
        _ => None,
    };
    let lifecycle = Lifecycle {
        enabled: config.web.lifecycle,
        web: web.clone(),
        ..Lifecycle::default()
    };
    let mut main_router = app(state.clone()).layer(axum::Extension(lifecycle));
    let mut transport = Transport::Plain;
    if let Some(w) = &web {
        main_router = crate::web::protect(main_router, w.clone());
        if w.tls_config().is_some() {
            let w = w.clone();
            transport = Transport::Tls(Arc::new(move || w.tls_config()));
        }
    }
    let (tx, rx) = tokio::sync::watch::channel(false);
    let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    };
    let mut servers = Vec::new();
    let server = Server::new(config.http, state.http_metrics.connections());
    servers.push(server.spawn(
        "main",
        listener,
        main_router,
        transport,
        notifier.supervisor(),
        stop(rx.clone()),
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
        let probe = Server::new(limits, ConnectionMetrics::default());
        servers.push(probe.spawn(
            "probe",
            pl,
            probe_app(state),
            Transport::Plain,
            notifier.supervisor(),
            stop(rx.clone()),
        )?);
    }
    for s in &mut servers {
        s.started().await;
    }
    tracing::info!(%addr, probe = ?probe_addr, endpoint = %crate::sources::client::redact_credentials(&config.etcd.endpoint), policy = %config.policy_path, "serving");
    Ok(Running {
        addr,
        probe_addr,
        engine,
        reloader,
        candidate_reloader,
        web,
        _watcher: watcher,
        _candidate_watcher: candidate_watcher,
        tasks,
        servers,
        shutdown: Some(tx),
    })
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
/// healthy answer (see [`crate::cpuquota`]).
fn etcd_config_for_this_process(etcd: &EtcdConfig) -> EtcdConfig {
    let mut etcd = etcd.clone();
    if let Some(q) = crate::cpuquota::current() {
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
    if crate::contention::available() {
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
    crate::logging::init(args.log_level, args.log_format);
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
