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
//!
//! How long the last answer stays trusted while a call is pending is a
//! [`Trust`]: a base period, plus the time the node's CPU was contended
//! while the call waited (up to a cap). The store knows nothing of how that
//! is measured: the runtime feeds it a monotonic counter of contended time
//! ([`SignalStore::set_cpu_stalled`], Linux PSI in the exporter), as it
//! feeds it instants. A member on a busy node is slow because it could not
//! run, not because it is sick; a frozen or cut-off member on an idle node
//! is judged by the base period alone.
//!
//! The store reads no clock. Wall times (`/signals`' "last good at") come
//! from the last pair of instant and wall time the runtime gave it
//! ([`SignalStore::set_wall_clock`], at every evaluation).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use super::catalogue::{Catalogue, SignalId};
use crate::sync::TolerantLock;

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
    /// No sample was ever taken (or the source is not configured).
    NeverSampled,
    /// The last sample failed `ago` before the reading, with this error.
    Failed { error: Arc<str>, ago: Duration },
    /// The last good sample is `age` old, beyond the signal's `bound`.
    Stale { age: Duration, bound: Duration },
    /// A newer measurement has been pending for `waited`, longer than the
    /// source trusts its last answer (`trust`, which includes `contended`,
    /// the time the node's CPU was contended meanwhile, as far as the
    /// [`Trust`] allows it): that answer is outdated.
    Outdated {
        waited: Duration,
        trust: Duration,
        contended: Duration,
        what: &'static str,
    },
}

/// How long a source trusts its last answer while a newer call is pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trust {
    /// On a node whose CPU is not contended.
    pub base: Duration,
    /// The longest the trust may grow to by the time the node's CPU was
    /// contended while the call was pending (`base` + that time, at most
    /// this; no growth when it is not above `base`).
    pub contended_max: Duration,
}

impl Trust {
    /// A trust period that does not grow with CPU contention.
    pub const fn fixed(base: Duration) -> Trust {
        Trust {
            base,
            contended_max: base,
        }
    }

    /// The trust for a call that waited while the CPU was contended for
    /// `contended`, and how much of that counted.
    pub fn with_contention(&self, contended: Duration) -> (Duration, Duration) {
        let room = self.contended_max.saturating_sub(self.base);
        let counted = contended.min(room);
        (self.base + counted, counted)
    }
}

impl From<Duration> for Trust {
    fn from(base: Duration) -> Trust {
        Trust::fixed(base)
    }
}

/// A measurement in flight for `waited`: for a latency, its result will be
/// at least `at_least` (in the signal's unit); `None` for other signals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pending {
    pub at_least: Option<f64>,
    pub waited: Duration,
    /// What is pending, in words ("read").
    pub what: &'static str,
    /// How long the last answer is trusted while this is pending, before
    /// the node's contention is counted ([`Trust::base`]): what a source
    /// gave it (e.g. the etcd source's election credit).
    pub trusted: Duration,
    /// The node's contended CPU time counted on top of `trusted` so far.
    pub contended: Duration,
}

/// What the policy evaluator sees of one signal at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// The value, or why it is unknown.
    pub value: Result<Value, Unknown>,
    /// Time since the last good sample, whatever happened after it (for `age()`).
    pub last_good_age: Option<Duration>,
    /// A newer measurement still in flight, as a lower bound on its result.
    /// `value` stays the last answered one: the evaluator uses the bound
    /// only where it decides a comparison by itself (see the policy crate's
    /// `eval`).
    pub pending: Option<Pending>,
}

impl Reading {
    /// The value, when known.
    pub fn get(&self) -> Option<Value> {
        self.value.as_ref().ok().copied()
    }

    /// Why the value is unknown, when it is.
    pub fn unknown(&self) -> Option<&Unknown> {
        self.value.as_ref().err()
    }

    pub const NEVER: Reading = Reading {
        value: Err(Unknown::NeverSampled),
        last_good_age: None,
        pending: None,
    };

    /// A known reading sampled just now.
    pub fn known(value: Value) -> Reading {
        Reading {
            value: Ok(value),
            last_good_age: Some(Duration::ZERO),
            pending: None,
        }
    }

    /// A reading whose last sample failed `ago` ago.
    pub fn failed(error: &str, ago: Duration) -> Reading {
        Reading {
            value: Err(Unknown::Failed {
                error: Arc::from(error),
                ago,
            }),
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
            trusted: Duration::ZERO,
            contended: Duration::ZERO,
        });
        self
    }
}

