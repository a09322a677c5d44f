//! The pure part of `replay`, without IO or clocks: from each member's
//! history on a grid of steps (signal values and knownness, the recorded
//! verdict) it rebuilds the member's readings at every step, runs the same
//! stateful [`Evaluator`] as `serve` over them in replay time (hold-downs
//! and `warn` included), and builds what the command reports: seconds ready,
//! not ready and unknown, flips, verdict intervals with the failing checks and
//! their explanations, each check's not-passing spans, and the intervals where
//! the candidate differs from the recorded verdict.
//!
//! Replay time: step `i` is evaluated at `base + i × step` on a virtual
//! `Instant` clock and at the step's own wall time, so since-when and
//! hold-downs run on the history's time, not on the machine's. A member with
//! no sample at all at a step (the exporter was not scraped) has no verdict
//! there (unknown); when its data comes back it starts with a fresh
//! evaluator, as a restarted exporter does — recovery holds (`recover`)
//! included. A member with data from the window's first step was running
//! before it: its evaluator starts [`Evaluator::resumed`], so the window's
//! start is not taken for a restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::policy::{Evaluator, Policy};
use crate::signals::{Catalogue, Reading, SignalType, Unknown, Value};
use crate::verdict::{CheckKind, CheckReport, CheckState};

/// At most this many steps per replay (a year at 30 s): bounds memory.
pub const MAX_STEPS: usize = 1_100_000;

/// The instants of a replay: `start`, `start + step`, … up to `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub start_ms: i64,
    pub end_ms: i64,
    pub step_ms: i64,
    pub steps: usize,
}

/// Why a grid cannot be built.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum GridError {
    #[error("--start must be before --end")]
    Order,
    #[error(
        "{steps} steps from --start to --end at this --step, more than the limit of {MAX_STEPS}: \
         choose a longer step or a shorter range"
    )]
    TooMany { steps: i64 },
}

impl Grid {
    pub fn new(start_ms: i64, end_ms: i64, step_ms: i64) -> Result<Grid, GridError> {
        if end_ms <= start_ms {
            return Err(GridError::Order);
        }
        let step_ms = step_ms.max(1);
        let steps = (end_ms - start_ms) / step_ms + 1;
        if steps > MAX_STEPS as i64 {
            return Err(GridError::TooMany { steps });
        }
        Ok(Grid {
            start_ms,
            end_ms,
            step_ms,
            steps: steps as usize,
        })
    }

    /// Time of step `i`.
    pub fn at(&self, i: usize) -> i64 {
        self.start_ms + i as i64 * self.step_ms
    }

    /// The step at exactly `t_ms`, if any.
    pub fn index_of(&self, t_ms: i64) -> Option<usize> {
        let off = t_ms - self.start_ms;
        if off < 0 || off % self.step_ms != 0 {
            return None;
        }
        let i = usize::try_from(off / self.step_ms).ok()?;
        (i < self.steps).then_some(i)
    }

    /// Where step `i`'s share of time ends: the next step, or `end` for the last.
    pub fn until(&self, i: usize) -> i64 {
        if i + 1 < self.steps {
            self.at(i + 1)
        } else {
            self.end_ms
        }
    }
}

/// One signal of one member at every step.
#[derive(Clone, Debug, PartialEq)]
pub struct SignalHistory {
    /// `etcd_readiness_signal_value` as Prometheus returns it at the step.
    pub value: Vec<Option<f64>>,
    /// `etcd_readiness_signal_known` at the step (non-zero: known).
    pub known: Vec<Option<bool>>,
}

impl SignalHistory {
    pub fn new(steps: usize) -> Self {
        SignalHistory {
            value: vec![None; steps],
            known: vec![None; steps],
        }
    }
}

/// One member's history: its labels, its signals by name, its recorded verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberHistory {
    pub labels: BTreeMap<String, String>,
    pub signals: BTreeMap<String, SignalHistory>,
    /// `etcd_readiness_ready` at each step.
    pub recorded: Vec<Option<bool>>,
}

