//! A connection driven under its deadline: the request count that holds it
//! open, the stream that notes when a head starts arriving (or arrives
//! behind a request in flight), and the loop that closes it when its
//! deadline passes with no request in flight.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use hyper_util::server::graceful::GracefulConnection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

use super::super::metrics::ConnectionMetrics;
use super::connections::{ConnState, Connections};
use super::limits::Limits;

/// Counts a request in flight on its connection while alive.
pub(super) struct InFlight {
    pub(super) state: Arc<ConnState>,
    pub(super) conns: Arc<Connections>,
}

impl InFlight {
    /// A request of `version` starts; `has_body` when its body is still to
    /// be read.
    pub(super) fn start(
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
pub(super) struct Watched<T> {
    pub(super) inner: T,
    pub(super) state: Arc<ConnState>,
    pub(super) conns: Arc<Connections>,
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

/// Poll the connection `conn` until it ends, is closed (evicted), or its
/// deadline passes with no request in flight; on `graceful`, start its
/// graceful shutdown (once) and go on polling it. The deadline is computed
/// again whenever it moves ([`ConnState::rearm`]): a head that starts on a
/// connection whose watchdog sleeps until its idle deadline gets the
/// header timeout from its first byte.
pub(super) async fn drive<C>(
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
