//! The evaluation loop's metric families — readiness, each check's state and
//! transitions, each signal's value, knownness and age — registered by the
//! engine's owner with [`EngineMetrics::register`] and updated after every
//! evaluation (every 20 ms while a read is pending): through series handles
//! kept between evaluations ([`Handles`]), so that an evaluation hashes no
//! label set and allocates no label string unless the checks, the signals
//! or a series' presence changed.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use etcd_readiness_policy::signals::{Catalogue, Reading};
use etcd_readiness_policy::sync::TolerantLock;
use etcd_readiness_policy::verdict::{CheckKind, CheckReport, CheckState, Verdict};

type GaugeF = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckKindLabels {
    check: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckStateLabels {
    check: String,
    state: String,
}

/// The one export of checks' states (`…_check_state{check,state}`, 1 for
/// the state a check is in, else 0), the live policy's and the
/// candidate's: between reloads the checks are the same, in the same
/// order, so only a state that changed is written; after a change of the
/// checks, every one is, and the series of a check gone are removed.
#[derive(Clone, Debug, Default)]
pub(super) struct StateGauges {
    family: Family<CheckStateLabels, Gauge>,
    /// The checks exported, in the verdict's order, with the state last
    /// written to their gauges.
    exported: Arc<Mutex<Vec<(String, CheckKind, CheckState)>>>,
}

impl StateGauges {
    /// Register the family as `name`.
    pub(super) fn register_as(&self, registry: &mut Registry, name: &str, help: &str) {
        registry.register(name, help, self.family.clone());
    }

    /// Export `checks`; `changed` is told of each check whose state was
    /// written, `gone` of each check removed (name and kind).
    pub(super) fn update(
        &self,
        checks: &[CheckReport],
        mut changed: impl FnMut(&CheckReport),
        mut gone: impl FnMut(&str, CheckKind),
    ) {
        let mut exported = self.exported.locked();
        let same_checks = exported.len() == checks.len()
            && exported
                .iter()
                .zip(checks)
                .all(|((n, k, _), c)| *n == c.name && *k == c.kind);
        if !same_checks {
            let current: HashSet<(&str, CheckKind)> =
                checks.iter().map(|c| (c.name.as_str(), c.kind)).collect();
            for (name, kind, _) in exported.iter() {
                if !current.contains(&(name.as_str(), *kind)) {
                    for s in CheckState::ALL {
                        self.family.remove(&CheckStateLabels {
                            check: name.clone(),
                            state: s.as_str().to_string(),
                        });
                    }
                    gone(name, *kind);
                }
            }
            *exported = Vec::new();
        }
        for (i, c) in checks.iter().enumerate() {
            match exported.get_mut(i) {
                Some(e) if e.2 == c.state => continue,
                Some(e) => e.2 = c.state,
                None => exported.push((c.name.clone(), c.kind, c.state)),
            }
            for s in CheckState::ALL {
                self.family
                    .get_or_create(&CheckStateLabels {
                        check: c.name.clone(),
                        state: s.as_str().to_string(),
                    })
                    .set(i64::from(c.state == s));
            }
            changed(c);
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    check: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignalLabels {
    signal: String,
    source: String,
}

/// A series that an evaluation may remove (a signal's value while unknown,
/// its age before a good sample): its handle while it is exported, or
/// whether it is known to be absent.
#[derive(Clone, Debug, Default)]
enum Series {
    /// Not known: the family may or may not hold it.
    #[default]
    Unsure,
    /// Removed from the family by this cache, and not created since.
    Absent,
    /// In the family, written through this handle; the value last written.
    Present(GaugeF, f64),
}

impl Series {
    /// Export `value` (create the series if needed, write it only if it
    /// changed), or remove the series while there is none; the family is
    /// looked up only when the presence changes.
    fn put(
        &mut self,
        family: &Family<SignalLabels, GaugeF>,
        labels: &SignalLabels,
        value: Option<f64>,
    ) {
        match (value, &*self) {
            (Some(v), Series::Present(g, last)) => {
                if v.to_bits() != last.to_bits() {
                    g.set(v);
                    *self = Series::Present(g.clone(), v);
                }
            }
            (Some(v), _) => {
                let g = family.get_or_create(labels).clone();
                g.set(v);
                *self = Series::Present(g, v);
            }
            (None, Series::Absent) => {}
            (None, _) => {
                family.remove(labels);
                *self = Series::Absent;
            }
        }
    }
}

/// One check's per-evaluation series, for the check named `name` of kind
/// `kind` (the verdict's check at the same position).
#[derive(Debug)]
struct CheckHandles {
    name: String,
    kind: CheckKind,
    in_state: GaugeF,
}

/// One enabled signal's series: its index in the catalogue (and the
/// readings), its labels, its knownness gauge with the value last written.
#[derive(Debug)]
struct SignalHandles {
    index: usize,
    labels: SignalLabels,
    known: Gauge,
    known_last: i64,
    value: Series,
    age: Series,
}

/// The handles of the enabled signals of one catalogue, by index.
#[derive(Debug)]
struct SignalSet {
    /// The catalogue they were made for, kept (so that no other takes its
    /// address while the set is in use).
    catalogue: Arc<Catalogue>,
    signals: Vec<SignalHandles>,
}

/// The series handles kept between evaluations. A handle stays valid
/// while its series is in the family; the checks' are rebuilt when the
/// verdict's checks (names, kinds, order) differ from those they were
/// made for, and dropped when a check's series are removed; the signals'
/// when the catalogue is another.
#[derive(Debug, Default)]
struct Handles {
    checks: Vec<CheckHandles>,
    signals: Option<SignalSet>,
}

/// Families the evaluation loop updates after every evaluation.
#[derive(Clone, Debug)]
pub struct EngineMetrics {
    ready: Gauge,
    check_passing: Family<CheckKindLabels, Gauge>,
    check_state: StateGauges,
    check_in_state: Family<CheckLabels, GaugeF>,
    transitions: Counter,
    check_transitions: Family<CheckLabels, Counter>,
    signal_value: Family<SignalLabels, GaugeF>,
    signal_known: Family<SignalLabels, Gauge>,
    signal_age: Family<SignalLabels, GaugeF>,
    handles: Arc<Mutex<Handles>>,
}
impl EngineMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = EngineMetrics {
            ready: Gauge::default(),
            check_passing: Family::default(),
            check_state: StateGauges::default(),
            check_in_state: Family::default(),
            transitions: Counter::default(),
            check_transitions: Family::default(),
            signal_value: Family::default(),
            signal_known: Family::default(),
            signal_age: Family::default(),
            handles: Arc::default(),
        };
        registry.register(
            "etcd_readiness_ready",
            "1 when the member is ready by the policy, else 0",
            m.ready.clone(),
        );
        registry.register(
            "etcd_readiness_check_passing",
            "1 when the check passes, else 0 (kind=warn never affects readiness)",
            m.check_passing.clone(),
        );
        m.check_state.register_as(
            registry,
            "etcd_readiness_check_state",
            "1 for the check's current state (pass, fail or unknown), else 0",
        );
        registry.register(
            "etcd_readiness_check_in_state_seconds",
            "How long the check has been in its current state",
            m.check_in_state.clone(),
        );
        registry.register(
            "etcd_readiness_transitions",
            "Readiness flips since start",
            m.transitions.clone(),
        );
        registry.register(
            "etcd_readiness_check_transitions",
            "State changes of a check since start",
            m.check_transitions.clone(),
        );
        registry.register(
            "etcd_readiness_signal_value",
            "Current value of a signal (bools 0/1, durations in seconds); absent while unknown",
            m.signal_value.clone(),
        );
        registry.register(
            "etcd_readiness_signal_known",
            "1 when the signal's value is known, else 0",
            m.signal_known.clone(),
        );
        registry.register(
            "etcd_readiness_signal_age_seconds",
            "Time since the signal's last good sample",
            m.signal_age.clone(),
        );
        m
    }

    /// Count one readiness flip.
    pub fn readiness_transition(&self) {
        self.transitions.inc();
    }

    /// Count one state change of `check`.
    pub fn check_transition(&self, check: &str) {
        self.check_transitions
            .get_or_create(&CheckLabels {
                check: check.to_string(),
            })
            .inc();
    }

    /// Mirror a verdict and the readings it was evaluated on (one per
    /// signal of `catalogue`, by index) into the gauges.
    pub fn update(&self, verdict: &Verdict, readings: &[Reading], catalogue: &Arc<Catalogue>) {
        self.ready.set(i64::from(verdict.ready));
        let mut handles = self.handles.locked();
        self.update_checks(&mut handles.checks, verdict);
        self.update_signals(&mut handles.signals, readings, catalogue);
    }

    /// The checks' gauges; those of a check no longer in the policy removed.
    fn update_checks(&self, handles: &mut Vec<CheckHandles>, verdict: &Verdict) {
        let same_checks = handles.len() == verdict.checks.len()
            && handles
                .iter()
                .zip(&verdict.checks)
                .all(|(h, c)| h.name == c.name && h.kind == c.kind);
        if !same_checks {
            *handles = verdict
                .checks
                .iter()
                .map(|c| CheckHandles {
                    name: c.name.clone(),
                    kind: c.kind,
                    in_state: self
                        .check_in_state
                        .get_or_create(&CheckLabels {
                            check: c.name.clone(),
                        })
                        .clone(),
                })
                .collect();
        }
        for (h, c) in handles.iter().zip(&verdict.checks) {
            h.in_state.set(c.in_state_for.as_secs_f64());
        }
        let mut removed = false;
        self.check_state.update(
            &verdict.checks,
            |c| {
                self.check_passing
                    .get_or_create(&CheckKindLabels {
                        check: c.name.clone(),
                        kind: c.kind.as_str().to_string(),
                    })
                    .set(i64::from(c.state == CheckState::Pass));
            },
            |name, kind| {
                self.remove_check(name, kind);
                removed = true;
            },
        );
        // A check that changed kind keeps its name: its series just
        // removed are those of a handle kept above. Made anew (and so
        // exported again) at the next evaluation, as the family's lookup
        // at every evaluation did.
        if removed {
            handles.clear();
        }
    }

    /// Each enabled signal's value (absent while unknown), whether it is
    /// known, and the age of its last good sample; each written only when
    /// it changed.
    fn update_signals(
        &self,
        set: &mut Option<SignalSet>,
        readings: &[Reading],
        catalogue: &Arc<Catalogue>,
    ) {
        let set = match set {
            Some(s) if Arc::ptr_eq(&s.catalogue, catalogue) => s,
            _ => set.insert(self.signal_set(catalogue)),
        };
        for h in &mut set.signals {
            let Some(reading) = readings.get(h.index) else {
                continue;
            };
            let value = reading.get().map(|v| v.as_f64());
            h.value.put(&self.signal_value, &h.labels, value);
            let known = i64::from(reading.value.is_ok());
            if known != h.known_last {
                h.known.set(known);
                h.known_last = known;
            }
            let age = reading.last_good_age.map(|a| a.as_secs_f64());
            h.age.put(&self.signal_age, &h.labels, age);
        }
    }

    /// The handles of `catalogue`'s enabled signals: their knownness
    /// series created (they are always exported); their values and ages
    /// as found at the first write.
    fn signal_set(&self, catalogue: &Arc<Catalogue>) -> SignalSet {
        let signals = catalogue
            .iter()
            .filter(|(id, _)| catalogue.is_enabled(*id))
            .map(|(id, def)| {
                let labels = SignalLabels {
                    signal: def.name.clone(),
                    source: def.source.label(),
                };
                let known = self.signal_known.get_or_create(&labels).clone();
                SignalHandles {
                    index: id.index(),
                    known_last: known.get(),
                    known,
                    labels,
                    value: Series::Unsure,
                    age: Series::Unsure,
                }
            })
            .collect();
        SignalSet {
            catalogue: catalogue.clone(),
            signals,
        }
    }

    /// The series of a check no longer in the policy but its states'
    /// ([`StateGauges`] removes those).
    fn remove_check(&self, name: &str, kind: CheckKind) {
        self.check_passing.remove(&CheckKindLabels {
            check: name.to_string(),
            kind: kind.as_str().to_string(),
        });
        let l = CheckLabels {
            check: name.to_string(),
        };
        self.check_in_state.remove(&l);
        self.check_transitions.remove(&l);
    }
}
