//! How long an etcd call is given and how long its last answer is trusted
//! while it waits: the pure rules ([`Deadline`], [`LatencyWindow`]) fed the
//! node's time by the caller, and the two async wrappers that apply them
//! ([`bounded`], [`wake_at_expiry`]).
//!
//! One rule decides how long a call is given, whether its answer is awaited
//! or its lateness judged: its timeout plus the time the node's CPU was
//! contended while it ran, at most one election timeout of the member
//! ([`super::EtcdConfig::contended_max`]; the same credit a pending call's
//! trust gets in the store, [`Trust`]). A healthy member on
//! a node busy for a moment is late because it could not run, not because it
//! cannot serve; a frozen member on an idle node still times out.
//!
//! The trust in a call's last answer follows what this member's calls of
//! that kind normally take ([`LatencyWindow`]): a member that serves slowly
//! (a cluster stretched over distant zones, a slow disk) is not taken for
//! one that stopped answering, while a member whose calls normally answer
//! in milliseconds keeps the short trust that catches a freeze at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::super::{Reason, RoundNotifier, SampleError};
use super::errors::explain;
use crate::runtime::clock::{Clock, NodeTime};
use etcd_readiness_policy::policy::Policy;
use etcd_readiness_policy::signals::{Builtin, Trust};
use etcd_readiness_policy::text::fmt_secs_or_ms;

/// What the trust period adds to a freeze by the exporter's own CPU limit:
/// after a freeze the answer that arrived meanwhile still has to be read.
/// A tunable (ARCHITECTURE.md).
pub(super) const FREEZE_MARGIN: Duration = Duration::from_millis(20);
/// The longest deadline a policy can give a read ([`ReadFloor`]): a policy
/// that compares `qget_ms` with an hour still has its reads asked again
/// every 10 s. A bound on input, not a tunable: it caps what a policy asks.
pub const MAX_POLICY_READ_BOUND: Duration = Duration::from_secs(10);
/// How many answered calls of one kind [`LatencyWindow`] remembers (about
/// 3 s of reads at the default fast period). A tunable (ARCHITECTURE.md).
const WINDOW: usize = 32;
/// The trust a [`LatencyWindow`] asks for: this many times the high
/// quantile of its recent answers, so that an answer as slow as the slowest
/// recent ones, with a jitter as large again, is still expected. A tunable
/// (ARCHITECTURE.md).
const LATENCY_FACTOR: u32 = 2;
/// The quantile of the recent answers ([`LatencyWindow`]): the slowest but
/// every tenth, so that one outlier does not stretch the trust. A tunable
/// (ARCHITECTURE.md).
const QUANTILE: f64 = 0.9;

/// How long the policy in force still compares the reads' latency: the
/// largest constant it compares `qget_ms` or `sget_ms` with
/// ([`Policy::largest_compared`], milliseconds), at most
/// [`MAX_POLICY_READ_BOUND`]. Set where a policy is put in force (at start
/// and on every reload), read at the start of every read: a read is given
/// at least this long, so the sampler never gives up on an answer the
/// policy would accept (`qget_ms < 3000` on a cluster stretched over
/// distant zones). Shared; clones see the same value.
#[derive(Clone, Debug, Default)]
pub struct ReadFloor(Arc<AtomicU64>);

impl ReadFloor {
    /// Follow `policy`'s comparisons of the reads' latency.
    pub fn follow(&self, policy: &Policy) {
        let ms = [Builtin::QgetMs, Builtin::SgetMs]
            .into_iter()
            .filter_map(|b| policy.largest_compared(b.id()))
            .fold(0.0_f64, f64::max);
        let cap = MAX_POLICY_READ_BOUND.as_millis() as f64;
        // NaN never reaches here (only finite constants are compared); a
        // negative bound asks for nothing.
        let ms = ms.clamp(0.0, cap).ceil() as u64;
        self.0.store(ms, Ordering::Relaxed);
    }