/// A signal's state as shown by `/signals` and metrics.
#[derive(Clone, Debug)]
pub struct SlotInfo {
    pub id: SignalId,
    pub reading: Reading,
    /// Wall-clock time of the last good sample (when its call started), by
    /// the last [`SignalStore::set_wall_clock`]; `None` before the first.
    pub last_good_wall: Option<SystemTime>,
    /// The last error, even if a good sample came after it... only while it is current.
    pub last_error: Option<Arc<str>>,
}

#[derive(Clone, Debug, Default)]
struct Slot {
    last_good: Option<Good>,
    /// Set when the most recent attempt failed; cleared by a good sample.
    failure: Option<(Arc<str>, Instant)>,
    /// A measurement in flight since this instant, whose result grows by
    /// `per_second` units per second waited; cleared by any result.
    pending: Option<PendingSince>,
}

/// A good sample: its value, when its call started (its age counts from
/// there), and the contended-time counter when its call started (its staleness bound grows by the node's contended CPU
/// time since then, as the signal's [`Trust`] allows).
#[derive(Clone, Copy, Debug)]
struct Good {
    value: Value,
    at: Instant,
    stalled_at: Duration,
}

#[derive(Clone, Copy, Debug)]
struct PendingSince {
    since: Instant,
    per_second: Option<f64>,
    trust: Trust,
    /// The contended-time counter when the call started.
    stalled_at_start: Duration,
    what: &'static str,
}

/// Latest samples of every signal in a catalogue.
#[derive(Debug)]
pub struct SignalStore {
    slots: Mutex<Vec<Slot>>,
    staleness: Mutex<Vec<Trust>>,
    /// Microseconds the node's CPU has been contended, as last set by the
    /// runtime (monotonic: a smaller value is ignored).
    cpu_stalled_us: AtomicU64,
    /// An instant and the wall time at it, as last set by the runtime.
    wall_clock: Mutex<Option<(Instant, SystemTime)>>,
}

/// Staleness bound used until a source sets its own.
pub const DEFAULT_STALENESS: Duration = Duration::from_secs(10);

impl SignalStore {
    pub fn new(catalogue: &Catalogue) -> Self {
        SignalStore {
            slots: Mutex::new(vec![Slot::default(); catalogue.len()]),
            staleness: Mutex::new(vec![Trust::fixed(DEFAULT_STALENESS); catalogue.len()]),
            cpu_stalled_us: AtomicU64::new(0),
            wall_clock: Mutex::new(None),
        }
    }

