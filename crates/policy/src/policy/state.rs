//! The evaluator: a policy plus the state of each of its checks — its current
//! outcome, since when, the hold-down (`for`) timer and the recovery hold
//! (`recover`) timer. State is keyed by a check's name and expression text, so
//! replacing the policy with one that leaves a check unchanged keeps that
//! check's state and timers.
//!
//! The two holds are mirror images. `for H` delays the fall: a passing check
//! whose expression stops being true keeps passing until it has not been true
//! for `H` without a break. `recover R` delays the rise: a check that has
//! failed (or is unknown, or has just started) passes only once its
//! expression has been true for `R` without a break; meanwhile it fails and
//! says "recovering: true for 12s of 30s". Any evaluation that is not true
//! (false or unknown) breaks the run, so an unknown never brings a pass
//! sooner. Without `recover` (or, equally, with a zero one) a check passes at
//! its first true evaluation, as before.
//!
//! [`Evaluator::evaluate`] allocates nothing once the evaluator exists;
//! [`Evaluator::report`] renders explanations and does.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::eval::{MAX_REPORT_EXPLANATION_BYTES, NOT_EXPLAINED, Walked};
use super::program::{Tri, Val};
use super::{CheckDef, Policy};
use crate::signals::Reading;
use crate::text::fmt_duration;
use crate::verdict::{CheckKind, CheckReport, CheckState, UsedSignal};

/// Below this much of a report's explanation budget, a failing check is not
/// explained at all rather than by a fragment.
const MIN_EXPLANATION_BYTES: usize = 200;

#[derive(Clone, Debug, PartialEq)]
struct CheckRuntime {
    name: String,
    expr_text: String,
    state: CheckState,
    since: Instant,
    /// The expression's own value at the last evaluation.
    raw: Tri,
    /// The expression is not true, but the hold-down keeps the check passing.
    held: bool,
    /// When the expression stopped being true (None while it is true).
    not_true_since: Option<Instant>,
    /// Whether the expression has ever been true; hold-down only protects a
    /// check that has passed, so a member never starts ready on a grace period.
    ever_true: bool,
    /// When the current unbroken run of true evaluations began (None while
    /// the expression is not true).
    true_since: Option<Instant>,
    /// The check has not passed since it last failed (or since the start):
    /// with a recovery hold it must be true for the hold without a break
    /// before it passes. Kept whether or not the check has a hold, so a
    /// reload that adds one to a failing check holds it.
    recovering: bool,
}

impl CheckRuntime {
    /// `recovering`: whether the check must earn its first pass through its
    /// recovery hold (at a start: yes; a check added by a reload: no).
    fn new(name: &str, expr_text: &str, now: Instant, recovering: bool) -> Self {
        CheckRuntime {
            name: name.to_string(),
            expr_text: expr_text.to_string(),
            state: CheckState::Unknown,
            since: now,
            raw: Tri::Unknown,
            held: false,
            not_true_since: Some(now),
            ever_true: false,
            true_since: None,
            recovering,
        }
    }

    fn update(
        &mut self,
        raw: Tri,
        hold: Option<Duration>,
        recover: Option<Duration>,
        now: Instant,
    ) {
        self.raw = raw;
        let next = if raw == Tri::True {
            let true_since = *self.true_since.get_or_insert(now);
            self.ever_true = true;
            self.not_true_since = None;
            self.held = false;
            let recovered = !self.recovering
                || recover.is_none_or(|r| now.saturating_duration_since(true_since) >= r);
            if recovered {
                self.recovering = false;
                CheckState::Pass
            } else {
                CheckState::Fail
            }
        } else {
            // Unknown breaks a run of truth like false does: it never
            // counts towards a recovery hold.
            self.true_since = None;
            let since = *self.not_true_since.get_or_insert(now);
            let within_hold = hold.is_some_and(|h| now.saturating_duration_since(since) < h);
            self.held = self.ever_true && within_hold && self.state == CheckState::Pass;
            if self.held {
                CheckState::Pass
            } else {
                self.recovering = true;
                if raw == Tri::False {
                    CheckState::Fail
                } else {
                    CheckState::Unknown
                }
            }
        };
        if next != self.state {
            self.state = next;
            self.since = now;
        }
    }

    /// The expression is true but the recovery hold keeps the check failing.
    fn counting(&self) -> bool {
        self.recovering && self.raw == Tri::True && self.state != CheckState::Pass
    }

    /// How long the current run of truth has lasted at `now`.
    fn true_for(&self, now: Instant) -> Duration {
        self.true_since
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }
}

/// Evaluates one policy over time.
#[derive(Debug)]
pub struct Evaluator {
    policy: Arc<Policy>,
    lets: Vec<Val>,
    checks: Vec<CheckRuntime>,
    evaluated: bool,
}

impl Evaluator {
    /// An evaluator for a member starting now: a check with a recovery hold
    /// passes only once its expression has been true for the hold, as after
    /// a failure — the hold's purpose is "not ready too soon after a restart",
    /// and the exporter cannot tell its own start from its member's.
    pub fn new(policy: Arc<Policy>, now: Instant) -> Self {
        Self::with_start(policy, now, true)
    }