    /// The deadline the policy asks for (zero when it compares neither).
    pub fn get(&self) -> Duration {
        // `follow`, the one writer, keeps it within MAX_POLICY_READ_BOUND.
        Duration::from_millis(self.0.load(Ordering::Relaxed))
    }
}

/// The latencies of the last [`WINDOW`] answered calls of one kind (a
/// failed or timed-out call says nothing about how long answers take).
#[derive(Clone, Debug, Default)]
pub(super) struct LatencyWindow {
    recent: Vec<Duration>,
    next: usize,
}

impl LatencyWindow {
    pub(super) fn record(&mut self, took: Duration) {
        if self.recent.len() < WINDOW {
            self.recent.push(took);
        } else {
            self.recent[self.next] = took;
        }
        self.next = (self.next + 1) % WINDOW;
    }

    /// The [`QUANTILE`] of the answers remembered, `None` before the first.
    pub(super) fn quantile(&self) -> Option<Duration> {
        if self.recent.is_empty() {
            return None;
        }
        let mut sorted = self.recent.clone();
        sorted.sort_unstable();
        let i = ((sorted.len() - 1) as f64 * QUANTILE).round() as usize;
        sorted.get(i).copied()
    }

    /// `base` stretched to [`LATENCY_FACTOR`] × the recent quantile, never
    /// below `base` nor above `cap` (where a pending call proves the
    /// policy's latency check false anyway): what this member's calls
    /// normally take decides, within bounds a frozen or cut-off member
    /// cannot escape.
    pub(super) fn trust(&self, base: Trust, cap: Duration) -> Trust {
        let wanted = self
            .quantile()
            .map_or(Duration::ZERO, |q| q.saturating_mul(LATENCY_FACTOR));
        let stretched = wanted.min(cap.max(base.base)).max(base.base);
        Trust {
            base: stretched,
            contended_max: base.contended_max.max(stretched),
        }
    }
}

/// When the serializable read is asked again, after one sent at `sent`
/// that answered in `took` (`None`: it failed): a full `interval` later
/// only when it was quick by every measure, quicker than a fast period and
/// than the member's `heartbeat` interval (a healthy member answers it
/// locally in a few ms);
/// otherwise a `fast` period later. A slow answer is what a policy rejects
/// (`sget_ms < 1000`), and it must be replaced within a fast period, not
/// an interval: with a 60 s interval a 1045 ms answer is quicker than the
/// 6 s fast period, and kept a minute it held a thawed member not ready.
pub(super) fn next_serializable(
    sent: Instant,
    took: Option<Duration>,
    fast: Duration,
    interval: Duration,
    heartbeat: Duration,
) -> Instant {
    let quick = took.is_some_and(|t| t < fast.min(heartbeat));
    sent + if quick { interval } else { fast }
}

/// The deadline of one call: `timeout` from its start, extended by the
/// node's contended CPU time while it ran (at most `cap`, one election
/// timeout: [`super::EtcdConfig::contended_max`]).
/// Pure: every instant and contention counter is the caller's.
#[derive(Clone, Copy, Debug)]
pub(super) struct Deadline {
    started: Instant,
    timeout: Duration,
    cap: Duration,
    stalled_at_start: Option<Duration>,
    granted: Duration,
}

impl Deadline {
    pub(super) fn new(start: &NodeTime, timeout: Duration, cap: Duration) -> Deadline {
        Deadline {
            started: start.now,
            timeout,
            cap,
            stalled_at_start: start.cpu_stalled,
            granted: Duration::ZERO,
        }
    }

    /// The call gives up at this instant unless contention extends it.
    pub(super) fn at(&self) -> Instant {
        self.started + self.timeout + self.granted
    }

