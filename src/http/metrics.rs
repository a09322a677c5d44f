//! The HTTP layer's metric families: requests and their latency per handler
//! ([`HttpMetrics`]), and the server's connection families
//! ([`ConnectionMetrics`]: open, cap, accepted, evicted, rejected, timed out,
//! accept errors, failed TLS handshakes), and the long polls'
//! (`longpoll::LongPollMetrics`). Registered with [`HttpMetrics::register`].

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandlerCodeLabels {
    handler: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandlerLabels {
    handler: String,
}

/// `etcd_readiness_http_requests_total{handler,code}`,
/// `etcd_readiness_http_request_duration_seconds{handler}` and the
/// connection families of [`ConnectionMetrics`].
#[derive(Clone, Debug)]
pub struct HttpMetrics {
    requests: Family<HandlerCodeLabels, Counter>,
    duration: Family<HandlerLabels, Histogram>,
    connections: ConnectionMetrics,
    long_polls: super::longpoll::LongPollMetrics,
}

impl HttpMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let requests = Family::<HandlerCodeLabels, Counter>::default();
        let duration = Family::<HandlerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
            ])
        });
        registry.register(
            "etcd_readiness_http_requests",
            "HTTP requests served, by handler and status code",
            requests.clone(),
        );
        registry.register(
            "etcd_readiness_http_request_duration_seconds",
            "Time to answer an HTTP request, by handler",
            duration.clone(),
        );
        let connections = ConnectionMetrics::register(registry);
        let long_polls = super::longpoll::LongPollMetrics::register(registry);
        HttpMetrics {
            requests,
            duration,
            connections,
            long_polls,
        }
    }

    /// The long-poll families, for each listener's `longpoll::Holds`.
    pub fn long_polls(&self) -> super::longpoll::LongPollMetrics {
        self.long_polls.clone()
    }

    /// The connection families, for the server's accept loop.
    pub fn connections(&self) -> ConnectionMetrics {
        self.connections.clone()
    }

    pub fn observe(&self, handler: &str, code: u16, took: Duration) {
        self.requests
            .get_or_create(&HandlerCodeLabels {
                handler: handler.to_string(),
                code: code.to_string(),
            })
            .inc();
        self.duration
            .get_or_create(&HandlerLabels {
                handler: handler.to_string(),
            })
            .observe(took.as_secs_f64());
    }
}

/// Which timeout closed a connection.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum TimeoutPhase {
    /// A request head did not arrive in time (slowloris, silent clients).
    Header,
    /// No request for the idle timeout.
    Idle,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

/// The HTTP server's connection families: open connections and the cap,
/// accepted, evicted (closed to admit a new one at the cap), rejected (at the
/// cap with every connection busy), timed out, and accept errors.
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    open: Gauge,
    limit: Gauge,
    accepted: Counter,
    evicted: Counter,
    rejected: Counter,
    timed_out: Family<PhaseLabels, Counter>,
    accept_errors: Counter,
    tls_handshake_failures: Counter,
}

impl ConnectionMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = ConnectionMetrics::default();
        registry.register(
            "etcd_readiness_http_connections",
            "HTTP connections open now",
            m.open.clone(),
        );
        registry.register(
            "etcd_readiness_http_connections_limit",
            "Most HTTP connections held open at once (--web.max-connections, kept below RLIMIT_NOFILE)",
            m.limit.clone(),
        );
        registry.register(
            "etcd_readiness_http_connections_accepted",
            "HTTP connections accepted",
            m.accepted.clone(),
        );
        registry.register(
            "etcd_readiness_http_connections_evicted",
            "Idle or slow HTTP connections closed to admit a new one at the connection limit",
            m.evicted.clone(),
        );
        registry.register(
            "etcd_readiness_http_connections_rejected",
            "HTTP connections closed at accept because the limit was reached and every connection was answering a request",
            m.rejected.clone(),
        );
        registry.register(
            "etcd_readiness_http_connections_timed_out",
            "HTTP connections closed by the header-read (phase=header) or idle (phase=idle) timeout",
            m.timed_out.clone(),
        );
        registry.register(
            "etcd_readiness_http_accept_errors",
            "Failed accepts (e.g. EMFILE)",
            m.accept_errors.clone(),
        );
        registry.register(
            "etcd_readiness_http_tls_handshake_failures",
            "Connections to the TLS listener closed before a request: failed handshakes (no or untrusted client certificate, protocol mismatch) and plain HTTP sent to the TLS port",
            m.tls_handshake_failures.clone(),
        );
        for phase in ["header", "idle"] {
            let _ = m.timed_out.get_or_create(&PhaseLabels {
                phase: phase.to_string(),
            });
        }
        m
    }

    pub fn set_limit(&self, cap: usize) {
        self.limit.set(i64::try_from(cap).unwrap_or(i64::MAX));
    }

    pub fn opened(&self) {
        self.accepted.inc();
        self.open.inc();
    }

    pub fn closed(&self) {
        self.open.dec();
    }

    pub fn evicted(&self) {
        self.evicted.inc();
    }

    pub fn rejected(&self) {
        self.rejected.inc();
    }

    pub fn accept_error(&self) {
        self.accept_errors.inc();
    }

    pub fn tls_handshake_failed(&self) {
        self.tls_handshake_failures.inc();
    }

    pub fn timed_out(&self, phase: TimeoutPhase) {
        let phase = match phase {
            TimeoutPhase::Header => "header",
            TimeoutPhase::Idle => "idle",
        };
        self.timed_out
            .get_or_create(&PhaseLabels {
                phase: phase.to_string(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Format, encode};

    #[test]
    fn connection_families_expose_exact_lines() {
        let mut r = Registry::default();
        let m = ConnectionMetrics::register(&mut r);
        m.set_limit(896);
        m.opened();
        m.opened();
        m.closed();
        m.evicted();
        m.rejected();
        m.accept_error();
        m.tls_handshake_failed();
        m.timed_out(TimeoutPhase::Header);
        let text = encode(&r, Format::Text004);
        for line in [
            "etcd_readiness_http_connections 1\n",
            "etcd_readiness_http_connections_limit 896\n",
            "etcd_readiness_http_connections_accepted_total 2\n",
            "etcd_readiness_http_connections_evicted_total 1\n",
            "etcd_readiness_http_connections_rejected_total 1\n",
            "etcd_readiness_http_connections_timed_out_total{phase=\"header\"} 1\n",
            "etcd_readiness_http_connections_timed_out_total{phase=\"idle\"} 0\n",
            "etcd_readiness_http_accept_errors_total 1\n",
            "etcd_readiness_http_tls_handshake_failures_total 1\n",
            "# TYPE etcd_readiness_http_connections_evicted_total counter\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
    }
}