impl MemberHistory {
    pub fn new(labels: BTreeMap<String, String>, steps: usize) -> Self {
        MemberHistory {
            labels,
            signals: BTreeMap::new(),
            recorded: vec![None; steps],
        }
    }

    /// Whether Prometheus holds any sample of this member at step `i`.
    fn present(&self, i: usize) -> bool {
        self.recorded[i].is_some()
            || self
                .signals
                .values()
                .any(|s| s.value[i].is_some() || s.known[i].is_some())
    }
}

/// A stretch of time with one verdict. `ready` is `None` where the member
/// has no data.
#[derive(Clone, Debug, PartialEq)]
pub struct Interval {
    pub from_ms: i64,
    pub to_ms: i64,
    pub ready: Option<bool>,
    /// The `check`s (not `warn`s) not passing at `from`, in policy order.
    pub failing: Vec<String>,
    /// Their explanations at `from`, in the same order (empty for
    /// differences, which carry only names).
    pub explanations: Vec<String>,
}

/// A stretch of time in which one check (or warn) did not pass, or passed
/// only because its hold-down held it, or failed only because its recovery
/// hold held it.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckSpan {
    pub check: String,
    pub kind: CheckKind,
    /// `fail` or `unknown`; `pass` when `held`.
    pub state: CheckState,
    /// The expression was not true but the hold-down kept the check passing.
    pub held: bool,
    /// The expression was true but the recovery hold kept the check failing.
    pub recovering: bool,
    pub from_ms: i64,
    pub to_ms: i64,
    /// The explanation at `from`.
    pub explanation: String,
}

/// A check's state at a step, whether its hold-down held it passing, and
/// whether its recovery hold held it failing.
type Phase = (CheckState, bool, bool);

/// What `replay` reports for one member.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberReport {
    pub labels: BTreeMap<String, String>,
    pub ready_ms: i64,
    pub not_ready_ms: i64,
    pub unknown_ms: i64,
    /// Changes of the candidate's verdict between consecutive steps at which
    /// it is known.
    pub flips: u64,
    /// The same count for the recorded verdict.
    pub recorded_flips: u64,
    /// Every stretch of one candidate verdict, in time order, covering the
    /// whole range.
    pub intervals: Vec<Interval>,
    /// The recorded verdict the same way (no failing checks).
    pub recorded: Vec<Interval>,
    /// Where both verdicts are known and differ; `ready` is the candidate's.
    pub differs_from_recorded: Vec<Interval>,
    /// Every check's not-passing spans, in time order.
    pub checks: Vec<CheckSpan>,
    /// Signals the policy reads of which Prometheus holds no series for this member.
    pub missing_signals: Vec<String>,
}

impl MemberReport {
    pub fn not_ready_intervals(&self) -> impl Iterator<Item = &Interval> {
        self.intervals.iter().filter(|i| i.ready == Some(false))
    }
}

/// Why a signal with a series is unknown at a step.
const NO_SAMPLE: &str = "Prometheus holds no sample of it at this step";
const RECORDED_UNKNOWN: &str = "it was unknown to the exporter (etcd_readiness_signal_known 0)";
const NO_SERIES: &str = "Prometheus holds no series of it for this member";
const NOT_FINITE: &str = "the recorded value is not a finite number";

fn unknown(error: &str) -> Reading {
    Reading {
        value: None,
        unknown: Unknown::Failed {
            error: Arc::from(error),
            ago: Duration::ZERO,
        },
        last_good_age: None,
        // Prometheus holds answers only: nothing was in flight in a replay.
        pending: None,
    }
}

/// Builds the stretches of one value over the steps.
struct Runs<T: PartialEq + Clone> {
    out: Vec<(i64, i64, T)>,
    open: Option<(i64, T)>,
}

impl<T: PartialEq + Clone> Runs<T> {
    fn new() -> Self {
        Runs {
            out: Vec::new(),
            open: None,
        }
    }

    /// `v` holds from `t`; returns true when a new stretch starts.
    fn push(&mut self, t: i64, v: T) -> bool {
        match &self.open {
            Some((_, cur)) if *cur == v => false,
            _ => {
                if let Some((from, cur)) = self.open.take() {
                    self.out.push((from, t, cur));
                }
                self.open = Some((t, v));
                true
            }
        }
    }