    /// The contended CPU time that counts for the call by `now`: node-wide,
    /// so never more than the call waited, and capped.
    fn contention(&self, now: &NodeTime) -> Duration {
        match (self.stalled_at_start, now.cpu_stalled) {
            (Some(a), Some(b)) => b
                .saturating_sub(a)
                .min(now.now.saturating_duration_since(self.started))
                .min(self.cap),
            _ => Duration::ZERO,
        }
    }

    /// At `now`, past [`at`](Self::at) or not: whether the call has run out
    /// of time. Once it reaches its deadline, the contention so far extends
    /// it if it grew by at least 1 ms since the last extension (so the
    /// extensions end: contention is capped and only grows).
    pub(super) fn expired(&mut self, now: &NodeTime) -> bool {
        if now.now < self.at() {
            return false;
        }
        let contention = self.contention(now);
        if contention < self.granted + Duration::from_millis(1) {
            return true;
        }
        self.granted = contention;
        now.now >= self.at()
    }

    /// The error of a call `what` that ran out of time.
    pub(super) fn timed_out(&self, what: &str) -> SampleError {
        let message = if self.granted.is_zero() {
            format!(
                "{what}: request timed out after {}",
                fmt_secs_or_ms(self.timeout)
            )
        } else {
            format!(
                "{what}: request timed out after {} ({} plus {} while the node's CPU was contended)",
                fmt_secs_or_ms(self.timeout + self.granted),
                fmt_secs_or_ms(self.timeout),
                fmt_secs_or_ms(self.granted)
            )
        };
        SampleError::new(Reason::Timeout, message)
    }
}

/// Run `call` within its [`Deadline`] of `timeout` from now (extended by
/// the node's contention while it runs, at most `cap`): its own error, or
/// a timeout. The
/// one deadline of every etcd call, MemberList's for the member's identity
/// ([`crate::sources::etcd::identity`]) included.
pub(in crate::sources) async fn within<T>(
    clock: &Clock,
    (timeout, cap): (Duration, Duration),
    what: &str,
    call: impl std::future::Future<Output = Result<T, SampleError>>,
) -> Result<T, SampleError> {
    let mut deadline = Deadline::new(&clock.read(), timeout, cap);
    let mut call = std::pin::pin!(call);
    loop {
        let at = tokio::time::Instant::from_std(deadline.at());
        match tokio::time::timeout_at(at, &mut call).await {
            Ok(r) => return r,
            Err(_) if deadline.expired(&clock.read()) => return Err(deadline.timed_out(what)),
            Err(_) => {}
        }
    }
}

/// How a call failed: etcd's error, still to be explained, or one that is
/// already (the session could not be had: no connection, a refused login).
#[derive(Debug)]
pub(super) enum Failed {
    Etcd(etcd_client::Error),
    Explained(SampleError),
}

impl From<etcd_client::Error> for Failed {
    fn from(e: etcd_client::Error) -> Failed {
        Failed::Etcd(e)
    }
}

impl From<SampleError> for Failed {
    fn from(e: SampleError) -> Failed {
        Failed::Explained(e)
    }
}

impl super::Shared {
    /// One etcd call `what` within `--sample.timeout` ([`within`]), every
    /// failure turned into a [`SampleError`] an operator can act on
    /// ([`explain`]).
    pub(super) async fn bounded<T, E: Into<Failed>>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, SampleError> {
        let start = self.clock.now();
        let call = async {
            match call.await {
                Ok(v) => Ok(v),
                Err(e) => Err(self.explained(what, e.into(), start).await),
            }
        };
        let cfg = &self.config;
        within(&self.clock, (cfg.timeout, cfg.contended_max()), what, call).await
    }

    /// `e` of the call `what` started at `start`, in words.
    pub(super) async fn explained(&self, what: &str, e: Failed, start: Instant) -> SampleError {
        let cfg = &self.config;
        match e {
            Failed::Explained(e) => e,
            Failed::Etcd(e) => {
                let left = cfg.timeout.saturating_sub(self.clock.now() - start);
                explain(what, &e, &cfg.endpoint, cfg.client_timeout(), left).await
            }
        }
    }
}

