//! The signal store: the latest sample of every signal, with its time and, when
//! the last attempt failed, the error. Sources write; the evaluator reads a
//! consistent set of [`Reading`]s into a buffer it owns (no allocation); the
//! HTTP surface and metrics read [`SlotInfo`] snapshots.
//!
//! A reading is *unknown* when the signal was never sampled, when its last
//! sample failed, or when its last good sample is older than the signal's
//! staleness bound.
//!
//! A source may also say that a measurement is *in flight* (a read sent, not
//! yet answered): [`SignalStore::record_pending`]. Until its answer lands,
//! the reading carries a [`Pending`] lower bound that grows with the time
//! waited — a read pending for 1.2 s will take at least 1200 ms — so the
//! evaluator can decide `qget_ms < 1000` the moment the bound crosses it,
//! without waiting for the call's timeout.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::catalogue::{Catalogue, SignalId};

/// A known signal value. Durations are stored as seconds in `Num`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Bool(bool),
    Num(f64),
}

impl Value {
    /// The value as a Prometheus sample (bools as 0/1, durations in seconds).
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Bool(b) => f64::from(u8::from(b)),
            Value::Num(n) => n,
        }
    }
}

/// Why a reading is unknown.
#[derive(Clone, Debug, PartialEq)]
pub enum Unknown {
    /// The reading is known.
    No,
    /// No sample was ever taken (or the source is not configured).
    NeverSampled,
    /// The last sample failed `ago` before the reading, with this error.
    Failed { error: Arc<str>, ago: Duration },
    /// The last good sample is `age` old, beyond the signal's `bound`.
    Stale { age: Duration, bound: Duration },
    /// A newer measurement has been pending for `waited`, longer than the
    /// source trusts its last answer (`trust`): that answer is outdated.
    Outdated {
        waited: Duration,
        trust: Duration,
        what: &'static str,
    },
}

/// A measurement in flight for `waited`: for a latency, its result will be
/// at least `at_least` (in the signal's unit); `None` for other signals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pending {
    pub at_least: Option<f64>,
    pub waited: Duration,
    /// What is pending, in words ("read").
    pub what: &'static str,
}

/// What the policy evaluator sees of one signal at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// `None` when unknown; see `unknown` for why.
    pub value: Option<Value>,
    pub unknown: Unknown,
    /// Time since the last good sample, whatever happened after it (for `age()`).
    pub last_good_age: Option<Duration>,
    /// A newer measurement still in flight, as a lower bound on its result.
    /// `value` stays the last answered one: the evaluator uses the bound
    /// only where it decides a comparison by itself (see the policy crate's
    /// `eval`).
    pub pending: Option<Pending>,
}

impl Reading {
    pub const NEVER: Reading = Reading {
        value: None,
        unknown: Unknown::NeverSampled,
        last_good_age: None,
        pending: None,
    };

    /// A known reading sampled just now.
    pub fn known(value: Value) -> Reading {
        Reading {
            value: Some(value),
            unknown: Unknown::No,
            last_good_age: Some(Duration::ZERO),
            pending: None,
        }
    }

    /// A reading whose last sample failed `ago` ago.
    pub fn failed(error: &str, ago: Duration) -> Reading {
        Reading {
            value: None,
            unknown: Unknown::Failed {
                error: Arc::from(error),
                ago,
            },
            last_good_age: None,
            pending: None,
        }
    }

    /// This reading with a measurement in flight for `waited`, whose result
    /// will be at least `at_least`.
    pub fn with_pending(mut self, at_least: f64, waited: Duration, what: &'static str) -> Reading {
        self.pending = Some(Pending {
            at_least: Some(at_least),
            waited,
            what,
        });
        self
    }
}

/// A signal's state as shown by `/signals` and metrics.
#[derive(Clone, Debug)]
pub struct SlotInfo {
    pub id: SignalId,
    pub reading: Reading,
    /// Wall-clock time of the last good sample.
    pub last_good_wall: Option<SystemTime>,
    /// The last error, even if a good sample came after it... only while it is current.
    pub last_error: Option<Arc<str>>,
}

