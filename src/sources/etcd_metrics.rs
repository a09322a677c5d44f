//! The etcd metrics source (`--etcd.metrics-url`): this member's own
//! Prometheus endpoint (etcd's `--listen-metrics-urls`, or the client port's
//! `/metrics`), read each round with the one HTTP client and body reader of
//! the HTTP sources and the one Prometheus text parser, into three signals:
//! `defrag_inflight` (`etcd_disk_defrag_inflight`; measured on 3.4.23 and
//! 3.5.30),
//! `db_quota_ratio` (`etcd_mvcc_db_total_size_in_bytes` /
//! `etcd_server_quota_backend_bytes`) and `active_peers`
//! (`etcd_network_active_peers`, summed).
//!
//! What these numbers need that a generic scrape source cannot say: an
//! older 3.4 release without the defrag gauge leaves the signal unknown
//! naming its version, and the round is not an error (it is the version,
//! not a fault; on 3.5 a missing gauge is one); etcd creates the peer
//! gauges only when a peer connects (none = 0 peers); a quota of -1 means
//! "no quota". Any other absurd number (NaN, negative, a gauge that is not
//! 0 or 1) makes its signal unknown with the value, never a panic.

use std::sync::Arc;
use std::time::Duration;

use super::config::{Aggregate, SignalSpec};
use super::promtext::{self, Sample};
use super::scrape::extract;
use super::tls_material::{Credentials, HttpClient};
use super::{Pace, Reason, SampleError, Sampler};
use crate::outside::http_client::{self, SourceError, TlsFiles};
use crate::outside::redacted_url::RedactedUrl;
use crate::runtime::clock::Clock;
use etcd_readiness_policy::signals::{Builtin, Catalogue, SignalId, SignalStore, Source, Value};

/// Validated settings of the etcd metrics source.
#[derive(Clone, Debug)]
pub struct EtcdMetricsConfig {
    /// The URL to GET (`/metrics` added when the flag had no path).
    pub url: RedactedUrl,
    /// With an `https://` URL: the etcd source's `--etcd.cacert`,
    /// `--etcd.cert`, `--etcd.key` (the client port wants the same client
    /// certificate as the gRPC API); empty for `http://`.
    pub tls: TlsFiles,
    pub interval: Duration,
    pub timeout: Duration,
    /// Largest body read (`--source.max-body-bytes`).
    pub max_body_bytes: u64,
}

/// `--etcd.metrics-url` as written → the URL to GET: etcd's
/// `--listen-metrics-urls` value (`http://127.0.0.1:2381`) gets `/metrics`;
/// a URL with a path is taken as it is.
pub fn metrics_url(flag: &RedactedUrl) -> Result<RedactedUrl, SourceError> {
    let base = http_client::base_url(&flag.trimmed())?;
    let parsed = base
        .parse_http()
        .map_err(|e| SourceError::Invalid(format!("invalid URL `{base}`: {e}")))?;
    if parsed.has_empty_path() {
        Ok(base.join("/metrics"))
    } else {
        Ok(base)
    }
}

#[derive(Clone, Copy, Debug)]
struct Ids {
    defrag: SignalId,
    quota_ratio: SignalId,
    active_peers: SignalId,
}

/// Samples this member's metrics endpoint.
pub struct EtcdMetricsSampler {
    cfg: EtcdMetricsConfig,
    /// Rebuilt when the etcd TLS files change (an `https://` URL).
    http: HttpClient,
    ids: Ids,
}

impl EtcdMetricsSampler {
    /// (`_catalogue` is unused: built-in ids are the same in every
    /// catalogue, [`Builtin`].)
    pub fn new(cfg: EtcdMetricsConfig, catalogue: &Catalogue) -> Result<Self, SourceError> {
        let creds = if cfg.tls == TlsFiles::default() {
            None
        } else {
            Some(Credentials::load(
                super::tls_material::TlsKind::Etcd,
                &cfg.tls,
            )?)
        };
        EtcdMetricsSampler::with_credentials(cfg, creds, catalogue)
    }

