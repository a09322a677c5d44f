//! The engine: the evaluation loop. It owns the [`Evaluator`], re-evaluates
//! whenever a sample lands and on a short tick (so hold-down timers expire on
//! time, and a pending read's bound is seen when it crosses a threshold), builds the [`Verdict`] and publishes it with arc-swap. Readers (HTTP,
//! metrics) only ever load the published verdict: nothing they do waits on a
//! source. Readiness and check transitions are logged here, once each.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::runtime::Runtime;
use crate::runtime::clock::{Clock, NodeTime};
use crate::runtime::supervise::Supervisor;

use arc_swap::{ArcSwap, ArcSwapOption};
use etcd_readiness_policy::sync::TolerantLock;
use tokio::task::JoinHandle;

pub mod candidate;
pub mod history;
pub mod loglimit;
pub mod metrics;

use crate::sources::RoundNotifier;
pub use candidate::{CandidateMetrics, CandidatePublished, CandidateSink, CandidateStatus};
use etcd_readiness_policy::policy::{Evaluator, Policy};
use etcd_readiness_policy::signals::{Catalogue, Reading, SignalStore, Source};
use etcd_readiness_policy::verdict::{CheckKind, CheckState, Verdict};
pub use metrics::EngineMetrics;

/// How often the engine re-evaluates without a new sample round.
pub const TICK: Duration = Duration::from_millis(250);

/// How often it re-evaluates while a measurement is in flight, so that a
/// pending read's growing lower bound is seen soon after it crosses a
/// threshold (`qget_ms < 1000` fails at 1000 ms pending, not at the next
/// [`TICK`]).
pub const PENDING_TICK: Duration = Duration::from_millis(20);

/// A verdict with the instant it was published.
#[derive(Debug)]
pub struct Published {
    pub verdict: Verdict,
    pub at: Instant,
}

/// What `/policy` shows.
#[derive(Clone, Debug)]
pub struct PolicyStatus {
    pub policy: Arc<Policy>,
    pub loaded_at: SystemTime,
    pub last_reload_error: Option<String>,
}

/// Timing the engine needs to judge staleness.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub sample_interval: Duration,
    pub sample_timeout: Duration,
}

impl Timing {
    /// A verdict older than this means the evaluation loop is wedged.
    pub fn verdict_stale_after(&self) -> Duration {
        crate::sources::staleness_bound(self.sample_interval, self.sample_timeout)
    }
}

struct EvalState {
    evaluator: Evaluator,
    readings: Vec<Reading>,
    last_ready: Option<bool>,
    last_states: Vec<(String, CheckState)>,
    /// Transition log lines per check and for readiness, rate-limited.
    transition_log: loglimit::TransitionLog,
    /// The candidate policy's evaluator, once one is in force.
    candidate: Option<candidate::CandidateEval>,
}

struct Shared {
    /// The one clock: the engine reads no other, and no `/proc`.
    clock: Clock,
    /// What the loop runs under (the task `engine`).
    supervisor: Supervisor,
    catalogue: Arc<Catalogue>,
    store: Arc<SignalStore>,
    notifier: RoundNotifier,
    metrics: EngineMetrics,
    timing: Timing,
    published: ArcSwap<Published>,
    policy: ArcSwap<PolicyStatus>,
    eval: Mutex<EvalState>,
    history: history::History,
    /// `--policy.candidate`: its policy and reload state (`None` without the flag).
    candidate_status: ArcSwapOption<CandidateStatus>,
    /// The candidate's verdict of the latest evaluation, once one is in force.
    candidate_published: ArcSwapOption<CandidatePublished>,
    /// The candidate's lanes (readiness and checks), as for the live policy.
    candidate_history: history::History,
    candidate_metrics: std::sync::OnceLock<CandidateMetrics>,
    /// The verdict generation: bumped at each publication that can change
    /// an answer of `/readyz` (see [`answers_may_differ`]), so that a held
    /// long poll wakes on a change and on nothing else.
    changes: tokio::sync::watch::Sender<u64>,
}

/// Cloneable handle to the engine, shared by the HTTP layer, the policy
/// reloader and tests.
#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineHandle").finish_non_exhaustive()
    }
}