#[derive(Clone, Debug, Default)]
struct Slot {
    last_good: Option<(Value, Instant, SystemTime)>,
    /// Set when the most recent attempt failed; cleared by a good sample.
    failure: Option<(Arc<str>, Instant)>,
    /// A measurement in flight since this instant, whose result grows by
    /// `per_second` units per second waited; cleared by any result.
    pending: Option<PendingSince>,
}

#[derive(Clone, Copy, Debug)]
struct PendingSince {
    since: Instant,
    per_second: Option<f64>,
    trust: Duration,
    what: &'static str,
}

/// Latest samples of every signal in a catalogue.
#[derive(Debug)]
pub struct SignalStore {
    slots: Mutex<Vec<Slot>>,
    staleness: Mutex<Vec<Duration>>,
}

/// Staleness bound used until a source sets its own.
pub const DEFAULT_STALENESS: Duration = Duration::from_secs(10);

impl SignalStore {
    pub fn new(catalogue: &Catalogue) -> Self {
        SignalStore {
            slots: Mutex::new(vec![Slot::default(); catalogue.len()]),
            staleness: Mutex::new(vec![DEFAULT_STALENESS; catalogue.len()]),
        }
    }

    pub fn len(&self) -> usize {
        self.lock_slots().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A good sample is older than `bound` → the reading is unknown (stale).
    /// Sources set this to a few of their intervals plus their timeout.
    pub fn set_staleness(&self, id: SignalId, bound: Duration) {
        let mut s = self.staleness.lock().unwrap_or_else(|e| e.into_inner());
        s[id.index()] = bound;
    }

    /// Record a good sample. A number that is NaN or ±Inf is recorded as a
    /// failure instead (unknown, with the reason): no comparison on it means
    /// anything, and JSON cannot carry it.
    pub fn record_ok(&self, id: SignalId, value: Value, at: Instant) {
        if let Value::Num(n) = value
            && !n.is_finite()
        {
            let what = if n.is_nan() {
                "NaN"
            } else if n > 0.0 {
                "+Inf"
            } else {
                "-Inf"
            };
            self.record_err(
                id,
                Arc::from(format!("the source reported {what}, not a usable number")),
                at,
            );
            return;
        }
        let mut slots = self.lock_slots();
        let slot = &mut slots[id.index()];
        slot.last_good = Some((value, at, SystemTime::now()));
        slot.failure = None;
        slot.pending = None;
    }

    pub fn record_err(&self, id: SignalId, error: Arc<str>, at: Instant) {
        let mut slots = self.lock_slots();
        let slot = &mut slots[id.index()];
        slot.failure = Some((error, at));
        slot.pending = None;
    }

    /// A new measurement of `id` was started at `since` and has not answered
    /// yet. Until the next `record_ok`/`record_err`:
    /// - for a latency (`per_second` = the signal's units per second, 1000
    ///   for a value in ms), readings carry a lower bound of (time waited ×
    ///   `per_second`), floored to a whole unit so it never overstates; a
    ///   non-finite or negative `per_second` gives no bound;
    /// - once it has waited longer than `trust`, the last answer is
    ///   outdated: the reading is unknown ([`Unknown::Outdated`]).
    pub fn record_pending(
        &self,
        id: SignalId,
        since: Instant,
        per_second: Option<f64>,
        trust: Duration,
        what: &'static str,
    ) {
        let per_second = per_second.filter(|p| p.is_finite() && *p >= 0.0);
        let mut slots = self.lock_slots();
        slots[id.index()].pending = Some(PendingSince {
            since,
            per_second,
            trust,
            what,
        });
    }

    /// Whether any signal has a measurement in flight (the engine then
    /// re-evaluates more often, so a growing bound is seen when it crosses).
    pub fn any_pending(&self) -> bool {
        self.lock_slots().iter().any(|s| s.pending.is_some())
    }

    /// Fill `out` (one entry per signal) with readings at `now`. Does not allocate
    /// when `out` already has the right length.
    pub fn read_into(&self, now: Instant, out: &mut Vec<Reading>) {
        let slots = self.lock_slots();
        let staleness = self.staleness.lock().unwrap_or_else(|e| e.into_inner());
        out.resize(slots.len(), Reading::NEVER);
        for ((slot, bound), r) in slots.iter().zip(staleness.iter()).zip(out.iter_mut()) {
            *r = reading_of(slot, *bound, now);
        }
    }

    /// One signal's reading at `now`.
    pub fn reading(&self, id: SignalId, now: Instant) -> Reading {
        let slots = self.lock_slots();
        let bound = self.staleness.lock().unwrap_or_else(|e| e.into_inner())[id.index()];
        reading_of(&slots[id.index()], bound, now)
    }

    /// Everything about every signal, for `/signals` and metrics.
    pub fn snapshot(&self, now: Instant) -> Vec<SlotInfo> {
        let slots = self.lock_slots();
        let staleness = self.staleness.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .iter()
            .zip(staleness.iter())
            .enumerate()
            .map(|(i, (slot, bound))| SlotInfo {
                id: SignalId(i as u16),
                reading: reading_of(slot, *bound, now),
                last_good_wall: slot.last_good.map(|(_, _, w)| w),
                last_error: slot.failure.as_ref().map(|(e, _)| e.clone()),
            })
            .collect()
    }

    fn lock_slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        // A panicking writer cannot leave a slot half-written (plain assignments),
        // so a poisoned lock is still consistent.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn reading_of(slot: &Slot, bound: Duration, now: Instant) -> Reading {
    let mut r = reading_without_pending(slot, bound, now);
    if let Some(p) = slot.pending {
        let waited = now.saturating_duration_since(p.since);
        let at_least = p
            .per_second
            .map(|ps| (waited.as_secs_f64() * ps).floor())
            .filter(|b| b.is_finite());
        if waited > p.trust && r.value.is_some() {
            r.value = None;
            r.unknown = Unknown::Outdated {
                waited,
                trust: p.trust,
                what: p.what,
            };
        }
        r.pending = Some(Pending {
            at_least,
            waited,
            what: p.what,
        });
    }
    r
}

fn reading_without_pending(slot: &Slot, bound: Duration, now: Instant) -> Reading {
    let last_good_age = slot
        .last_good
        .map(|(_, at, _)| now.saturating_duration_since(at));
    if let Some((error, at)) = &slot.failure {
        return Reading {
            value: None,
            unknown: Unknown::Failed {
                error: error.clone(),
                ago: now.saturating_duration_since(*at),
            },
            last_good_age,
            pending: None,
        };
    }
    match slot.last_good {
        None => Reading::NEVER,
        Some((value, at, _)) => {
            let age = now.saturating_duration_since(at);
            if age > bound {
                Reading {
                    value: None,
                    unknown: Unknown::Stale { age, bound },
                    last_good_age,
                    pending: None,
                }
            } else {
                Reading {
                    value: Some(value),
                    unknown: Unknown::No,
                    last_good_age,
                    pending: None,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (Catalogue, SignalStore) {
        let c = Catalogue::builtin();
        let s = SignalStore::new(&c);
        (c, s)
    }

    #[test]
    fn never_sampled_is_unknown() {
        let (c, s) = store();
        let r = s.reading(c.id("leader"), Instant::now());
        assert_eq!(r, Reading::NEVER);
    }

    #[test]
    fn failure_after_good_sample_is_unknown_but_keeps_last_good_age() {
        let (c, s) = store();
        let id = c.id("qget_ms");
        let t0 = Instant::now();
        s.record_ok(id, Value::Num(3.0), t0);
        s.record_err(
            id,
            Arc::from("request timed out"),
            t0 + Duration::from_secs(1),
        );
        let r = s.reading(id, t0 + Duration::from_secs(4));
        assert_eq!(r.value, None);
        assert_eq!(r.last_good_age, Some(Duration::from_secs(4)));
        match r.unknown {
            Unknown::Failed { error, ago } => {
                assert_eq!(&*error, "request timed out");
                assert_eq!(ago, Duration::from_secs(3));
            }
            other => panic!("{other:?}"),
        }
        s.record_ok(id, Value::Num(2.0), t0 + Duration::from_secs(5));
        assert_eq!(
            s.reading(id, t0 + Duration::from_secs(5)).value,
            Some(Value::Num(2.0))
        );
    }

    #[test]
    fn nan_and_infinities_are_unknown_with_the_reason() {
        let (c, s) = store();
        let id = c.id("qget_ms");
        let t0 = Instant::now();
        for (v, what) in [
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            s.record_ok(id, Value::Num(v), t0);
            let r = s.reading(id, t0);
            assert_eq!(r.value, None);
            match r.unknown {
                Unknown::Failed { error, .. } => assert_eq!(
                    &*error,
                    format!("the source reported {what}, not a usable number")
                ),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn old_sample_is_stale() {
        let (c, s) = store();
        let id = c.id("leader");
        let t0 = Instant::now();
        s.set_staleness(id, Duration::from_secs(3));
        s.record_ok(id, Value::Bool(true), t0);
        assert!(s.reading(id, t0 + Duration::from_secs(3)).value.is_some());
        let r = s.reading(id, t0 + Duration::from_secs(4));
        assert_eq!(r.value, None);
        assert!(matches!(r.unknown, Unknown::Stale { .. }));
    }

    #[test]
    fn a_pending_measurement_is_a_growing_lower_bound_until_its_result() {
        let (c, s) = store();
        let id = c.id("qget_ms");
        let t0 = Instant::now();
        s.record_ok(id, Value::Num(3.0), t0);
        s.record_pending(id, t0, Some(1000.0), Duration::from_secs(2), "read");
        assert!(s.any_pending());
        let r = s.reading(id, t0 + Duration::from_millis(1500));
        // The last answer stays the value; the bound rides along, floored.
        assert_eq!(r.value, Some(Value::Num(3.0)));
        let p = r.pending.expect("pending");
        assert_eq!(p.at_least, Some(1500.0));
        assert_eq!(p.waited, Duration::from_millis(1500));
        assert_eq!(p.what, "read");
        let r = s.reading(id, t0 + Duration::from_micros(999_999));
        assert_eq!(r.pending.and_then(|p| p.at_least), Some(999.0));
        // Waited longer than the last answer is trusted: outdated, unknown.
        let r = s.reading(id, t0 + Duration::from_millis(2001));
        assert_eq!(r.value, None);
        assert_eq!(
            r.unknown,
            Unknown::Outdated {
                waited: Duration::from_millis(2001),
                trust: Duration::from_secs(2),
                what: "read"
            }
        );
        assert_eq!(r.pending.and_then(|p| p.at_least), Some(2001.0));
        // A result (good or failed) ends it.
        s.record_ok(id, Value::Num(1200.0), t0 + Duration::from_millis(1200));
        assert!(!s.any_pending());
        assert_eq!(s.reading(id, t0 + Duration::from_secs(2)).pending, None);
        s.record_pending(id, t0, Some(1000.0), Duration::from_secs(2), "read");
        s.record_err(id, Arc::from("timed out"), t0 + Duration::from_secs(3));
        assert_eq!(s.reading(id, t0 + Duration::from_secs(4)).pending, None);
        // Absurd scales give no bound, never a panic; a failed last sample
        // keeps its own reason.
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            s.record_pending(id, t0, Some(bad), Duration::ZERO, "read");
            let r = s.reading(id, t0 + Duration::from_secs(9));
            assert_eq!(r.pending.map(|p| p.at_least), Some(None));
            assert!(matches!(r.unknown, Unknown::Failed { .. }), "{r:?}");
        }
        // A bool (no bound) is outdated the same way.
        let leader = c.id("leader");
        s.record_ok(leader, Value::Bool(true), t0);
        s.record_pending(leader, t0, None, Duration::from_millis(200), "Status");
        let r = s.reading(leader, t0 + Duration::from_millis(200));
        assert_eq!(r.value, Some(Value::Bool(true)));
        let r = s.reading(leader, t0 + Duration::from_millis(201));
        assert_eq!(r.value, None);
        assert!(
            matches!(r.unknown, Unknown::Outdated { what: "Status", .. }),
            "{r:?}"
        );
    }

    #[test]
    fn read_into_reuses_the_buffer() {
        let (c, s) = store();
        let mut buf = Vec::new();
        s.read_into(Instant::now(), &mut buf);
        assert_eq!(buf.len(), c.len());
        let cap = buf.capacity();
        s.read_into(Instant::now(), &mut buf);
        assert_eq!(buf.capacity(), cap);
    }
}