    /// With the etcd source's `creds` (kept current by their reloader) for
    /// an `https://` URL.
    pub fn with_credentials(
        cfg: EtcdMetricsConfig,
        creds: Option<Credentials>,
        _catalogue: &Catalogue,
    ) -> Result<Self, SourceError> {
        http_client::base_url(&cfg.url)?;
        let http = HttpClient::new(creds, cfg.timeout)?;
        let ids = Ids {
            defrag: Builtin::DefragInflight.id(),
            quota_ratio: Builtin::DbQuotaRatio.id(),
            active_peers: Builtin::ActivePeers.id(),
        };
        Ok(EtcdMetricsSampler { cfg, http, ids })
    }
}

/// Why one signal of this source has no value: `fault` is false where the
/// member simply does not export it (etcd 3.4's missing defrag gauge),
/// which leaves the signal unknown without failing the round.
#[derive(Clone, Debug, PartialEq)]
pub struct Missing {
    pub reason: Reason,
    pub message: String,
    pub fault: bool,
}

impl Missing {
    fn fault(reason: Reason, message: impl Into<String>) -> Self {
        Missing {
            reason,
            message: message.into(),
            fault: true,
        }
    }
}

/// What one scrape of etcd's metrics says.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberMetrics {
    pub defrag_inflight: Result<bool, Missing>,
    pub db_quota_ratio: Result<f64, Missing>,
    pub active_peers: Result<f64, Missing>,
}

fn one(samples: &[Sample], metric: &str, aggregate: Aggregate) -> Result<f64, Missing> {
    let spec = SignalSpec {
        metric: metric.to_string(),
        labels: Default::default(),
        aggregate,
    };
    extract(samples, &spec).map_err(|e| Missing::fault(e.reason, e.message))
}

fn finite_non_negative(metric: &str, v: f64) -> Result<f64, Missing> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(Missing::fault(
            Reason::Parse,
            format!("{metric} is {v}, not a size"),
        ))
    }
}

/// Why `samples` are not etcd's metrics: etcd exports
/// `etcd_server_has_leader` on every version, so without it this is not
/// etcd's metrics endpoint, and every signal says so.
fn not_etcds(samples: &[Sample]) -> Option<Missing> {
    let etcds = samples.iter().any(|s| s.name == "etcd_server_has_leader");
    (!etcds).then(|| {
        Missing::fault(
            Reason::Mismatch,
            "no etcd_server_has_leader in the answer: is this etcd's metrics endpoint (--listen-metrics-urls)?",
        )
    })
}

/// Read the signals from a parsed scrape. Pure, for tests.
pub fn read_metrics(samples: &[Sample]) -> MemberMetrics {
    if let Some(m) = not_etcds(samples) {
        return MemberMetrics {
            defrag_inflight: Err(m.clone()),
            db_quota_ratio: Err(m.clone()),
            active_peers: Err(m),
        };
    }
    MemberMetrics {
        defrag_inflight: defrag_inflight(samples),
        db_quota_ratio: db_quota_ratio(samples),
        active_peers: active_peers(samples),
    }
}

/// `etcd_disk_defrag_inflight` as a bool; its absence explained by the
/// member's version (3.4 before 3.4.23 does not export it).
fn defrag_inflight(samples: &[Sample]) -> Result<bool, Missing> {
    if samples
        .iter()
        .any(|s| s.name == "etcd_disk_defrag_inflight")
    {
        return one(samples, "etcd_disk_defrag_inflight", Aggregate::Single).and_then(|v| {
            if v == 0.0 || v == 1.0 {
                Ok(v == 1.0)
            } else {
                Err(Missing::fault(
                    Reason::Parse,
                    format!("etcd_disk_defrag_inflight is {v}, not 0 or 1"),
                ))
            }
        });
    }
    let version = samples
        .iter()
        .find(|s| s.name == "etcd_server_version")
        .and_then(|s| s.label("server_version"))
        .unwrap_or("of unknown version");
    if version.starts_with("3.4.") || version.starts_with("3.3.") {
        Err(Missing {
            reason: Reason::Mismatch,
            message: format!(
                "etcd {version} does not export etcd_disk_defrag_inflight (3.4.23 and 3.5 do)"
            ),
            fault: false,
        })
    } else {
        Err(Missing::fault(
            Reason::Mismatch,
            format!("etcd {version} exports no etcd_disk_defrag_inflight"),
        ))
    }
}

