//! The listeners: the main one (everything, behind `--web.config.file`'s
//! TLS, auth and headers) and the optional plain probe listener, their
//! sockets bound before any task starts, each served on its own thread.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::graph::{Listener, Role};
use crate::config::ServeConfig;
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
    Holds::new(
        Role::Main.name(),
        held_cap(cap),
        shutdown.clone(),
        http.long_polls(),
    )
}

/// A listener of the graph, its socket bound.
pub(super) struct Bound {
    pub(super) role: Role,
    pub(super) addr: SocketAddr,
    socket: TcpListener,
}

/// The graph's listeners' sockets, bound before any task starts so that a
/// port in use fails the start.
pub(super) async fn bind_listeners(servers: &[Listener]) -> anyhow::Result<Vec<Bound>> {
    let mut bound = Vec::new();
    for l in servers {
        let socket = l
            .addr
            .bind()
            .and_then(TcpListener::from_std)
            .with_context(|| format!("cannot listen on {} {}", l.flag, l.addr))?;
        let addr = socket.local_addr()?;
        bound.push(Bound {
            role: l.role,
            addr,
            socket,
        });
    }
    Ok(bound)
}

/// The address `role`'s listener is bound to, if the graph has it.
pub(super) fn addr_of(bound: &[Bound], role: Role) -> Option<SocketAddr> {
    bound.iter().find(|b| b.role == role).map(|b| b.addr)
}

/// Serve every bound listener, each on its own thread, all stopped by
/// `shutdown`; returns once every one has started.
pub(super) async fn start_listeners(
    config: &ServeConfig,
    state: AppState,
    bound: Vec<Bound>,
    web: Option<&Arc<WebState>>,
    runtime: &Runtime,
    shutdown: &CancellationToken,
) -> anyhow::Result<Vec<ServerHandle>> {
    let mut servers = Vec::new();
    for b in bound {
        let (server, name, router, transport) = match b.role {
            Role::Main => main_server(config, state.clone(), web),
            Role::Probe => probe_server(config, state.clone(), shutdown),
        };
        servers.push(server.spawn(
            name,
            b.socket,
            router,
            transport,
            &runtime.supervisor,
            shutdown.clone(),
        )?);
    }
    for s in &mut servers {
        s.started().await;
    }
    Ok(servers)
}

/// What a listener serves: its server (cap, timeouts), its thread's name,
/// its routes and its transport.
type Served = (Server, &'static str, axum::Router, Transport);

/// The main listener: everything, behind --web.config.file's TLS, auth and
/// headers when it is set.
fn main_server(config: &ServeConfig, state: AppState, web: Option<&Arc<WebState>>) -> Served {
    let lifecycle = Lifecycle {
        enabled: config.web.lifecycle,
        ..Lifecycle::default()
    };
    let server = Server::new(
        config.http,
        state.http_metrics.connections(),
        state.runtime.clock.clone(),
    );
    let mut router = app(state).layer(axum::Extension(lifecycle));
    let mut transport = Transport::Plain;
    if let Some(w) = web {
        router = crate::web::protect(router, w.clone());
        if w.tls_config().is_some() {
            let w = w.clone();
            transport = Transport::Tls(Arc::new(move || w.tls_config()));
        }
    }
    (server, Role::Main.name(), router, transport)
}

/// The probe listener: plain HTTP, probes only, a small cap of its own (the
/// kubelet opens one connection per probe), its own thread, so neither TLS
/// handshakes nor floods on the main port can delay it. Its connection
/// counts are not exported (they would add to the main listener's
/// families); its long polls are its own.
fn probe_server(config: &ServeConfig, state: AppState, shutdown: &CancellationToken) -> Served {
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
        Role::Probe.name(),
        held_cap(probe.cap()),
        shutdown.clone(),
        state.http_metrics.long_polls(),
    );
    let router = probe_app(AppState { holds, ..state });
    (probe, Role::Probe.name(), router, Transport::Plain)
}

/// The probe listener's connection cap.
pub const PROBE_MAX_CONNECTIONS: usize = 16;
