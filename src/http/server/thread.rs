//! A server on its own thread with a one-worker runtime, so no amount of
//! HTTP work delays the samplers; its accept loop runs as a supervised task
//! (`http:NAME`), restarted on the same socket should it panic.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Server, Transport};
use crate::runtime::supervise::Supervisor;

/// A server running on its own thread and runtime ([`Server::spawn`]).
pub struct ServerHandle {
    done: tokio::sync::oneshot::Receiver<io::Result<()>>,
    started: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl ServerHandle {
    /// Wait until the accept loop's task is registered with the supervisor
    /// and running (or the thread failed to start it).
    pub async fn started(&mut self) {
        if let Some(rx) = self.started.take() {
            let _ = rx.await;
        }
    }

    /// Wait until the server has closed every connection (after its
    /// shutdown future resolved: at most `shutdown_timeout` later).
    pub async fn wait(self) -> io::Result<()> {
        self.done
            .await
            .unwrap_or_else(|_| Err(io::Error::other("the HTTP server thread died")))
    }
}

impl Server {
    /// Run [`Server::serve`] on a thread of its own with a one-worker tokio
    /// runtime, so that no amount of HTTP work (floods of h2 streams,
    /// thousands of connections) delays the samplers and the evaluation loop
    /// on the main runtime: the kernel shares the CPU between the threads.
    ///
    /// The accept loop runs under `supervisor` as the task `http:NAME`: a
    /// panic in it is logged, counted and shown on `/livez?verbose`, and the
    /// loop is started again on the same listening socket.
    pub fn spawn(
        self,
        name: &str,
        listener: TcpListener,
        router: Router,
        transport: Transport,
        supervisor: &Supervisor,
        shutdown: CancellationToken,
    ) -> io::Result<ServerHandle> {
        // A tokio listener belongs to the runtime that made it: move the socket.
        let listener = listener.into_std()?;
        let (tx, done) = tokio::sync::oneshot::channel();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let supervisor = supervisor.clone();
        let task = format!("http:{name}");
        // The runtime is built and dropped on the thread: a runtime must not
        // be dropped inside the caller's async context.
        std::thread::Builder::new()
            .name(format!("http-{name}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("http")
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let app = (router, transport);
                let accepting = (supervisor, task, started_tx);
                let res = rt.block_on(self.run_supervised(listener, app, accepting, shutdown));
                // Connection tasks were all closed by `serve`; nothing to wait for.
                rt.shutdown_background();
                let _ = tx.send(res);
            })?;
        Ok(ServerHandle {
            done,
            started: Some(started),
        })
    }

    /// On the server's own runtime: run [`Server::serve`] as the task `task`
    /// of `supervisor` (say so on `started`), and after `shutdown` wait for
    /// it to drain, at most a little longer than the shutdown timeout.
    async fn run_supervised(
        self,
        listener: std::net::TcpListener,
        (router, transport): (Router, Transport),
        (supervisor, task, started): (Supervisor, String, tokio::sync::oneshot::Sender<()>),
        shutdown: CancellationToken,
    ) -> io::Result<()> {
        // The accept loop holds the only other strong reference while it
        // runs, so the socket closes as soon as it stops accepting (new
        // connections are refused, not left in the backlog during the drain).
        let listener = Arc::new(TcpListener::from_std(listener)?);
        let weak = Arc::downgrade(&listener);
        let grace = self.limits.shutdown_timeout;
        let server = Arc::new(self);
        let (done_tx, mut done_rx) = mpsc::channel::<io::Result<()>>(1);
        let stop = shutdown.clone();
        let accept = supervisor.spawn(task, move || {
            let (server, listener, router, transport, stop, done) = (
                server.clone(),
                weak.upgrade(),
                router.clone(),
                transport.clone(),
                stop.clone(),
                done_tx.clone(),
            );
            async move {
                // Gone only after the shutdown: nothing to serve.
                if let Some(listener) = listener {
                    let r = server.serve(listener, router, &transport, stop).await;
                    let _ = done.send(r).await;
                }
                // Returning would count as a failure and restart.
                std::future::pending::<()>().await
            }
        });
        let _ = started.send(());
        shutdown.cancelled().await;
        drop(listener);
        // The loop drains within `grace`; a loop caught in its restart
        // backoff is not waited for much longer.
        let r = tokio::time::timeout(grace + Duration::from_secs(2), done_rx.recv())
            .await
            .ok()
            .flatten()
            .unwrap_or(Ok(()));
        accept.abort();
        r
    }
}
