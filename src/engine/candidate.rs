//! The candidate policy (`--policy.candidate`): a second policy the engine
//! evaluates at every evaluation, on the readings and at the instant of the
//! policy in force, and which decides nothing. Its verdict is published
//! beside the live one ([`CandidatePublished`]) for `/readyz?policy=candidate`,
//! the status page and its own metric families ([`CandidateMetrics`]), and
//! the time the two verdicts disagreed is summed by direction
//! ([`Disagreement`]).
//!
//! The disagreement is accounted on the engine's clock, not sampled: each
//! evaluation adds the time since the previous one to the direction the two
//! verdicts published by the previous one disagreed in, because that is what
//! `/readyz` answered in the meantime. So the counters are exact sums of
//! evaluation intervals, and a test that steps the clock with
//! [`super::EngineHandle::evaluate_at`] gets exact seconds back.
//!
//! The candidate's policy reaches the engine through [`CandidateSink`], the
//! [`crate::reload::PolicySink`] of a second [`crate::reload::Reloader`]: the
//! same reading, hashing, compiling and last-good rule as the policy in
//! force, into a different slot. Nothing here touches `/readyz`, the
//! readiness metrics or the live evaluator.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::EngineHandle;
use super::metrics::StateGauges;
use etcd_readiness_policy::policy::{Evaluator, Policy};
use etcd_readiness_policy::verdict::Verdict;

/// The candidate's policy and its reload state, as `/policy?policy=candidate`
/// and the status page show it.
#[derive(Clone, Debug, Default)]
pub struct CandidateStatus {
    /// The candidate in force: `None` until a candidate file compiled once.
    pub policy: Option<Arc<Policy>>,
    /// When it was put in force (the wall time of the evaluation it started).
    pub loaded_at: Option<SystemTime>,
    /// Why the last reload of the candidate file failed, if it did.
    pub last_reload_error: Option<String>,
}

/// Time the candidate and the policy in force disagreed, by direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Disagreement {
    /// The member was ready and the candidate would have made it unready.
    pub would_fail_while_ready: Duration,
    /// The member was not ready and the candidate would have made it ready.
    pub would_pass_while_unready: Duration,
}

impl Disagreement {
    pub fn total(&self) -> Duration {
        self.would_fail_while_ready + self.would_pass_while_unready
    }
}

/// The direction two verdicts disagree in, if they do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    WouldFailWhileReady,
    WouldPassWhileUnready,
}

impl Direction {
    pub fn of(live_ready: bool, candidate_ready: bool) -> Option<Direction> {
        match (live_ready, candidate_ready) {
            (true, false) => Some(Direction::WouldFailWhileReady),
            (false, true) => Some(Direction::WouldPassWhileUnready),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Direction::WouldFailWhileReady => "would fail while ready",
            Direction::WouldPassWhileUnready => "would pass while unready",
        }
    }
}

/// What the engine publishes about the candidate after each evaluation.
#[derive(Clone, Debug)]
pub struct CandidatePublished {
    /// The candidate's verdict at the same evaluation as the live one.
    pub verdict: Verdict,
    pub at: Instant,
    /// Whether the live verdict of this evaluation was ready.
    pub live_ready: bool,
    /// Disagreement since the candidate was first put in force, up to `at`.
    pub disagreement: Disagreement,
    /// Since when the two verdicts disagree as they do now (wall time of the
    /// evaluation that started it), if they do.
    pub disagreeing_since: Option<(Direction, SystemTime)>,
}

/// The previous evaluation, for the accounting.
#[derive(Clone, Copy, Debug)]
struct Last {
    at: Instant,
    direction: Option<Direction>,
}

/// The candidate's evaluator and accounting, inside the engine's lock.
pub(super) struct CandidateEval {
    pub(super) evaluator: Evaluator,
    last: Option<Last>,
    totals: Disagreement,
    since: Option<(Direction, SystemTime)>,
}

impl CandidateEval {
    pub(super) fn new(policy: Arc<Policy>, now: Instant) -> Self {
        CandidateEval {
            evaluator: Evaluator::new(policy, now),
            last: None,
            totals: Disagreement::default(),
            since: None,
        }
    }

    /// Account the interval since the previous evaluation to the direction
    /// the verdicts then disagreed in; returns what was added.
    pub(super) fn account(
        &mut self,
        now: Instant,
        wall: SystemTime,
        live_ready: bool,
        candidate_ready: bool,
    ) -> Disagreement {
        let mut added = Disagreement::default();
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last.at);
            match last.direction {
                Some(Direction::WouldFailWhileReady) => added.would_fail_while_ready = dt,
                Some(Direction::WouldPassWhileUnready) => added.would_pass_while_unready = dt,
                None => {}
            }
        }
        self.totals.would_fail_while_ready += added.would_fail_while_ready;
        self.totals.would_pass_while_unready += added.would_pass_while_unready;
        let direction = Direction::of(live_ready, candidate_ready);
        if self.since.map(|(d, _)| d) != direction {
            self.since = direction.map(|d| (d, wall));
        }
        // An evaluation whose clock was read before the previous one's (a
        // policy swap racing the loop) does not move the start back: no
        // interval is counted twice.
        let at = self.last.map_or(now, |l| l.at.max(now));
        self.last = Some(Last { at, direction });
        added
    }

    /// Forget the accounting (tests that step the clock start from their own t0).
    #[cfg(test)]
    pub(super) fn reset_for_test(&mut self) {
        self.last = None;
        self.totals = Disagreement::default();
        self.since = None;
    }

    pub(super) fn totals(&self) -> Disagreement {
        self.totals
    }

    pub(super) fn since(&self) -> Option<(Direction, SystemTime)> {
        self.since
    }
}

