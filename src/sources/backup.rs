//! The backup source: samples the etcd-backup-restore sidecar. Each round reads
//! the newest snapshots (from `/metrics`, or `/snapshot/latest`) and asks
//! `/healthz`, then writes backup_up, backup_healthy, the snapshot revisions
//! and ages, and rev_lag = this member's `revision` (read back from the store,
//! where the etcd source put it) minus the newest snapshot's revision.
//!
//! The sidecar pre-initialises its snapshot gauges to 0, so 0 means "no
//! snapshot yet": those signals are unknown, with that as the reason.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use super::promtext;
use super::tls_material::{Credentials, HttpClient, TlsKind};
use super::{Pace, Reason, SampleError, Sampler};
use crate::outside::http_client::{self, SourceError, TlsFiles};
use crate::outside::redacted_url::RedactedUrl;
use crate::runtime::clock::Clock;
use etcd_readiness_policy::signals::{Builtin, Catalogue, SignalId, SignalStore, Source, Value};

/// Where the snapshot facts come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BackupMode {
    /// `etcdbr_snapshot_latest_{revision,timestamp}{kind}` from `/metrics`.
    #[default]
    Metrics,
    /// The JSON of `/snapshot/latest`.
    SnapshotLatest,
}

/// Validated settings of the backup source (from `--backup.*`).
#[derive(Clone, Debug)]
pub struct BackupConfig {
    /// Base URL of the sidecar, e.g. `https://127.0.0.1:8080`.
    pub url: RedactedUrl,
    pub tls: TlsFiles,
    pub mode: BackupMode,
    pub interval: Duration,
    pub timeout: Duration,
    /// Largest body read from the sidecar (`--source.max-body-bytes`).
    pub max_body_bytes: u64,
}

#[derive(Clone, Copy, Debug)]
struct Ids {
    up: SignalId,
    healthy: SignalId,
    snap_rev: SignalId,
    full_rev: SignalId,
    snap_age: SignalId,
    full_age: SignalId,
    rev_lag: SignalId,
    revision: SignalId,
}

/// Samples the backup sidecar.
pub struct BackupSampler {
    cfg: BackupConfig,
    base: RedactedUrl,
    /// Rebuilt when the `--backup.*` TLS files change.
    http: HttpClient,
    ids: Ids,
}

/// The newest snapshot of one kind, as the sidecar reports it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SnapshotFact {
    pub revision: f64,
    /// When it was taken.
    pub taken: SystemTime,
}

/// The newest full and incremental snapshots; `None` = none yet.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Snapshots {
    pub full: Option<SnapshotFact>,
    pub incr: Option<SnapshotFact>,
}

impl BackupSampler {
    /// (`_catalogue` is unused: built-in ids are the same in every
    /// catalogue, [`Builtin`].)
    pub fn new(cfg: BackupConfig, catalogue: &Catalogue) -> Result<Self, SourceError> {
        let creds = backup_credentials(&cfg.tls)?;
        BackupSampler::with_credentials(cfg, creds, catalogue)
    }

    /// With `creds` read from `cfg.tls` already (and kept current by their
    /// reloader).
    pub fn with_credentials(
        cfg: BackupConfig,
        creds: Option<Credentials>,
        _catalogue: &Catalogue,
    ) -> Result<Self, SourceError> {
        let base = http_client::base_url(&cfg.url)?;
        let http = HttpClient::new(creds, cfg.timeout)?;
        let ids = Ids {
            up: Builtin::BackupUp.id(),
            healthy: Builtin::BackupHealthy.id(),
            snap_rev: Builtin::SnapshotRevision.id(),
            full_rev: Builtin::FullSnapshotRevision.id(),
            snap_age: Builtin::SnapshotAge.id(),
            full_age: Builtin::FullSnapshotAge.id(),
            rev_lag: Builtin::RevLag.id(),
            revision: Builtin::Revision.id(),
        };
        Ok(BackupSampler {
            cfg,
            base,
            http,
            ids,
        })
    }

