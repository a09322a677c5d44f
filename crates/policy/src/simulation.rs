//! The one virtual-clock simulation behind `test` and `replay`: series in →
//! readings per step → the [`Evaluator`].
//!
//! Each step's samples are recorded into a real [`SignalStore`] at the
//! step's virtual instant and read back ([`SignalStore::read_some_into`]) as
//! `serve`'s sources and engine do, so how a sample becomes a reading — a
//! failed sample keeping the age of the last good one, a good one clearing
//! the failure — is `serve`'s and not a copy of it. The evaluator is the one
//! `serve` runs; step `i` is evaluated at `origin + i × step` and reported
//! at `wall + i × step`.
//!
//! A step may have no data at all (a history in which the exporter was not
//! running): there is no verdict at it, and the next step with data starts
//! a fresh evaluator, as a restarted exporter does — recovery holds
//! included. The first evaluator starts as [`Start`] says.
//!
//! Pure: the caller passes both clocks' origins in.

use std::cell::OnceCell;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::policy::{Evaluator, Policy};
use crate::signals::{Catalogue, Reading, SignalId, SignalStore, Value};
use crate::verdict::CheckReport;

/// Where simulated time starts and how far apart the steps are.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// The virtual instant of step 0 (any instant: only differences count).
    pub origin: Instant,
    /// The wall time of step 0, shown in explanations and reports.
    pub wall: SystemTime,
    pub step: Duration,
}

/// How the evaluator that starts at step 0 begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// A freshly started exporter (`test`: each case starts one).
    Fresh,
    /// An exporter that was running before step 0 (`replay`: the window's
    /// start is not a restart, so no recovery hold starts there).
    Resumed,
}

/// What a source recorded for one signal at one step.
#[derive(Clone, Copy, Debug)]
pub enum Sample<'a> {
    Value(Value),
    /// The attempt failed, for this reason.
    Failed(&'a Arc<str>),
}

/// A step whose time does not exist on the virtual clocks (callers bound
/// the steps so that this does not happen; it is an error, not a panic).
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("simulated time out of range")]
pub struct OutOfRange;

/// The state of one simulated exporter: its store, its readings, its
/// evaluator.
pub struct Simulation {
    policy: Arc<Policy>,
    /// The signals the policy reads: the only ones read back at each step.
    used: Vec<SignalId>,
    store: SignalStore,
    readings: Vec<Reading>,
    evaluator: Option<Evaluator>,
    clock: Clock,
    start: Start,
}

impl Simulation {
    pub fn new(policy: Arc<Policy>, catalogue: &Catalogue, clock: Clock, start: Start) -> Self {
        Simulation {
            used: policy.signals_used(),
            policy,
            store: SignalStore::new(catalogue),
            readings: vec![Reading::NEVER; catalogue.len()],
            evaluator: None,
            clock,
            start,
        }
    }

    /// The instant and wall time of step `i`.
    pub fn times(&self, i: u64) -> Result<(Instant, SystemTime), OutOfRange> {
        let offset = u32::try_from(i)
            .ok()
            .and_then(|i| self.clock.step.checked_mul(i))
            .ok_or(OutOfRange)?;
        let now = self.clock.origin.checked_add(offset).ok_or(OutOfRange)?;
        let wall = self.clock.wall.checked_add(offset).ok_or(OutOfRange)?;
        Ok((now, wall))
    }

    /// Step `i` with data: record `samples` at its instant, read the
    /// signals the policy reads, evaluate. Signals without a sample keep
    /// what they had.
    pub fn step<'s>(
        &mut self,
        i: u64,
        samples: impl IntoIterator<Item = (SignalId, Sample<'s>)>,
    ) -> Result<Step<'_>, OutOfRange> {
        let (now, wall) = self.times(i)?;
        for (id, sample) in samples {
            let sample = match sample {
                Sample::Value(v) => Ok(v),
                Sample::Failed(why) => Err(why.clone()),
            };
            self.store.record_owned(id, sample, now);
        }
        self.store
            .read_some_into(&self.used, now, &mut self.readings);
        let (policy, start) = (&self.policy, self.start);
        let evaluator = self.evaluator.get_or_insert_with(|| match (i, start) {
            (0, Start::Resumed) => Evaluator::resumed(policy.clone(), now),
            _ => Evaluator::new(policy.clone(), now),
        });
        evaluator.evaluate(&self.readings, now);
        Ok(Step {
            now,
            wall,
            evaluator,
            readings: &self.readings,
            reports: OnceCell::new(),
        })
    }

    /// A step without data: no verdict, and the next step starts afresh.
    pub fn absent(&mut self) {
        self.evaluator = None;
    }
}

