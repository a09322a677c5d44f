//! The evaluation loop's metric families — readiness, each check's state and
//! transitions, each signal's value, knownness and age — registered by the
//! engine's owner with [`EngineMetrics::register`] and updated after every
//! evaluation.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use etcd_readiness_policy::signals::{Catalogue, SignalStore};
use etcd_readiness_policy::sync::TolerantLock;
use etcd_readiness_policy::verdict::{CheckKind, CheckState, Verdict};

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    check: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignalLabels {
    signal: String,
    source: String,
}

/// Families the evaluation loop updates after every evaluation.
#[derive(Clone, Debug)]
pub struct EngineMetrics {
    ready: Gauge,
    check_passing: Family<CheckKindLabels, Gauge>,
    check_state: Family<CheckStateLabels, Gauge>,
    check_in_state: Family<CheckLabels, GaugeF>,
    transitions: Counter,
    check_transitions: Family<CheckLabels, Counter>,
    signal_value: Family<SignalLabels, GaugeF>,
    signal_known: Family<SignalLabels, Gauge>,
    signal_age: Family<SignalLabels, GaugeF>,
    /// (check, kind) label sets currently exported, to drop those of checks a
    /// policy swap removed.
    /// The checks exported, in the verdict's order, with the state last
    /// written to their gauges.
    exported_checks: Arc<Mutex<Vec<(String, CheckKind, CheckState)>>>,
}

impl EngineMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = EngineMetrics {
            ready: Gauge::default(),
            check_passing: Family::default(),
            check_state: Family::default(),
            check_in_state: Family::default(),
            transitions: Counter::default(),
            check_transitions: Family::default(),
            signal_value: Family::default(),
            signal_known: Family::default(),
            signal_age: Family::default(),
            exported_checks: Arc::default(),
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
        registry.register(
            "etcd_readiness_check_state",
            "1 for the check's current state (pass, fail or unknown), else 0",
            m.check_state.clone(),
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

    /// Mirror a verdict and the store into the gauges.
    pub fn update(
        &self,
        verdict: &Verdict,
        store: &SignalStore,
        catalogue: &Catalogue,
        now: Instant,
    ) {
        self.ready.set(i64::from(verdict.ready));
        self.update_checks(verdict);
        self.update_signals(store, catalogue, now);
    }

    /// The checks' gauges; those of a check no longer in the policy removed.
    fn update_checks(&self, verdict: &Verdict) {
        let mut exported = self.exported_checks.locked();
        // Between reloads the checks are the same, in the same order: the
        // gauges of a check whose state did not change keep their values,
        // and only its time in the state is written.
        let same_checks = exported.len() == verdict.checks.len()
            && exported
                .iter()
                .zip(&verdict.checks)
                .all(|((n, k, _), c)| *n == c.name && *k == c.kind);
        if !same_checks {
            let current: HashSet<(&str, CheckKind)> = verdict
                .checks
                .iter()
                .map(|c| (c.name.as_str(), c.kind))
                .collect();
            for (name, kind, _) in exported.iter() {
                if !current.contains(&(name.as_str(), *kind)) {
                    self.remove_check(name, *kind);
                }
            }
            *exported = Vec::new();
        }
        for (i, c) in verdict.checks.iter().enumerate() {
            self.check_in_state
                .get_or_create(&CheckLabels {
                    check: c.name.clone(),
                })
                .set(c.in_state_for.as_secs_f64());
            match exported.get_mut(i) {
                Some(e) if e.2 == c.state => continue,
                Some(e) => e.2 = c.state,
                None => exported.push((c.name.clone(), c.kind, c.state)),
            }
            self.check_passing
                .get_or_create(&CheckKindLabels {
                    check: c.name.clone(),
                    kind: c.kind.as_str().to_string(),
                })
                .set(i64::from(c.state == CheckState::Pass));
            for s in CheckState::ALL {
                self.check_state
                    .get_or_create(&CheckStateLabels {
                        check: c.name.clone(),
                        state: s.as_str().to_string(),
                    })
                    .set(i64::from(c.state == s));
            }
        }
    }

    /// Each enabled signal's value (absent while unknown), whether it is
    /// known, and the age of its last good sample.
    fn update_signals(&self, store: &SignalStore, catalogue: &Catalogue, now: Instant) {
        for info in store.snapshot(now) {
            if !catalogue.is_enabled(info.id) {
                continue;
            }
            let def = catalogue.get(info.id);
            let labels = SignalLabels {
                signal: def.name.clone(),
                source: def.source.label(),
            };
            match info.reading.get() {
                Some(v) => {
                    self.signal_value.get_or_create(&labels).set(v.as_f64());
                }
                None => {
                    self.signal_value.remove(&labels);
                }
            }
            self.signal_known
                .get_or_create(&labels)
                .set(i64::from(info.reading.value.is_ok()));
            match info.reading.last_good_age {
                Some(age) => {
                    self.signal_age
                        .get_or_create(&labels)
                        .set(age.as_secs_f64());
                }
                None => {
                    self.signal_age.remove(&labels);
                }
            }
        }
    }

    fn remove_check(&self, name: &str, kind: CheckKind) {
        self.check_passing.remove(&CheckKindLabels {
            check: name.to_string(),
            kind: kind.as_str().to_string(),
        });
        for s in CheckState::ALL {
            self.check_state.remove(&CheckStateLabels {
                check: name.to_string(),
                state: s.as_str().to_string(),
            });
        }
        let l = CheckLabels {
            check: name.to_string(),
        };
        self.check_in_state.remove(&l);
        self.check_transitions.remove(&l);
    }
}