    fn finish(mut self, end: i64) -> Vec<(i64, i64, T)> {
        if let Some((from, cur)) = self.open.take() {
            self.out.push((from, end, cur));
        }
        self.out
    }
}

/// The `check`s (not `warn`s) not passing, in policy order.
fn failing(ev: &Evaluator) -> Vec<String> {
    ev.states()
        .filter(|(_, kind, state)| *kind == CheckKind::Check && *state != CheckState::Pass)
        .map(|(name, _, _)| name.to_string())
        .collect()
}

/// The evaluator's reports at this step, rendered once.
fn reports_at<'a>(
    cache: &'a mut Option<Vec<CheckReport>>,
    ev: &Evaluator,
    readings: &[Reading],
    now: Instant,
    wall: SystemTime,
) -> &'a [CheckReport] {
    cache.get_or_insert_with(|| ev.report(readings, now, wall))
}

/// Replay `policy` over every member's history on `grid`.
pub fn replay(
    policy: &Arc<Policy>,
    catalogue: &Catalogue,
    grid: &Grid,
    members: &[MemberHistory],
) -> Vec<MemberReport> {
    members
        .iter()
        .map(|m| replay_member(policy, catalogue, grid, m))
        .collect()
}

fn replay_member(
    policy: &Arc<Policy>,
    catalogue: &Catalogue,
    grid: &Grid,
    member: &MemberHistory,
) -> MemberReport {
    let used: Vec<(usize, SignalType, Option<&SignalHistory>)> = policy
        .signals_used()
        .into_iter()
        .map(|id| {
            let name = policy.signal_name(id);
            (id.index(), catalogue.get(id).ty, member.signals.get(name))
        })
        .collect();
    let missing_signals: Vec<String> = policy
        .signals_used()
        .into_iter()
        .filter(|id| !member.signals.contains_key(policy.signal_name(*id)))
        .map(|id| policy.signal_name(id).to_string())
        .collect();
    let n_checks = policy.checks().len();
    let mut readings = vec![Reading::NEVER; catalogue.len()];
    for (idx, _, h) in &used {
        if h.is_none() {
            readings[*idx] = unknown(NO_SERIES);
        }
    }
    let mut last_good: Vec<Option<i64>> = vec![None; used.len()];
    let base = Instant::now();
    let mut evaluator: Option<Evaluator> = None;

    let mut report = MemberReport {
        labels: member.labels.clone(),
        ready_ms: 0,
        not_ready_ms: 0,
        unknown_ms: 0,
        flips: 0,
        recorded_flips: 0,
        intervals: Vec::new(),
        recorded: Vec::new(),
        differs_from_recorded: Vec::new(),
        checks: Vec::new(),
        missing_signals,
    };
    let mut verdicts = Runs::<Option<bool>>::new();
    let mut verdict_detail: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    let mut recorded = Runs::<Option<bool>>::new();
    let mut diffs = Runs::<bool>::new();
    let mut diff_detail: Vec<(Option<bool>, Vec<String>)> = Vec::new();
    let mut check_runs: Vec<Runs<Option<Phase>>> = (0..n_checks).map(|_| Runs::new()).collect();
    let mut check_detail: Vec<Vec<String>> = vec![Vec::new(); n_checks];
    let mut states: Vec<Option<Phase>> = vec![None; n_checks];
    let mut prev_verdict: Option<bool> = None;
    let mut prev_recorded: Option<bool> = None;

    for i in 0..grid.steps {
        let t = grid.at(i);
        let weight = grid.until(i) - t;
        let present = member.present(i);
        let now = base + Duration::from_millis((t - grid.start_ms) as u64);
        let wall = SystemTime::UNIX_EPOCH + Duration::from_millis(t.max(0) as u64);
        let verdict = if present {
            for (k, (idx, ty, h)) in used.iter().enumerate() {
                let Some(h) = h else { continue };
                readings[*idx] = match (h.known[i], h.value[i]) {
                    (Some(false), _) => unknown(RECORDED_UNKNOWN),
                    (_, None) => unknown(NO_SAMPLE),
                    (_, Some(v)) if !v.is_finite() => unknown(NOT_FINITE),
                    (_, Some(v)) => {
                        last_good[k] = Some(t);
                        Reading::known(match ty {
                            SignalType::Bool => Value::Bool(v != 0.0),
                            SignalType::Number | SignalType::Duration => Value::Num(v),
                        })
                    }
                };
                readings[*idx].last_good_age =
                    last_good[k].map(|g| Duration::from_millis((t - g) as u64));
            }
            let ev = evaluator.get_or_insert_with(|| {
                if i == 0 {
                    Evaluator::resumed(policy.clone(), now)
                } else {
                    Evaluator::new(policy.clone(), now)
                }
            });
            ev.evaluate(&readings, now);
            let phases = ev.states().zip(ev.held()).zip(ev.recovering());
            for (s, (((_, _, state), held), recovering)) in states.iter_mut().zip(phases) {
                *s = Some((state, held, recovering));
            }
            Some(ev.ready())
        } else {
            evaluator = None;
            states.iter_mut().for_each(|s| *s = None);
            None
        };
        let rec = member.recorded[i];

        // Explanations are rendered only where a stretch starts that needs them.
        let mut reports: Option<Vec<CheckReport>> = None;
        if verdicts.push(t, verdict) {
            let detail = match (&evaluator, verdict) {
                (Some(ev), Some(false)) => {
                    let names = failing(ev);
                    let all = reports_at(&mut reports, ev, &readings, now, wall);
                    let why = names
                        .iter()
                        .map(|n| {
                            all.iter()
                                .find(|c| &c.name == n)
                                .map_or_else(String::new, |c| c.explanation.clone())
                        })
                        .collect();
                    (names, why)
                }
                _ => (Vec::new(), Vec::new()),
            };
            verdict_detail.push(detail);
        }
        recorded.push(t, rec);
        let differs = matches!((verdict, rec), (Some(a), Some(b)) if a != b);
        if diffs.push(t, differs) {
            let names = match (&evaluator, verdict) {
                (Some(ev), Some(false)) => failing(ev),
                _ => Vec::new(),
            };
            diff_detail.push((verdict, names));
        }
        for (j, (runs, state)) in check_runs.iter_mut().zip(&states).enumerate() {
            if runs.push(t, *state) {
                let why = match (&evaluator, state) {
                    (Some(ev), Some((s, held, _))) if *s != CheckState::Pass || *held => {
                        reports_at(&mut reports, ev, &readings, now, wall)[j]
                            .explanation
                            .clone()
                    }
                    _ => String::new(),
                };
                check_detail[j].push(why);
            }
        }

        match verdict {
            Some(true) => report.ready_ms += weight,
            Some(false) => report.not_ready_ms += weight,
            None => report.unknown_ms += weight,
        }
        if i > 0 {
            if let (Some(a), Some(b)) = (prev_verdict, verdict)
                && a != b
            {
                report.flips += 1;
            }
            if let (Some(a), Some(b)) = (prev_recorded, rec)
                && a != b
            {
                report.recorded_flips += 1;
            }
        }
        prev_verdict = verdict;
        prev_recorded = rec;
    }

    let end = grid.end_ms;
    report.intervals = verdicts
        .finish(end)
        .into_iter()
        .zip(verdict_detail)
        .map(
            |((from_ms, to_ms, ready), (failing, explanations))| Interval {
                from_ms,
                to_ms,
                ready,
                failing,
                explanations,
            },
        )
        .collect();
    report.recorded = recorded
        .finish(end)
        .into_iter()
        .map(|(from_ms, to_ms, ready)| Interval {
            from_ms,
            to_ms,
            ready,
            failing: Vec::new(),
            explanations: Vec::new(),
        })
        .collect();
    report.differs_from_recorded = diffs
        .finish(end)
        .into_iter()
        .zip(diff_detail)
        .filter(|((_, _, differs), _)| *differs)
        .map(|((from_ms, to_ms, _), (ready, failing))| Interval {
            from_ms,
            to_ms,
            ready,
            failing,
            explanations: Vec::new(),
        })
        .collect();
    for ((runs, details), def) in check_runs
        .into_iter()
        .zip(check_detail)
        .zip(policy.checks())
    {
        for ((from_ms, to_ms, state), explanation) in runs.finish(end).into_iter().zip(details) {
            if let Some((state, held, recovering)) =
                state.filter(|(s, held, _)| *s != CheckState::Pass || *held)
            {
                report.checks.push(CheckSpan {
                    check: def.name.clone(),
                    kind: def.kind,
                    state,
                    held,
                    recovering,
                    from_ms,
                    to_ms,
                    explanation,
                });
            }
        }
    }
    report.checks.sort_by_key(|s| s.from_ms);
    report
}