/// One evaluated step: the evaluator after it, and its reports, rendered
/// at most once and only when asked for (explanations cost more than the
/// evaluation).
pub struct Step<'a> {
    pub now: Instant,
    pub wall: SystemTime,
    evaluator: &'a Evaluator,
    readings: &'a [Reading],
    reports: OnceCell<Vec<CheckReport>>,
}

impl Step<'_> {
    pub fn evaluator(&self) -> &Evaluator {
        self.evaluator
    }

    pub fn ready(&self) -> bool {
        self.evaluator.ready()
    }

    /// Every check's report at this step, in policy order.
    pub fn reports(&self) -> &[CheckReport] {
        self.reports
            .get_or_init(|| self.evaluator.report(self.readings, self.now, self.wall))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::CheckState;

    fn sim(src: &str, start: Start) -> (Simulation, Catalogue) {
        let c = Catalogue::builtin();
        let p = Arc::new(Policy::compile("p", src, &c).unwrap());
        let clock = Clock {
            origin: Instant::now(),
            wall: SystemTime::UNIX_EPOCH,
            step: Duration::from_secs(1),
        };
        (Simulation::new(p, &c, clock, start), c)
    }

    #[test]
    fn a_failed_sample_keeps_the_age_of_the_last_good_one_as_the_store_does() {
        let (mut s, c) = sim("check fresh: age(leader) < 2s", Start::Fresh);
        let leader = c.lookup("leader").unwrap();
        let why: Arc<str> = Arc::from("gone");
        let good = [(leader, Sample::Value(Value::Bool(true)))];
        let bad = [(leader, Sample::Failed(&why))];
        assert!(s.step(0, good).unwrap().ready());
        assert!(s.step(1, bad).unwrap().ready(), "1 s old");
        let step = s.step(2, bad).unwrap();
        assert!(!step.ready(), "2 s old");
        assert_eq!(step.reports()[0].state, CheckState::Fail);
        assert!(s.step(3, good).unwrap().ready());
    }

    #[test]
    fn after_an_absent_step_a_fresh_evaluator_starts_and_a_resumed_one_only_at_step_0() {
        let src = "check r: leader recover 5s";
        let (mut s, c) = sim(src, Start::Resumed);
        let leader = c.lookup("leader").unwrap();
        let up = [(leader, Sample::Value(Value::Bool(true)))];
        assert!(s.step(0, up).unwrap().ready(), "resumed: no recovery hold");
        s.absent();
        assert!(!s.step(2, up).unwrap().ready(), "restarted: recovering");
        let (mut s, _) = sim(src, Start::Fresh);
        assert!(!s.step(0, up).unwrap().ready(), "fresh: recovering");
        let (mut s, _) = sim(src, Start::Resumed);
        assert!(!s.step(1, up).unwrap().ready(), "first data after step 0");
    }

    #[test]
    fn times_beyond_the_clock_are_errors() {
        let (mut s, _) = sim("check r: leader", Start::Fresh);
        assert_eq!(s.times(u64::from(u32::MAX) + 1).err(), Some(OutOfRange));
        assert!(s.step(u64::MAX, []).is_err());
        let (now, wall) = s.times(3).unwrap();
        assert_eq!(wall, SystemTime::UNIX_EPOCH + Duration::from_secs(3));
        assert_eq!(now - s.clock.origin, Duration::from_secs(3));
    }
}
