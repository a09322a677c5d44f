//! The three families every reloaded file exports, in one type: whether the
//! last reload attempt worked (`PREFIX_last_reload_successful`), when a load
//! last did (`PREFIX_last_reload_success_timestamp_seconds`) and reloads by
//! result (`PREFIX_reloads_total{result}`, both results present from the
//! start so `rate()` sees the first failure). The policy file
//! (`etcd_readiness_policy`) and the web config (`etcd_readiness_web_config`)
//! each own one.

use std::sync::atomic::AtomicU64;
use std::time::SystemTime;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

const SUCCESS: ResultLabels = ResultLabels { result: "success" };
const FAILURE: ResultLabels = ResultLabels { result: "failure" };

/// The help texts of the three families, in the order they are registered.
pub struct Help {
    pub successful: &'static str,
    pub timestamp: &'static str,
    pub reloads: &'static str,
}

/// A reloaded file's status families. Cheap to clone (shared atomics).
#[derive(Clone, Debug, Default)]
pub struct ReloadStatus {
    last_successful: Gauge,
    last_success_timestamp: Gauge<f64, AtomicU64>,
    reloads: Family<ResultLabels, Counter>,
}

impl ReloadStatus {
    /// Register the three families as `PREFIX_…` in `registry` (the root
    /// registry: `prefix` is the full name's start).
    pub fn register(registry: &mut Registry, prefix: &str, help: Help) -> ReloadStatus {
        let m = ReloadStatus::default();
        registry.register(
            format!("{prefix}_last_reload_successful"),
            help.successful,
            m.last_successful.clone(),
        );
        registry.register(
            format!("{prefix}_last_reload_success_timestamp_seconds"),
            help.timestamp,
            m.last_success_timestamp.clone(),
        );
        registry.register(format!("{prefix}_reloads"), help.reloads, m.reloads.clone());
        let _ = m.reloads.get_or_create(&SUCCESS);
        let _ = m.reloads.get_or_create(&FAILURE);
        m
    }

    /// A load succeeded at `wall`; `count` it as a reload (not for the
    /// start-up load).
    pub fn mark_success(&self, count: bool, wall: SystemTime) {
        self.last_successful.set(1);
        self.last_success_timestamp
            .set(etcd_readiness_policy::verdict::unix_seconds(wall));
        if count {
            self.reloads.get_or_create(&SUCCESS).inc();
        }
    }

    /// A reload attempt failed; what was in force stays.
    pub fn mark_failure(&self) {
        self.last_successful.set(0);
        self.reloads.get_or_create(&FAILURE).inc();
    }

    /// Whether the last reload attempt succeeded.
    pub fn last_reload_successful(&self) -> bool {
        self.last_successful.get() == 1
    }

    /// Reloads counted with `result` `"success"` or `"failure"`.
    pub fn reloads(&self, success: bool) -> u64 {
        self.reloads
            .get_or_create(if success { &SUCCESS } else { &FAILURE })
            .get()
    }
}
