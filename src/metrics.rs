//! Metrics: the exporter's own metric families, registered into one
//! prometheus-client [`Registry`], and the two text expositions
//! (OpenMetrics 1.0.0 and Prometheus text 0.0.4). Each component registers its
//! own families (`fn register(&mut Registry) -> Self`, as linkerd does): the
//! engine's families live in [`EngineMetrics`], the samplers' in
//! [`crate::sources::SourceMetrics`], the HTTP layer's in [`HttpMetrics`], the
//! process' in [`ProcessCollector`]. Build the registry with [`Metrics::new`],
//! let other components register into [`Metrics::registry_mut`], then freeze
//! it with [`Metrics::finish`] before serving.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::signals::{Catalogue, SignalStore, Unknown};
use crate::sources::SourceMetrics;
use crate::verdict::{CheckKind, CheckState, Verdict};

pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    rustc: String,
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
    exported_checks: Arc<Mutex<HashSet<(String, CheckKind)>>>,
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
        let mut exported = self
            .exported_checks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let current: HashSet<(String, CheckKind)> = verdict
            .checks
            .iter()
            .map(|c| (c.name.clone(), c.kind))
            .collect();
        for (name, kind) in exported.difference(&current) {
            self.remove_check(name, *kind);
        }
        *exported = current;
        for c in &verdict.checks {
            self.check_passing
                .get_or_create(&CheckKindLabels {
                    check: c.name.clone(),
                    kind: kind_label(c.kind).to_string(),
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
            self.check_in_state
                .get_or_create(&CheckLabels {
                    check: c.name.clone(),
                })
                .set(c.in_state_for.as_secs_f64());
        }
        for info in store.snapshot(now) {
            if !catalogue.is_enabled(info.id) {
                continue;
            }
            let def = catalogue.get(info.id);
            let labels = SignalLabels {
                signal: def.name.clone(),
                source: def.source.label(),
            };
            match info.reading.value {
                Some(v) => {
                    self.signal_value.get_or_create(&labels).set(v.as_f64());
                }
                None => {
                    self.signal_value.remove(&labels);
                }
            }
            self.signal_known
                .get_or_create(&labels)
                .set(i64::from(info.reading.unknown == Unknown::No));
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
            kind: kind_label(kind).to_string(),
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

fn kind_label(k: CheckKind) -> &'static str {
    match k {
        CheckKind::Check => "check",
        CheckKind::Warn => "warn",
    }
}

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
        HttpMetrics {
            requests,
            duration,
            connections,
        }
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

/// Process metrics read from `/proc/self` at each scrape.
#[derive(Debug)]
pub struct ProcessCollector {
    start_time: f64,
}

impl ProcessCollector {
    pub fn register(registry: &mut Registry) {
        let start_time =
            process_start_time().unwrap_or_else(|| crate::verdict::unix_seconds(SystemTime::now()));
        registry.register_collector(Box::new(ProcessCollector { start_time }));
    }
}

impl prometheus_client::collector::Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stat = read_stat();
        if let Some(cpu) = stat.as_ref().map(|s| s.cpu_seconds) {
            let c = ConstCounter::new(cpu);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                c.metric_type(),
            )?)?;
        }
        if let Some(rss) = stat.as_ref().map(|s| s.rss_bytes) {
            let g = ConstGauge::new(rss);
            g.encode(encoder.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                None,
                g.metric_type(),
            )?)?;
        }
        let g = ConstGauge::new(self.start_time);
        g.encode(encoder.encode_descriptor(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            None,
            g.metric_type(),
        )?)?;
        Ok(())
    }
}

struct ProcStat {
    cpu_seconds: f64,
    rss_bytes: f64,
    start_ticks: f64,
}

/// Clock ticks per second; 100 on every Linux we run on (USER_HZ).
const TICKS: f64 = 100.0;
const PAGE: f64 = 4096.0;

fn read_stat() -> Option<ProcStat> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name is in parentheses and may contain spaces: split after it.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields from 3 (state) on: utime=14, stime=15, starttime=22, rss=24 (1-based in proc(5)).
    let get = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    Some(ProcStat {
        cpu_seconds: (get(14)? + get(15)?) / TICKS,
        start_ticks: get(22)?,
        rss_bytes: get(24)? * PAGE,
    })
}