/// The backend's size over its quota; no quota (negative) is not a fault.
fn db_quota_ratio(samples: &[Sample]) -> Result<f64, Missing> {
    let size = one(
        samples,
        "etcd_mvcc_db_total_size_in_bytes",
        Aggregate::Single,
    )
    .and_then(|v| finite_non_negative("etcd_mvcc_db_total_size_in_bytes", v))?;
    let quota = one(
        samples,
        "etcd_server_quota_backend_bytes",
        Aggregate::Single,
    )?;
    if quota.is_finite() && quota < 0.0 {
        // etcd: a negative --quota-backend-bytes turns the quota off.
        return Err(Missing {
            reason: Reason::Mismatch,
            message: format!(
                "etcd has no backend quota (etcd_server_quota_backend_bytes is {quota})"
            ),
            fault: false,
        });
    }
    if !quota.is_finite() || quota == 0.0 {
        return Err(Missing::fault(
            Reason::Parse,
            format!("etcd_server_quota_backend_bytes is {quota}, not a quota"),
        ));
    }
    let ratio = size / quota;
    if ratio.is_finite() {
        Ok(ratio)
    } else {
        Err(Missing::fault(
            Reason::Parse,
            format!(
                "etcd_mvcc_db_total_size_in_bytes / etcd_server_quota_backend_bytes = {size} / {quota} is not a finite ratio"
            ),
        ))
    }
}

/// The sum of `etcd_network_active_peers` over the peers. etcd creates a
/// peer's series when the peer first connects: none yet (a one-member
/// cluster, or a member cut off since its start) is 0.
fn active_peers(samples: &[Sample]) -> Result<f64, Missing> {
    samples
        .iter()
        .filter(|s| s.name == "etcd_network_active_peers")
        .try_fold(0.0, |sum, s| {
            finite_non_negative("etcd_network_active_peers", s.value).map(|v| sum + v)
        })
}

/// What stands in for `Maintenance.Status` in this member's metrics, read
/// where etcd refuses Status to the exporter's user (etcd 3.5 answers it
/// only to the root role). Measured on 3.4.23 and 3.5.30: both export every
/// gauge here, and none needs a user.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusGauges {
    /// `etcd_server_has_leader`.
    pub has_leader: Result<bool, Missing>,
    /// `etcd_server_is_leader`.
    pub is_leader: Result<bool, Missing>,
    /// `etcd_server_is_learner`.
    pub is_learner: Result<bool, Missing>,
    /// `etcd_server_proposals_committed_total`: the committed raft index
    /// (Status' `raftIndex`).
    pub committed_index: Result<f64, Missing>,
    /// `etcd_server_proposals_applied_total`: the applied raft index
    /// (Status' `raftAppliedIndex`).
    pub applied_index: Result<f64, Missing>,
    /// `etcd_mvcc_db_total_size_in_bytes` (Status' `dbSize`).
    pub db_size: Result<f64, Missing>,
    /// `etcd_mvcc_db_total_size_in_use_in_bytes` (Status' `dbSizeInUse`).
    pub db_in_use: Result<f64, Missing>,
    /// `etcd_server_leader_changes_seen_total`, since the member started.
    pub leader_changes_seen: Result<f64, Missing>,
    /// `etcd_server_version`'s label, e.g. `3.5.30`.
    pub version: Option<String>,
}

fn flag(samples: &[Sample], metric: &str) -> Result<bool, Missing> {
    one(samples, metric, Aggregate::Single).and_then(|v| {
        if v == 0.0 || v == 1.0 {
            Ok(v == 1.0)
        } else {
            Err(Missing::fault(
                Reason::Parse,
                format!("{metric} is {v}, not 0 or 1"),
            ))
        }
    })
}