impl EngineHandle {
    /// An engine for `policy` with the verdict `starting`. Nothing runs until
    /// [`EngineHandle::spawn`].
    pub fn new(
        policy: Arc<Policy>,
        catalogue: Arc<Catalogue>,
        store: Arc<SignalStore>,
        notifier: RoundNotifier,
        metrics: EngineMetrics,
        timing: Timing,
        runtime: Runtime,
    ) -> Self {
        let Runtime { clock, supervisor } = runtime;
        let NodeTime { now, wall, .. } = clock.read();
        // The verdict is `starting` until etcd's first round (see
        // `evaluate`); `/livez` fails if that round never comes.
        notifier.expect(&Source::Etcd, timing.sample_interval, timing.sample_timeout);
        let shared = Shared {
            published: ArcSwap::from_pointee(Published {
                verdict: Verdict::starting(wall),
                at: now,
            }),
            policy: ArcSwap::from_pointee(PolicyStatus {
                policy: policy.clone(),
                loaded_at: wall,
                last_reload_error: None,
            }),
            eval: Mutex::new(EvalState {
                evaluator: Evaluator::new(policy, now),
                readings: Vec::with_capacity(catalogue.len()),
                last_ready: None,
                last_states: Vec::new(),
                transition_log: loglimit::TransitionLog::default(),
                candidate: None,
            }),
            clock,
            supervisor,
            catalogue,
            store,
            notifier,
            metrics,
            timing,
            history: history::History::new(now, wall),
            candidate_status: ArcSwapOption::empty(),
            candidate_published: ArcSwapOption::empty(),
            candidate_history: history::History::new(now, wall),
            candidate_metrics: std::sync::OnceLock::new(),
            changes: tokio::sync::watch::Sender::new(0),
        };
        EngineHandle {
            shared: Arc::new(shared),
        }
    }

    /// Run the evaluation loop, whenever a sample lands (or the etcd
    /// connection is lost) and every [`TICK`] ([`PENDING_TICK`] while a
    /// measurement is in flight),
    /// as the supervised task `engine` (a panic restarts the loop; the
    /// evaluator's state survives it, see [`EngineHandle::evaluate_now`]).
    pub fn spawn(&self) -> JoinHandle<()> {
        let me = self.clone();
        self.shared.supervisor.spawn("engine", move || {
            let me = me.clone();
            async move {
                loop {
                    let wait = if me.shared.store.any_pending() {
                        PENDING_TICK
                    } else {
                        TICK
                    };
                    // Biased: reproducible on virtual time (sources/mod.rs).
                    tokio::select! {
                        biased;
                        _ = me.shared.notifier.notified() => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                    me.evaluate_now();
                }
            }
        })
    }

    /// The latest published verdict.
    pub fn verdict(&self) -> Arc<Published> {
        self.shared.published.load_full()
    }

    /// Publish `verdict` as if the loop had produced it now. For tests of the
    /// HTTP layer and tools; a running loop replaces it at its next evaluation.
    pub fn publish(&self, verdict: Verdict) {
        self.publish_at(verdict, self.shared.clock.now());
    }

    /// [`publish`](Self::publish) with the time it was evaluated, so a test
    /// can hand the HTTP layer a verdict of a known age without waiting.
    pub fn publish_at(&self, verdict: Verdict, at: Instant) {
        self.store_published(Published { verdict, at }, false);
    }

    /// The one place a verdict is published: swap it in, then bump the
    /// generation if an answer may differ from the previous one's (or
    /// `candidate_changed`), so that a held request is woken after the new
    /// verdict is readable.
    fn store_published(&self, next: Published, candidate_changed: bool) {
        let sh = &*self.shared;
        let prev = sh.published.swap(Arc::new(next));
        let cur = sh.published.load();
        // A publication after a stale one changes every answer (they said
        // "stale"), whatever the verdicts themselves say.
        let was_stale = cur.at.saturating_duration_since(prev.at) > sh.timing.verdict_stale_after();
        if candidate_changed || was_stale || answers_may_differ(&prev.verdict, &cur.verdict) {
            sh.changes.send_modify(|g| *g = g.wrapping_add(1));
        }
    }

    /// The verdict generation, for a request that waits for a change
    /// (`/readyz?wait=`): subscribe *before* reading the verdict it
    /// compares against, and `changed()` resolves at the next publication
    /// that may answer differently.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.changes.subscribe()
    }

    /// How long ago the latest verdict was published.
    pub fn verdict_age(&self) -> Duration {
        self.shared
            .clock
            .now()
            .saturating_duration_since(self.shared.published.load().at)
    }

    pub fn timing(&self) -> Timing {
        self.shared.timing
    }

    pub fn store(&self) -> &Arc<SignalStore> {
        &self.shared.store
    }

    pub fn catalogue(&self) -> &Arc<Catalogue> {
        &self.shared.catalogue
    }

    /// Transitions and the readings of the latest evaluation, as published
    /// (the status page and `/history`).
    pub fn history(&self) -> &history::History {
        &self.shared.history
    }

    pub fn notifier(&self) -> &RoundNotifier {
        &self.shared.notifier
    }

    /// The policy in force with its load time and the last reload error.
    pub fn policy_status(&self) -> Arc<PolicyStatus> {
        self.shared.policy.load_full()
    }