fn process_start_time() -> Option<f64> {
    let stat = read_stat()?;
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
    Some(boot + stat.start_ticks / TICKS)
}

/// The registry under construction plus the exporter's own families.
pub struct Metrics {
    registry: Registry,
    pub engine: EngineMetrics,
    pub sources: SourceMetrics,
    pub http: HttpMetrics,
}

impl Metrics {
    /// A registry with every family of the engine, sources, HTTP layer, process
    /// and build info.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let engine = EngineMetrics::register(&mut registry);
        let sources = SourceMetrics::register(&mut registry);
        let http = HttpMetrics::register(&mut registry);
        ProcessCollector::register(&mut registry);
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
                rustc: env!("ERE_RUSTC_VERSION").to_string(),
            })
            .set(1);
        registry.register(
            "etcd_readiness_build_info",
            "Build information; value 1",
            build,
        );
        Metrics {
            registry,
            engine,
            sources,
            http,
        }
    }

    /// For other components (e.g. the policy reloader) to register their own
    /// families before serving.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Freeze the registry for serving.
    pub fn finish(self) -> (Arc<Registry>, EngineMetrics, SourceMetrics, HttpMetrics) {
        (
            Arc::new(self.registry),
            self.engine,
            self.sources,
            self.http,
        )
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The exposition format a scraper asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Text004,
}

impl Format {
    /// OpenMetrics when the `Accept` header names it, else text 0.0.4.
    pub fn from_accept(accept: Option<&str>) -> Self {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text004,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Text004 => TEXT_CONTENT_TYPE,
        }
    }
}

/// Encode `registry` in `format`.
pub fn encode(registry: &Registry, format: Format) -> String {
    let mut om = String::with_capacity(16 * 1024);
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut om, registry);
    match format {
        Format::OpenMetrics => om,
        Format::Text004 => openmetrics_to_text004(&om),
    }
}

/// Derive Prometheus text 0.0.4 from prometheus-client's OpenMetrics output:
/// counter families are named with `_total` in `# HELP`/`# TYPE` (samples
/// already carry it), `# UNIT`, `_created` samples and `# EOF` are dropped,
/// and the OpenMetrics-only types `info`, `stateset`, `gaugehistogram` and
/// `unknown` become `gauge`/`untyped`.
pub fn openmetrics_to_text004(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut counters: HashSet<String> = HashSet::new();
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.splitn(2, ' ');
            let (name, ty) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if ty == "counter" {
                counters.insert(name.to_string());
            }
        }
    }
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
        {
            let kw = &line[..7];
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = if counters.contains(name) && !name.ends_with("_total") {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            let tail = if kw == "# TYPE " {
                match tail {
                    "info" | "stateset" => "gauge",
                    "gaugehistogram" => "histogram",
                    "unknown" => "untyped",
                    t => t,
                }
            } else {
                tail
            };
            out.push_str(kw);
            out.push_str(&name);
            out.push(' ');
            out.push_str(tail);
            out.push('\n');
            continue;
        }
        let metric = line.split(['{', ' ']).next().unwrap_or("");
        if let Some(base) = metric.strip_suffix("_created")
            && counters.contains(base)
        {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text004_names_counters_with_total_and_drops_eof() {
        let mut r = Registry::default();
        let c: Counter = Counter::default();
        c.inc();
        r.register("demo_flips", "Flips", c);
        let om = encode(&r, Format::OpenMetrics);
        assert!(om.contains("# TYPE demo_flips counter\n"), "{om}");
        assert!(om.ends_with("# EOF\n"));
        let text = encode(&r, Format::Text004);
        assert_eq!(
            text,
            "# HELP demo_flips_total Flips.\n# TYPE demo_flips_total counter\ndemo_flips_total 1\n"
        );
    }

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
            "# TYPE etcd_readiness_http_connections_evicted_total counter\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
    }

    #[test]
    fn proc_stat_is_readable() {
        let s = read_stat().expect("/proc/self/stat");
        assert!(s.rss_bytes > 0.0);
        assert!(process_start_time().unwrap() > 1.0e9);
    }
}
