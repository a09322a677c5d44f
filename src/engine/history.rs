//! The transition history behind the status page's timeline and `/history`:
//! a ring buffer of readiness and check transitions, bounded in size whatever
//! the flapping rate, plus the signal readings of the latest evaluation.
//!
//! Only the engine writes, from its evaluation (under the engine's own lock,
//! once per evaluation). Readers never take a lock: after an evaluation that
//! changed something the engine publishes an immutable [`HistorySnapshot`]
//! with arc-swap, exactly as it publishes the verdict, and the readings it
//! evaluated as a [`PublishedReadings`]. So the page and `/history` render
//! from what the engine published and never touch the signal store.
//!
//! The bound: at most [`CAPACITY`] transitions are kept; a new one beyond
//! that drops the oldest. Nothing is lost silently: the snapshot counts the
//! dropped transitions, says up to when history is incomplete
//! (`dropped_until`), and keeps every lane's state as of that instant
//! (`base`), so a lane is drawn as "truncated" only before that instant and
//! from its true state after it. Lanes of checks that a reload removed end
//! with a `removed` transition and disappear once it is dropped, so the
//! per-lane table is bounded by the checks in force plus the lanes named in
//! the buffer.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use serde::Serialize;

use etcd_readiness_policy::signals::Reading;
use etcd_readiness_policy::sync::TolerantLock;
use etcd_readiness_policy::verdict::{CheckReport, CheckState, Verdict};

/// Most transitions kept. At about 40 bytes each this is at most ~160 KiB;
/// a policy of 128 checks all flapping at every 250 ms evaluation fills it in
/// 8 s, and then the page says the history is truncated.
pub const CAPACITY: usize = 4096;

/// A timeline lane: readiness itself, or one check by name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    Readiness,
    Check(Arc<str>),
}

impl Lane {
    /// The lane's name as `/history` and the page show it. A check may be
    /// named `readiness` too: it is a different lane (its `kind` differs).
    pub fn name(&self) -> &str {
        match self {
            Lane::Readiness => "readiness",
            Lane::Check(n) => n,
        }
    }
}

/// A lane's state in a span of the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaneState {
    /// Readiness: the member is ready.
    Ready,
    /// Readiness: not ready.
    NotReady,
    /// Readiness: the first sample round has not finished.
    Starting,
    /// A check passes.
    Pass,
    /// A check's expression is not true, but its hold-down keeps it passing.
    Held,
    /// A check's expression is true, but its recovery hold keeps it failing.
    Recovering,
    Fail,
    Unknown,
    /// A reload removed the check.
    Removed,
}

impl LaneState {
    pub fn as_str(self) -> &'static str {
        match self {
            LaneState::Ready => "ready",
            LaneState::NotReady => "not ready",
            LaneState::Starting => "starting",
            LaneState::Pass => "pass",
            LaneState::Held => "held",
            LaneState::Recovering => "recovering",
            LaneState::Fail => "fail",
            LaneState::Unknown => "unknown",
            LaneState::Removed => "removed",
        }
    }

    /// The lane state of a check's report.
    pub fn of_report(c: &CheckReport) -> LaneState {
        match c.state {
            CheckState::Pass if c.held => LaneState::Held,
            CheckState::Pass => LaneState::Pass,
            CheckState::Fail if c.recovering => LaneState::Recovering,
            CheckState::Fail => LaneState::Fail,
            CheckState::Unknown => LaneState::Unknown,
        }
    }

    fn of_verdict(v: &Verdict) -> LaneState {
        if v.ready {
            LaneState::Ready
        } else if v.reason.is_some() && v.checks.is_empty() {
            LaneState::Starting
        } else {
            LaneState::NotReady
        }
    }
}

/// One lane entering a state.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub at: SystemTime,
    pub lane: Lane,
    pub to: LaneState,
}

