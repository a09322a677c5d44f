//! The pure part of `replay`, without IO or clocks: from each member's
//! history on a grid of steps (signal values and knownness, the recorded
//! verdict) it runs the policy crate's one [`Simulation`] — the samples
//! recorded into a signal store and read back as `serve` reads them, the
//! same stateful evaluator as `serve` over them in replay time (hold-downs
//! and `warn` included) — and builds what the command reports: seconds
//! ready, not ready and unknown, flips, verdict intervals with the failing
//! checks and their explanations, each check's not-passing spans, and the
//! intervals where the candidate differs from the recorded verdict. Each
//! stretch carries what was noted at its start ([`Run`]).
//!
//! Replay time: step `i` is evaluated at `origin + i × step` on a virtual
//! `Instant` clock and at the step's own wall time, so since-when and
//! hold-downs run on the history's time, not on the machine's. A member with
//! no sample at all at a step (the exporter was not scraped) has no verdict
//! there (unknown); when its data comes back it starts with a fresh
//! evaluator, as a restarted exporter does — recovery holds (`recover`)
//! included. A member with data from the window's first step was running
//! before it: its evaluator starts resumed ([`Start::Resumed`]), so the
//! window's start is not taken for a restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use etcd_readiness_policy::policy::{Evaluator, Policy};
use etcd_readiness_policy::signals::{Catalogue, SignalId, SignalType, Value};
use etcd_readiness_policy::simulation::{Clock, OutOfRange, Sample, Simulation, Start, Step};
use etcd_readiness_policy::verdict::{CheckKind, CheckState};

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
    /// `etcd_readiness_signal_known` at the step (non-zero: known); a fleet
    /// read asks only for its 0s ([`super::fleet::unknown_query`]), as a 1
    /// says nothing the value does not.
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
#[derive(Clone, Copy, Debug, PartialEq)]
struct Phase {
    state: CheckState,
    held: bool,
    recovering: bool,
}

impl Phase {
    /// Whether the step belongs to one of the check's reported spans.
    fn reported(&self) -> bool {
        self.state != CheckState::Pass || self.held
    }
}

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

/// Why a signal is unknown at a step: the reasons a replayed reading carries.
struct Reasons {
    no_sample: Arc<str>,
    recorded_unknown: Arc<str>,
    no_series: Arc<str>,
    not_finite: Arc<str>,
}

impl Reasons {
    fn new() -> Self {
        Reasons {
            no_sample: Arc::from("Prometheus holds no sample of it at this step"),
            recorded_unknown: Arc::from(
                "it was unknown to the exporter (etcd_readiness_signal_known 0)",
            ),
            no_series: Arc::from("Prometheus holds no series of it for this member"),
            not_finite: Arc::from("the recorded value is not a finite number"),
        }
    }
}

/// One signal the policy reads, and its history for this member if
/// Prometheus holds one.
struct Input<'m> {
    id: SignalId,
    ty: SignalType,
    history: Option<&'m SignalHistory>,
}

impl Input<'_> {
    /// What the exporter had recorded at step `i`, as the sample a source
    /// would record (the recorded knownness wins over a value).
    fn sample<'r>(&self, i: usize, why: &'r Reasons) -> Sample<'r> {
        let Some(h) = self.history else {
            return Sample::Failed(&why.no_series);
        };
        match (h.known[i], h.value[i]) {
            (Some(false), _) => Sample::Failed(&why.recorded_unknown),
            (_, None) => Sample::Failed(&why.no_sample),
            (_, Some(v)) if !v.is_finite() => Sample::Failed(&why.not_finite),
            (_, Some(v)) => Sample::Value(match self.ty {
                SignalType::Bool => Value::Bool(v != 0.0),
                SignalType::Number | SignalType::Duration => Value::Num(v),
            }),
        }
    }
}

/// A stretch of steps with one `key`, and what was noted at its first step.
struct Run<K, D> {
    from_ms: i64,
    to_ms: i64,
    key: K,
    detail: D,
}

/// Builds the stretches of one key over the steps, each carrying its detail.
struct Runs<K: PartialEq, D> {
    done: Vec<Run<K, D>>,
    open: Option<(i64, K, D)>,
}

impl<K: PartialEq, D> Runs<K, D> {
    fn new() -> Self {
        Runs {
            done: Vec::new(),
            open: None,
        }
    }

    /// `key` holds from `t`; where that starts a stretch, `detail` says
    /// what the stretch carries (only then is it computed).
    fn push(&mut self, t: i64, key: K, detail: impl FnOnce() -> D) {
        if matches!(&self.open, Some((_, cur, _)) if *cur == key) {
            return;
        }
        self.close(t);
        self.open = Some((t, key, detail()));
    }