    pub fn len(&self) -> usize {
        self.lock_slots().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A good sample is older than `bound` → the reading is unknown (stale).
    /// Sources set this to a few of their intervals plus their timeout. As a
    /// [`Trust`], the bound grows by the node's contended CPU time since the
    /// sample's call started, up to `contended_max`: a source whose calls
    /// are given longer on a busy node has its samples kept longer too.
    pub fn set_staleness(&self, id: SignalId, bound: impl Into<Trust>) {
        let mut s = self.staleness.locked();
        s[id.index()] = bound.into();
    }

    /// Record a good sample. A number that is NaN or ±Inf is recorded as a
    /// failure instead (unknown, with the reason): no comparison on it means
    /// anything, and JSON cannot carry it.
    pub fn record_ok(&self, id: SignalId, value: Value, at: Instant) {
        let stalled_now = self.cpu_stalled();
        self.lock_slots()[id.index()].record(Ok(value), at, stalled_now);
    }

    pub fn record_err(&self, id: SignalId, error: Arc<str>, at: Instant) {
        let stalled_now = self.cpu_stalled();
        self.lock_slots()[id.index()].record(Err(error), at, stalled_now);
    }

    /// [`record_ok`](Self::record_ok) and [`record_err`](Self::record_err)
    /// through exclusive access, without taking a lock: what a simulation
    /// that owns its store records at every step of a long history.
    pub fn record_owned(&mut self, id: SignalId, sample: Result<Value, Arc<str>>, at: Instant) {
        let stalled_now = self.cpu_stalled();
        if let Some(slot) = self.slots_mut().get_mut(id.index()) {
            slot.record(sample, at, stalled_now);
        }
    }

    /// A new measurement of `id` was started at `since` and has not answered
    /// yet. Until the next `record_ok`/`record_err`:
    /// - for a latency (`per_second` = the signal's units per second, 1000
    ///   for a value in ms), readings carry a lower bound of (time waited ×
    ///   `per_second`), floored to a whole unit so it never overstates; a
    ///   non-finite or negative `per_second` gives no bound;
    /// - once it has waited longer than `trust`, the last answer is
    ///   outdated: the reading is unknown ([`Unknown::Outdated`]).
    ///
    /// The trust grows by the node's contended CPU time while the call is
    /// pending, as [`Trust::with_contention`] allows: the counter as set by
    /// [`set_cpu_stalled`](Self::set_cpu_stalled) now and at each reading.
    pub fn record_pending(
        &self,
        id: SignalId,
        since: Instant,
        per_second: Option<f64>,
        trust: impl Into<Trust>,
        what: &'static str,
    ) {
        let per_second = per_second.filter(|p| p.is_finite() && *p >= 0.0);
        let stalled_at_start = self.cpu_stalled();
        let mut slots = self.lock_slots();
        slots[id.index()].pending = Some(PendingSince {
            since,
            per_second,
            trust: trust.into(),
            stalled_at_start,
            what,
        });
    }

    /// Give the measurement of `id` now in flight a new trust (from its
    /// start, with the contention it has already waited through); nothing
    /// when none is in flight. What a source uses when what it knows about
    /// the member changes while its call waits: more trust while an answer
    /// is still expected, the normal trust again the moment it is not.
    pub fn set_pending_trust(&self, id: SignalId, trust: impl Into<Trust>) {
        let mut slots = self.lock_slots();
        if let Some(p) = &mut slots[id.index()].pending {
            p.trust = trust.into();
        }
    }

    /// The measurement of `id` in flight is sent again at `at`, after a
    /// pause that was the source's own, not the member's (the etcd source
    /// logging in again when etcd refused its token): pending from `at`,
    /// its last answer trusted for at least `at_least` from then; nothing
    /// when none is in flight.
    pub fn resend_pending(&self, id: SignalId, at: Instant, at_least: Duration) {
        let stalled_at_start = self.cpu_stalled();
        let mut slots = self.lock_slots();
        if let Some(p) = &mut slots[id.index()].pending {
            p.since = at;
            p.stalled_at_start = stalled_at_start;
            p.trust.base = p.trust.base.max(at_least);
            p.trust.contended_max = p.trust.contended_max.max(p.trust.base);
        }
    }

    /// The node's CPU has been contended for `total` so far (a monotonic
    /// counter whose origin does not matter, e.g. PSI's `some total`): what
    /// pending calls are judged against. A value below the last one is
    /// ignored, so a bad reading cannot give a call credit it did not earn.
    pub fn set_cpu_stalled(&self, total: Duration) {
        let us = u64::try_from(total.as_micros()).unwrap_or(u64::MAX);
        self.cpu_stalled_us.fetch_max(us, Ordering::Relaxed);
    }

    /// The contended-time counter as last set.
    pub fn cpu_stalled(&self) -> Duration {
        Duration::from_micros(self.cpu_stalled_us.load(Ordering::Relaxed))
    }

    /// The wall time at `now`: what [`snapshot`](Self::snapshot) converts
    /// sample instants with (the engine sets it at every evaluation, so a
    /// step of the wall clock shows from the next one on).
    pub fn set_wall_clock(&self, now: Instant, wall: SystemTime) {
        *self.wall_clock.locked() = Some((now, wall));
    }

    /// Whether any signal has a measurement in flight (the engine then
    /// re-evaluates more often, so a growing bound is seen when it crosses).
    pub fn any_pending(&self) -> bool {
        self.lock_slots().iter().any(|s| s.pending.is_some())
    }

    /// Fill `out` (one entry per signal) with readings at `now`. Does not allocate
    /// when `out` already has the right length.
    pub fn read_into(&self, now: Instant, out: &mut Vec<Reading>) {
        let stalled = self.cpu_stalled();
        let slots = self.lock_slots();
        let staleness = self.staleness.locked();
        out.resize(slots.len(), Reading::NEVER);
        for ((slot, bound), r) in slots.iter().zip(staleness.iter()).zip(out.iter_mut()) {
            *r = reading_of(slot, *bound, now, stalled);
        }
    }

    /// Like [`read_into`](Self::read_into), for the signals `ids` only
    /// (`out` has one entry per signal; the others are left as they are):
    /// what a simulation reads at every step of a long history.
    /// Through exclusive access, so without a lock; each reading is
    /// rewritten in place.
    pub fn read_some_into(&mut self, ids: &[SignalId], now: Instant, out: &mut [Reading]) {
        let stalled = self.cpu_stalled();
        let staleness = self
            .staleness
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let slots = self.slots.get_mut().unwrap_or_else(PoisonError::into_inner);
        for id in ids {
            let i = id.index();
            if let (Some(slot), Some(bound), Some(r)) =
                (slots.get(i), staleness.get(i), out.get_mut(i))
            {
                fill_reading(r, slot, *bound, now, stalled);
            }
        }
    }

    /// One signal's reading at `now`.
    pub fn reading(&self, id: SignalId, now: Instant) -> Reading {
        let stalled = self.cpu_stalled();
        let slots = self.lock_slots();
        let bound = self.staleness.locked()[id.index()];
        reading_of(&slots[id.index()], bound, now, stalled)
    }

    /// Everything about every signal, for `/signals` and metrics.
    pub fn snapshot(&self, now: Instant) -> Vec<SlotInfo> {
        let stalled = self.cpu_stalled();
        let clock = *self.wall_clock.locked();
        let wall_of = |at: Instant| {
            let (then, wall) = clock?;
            match at.checked_duration_since(then) {
                Some(later) => wall.checked_add(later),
                None => wall.checked_sub(then.saturating_duration_since(at)),
            }
        };
        let slots = self.lock_slots();
        let staleness = self.staleness.locked();
        slots
            .iter()
            .zip(staleness.iter())
            .enumerate()
            .map(|(i, (slot, bound))| SlotInfo {
                id: SignalId(i as u16),
                reading: reading_of(slot, *bound, now, stalled),
                last_good_wall: slot.last_good.and_then(|g| wall_of(g.at)),
                last_error: slot.failure.as_ref().map(|(e, _)| e.clone()),
            })
            .collect()
    }

    fn lock_slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        // A panicking writer cannot leave a slot half-written (plain assignments),
        // so a poisoned lock is still consistent.
        self.slots.locked()
    }