/// What the engine publishes after an evaluation that changed something.
#[derive(Clone, Debug)]
pub struct HistorySnapshot {
    /// When recording started (the engine's creation).
    pub started: SystemTime,
    /// Kept transitions, oldest first; at most [`CAPACITY`].
    pub transitions: Vec<Transition>,
    /// Transitions dropped to keep the bound, since start.
    pub dropped: u64,
    /// The time of the newest dropped transition: before it, history is
    /// incomplete.
    pub dropped_until: Option<SystemTime>,
    /// Every lane's state as of `dropped_until` (lanes that had a transition
    /// dropped and are still named in the buffer or in force).
    pub base: Vec<(Lane, LaneState)>,
    /// Every lane in force now, in policy order (readiness first), with its
    /// state and since when.
    pub current: Vec<(Lane, LaneState, SystemTime)>,
}

impl HistorySnapshot {
    fn empty(started: SystemTime) -> Self {
        HistorySnapshot {
            started,
            transitions: Vec::new(),
            dropped: 0,
            dropped_until: None,
            base: Vec::new(),
            current: Vec::new(),
        }
    }

    /// The readiness lane's current state and since when.
    pub fn readiness_since(&self) -> Option<SystemTime> {
        self.current
            .iter()
            .find(|(l, _, _)| *l == Lane::Readiness)
            .map(|(_, _, at)| *at)
    }
}

/// The signal readings the engine evaluated last, with when.
#[derive(Clone, Debug)]
pub struct PublishedReadings {
    pub at: Instant,
    pub wall: SystemTime,
    /// One per catalogue signal, by index.
    pub readings: Vec<Reading>,
}

struct Ring {
    buf: VecDeque<Transition>,
    dropped: u64,
    dropped_until: Option<SystemTime>,
    base: Vec<(Lane, LaneState)>,
    current: Vec<(Lane, LaneState, SystemTime)>,
    capacity: usize,
}

/// The engine's history recorder. See the module documentation.
pub struct History {
    started: SystemTime,
    ring: Mutex<Ring>,
    published: ArcSwap<HistorySnapshot>,
    readings: ArcSwap<PublishedReadings>,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History").finish_non_exhaustive()
    }
}

impl History {
    pub fn new(now: Instant, wall: SystemTime) -> Self {
        Self::with_capacity(CAPACITY, now, wall)
    }

    /// A recorder keeping at most `capacity` transitions (tests use small ones).
    pub fn with_capacity(capacity: usize, now: Instant, wall: SystemTime) -> Self {
        History {
            started: wall,
            ring: Mutex::new(Ring {
                buf: VecDeque::with_capacity(capacity.min(CAPACITY)),
                dropped: 0,
                dropped_until: None,
                base: Vec::new(),
                current: Vec::new(),
                capacity: capacity.max(1),
            }),
            published: ArcSwap::from_pointee(HistorySnapshot::empty(wall)),
            readings: ArcSwap::from_pointee(PublishedReadings {
                at: now,
                wall,
                readings: Vec::new(),
            }),
        }
    }

    /// The latest published history.
    pub fn snapshot(&self) -> Arc<HistorySnapshot> {
        self.published.load_full()
    }

    /// The readings of the latest evaluation.
    pub fn readings(&self) -> Arc<PublishedReadings> {
        self.readings.load_full()
    }

    /// Publish the readings of the evaluation at `now` (`wall`).
    fn publish_readings(&self, readings: &[Reading], now: Instant, wall: SystemTime) {
        self.readings.store(Arc::new(PublishedReadings {
            at: now,
            wall,
            readings: readings.to_vec(),
        }));
    }