    /// Swap in a new (already compiled) policy. Checks whose name and
    /// expression are unchanged keep their state and hold-down timers. Clears
    /// the reload error and re-evaluates at once.
    pub fn set_policy(&self, policy: Arc<Policy>) {
        {
            let mut st = self.lock_eval();
            let kept = st
                .evaluator
                .replace_policy(policy.clone(), self.shared.clock.now());
            tracing::info!(
                path = policy.path(),
                sha256 = policy.sha256(),
                kept_checks = kept,
                "policy replaced: {}",
                policy.summary()
            );
        }
        self.shared.policy.store(Arc::new(PolicyStatus {
            policy,
            loaded_at: self.shared.clock.wall(),
            last_reload_error: None,
        }));
        self.evaluate_now();
    }

    /// Record (or clear) why the last reload attempt failed; the policy in
    /// force does not change.
    pub fn set_reload_error(&self, error: Option<String>) {
        let cur = self.shared.policy.load_full();
        self.shared.policy.store(Arc::new(PolicyStatus {
            policy: cur.policy.clone(),
            loaded_at: cur.loaded_at,
            last_reload_error: error,
        }));
    }

    /// Export the candidate's families into `metrics` (once, before serving;
    /// only with `--policy.candidate`).
    pub fn set_candidate_metrics(&self, metrics: CandidateMetrics) {
        let _ = self.shared.candidate_metrics.set(metrics);
    }

    /// Put `policy` in force as the candidate: evaluated beside the live
    /// policy at every evaluation, deciding nothing. As for the live policy,
    /// checks whose name and expression are unchanged keep their state.
    /// Clears the candidate's reload error and re-evaluates at once.
    pub fn set_candidate(&self, policy: Arc<Policy>) {
        let node = self.shared.clock.read();
        let (now, wall) = (node.now, node.wall);
        {
            let mut st = self.lock_eval();
            match &mut st.candidate {
                Some(c) => {
                    let kept = c.evaluator.replace_policy(policy.clone(), now);
                    tracing::info!(
                        path = policy.path(),
                        sha256 = policy.sha256(),
                        kept_checks = kept,
                        "candidate policy replaced: {}",
                        policy.summary()
                    );
                }
                None => {
                    st.candidate = Some(candidate::CandidateEval::new(policy.clone(), now));
                    tracing::info!(
                        path = policy.path(),
                        sha256 = policy.sha256(),
                        "candidate policy in force (it decides nothing): {}",
                        policy.summary()
                    );
                }
            }
        }
        self.shared
            .candidate_status
            .store(Some(Arc::new(CandidateStatus {
                policy: Some(policy),
                loaded_at: Some(wall),
                last_reload_error: None,
            })));
        self.evaluate_with(&node);
    }

    /// Record (or clear) why the last reload of the candidate file failed;
    /// the candidate in force, if any, stays.
    pub fn set_candidate_reload_error(&self, error: Option<String>) {
        let cur = self.shared.candidate_status.load_full();
        let mut next = cur.as_deref().cloned().unwrap_or_default();
        next.last_reload_error = error;
        self.shared.candidate_status.store(Some(Arc::new(next)));
    }

    /// The candidate's policy and reload state; `None` without `--policy.candidate`.
    pub fn candidate_status(&self) -> Option<Arc<CandidateStatus>> {
        self.shared.candidate_status.load_full()
    }

    /// The candidate's verdict of the latest evaluation, once one is in force.
    pub fn candidate_verdict(&self) -> Option<Arc<CandidatePublished>> {
        self.shared.candidate_published.load_full()
    }

    /// The candidate's transitions, as [`EngineHandle::history`] for the live policy.
    pub fn candidate_history(&self) -> &history::History {
        &self.shared.candidate_history
    }

