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
//! A step at which nothing can change is stepped over: when the evaluator
//! is [settled](Evaluator::settled) and every signal the policy reads was
//! sampled at this step and the one before with the same [`Class`] (the
//! policy sees the same values: [`crate::policy::settle`]), the evaluator
//! is not run and the store neither written nor read. Of a run of such
//! steps only the last is recorded, before the store is next read: each
//! signal's class, failed or not, is the same all along the run, so the
//! store ends as if every step had been. Such a [`Step`] says it is
//! [`unchanged`](Step::unchanged); its reports, when asked for, record its
//! samples and read the store as any step does.
//! [`Simulation::evaluating_every_step`] turns this off: the reference the
//! property test `stepping_over_settled_steps_changes_nothing` holds it to.
//!
//! Pure: the caller passes both clocks' origins in.

use std::cell::OnceCell;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::policy::settle::{Class, Sense};
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
    /// How the policy reads each signal; `None`: every step is evaluated.
    sense: Option<Sense>,
    /// By signal index: the class of its last sample and the step of it
    /// (kept for the signals the policy reads).
    last: Vec<(Option<Class>, u64)>,
    /// This step's samples.
    samples: Vec<(SignalId, Recorded)>,
    /// The samples of the last step stepped over and its instant, not yet
    /// recorded: only the last of a run of such steps needs to be (each
    /// signal's class, and so whether it failed, is the same all along), and
    /// only before the store is read again.
    held_back: (Vec<(SignalId, Recorded)>, Option<Instant>),
}

/// A sample as the store records it.
type Recorded = Result<Value, Arc<str>>;

impl Simulation {
    pub fn new(policy: Arc<Policy>, catalogue: &Catalogue, clock: Clock, start: Start) -> Self {
        Simulation {
            used: policy.signals_used(),
            sense: Some(policy.sense()),
            policy,
            store: SignalStore::new(catalogue),
            readings: vec![Reading::NEVER; catalogue.len()],
            evaluator: None,
            clock,
            start,
            last: vec![(None, u64::MAX); catalogue.len()],
            samples: Vec::new(),
            held_back: (Vec::new(), None),
        }
    }

    /// This simulation, evaluating at every step: nothing is stepped over.
    pub fn evaluating_every_step(mut self) -> Self {
        self.sense = None;
        self
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
    /// signals the policy reads, evaluate — or step over it (see the
    /// module's doc). Signals without a sample keep what they had.
    pub fn step<'s>(
        &mut self,
        i: u64,
        samples: impl IntoIterator<Item = (SignalId, Sample<'s>)>,
    ) -> Result<Step<'_>, OutOfRange> {
        let (now, wall) = self.times(i)?;
        // Whether every sample has the class the signal's sample had at the
        // step before (so there was one: a step with data).
        let mut same = self.sense.is_some();
        self.samples.clear();
        for (id, sample) in samples {
            let sample = match sample {
                Sample::Value(v) => Ok(v),
                Sample::Failed(why) => Err(why.clone()),
            };
            if let (Some(sense), Some(last)) = (&self.sense, self.last.get_mut(id.index()))
                && sense.reads(id)
            {
                let class = sense.class(id, sample.as_ref().ok().copied());
                same &= class.is_some() && *last == (class, i.wrapping_sub(1));
                *last = (class, i);
            }
            self.samples.push((id, sample));
        }
        let unchanged = same
            && (self.used.iter()).all(|id| self.last.get(id.index()).is_some_and(|l| l.1 == i))
            && self.evaluator.as_ref().is_some_and(Evaluator::settled);
        if unchanged {
            std::mem::swap(&mut self.samples, &mut self.held_back.0);
            self.held_back.1 = Some(now);
        } else {
            self.record_held_back();
            for (id, sample) in self.samples.drain(..) {
                self.store.record_owned(id, sample, now);
            }
            self.store
                .read_some_into(&self.used, now, &mut self.readings);
        }
        let (policy, start) = (&self.policy, self.start);
        let evaluator = self.evaluator.get_or_insert_with(|| match (i, start) {
            (0, Start::Resumed) => Evaluator::resumed(policy.clone(), now),
            _ => Evaluator::new(policy.clone(), now),
        });
        if !unchanged {
            evaluator.evaluate(&self.readings, now);
        }
        Ok(Step {
            now,
            wall,
            evaluator,
            readings: &self.readings,
            unchanged: unchanged.then_some(SteppedOver {
                store: &self.store,
                used: &self.used,
                samples: &self.held_back.0,
            }),
            fresh: OnceCell::new(),
            reports: OnceCell::new(),
        })
    }

    /// A step without data: no verdict, and the next step starts afresh.
    pub fn absent(&mut self) {
        self.record_held_back();
        self.evaluator = None;
    }

