//! Long-poll readiness: `/readyz?wait=DURATION` (and `/readyz/NAME`,
//! `?verbose`, `?policy=candidate`, on both listeners). A request that asks
//! may be held, at most `DURATION` (at most [`super::readyz::MAX_WAIT`]), and is answered
//! the moment its answer would change, so that a polling kubelet sees a
//! change when it happens instead of at its next tick.
//!
//! The rule that decides whether to hold ([`Memory::decide`]): a request is
//! held only when the same request (path, query, `Accept: json`) from the
//! same address was answered less than twice its wait ago **with the answer
//! it would get now**. The kubelet opens a new connection per probe and
//! sends no state, but it probes one at a time, from the node's address,
//! with a fixed path: the last answer to that request is the one it saw.
//! So a change that lands between two probes (after one answer, before the
//! next request) is answered at once, whatever the period, and a request is
//! held only while its client already has the answer it would get. A
//! request without such a memory (the first, one after more than twice its
//! wait, or one the bounded memory forgot) is answered at once: not holding
//! is always safe. Over [`Holds`]' cap a request is answered at once too.
//!
//! A held request ends at the first of: its answer differs from the one it
//! started with (the engine's change generation, [`crate::engine::EngineHandle::changes`],
//! wakes it; the verdict going stale too), the wait runs out (it answers
//! what it would have answered at once), the shutdown signal (answered at
//! once with the current verdict), or its client going away. Each end is
//! counted ([`LongPollMetrics`]).

use etcd_readiness_policy::sync::TolerantLock;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use super::readyz::{ReadyzQuery, Rendered};
use super::{AppState, Target, render_readyz};

/// Requests remembered per listener (their last answer); the oldest is
/// forgotten first. A forgotten request is answered at once next time.
pub const MEMORY: usize = 256;

/// Held requests per listener at most: a quarter of its connection cap, at
/// most this many.
pub const MAX_HELD: usize = 64;

/// The held-request cap for a listener of `connection_cap` connections: a
/// quarter of them (at least one), so that held connections, which are
/// never evicted, leave three quarters of the cap evictable.
pub fn held_cap(connection_cap: usize) -> usize {
    (connection_cap / 4).clamp(1, MAX_HELD)
}

/// What decides a request's hold: who asked what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestKey(u64);

/// Why a request that asked to wait was answered at once, or how a held
/// one ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Answered at once: the same request was not answered recently with
    /// this answer (a change it has not seen, or a first request).
    Unseen,
    /// Answered at once: the listener holds [`Holds::cap`] requests already.
    OverCap,
    /// Held until its answer changed.
    Changed,
    /// Held for the whole wait; answered what it would have at once.
    Waited,
    /// Held until the shutdown signal; answered at once then.
    Shutdown,
    /// Its client went away while it was held.
    Gone,
}

impl Ended {
    pub const ALL: [Ended; 6] = [
        Ended::Unseen,
        Ended::OverCap,
        Ended::Changed,
        Ended::Waited,
        Ended::Shutdown,
        Ended::Gone,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Unseen => "unseen",
            Ended::OverCap => "over_cap",
            Ended::Changed => "changed",
            Ended::Waited => "waited",
            Ended::Shutdown => "shutdown",
            Ended::Gone => "gone",
        }
    }
}

/// The last answer given to one request.
#[derive(Clone, Copy, Debug)]
struct Seen {
    ready: bool,
    at: Instant,
}

/// The bounded memory of last answers, and the rule. Pure: the time is
/// passed in.
#[derive(Debug, Default)]
pub struct Memory {
    seen: HashMap<RequestKey, Seen>,
}

impl Memory {
    /// Hold a request that would answer `ready` now, asking to wait `wait`?
    /// Only when the same request was answered `ready` less than `2 × wait`
    /// ago: its client has that answer, so holding it hides nothing.
    pub fn decide(&self, key: RequestKey, ready: bool, wait: Duration, now: Instant) -> bool {
        self.seen.get(&key).is_some_and(|s| {
            s.ready == ready && now.saturating_duration_since(s.at) < wait.saturating_mul(2)
        })
    }

