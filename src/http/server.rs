//! The HTTP server: our own accept loop over hyper-util's HTTP/1 + h2c
//! `auto::Builder`, so that no client can starve the probe. It owns the
//! connection cap (kept below `RLIMIT_NOFILE`, so `accept` never runs out of
//! file descriptors), eviction of the longest-idle connection when the cap is
//! reached (a kubelet probe always gets in), the header-read and idle
//! timeouts, the HTTP/2 stream limit, and shutdown within a deadline
//! (graceful first, then a hard close). Handlers are the axum [`Router`] of
//! [`super::app`]; this file knows nothing of what they serve.
//!
//! Every accepted stream goes through one connection path
//! ([`Server::serve_io`] for plain streams): with [`Transport::Tls`] the TLS
//! handshake runs inside the connection's task, under the header-read
//! timeout and evictable like a slow head, with the rustls configuration in
//! force at that accept (so a rotated certificate serves the next
//! connection); a plain HTTP request to a TLS port is answered `400` and
//! closed. A second listener (the plain probe listener) is a second
//! [`Server`] with its own cap, thread and runtime. [`Server::spawn`] runs
//! the accept loop as a supervised task (`http:NAME`), restarted like every
//! other long-running task should it panic.

use crate::runtime::clock::Clock;
use etcd_readiness_policy::sync::TolerantLock;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::metrics::{ConnectionMetrics, TimeoutPhase};
use crate::runtime::supervise::Supervisor;

/// The rustls configuration for the next connection (read at each accept).
pub type TlsConfigSource = Arc<dyn Fn() -> Option<Arc<rustls::ServerConfig>> + Send + Sync>;

/// How the bytes of an accepted connection are read.
#[derive(Clone, Default)]
pub enum Transport {
    /// HTTP/1 or h2c directly on the socket.
    #[default]
    Plain,
    /// TLS first, with the configuration the source gives at accept time
    /// (`None` closes the connection).
    Tls(TlsConfigSource),
}

/// What a plain HTTP request to a TLS port gets back before the close (the
/// words Go's server uses, so users recognise them).
const PLAIN_HTTP_TO_TLS: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// HTTP/2 streams a client may have open at once on one connection
/// (`SETTINGS_MAX_CONCURRENT_STREAMS`; hyper's default is 200). Our clients
/// (kubelet, Prometheus) use HTTP/1 and one request at a time.
pub const HTTP2_MAX_CONCURRENT_STREAMS: u32 = 16;
/// Largest HTTP/1 read buffer, which bounds a request head and the pipelined
/// requests buffered behind the one being answered (hyper answers pipelined
/// requests one at a time).
pub const HTTP1_MAX_BUF: usize = 64 * 1024;

/// Limits of the server, from the `--web.*` flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections held open at once (before clamping to the fd limit).
    pub max_connections: usize,
    /// A request head must arrive within this time from its first byte (from
    /// the accept for the first request of a connection, from the end of the
    /// previous request for a head that arrived while it was answered).
    pub read_header_timeout: Duration,
    /// A connection without a request in flight is closed after this time.
    pub idle_timeout: Duration,
    /// After the shutdown signal, in-flight requests get this long to finish;
    /// then every connection is closed.
    pub shutdown_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 512,
            read_header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(5),
        }
    }
}

/// File descriptors left for everything but client connections (the etcd
/// and sidecar clients, DNS, inotify, the policy file, logs): a quarter of
/// the soft limit, between 16 and 128.
pub fn fd_reserve(nofile_soft: u64) -> u64 {
    (nofile_soft / 4).clamp(16, 128)
}

