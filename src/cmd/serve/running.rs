//! [`Running`]: a started exporter, its addresses and handles, and how it
//! stops.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::engine::EngineHandle;
use crate::http::server::ServerHandle;
use crate::reload::{Reloader, WatcherHandle};
use crate::runtime::Runtime;
use crate::sources::scrape_set::ScrapeReloader;
use crate::web::{WebReloader, WebState};

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
    pub(super) _watchers: Vec<WatcherHandle>,
    pub(super) tasks: Vec<JoinHandle<()>>,
    pub(super) servers: Vec<ServerHandle>,
    /// The one shutdown signal of the listeners (and their connections).
    pub(super) shutdown: CancellationToken,
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