    /// The open stretch, if any, ends at `to_ms`.
    fn close(&mut self, to_ms: i64) {
        if let Some((from_ms, key, detail)) = self.open.take() {
            self.done.push(Run {
                from_ms,
                to_ms,
                key,
                detail,
            });
        }
    }

    fn finish(mut self, end: i64) -> Vec<Run<K, D>> {
        self.close(end);
        self.done
    }
}

/// The `check`s (not `warn`s) not passing, in policy order.
fn failing(ev: &Evaluator) -> Vec<String> {
    ev.states()
        .filter(|(_, kind, state)| *kind == CheckKind::Check && *state != CheckState::Pass)
        .map(|(name, _, _)| name.to_string())
        .collect()
}

/// Replay `policy` over every member's history on `grid`; `origin` is any
/// instant, the virtual clock's start.
pub fn replay(
    policy: &Arc<Policy>,
    catalogue: &Catalogue,
    grid: &Grid,
    members: &[MemberHistory],
    origin: Instant,
) -> Result<Vec<MemberReport>, OutOfRange> {
    replay_stepping(policy, catalogue, grid, members, origin, false)
}

/// [`replay`], or with a simulation that evaluates every step (the
/// reference the tests hold `replay` to) where `every_step`.
fn replay_stepping(
    policy: &Arc<Policy>,
    catalogue: &Catalogue,
    grid: &Grid,
    members: &[MemberHistory],
    origin: Instant,
    every_step: bool,
) -> Result<Vec<MemberReport>, OutOfRange> {
    let clock = Clock {
        origin,
        // Grid times are never negative (`time::parse_time`).
        wall: SystemTime::UNIX_EPOCH + Duration::from_millis(grid.start_ms.max(0) as u64),
        step: Duration::from_millis(grid.step_ms as u64),
    };
    let why = Reasons::new();
    members
        .iter()
        .map(|m| {
            let sim = Simulation::new(policy.clone(), catalogue, clock, Start::Resumed);
            let sim = if every_step {
                sim.evaluating_every_step()
            } else {
                sim
            };
            replay_member(policy, catalogue, grid, m, sim, &why)
        })
        .collect()
}

fn replay_member(
    policy: &Arc<Policy>,
    catalogue: &Catalogue,
    grid: &Grid,
    member: &MemberHistory,
    mut sim: Simulation,
    why: &Reasons,
) -> Result<MemberReport, OutOfRange> {
    let inputs: Vec<Input> = policy
        .signals_used()
        .into_iter()
        .map(|id| Input {
            id,
            ty: catalogue.get(id).ty,
            history: member.signals.get(policy.signal_name(id)),
        })
        .collect();
    let mut tally = Tally::new(policy.checks().len());
    for i in 0..grid.steps {
        let step = if member.present(i) {
            let samples = inputs.iter().map(|s| (s.id, s.sample(i, why)));
            Some(sim.step(i as u64, samples)?)
        } else {
            sim.absent();
            None
        };
        tally.observe(grid, i, member.recorded[i], step.as_ref());
    }
    let missing_signals = inputs
        .iter()
        .filter(|s| s.history.is_none())
        .map(|s| policy.signal_name(s.id).to_string())
        .collect();
    Ok(tally.finish(grid.end_ms, policy, member.labels.clone(), missing_signals))
}

/// Everything `replay` reports of one member, gathered step by step.
struct Tally {
    ready_ms: i64,
    not_ready_ms: i64,
    unknown_ms: i64,
    flips: u64,
    recorded_flips: u64,
    previous: Option<(Option<bool>, Option<bool>)>,
    /// The candidate's verdict; a not-ready stretch carries the failing
    /// checks and their explanations.
    verdicts: Runs<Option<bool>, (Vec<String>, Vec<String>)>,
    recorded: Runs<Option<bool>, ()>,
    /// Whether both verdicts are known and differ; a stretch carries the
    /// candidate's verdict and its failing checks.
    differs: Runs<bool, (Option<bool>, Vec<String>)>,
    /// Per check, its phase; a reported stretch carries its explanation.
    checks: Vec<Runs<Option<Phase>, String>>,
    /// This step's phase of every check (reused).
    phases: Vec<Option<Phase>>,
}

impl Tally {
    fn new(n_checks: usize) -> Self {
        Tally {
            ready_ms: 0,
            not_ready_ms: 0,
            unknown_ms: 0,
            flips: 0,
            recorded_flips: 0,
            previous: None,
            verdicts: Runs::new(),
            recorded: Runs::new(),
            differs: Runs::new(),
            checks: (0..n_checks).map(|_| Runs::new()).collect(),
            phases: vec![None; n_checks],
        }
    }