/// The connection cap for `requested` under a soft `RLIMIT_NOFILE` of
/// `nofile_soft`: never more than the limit minus [`fd_reserve`], at least 1.
pub fn effective_cap(requested: usize, nofile_soft: u64) -> usize {
    let room = nofile_soft.saturating_sub(fd_reserve(nofile_soft)).max(1);
    requested
        .min(usize::try_from(room).unwrap_or(usize::MAX))
        .max(1)
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (where the kernel allows);
/// returns the soft limit now in force.
pub fn raise_nofile_limit() -> io::Result<u64> {
    rlimit::increase_nofile_limit(u64::MAX)
}

/// The soft `RLIMIT_NOFILE` in force (`u64::MAX` when unlimited or unknown).
pub fn nofile_soft_limit() -> u64 {
    rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(u64::MAX, |(soft, _)| soft)
}

/// What the watchdog of one connection reads. Times are milliseconds since
/// [`Connections::epoch`], plus one, with 0 meaning "none".
#[derive(Debug)]
struct ConnState {
    accepted: u64,
    /// Requests being answered on this connection.
    in_flight: AtomicUsize,
    /// Requests answered so far.
    served: AtomicU64,
    /// When the last request finished (or the accept).
    last_progress: AtomicU64,
    /// First byte read while no request was in flight: a head is arriving.
    head_started: AtomicU64,
    /// HTTP/2 (h2c or ALPN): bytes read while a request is in flight are
    /// frames of any stream, not the next request's head.
    http2: AtomicBool,
    /// The request in flight has a body, which is read while it is answered.
    body_in_flight: AtomicBool,
    /// HTTP/1 bytes were read while a bodiless request was in flight: the
    /// next request's head, buffered by hyper behind the one being answered
    /// (a pipelining client, or a head trickled in behind a held long poll).
    /// Its first byte reached no idle connection, so the header timeout
    /// runs from the end of each request instead. Never cleared: how much of
    /// what was read is still buffered is hyper's to know, and a chain of
    /// pipelined requests can leave a partial head behind any of them.
    pipelined: AtomicBool,
    /// Its deadline moved (a head started, a request ended): the watchdog
    /// computes it again.
    rearm: Notify,
    /// Told to close now (evicted).
    close: Notify,
    /// Its socket is closed (the connection's task ended).
    closed: Notify,
}

impl ConnState {
    /// When this connection may be closed as idle or slow, if no request is
    /// in flight by then.
    fn deadline(&self, limits: &Limits) -> u64 {
        let header = limits.read_header_timeout.as_millis() as u64;
        let idle = limits.idle_timeout.as_millis() as u64;
        if self.served.load(Ordering::Acquire) == 0 && self.in_flight.load(Ordering::Acquire) == 0 {
            return self.accepted.saturating_add(header);
        }
        match self.head_started.load(Ordering::Acquire) {
            0 => self
                .last_progress
                .load(Ordering::Acquire)
                .saturating_add(idle),
            t => t.saturating_add(header),
        }
    }

    fn phase(&self) -> TimeoutPhase {
        if self.served.load(Ordering::Acquire) == 0
            || self.head_started.load(Ordering::Acquire) != 0
        {
            TimeoutPhase::Header
        } else {
            TimeoutPhase::Idle
        }
    }
}

/// The open connections, for the cap and eviction.
struct Connections {
    epoch: Instant,
    clock: Clock,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
}

impl Connections {
    fn now(&self) -> u64 {
        self.clock
            .now()
            .saturating_duration_since(self.epoch)
            .as_millis() as u64
            + 1
    }

    fn at(&self, t: u64) -> tokio::time::Instant {
        (self.epoch + Duration::from_millis(t.saturating_sub(1))).into()
    }

    fn len(&self) -> usize {
        self.open.locked().len()
    }

    fn register(&self) -> (u64, Arc<ConnState>) {
        let now = self.now();
        let state = Arc::new(ConnState {
            accepted: now,
            in_flight: AtomicUsize::new(0),
            served: AtomicU64::new(0),
            last_progress: AtomicU64::new(now),
            head_started: AtomicU64::new(0),
            http2: AtomicBool::new(false),
            body_in_flight: AtomicBool::new(false),
            pipelined: AtomicBool::new(false),
            rearm: Notify::new(),
            close: Notify::new(),
            closed: Notify::new(),
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.open.locked().insert(id, state.clone());
        (id, state)
    }

    fn remove(&self, id: u64) {
        self.open.locked().remove(&id);
    }

    /// Close the connection that made progress longest ago among those with
    /// no request in flight (slowloris heads never progress, so they go
    /// first). None when every connection is busy answering.
    fn evict_one(&self) -> Option<Arc<ConnState>> {
        let mut open = self.open.locked();
        let victim = open
            .iter()
            .filter(|(_, s)| s.in_flight.load(Ordering::Acquire) == 0)
            .min_by_key(|(_, s)| s.last_progress.load(Ordering::Acquire))
            .map(|(id, _)| *id);
        let victim = victim.and_then(|id| open.remove(&id))?;
        victim.close.notify_one();
        Some(victim)
    }

    /// [`Connections::evict_one`], then wait (at most a second) until the
    /// victim's socket is closed, so that evictions never add up to more
    /// descriptors than the cap.
    async fn evict_and_wait(&self) -> bool {
        match self.evict_one() {
            Some(victim) => {
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), victim.closed.notified()).await;
                true
            }
            None => false,
        }
    }
}

/// Counts a request in flight on its connection while alive.
struct InFlight {
    state: Arc<ConnState>,
    conns: Arc<Connections>,
}

impl InFlight {
    /// A request of `version` starts; `has_body` when its body is still to
    /// be read.
    fn start(
        state: Arc<ConnState>,
        conns: Arc<Connections>,
        version: hyper::Version,
        has_body: bool,
    ) -> Self {
        if version == hyper::Version::HTTP_2 {
            state.http2.store(true, Ordering::Release);
        }
        state.body_in_flight.store(has_body, Ordering::Release);
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        state.head_started.store(0, Ordering::Release);
        InFlight { state, conns }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = self.conns.now();
        self.state.last_progress.store(now, Ordering::Release);
        // A head buffered behind this request gets the header timeout
        // from now; otherwise the connection is idle.
        let head = if self.state.pipelined.load(Ordering::Acquire) {
            now
        } else {
            0
        };
        self.state.head_started.store(head, Ordering::Release);
        self.state.body_in_flight.store(false, Ordering::Release);
        self.state.served.fetch_add(1, Ordering::AcqRel);
        self.state.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.state.rearm.notify_one();
    }
}

/// A stream that notes when a request head starts arriving on an idle
/// connection, so that the header-read timeout runs from the first byte,
/// and when HTTP/1 bytes arrive behind a bodiless request in flight
/// ([`ConnState::pipelined`]).
struct Watched<T> {
    inner: T,
    state: Arc<ConnState>,
    conns: Arc<Connections>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let state = &self.state;
            if state.in_flight.load(Ordering::Acquire) == 0 {
                if state.head_started.load(Ordering::Acquire) == 0 {
                    state
                        .head_started
                        .store(self.conns.now(), Ordering::Release);
                    state.rearm.notify_one();
                }
            } else if !state.http2.load(Ordering::Acquire)
                && !state.body_in_flight.load(Ordering::Acquire)
            {
                state.pipelined.store(true, Ordering::Release);
            }
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// One HTTP server: limits, connection bookkeeping and metrics.
pub struct Server {
    /// The runtime's clock (the connections' deadlines, the warnings' pace).
    clock: Clock,
    limits: Limits,
    cap: usize,
    metrics: ConnectionMetrics,
    conns: Arc<Connections>,
    builder: Arc<auto::Builder<TokioExecutor>>,
}

impl Server {
    /// A server whose connection cap is `limits.max_connections` clamped below
    /// the current soft `RLIMIT_NOFILE`.
    pub fn new(limits: Limits, metrics: ConnectionMetrics, clock: Clock) -> Self {
        let soft = nofile_soft_limit();
        let cap = effective_cap(limits.max_connections, soft);
        if cap < limits.max_connections {
            tracing::warn!(
                requested = limits.max_connections,
                cap,
                nofile = soft,
                "--web.max-connections lowered to stay below RLIMIT_NOFILE"
            );
        }
        metrics.set_limit(cap);
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            // Our watchdog runs the header timeout from the first byte of a
            // head, so that an idle keep-alive connection gets the idle
            // timeout instead (hyper's timer starts as soon as it waits).
            .header_read_timeout(None)
            .max_buf_size(HTTP1_MAX_BUF)
            .keep_alive(true);
        builder
            .http2()
            .max_concurrent_streams(HTTP2_MAX_CONCURRENT_STREAMS)
            .max_pending_accept_reset_streams(Some(20))
            .max_header_list_size(HTTP1_MAX_BUF as u32);
        Server {
            limits,
            cap,
            metrics,
            conns: Arc::new(Connections {
                epoch: clock.now(),
                clock: clock.clone(),
                next_id: AtomicU64::new(0),
                open: Mutex::new(HashMap::new()),
            }),
            builder: Arc::new(builder),
            clock,
        }
    }

    /// The connection cap in force.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Accept on `listener` and serve `router` until `stop` is cancelled
    /// (connections begin their graceful shutdown at the same moment); then
    /// stop accepting (dropping this reference to
    /// the listener: the socket closes with the last one), let in-flight
    /// requests finish for at most `shutdown_timeout`, and close whatever is
    /// left. Returns after every connection is closed.
    pub async fn serve(
        &self,
        listener: Arc<TcpListener>,
        router: Router,
        transport: &Transport,
        stop: CancellationToken,
    ) -> io::Result<()> {
        let mut tasks = JoinSet::new();
        let mut last_warned: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok((tcp, peer)) => {
                        let _ = tcp.set_nodelay(true);
                        if self.conns.len() >= self.cap {
                            if self.conns.evict_and_wait().await {
                                self.metrics.evicted();
                            } else {
                                self.metrics.rejected();
                                drop(tcp);
                                continue;
                            }
                        }
                        match transport {
                            Transport::Plain => {
                                tasks.spawn(self.serve_io(tcp, Some(peer), router.clone(), stop.clone()));
                            }
                            Transport::Tls(source) => {
                                let handshake = tls_handshake(tcp, source(), self.metrics.clone());
                                tasks.spawn(self.serve_conn(handshake, Some(peer), router.clone(), stop.clone()));
                            }
                        }
                    }
                    Err(e) => {
                        self.metrics.accept_error();
                        let exhausted = matches!(e.raw_os_error(), Some(23 | 24)); // ENFILE, EMFILE
                        if exhausted && self.conns.evict_and_wait().await {
                            self.metrics.evicted();
                        }
                        let now = self.clock.now();
                        if last_warned.is_none_or(|t| now.saturating_duration_since(t) > Duration::from_secs(10)) {
                            tracing::warn!(error = %e, open = self.conns.len(), "accept failed");
                            last_warned = Some(now);
                        }
                        // Let closes land before trying again.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }
        drop(listener);
        let drained = tokio::time::timeout(self.limits.shutdown_timeout, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                open = tasks.len(),
                timeout = ?self.limits.shutdown_timeout,
                "closing connections still open at the shutdown deadline"
            );
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
        Ok(())
    }

    /// Serve HTTP/1 or h2c on one accepted stream, under the watchdog;
    /// `peer` (the source address) reaches handlers as
    /// `ConnectInfo<SocketAddr>`.
    pub fn serve_io<I>(
        &self,
        io: I,
        peer: Option<SocketAddr>,
        router: Router,
        graceful: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.serve_conn(async move { Some(io) }, peer, router, graceful)
    }

    /// Serve the stream `handshake` yields (`None`: close), under the
    /// watchdog. The connection counts against the cap from the start, and
    /// the handshake must finish within the header-read timeout from the
    /// accept (it is evictable meanwhile, like a slow request head).
    pub fn serve_conn<I, H>(
        &self,
        handshake: H,
        peer: Option<SocketAddr>,
        router: Router,
        graceful: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        H: std::future::Future<Output = Option<I>> + Send + 'static,
    {
        let (id, state) = self.conns.register();
        let conns = self.conns.clone();
        let builder = self.builder.clone();
        let metrics = self.metrics.clone();
        let limits = self.limits;
        metrics.opened();
        async move {
            // Runs on every exit, including abort at the shutdown deadline.
            let _open = OpenGuard {
                id,
                state: state.clone(),
                conns: conns.clone(),
                metrics: metrics.clone(),
            };
            let io = tokio::select! {
                io = handshake => io,
                _ = state.close.notified() => None,
                _ = tokio::time::sleep_until(conns.at(state.deadline(&limits))) => {
                    metrics.timed_out(TimeoutPhase::Header);
                    None
                }
            };
            let Some(io) = io else { return };
            let io = Watched {
                inner: io,
                state: state.clone(),
                conns: conns.clone(),
            };
            let svc_state = state.clone();
            let svc_conns = conns.clone();
            let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                let has_body = !hyper::body::Body::is_end_stream(req.body());
                let guard = InFlight::start(
                    svc_state.clone(),
                    svc_conns.clone(),
                    req.version(),
                    has_body,
                );
                let router = router.clone();
                if let Some(peer) = peer {
                    req.extensions_mut()
                        .insert(axum::extract::ConnectInfo(peer));
                }
                async move {
                    let resp = router.oneshot(req.map(axum::body::Body::new)).await;
                    drop(guard);
                    resp
                }
            });
            let conn = builder.serve_connection(TokioIo::new(io), service);
            tokio::pin!(conn);
            drive(conn, &state, &conns, limits, &metrics, &graceful).await;
        }
    }
}

/// Poll the connection `conn` until it ends, is closed (evicted), or its
/// deadline passes with no request in flight; on `graceful`, start its
/// graceful shutdown (once) and go on polling it. The deadline is computed
/// again whenever it moves ([`ConnState::rearm`]): a head that starts on a
/// connection whose watchdog sleeps until its idle deadline gets the
/// header timeout from its first byte.
async fn drive<C>(
    mut conn: Pin<&mut C>,
    state: &ConnState,
    conns: &Connections,
    limits: Limits,
    metrics: &ConnectionMetrics,
    graceful: &CancellationToken,
) where
    C: GracefulConnection,
    C::Error: std::fmt::Display,
{
    let mut draining = false;
    loop {
        let deadline = conns.at(state.deadline(&limits));
        // `biased`, the connection first: the graceful shutdown must
        // find the connection already polled. Until hyper-util's
        // auto builder has read the first bytes it is still telling
        // HTTP/1 from h2c, and a graceful shutdown then ends it at
        // once, dropping a request that had arrived before the stop
        // (and a half-sent head is closed without waiting for the
        // shutdown deadline). Polled first, what the socket holds
        // is read: a whole request is answered, a partial head
        // waits, only a connection that sent nothing closes at once.
        tokio::select! {
            biased;
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            _ = state.close.notified() => break,
            // The deadline moved: computed again at the top of the loop.
            _ = state.rearm.notified() => {}
            _ = graceful.cancelled(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = tokio::time::sleep_until(deadline) => {
                let now = conns.now();
                if state.in_flight.load(Ordering::Acquire) == 0
                    && state.deadline(&limits) <= now
                {
                    metrics.timed_out(state.phase());
                    break;
                }
                if state.in_flight.load(Ordering::Acquire) > 0 {
                    // Look again one timeout from now; the end of the
                    // request moves the deadline anyway.
                    state.last_progress.store(now, Ordering::Release);
                    state.head_started.store(0, Ordering::Release);
                }
            }
        }
    }
}

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

/// The TLS handshake of one accepted connection with `config`. A client
/// whose first byte is not a TLS handshake record but an ASCII letter is
/// speaking plain HTTP: it gets a short `400` and the close.
async fn tls_handshake(
    tcp: TcpStream,
    config: Option<Arc<rustls::ServerConfig>>,
    metrics: ConnectionMetrics,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let config = config?;
    let mut first = [0u8; 1];
    match tcp.peek(&mut first).await {
        Ok(1) if first[0].is_ascii_alphabetic() => {
            use tokio::io::AsyncWriteExt;
            metrics.tls_handshake_failed();
            let mut tcp = tcp;
            let _ = tcp.write_all(PLAIN_HTTP_TO_TLS).await;
            let _ = tcp.shutdown().await;
            return None;
        }
        Ok(1) => {}
        _ => return None,
    }
    match tokio_rustls::TlsAcceptor::from(config).accept(tcp).await {
        Ok(s) => Some(s),
        Err(e) => {
            metrics.tls_handshake_failed();
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
    }
}

/// Takes the connection off the books when its task ends.
struct OpenGuard {
    id: u64,
    state: Arc<ConnState>,
    conns: Arc<Connections>,
    metrics: ConnectionMetrics,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.conns.remove(self.id);
        self.metrics.closed();
        // Stored as a permit if the accept loop is not waiting yet.
        self.state.closed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_stays_below_the_fd_limit_with_headroom() {
        assert_eq!(effective_cap(512, 1024), 512);
        assert_eq!(effective_cap(5000, 1024), 1024 - 128);
        assert_eq!(effective_cap(5000, 256), 256 - 64);
        assert_eq!(effective_cap(5000, 40), 40 - 16);
        assert_eq!(effective_cap(5000, 10), 1);
        assert_eq!(effective_cap(100, u64::MAX), 100);
    }

    fn conns() -> Connections {
        let clock = Clock::node();
        Connections {
            epoch: clock.now(),
            clock,
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        }
    }

    #[test]
    fn eviction_takes_the_longest_idle_and_spares_busy_connections() {
        let c = conns();
        let (_, a) = c.register();
        let (_, b) = c.register();
        let (_, busy) = c.register();
        a.last_progress.store(50, Ordering::Release);
        b.last_progress.store(10, Ordering::Release);
        busy.last_progress.store(1, Ordering::Release);
        busy.in_flight.store(1, Ordering::Release);
        assert!(c.evict_one().is_some_and(|v| Arc::ptr_eq(&v, &b)));
        assert_eq!(c.len(), 2);
        let open = c.open.lock().unwrap();
        assert!(open.values().any(|s| Arc::ptr_eq(s, &a)));
        assert!(open.values().any(|s| Arc::ptr_eq(s, &busy)));
        drop(open);
        assert!(c.evict_one().is_some_and(|v| Arc::ptr_eq(&v, &a)));
        assert!(
            c.evict_one().is_none(),
            "a connection answering a request is never evicted"
        );
    }

    /// A connection whose task first runs after the stop, with `sent`
    /// already in its socket: what the client reads until the server
    /// closes, or None when the server still holds it after a second.
    async fn after_the_stop(sent: &[u8]) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let server = Server::new(
            Limits::default(),
            ConnectionMetrics::register(&mut prometheus_client::registry::Registry::default()),
            Clock::node(),
        );
        let router = Router::new().route("/livez", axum::routing::get(|| async { "ok" }));
        let (mut client, io) = tokio::io::duplex(4096);
        client.write_all(sent).await.unwrap();
        let stop = CancellationToken::new();
        stop.cancel();
        let conn = tokio::spawn(server.serve_io(io, None, router, stop));
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(1), client.read_to_end(&mut got)).await;
        conn.abort();
        read.ok()
            .map(|_| String::from_utf8_lossy(&got).into_owned())
    }

    #[tokio::test]
    async fn regression_a_request_read_after_the_stop_is_answered_and_a_half_sent_head_waits() {
        // Before the connection was polled first, the graceful shutdown
        // caught hyper-util still telling HTTP/1 from h2c and ended the
        // connection at once: the whole request went unanswered, and the
        // half-sent head of http_hardening's SIGTERM test was closed before
        // the shutdown deadline (its log then lacked that line).
        let whole = after_the_stop(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let whole = whole.expect("the server closes after answering");
        assert!(whole.starts_with("HTTP/1.1 200 OK\r\n"), "{whole:?}");
        assert!(whole.ends_with("ok"), "{whole:?}");
        assert_eq!(
            after_the_stop(b"GET /livez HTTP/1.1\r\nHost: x\r\n").await,
            None,
            "a half-sent head is held for the shutdown deadline, not closed"
        );
        assert_eq!(
            after_the_stop(b"").await.as_deref(),
            Some(""),
            "nothing sent: closed at once"
        );
    }

    /// A stream that counts the bytes read from it.
    struct CountedReads<T> {
        inner: T,
        read: Arc<AtomicUsize>,
    }

    impl<T> CountedReads<T> {
        fn new(inner: T) -> Self {
            CountedReads {
                inner,
                read: Arc::new(AtomicUsize::new(0)),
            }
        }
    }

    impl<T: AsyncRead + Unpin> AsyncRead for CountedReads<T> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let before = buf.filled().len();
            let r = Pin::new(&mut self.inner).poll_read(cx, buf);
            let n = buf.filled().len() - before;
            self.read.fetch_add(n, Ordering::AcqRel);
            r
        }
    }

    impl<T: AsyncWrite + Unpin> AsyncWrite for CountedReads<T> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.inner).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// What the client of a connection reads after sending a request to a
    /// handler that holds it past the header timeout, with `during` sent
    /// (and read by the server) meanwhile, then `after` sent once it is
    /// answered: all it
    /// reads, and whether the server closed the connection within `within`
    /// (a header timeout of 200 ms, an idle timeout of an hour: only the
    /// header timeout can close it in that time).
    async fn behind_a_held_request(
        during: &[u8],
        after: &[u8],
        within: Duration,
    ) -> (String, bool) {
        use etcd_readiness_testkit::wait::wait_until;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let server = Server::new(
            Limits {
                read_header_timeout: Duration::from_millis(200),
                idle_timeout: Duration::from_secs(3600),
                ..Limits::default()
            },
            ConnectionMetrics::register(&mut prometheus_client::registry::Registry::default()),
            Clock::node(),
        );
        let release = Arc::new(Notify::new());
        let held = Arc::new(Notify::new());
        let (r, h) = (release.clone(), held.clone());
        let router = Router::new().route(
            "/held",
            axum::routing::get(move || async move {
                h.notify_one();
                r.notified().await;
                "released"
            }),
        );
        let (mut client, io) = tokio::io::duplex(4096);
        let io = CountedReads::new(io);
        let read = io.read.clone();
        let conn = tokio::spawn(server.serve_io(io, None, router, CancellationToken::new()));
        let state = server.conns.open.locked().values().next().cloned().unwrap();
        let first = b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n";
        client.write_all(first).await.unwrap();
        held.notified().await;
        client.write_all(during).await.unwrap();
        let sent = first.len() + during.len();
        wait_until(
            "the server to read what was sent while the request is held",
            Duration::from_secs(10),
            || std::future::ready(read.load(Ordering::Acquire) == sent),
        )
        .await;
        // Held past the first head's header deadline, where the watchdog
        // looked at the connection and, a request being in flight, slept
        // until one idle timeout on.
        let header = server.limits.read_header_timeout.as_millis() as u64;
        wait_until(
            "the request to be held past its head's header deadline, twice over",
            Duration::from_secs(10),
            || std::future::ready(server.conns.now() > state.accepted + 2 * header),
        )
        .await;
        release.notify_one();
        wait_until(
            "the held request to be answered",
            Duration::from_secs(10),
            || std::future::ready(state.served.load(Ordering::Acquire) == 1),
        )
        .await;
        client.write_all(after).await.unwrap();
        let mut got = Vec::new();
        let closed = tokio::time::timeout(within, client.read_to_end(&mut got))
            .await
            .is_ok();
        conn.abort();
        (String::from_utf8_lossy(&got).into_owned(), closed)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn regression_a_head_behind_a_held_request_gets_the_header_timeout() {
        // Issue 45: a head behind a held long poll kept its connection for
        // the idle timeout (65 s behind `?wait=5s`) instead of the header
        // timeout. The watchdog slept until the deadline it had computed
        // while the request was held (one idle timeout on), and nothing
        // woke it when a head started; and a head trickled in while the
        // request was held was read into hyper's buffer with a request in
        // flight, so its first byte was never noted at all.
        let head = b"GET /held HTTP/1.1\r\nHo";
        for (during, after) in [(&head[..], &b""[..]), (&b""[..], &head[..])] {
            let (got, closed) = behind_a_held_request(during, after, Duration::from_secs(20)).await;
            assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got:?}");
            assert!(got.ends_with("released"), "{got:?}");
            assert!(
                closed,
                "a head sent {} the held request was still open 20 s after the answer, \
                 under a 200 ms header timeout",
                if during.is_empty() { "after" } else { "during" }
            );
        }
    }

    #[test]
    fn after_a_request_the_deadline_is_idle_unless_a_head_arrived_behind_it() {
        let c = Arc::new(conns());
        let limits = Limits {
            read_header_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(60),
            ..Limits::default()
        };
        let (_, s) = c.register();
        let start = |version, has_body| InFlight::start(s.clone(), c.clone(), version, has_body);
        drop(start(hyper::Version::HTTP_11, false));
        let ended = s.last_progress.load(Ordering::Acquire);
        assert_eq!(s.deadline(&limits), ended + 60_000);
        assert_eq!(s.phase(), TimeoutPhase::Idle);

        s.pipelined.store(true, Ordering::Release);
        drop(start(hyper::Version::HTTP_11, false));
        let ended = s.last_progress.load(Ordering::Acquire);
        assert_eq!(s.deadline(&limits), ended + 2_000);
        assert_eq!(s.phase(), TimeoutPhase::Header);
    }

    #[test]
    fn deadlines_header_from_accept_then_idle_then_header_from_first_byte() {
        let c = conns();
        let limits = Limits {
            read_header_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(60),
            ..Limits::default()
        };
        let (_, s) = c.register();
        assert_eq!(s.deadline(&limits), s.accepted + 2_000);
        assert_eq!(s.phase(), TimeoutPhase::Header);
        s.served.store(1, Ordering::Release);
        s.last_progress.store(1_000, Ordering::Release);
        assert_eq!(s.deadline(&limits), 61_000);
        assert_eq!(s.phase(), TimeoutPhase::Idle);
        s.head_started.store(5_000, Ordering::Release);
        assert_eq!(s.deadline(&limits), 7_000);
        assert_eq!(s.phase(), TimeoutPhase::Header);
    }
}
