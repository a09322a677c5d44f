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
//!
//! By idea: `limits.rs` (the `--web.*` limits and the connection cap under
//! `RLIMIT_NOFILE`), `tls.rs` (the transport of a listener and the TLS
//! accept), `connections.rs` (the open connections' books: deadlines,
//! eviction), `watchdog.rs` (a connection driven under its deadline, what
//! moves it), `thread.rs` (a server on its own thread and runtime, its
//! accept loop supervised); the accept loop and the connection path here.

mod connections;
mod limits;
mod thread;
mod tls;
mod watchdog;

use crate::runtime::clock::Clock;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::metrics::{ConnectionMetrics, TimeoutPhase};
use connections::{Connections, OpenGuard};
pub use limits::{
    HTTP1_MAX_BUF, HTTP2_MAX_CONCURRENT_STREAMS, Limits, effective_cap, fd_reserve,
    nofile_soft_limit, raise_nofile_limit,
};
pub use thread::ServerHandle;
use tls::tls_handshake;
pub use tls::{TlsConfigSource, Transport};
use watchdog::{InFlight, Watched, drive};

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

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_readiness_policy::sync::TolerantLock;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;
    use tokio::sync::Notify;

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