    /// An evaluator that joins a member's life in the middle (`replay` at the
    /// start of its window): nothing is known of the past, so no check is
    /// assumed to be recovering; a recovery hold applies after the first
    /// failure seen.
    pub fn resumed(policy: Arc<Policy>, now: Instant) -> Self {
        Self::with_start(policy, now, false)
    }

    fn with_start(policy: Arc<Policy>, now: Instant, recovering: bool) -> Self {
        let checks = policy
            .checks()
            .iter()
            .map(|c| CheckRuntime::new(&c.name, &c.expr_text, now, recovering))
            .collect();
        let lets = vec![Val::N(None); policy.lets().len()];
        Evaluator {
            policy,
            lets,
            checks,
            evaluated: false,
        }
    }

    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// Switch to a new policy. Checks whose name and expression text are
    /// unchanged keep their state, since-when and hold-down timer; others start
    /// fresh. A fresh check is not held by its recovery hold before its first
    /// failure: a policy edit is not a restart, and holding a new check on
    /// every member at once would take the whole cluster out of service.
    /// Returns how many checks kept their state.
    pub fn replace_policy(&mut self, policy: Arc<Policy>, now: Instant) -> usize {
        let mut kept = 0;
        let mut old = std::mem::take(&mut self.checks);
        self.checks = policy
            .checks()
            .iter()
            .map(|c| {
                match old
                    .iter()
                    .position(|o| o.name == c.name && o.expr_text == c.expr_text)
                {
                    Some(i) => {
                        kept += 1;
                        old.swap_remove(i)
                    }
                    None => CheckRuntime::new(&c.name, &c.expr_text, now, false),
                }
            })
            .collect();
        self.lets = vec![Val::N(None); policy.lets().len()];
        self.policy = policy;
        kept
    }

    /// Evaluate every check against `readings` (indexed by signal id) at `now`.
    pub fn evaluate(&mut self, readings: &[Reading], now: Instant) {
        let policy = &*self.policy;
        for i in 0..self.lets.len() {
            let root = policy.lets()[i].root;
            self.lets[i] = policy.eval(root, readings, &self.lets[..i]);
        }
        for (def, rt) in policy.checks().iter().zip(self.checks.iter_mut()) {
            let raw = policy.eval(def.root, readings, &self.lets).tri();
            rt.update(raw, def.hold, def.recover, now);
        }
        self.evaluated = true;
    }

    /// Whether every non-warn check passes. False before the first evaluation.
    pub fn ready(&self) -> bool {
        self.evaluated
            && self
                .policy
                .checks()
                .iter()
                .zip(&self.checks)
                .all(|(d, r)| d.kind == CheckKind::Warn || r.state == CheckState::Pass)
    }

    /// Whether time alone can change nothing: it has evaluated, and no check
    /// is held passing by its hold-down or counting towards its recovery
    /// hold. A settled evaluator evaluated later with every check's
    /// expression having the value it had is left exactly as it is (the
    /// state machine of `CheckRuntime::update`, pinned by
    /// `a_settled_evaluator_is_unchanged_by_the_same_values_later`).
    pub fn settled(&self) -> bool {
        self.evaluated && self.checks.iter().all(|r| !r.held && !r.counting())
    }

    /// (name, kind, state) of every check, in policy order.
    pub fn states(&self) -> impl Iterator<Item = (&str, CheckKind, CheckState)> {
        self.policy
            .checks()
            .iter()
            .zip(&self.checks)
            .map(|(d, r)| (d.name.as_str(), d.kind, r.state))
    }

    /// Per check, in policy order: whether its hold-down is keeping it
    /// passing although its expression is not true. Allocates nothing.
    pub fn held(&self) -> impl Iterator<Item = bool> + '_ {
        self.checks.iter().map(|r| r.held)
    }

    /// Per check, in policy order: whether its recovery hold is keeping it
    /// failing although its expression is true. Allocates nothing.
    pub fn recovering(&self) -> impl Iterator<Item = bool> + '_ {
        self.checks.iter().map(CheckRuntime::counting)
    }

    /// Full reports with explanations, for the verdict. `now_wall` is the wall
    /// clock at `now`, used to turn since-when into a timestamp.
    pub fn report(
        &self,
        readings: &[Reading],
        now: Instant,
        now_wall: SystemTime,
    ) -> Vec<CheckReport> {
        let policy = &*self.policy;
        // Every node's value, once for all the checks that need explaining.
        // What this report may still spend on explanations.
        let mut budget = MAX_REPORT_EXPLANATION_BYTES;
        let (vals, mut walked) = if self.checks.iter().any(|rt| rt.raw != Tri::True) {
            (
                policy.node_values(readings, &self.lets),
                Walked::new(policy.node_count()),
            )
        } else {
            (Vec::new(), Walked::new(0))
        };
        policy
            .checks()
            .iter()
            .zip(&self.checks)
            .map(|(def, rt)| {
                let in_state_for = now.saturating_duration_since(rt.since);
                let hold_left = rt.held.then(|| {
                    def.hold.unwrap_or_default().saturating_sub(
                        rt.not_true_since
                            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s)),
                    )
                });
                let recovering = rt.counting();
                let recover = def.recover.unwrap_or_default();
                let true_for = rt.true_for(now);
                let recover_left = recovering.then(|| recover.saturating_sub(true_for));
                let explanation = if recovering {
                    format!(
                        "recovering: true for {} of {}",
                        fmt_duration(true_for.as_secs_f64()),
                        fmt_duration(recover.as_secs_f64())
                    )
                } else if rt.raw == Tri::True {
                    String::new()
                } else {
                    let why = if budget < MIN_EXPLANATION_BYTES {
                        NOT_EXPLAINED.to_string()
                    } else {
                        let why =
                            policy.explain_with(def.root, readings, &vals, &mut walked, budget);
                        budget = budget.saturating_sub(why.len());
                        why
                    };
                    with_hold(why, def, hold_left)
                };
                CheckReport {
                    name: def.name.clone(),
                    kind: def.kind,
                    state: rt.state,
                    in_state_for,
                    since: now_wall.checked_sub(in_state_for).unwrap_or(now_wall),
                    held: rt.held,
                    hold_left,
                    recovering,
                    recover_left,
                    true_for: recovering.then_some(true_for),
                    expr: def.expr_text.clone(),
                    explanation,
                    signals: used_signals(policy, def, readings),
                }
            })
            .collect()
    }
}