    /// The slots through exclusive access (no lock), poisoned or not, as
    /// [`lock_slots`](Self::lock_slots) takes them.
    fn slots_mut(&mut self) -> &mut Vec<Slot> {
        self.slots.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Slot {
    /// A sample of the call started at `at`: a number that is not finite
    /// is a failure, not a value.
    fn record(&mut self, sample: Result<Value, Arc<str>>, at: Instant, stalled_now: Duration) {
        match sample {
            Ok(Value::Num(n)) if !n.is_finite() => {
                let what = if n.is_nan() {
                    "NaN"
                } else if n > 0.0 {
                    "+Inf"
                } else {
                    "-Inf"
                };
                let why = format!("the source reported {what}, not a usable number");
                self.failed(Arc::from(why), at);
            }
            Ok(value) => self.good(value, at, stalled_now),
            Err(error) => self.failed(error, at),
        }
    }

    /// A good sample of `value` whose call started at `at`;
    /// `stalled_now` is the contended-time counter now.
    fn good(&mut self, value: Value, at: Instant, stalled_now: Duration) {
        // The counter when the call started, if it was recorded as pending.
        let stalled_at = self
            .pending
            .filter(|p| p.since <= at)
            .map_or(stalled_now, |p| p.stalled_at_start);
        self.last_good = Some(Good {
            value,
            at,
            stalled_at,
        });
        self.failure = None;
        self.pending = None;
    }

    /// The attempt started at `at` failed with `error`.
    fn failed(&mut self, error: Arc<str>, at: Instant) {
        self.failure = Some((error, at));
        self.pending = None;
    }
}

fn reading_of(slot: &Slot, bound: Trust, now: Instant, stalled: Duration) -> Reading {
    let mut r = Reading::NEVER;
    fill_reading(&mut r, slot, bound, now, stalled);
    r
}

/// Set `r` to `slot`'s reading at `now`, field by field: a reading is
/// large (the reasons it may be unknown), and a simulation rewrites one per
/// signal at every step, mostly with a known value and nothing pending.
fn fill_reading(r: &mut Reading, slot: &Slot, bound: Trust, now: Instant, stalled: Duration) {
    // A good sample read at its own instant, nothing failed or pending since
    // (every reading of a replayed step): known, of age zero — what the
    // general path below computes, without its clock arithmetic.
    if let (Some(good), None, None) = (&slot.last_good, &slot.failure, &slot.pending)
        && good.at == now
    {
        *r = Reading::known(good.value);
        return;
    }
    fill_without_pending(r, slot, bound, now, stalled);
    r.pending = None;
    if let Some(p) = slot.pending {
        let waited = now.saturating_duration_since(p.since);
        let at_least = p
            .per_second
            .map(|ps| (waited.as_secs_f64() * ps).floor())
            .filter(|b| b.is_finite());
        // Contended time beyond the wait itself cannot be the call's (the
        // counter is node-wide and may cover several CPUs at once).
        let contended = stalled.saturating_sub(p.stalled_at_start).min(waited);
        let (trust, counted) = p.trust.with_contention(contended);
        if waited > trust && r.value.is_ok() {
            r.value = Err(Unknown::Outdated {
                waited,
                trust,
                contended: counted,
                what: p.what,
            });
        }
        r.pending = Some(Pending {
            at_least,
            waited,
            what: p.what,
            trusted: p.trust.base,
            contended: counted,
        });
    }
}

fn fill_without_pending(
    r: &mut Reading,
    slot: &Slot,
    bound: Trust,
    now: Instant,
    stalled: Duration,
) {
    r.last_good_age = slot.last_good.map(|g| now.saturating_duration_since(g.at));
    if let Some((error, at)) = &slot.failure {
        r.value = Err(Unknown::Failed {
            error: error.clone(),
            ago: now.saturating_duration_since(*at),
        });
        return;
    }
    r.value = match slot.last_good {
        None => Err(Unknown::NeverSampled),
        Some(Good {
            value,
            at,
            stalled_at,
            ..
        }) => {
            let age = now.saturating_duration_since(at);
            // As for a pending call: contended time beyond the age itself
            // cannot be this sample's.
            let contended = stalled.saturating_sub(stalled_at).min(age);
            let (bound, _) = bound.with_contention(contended);
            if age > bound {
                Err(Unknown::Stale { age, bound })
            } else {
                Ok(value)
            }
        }
    };
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
    fn a_good_sample_read_at_its_own_instant_is_what_the_general_path_reads() {
        // fill_reading's shortcut for a fresh sample (every replayed step)
        // against fill_without_pending, whatever the bound, the contention
        // and what the slot held before.
        let (c, mut s) = store();
        let ms = Duration::from_millis;
        let id = c.id("qget_ms");
        let t0 = Instant::now();
        for (k, bound) in [ms(0), ms(1), ms(10_000)].into_iter().enumerate() {
            s.set_staleness(id, bound);
            s.set_cpu_stalled(ms(1_000 * k as u64));
            let at = t0 + ms(10 * k as u64);
            s.record_err(id, Arc::from("before"), at);
            s.record_ok(id, Value::Num(k as f64), at);
            let mut out = vec![Reading::NEVER; c.len()];
            s.read_some_into(&[id], at, &mut out);
            let fast = out[id.index()].clone();
            let slots = s.lock_slots();
            let mut general = Reading::NEVER;
            let stalled = s.cpu_stalled();
            fill_without_pending(&mut general, &slots[id.index()], bound.into(), at, stalled);
            drop(slots);
            assert_eq!(fast, general, "bound {bound:?}");
            assert_eq!(fast, Reading::known(Value::Num(k as f64)));
        }
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
        assert_eq!(r.get(), None);
        assert_eq!(r.last_good_age, Some(Duration::from_secs(4)));
        match r.value.clone().unwrap_err() {
            Unknown::Failed { error, ago } => {
                assert_eq!(&*error, "request timed out");
                assert_eq!(ago, Duration::from_secs(3));
            }
            other => panic!("{other:?}"),
        }
        s.record_ok(id, Value::Num(2.0), t0 + Duration::from_secs(5));
        assert_eq!(
            s.reading(id, t0 + Duration::from_secs(5)).get(),
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
            assert_eq!(r.get(), None);
            match r.value.clone().unwrap_err() {
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
        assert!(s.reading(id, t0 + Duration::from_secs(3)).get().is_some());
        let r = s.reading(id, t0 + Duration::from_secs(4));
        assert_eq!(r.get(), None);
        assert!(matches!(
            r.value.clone().unwrap_err(),
            Unknown::Stale { .. }
        ));
    }

    #[test]
    fn contended_cpu_time_since_the_call_started_keeps_a_sample_longer_up_to_the_cap() {
        let (c, s) = store();
        let id = c.id("etcd_up");
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        s.set_staleness(
            id,
            Trust {
                base: ms(300),
                contended_max: ms(1300),
            },
        );
        // The call starts with the counter at 10 s and answers after the
        // node's CPU was contended for 900 ms.
        s.set_cpu_stalled(ms(10_000));
        s.record_pending(id, t0, None, ms(100), "Status");
        s.set_cpu_stalled(ms(10_900));
        s.record_ok(id, Value::Bool(false), t0);
        // 1.1 s after the call started: 300 ms + 900 ms contended > 1.1 s.
        assert_eq!(s.reading(id, t0 + ms(1100)).get(), Some(Value::Bool(false)));
        // Contended time counts at most up to the sample's age ...
        s.set_cpu_stalled(ms(20_000));
        assert_eq!(s.reading(id, t0 + ms(1250)).get(), Some(Value::Bool(false)));
        // ... and never beyond the cap.
        let r = s.reading(id, t0 + ms(1400));
        assert_eq!(r.get(), None);
        assert!(
            matches!(r.value.clone().unwrap_err(), Unknown::Stale { bound, .. } if bound == ms(1300)),
            "{r:?}"
        );
        // On an idle node the base bound holds.
        let (c, s) = store();
        let id = c.id("etcd_up");
        s.set_staleness(
            id,
            Trust {
                base: ms(300),
                contended_max: ms(1300),
            },
        );
        s.record_ok(id, Value::Bool(true), t0);
        assert_eq!(s.reading(id, t0 + ms(300)).get(), Some(Value::Bool(true)));
        assert_eq!(s.reading(id, t0 + ms(301)).get(), None);
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
        assert_eq!(r.get(), Some(Value::Num(3.0)));
        let p = r.pending.expect("pending");
        assert_eq!(p.at_least, Some(1500.0));
        assert_eq!(p.waited, Duration::from_millis(1500));
        assert_eq!(p.what, "read");
        let r = s.reading(id, t0 + Duration::from_micros(999_999));
        assert_eq!(r.pending.and_then(|p| p.at_least), Some(999.0));
        // Waited longer than the last answer is trusted: outdated, unknown.
        let r = s.reading(id, t0 + Duration::from_millis(2001));
        assert_eq!(r.get(), None);
        assert_eq!(
            r.value.clone().unwrap_err(),
            Unknown::Outdated {
                waited: Duration::from_millis(2001),
                trust: Duration::from_secs(2),
                contended: Duration::ZERO,
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
            assert!(
                matches!(r.value.clone().unwrap_err(), Unknown::Failed { .. }),
                "{r:?}"
            );
        }
        // A bool (no bound) is outdated the same way.
        let leader = c.id("leader");
        s.record_ok(leader, Value::Bool(true), t0);
        s.record_pending(leader, t0, None, Duration::from_millis(200), "Status");
        let r = s.reading(leader, t0 + Duration::from_millis(200));
        assert_eq!(r.get(), Some(Value::Bool(true)));
        let r = s.reading(leader, t0 + Duration::from_millis(201));
        assert_eq!(r.get(), None);
        assert!(
            matches!(
                r.value.clone().unwrap_err(),
                Unknown::Outdated { what: "Status", .. }
            ),
            "{r:?}"
        );
    }

    #[test]
    fn a_pending_calls_trust_can_be_raised_and_lowered_while_it_waits() {
        let (c, s) = store();
        let q = c.id("qget_ms");
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        s.record_ok(q, Value::Num(3.0), t0);
        s.record_pending(q, t0, Some(1000.0), ms(100), "read");
        // Raised: the last answer still counts past the first trust...
        s.set_pending_trust(q, ms(1000));
        let r = s.reading(q, t0 + ms(600));
        assert_eq!(r.get(), Some(Value::Num(3.0)));
        assert_eq!(r.pending.map(|p| p.waited), Some(ms(600)));
        // ...and lowered again it is outdated at once, judged from the start.
        s.set_pending_trust(q, ms(100));
        assert_eq!(
            s.reading(q, t0 + ms(600)).value.clone().unwrap_err(),
            Unknown::Outdated {
                waited: ms(600),
                trust: ms(100),
                contended: Duration::ZERO,
                what: "read"
            }
        );
        // Without a call in flight there is nothing to change.
        s.record_ok(q, Value::Num(4.0), t0 + ms(700));
        s.set_pending_trust(q, ms(1));
        assert_eq!(s.reading(q, t0 + ms(800)).get(), Some(Value::Num(4.0)));
    }

    #[test]
    fn a_call_sent_again_after_the_sources_own_pause_is_pending_from_then() {
        let (c, s) = store();
        let qget = c.id("qget_ms");
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        s.record_ok(qget, Value::Num(2.0), t0);
        s.record_pending(qget, t0, Some(1000.0), Trust::fixed(ms(100)), "read");
        // Sent again at 90 ms (after a login), trusted for 500 ms from then.
        s.resend_pending(qget, t0 + ms(90), ms(500));
        let r = s.reading(qget, t0 + ms(590));
        assert_eq!(r.get(), Some(Value::Num(2.0)));
        assert_eq!(r.pending.unwrap().waited, ms(500));
        let r = s.reading(qget, t0 + ms(591));
        assert!(matches!(r.value, Err(Unknown::Outdated { .. })), "{r:?}");
        // A longer trust is kept; nothing in flight, nothing changes.
        s.resend_pending(qget, t0 + ms(600), ms(10));
        assert_eq!(s.reading(qget, t0 + ms(1_100)).get(), Some(Value::Num(2.0)));
        s.record_ok(qget, Value::Num(3.0), t0 + ms(1_100));
        s.resend_pending(qget, t0 + ms(1_200), ms(10));
        assert!(s.reading(qget, t0 + ms(1_300)).pending.is_none());
    }

    #[test]
    fn contended_cpu_time_extends_the_trust_up_to_its_cap_and_no_further() {
        let (c, s) = store();
        let leader = c.id("leader");
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let trust = Trust {
            base: ms(100),
            contended_max: ms(1000),
        };
        s.set_cpu_stalled(ms(5_000));
        s.record_ok(leader, Value::Bool(true), t0);
        s.record_pending(leader, t0, None, trust, "Status");
        // An idle node: outdated after the base period, as without contention.
        let r = s.reading(leader, t0 + ms(101));
        assert_eq!(
            r.value.clone().unwrap_err(),
            Unknown::Outdated {
                waited: ms(101),
                trust: ms(100),
                contended: Duration::ZERO,
                what: "Status"
            }
        );
        // 250 ms of contention while it waited: trusted until 350 ms.
        s.set_cpu_stalled(ms(5_250));
        assert_eq!(
            s.reading(leader, t0 + ms(350)).get(),
            Some(Value::Bool(true))
        );
        let r = s.reading(leader, t0 + ms(351));
        assert_eq!(
            r.value.clone().unwrap_err(),
            Unknown::Outdated {
                waited: ms(351),
                trust: ms(350),
                contended: ms(250),
                what: "Status"
            }
        );
        // Contended time counted only up to the time waited (a node-wide
        // counter over several CPUs can grow faster than the clock), and
        // the trust never beyond its cap.
        s.set_cpu_stalled(ms(9_000));
        assert_eq!(
            s.reading(leader, t0 + ms(999)).get(),
            Some(Value::Bool(true))
        );
        let r = s.reading(leader, t0 + ms(1001));
        assert!(
            matches!(r.value.clone().unwrap_err(), Unknown::Outdated { trust, contended, .. }
                if trust == ms(1000) && contended == ms(900)),
            "{r:?}"
        );
        // The counter never goes back: a smaller value is ignored.
        s.set_cpu_stalled(ms(1));
        assert_eq!(s.cpu_stalled(), ms(9_000));
        // A call that starts now is judged from the counter as it is now.
        s.record_pending(leader, t0 + ms(2000), None, trust, "Status");
        assert!(matches!(
            s.reading(leader, t0 + ms(2101)).value.clone().unwrap_err(),
            Unknown::Outdated { contended, .. } if contended.is_zero()
        ));
        // A fixed trust does not grow.
        s.record_pending(leader, t0 + ms(3000), None, ms(100), "Status");
        s.set_cpu_stalled(ms(20_000));
        assert!(matches!(
            s.reading(leader, t0 + ms(3101)).value.clone().unwrap_err(),
            Unknown::Outdated { trust, .. } if trust == ms(100)
        ));
    }

    #[test]
    fn wall_times_come_from_the_runtimes_clock_not_the_stores() {
        let (c, s) = store();
        let id = c.id("leader");
        let t0 = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        s.record_ok(id, Value::Bool(true), t0 + Duration::from_secs(2));
        let last_good = |s: &SignalStore| s.snapshot(t0).remove(id.index()).last_good_wall;
        assert_eq!(last_good(&s), None, "no wall clock given yet");
        s.set_wall_clock(t0, wall);
        assert_eq!(last_good(&s), Some(wall + Duration::from_secs(2)));
        // The wall clock stepped back an hour: shown from the next pair on.
        s.set_wall_clock(
            t0 + Duration::from_secs(5),
            wall - Duration::from_secs(3600),
        );
        assert_eq!(
            last_good(&s),
            Some(wall - Duration::from_secs(3603)),
            "2 s after t0 is 3 s before the last pair"
        );
    }

    #[test]
    fn read_into_reuses_the_buffer() {
        let (c, mut s) = store();
        let mut buf = Vec::new();
        s.read_into(Instant::now(), &mut buf);
        assert_eq!(buf.len(), c.len());
        let cap = buf.capacity();
        s.read_into(Instant::now(), &mut buf);
        assert_eq!(buf.capacity(), cap);
        // Reading some signals gives what reading all gives for those.
        let (leader, qget) = (c.id("leader"), c.id("qget_ms"));
        let t0 = Instant::now();
        s.record_ok(leader, Value::Bool(true), t0);
        s.record_err(qget, Arc::from("timed out"), t0);
        let mut all = Vec::new();
        s.read_into(t0, &mut all);
        let mut some = vec![Reading::NEVER; c.len()];
        s.read_some_into(&[leader, qget], t0, &mut some);
        assert_eq!(some, all);
    }

    #[test]
    fn recording_through_exclusive_access_is_recording_through_the_lock() {
        let (c, locked) = store();
        let (_, mut owned) = store();
        let (leader, qget) = (c.id("leader"), c.id("qget_ms"));
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let why: Arc<str> = Arc::from("timed out");
        let trust = Duration::from_millis(300);
        for s in [&locked, &owned] {
            s.set_staleness(qget, Duration::from_secs(2));
            s.set_cpu_stalled(Duration::from_millis(40));
            s.record_pending(qget, at(0), Some(1000.0), trust, "read");
        }
        let steps: [(SignalId, Result<Value, Arc<str>>, u64); 6] = [
            (qget, Ok(Value::Num(12.0)), 100),
            (leader, Ok(Value::Bool(true)), 100),
            (qget, Err(why.clone()), 1100),
            (qget, Ok(Value::Num(f64::NAN)), 1200),
            (qget, Ok(Value::Num(7.0)), 1300),
            (leader, Err(why), 4000),
        ];
        let ids = [leader, qget];
        let (mut a, mut b) = (Vec::new(), vec![Reading::NEVER; c.len()]);
        for (id, sample, ms) in steps {
            match sample.clone() {
                Ok(v) => locked.record_ok(id, v, at(ms)),
                Err(e) => locked.record_err(id, e, at(ms)),
            }
            owned.record_owned(id, sample, at(ms));
            for later in [0, 500, 2500] {
                locked.read_into(at(ms + later), &mut a);
                owned.read_some_into(&ids, at(ms + later), &mut b);
                for id in ids {
                    assert_eq!(a[id.index()], b[id.index()], "{ms} + {later} ms");
                }
            }
        }
        // Pending and stale readings too, rewritten in place over known ones.
        for s in [&locked, &owned] {
            s.record_pending(qget, at(5000), Some(1000.0), trust, "read");
        }
        locked.read_into(at(5400), &mut a);
        owned.read_some_into(&ids, at(5400), &mut b);
        assert!(a[qget.index()].pending.is_some(), "{:?}", a[qget.index()]);
        assert_eq!(a[qget.index()], b[qget.index()]);
        assert_eq!(a[leader.index()], b[leader.index()]);
    }
}