    fn lock_eval(&self) -> std::sync::MutexGuard<'_, EvalState> {
        // Evaluation never panics by design; if it did, the state is still usable.
        self.shared.eval.locked()
    }

    /// Evaluate once and publish. Until the etcd source finished its first
    /// round the verdict stays `starting`.
    pub fn evaluate_now(&self) {
        self.evaluate_with(&self.shared.clock.read());
    }

    /// [`evaluate_now`](Self::evaluate_now) as if the clocks read `now` and
    /// `wall`, with no CPU pressure known: so tests can step time exactly
    /// instead of sleeping.
    pub fn evaluate_at(&self, now: Instant, wall: SystemTime) {
        self.evaluate_with(&NodeTime::at(now, wall));
    }

    /// Evaluate at the node time `node`, read by the caller from the one
    /// clock: nothing here reads another.
    pub fn evaluate_with(&self, node: &NodeTime) {
        let (now, wall) = (node.now, node.wall);
        let sh = &*self.shared;
        let mut guard = self.lock_eval();
        let st = &mut *guard;
        // The node's contended CPU time now: a call pending through a
        // moment of contention is trusted longer (crate::runtime::contention).
        if let Some(stalled) = node.cpu_stalled {
            sh.store.set_cpu_stalled(stalled);
        }
        sh.store.set_wall_clock(now, wall);
        sh.store.read_into(now, &mut st.readings);
        st.evaluator.evaluate(&st.readings, now);
        let verdict = if sh.notifier.last_round(&Source::Etcd).is_none() {
            Verdict::starting(wall)
        } else {
            let checks = st.evaluator.report(&st.readings, now, wall);
            Verdict {
                ready: Verdict::ready_from(&checks),
                reason: None,
                evaluated_at: wall,
                checks,
            }
        };
        if verdict.reason.is_none() {
            log_transitions(st, &verdict, &sh.metrics, now);
        }
        sh.metrics.update(&verdict, &st.readings, &sh.catalogue);
        sh.history.observe(&verdict, &st.readings, now, wall);
        // The candidate: the same readings, the same instant, nothing decided.
        let mut candidate_changed = false;
        if let Some(c) = &mut st.candidate {
            c.evaluator.evaluate(&st.readings, now);
            let cv = if verdict.reason.is_some() && verdict.checks.is_empty() {
                Verdict::starting(wall)
            } else {
                let checks = c.evaluator.report(&st.readings, now, wall);
                Verdict {
                    ready: Verdict::ready_from(&checks),
                    reason: None,
                    evaluated_at: wall,
                    checks,
                }
            };
            let added = c.account(now, wall, verdict.ready, cv.ready);
            if let Some(m) = sh.candidate_metrics.get() {
                m.update(&cv, added);
            }
            sh.candidate_history.observe(&cv, &[], now, wall);
            let prev = sh
                .candidate_published
                .swap(Some(Arc::new(CandidatePublished {
                    verdict: cv,
                    at: now,
                    live_ready: verdict.ready,
                    disagreement: c.totals(),
                    disagreeing_since: c.since(),
                })));
            let cur = sh.candidate_published.load();
            candidate_changed = match (prev.as_deref(), cur.as_deref()) {
                (Some(p), Some(c)) => answers_may_differ(&p.verdict, &c.verdict),
                _ => true,
            };
        }
        // Published under the evaluation lock, as before: two evaluations
        // (the loop, a reload) never publish out of order.
        self.store_published(Published { verdict, at: now }, candidate_changed);
    }
}

/// Whether some `/readyz` answer (the whole verdict, one check, with any
/// `exclude`) may have another status for `next` than for `prev`: a
/// reason came or went, a check was added, removed or renamed, or one
/// changed kind or state. Explanations and ages alone change no status.
pub fn answers_may_differ(prev: &Verdict, next: &Verdict) -> bool {
    prev.ready != next.ready
        || prev.reason.is_some() != next.reason.is_some()
        || prev.checks.len() != next.checks.len()
        || prev
            .checks
            .iter()
            .zip(&next.checks)
            .any(|(p, n)| p.name != n.name || p.kind != n.kind || p.state != n.state)
}

/// The lane of the readiness line in [`loglimit::TransitionLog`] (no check
/// can be named so: check names are identifiers).
const READINESS_LANE: &str = "(readiness)";

/// Log and count what changed since the last evaluation: the lines the rate
/// limit held back, each check's new state, readiness.
fn log_transitions(st: &mut EvalState, verdict: &Verdict, metrics: &EngineMetrics, now: Instant) {
    log_suppressed(&mut st.transition_log, now);
    log_check_transitions(st, verdict, metrics, now);
    log_readiness(st, verdict, metrics, now);
}

/// One line per lane whose window is over, saying how many were not logged.
fn log_suppressed(log: &mut loglimit::TransitionLog, now: Instant) {
    for s in log.flush(now) {
        if s.lane == READINESS_LANE {
            tracing::info!(
                suppressed = s.count,
                "readiness: {} more transitions not logged in the last {}s (at most {} lines a second)",
                s.count,
                loglimit::WINDOW.as_secs(),
                loglimit::LINES_PER_WINDOW
            );
        } else {
            tracing::info!(check = %s.lane, suppressed = s.count, "{}: {} more transitions not logged in the last {}s (at most {} lines a second)", s.lane, s.count, loglimit::WINDOW.as_secs(), loglimit::LINES_PER_WINDOW);
        }
    }
}