    async fn snapshots(&self, http: &reqwest::Client) -> Result<Snapshots, SampleError> {
        type Parse = fn(&str) -> Result<Snapshots, SnapshotsError>;
        let (path, parse): (&str, Parse) = match self.cfg.mode {
            BackupMode::Metrics => ("metrics", snapshots_from_metrics),
            BackupMode::SnapshotLatest => ("snapshot/latest", snapshots_from_latest_json),
        };
        let url = self.base.join(&format!("/{path}"));
        let body =
            http_client::get_ok(http, &url, self.cfg.timeout, self.cfg.max_body_bytes).await?;
        parse(&body).map_err(|message| SampleError {
            reason: Reason::Parse,
            message: url.scrub(&format!("{url}: {message}")).into_owned(),
        })
    }

    async fn healthz(&self, http: &reqwest::Client) -> Result<bool, SampleError> {
        let url = self.base.join("/healthz");
        let f = http_client::get(http, &url, self.cfg.timeout, self.cfg.max_body_bytes).await?;
        Ok(f.status.is_success())
    }
}

impl Sampler for BackupSampler {
    fn pace(&self) -> Pace {
        Pace {
            source: Source::Backup,
            interval: self.cfg.interval,
            timeout: self.cfg.timeout,
        }
    }

    fn signals(&self) -> Vec<SignalId> {
        let ids = self.ids;
        vec![
            ids.up,
            ids.healthy,
            ids.snap_rev,
            ids.full_rev,
            ids.snap_age,
            ids.full_age,
            ids.rev_lag,
        ]
    }