    /// Step `i`: `recorded` is the recorded verdict, `step` the evaluated
    /// one (`None` where the member has no data). Explanations are rendered
    /// only where a stretch starts that needs them.
    fn observe(&mut self, grid: &Grid, i: usize, recorded: Option<bool>, step: Option<&Step>) {
        let t = grid.at(i);
        let verdict = step.map(Step::ready);
        // The failing checks, where the candidate is not ready.
        let failing_at = || match step {
            Some(s) if verdict == Some(false) => failing(s.evaluator()),
            _ => Vec::new(),
        };
        self.verdicts.push(t, verdict, || {
            let names = failing_at();
            let why = match step {
                Some(s) => names
                    .iter()
                    .map(|n| {
                        s.reports()
                            .iter()
                            .find(|c| &c.name == n)
                            .map_or_else(String::new, |c| c.explanation.clone())
                    })
                    .collect(),
                None => Vec::new(),
            };
            (names, why)
        });
        self.recorded.push(t, recorded, || ());
        let differs = matches!((verdict, recorded), (Some(a), Some(b)) if a != b);
        self.differs.push(t, differs, || (verdict, failing_at()));

        // A step stepped over leaves every check's phase as it was.
        if !step.is_some_and(Step::unchanged) {
            self.observe_phases(t, step);
        }

        let weight = grid.until(i) - t;
        match verdict {
            Some(true) => self.ready_ms += weight,
            Some(false) => self.not_ready_ms += weight,
            None => self.unknown_ms += weight,
        }
        if let Some((prev_verdict, prev_recorded)) = self.previous {
            self.flips +=
                u64::from(matches!((prev_verdict, verdict), (Some(a), Some(b)) if a != b));
            self.recorded_flips +=
                u64::from(matches!((prev_recorded, recorded), (Some(a), Some(b)) if a != b));
        }
        self.previous = Some((verdict, recorded));
    }

    /// Every check's phase at the step at `t`, and the stretches it starts.
    fn observe_phases(&mut self, t: i64, step: Option<&Step>) {
        match step {
            Some(s) => {
                let ev = s.evaluator();
                let phases = ev.states().zip(ev.held()).zip(ev.recovering());
                for (p, (((_, _, state), held), recovering)) in self.phases.iter_mut().zip(phases) {
                    *p = Some(Phase {
                        state,
                        held,
                        recovering,
                    });
                }
            }
            None => self.phases.iter_mut().for_each(|p| *p = None),
        }
        for (j, (runs, phase)) in self.checks.iter_mut().zip(&self.phases).enumerate() {
            runs.push(t, *phase, || match (step, phase) {
                (Some(s), Some(p)) if p.reported() => s.reports()[j].explanation.clone(),
                _ => String::new(),
            });
        }
    }