/// A failing check's explanation `why`, with what holds it where it is:
/// its `for` (passing, `hold_left` to go) or its `recover` (failing).
fn with_hold(why: String, def: &CheckDef, hold_left: Option<Duration>) -> String {
    if let Some(left) = hold_left {
        format!(
            "{why} (held passing by `for {}`, {} left)",
            fmt_duration(def.hold.unwrap_or_default().as_secs_f64()),
            fmt_duration(left.as_secs_f64())
        )
    } else if let Some(recover) = def.recover {
        format!(
            "{why} (then held failing by `recover {}`)",
            fmt_duration(recover.as_secs_f64())
        )
    } else {
        why
    }
}

/// The signals `def` reads, each with its value now (JSON `null` when it
/// has none or it is not a finite number).
fn used_signals(policy: &Policy, def: &CheckDef, readings: &[Reading]) -> Vec<UsedSignal> {
    def.signals
        .iter()
        .map(|s| {
            let r = readings.get(s.index()).unwrap_or(&Reading::NEVER);
            UsedSignal {
                name: policy.signal_name(*s).to_string(),
                value: r.get().map(|v| match v {
                    crate::signals::Value::Bool(b) => serde_json::Value::Bool(b),
                    crate::signals::Value::Num(n) => serde_json::Number::from_f64(n)
                        .map_or(serde_json::Value::Null, serde_json::Value::Number),
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! The per-check state machine on its own, where a zero recovery hold
    //! (which the checker refuses in a policy) can be compared with none.
    use super::*;
    use proptest::prelude::*;

    fn states(tl: &[(u64, u8)], hold: Option<u64>, recover: Option<Duration>) -> Vec<CheckState> {
        let t0 = Instant::now();
        let mut rt = CheckRuntime::new("c", "leader", t0, true);
        let mut at = t0;
        tl.iter()
            .map(|&(dt, v)| {
                at += Duration::from_millis(dt);
                let raw = [Tri::True, Tri::False, Tri::Unknown][usize::from(v % 3)];
                rt.update(raw, hold.map(Duration::from_millis), recover, at);
                rt.state
            })
            .collect()
    }

    proptest! {
        /// With a hold of zero the check behaves exactly as without one.
        #[test]
        fn a_zero_recovery_hold_is_no_hold(
            tl in prop::collection::vec((0u64..4000, 0u8..3), 1..100),
            hold in prop::option::of(1u64..10_000),
        ) {
            prop_assert_eq!(states(&tl, hold, Some(Duration::ZERO)), states(&tl, hold, None));
        }

        /// Wherever a check is neither held nor counting, evaluating its
        /// expression to the same value again, however much later, leaves
        /// it exactly as it is: what [`Evaluator::settled`] promises.
        #[test]
        fn a_settled_evaluator_is_unchanged_by_the_same_values_later(
            tl in prop::collection::vec((0u64..4000, 0u8..3), 1..100),
            hold in prop::option::of(1u64..10_000),
            recover in prop::option::of(1u64..10_000),
            later in 0u64..100_000,
        ) {
            let (hold, recover) = (hold.map(Duration::from_millis), recover.map(Duration::from_millis));
            let t0 = Instant::now();
            let mut rt = CheckRuntime::new("c", "leader", t0, true);
            let mut at = t0;
            for &(dt, v) in &tl {
                at += Duration::from_millis(dt);
                let raw = [Tri::True, Tri::False, Tri::Unknown][usize::from(v % 3)];
                rt.update(raw, hold, recover, at);
                if !rt.held && !rt.counting() {
                    let mut again = rt.clone();
                    again.update(raw, hold, recover, at + Duration::from_millis(later));
                    prop_assert_eq!(&again, &rt);
                }
            }
        }
    }
}
