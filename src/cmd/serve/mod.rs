//! `serve`: wires the parts. Flags → [`ServeConfig`] → policy compiled against
//! the catalogue → store, samplers, engine, HTTP servers (the main listener,
//! behind `--web.config.file`'s access control, and the optional plain probe
//! listener). [`start`] returns a
//! [`Running`] exporter (used by `main`, `demo` and the integration tests);
//! [`run`] adds logging, signals and graceful shutdown for the binary.
//!
//! The topology is a plain value, [`graph::Wiring`], made from the
//! configuration before anything is built; [`start_with`] realises it.
//! One idea per file: [`build`] (what exists before any task runs),
//! [`metrics`] (the families), [`sources`] (prepared and spawned),
//! [`reloaders`] (the files followed), [`listeners`], [`running`].

mod build;
pub mod graph;
mod listeners;
mod metrics;
mod reloaders;
mod running;
mod sources;

use std::process::ExitCode;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::config::{ServeArgs, ServeConfig};
use crate::http::AppState;
use crate::http::server::raise_nofile_limit;

use build::{Built, build};
use listeners::{addr_of, bind_listeners, main_holds, start_listeners};
use reloaders::start_reloaders;
use sources::spawn_sampling;

pub use build::catalogue_for;
pub use graph::{Role, Wiring};
pub use listeners::PROBE_MAX_CONNECTIONS;
pub use running::Running;

/// Build and start everything for `config`. `extend` may register more metric
/// families (e.g. the policy reloader's) before the registry is frozen.
pub async fn start(config: ServeConfig) -> anyhow::Result<Running> {
    start_with(config, |_| {}).await
}

/// [`start`] with a hook to register extra metric families. Reads top to
/// bottom as the data flows: the [`Wiring`] graph for `config`, everything
/// [`build`] makes from it, the listeners' sockets, engine and sources
/// running, reloaders, listeners serving.
pub async fn start_with(
    config: ServeConfig,
    extend: impl FnOnce(&mut prometheus_client::registry::Registry),
) -> anyhow::Result<Running> {
    let wiring = Wiring::of(&config);
    tracing::debug!(graph = %wiring.render(), "wiring");
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
    } = build(&config, &wiring, extend)?;
    let runtime = sampling.runtime.clone();
    let bound = bind_listeners(&wiring.servers).await?;
    let (addr, probe_addr) = (addr_of(&bound, Role::Main), addr_of(&bound, Role::Probe));
    let addr = addr.context("the graph has no main listener")?;

    // sources -> store -> engine
    let tasks = spawn_sampling(
        &wiring.etcd,
        &engine,
        (&catalogue, &sampling),
        (etcd, &read_floor),
        sources.samplers,
    );

    // files -> the parts they configure
    let inputs = reloaders::Inputs {
        wiring: &wiring,
        catalogue: &catalogue,
        engine: &engine,
        runtime: &runtime,
        read_floor: &read_floor,
        resync: config.policy_reload_interval,
    };
    let (reloaders, web) =
        start_reloaders(&inputs, files, (sources.scrape, sources.credentials)).await;

    // engine -> sinks -> servers
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
        candidate: reloaders.candidate.clone(),
        runtime: runtime.clone(),
    };
    let servers = start_listeners(&config, state, bound, web.as_ref(), &runtime, &shutdown).await?;
    tracing::info!(%addr, probe = ?probe_addr, endpoint = %config.etcd.endpoint, policy = %config.policy.shown(), "serving");
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