/// Await `call`; if it is still in flight when the last answer's trust runs
/// out, wake the engine at that instant (the call's signals turn unknown
/// then) instead of leaving it to the engine's next tick, up to
/// [`crate::engine::TICK`] later. A call that answers in time wakes nothing
/// here (its answer does, when it is recorded).
pub(super) async fn wake_at_expiry<T>(
    notifier: &RoundNotifier,
    trust: Duration,
    call: impl std::future::Future<Output = T>,
) -> T {
    let mut call = std::pin::pin!(call);
    tokio::select! {
        r = &mut call => return r,
        // A millisecond past `trust`: the store calls a call outdated once
        // it has waited *longer* than that.
        _ = tokio::time::sleep(trust + Duration::from_millis(1)) => notifier.wake(),
    }
    call.await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_serializable_read_is_asked_again_a_fast_period_later_unless_it_was_quick() {
        let t0 = Instant::now();
        let (fast, interval) = (ms(6000), ms(60_000));
        let beat = ms(100);
        let next =
            |took: Option<u64>| next_serializable(t0, took.map(ms), fast, interval, beat) - t0;
        assert_eq!(next(Some(3)), interval);
        // Slower than a heartbeat but well within the fast period: what a
        // policy may reject is replaced soon (the thawed member's 1045 ms).
        assert_eq!(next(Some(1045)), fast);
        assert_eq!(next(Some(100)), fast);
        assert_eq!(next(None), fast);
        // A fast period below the heartbeat is the bound then.
        let next = |took: u64| next_serializable(t0, Some(ms(took)), ms(10), ms(100), beat) - t0;
        assert_eq!(next(9), ms(100));
        assert_eq!(next(10), ms(10));
    }

    fn at(t0: Instant, after: u64, stalled: Option<u64>) -> NodeTime {
        NodeTime {
            now: t0 + ms(after),
            wall: SystemTime::UNIX_EPOCH,
            cpu_stalled: stalled.map(ms),
        }
    }

    #[test]
    fn a_deadline_grows_by_the_contention_while_the_call_ran_up_to_its_cap() {
        let t0 = Instant::now();
        // (ms after the start, contended ms so far, expired?, deadline after)
        let table: &[(u64, u64, bool, u64)] = &[
            (499, 0, false, 500),
            // Reached with no contention: over.
            (500, 0, true, 500),
        ];
        for &(after, stalled, expired, deadline) in table {
            let mut d = Deadline::new(&at(t0, 0, Some(0)), ms(500), ms(1000));
            assert_eq!(d.expired(&at(t0, after, Some(stalled))), expired);
            assert_eq!(d.at(), t0 + ms(deadline));
        }
        // 300 ms contended by the deadline: 300 ms more, then over unless
        // contention grew again.
        let mut d = Deadline::new(&at(t0, 0, Some(1000)), ms(500), ms(1000));
        assert!(!d.expired(&at(t0, 500, Some(1300))));
        assert_eq!(d.at(), t0 + ms(800));
        assert!(!d.expired(&at(t0, 800, Some(1600))));
        assert_eq!(d.at(), t0 + ms(1100));
        assert!(d.expired(&at(t0, 1100, Some(1600))));
        assert!(
            d.timed_out("Status")
                .message
                .contains("1100ms (500ms plus 600ms")
        );
        // Node-wide contention beyond the wait, or beyond the cap, does not count.
        let mut d = Deadline::new(&at(t0, 0, Some(0)), ms(500), ms(1000));
        assert!(!d.expired(&at(t0, 500, Some(90_000))));
        assert_eq!(d.at(), t0 + ms(1000));
        assert!(!d.expired(&at(t0, 1000, Some(99_000))));
        assert_eq!(d.at(), t0 + ms(1500));
        assert!(d.expired(&at(t0, 1500, Some(99_999))));
        // No PSI: the timeout alone.
        let mut d = Deadline::new(&at(t0, 0, None), ms(500), ms(1000));
        assert!(d.expired(&at(t0, 500, None)));
        assert_eq!(
            d.timed_out("read").message,
            "read: request timed out after 500ms"
        );
    }

    #[test]
    fn the_trust_follows_this_members_recent_answers_within_its_bounds() {
        let base = Trust {
            base: ms(100),
            contended_max: ms(1000),
        };
        let cap = ms(1000);
        assert_eq!(
            LatencyWindow::default().trust(base, cap),
            base,
            "no answer yet: the base"
        );
        let outlier: Vec<u64> = [160; 31].into_iter().chain([900]).collect();
        // (latencies of the answers, trust)
        let table: &[(&[u64], u64)] = &[
            // A healthy member answers in ms: the base, which catches a freeze.
            (&[2, 3, 2, 5, 3], 100),
            // Reads over a slow link: twice their high quantile.
            (&[150, 160, 155, 170, 158, 162, 151, 180, 157, 159], 340),
            // One outlier among 32 does not count.
            (&outlier, 320),
            // Never beyond the cap, where a pending read fails the check anyway.
            (&[700; 32], 1000),
        ];
        let mut w = LatencyWindow::default();
        for &(lat, trust) in table {
            w = LatencyWindow::default();
            for &l in lat {
                w.record(ms(l));
            }
            assert_eq!(w.trust(base, cap).base, ms(trust), "{lat:?}");
            assert!(w.trust(base, cap).contended_max >= w.trust(base, cap).base);
        }
        // The window forgets: fast answers again bring the base back.
        for _ in 0..WINDOW {
            w.record(ms(3));
        }
        assert_eq!(w.trust(base, cap), base);
        // A base above the cap (a long --sample.interval) stays the base.
        let long = Trust::fixed(ms(2000));
        assert_eq!(w.trust(long, cap), long);
    }

    /// Whether the notifier holds a wake-up right now (without waiting).
    async fn woken(notifier: &RoundNotifier) -> bool {
        tokio::select! {
            biased;
            _ = notifier.notified() => true,
            _ = std::future::ready(()) => false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_pending_past_its_trust_wakes_the_engine_at_once() {
        let notifier = RoundNotifier::new();
        let t0 = tokio::time::Instant::now();
        // A call that never answers: the engine is woken while it is still
        // in flight, 1 ms past the trust.
        tokio::select! {
            _ = wake_at_expiry(&notifier, ms(100), std::future::pending::<()>()) => unreachable!(),
            _ = notifier.notified() => {}
        }
        assert_eq!(t0.elapsed(), ms(101));
        // A call that answers before its trust runs out wakes nothing.
        let answer = wake_at_expiry(&notifier, Duration::from_secs(3600), async { 7 }).await;
        assert_eq!(answer, 7);
        assert!(!woken(&notifier).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_gives_up_at_its_deadline_extended_by_contention_on_virtual_time() {
        let clock = Clock::manual(SystemTime::UNIX_EPOCH, None);
        let t0 = tokio::time::Instant::now();
        let r: Result<(), _> = within(
            &clock,
            (ms(500), ms(1000)),
            "Status",
            std::future::pending(),
        )
        .await;
        assert_eq!(t0.elapsed(), ms(500));
        assert_eq!(r.unwrap_err().reason, Reason::Timeout);
        // 200 ms of contention while it waited: given 200 ms more.
        let t0 = tokio::time::Instant::now();
        let stall = async {
            tokio::time::sleep(ms(100)).await;
            clock.stall(ms(200));
            std::future::pending::<Result<(), SampleError>>().await
        };
        let r = within(&clock, (ms(500), ms(1000)), "Status", stall).await;
        assert_eq!(t0.elapsed(), ms(700));
        assert!(r.unwrap_err().message.contains("700ms (500ms plus 200ms"));
    }
}