    fn finish(
        self,
        end: i64,
        policy: &Policy,
        labels: BTreeMap<String, String>,
        missing_signals: Vec<String>,
    ) -> MemberReport {
        let interval = |from_ms, to_ms, ready, failing, explanations| Interval {
            from_ms,
            to_ms,
            ready,
            failing,
            explanations,
        };
        let mut checks: Vec<CheckSpan> = self
            .checks
            .into_iter()
            .zip(policy.checks())
            .flat_map(|(runs, def)| {
                runs.finish(end).into_iter().filter_map(|r| {
                    let p = r.key.filter(Phase::reported)?;
                    Some(CheckSpan {
                        check: def.name.clone(),
                        kind: def.kind,
                        state: p.state,
                        held: p.held,
                        recovering: p.recovering,
                        from_ms: r.from_ms,
                        to_ms: r.to_ms,
                        explanation: r.detail,
                    })
                })
            })
            .collect();
        checks.sort_by_key(|s| s.from_ms);
        MemberReport {
            labels,
            ready_ms: self.ready_ms,
            not_ready_ms: self.not_ready_ms,
            unknown_ms: self.unknown_ms,
            flips: self.flips,
            recorded_flips: self.recorded_flips,
            intervals: (self.verdicts.finish(end).into_iter())
                .map(|r| interval(r.from_ms, r.to_ms, r.key, r.detail.0, r.detail.1))
                .collect(),
            recorded: (self.recorded.finish(end).into_iter())
                .map(|r| interval(r.from_ms, r.to_ms, r.key, Vec::new(), Vec::new()))
                .collect(),
            differs_from_recorded: (self.differs.finish(end).into_iter())
                .filter(|r| r.key)
                .map(|r| interval(r.from_ms, r.to_ms, r.detail.0, r.detail.1, Vec::new()))
                .collect(),
            checks,
            missing_signals,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_796_025_600_000;

    /// Replay's every output — seconds, flips, intervals with failing checks
    /// and explanations, check spans, differences — is the same whether the
    /// simulation steps over settled steps or evaluates every one, on
    /// random sticky histories (gaps, unknowns, NaN, recorded verdicts that
    /// change on their own) under policies with holds, warnings and `age()`.
    #[test]
    fn stepping_over_settled_steps_changes_no_report() {
        let policies = [
            "check leader: leader\ncheck fast: qget_ms < 300",
            "check leader: leader for 30s\ncheck fast: qget_ms < 300 recover 45s\nwarn lag: apply_lag < 5",
            "check fresh: age(qget_ms) < 40s && leader\ncheck lag: apply_lag * 2 <= 10",
        ];
        let values = [
            Some(1.0),
            Some(0.0),
            Some(12.0),
            Some(299.0),
            Some(300.0),
            Some(f64::NAN),
            None,
        ];
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let steps = 80;
        let grid = Grid::new(S, S + (steps as i64 - 1) * 15_000, 15_000).unwrap();
        let origin = Instant::now();
        for round in 0..300 {
            let (policy, c) = compile(policies[round % policies.len()]);
            let mut signals = Vec::new();
            for name in ["leader", "qget_ms", "apply_lag"] {
                let mut v = values[next(values.len() as u64) as usize];
                let row: Vec<Option<f64>> = (0..steps)
                    .map(|_| {
                        if next(6) == 0 {
                            v = values[next(values.len() as u64) as usize];
                        }
                        v
                    })
                    .collect();
                signals.push((name, row));
            }
            let mut ready = Some(true);
            let recorded = (0..steps)
                .map(|_| {
                    if next(10) == 0 {
                        ready = [Some(true), Some(false), None][next(3) as usize];
                    }
                    ready
                })
                .collect();
            let mut m = member(steps, &signals, recorded);
            for h in m.signals.values_mut() {
                for (k, v) in h.known.iter_mut().zip(&h.value) {
                    if v.is_some() && next(12) == 0 {
                        *k = Some(false);
                    }
                }
            }
            let run = |every_step| {
                let members = std::slice::from_ref(&m);
                replay_stepping(&policy, &c, &grid, members, origin, every_step).unwrap()
            };
            assert_eq!(run(false), run(true), "round {round}");
        }
    }

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

    /// One member over 21 steps of 15 s: `leader` false at 14..=15, `qget_ms`
    /// spiking at 4 and at 8..=11 under `for 30s`, `apply_lag` (a warn) bad
    /// at 6, no data at 17..=18; the recorded verdict differs at 4.
    fn hold_down_warn_and_gap() -> MemberReport {
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
        replay(&p, &c, &grid, &[m], Instant::now())
            .unwrap()
            .remove(0)
    }

    #[test]
    fn a_threshold_a_hold_down_and_a_gap_add_up_to_the_totals_and_flips() {
        let r = &hold_down_warn_and_gap();
        // Steps (15 s): 0-9 ready, 10-11 not (the hold-down ran out at 10),
        // 12-13 ready, 14-15 not (leader), 16 ready, 17-18 no data, 19-20 ready;
        // step 20 is `end` and weighs nothing.
        assert_eq!(
            (r.ready_ms, r.not_ready_ms, r.unknown_ms),
            (210_000, 60_000, 30_000)
        );
        assert_eq!((r.flips, r.recorded_flips), (4, 4));
    }

    #[test]
    fn the_verdict_intervals_carry_the_failing_checks_and_their_explanations() {
        let r = &hold_down_warn_and_gap();
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
    }

    #[test]
    fn differences_from_the_recorded_verdict_carry_the_failing_checks() {
        let r = &hold_down_warn_and_gap();
        assert_eq!(
            ivs(&r.differs_from_recorded),
            [
                iv(60, 75, Some(true), &[]),
                iv(150, 180, Some(false), &["fast"])
            ]
        );
    }

    #[test]
    fn check_spans_show_holds_warns_and_failures_in_time_order() {
        let r = &hold_down_warn_and_gap();
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
        let r = &replay(&p, &c, &grid, &[m], Instant::now()).unwrap()[0];
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
        let r = &replay(&p, &c, &grid, &[m], Instant::now()).unwrap()[0];
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
        let r = &replay(&p, &c, &grid, &[m], Instant::now()).unwrap()[0];
        assert_eq!(r.missing_signals, ["owner_ok"]);
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