    fn record_held_back(&mut self) {
        if let Some(at) = self.held_back.1.take() {
            for (id, sample) in self.held_back.0.drain(..) {
                self.store.record_owned(id, sample, at);
            }
        }
    }
}

/// What a step stepped over needs to read its own readings when asked.
struct SteppedOver<'a> {
    store: &'a SignalStore,
    used: &'a [SignalId],
    /// Its samples, not yet recorded.
    samples: &'a [(SignalId, Recorded)],
}

/// One evaluated step: the evaluator after it, and its reports, rendered
/// at most once and only when asked for (explanations cost more than the
/// evaluation).
pub struct Step<'a> {
    pub now: Instant,
    pub wall: SystemTime,
    evaluator: &'a Evaluator,
    /// The readings of the last evaluated step.
    readings: &'a [Reading],
    /// Where the step was stepped over: how to read its readings.
    unchanged: Option<SteppedOver<'a>>,
    /// This step's readings, where it was stepped over and they are asked for.
    fresh: OnceCell<Vec<Reading>>,
    reports: OnceCell<Vec<CheckReport>>,
}

impl Step<'_> {
    pub fn evaluator(&self) -> &Evaluator {
        self.evaluator
    }

    pub fn ready(&self) -> bool {
        self.evaluator.ready()
    }

    /// Whether the step was stepped over: the evaluator, and so every
    /// check's state, hold and verdict, is as after the step before.
    pub fn unchanged(&self) -> bool {
        self.unchanged.is_some()
    }

    /// Every check's report at this step, in policy order.
    pub fn reports(&self) -> &[CheckReport] {
        self.reports.get_or_init(|| {
            let readings = match self.unchanged {
                None => self.readings,
                Some(SteppedOver {
                    store,
                    used,
                    samples,
                }) => self.fresh.get_or_init(|| {
                    // Recording them here and again before the store is
                    // next read records the same samples at the same instant.
                    for (id, sample) in samples {
                        match sample {
                            Ok(v) => store.record_ok(*id, *v, self.now),
                            Err(why) => store.record_err(*id, why.clone(), self.now),
                        }
                    }
                    let mut fresh = self.readings.to_vec();
                    for id in used {
                        if let Some(r) = fresh.get_mut(id.index()) {
                            *r = store.reading(*id, self.now);
                        }
                    }
                    fresh
                }),
            };
            self.evaluator.report(readings, self.now, self.wall)
        })
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

    /// What a history holds for one signal at one step.
    #[derive(Clone, Copy, Debug)]
    enum Held {
        Value(Value),
        Failed(usize),
        NotSampled,
    }

    const NUMBERS: [Held; 12] = [
        Held::Value(Value::Num(10.0)),
        Held::Value(Value::Num(250.0)),
        Held::Value(Value::Num(299.9)),
        Held::Value(Value::Num(300.0)),
        Held::Value(Value::Num(301.0)),
        Held::Value(Value::Num(5.0)),
        Held::Value(Value::Num(4.0)),
        Held::Value(Value::Num(-1.0)),
        Held::Value(Value::Num(f64::NAN)),
        Held::Failed(0),
        Held::Failed(1),
        Held::NotSampled,
    ];
    /// A bool signal's, with numbers of the wrong type (a NaN is recorded
    /// as a failure, a 1 as a good sample that reads as unknown).
    const BOOLS: [Held; 6] = [
        Held::Value(Value::Bool(true)),
        Held::Value(Value::Bool(false)),
        Held::Failed(0),
        Held::NotSampled,
        Held::Value(Value::Num(f64::NAN)),
        Held::Value(Value::Num(1.0)),
    ];

    /// Policies that read their signals every way the language can: bools,
    /// thresholds either side, arithmetic, `min`/`max`, `??`, lets,
    /// `known()`, `age()`, hold-downs, recovery holds, warnings.
    const POLICIES: [&str; 8] = [
        "check l: leader\ncheck q: qget_ms < 300",
        "check l: leader for 3s\ncheck q: qget_ms < 300 recover 4s",
        "check a: age(qget_ms) < 2s && age(leader) < 3s\nwarn w: apply_lag * 2 > 10",
        "let slow = qget_ms >= 300\ncheck s: !slow && known(apply_lag)\ncheck m: max(qget_ms, sget_ms) < 500",
        "check c: (qget_ms ?? 1000) < 300 || leader recover 2s",
        "qget_ms < 300 && leader && apply_lag != 5",
        "check n: -qget_ms > -300 && 5 < apply_lag for 2s\ncheck s: sget_ms < apply_lag",
        "let q = qget_ms\ncheck l: leader\ncheck q: q < 300",
    ];

    proptest::proptest! {
        /// A simulation that steps over settled steps gives, at every step,
        /// the verdict, states, holds and reports of one that evaluates
        /// every step.
        #[test]
        fn stepping_over_settled_steps_changes_nothing(
            policy in 0..POLICIES.len(),
            fresh: bool,
            steps in proptest::collection::vec(
                (0u8..20, proptest::collection::vec(0u8..255, 4), 0u8..4), 1..120),
        ) {
            let c = Catalogue::builtin();
            let p = Arc::new(Policy::compile("p", POLICIES[policy], &c).unwrap());
            let clock = Clock {
                origin: Instant::now(),
                wall: SystemTime::UNIX_EPOCH,
                step: Duration::from_secs(1),
            };
            let start = if fresh { Start::Fresh } else { Start::Resumed };
            let mut skipping = Simulation::new(p.clone(), &c, clock, start);
            let mut every = Simulation::new(p, &c, clock, start).evaluating_every_step();
            let ids = ["leader", "qget_ms", "sget_ms", "apply_lag"].map(|n| c.id(n));
            let why: [Arc<str>; 2] = [Arc::from("refused"), Arc::from("timed out")];
            let mut held = [Held::NotSampled; 4];
            let mut stepped_over = 0;
            for (i, (absent, picks, ask)) in steps.iter().enumerate() {
                for (k, pick) in picks.iter().enumerate() {
                    // Mostly what the step before held, as in a real history.
                    if *pick >= 200 {
                        let choices: &[Held] = if k == 0 { &BOOLS } else { &NUMBERS };
                        held[k] = choices[usize::from(*pick) % choices.len()];
                    }
                }
                if *absent == 0 {
                    skipping.absent();
                    every.absent();
                    continue;
                }
                let samples = || {
                    ids.iter().zip(held).filter_map(|(id, h)| match h {
                        Held::Value(v) => Some((*id, Sample::Value(v))),
                        Held::Failed(r) => Some((*id, Sample::Failed(&why[r]))),
                        Held::NotSampled => None,
                    })
                };
                let a = skipping.step(i as u64, samples()).unwrap();
                let b = every.step(i as u64, samples()).unwrap();
                stepped_over += usize::from(a.unchanged());
                proptest::prop_assert!(!b.unchanged());
                let (ea, eb) = (a.evaluator(), b.evaluator());
                proptest::prop_assert_eq!(a.ready(), b.ready(), "step {}", i);
                proptest::prop_assert!(ea.states().eq(eb.states()), "step {}", i);
                proptest::prop_assert!(ea.held().eq(eb.held()), "step {}", i);
                proptest::prop_assert!(ea.recovering().eq(eb.recovering()), "step {}", i);
                // Asked for at some steps only: asking at a step stepped
                // over records its samples.
                if *ask == 0 {
                    proptest::prop_assert_eq!(a.reports(), b.reports(), "step {}", i);
                }
            }
            proptest::prop_assert!(stepped_over < steps.len());
        }
    }

    #[test]
    fn steps_that_change_nothing_are_stepped_over_and_others_are_not() {
        let (mut s, c) = sim("check q: qget_ms < 300 && leader for 2s", Start::Resumed);
        let (q, l) = (c.id("qget_ms"), c.id("leader"));
        let at = |ms: f64, leader: bool| {
            [
                (q, Sample::Value(Value::Num(ms))),
                (l, Sample::Value(Value::Bool(leader))),
            ]
        };
        let unchanged = |s: &mut Simulation, i, samples: &[(SignalId, Sample)]| {
            s.step(i, samples.iter().copied()).unwrap().unchanged()
        };
        assert!(!unchanged(&mut s, 0, &at(10.0, true)), "the first step");
        assert!(unchanged(&mut s, 1, &at(12.0, true)));
        assert!(
            unchanged(&mut s, 2, &at(299.0, true)),
            "the same side of 300"
        );
        assert!(!unchanged(&mut s, 3, &at(300.0, true)), "the other side");
        assert!(!unchanged(&mut s, 4, &at(300.0, true)), "held: time counts");
        assert!(!unchanged(&mut s, 5, &at(300.0, true)), "the hold ends");
        assert!(unchanged(&mut s, 6, &at(301.0, true)), "failing, settled");
        assert!(
            !unchanged(&mut s, 7, &[(q, Sample::Value(Value::Num(301.0)))]),
            "leader not sampled"
        );
        assert!(
            !unchanged(&mut s, 8, &at(301.0, true)),
            "not sampled the step before"
        );
        assert!(unchanged(&mut s, 9, &at(301.0, true)));
        assert!(
            !unchanged(&mut s, 11, &at(301.0, true)),
            "not the step before"
        );
        s.absent();
        assert!(
            !unchanged(&mut s, 12, &at(301.0, true)),
            "a fresh evaluator"
        );
        let step = s.step(13, at(302.0, true)).unwrap();
        assert!(step.unchanged());
        assert!(
            step.reports()[0].explanation.contains("qget_ms = 302"),
            "{:?}",
            step.reports()
        );
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