    /// `key` was answered `ready` at `now`.
    pub fn answered(&mut self, key: RequestKey, ready: bool, now: Instant) {
        if self.seen.len() >= MEMORY && !self.seen.contains_key(&key) {
            let oldest = self.seen.iter().min_by_key(|(_, s)| s.at).map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.seen.remove(&k);
            }
        }
        self.seen.insert(key, Seen { ready, at: now });
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndedLabels {
    listener: String,
    ended: String,
}

/// `etcd_readiness_http_held_requests{listener}` (held now) and
/// `etcd_readiness_http_long_polls_total{listener,ended}` (every request
/// that asked to wait, by how it ended: [`Ended`]).
#[derive(Clone, Debug, Default)]
pub struct LongPollMetrics {
    held: Family<ListenerLabels, Gauge>,
    ended: Family<EndedLabels, Counter>,
}

impl LongPollMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = LongPollMetrics::default();
        registry.register(
            "etcd_readiness_http_held_requests",
            "Requests with ?wait= held now, waiting for their answer to change, by listener",
            m.held.clone(),
        );
        registry.register(
            "etcd_readiness_http_long_polls",
            "Requests with ?wait=, by listener and how they ended: unseen and over_cap were answered at once (a change the client had not seen; the cap of held requests), changed, waited and shutdown were held until then, gone lost their client while held",
            m.ended.clone(),
        );
        m
    }

    fn init(&self, listener: &str) {
        let _ = self.held.get_or_create(&ListenerLabels {
            listener: listener.to_string(),
        });
        for e in Ended::ALL {
            let _ = self.ended.get_or_create(&EndedLabels {
                listener: listener.to_string(),
                ended: e.as_str().to_string(),
            });
        }
    }

    fn held(&self, listener: &str) -> Gauge {
        self.held
            .get_or_create(&ListenerLabels {
                listener: listener.to_string(),
            })
            .clone()
    }

    fn ended(&self, listener: &str, e: Ended) {
        self.ended
            .get_or_create(&EndedLabels {
                listener: listener.to_string(),
                ended: e.as_str().to_string(),
            })
            .inc();
    }
}

/// One listener's long polls: the memory of last answers, the cap of held
/// requests, the shutdown signal that answers them all at once, metrics.
#[derive(Debug)]
pub struct Holds {
    listener: &'static str,
    cap: usize,
    held: AtomicUsize,
    memory: std::sync::Mutex<Memory>,
    hasher: RandomState,
    shutdown: CancellationToken,
    metrics: LongPollMetrics,
    gauge: Gauge,
}

impl Holds {
    /// The long polls of the listener `listener` (a metric label), holding
    /// at most `cap` requests, each answered at once on `shutdown`.
    pub fn new(
        listener: &'static str,
        cap: usize,
        shutdown: CancellationToken,
        metrics: LongPollMetrics,
    ) -> Arc<Self> {
        metrics.init(listener);
        Arc::new(Holds {
            listener,
            cap: cap.max(1),
            held: AtomicUsize::new(0),
            memory: std::sync::Mutex::new(Memory::default()),
            hasher: RandomState::new(),
            gauge: metrics.held(listener),
            shutdown,
            metrics,
        })
    }

    /// Most requests held at once.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Requests held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// The shutdown signal: every held request is answered when it fires.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// The identity of a request: the client's address (not its port: the
    /// kubelet opens a new connection per probe), the path and query, and
    /// whether it asked for JSON. Hashed with a per-process key, so the
    /// memory stays small whatever the request.
    pub fn key(&self, peer: Option<IpAddr>, path: &str, query: &str, json: bool) -> RequestKey {
        RequestKey(self.hasher.hash_one((peer, path, query, json)))
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.locked()
    }

    /// Hold the request `key`, which would answer `ready` now? A [`Held`]
    /// slot when it may wait; else why it is answered at once (counted).
    pub fn admit(
        self: &Arc<Self>,
        key: RequestKey,
        ready: bool,
        wait: Duration,
        now: Instant,
    ) -> Result<Held, Ended> {
        let why = if !self.memory().decide(key, ready, wait, now) {
            Ended::Unseen
        } else if self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .is_ok()
        {
            self.gauge.inc();
            return Ok(Held {
                holds: self.clone(),
                ended: Ended::Gone,
            });
        } else {
            Ended::OverCap
        };
        self.metrics.ended(self.listener, why);
        Err(why)
    }

    /// `key` was answered `ready` now.
    pub fn answered(&self, key: RequestKey, ready: bool, now: Instant) {
        self.memory().answered(key, ready, now);
    }
}

/// A held request's slot: counted in the gauge while it lives; how it ended
/// is counted when it is dropped ([`Ended::Gone`] unless [`Held::end`] said).
#[derive(Debug)]
pub struct Held {
    holds: Arc<Holds>,
    ended: Ended,
}

impl Held {
    pub fn end(mut self, how: Ended) {
        self.ended = how;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.holds.held.fetch_sub(1, Ordering::AcqRel);
        self.holds.gauge.dec();
        self.holds.metrics.ended(self.holds.listener, self.ended);
    }
}

