//! The web configuration's metric families: whether the last reload of
//! `--web.config.file` worked, when one last did, reloads by result, and
//! requests refused by the main listener's guard (by reason).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::reload_status::{Help, ReloadStatus};

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
    /// No place in the bcrypt queue for this client (429, `Retry-After`).
    AuthBusy,
}

/// Cheap to clone (handles to shared atomics).
#[derive(Clone, Debug, Default)]
pub struct WebMetrics {
    status: ReloadStatus,
    refused: Family<ReasonLabels, Counter>,
    /// The serving certificate's notBefore / notAfter (Unix seconds; 0
    /// without TLS).
    cert_not_before: Gauge,
    cert_not_after: Gauge,
}

impl WebMetrics {
    /// Register under their full names (`etcd_readiness_web_*`).
    pub fn register(registry: &mut Registry) -> WebMetrics {
        let status = ReloadStatus::register(
            registry,
            "etcd_readiness_web_config",
            Help {
                successful: "Whether the last reload of --web.config.file (and the certificates it names) succeeded (1) or failed (0)",
                timestamp: "Unix time of the last successful load or reload of --web.config.file",
                reloads: "Reloads of --web.config.file that changed or failed to change the configuration in force, by result",
            },
        );
        let m = WebMetrics {
            status,
            refused: Family::default(),
            cert_not_before: Gauge::default(),
            cert_not_after: Gauge::default(),
        };
        registry.register(
            "etcd_readiness_web_tls_certificate_not_before_seconds",
            "notBefore of the main listener's serving certificate in force, Unix seconds (0 without TLS)",
            m.cert_not_before.clone(),
        );
        registry.register(
            "etcd_readiness_web_tls_certificate_not_after_seconds",
            "notAfter of the main listener's serving certificate in force, Unix seconds (0 without TLS): alert on it minus time() below a margin",
            m.cert_not_after.clone(),
        );
        registry.register(
            "etcd_readiness_web_requests_refused",
            "Requests the main listener refused before routing, by reason (unauthorized, rate_limited, auth_busy: no place in the bcrypt queue for the client)",
            m.refused.clone(),
        );
        for reason in ["unauthorized", "rate_limited", "auth_busy"] {
            let _ = m.refused.get_or_create(&ReasonLabels { reason });
        }
        m
    }

    /// The reload status families ([`crate::reload::LastGood`] marks them).
    pub fn status(&self) -> &ReloadStatus {
        &self.status
    }

    /// The validity of the certificate now in force.
    pub(super) fn certificate(&self, validity: Option<crate::outside::certificate::Validity>) {
        let (b, a) = validity.map_or((0, 0), |v| (v.not_before, v.not_after));
        self.cert_not_before.set(b);
        self.cert_not_after.set(a);
    }

    /// notAfter of the certificate in force (0 without TLS).
    pub fn certificate_not_after(&self) -> i64 {
        self.cert_not_after.get()
    }

    pub(super) fn refused(&self, why: Refusal) {
        let reason = match why {
            Refusal::Unauthorized => "unauthorized",
            Refusal::RateLimited => "rate_limited",
            Refusal::AuthBusy => "auth_busy",
        };
        self.refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Whether the last reload attempt succeeded.
    pub fn last_reload_successful(&self) -> bool {
        self.status.last_reload_successful()
    }

    /// Reloads counted with `result` `"success"` or `"failure"`.
    pub fn reloads(&self, success: bool) -> u64 {
        self.status.reloads(success)
    }
}