    /// Record what one evaluation published: the transitions it made and
    /// the readings it evaluated. Called by the engine only.
    pub fn observe(&self, verdict: &Verdict, readings: &[Reading], now: Instant, wall: SystemTime) {
        self.publish_readings(readings, now, wall);
        let mut ring = self.ring.locked();
        // The same lanes in the same states: no transition, nothing to
        // publish (what the walk below finds, without building it).
        if ring.unchanged_by(verdict) {
            return;
        }
        let mut lanes: Vec<(Lane, LaneState)> = Vec::with_capacity(verdict.checks.len() + 1);
        lanes.push((Lane::Readiness, LaneState::of_verdict(verdict)));
        let starting = verdict.reason.is_some() && verdict.checks.is_empty();
        for (i, c) in verdict.checks.iter().enumerate() {
            let state = LaneState::of_report(c);
            // Reuse the Arc of a known lane: the buffer shares one name.
            let is_it = |l: &Lane| matches!(l, Lane::Check(n) if **n == *c.name);
            let lane = at_or_find(&ring.current, i + 1, is_it)
                .map(|(l, _, _)| l.clone())
                .unwrap_or_else(|| Lane::Check(Arc::from(c.name.as_str())));
            lanes.push((lane, state));
        }
        let mut changed = false;
        let mut next: Vec<(Lane, LaneState, SystemTime)> = Vec::with_capacity(lanes.len());
        for (i, (lane, state)) in lanes.into_iter().enumerate() {
            let prev = at_or_find(&ring.current, i, |l| *l == lane);
            let since = match prev {
                Some((_, s, since)) if *s == state => *since,
                _ => {
                    changed = true;
                    ring.push(Transition {
                        at: wall,
                        lane: lane.clone(),
                        to: state,
                    });
                    wall
                }
            };
            next.push((lane, state, since));
        }
        // Checks a reload removed (not while starting: there are no checks
        // yet). Between reloads the lanes are the same, in the same order.
        let same_lanes = ring.current.len() == next.len()
            && ring.current.iter().zip(&next).all(|(a, b)| a.0 == b.0);
        if same_lanes {
            // Nothing removed, nothing to keep aside.
        } else if !starting {
            let gone: Vec<Lane> = ring
                .current
                .iter()
                .filter(|(l, _, _)| !next.iter().any(|(n, _, _)| n == l))
                .map(|(l, _, _)| l.clone())
                .collect();
            for lane in gone {
                changed = true;
                ring.push(Transition {
                    at: wall,
                    lane,
                    to: LaneState::Removed,
                });
            }
        } else {
            for (l, s, at) in &ring.current {
                if *l != Lane::Readiness && !next.iter().any(|(n, _, _)| n == l) {
                    next.push((l.clone(), *s, *at));
                }
            }
        }
        ring.current = next;
        if changed {
            let snap = HistorySnapshot {
                started: self.started,
                transitions: ring.buf.iter().cloned().collect(),
                dropped: ring.dropped,
                dropped_until: ring.dropped_until,
                base: ring.base.clone(),
                current: ring.current.clone(),
            };
            self.published.store(Arc::new(snap));
        }
    }
}

/// The entry of `lanes` at `i` if `is_it` says it is the one, else the
/// first that is: the lanes of consecutive evaluations are in the same
/// order, so this is one comparison per check, not a search through all of
/// them (which made each evaluation quadratic in the number of checks).
fn at_or_find<T>(
    lanes: &[(Lane, LaneState, T)],
    i: usize,
    is_it: impl Fn(&Lane) -> bool,
) -> Option<&(Lane, LaneState, T)> {
    match lanes.get(i) {
        Some(e) if is_it(&e.0) => Some(e),
        _ => lanes.iter().find(|e| is_it(&e.0)),
    }
}

impl Ring {
    /// Whether `verdict` has exactly the lanes in force (readiness, then
    /// its checks by name, in order, none kept aside) each in the state it
    /// is in: then observing it changes nothing.
    fn unchanged_by(&self, verdict: &Verdict) -> bool {
        let Some(((first, state, _), checks)) = self.current.split_first() else {
            return false;
        };
        *first == Lane::Readiness
            && *state == LaneState::of_verdict(verdict)
            && checks.len() == verdict.checks.len()
            && checks.iter().zip(&verdict.checks).all(|((l, s, _), c)| {
                matches!(l, Lane::Check(n) if **n == *c.name) && *s == LaneState::of_report(c)
            })
    }