/// Each check whose state changed (counted), or whose first state is not
/// passing; then remember the states for the next evaluation.
fn log_check_transitions(
    st: &mut EvalState,
    verdict: &Verdict,
    metrics: &EngineMetrics,
    now: Instant,
) {
    for (i, c) in verdict.checks.iter().enumerate() {
        // The checks keep their order between reloads: try the same position
        // first, so this stays linear in the number of checks.
        let prev = match st.last_states.get(i) {
            Some((n, s)) if *n == c.name => Some(*s),
            _ => st
                .last_states
                .iter()
                .find(|(n, _)| n == &c.name)
                .map(|(_, s)| *s),
        };
        let changed = prev.is_some_and(|p| p != c.state);
        // A check's first state is logged when it is not passing, but it is
        // not a transition.
        if changed || prev.is_none() && c.state != CheckState::Pass {
            if changed {
                metrics.check_transition(&c.name);
            }
            if !st.transition_log.allow(&c.name, now) {
                continue;
            }
            let kind = c.kind.as_str();
            tracing::info!(
                check = %c.name,
                kind,
                from = prev.map_or("none", |p| p.as_str()),
                to = c.state.as_str(),
                "{kind} {} is now {}{}",
                c.name,
                c.state.as_str(),
                if c.explanation.is_empty() {
                    String::new()
                } else {
                    format!(": {}", c.explanation)
                }
            );
        }
    }
    let same_checks = st.last_states.len() == verdict.checks.len()
        && st
            .last_states
            .iter()
            .zip(&verdict.checks)
            .all(|((n, _), c)| *n == c.name);
    if same_checks {
        for ((_, s), c) in st.last_states.iter_mut().zip(&verdict.checks) {
            *s = c.state;
        }
    } else {
        st.last_states = verdict
            .checks
            .iter()
            .map(|c| (c.name.clone(), c.state))
            .collect();
    }
}