fn size(samples: &[Sample], metric: &str) -> Result<f64, Missing> {
    one(samples, metric, Aggregate::Single).and_then(|v| finite_non_negative(metric, v))
}

/// Read the Status stand-ins from a parsed scrape. Pure, for tests.
pub fn status_gauges(samples: &[Sample]) -> StatusGauges {
    let version = samples
        .iter()
        .find(|s| s.name == "etcd_server_version")
        .and_then(|s| s.label("server_version"))
        .map(str::to_string);
    if let Some(m) = not_etcds(samples) {
        return StatusGauges {
            has_leader: Err(m.clone()),
            is_leader: Err(m.clone()),
            is_learner: Err(m.clone()),
            committed_index: Err(m.clone()),
            applied_index: Err(m.clone()),
            db_size: Err(m.clone()),
            db_in_use: Err(m.clone()),
            leader_changes_seen: Err(m),
            version,
        };
    }
    StatusGauges {
        has_leader: flag(samples, "etcd_server_has_leader"),
        is_leader: flag(samples, "etcd_server_is_leader"),
        is_learner: flag(samples, "etcd_server_is_learner"),
        committed_index: size(samples, "etcd_server_proposals_committed_total"),
        applied_index: size(samples, "etcd_server_proposals_applied_total"),
        db_size: size(samples, "etcd_mvcc_db_total_size_in_bytes"),
        db_in_use: size(samples, "etcd_mvcc_db_total_size_in_use_in_bytes"),
        leader_changes_seen: size(samples, "etcd_server_leader_changes_seen_total"),
        version,
    }
}

/// Whether etcd `version` (`3.5.30`) serves `/health` without a raft
/// proposal: 3.5 and later answer it from the member's own state (a
/// serializable range with `?serializable=true`); 3.4's `/health` sends a
/// QGET through raft (measured: one committed entry per GET on 3.4.23,
/// none on 3.5.30), which the exporter never does.
pub fn health_is_local(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (3, 5),
        _ => false,
    }
}

/// The member's `/health` beside its metrics URL (`…/metrics` →
/// `…/health`): etcd serves both on the client port and on
/// `--listen-metrics-urls`. `None` for a metrics URL with another path.
pub fn health_url(metrics: &RedactedUrl) -> Option<RedactedUrl> {
    let base = metrics.expose_for_request().strip_suffix("/metrics")?;
    Some(RedactedUrl::new(format!("{base}/health")))
}

/// The two alarms `/health` can tell apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alarm {
    Nospace,
    Corrupt,
}

impl Alarm {
    /// etcd's name of the alarm (`AlarmType`), as `/health` takes it in
    /// `exclude=` and names it in its reason.
    pub fn name(self) -> &'static str {
        match self {
            Alarm::Nospace => "NOSPACE",
            Alarm::Corrupt => "CORRUPT",
        }
    }

    fn other(self) -> Alarm {
        match self {
            Alarm::Nospace => Alarm::Corrupt,
            Alarm::Corrupt => Alarm::Nospace,
        }
    }

    /// The query asking `/health` about this alarm alone: the other one
    /// excluded, the member's own view (no leader needed, no quorum read).
    pub fn query(self) -> String {
        format!("?serializable=true&exclude={}", self.other().name())
    }
}

/// `/health`'s body.
#[derive(serde::Deserialize)]
struct Health {
    health: String,
    #[serde(default)]
    reason: String,
}

/// Whether `alarm` is raised, from the answer of `/health` asked with
/// [`Alarm::query`]. etcd checks alarms first and answers with the first
/// one not excluded ("ALARM CORRUPT"), so any other answer (healthy, or
/// failing for another reason) means the alarm is not raised; "ALARM
/// UNKNOWN" (a type etcd has no name for) hides whether it is.
pub fn alarm_from_health(alarm: Alarm, body: &str) -> Result<bool, HealthError> {
    let h: Health = serde_json::from_str(body.trim())?;
    if h.health == "true" {
        return Ok(false);
    }
    match h.reason.strip_prefix("ALARM ") {
        Some(name) if name == alarm.name() => Ok(true),
        Some("UNKNOWN") => Err(HealthError::UnnamedAlarm(alarm)),
        _ => Ok(false),
    }
}

