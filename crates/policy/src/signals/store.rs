//! The signal store: the latest sample of every signal, with its time and, when
//! the last attempt failed, the error. Sources write; the evaluator reads a
//! consistent set of [`Reading`]s into a buffer it owns (no allocation); the
//! HTTP surface and metrics read [`SlotInfo`] snapshots.
//!
//! A reading is *unknown* when the signal was never sampled, when its last
//! sample failed, or when its last good sample is older than the signal's
//! staleness bound.

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
}

/// What the policy evaluator sees of one signal at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// `None` when unknown; see `unknown` for why.
    pub value: Option<Value>,
    pub unknown: Unknown,
    /// Time since the last good sample, whatever happened after it (for `age()`).
    pub last_good_age: Option<Duration>,
}

impl Reading {
    pub const NEVER: Reading = Reading {
        value: None,
        unknown: Unknown::NeverSampled,
        last_good_age: None,
    };

    /// A known reading sampled just now.
    pub fn known(value: Value) -> Reading {
        Reading {
            value: Some(value),
            unknown: Unknown::No,
            last_good_age: Some(Duration::ZERO),
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
        }
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
    }

    pub fn record_err(&self, id: SignalId, error: Arc<str>, at: Instant) {
        let mut slots = self.lock_slots();
        slots[id.index()].failure = Some((error, at));
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
                }
            } else {
                Reading {
                    value: Some(value),
                    unknown: Unknown::No,
                    last_good_age,
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
