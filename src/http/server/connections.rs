//! The open connections' books: what the watchdog of each reads (its
//! deadline and phase), the registry the cap counts, eviction of the
//! longest-idle connection, and the guard that takes a connection off them.

use crate::runtime::clock::Clock;
use etcd_readiness_policy::sync::TolerantLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::super::metrics::{ConnectionMetrics, TimeoutPhase};
use super::limits::Limits;

/// What the watchdog of one connection reads. Times are milliseconds since
/// [`Connections::epoch`], plus one, with 0 meaning "none".
#[derive(Debug)]
pub(super) struct ConnState {
    pub(super) accepted: u64,
    /// Requests being answered on this connection.
    pub(super) in_flight: AtomicUsize,
    /// Requests answered so far.
    pub(super) served: AtomicU64,
    /// When the last request finished (or the accept).
    pub(super) last_progress: AtomicU64,
    /// First byte read while no request was in flight: a head is arriving.
    pub(super) head_started: AtomicU64,
    /// HTTP/2 (h2c or ALPN): bytes read while a request is in flight are
    /// frames of any stream, not the next request's head.
    pub(super) http2: AtomicBool,
    /// The request in flight has a body, which is read while it is answered.
    pub(super) body_in_flight: AtomicBool,
    /// HTTP/1 bytes were read while a bodiless request was in flight: the
    /// next request's head, buffered by hyper behind the one being answered
    /// (a pipelining client, or a head trickled in behind a held long poll).
    /// Its first byte reached no idle connection, so the header timeout
    /// runs from the end of each request instead. Never cleared: how much of
    /// what was read is still buffered is hyper's to know, and a chain of
    /// pipelined requests can leave a partial head behind any of them.
    pub(super) pipelined: AtomicBool,
    /// Its deadline moved (a head started, a request ended): the watchdog
    /// computes it again.
    pub(super) rearm: Notify,
    /// Told to close now (evicted).
    pub(super) close: Notify,
    /// Its socket is closed (the connection's task ended).
    pub(super) closed: Notify,
}

impl ConnState {
    /// When this connection may be closed as idle or slow, if no request is
    /// in flight by then.
    pub(super) fn deadline(&self, limits: &Limits) -> u64 {
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

    pub(super) fn phase(&self) -> TimeoutPhase {
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
pub(super) struct Connections {
    pub(super) epoch: Instant,
    pub(super) clock: Clock,
    pub(super) next_id: AtomicU64,
    pub(super) open: Mutex<HashMap<u64, Arc<ConnState>>>,
}

impl Connections {
    pub(super) fn now(&self) -> u64 {
        self.clock
            .now()
            .saturating_duration_since(self.epoch)
            .as_millis() as u64
            + 1
    }

    pub(super) fn at(&self, t: u64) -> tokio::time::Instant {
        (self.epoch + Duration::from_millis(t.saturating_sub(1))).into()
    }

    pub(super) fn len(&self) -> usize {
        self.open.locked().len()
    }

    pub(super) fn register(&self) -> (u64, Arc<ConnState>) {
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

    pub(super) fn remove(&self, id: u64) {
        self.open.locked().remove(&id);
    }

    /// Close the connection that made progress longest ago among those with
    /// no request in flight (slowloris heads never progress, so they go
    /// first). None when every connection is busy answering.
    pub(super) fn evict_one(&self) -> Option<Arc<ConnState>> {
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
    pub(super) async fn evict_and_wait(&self) -> bool {
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

/// Takes the connection off the books when its task ends.
pub(super) struct OpenGuard {
    pub(super) id: u64,
    pub(super) state: Arc<ConnState>,
    pub(super) conns: Arc<Connections>,
    pub(super) metrics: ConnectionMetrics,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.conns.remove(self.id);
        self.metrics.closed();
        // Stored as a permit if the accept loop is not waiting yet.
        self.state.closed.notify_one();
    }
}