/// A readiness flip (counted; the first readiness is logged, not counted),
/// naming the failing checks when the member turns not ready.
fn log_readiness(st: &mut EvalState, verdict: &Verdict, metrics: &EngineMetrics, now: Instant) {
    if st.last_ready != Some(verdict.ready) {
        if st.last_ready.is_some() {
            metrics.readiness_transition();
        }
        let why: Vec<String> = verdict
            .checks
            .iter()
            .filter(|c| c.kind == CheckKind::Check && c.state != CheckState::Pass)
            .map(|c| format!("{}: {}", c.name, c.explanation))
            .collect();
        if !st.transition_log.allow(READINESS_LANE, now) {
            // Counted; one line says how many once the window is over.
        } else if verdict.ready {
            tracing::info!(ready = true, "member is ready");
        } else {
            tracing::info!(ready = false, "member is not ready: {}", why.join("; "));
        }
        st.last_ready = Some(verdict.ready);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Format, encode};
    use etcd_readiness_policy::signals::Value;

    fn engine(src: &str) -> (EngineHandle, Arc<prometheus_client::registry::Registry>) {
        engine_with(src, Clock::node())
    }

    fn engine_with(
        src: &str,
        clock: Clock,
    ) -> (EngineHandle, Arc<prometheus_client::registry::Registry>) {
        let catalogue = Arc::new(Catalogue::builtin());
        let policy = Policy::compile("p", src, &catalogue).unwrap();
        let store = Arc::new(SignalStore::new(&catalogue));
        let mut registry = prometheus_client::registry::Registry::default();
        let em = EngineMetrics::register(&mut registry);
        let registry = Arc::new(registry);
        let h = EngineHandle::new(
            Arc::new(policy),
            catalogue,
            store,
            RoundNotifier::new(),
            em,
            Timing {
                sample_interval: Duration::from_secs(1),
                sample_timeout: Duration::from_millis(500),
            },
            Runtime::new(clock),
        );
        (h, registry)
    }

    /// The loop's timing rule on tokio's paused clock: an evaluation at
    /// once when woken, every TICK otherwise, every PENDING_TICK while a
    /// call is in flight, each published at the clock's instant.
    #[tokio::test(start_paused = true)]
    async fn the_loop_evaluates_when_woken_every_tick_and_faster_while_a_call_is_pending() {
        let clock = Clock::manual(SystemTime::UNIX_EPOCH, None);
        let (h, _) = engine_with("check leader: leader\n", clock.clone());
        let t0 = clock.now();
        let ms = Duration::from_millis;
        let after = |h: &EngineHandle| h.verdict().at - t0;
        h.notifier()
            .round_finished(&Source::Etcd, Duration::from_secs(1), t0);
        let _task = h.spawn();
        // Woken by the round: evaluated at once.
        tokio::time::sleep(ms(1)).await;
        assert_eq!(after(&h), ms(0));
        // Nothing happens: the next evaluation a TICK later.
        tokio::time::sleep(TICK).await;
        assert_eq!(after(&h), TICK);
        // A call in flight: after the next tick, every PENDING_TICK.
        let leader = h.catalogue().id("leader");
        h.store()
            .record_pending(leader, clock.now(), None, Duration::from_secs(5), "Status");
        tokio::time::sleep_until((t0 + 2 * TICK + PENDING_TICK + ms(1)).into()).await;
        assert_eq!(after(&h), 2 * TICK + PENDING_TICK);
        // Woken: at once, not at the next tick.
        tokio::time::sleep(ms(5)).await;
        h.notifier().wake();
        tokio::time::sleep(ms(1)).await;
        assert_eq!(after(&h), 2 * TICK + PENDING_TICK + ms(6));
    }

    fn compile(h: &EngineHandle, src: &str) -> Arc<Policy> {
        Arc::new(Policy::compile("p2", src, h.catalogue()).unwrap())
    }

    #[test]
    fn starting_until_the_first_etcd_round_then_ready() {
        let (h, _) = engine("check leader: leader\n");
        h.store().record_ok(
            h.catalogue().id("leader"),
            Value::Bool(true),
            Instant::now(),
        );
        h.evaluate_now();
        assert!(h.verdict().verdict.reason.is_some());
        h.notifier()
            .round_finished(&Source::Etcd, Duration::from_secs(1), Instant::now());
        h.evaluate_now();
        let v = &h.verdict().verdict;
        assert!(v.ready && v.reason.is_none(), "{v:?}");
    }

    #[test]
    fn set_policy_swaps_checks_and_drops_their_metrics() {
        let (h, registry) = engine("check leader: leader\ncheck old_one: !learner\n");
        // The clock is stepped by hand: first evaluation a minute ago, the
        // swap now, the last evaluation a minute from now.
        let minute = Duration::from_secs(60);
        let t0 = Instant::now()
            .checked_sub(minute)
            .expect("uptime over a minute");
        let w0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let record = |at: Instant| {
            h.store()
                .record_ok(h.catalogue().id("leader"), Value::Bool(true), at);
            h.store()
                .record_ok(h.catalogue().id("learner"), Value::Bool(false), at);
        };
        record(t0);
        h.notifier()
            .round_finished(&Source::Etcd, Duration::from_secs(1), Instant::now());
        h.evaluate_at(t0, w0);
        let since = h.verdict().verdict.checks[0].since;
        assert_eq!(since, w0);
        assert!(encode(&registry, Format::Text004).contains("check=\"old_one\""));

        h.set_reload_error(Some("line 1: boom".into()));
        assert_eq!(
            h.policy_status().last_reload_error.as_deref(),
            Some("line 1: boom")
        );
        // set_policy evaluates at once, on the real clock: give it fresh samples.
        record(Instant::now());
        h.set_policy(compile(&h, "check leader: leader\ncheck new_one: leader\n"));
        record(t0 + 2 * minute);
        h.evaluate_at(t0 + 2 * minute, w0 + 2 * minute);
        let v = &h.verdict().verdict;
        let names: Vec<&str> = v.checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["leader", "new_one"]);
        // The unchanged check kept its state: passing since the first
        // evaluation, exactly. A reset would say "since the swap", a minute later.
        assert_eq!(v.checks[0].since, since, "unchanged check kept its state");
        assert!(
            v.checks[1].since > w0 + minute / 2,
            "the new check starts at the swap"
        );
        let text = encode(&registry, Format::Text004);
        assert!(!text.contains("check=\"old_one\""), "{text}");
        assert!(text.contains("check=\"new_one\""));
        let st = h.policy_status();
        assert_eq!(st.policy.path(), "p2");
        assert_eq!(st.last_reload_error, None);
    }

    /// The check gauges follow every change of state, also when only
    /// the time in the state is written at evaluations where the state
    /// stayed (the gauges of an unchanged state are not rewritten).
    #[test]
    fn check_gauges_follow_each_state_change() {
        let (h, registry) = engine("check leader: leader\ncheck other: !learner\n");
        let t0 = Instant::now();
        h.notifier()
            .round_finished(&Source::Etcd, Duration::from_secs(1), t0);
        let w0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        h.store()
            .record_ok(h.catalogue().id("learner"), Value::Bool(false), t0);
        let line = |state: &str| {
            format!("etcd_readiness_check_state{{check=\"leader\",state=\"{state}\"}} 1")
        };
        for (i, leader) in [true, true, false, false, true].into_iter().enumerate() {
            let at = t0 + Duration::from_millis(250) * i as u32;
            h.store()
                .record_ok(h.catalogue().id("leader"), Value::Bool(leader), at);
            h.evaluate_at(at, w0 + Duration::from_millis(250) * i as u32);
            let text = encode(&registry, Format::Text004);
            let (want, passing) = if leader { ("pass", 1) } else { ("fail", 0) };
            assert!(text.contains(&line(want)), "step {i}: {text}");
            assert!(
                text.contains(&format!(
                    "etcd_readiness_check_passing{{check=\"leader\",kind=\"check\"}} {passing}"
                )),
                "step {i}: {text}"
            );
            assert!(
                text.contains(&line("pass").replace("leader", "other")),
                "step {i}: {text}"
            );
        }
    }

    /// The metrics' kept series handles follow a series' removal: a
    /// signal's value is absent while it is unknown and back once known,
    /// its age kept; a check that changes kind (same name) has its time in
    /// state exported again from the evaluation after the change, as when
    /// every evaluation looked its series up.
    #[test]
    fn removed_series_come_back_through_the_kept_handles() {
        let (h, registry) = engine("check leader: leader\n");
        let t0 = Instant::now();
        let w0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        h.notifier()
            .round_finished(&Source::Etcd, Duration::from_secs(1), t0);
        let leader = h.catalogue().id("leader");
        let value = "etcd_readiness_signal_value{signal=\"leader\",source=\"etcd\"}";
        let age = "etcd_readiness_signal_age_seconds{signal=\"leader\",source=\"etcd\"}";
        let in_state = "etcd_readiness_check_in_state_seconds{check=\"leader\"}";
        let at = |ms: u64| {
            (
                t0 + Duration::from_millis(ms),
                w0 + Duration::from_millis(ms),
            )
        };
        let eval = |ms: u64| {
            let (now, wall) = at(ms);
            h.evaluate_at(now, wall);
            encode(&registry, Format::Text004)
        };
        h.store().record_ok(leader, Value::Bool(true), t0);
        let text = eval(0);
        assert!(text.contains(&format!("{value} 1")), "{text}");
        h.store().record_err(leader, Arc::from("down"), at(20).0);
        for ms in [20, 40] {
            let text = eval(ms);
            assert!(!text.contains(value), "{text}");
            assert!(text.contains(age), "{text}");
        }
        h.store().record_ok(leader, Value::Bool(false), at(60).0);
        let text = eval(60);
        assert!(text.contains(&format!("{value} 0")), "{text}");

        h.set_policy(compile(&h, "warn leader: leader\n"));
        let text = eval(80);
        assert!(text.contains(&format!("{in_state} ")), "{text}");
        assert!(text.contains("check=\"leader\",kind=\"warn\""), "{text}");
        assert!(!text.contains("check=\"leader\",kind=\"check\""), "{text}");
    }

    /// The candidate is evaluated at every evaluation on the same readings
    /// as the policy in force, never changes the live verdict, and the
    /// disagreement counters are the exact seconds the clock was stepped.
    #[test]
    fn a_candidate_decides_nothing_and_its_disagreement_is_the_seconds_arranged() {
        let (h, registry) = engine("check leader: leader\n");
        let mut registry = Arc::try_unwrap(registry).expect("one owner");
        h.set_candidate_metrics(CandidateMetrics::register(&mut registry));
        let s = Duration::from_secs;
        let t0 = Instant::now().checked_sub(s(120)).expect("uptime");
        let w0 = SystemTime::UNIX_EPOCH + s(1_700_000_000);
        let leader = |is: bool, at: Instant| {
            h.store()
                .record_ok(h.catalogue().id("leader"), Value::Bool(is), at)
        };
        h.notifier()
            .round_finished(&Source::Etcd, Duration::from_secs(1), Instant::now());
        leader(true, Instant::now());
        // The candidate would fail while the member is a leader, and pass otherwise.
        h.set_candidate(compile(&h, "check not_leader: !leader\n"));
        let step = |at: u64, is_leader: bool| {
            leader(is_leader, t0 + s(at));
            h.evaluate_at(t0 + s(at), w0 + s(at));
            let live = h.verdict();
            let cand = h.candidate_verdict().expect("candidate published");
            assert_eq!(live.at, cand.at, "the same evaluation");
            assert_eq!(live.verdict.ready, is_leader, "the live policy decides");
            assert_eq!(cand.verdict.ready, !is_leader);
            cand
        };
        // The first stepped evaluation starts the accounting afresh at t0.
        h.lock_eval().candidate.as_mut().unwrap().reset_for_test();
        step(0, true);
        step(7, true); // 7 s would fail while ready
        step(10, false); // 3 more, then not a leader
        let c = step(14, false); // 4 s would pass while unready
        assert_eq!(c.disagreement.would_fail_while_ready, s(10));
        assert_eq!(c.disagreement.would_pass_while_unready, s(4));
        assert_eq!(
            c.disagreeing_since,
            Some((candidate::Direction::WouldPassWhileUnready, w0 + s(10)))
        );
        let text = encode(&registry, Format::Text004);
        for line in [
            "etcd_readiness_ready 0",
            "etcd_readiness_candidate_ready 1",
            "etcd_readiness_candidate_check_state{check=\"not_leader\",state=\"pass\"} 1",
            "etcd_readiness_candidate_would_fail_while_ready_seconds_total 10.0",
            "etcd_readiness_candidate_would_pass_while_unready_seconds_total 4.0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // The live families name only the live policy's checks.
        assert!(
            !text.contains("etcd_readiness_check_state{check=\"not_leader\""),
            "{text}"
        );
        // The candidate's lanes are its own.
        let lanes: Vec<String> = h
            .candidate_history()
            .snapshot()
            .current
            .iter()
            .map(|(l, _, _)| l.name().to_string())
            .collect();
        assert_eq!(lanes, ["readiness", "not_leader"]);
    }

    /// The change generation moves only when an answer may change: a new
    /// explanation or age alone wakes no held request.
    #[test]
    fn the_change_generation_moves_when_an_answer_may_change_and_only_then() {
        let (h, _) = engine("check leader: leader\n");
        let mut rx = h.changes();
        let check = |state: CheckState, why: &str| {
            use etcd_readiness_policy::verdict::CheckReport;
            CheckReport {
                explanation: why.into(),
                ..CheckReport::new("leader", CheckKind::Check, state, "leader")
            }
        };
        let verdict = |state: CheckState, why: &str| {
            let checks = vec![check(state, why)];
            Verdict {
                ready: Verdict::ready_from(&checks),
                reason: None,
                evaluated_at: SystemTime::UNIX_EPOCH,
                checks,
            }
        };
        // From `starting` (a reason) to a verdict: a change.
        h.publish(verdict(CheckState::Pass, ""));
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        h.publish(verdict(CheckState::Pass, "another explanation"));
        assert!(!rx.has_changed().unwrap(), "same states, same answers");
        h.publish(verdict(CheckState::Unknown, "qget_ms unknown"));
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        h.publish(verdict(CheckState::Fail, "qget_ms = 1200"));
        assert!(
            rx.has_changed().unwrap(),
            "unknown -> fail: /readyz/NAME text differs"
        );
        rx.mark_unchanged();
        // After a stale verdict every answer changes, even to the same verdict.
        let long_ago = Instant::now()
            .checked_sub(Duration::from_secs(60))
            .expect("uptime");
        h.publish_at(verdict(CheckState::Fail, ""), long_ago);
        rx.mark_unchanged();
        h.publish(verdict(CheckState::Fail, ""));
        assert!(
            rx.has_changed().unwrap(),
            "a fresh verdict after a stale one"
        );
    }

    /// The cost of one evaluation of the default policy (all its signals
    /// known), without and with a candidate as large (the same policy), on
    /// the engine's own path (`evaluate_at`: readings, both evaluators,
    /// reports, metrics, history). Prints microseconds per evaluation; run
    /// with `cargo test --release --lib -- --ignored evaluation_cost --nocapture`
    /// (docs/BENCHMARKS.md, "Candidate policy cost"). Asserts nothing about time.
    #[test]
    #[ignore = "a measurement: run it in release, see docs/BENCHMARKS.md"]
    fn evaluation_cost_with_and_without_a_candidate() {
        const N: u32 = 20_000;
        let policy = crate::config::DEFAULT_POLICY;
        let run = |candidate: bool| {
            let (h, registry) = engine(policy);
            let mut registry = Arc::try_unwrap(registry).expect("one owner");
            h.set_candidate_metrics(CandidateMetrics::register(&mut registry));
            h.notifier()
                .round_finished(&Source::Etcd, Duration::from_secs(1), Instant::now());
            if candidate {
                h.set_candidate(compile(&h, policy));
            }
            let t0 = Instant::now();
            let w0 = SystemTime::now();
            let mut took = Vec::with_capacity(N as usize);
            for i in 0..N {
                let at = t0 + Duration::from_millis(250) * i;
                for (id, def) in h.catalogue().iter() {
                    let v = match def.ty {
                        etcd_readiness_policy::signals::SignalType::Bool => {
                            Value::Bool(!(def.name.contains("alarm") || def.name == "learner"))
                        }
                        _ => Value::Num(1.0),
                    };
                    h.store().record_ok(id, v, at);
                }
                let start = Instant::now();
                h.evaluate_at(at, w0 + Duration::from_millis(250) * i);
                took.push(start.elapsed());
            }
            took.sort();
            let q = |f: f64| took[((took.len() - 1) as f64 * f) as usize].as_secs_f64() * 1e6;
            (q(0.0), q(0.5), q(0.99))
        };
        for _ in 0..3 {
            let (b0, m0, p0) = run(false);
            let (b1, m1, p1) = run(true);
            eprintln!(
                "evaluation of the default policy, µs best/median/p99: without a candidate \
                 {b0:.1}/{m0:.1}/{p0:.1}, with the same policy as candidate {b1:.1}/{m1:.1}/{p1:.1}"
            );
        }
    }
}