/// The candidate's policy goes to the engine's candidate slot; a failed
/// reload of the candidate file is recorded there, never on the live policy.
pub struct CandidateSink(pub EngineHandle);

impl crate::reload::PolicySink for CandidateSink {
    fn apply(&self, policy: Arc<Policy>) {
        self.0.set_candidate(policy);
    }

    fn reload_failed(&self, error: Option<String>) {
        self.0.set_candidate_reload_error(error);
    }
}

type CounterF = Counter<f64, AtomicU64>;

/// No labels: a family that is empty (absent) until the candidate is in force.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NoLabels {}

/// The candidate's families, registered only with `--policy.candidate`.
///
/// Separate families (`etcd_readiness_candidate_*`), not a `policy` label on
/// the live ones: every dashboard panel, alert and user query that sums or
/// counts `etcd_readiness_ready` or `etcd_readiness_check_state` by member
/// or cluster would otherwise count each member twice as soon as a
/// candidate runs (docs/monitoring.md, "Candidate policy").
#[derive(Clone, Debug)]
pub struct CandidateMetrics {
    ready: Family<NoLabels, Gauge>,
    check_state: StateGauges,
    would_fail_while_ready: CounterF,
    would_pass_while_unready: CounterF,
}

impl CandidateMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = CandidateMetrics {
            ready: Family::default(),
            check_state: StateGauges::default(),
            would_fail_while_ready: CounterF::default(),
            would_pass_while_unready: CounterF::default(),
        };
        registry.register(
            "etcd_readiness_candidate_ready",
            "1 when the candidate policy would make the member ready, else 0; decides nothing \
             (absent until a candidate policy is in force)",
            m.ready.clone(),
        );
        m.check_state.register_as(
            registry,
            "etcd_readiness_candidate_check_state",
            "1 for the candidate policy's check's current state (pass, fail or unknown), else 0",
        );
        registry.register(
            "etcd_readiness_candidate_would_fail_while_ready_seconds",
            "Seconds the member was ready while the candidate policy would have made it unready",
            m.would_fail_while_ready.clone(),
        );
        registry.register(
            "etcd_readiness_candidate_would_pass_while_unready_seconds",
            "Seconds the member was not ready while the candidate policy would have made it ready",
            m.would_pass_while_unready.clone(),
        );
        m
    }

    /// Mirror the candidate's verdict and add one evaluation's disagreement.
    pub(super) fn update(&self, verdict: &Verdict, added: Disagreement) {
        self.ready
            .get_or_create(&NoLabels {})
            .set(i64::from(verdict.ready));
        if !added.would_fail_while_ready.is_zero() {
            self.would_fail_while_ready
                .inc_by(added.would_fail_while_ready.as_secs_f64());
        }
        if !added.would_pass_while_unready.is_zero() {
            self.would_pass_while_unready
                .inc_by(added.would_pass_while_unready.as_secs_f64());
        }
        // While starting the verdict has no checks: keep the families as they are.
        if verdict.reason.is_some() && verdict.checks.is_empty() {
            return;
        }
        self.check_state.update(&verdict.checks, |_| {}, |_, _| {});
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_interval_goes_to_the_direction_published_at_its_start() {
        let catalogue = etcd_readiness_policy::signals::Catalogue::builtin();
        let p = Arc::new(Policy::compile("c", "check leader: leader\n", &catalogue).unwrap());
        let t0 = Instant::now();
        let w0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let s = Duration::from_secs;
        let mut c = CandidateEval::new(p, t0);
        // agree for 3 s, would fail for 5 s, would pass for 2 s, agree.
        let steps = [
            (0, true, true),
            (3, true, false),
            (8, false, true),
            (10, true, true),
            (20, true, true),
        ];
        for (at, live, cand) in steps {
            c.account(t0 + s(at), w0 + s(at), live, cand);
            if at == 3 {
                assert_eq!(c.since(), Some((Direction::WouldFailWhileReady, w0 + s(3))));
            }
        }
        assert_eq!(
            c.totals(),
            Disagreement {
                would_fail_while_ready: s(5),
                would_pass_while_unready: s(2),
            }
        );
        assert_eq!(c.since(), None);
    }
}
