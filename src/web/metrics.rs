//! The web configuration's metric families: whether the last reload of
//! `--web.config.file` worked, when one last did, reloads by result, and
//! requests refused by the main listener's guard (by reason).

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Why the guard refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No or wrong basic-auth credentials (401).
    Unauthorized,
    /// Over `rate_limit` (429).
    RateLimited,
}

/// Cheap to clone (handles to shared atomics).
#[derive(Clone, Debug, Default)]
pub struct WebMetrics {
    last_successful: Gauge,
    last_success_timestamp: Gauge<f64, AtomicU64>,
    reloads: Family<ResultLabels, Counter>,
    refused: Family<ReasonLabels, Counter>,
}

const SUCCESS: ResultLabels = ResultLabels { result: "success" };
const FAILURE: ResultLabels = ResultLabels { result: "failure" };

impl WebMetrics {
    /// Register under their full names (`etcd_readiness_web_*`).
    pub fn register(registry: &mut Registry) -> WebMetrics {
        let m = WebMetrics::default();
        registry.register(
            "etcd_readiness_web_config_last_reload_successful",
            "Whether the last reload of --web.config.file (and the certificates it names) succeeded (1) or failed (0)",
            m.last_successful.clone(),
        );
        registry.register(
            "etcd_readiness_web_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful load or reload of --web.config.file",
            m.last_success_timestamp.clone(),
        );
        registry.register(
            "etcd_readiness_web_config_reloads",
            "Reloads of --web.config.file that changed or failed to change the configuration in force, by result",
            m.reloads.clone(),
        );
        registry.register(
            "etcd_readiness_web_requests_refused",
            "Requests the main listener refused before routing, by reason (unauthorized, rate_limited)",
            m.refused.clone(),
        );
        let _ = m.reloads.get_or_create(&SUCCESS);
        let _ = m.reloads.get_or_create(&FAILURE);
        for reason in ["unauthorized", "rate_limited"] {
            let _ = m.refused.get_or_create(&ReasonLabels { reason });
        }
        m
    }

    /// A load succeeded; `count` it as a reload (not the start-up load).
    pub(super) fn mark_success(&self, count: bool) {
        self.last_successful.set(1);
        self.last_success_timestamp
            .set(crate::verdict::unix_seconds(SystemTime::now()));
        if count {
            self.reloads.get_or_create(&SUCCESS).inc();
        }
    }

    pub(super) fn mark_failure(&self) {
        self.last_successful.set(0);
        self.reloads.get_or_create(&FAILURE).inc();
    }

    pub(super) fn refused(&self, why: Refusal) {
        let reason = match why {
            Refusal::Unauthorized => "unauthorized",
            Refusal::RateLimited => "rate_limited",
        };
        self.refused.get_or_create(&ReasonLabels { reason }).inc();
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