/// The answer of a request with `?wait=`: at once unless its client already
/// has it ([`Holds::admit`]); else held until it changes, the wait
/// runs out or the shutdown signal, whichever comes first.
pub(super) async fn hold(
    s: &AppState,
    target: Target<'_>,
    q: &ReadyzQuery,
    wait: Duration,
    key: RequestKey,
) -> Rendered {
    // Subscribed before the first render: a publication after it wakes us.
    let mut changes = s.engine.changes();
    let clock = &s.runtime.clock;
    let start = clock.now();
    let first = render_readyz(s, target, q);
    let Some(ready) = first.ready else {
        return first;
    };
    let held = match s.holds.admit(key, ready, wait, start) {
        Ok(held) => held,
        Err(_) => {
            s.holds.answered(key, ready, clock.now());
            return first;
        }
    };
    let deadline = tokio::time::Instant::from_std(start + wait);
    let stale_after = s.engine.timing().verdict_stale_after();
    let mut open = true;
    let (how, answer) = loop {
        // A wedged engine publishes nothing: wake when the verdict would
        // turn stale, which changes the answer.
        let stale_at = s
            .engine
            .verdict()
            .at
            .checked_add(stale_after + Duration::from_millis(1))
            .filter(|t| *t > clock.now());
        let stale_armed = stale_at.is_some();
        let stale_at = stale_at.unwrap_or(start);
        tokio::select! {
            biased;
            _ = s.holds.shutdown().cancelled() => break (Ended::Shutdown, render_readyz(s, target, q)),
            _ = tokio::time::sleep_until(deadline) => break (Ended::Waited, render_readyz(s, target, q)),
            r = changes.changed(), if open => open = r.is_ok(),
            _ = tokio::time::sleep_until(stale_at.into()), if stale_armed => {}
        }
        let now = render_readyz(s, target, q);
        if now.ready != Some(ready) {
            break (Ended::Changed, now);
        }
    };
    held.end(how);
    if let Some(ready) = answer.ready {
        s.holds.answered(key, ready, clock.now());
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Format, encode};

    const WAIT: Duration = Duration::from_secs(5);

    /// The rule on virtual time, as a kubelet's sequence of probes meets it.
    #[test]
    fn a_request_is_held_only_while_its_client_has_the_answer_it_would_get() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let k = RequestKey(1);
        let other = RequestKey(2);
        let mut m = Memory::default();
        // (time, answer it would get now, held?, answered) in order.
        let steps: &[(u64, bool, bool)] = &[
            // The first probe: nothing seen, answered at once.
            (0, true, false),
            // The next: its client has "ready": held.
            (1_000, true, true),
            // The verdict changed between two probes: at once.
            (6_000, false, false),
            (6_010, false, true),
            // Back to ready just before the probe arrives: at once.
            (11_010, true, false),
            // More than twice the wait since the last answer: at once
            // (a restarted kubelet starts from "not ready").
            (30_000, true, false),
            (30_001, true, true),
        ];
        for (i, &(ms, ready, held)) in steps.iter().enumerate() {
            assert_eq!(
                m.decide(k, ready, WAIT, at(ms)),
                held,
                "step {i} at {ms} ms"
            );
            // Held or not, it is answered `ready` (held: at the end of the
            // wait, or earlier with the changed answer, recorded as such).
            m.answered(k, ready, at(ms));
        }
        assert!(
            !m.decide(other, true, WAIT, at(30_002)),
            "another request has its own memory"
        );
    }

    #[test]
    fn the_memory_is_bounded_and_forgets_the_oldest_first() {
        let t0 = Instant::now();
        let mut m = Memory::default();
        for i in 0..(MEMORY as u64 + 10) {
            m.answered(RequestKey(i), true, t0 + Duration::from_millis(i));
        }
        assert_eq!(m.len(), MEMORY);
        let now = t0 + Duration::from_secs(1);
        assert!(
            !m.decide(RequestKey(0), true, WAIT, now),
            "forgotten: at once"
        );
        assert!(m.decide(RequestKey(MEMORY as u64 + 9), true, WAIT, now));
    }

    #[test]
    fn the_cap_answers_at_once_and_every_end_is_counted() {
        let mut r = Registry::default();
        let metrics = LongPollMetrics::register(&mut r);
        let holds = Holds::new("probe", 2, CancellationToken::new(), metrics);
        let now = Instant::now();
        let k = holds.key(None, "/readyz", "wait=5s", false);
        assert_eq!(holds.admit(k, true, WAIT, now).unwrap_err(), Ended::Unseen);
        holds.answered(k, true, now);
        let a = holds.admit(k, true, WAIT, now).expect("held");
        let b = holds.admit(k, true, WAIT, now).expect("held");
        assert_eq!(holds.admit(k, true, WAIT, now).unwrap_err(), Ended::OverCap);
        assert_eq!(holds.held(), 2);
        let text = encode(&r, Format::Text004);
        assert!(
            text.contains("etcd_readiness_http_held_requests{listener=\"probe\"} 2\n"),
            "{text}"
        );
        a.end(Ended::Changed);
        drop(b);
        assert_eq!(holds.held(), 0);
        let text = encode(&r, Format::Text004);
        for line in [
            "etcd_readiness_http_held_requests{listener=\"probe\"} 0\n",
            "etcd_readiness_http_long_polls_total{listener=\"probe\",ended=\"unseen\"} 1\n",
            "etcd_readiness_http_long_polls_total{listener=\"probe\",ended=\"over_cap\"} 1\n",
            "etcd_readiness_http_long_polls_total{listener=\"probe\",ended=\"changed\"} 1\n",
            "etcd_readiness_http_long_polls_total{listener=\"probe\",ended=\"gone\"} 1\n",
            "etcd_readiness_http_long_polls_total{listener=\"probe\",ended=\"shutdown\"} 0\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        assert_eq!(held_cap(16), 4);
        assert_eq!(held_cap(512), MAX_HELD);
        assert_eq!(held_cap(1), 1);
    }
}
