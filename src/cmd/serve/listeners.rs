//! The listeners: the main one (everything, behind `--web.config.file`'s
//! TLS, auth and headers) and the optional plain probe listener, their
//! sockets bound before any task starts, each served on its own thread.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::ServeConfig;
use crate::http::listen::ListenAddr;
use crate::http::longpoll::{Holds, held_cap};
use crate::http::server::{Server, ServerHandle, Transport};
use crate::http::{AppState, ConnectionMetrics, HttpMetrics, Lifecycle, app, probe_app};
use crate::runtime::Runtime;
use crate::web::WebState;

/// The main listener's long polls: a quarter of its connection cap (the
/// cap `Server::new` computes), answered at once on `shutdown`.
pub(super) fn main_holds(
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

/// The main listener's socket and the probe listener's, bound before any
/// task starts so that a port in use fails the start.
pub(super) async fn bind_listeners(
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
pub(super) async fn start_listeners(
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