/// Signals the policy reads of which no member has a series.
pub fn missing_everywhere(reports: &[MemberReport]) -> Vec<String> {
    let Some(first) = reports.first() else {
        return Vec::new();
    };
    first
        .missing_signals
        .iter()
        .filter(|s| reports.iter().all(|r| r.missing_signals.contains(s)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_796_025_600_000;

    /// A member whose signals have `value` at every step (known where Some).
    fn member(
        steps: usize,
        signals: &[(&str, Vec<Option<f64>>)],
        recorded: Vec<Option<bool>>,
    ) -> MemberHistory {
        let mut m = MemberHistory::new(
            BTreeMap::from([("pod".to_string(), "etcd-0".to_string())]),
            steps,
        );
        for (name, values) in signals {
            assert_eq!(values.len(), steps);
            m.signals.insert(
                name.to_string(),
                SignalHistory {
                    known: values.iter().map(|v| v.map(|_| true)).collect(),
                    value: values.clone(),
                },
            );
        }
        m.recorded = recorded;
        m
    }

    /// `base` at every step, `spikes` (step range, value) over it, and no
    /// sample at all in `gap`.
    fn series(
        steps: usize,
        base: f64,
        spikes: &[(std::ops::RangeInclusive<usize>, f64)],
        gap: &std::ops::RangeInclusive<usize>,
    ) -> Vec<Option<f64>> {
        (0..steps)
            .map(|i| {
                if gap.contains(&i) {
                    return None;
                }
                Some(
                    spikes
                        .iter()
                        .find(|(r, _)| r.contains(&i))
                        .map_or(base, |(_, v)| *v),
                )
            })
            .collect()
    }

    fn compile(src: &str) -> (Arc<Policy>, Catalogue) {
        let c = Catalogue::builtin();
        (Arc::new(Policy::compile("candidate", src, &c).unwrap()), c)
    }

    fn iv(
        from: i64,
        to: i64,
        ready: Option<bool>,
        failing: &[&str],
    ) -> (i64, i64, Option<bool>, Vec<String>) {
        (
            S + from * 1000,
            S + to * 1000,
            ready,
            failing.iter().map(|s| s.to_string()).collect(),
        )
    }

    fn ivs(list: &[Interval]) -> Vec<(i64, i64, Option<bool>, Vec<String>)> {
        list.iter()
            .map(|i| (i.from_ms, i.to_ms, i.ready, i.failing.clone()))
            .collect()
    }

    #[test]
    fn threshold_hold_down_warn_gap_and_differences() {
        let grid = Grid::new(S, S + 300_000, 15_000).unwrap();
        assert_eq!(grid.steps, 21);
        let gap = 17..=18;
        let m = member(
            21,
            &[
                ("leader", series(21, 1.0, &[(14..=15, 0.0)], &gap)),
                // One-step spike at 4 (held by `for 30s`), four steps at 8..=11.
                (
                    "qget_ms",
                    series(21, 10.0, &[(4..=4, 500.0), (8..=11, 500.0)], &gap),
                ),
                ("apply_lag", series(21, 0.0, &[(6..=6, 50.0)], &gap)),
            ],
            (0..21)
                .map(|i| match i {
                    4 | 14 | 15 => Some(false),
                    17 | 18 => None,
                    _ => Some(true),
                })
                .collect(),
        );
        let (p, c) = compile(
            "check leader: leader\ncheck fast: qget_ms < 100 for 30s\nwarn lag: apply_lag < 10\n",
        );
        let r = &replay(&p, &c, &grid, &[m])[0];
        // Steps (15 s): 0-9 ready, 10-11 not (the hold-down ran out at 10),
        // 12-13 ready, 14-15 not (leader), 16 ready, 17-18 no data, 19-20 ready;
        // step 20 is `end` and weighs nothing.
        assert_eq!(
            (r.ready_ms, r.not_ready_ms, r.unknown_ms),
            (210_000, 60_000, 30_000)
        );
        assert_eq!((r.flips, r.recorded_flips), (4, 4));
        assert_eq!(
            ivs(&r.intervals),
            [
                iv(0, 150, Some(true), &[]),
                iv(150, 180, Some(false), &["fast"]),
                iv(180, 210, Some(true), &[]),
                iv(210, 240, Some(false), &["leader"]),
                iv(240, 255, Some(true), &[]),
                iv(255, 285, None, &[]),
                iv(285, 300, Some(true), &[]),
            ]
        );
        assert!(
            r.intervals[1].explanations[0].contains("qget_ms = 500"),
            "{:?}",
            r.intervals[1]
        );
        assert_eq!(
            ivs(&r.differs_from_recorded),
            [
                iv(60, 75, Some(true), &[]),
                iv(150, 180, Some(false), &["fast"])
            ]
        );
        let spans: Vec<(&str, CheckState, bool, i64, i64)> = r
            .checks
            .iter()
            .map(|s| {
                (
                    s.check.as_str(),
                    s.state,
                    s.held,
                    s.from_ms - S,
                    s.to_ms - S,
                )
            })
            .collect();
        // `fast` is held passing through the spike and the first 30 s of
        // the long one.
        assert_eq!(
            spans,
            [
                ("fast", CheckState::Pass, true, 60_000, 75_000),
                ("lag", CheckState::Fail, false, 90_000, 105_000),
                ("fast", CheckState::Pass, true, 120_000, 150_000),
                ("fast", CheckState::Fail, false, 150_000, 180_000),
                ("leader", CheckState::Fail, false, 210_000, 240_000),
            ]
        );
        assert!(
            r.checks[0]
                .explanation
                .contains("held passing by `for 30s`, 30s left"),
            "{:?}",
            r.checks[0]
        );
        assert_eq!(r.checks[1].kind, CheckKind::Warn);
        assert!(
            r.checks[1].explanation.contains("apply_lag = 50"),
            "{:?}",
            r.checks[1]
        );
        assert!(r.missing_signals.is_empty());
    }

    #[test]
    fn after_a_gap_the_member_starts_afresh_without_a_grace_period() {
        // `fast` passed before the gap; right after it the value is bad. A
        // continuing evaluator would hold it passing for 30 s; a restarted
        // exporter (fresh evaluator) fails it at once.
        let grid = Grid::new(S, S + 90_000, 15_000).unwrap();
        let gap = 2..=3;
        let m = member(
            7,
            &[("qget_ms", series(7, 10.0, &[(4..=6, 500.0)], &gap))],
            vec![None; 7],
        );
        let (p, c) = compile("check fast: qget_ms < 100 for 30s\n");
        let r = &replay(&p, &c, &grid, &[m])[0];
        assert_eq!(
            ivs(&r.intervals),
            [
                iv(0, 30, Some(true), &[]),
                iv(30, 60, None, &[]),
                iv(60, 90, Some(false), &["fast"])
            ]
        );
        assert_eq!(r.flips, 0, "changes across a gap are not flips");
        assert!(
            r.differs_from_recorded.is_empty(),
            "no recorded verdict, no difference"
        );
    }

    #[test]
    fn a_recovery_hold_holds_after_a_failure_and_after_a_restart_but_not_at_the_window_start() {
        // Steps of 15 s. The lag is bad at 2..=3, the exporter is gone at
        // 7..=8 (a restart), data everywhere else.
        let grid = Grid::new(S, S + 210_000, 15_000).unwrap();
        let gap = 7..=8;
        let m = member(
            15,
            &[("apply_lag", series(15, 10.0, &[(2..=3, 9000.0)], &gap))],
            vec![None; 15],
        );
        let (p, c) = compile(
            "check lag: apply_lag < 5000 recover 30s
",
        );
        let r = &replay(&p, &c, &grid, &[m])[0];
        // Ready from the window's start (the member was running before it);
        // failing at 30-60 s, recovering 60-90 s (true for 0 s, then 15 s of
        // 30 s), ready at 90 s; after the restart at 135 s recovering again
        // until 165 s.
        assert_eq!(
            ivs(&r.intervals),
            [
                iv(0, 30, Some(true), &[]),
                iv(30, 90, Some(false), &["lag"]),
                iv(90, 105, Some(true), &[]),
                iv(105, 135, None, &[]),
                iv(135, 165, Some(false), &["lag"]),
                iv(165, 210, Some(true), &[]),
            ]
        );
        let spans: Vec<(CheckState, bool, i64, i64, &str)> = r
            .checks
            .iter()
            .map(|s| {
                (
                    s.state,
                    s.recovering,
                    (s.from_ms - S) / 1000,
                    (s.to_ms - S) / 1000,
                    s.explanation.as_str(),
                )
            })
            .collect();
        assert_eq!(
            spans,
            [
                (
                    CheckState::Fail,
                    false,
                    30,
                    60,
                    "apply_lag < 5000 is false (apply_lag = 9000) (then held failing by `recover 30s`)"
                ),
                (
                    CheckState::Fail,
                    true,
                    60,
                    90,
                    "recovering: true for 0ms of 30s"
                ),
                (
                    CheckState::Fail,
                    true,
                    135,
                    165,
                    "recovering: true for 0ms of 30s"
                ),
            ]
        );
    }

    #[test]
    fn a_signal_recorded_unknown_or_without_series_is_unknown_and_named() {
        let grid = Grid::new(S, S + 30_000, 15_000).unwrap();
        let mut m = member(3, &[("leader", vec![Some(1.0); 3])], vec![Some(true); 3]);
        // Known 0 wins over a value (the exporter said it did not know).
        m.signals.get_mut("leader").unwrap().known[1] = Some(false);
        let (p, c) = compile("check leader: leader\nwarn owner: owner_ok\n");
        let r = &replay(&p, &c, &grid, &[m])[0];
        assert_eq!(r.missing_signals, ["owner_ok"]);
        assert_eq!(missing_everywhere(std::slice::from_ref(r)), ["owner_ok"]);
        assert_eq!(
            ivs(&r.intervals),
            [
                iv(0, 15, Some(true), &[]),
                iv(15, 30, Some(false), &["leader"]),
                iv(30, 30, Some(true), &[])
            ]
        );
        assert!(
            r.intervals[1].explanations[0].contains("etcd_readiness_signal_known 0"),
            "{:?}",
            r.intervals[1]
        );
        let owner = r.checks.iter().find(|s| s.check == "owner").unwrap();
        assert_eq!(
            (owner.state, owner.from_ms, owner.to_ms),
            (CheckState::Unknown, S, S + 30_000)
        );
        assert!(
            owner.explanation.contains("no series"),
            "{}",
            owner.explanation
        );
    }

    #[test]
    fn grids() {
        let g = Grid::new(S, S + 86_400_000, 15_000).unwrap();
        assert_eq!(g.steps, 5761);
        assert_eq!(g.index_of(S + 15_000), Some(1));
        assert_eq!(g.index_of(S + 15_001), None);
        assert_eq!(g.index_of(S - 15_000), None);
        assert_eq!(g.index_of(S + 86_415_000), None);
        assert_eq!(g.until(5760), S + 86_400_000);
        assert_eq!(Grid::new(S, S, 1000), Err(GridError::Order));
        assert!(matches!(
            Grid::new(0, 253_402_300_799_000, 1),
            Err(GridError::TooMany { .. })
        ));
    }
}