/// Why `/health`'s answer does not tell whether an alarm is raised.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("/health answered no health JSON ({0})")]
    NotJson(#[from] serde_json::Error),
    #[error("/health reports an alarm etcd has no name for, which may hide {}", .0.name())]
    UnnamedAlarm(Alarm),
}

impl Sampler for EtcdMetricsSampler {
    fn pace(&self) -> Pace {
        Pace {
            source: Source::EtcdMetrics,
            interval: self.cfg.interval,
            timeout: self.cfg.timeout,
        }
    }

    fn signals(&self) -> Vec<SignalId> {
        vec![self.ids.defrag, self.ids.quota_ratio, self.ids.active_peers]
    }

    async fn sample(&mut self, store: &SignalStore, clock: &Clock) -> Result<(), SampleError> {
        let ids = self.ids;
        let url = &self.cfg.url;
        let http = self.http.current();
        let fetched = http_client::get_ok(&http, url, self.cfg.timeout, self.cfg.max_body_bytes)
            .await
            .inspect_err(|e| self.http.failed(e, clock.now()))
            .and_then(|body| {
                promtext::parse(&body).map_err(|e| SampleError {
                    reason: Reason::Parse,
                    message: url.scrub(&format!("{url}: {e}")).into_owned(),
                })
            });
        let at = clock.now();
        let samples = match fetched {
            Ok(s) => s,
            Err(e) => {
                let msg: Arc<str> = Arc::from(format!("etcd metrics: {}", e.message));
                for id in self.signals() {
                    store.record_err(id, msg.clone(), at);
                }
                return Err(e);
            }
        };
        let m = read_metrics(&samples);
        let mut first_fault: Option<SampleError> = None;
        let mut missing = |id: SignalId, e: Missing| {
            let msg = url.scrub(&format!("{url}: {}", e.message)).into_owned();
            store.record_err(id, Arc::from(msg.as_str()), at);
            if e.fault && first_fault.is_none() {
                first_fault = Some(SampleError::new(e.reason, msg));
            }
        };
        match m.defrag_inflight {
            Ok(b) => store.record_ok(ids.defrag, Value::Bool(b), at),
            Err(e) => missing(ids.defrag, e),
        }
        match m.db_quota_ratio {
            Ok(r) => store.record_ok(ids.quota_ratio, Value::Num(r), at),
            Err(e) => missing(ids.quota_ratio, e),
        }
        match m.active_peers {
            Ok(n) => store.record_ok(ids.active_peers, Value::Num(n), at),
            Err(e) => missing(ids.active_peers, e),
        }
        first_fault.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of a real etcd 3.5.30 scrape this source reads (3 members).
    const ETCD_35: &str = "\
# TYPE etcd_disk_defrag_inflight gauge
etcd_disk_defrag_inflight 1
# TYPE etcd_mvcc_db_total_size_in_bytes gauge
etcd_mvcc_db_total_size_in_bytes 5.36870912e+08
# TYPE etcd_network_active_peers gauge
etcd_network_active_peers{Local=\"a\",Remote=\"b\"} 1
etcd_network_active_peers{Local=\"a\",Remote=\"c\"} 1
# TYPE etcd_server_has_leader gauge
etcd_server_has_leader 1
etcd_server_quota_backend_bytes 2.147483648e+09
etcd_server_version{server_version=\"3.5.30\"} 1
";

    fn read(text: &str) -> MemberMetrics {
        read_metrics(&promtext::parse(text).unwrap())
    }

    #[test]
    fn etcd_3_5_gives_all_three_signals() {
        let m = read(ETCD_35);
        assert_eq!(m.defrag_inflight, Ok(true));
        assert_eq!(m.db_quota_ratio, Ok(0.25));
        assert_eq!(m.active_peers, Ok(2.0));
    }

    #[test]
    fn an_old_3_4_without_the_defrag_gauge_is_unknown_with_the_version_not_a_fault() {
        // 3.4.23 (Debian 12) exports the gauge; an older 3.4 may not.
        let text = ETCD_35
            .replace("etcd_disk_defrag_inflight 1\n", "")
            .replace("3.5.30", "3.4.13");
        let m = read(&text);
        let e = m.defrag_inflight.unwrap_err();
        assert!(!e.fault, "{e:?}");
        assert_eq!(
            e.message,
            "etcd 3.4.13 does not export etcd_disk_defrag_inflight (3.4.23 and 3.5 do)"
        );
        assert_eq!(m.db_quota_ratio, Ok(0.25));
        // On 3.5 the same absence is a fault: something is wrong.
        let m = read(&ETCD_35.replace("etcd_disk_defrag_inflight 1\n", ""));
        assert!(m.defrag_inflight.unwrap_err().fault);
    }

    #[test]
    fn no_peer_series_is_zero_peers() {
        let text: String = ETCD_35
            .lines()
            .filter(|l| !l.starts_with("etcd_network_active_peers"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(read(&text).active_peers, Ok(0.0));
    }

    #[test]
    fn something_else_than_etcd_is_named() {
        let m = read("up 1\n");
        let e = m.defrag_inflight.unwrap_err();
        assert!(e.fault);
        assert!(
            e.message.contains("is this etcd's metrics endpoint"),
            "{}",
            e.message
        );
        assert_eq!(m.active_peers.unwrap_err(), e);
    }

    #[test]
    fn absurd_numbers_are_unknown_with_the_value_never_a_panic() {
        let with = |from: &str, to: &str| read(&ETCD_35.replace(from, to));
        for v in ["2", "NaN", "-1", "+Inf", "0.5"] {
            let e = with(
                "etcd_disk_defrag_inflight 1",
                &format!("etcd_disk_defrag_inflight {v}"),
            )
            .defrag_inflight
            .unwrap_err();
            assert!(e.fault && e.message.contains("not 0 or 1"), "{v}: {e:?}");
        }
        for v in ["NaN", "-5", "+Inf"] {
            let e = with(
                "etcd_mvcc_db_total_size_in_bytes 5.36870912e+08",
                &format!("etcd_mvcc_db_total_size_in_bytes {v}"),
            )
            .db_quota_ratio
            .unwrap_err();
            assert!(e.message.contains("not a size"), "{v}: {e:?}");
        }
        for v in ["0", "NaN", "+Inf", "-Inf"] {
            let e = with(
                "etcd_server_quota_backend_bytes 2.147483648e+09",
                &format!("etcd_server_quota_backend_bytes {v}"),
            )
            .db_quota_ratio
            .unwrap_err();
            assert!(e.fault && e.message.contains("not a quota"), "{v}: {e:?}");
        }
        let e = with(
            "etcd_server_quota_backend_bytes 2.147483648e+09",
            "etcd_server_quota_backend_bytes -1",
        )
        .db_quota_ratio
        .unwrap_err();
        assert!(!e.fault && e.message.contains("no backend quota"), "{e:?}");
        // A tiny quota would make the ratio infinite: unknown, with both numbers.
        let e = with(
            "etcd_server_quota_backend_bytes 2.147483648e+09",
            "etcd_server_quota_backend_bytes 1e-300",
        )
        .db_quota_ratio
        .unwrap_err();
        assert!(e.message.contains("not a finite ratio"), "{e:?}");
        let e = with("Remote=\"c\"} 1", "Remote=\"c\"} NaN")
            .active_peers
            .unwrap_err();
        assert!(
            e.message.contains("etcd_network_active_peers is NaN"),
            "{e:?}"
        );
        // Two defrag series: the selector says how many matched.
        let e = read(&format!(
            "{ETCD_35}etcd_disk_defrag_inflight{{x=\"y\"}} 0\n"
        ))
        .defrag_inflight
        .unwrap_err();
        assert!(e.message.starts_with("2 series match"), "{e:?}");
    }

    /// The gauges of a real etcd 3.5.30 scrape that stand in for Status.
    const STATUS_35: &str = "\
etcd_mvcc_db_total_size_in_bytes 20480
etcd_mvcc_db_total_size_in_use_in_bytes 16384
etcd_server_has_leader 1
etcd_server_is_leader 1
etcd_server_is_learner 0
etcd_server_leader_changes_seen_total 1
etcd_server_proposals_applied_total 27
etcd_server_proposals_committed_total 29
etcd_server_version{server_version=\"3.5.30\"} 1
";

    #[test]
    fn the_gauges_stand_in_for_status() {
        let g = status_gauges(&promtext::parse(STATUS_35).unwrap());
        assert_eq!(g.has_leader, Ok(true));
        assert_eq!(g.is_leader, Ok(true));
        assert_eq!(g.is_learner, Ok(false));
        assert_eq!(g.committed_index, Ok(29.0));
        assert_eq!(g.applied_index, Ok(27.0));
        assert_eq!(g.db_size, Ok(20480.0));
        assert_eq!(g.db_in_use, Ok(16384.0));
        assert_eq!(g.leader_changes_seen, Ok(1.0));
        assert_eq!(g.version.as_deref(), Some("3.5.30"));
        let g = status_gauges(
            &promtext::parse(&STATUS_35.replace("is_learner 0", "is_learner 2")).unwrap(),
        );
        assert!(g.is_learner.unwrap_err().message.contains("not 0 or 1"));
        let g = status_gauges(&promtext::parse("up 1\n").unwrap());
        assert!(
            g.has_leader
                .unwrap_err()
                .message
                .contains("is this etcd's metrics endpoint")
        );
    }

    #[test]
    fn health_is_asked_only_where_it_is_answered_without_raft() {
        assert!(health_is_local("3.5.30") && health_is_local("3.6.0") && health_is_local("4.0.1"));
        assert!(!health_is_local("3.4.23") && !health_is_local("x") && !health_is_local(""));
        let u =
            |s: &str| health_url(&RedactedUrl::new(s)).map(|u| u.expose_for_request().to_string());
        assert_eq!(
            u("http://127.0.0.1:2381/metrics").as_deref(),
            Some("http://127.0.0.1:2381/health")
        );
        assert_eq!(u("http://127.0.0.1:2381/federate"), None);
        assert_eq!(Alarm::Corrupt.query(), "?serializable=true&exclude=NOSPACE");
    }

    #[test]
    fn an_alarm_is_read_from_the_health_answer() {
        use Alarm::*;
        // etcd 3.5.30's answers, healthy and with the alarm raised.
        assert_eq!(
            alarm_from_health(Corrupt, r#"{"health":"true","reason":""}"#).ok(),
            Some(false)
        );
        let raised = "{\"health\":\"false\",\"reason\":\"ALARM CORRUPT\"}\n";
        assert_eq!(alarm_from_health(Corrupt, raised).ok(), Some(true));
        assert_eq!(alarm_from_health(Nospace, raised).ok(), Some(false));
        // Failing for another reason: etcd checked the alarms first.
        let range = r#"{"health":"false","reason":"RANGE ERROR:etcdserver: request timed out"}"#;
        assert_eq!(alarm_from_health(Nospace, range).ok(), Some(false));
        assert!(
            alarm_from_health(Nospace, r#"{"health":"false","reason":"ALARM UNKNOWN"}"#).is_err()
        );
        assert!(alarm_from_health(Nospace, "404 page not found").is_err());
    }

    #[test]
    fn the_flag_gets_metrics_when_it_has_no_path() {
        let url =
            |s: &str| metrics_url(&RedactedUrl::new(s)).map(|u| u.expose_for_request().to_string());
        assert_eq!(
            url("http://127.0.0.1:2381").unwrap(),
            "http://127.0.0.1:2381/metrics"
        );
        assert_eq!(
            url("http://127.0.0.1:2381/").unwrap(),
            "http://127.0.0.1:2381/metrics"
        );
        assert_eq!(
            url("https://10.0.0.1:2379/metrics").unwrap(),
            "https://10.0.0.1:2379/metrics"
        );
        assert!(url("127.0.0.1:2381").is_err());
        assert!(url("unix:///x").is_err());
    }
}