    fn push(&mut self, t: Transition) {
        if self.buf.len() >= self.capacity
            && let Some(old) = self.buf.pop_front()
        {
            self.dropped += 1;
            self.dropped_until = Some(old.at);
            match self.base.iter_mut().find(|(l, _)| *l == old.lane) {
                Some(b) => b.1 = old.to,
                None => self.base.push((old.lane, old.to)),
            }
            // Forget lanes that are gone for good: removed, and named
            // neither in the buffer nor in force.
            let buf = &self.buf;
            let current = &self.current;
            self.base.retain(|(l, s)| {
                *s != LaneState::Removed
                    || buf.iter().any(|t| t.lane == *l)
                    || current.iter().any(|(c, _, _)| c == l)
            });
        }
        self.buf.push_back(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_readiness_policy::verdict::{CheckKind, CheckReport};
    use std::time::Duration;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn check(name: &str, state: CheckState) -> CheckReport {
        CheckReport {
            since: at(0),
            ..CheckReport::new(name, CheckKind::Check, state, "leader")
        }
    }

    fn verdict(checks: Vec<CheckReport>) -> Verdict {
        Verdict {
            ready: Verdict::ready_from(&checks),
            reason: None,
            evaluated_at: at(0),
            checks,
        }
    }

    #[test]
    fn records_only_changes_and_keeps_since() {
        let h = History::new(Instant::now(), at(0));
        let now = Instant::now();
        h.observe(&Verdict::starting(at(0)), &[], now, at(0));
        h.observe(
            &verdict(vec![check("a", CheckState::Pass)]),
            &[],
            now,
            at(1),
        );
        h.observe(
            &verdict(vec![check("a", CheckState::Pass)]),
            &[],
            now,
            at(2),
        );
        h.observe(
            &verdict(vec![check("a", CheckState::Fail)]),
            &[],
            now,
            at(3),
        );
        let s = h.snapshot();
        let seen: Vec<(&str, LaneState, SystemTime)> = s
            .transitions
            .iter()
            .map(|t| (t.lane.name(), t.to, t.at))
            .collect();
        assert_eq!(
            seen,
            [
                ("readiness", LaneState::Starting, at(0)),
                ("readiness", LaneState::Ready, at(1)),
                ("a", LaneState::Pass, at(1)),
                ("readiness", LaneState::NotReady, at(3)),
                ("a", LaneState::Fail, at(3)),
            ]
        );
        assert_eq!(s.readiness_since(), Some(at(3)));
        assert_eq!(s.dropped, 0);
    }

    #[test]
    fn flapping_stays_bounded_and_says_what_was_dropped() {
        let h = History::with_capacity(8, Instant::now(), at(0));
        let now = Instant::now();
        for i in 0..1000u64 {
            let st = if i % 2 == 0 {
                CheckState::Pass
            } else {
                CheckState::Fail
            };
            h.observe(&verdict(vec![check("a", st)]), &[], now, at(i));
        }
        let s = h.snapshot();
        assert_eq!(s.transitions.len(), 8);
        // Two lanes change at every evaluation: 2000 transitions in all.
        assert_eq!(s.dropped, 2000 - 8);
        // The newest dropped was at evaluation 995; the base says the state then.
        assert_eq!(s.dropped_until, Some(at(995)));
        assert!(s.base.contains(&(Lane::Check("a".into()), LaneState::Fail)));
        assert!(s.base.contains(&(Lane::Readiness, LaneState::NotReady)));
        assert_eq!(s.transitions.last().unwrap().at, at(999));
    }

    #[test]
    fn a_removed_check_ends_its_lane_and_is_forgotten_once_dropped() {
        let h = History::with_capacity(4, Instant::now(), at(0));
        let now = Instant::now();
        h.observe(
            &verdict(vec![check("old", CheckState::Pass)]),
            &[],
            now,
            at(1),
        );
        h.observe(
            &verdict(vec![check("new", CheckState::Pass)]),
            &[],
            now,
            at(2),
        );
        let s = h.snapshot();
        assert_eq!(
            s.transitions.last().map(|t| (t.lane.name(), t.to)),
            Some(("old", LaneState::Removed))
        );
        let names: Vec<&str> = s.current.iter().map(|(l, _, _)| l.name()).collect();
        assert_eq!(names, ["readiness", "new"]);
        for i in 3..20 {
            let st = if i % 2 == 0 {
                CheckState::Pass
            } else {
                CheckState::Fail
            };
            h.observe(&verdict(vec![check("new", st)]), &[], now, at(i));
        }
        let s = h.snapshot();
        assert!(
            s.base.iter().all(|(l, _)| l.name() != "old"),
            "{:?}",
            s.base
        );
    }
}