    async fn sample(&mut self, store: &SignalStore, clock: &Clock) -> Result<(), SampleError> {
        let ids = self.ids;
        let http = self.http.current();
        let (snaps, health) = tokio::join!(self.snapshots(&http), self.healthz(&http));
        for e in [snaps.as_ref().err(), health.as_ref().err()]
            .into_iter()
            .flatten()
        {
            self.http.failed(e, clock.now());
        }
        let at = clock.now();
        let mut first_err = None;
        match &health {
            Ok(h) => store.record_ok(ids.healthy, Value::Bool(*h), at),
            Err(e) => {
                store.record_err(ids.healthy, Arc::from(e.message.as_str()), at);
                first_err.get_or_insert(e.clone());
            }
        }
        let snaps = match snaps {
            Ok(s) => {
                store.record_ok(ids.up, Value::Bool(true), at);
                s
            }
            Err(e) => {
                // An answer we cannot read is still an answer: the sidecar is up.
                let answered = matches!(e.reason, Reason::Parse | Reason::TooLarge);
                store.record_ok(ids.up, Value::Bool(answered), at);
                let msg: Arc<str> = Arc::from(format!("backup sidecar: {}", e.message));
                for id in [
                    ids.snap_rev,
                    ids.full_rev,
                    ids.snap_age,
                    ids.full_age,
                    ids.rev_lag,
                ] {
                    store.record_err(id, msg.clone(), at);
                }
                return Err(e);
            }
        };
        record_snapshots(ids, store, snaps, at, clock.wall());
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The `--backup.*` TLS files read and checked, if any are given.
pub fn backup_credentials(tls: &TlsFiles) -> Result<Option<Credentials>, SourceError> {
    if *tls == TlsFiles::default() {
        return Ok(None);
    }
    Ok(Some(Credentials::load(TlsKind::Backup, tls)?))
}

/// Record what the sidecar's answer says of the snapshots: revisions, ages
/// (a snapshot "taken" in the future is an error) and `rev_lag` against
/// this member's revision as the store has it.
fn record_snapshots(
    ids: Ids,
    store: &SignalStore,
    snaps: Snapshots,
    at: Instant,
    now_wall: SystemTime,
) {
    // A snapshot "taken" in the future (beyond the clock-skew allowance)
    // is an error, not age 0: an age check must not pass on it.
    let record_age = |id: SignalId, kind: &str, f: SnapshotFact| {
        match crate::outside::checked::age(f.taken, now_wall) {
            Ok(a) => store.record_ok(id, Value::Num(a.as_secs_f64()), at),
            Err(e) => store.record_err(
                id,
                Arc::from(format!(
                    "the backup sidecar reports a {kind} snapshot taken {e}; check the clocks of this node and the sidecar's"
                )),
                at,
            ),
        }
    };
    let none_yet = |what: &str| -> Arc<str> {
        Arc::from(format!(
            "the backup sidecar reports no {what} snapshot yet (revision 0)"
        ))
    };
    match snaps.full {
        Some(f) => {
            store.record_ok(ids.full_rev, Value::Num(f.revision), at);
            record_age(ids.full_age, "full", f);
        }
        None => {
            store.record_err(ids.full_rev, none_yet("full"), at);
            store.record_err(ids.full_age, none_yet("full"), at);
        }
    }
    let newest_rev = [snaps.full, snaps.incr]
        .into_iter()
        .flatten()
        .max_by(|a, b| a.revision.total_cmp(&b.revision));
    let newest_taken = [snaps.full, snaps.incr]
        .into_iter()
        .flatten()
        .max_by_key(|f| f.taken);
    match (newest_rev, newest_taken) {
        (Some(r), Some(t)) => {
            store.record_ok(ids.snap_rev, Value::Num(r.revision), at);
            record_age(ids.snap_age, "newest", t);
            let revision = store.reading(ids.revision, at);
            match revision.get() {
                Some(v) => store.record_ok(ids.rev_lag, Value::Num(v.as_f64() - r.revision), at),
                None => {
                    let why = etcd_readiness_policy::policy::eval::describe_unknown(&revision);
                    store.record_err(
                        ids.rev_lag,
                        Arc::from(format!("this member's revision is unknown ({why})")),
                        at,
                    );
                }
            }
        }
        _ => {
            for id in [ids.snap_rev, ids.snap_age, ids.rev_lag] {
                store.record_err(id, none_yet("full or incremental"), at);
            }
        }
    }
}

/// Why the sidecar's answer says nothing usable about its snapshots.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotsError {
    #[error("{0}")]
    Metrics(#[from] promtext::ParseError),
    #[error("no {name}{{kind=\"{kind}\"}} in the metrics")]
    Missing {
        name: &'static str,
        kind: &'static str,
    },
    #[error("etcdbr_snapshot_latest_revision{{kind=\"{kind}\"}} is {revision}, not a revision")]
    NotARevision { kind: &'static str, revision: f64 },
    #[error(
        "etcdbr_snapshot_latest_timestamp{{kind=\"{kind}\"}} is 0 while the revision is {revision}"
    )]
    NoTimestamp { kind: &'static str, revision: f64 },
    #[error("etcdbr_snapshot_latest_timestamp{{kind=\"{kind}\"}} is not a Unix time: {error}")]
    NotUnixTime {
        kind: &'static str,
        error: crate::outside::checked::CheckedError,
    },
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("snapshot `{name}` ({kind}): createdOn `{created_on}` is not an RFC 3339 time")]
    NotRfc3339 {
        name: String,
        kind: String,
        created_on: String,
    },
}

/// Read the newest snapshots from the sidecar's `/metrics`.
pub fn snapshots_from_metrics(text: &str) -> Result<Snapshots, SnapshotsError> {
    let samples = promtext::parse(text)?;
    let get = |name: &'static str, kind: &'static str| -> Result<f64, SnapshotsError> {
        samples
            .iter()
            .find(|s| s.name == name && s.label("kind") == Some(kind))
            .map(|s| s.value)
            .ok_or(SnapshotsError::Missing { name, kind })
    };
    let fact = |kind: &'static str| -> Result<Option<SnapshotFact>, SnapshotsError> {
        let rev = match get("etcdbr_snapshot_latest_revision", kind) {
            Ok(rev) => rev,
            // Only the full snapshot is required: delta snapshots may be turned off.
            Err(_) if kind == "Incr" => return Ok(None),
            Err(e) => return Err(e),
        };
        let ts = get("etcdbr_snapshot_latest_timestamp", kind)?;
        if !rev.is_finite() || rev < 0.0 {
            return Err(SnapshotsError::NotARevision {
                kind,
                revision: rev,
            });
        }
        if rev == 0.0 {
            return Ok(None);
        }
        if ts == 0.0 {
            return Err(SnapshotsError::NoTimestamp {
                kind,
                revision: rev,
            });
        }
        let taken = crate::outside::checked::unix_time(ts)
            .map_err(|error| SnapshotsError::NotUnixTime { kind, error })?;
        Ok(Some(SnapshotFact {
            revision: rev,
            taken,
        }))
    };
    Ok(Snapshots {
        full: fact("Full")?,
        incr: fact("Incr")?,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LatestJson {
    #[serde(default)]
    full_snapshot: Option<SnapJson>,
    #[serde(default)]
    delta_snapshots: Option<Vec<SnapJson>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapJson {
    #[serde(default)]
    kind: String,
    last_revision: i64,
    created_on: String,
    #[serde(default)]
    snap_name: String,
}

/// Read the newest snapshots from `/snapshot/latest`.
pub fn snapshots_from_latest_json(body: &str) -> Result<Snapshots, SnapshotsError> {
    let j: LatestJson = serde_json::from_str(body)?;
    let fact = |s: &SnapJson| -> Result<Option<SnapshotFact>, SnapshotsError> {
        if s.last_revision <= 0 {
            return Ok(None);
        }
        let taken = parse_rfc3339(&s.created_on).ok_or_else(|| SnapshotsError::NotRfc3339 {
            name: s.snap_name.clone(),
            kind: s.kind.clone(),
            created_on: s.created_on.clone(),
        })?;
        Ok(Some(SnapshotFact {
            revision: s.last_revision as f64,
            taken,
        }))
    };
    let full = match &j.full_snapshot {
        Some(s) => fact(s)?,
        None => None,
    };
    let mut incr: Option<SnapshotFact> = None;
    for s in j.delta_snapshots.iter().flatten() {
        if let Some(f) = fact(s)?
            && incr.is_none_or(|i| f.revision > i.revision)
        {
            incr = Some(f);
        }
    }
    Ok(Snapshots { full, incr })
}

/// Parse an RFC 3339 time as Go writes it (`2024-05-01T10:00:00.123456789Z`,
/// or with a `+02:00` offset), with jiff: a time without an offset is not an
/// instant and is refused.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let ts = s.parse::<jiff::Timestamp>().ok()?;
    let secs = u64::try_from(ts.as_second()).ok()?;
    let nanos = u32::try_from(ts.subsec_nanosecond()).ok()?;
    std::time::UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::UNIX_EPOCH;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn rfc3339_as_go_writes_it() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(at(0, 0)));
        assert_eq!(
            parse_rfc3339("2024-02-29T12:34:56.5Z"),
            Some(at(1_709_210_096, 500_000_000))
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T14:34:56.123456789+02:00"),
            Some(at(1_709_210_096, 123_456_789))
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T11:34:56-01:00"),
            Some(at(1_709_210_096, 0))
        );
        for bad in [
            "2024-02-29",
            "2024-13-01T00:00:00Z",
            "2024-02-29T12:34:56",
            "x",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    const METRICS: &str = "# HELP etcdbr_snapshot_latest_revision Latest revision.\n\
# TYPE etcdbr_snapshot_latest_revision gauge\n\
etcdbr_snapshot_latest_revision{kind=\"Chunk\"} 0\n\
etcdbr_snapshot_latest_revision{kind=\"Full\"} 100\n\
etcdbr_snapshot_latest_revision{kind=\"Incr\"} 0\n\
# TYPE etcdbr_snapshot_latest_timestamp gauge\n\
etcdbr_snapshot_latest_timestamp{kind=\"Chunk\"} 0\n\
etcdbr_snapshot_latest_timestamp{kind=\"Full\"} 1.7e+09\n\
etcdbr_snapshot_latest_timestamp{kind=\"Incr\"} 0\n";

    #[test]
    fn zero_incremental_means_none_yet() {
        let s = snapshots_from_metrics(METRICS).unwrap();
        assert_eq!(
            s.full,
            Some(SnapshotFact {
                revision: 100.0,
                taken: at(1_700_000_000, 0)
            })
        );
        assert_eq!(s.incr, None);
    }

    #[test]
    fn missing_gauge_is_a_parse_error_naming_it() {
        let e = snapshots_from_metrics("etcdbr_cluster_size 3\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("etcdbr_snapshot_latest_revision{kind=\"Full\"}"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_incremental_gauge_means_no_incremental_snapshot() {
        let text = "etcdbr_snapshot_latest_revision{kind=\"Full\"} 7\n\
                    etcdbr_snapshot_latest_timestamp{kind=\"Full\"} 1.7e+09\n";
        let s = snapshots_from_metrics(text).unwrap();
        assert_eq!(s.full.unwrap().revision, 7.0);
        assert_eq!(s.incr, None);
        let e = snapshots_from_metrics("etcdbr_snapshot_latest_revision{kind=\"Full\"} 7\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("etcdbr_snapshot_latest_timestamp{kind=\"Full\"}"),
            "{e}"
        );
    }

    fn with_full(rev: &str, ts: &str) -> String {
        format!(
            "etcdbr_snapshot_latest_revision{{kind=\"Full\"}} {rev}\n\
             etcdbr_snapshot_latest_timestamp{{kind=\"Full\"}} {ts}\n"
        )
    }

    #[test]
    fn absurd_timestamps_and_revisions_are_errors_not_panics() {
        // Regression: a timestamp of 1e19 panicked the backup sampler.
        for ts in ["1e19", "1e300", "NaN", "+Inf", "-Inf", "-5"] {
            let e = snapshots_from_metrics(&with_full("7", ts))
                .unwrap_err()
                .to_string();
            assert!(e.contains("is not a Unix time"), "{ts}: {e}");
        }
        for rev in ["NaN", "+Inf", "-1"] {
            let e = snapshots_from_metrics(&with_full(rev, "1.7e9"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a revision"), "{rev}: {e}");
        }
        // Huge but finite revisions are numbers like any other.
        assert_eq!(
            snapshots_from_metrics(&with_full("1e300", "1.7e9"))
                .unwrap()
                .full
                .unwrap()
                .revision,
            1e300
        );
    }

    #[test]
    fn latest_json_picks_the_newest_delta() {
        let body = r#"{"fullSnapshot":{"kind":"Full","startRevision":0,"lastRevision":10,
            "createdOn":"2024-01-01T00:00:00Z","snapName":"Full-0-10"},
            "deltaSnapshots":[
              {"kind":"Incr","startRevision":11,"lastRevision":30,"createdOn":"2024-01-01T00:02:00Z","snapName":"b"},
              {"kind":"Incr","startRevision":31,"lastRevision":20,"createdOn":"2024-01-01T00:01:00Z","snapName":"a"}]}"#;
        let s = snapshots_from_latest_json(body).unwrap();
        assert_eq!(s.full.unwrap().revision, 10.0);
        assert_eq!(s.incr.unwrap().revision, 30.0);
        let none =
            snapshots_from_latest_json(r#"{"fullSnapshot":null,"deltaSnapshots":[]}"#).unwrap();
        assert_eq!(none, Snapshots::default());
    }
}
