//! What stands in for `Maintenance.Status` where etcd refuses it to the
//! exporter's user: etcd 3.4.42+, 3.5.28-3.5.31 and 3.6.0-3.6.11 answer
//! Status only to a user with the root role (measured on 3.5.30; 3.4.23
//! answers any user), while a read-only
//! role is all a probe should need. When Status is refused as
//! `PermissionDenied` (by its gRPC code), the Status loop asks, in its
//! place and without root:
//!
//! - a serializable, keys-only Range of the probe key (the member answers
//!   it alone, no raft): that the member answers (`etcd_up`), and its
//!   header: `revision`, `raft_term` and the IDs of the member identity;
//! - the member's own `/metrics` (the metrics source's URL, by default the
//!   endpoint's, which needs no user): `leader`, `is_leader`, `learner`, the
//!   committed and applied indexes (`raft_index`, `applied_index`,
//!   `apply_lag`), `db_size_bytes`, `db_in_use_bytes`, and leader changes
//!   (`etcd_server_leader_changes_seen_total`, counted from the first
//!   scrape); `leaderless` follows `leader` as with Status;
//! - on etcd 3.5 and later, its `/health?serializable=true` beside the
//!   metrics, once per alarm with the other excluded: `alarm_nospace`,
//!   `alarm_corrupt` (etcd 3.4's `/health` writes a QGET through raft, so
//!   there they stay unknown, saying so; 3.4 answers Status anyway).
//!
//! These rounds run every `--etcd.metrics-interval` (a `/metrics` body is
//! ~150 KB: at the Status pace of a tenth of `--sample.interval` it would
//! cost the member and the exporter ten times what the metrics source
//! does), and the Status signals' staleness follows that period. A signal
//! none of them can give (no metrics URL, a metrics URL that does not
//! answer) is unknown and says that Status needs the root role. Status is
//! asked again every [`RETRY_STATUS`]: a role granted later is used.
//! The switch is logged once each way, the stand-in calls are counted as
//! `etcd_readiness_source_requests_total{source="etcd",call="metrics"|"health"}`,
//! and a pending round is called "Status without root".

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{GetOptions, ResponseHeader, StatusResponse};

use super::{EtcdTls, LABEL, Shared};
use crate::outside::http_client;
use crate::outside::redacted_url::RedactedUrl;
use crate::sources::etcd_metrics::{
    Alarm, StatusGauges, alarm_from_health, health_is_local, health_url, status_gauges,
};
use crate::sources::tls_material::HttpClient;
use crate::sources::{SampleError, promtext, staleness_bound};
use etcd_readiness_policy::signals::Trust;

/// How often a refused Status is asked again. A call budget
/// (ARCHITECTURE.md).
pub(super) const RETRY_STATUS: Duration = Duration::from_secs(60);

/// The name of a pending round of the stand-ins (in explanations).
const WITHOUT_ROOT: &str = "Status without root";

/// Where the stand-ins are read over HTTP: the metrics source's URL (its
/// `/health` beside it) and pace.
#[derive(Clone, Debug)]
pub struct MemberHttp {
    pub metrics: RedactedUrl,
    pub interval: Duration,
    pub max_body_bytes: u64,
}

/// What one round gave: Status itself, or its stand-ins.
pub(super) enum Answer {
    Status(StatusResponse),
    /// Status from a [`super::api::MemberApi`] (a simulated member).
    Member(super::api::MemberStatus),
    WithoutRoot(Box<StandIn>),
}

impl Answer {
    /// The header with the member's IDs (for the member identity).
    pub(super) fn header(&self) -> Option<&ResponseHeader> {
        match self {
            Answer::Status(st) => st.header(),
            Answer::Member(_) => None,
            Answer::WithoutRoot(s) => s.header.as_ref(),
        }
    }

    /// Whether the member is a learner, as far as the answer tells.
    pub(super) fn is_learner(&self) -> bool {
        match self {
            Answer::Status(st) => st.is_learner(),
            Answer::Member(st) => st.is_learner,
            Answer::WithoutRoot(s) => s.gauges.as_ref().is_ok_and(|g| g.is_learner == Ok(true)),
        }
    }
}

/// The stand-ins of one round.
pub(super) struct StandIn {
    pub(super) header: Option<ResponseHeader>,
    /// The metrics' gauges, or why there are none.
    pub(super) gauges: Result<StatusGauges, NoStandIn>,
    pub(super) nospace: Result<bool, NoStandIn>,
    pub(super) corrupt: Result<bool, NoStandIn>,
}

/// Why a stand-in is missing, in the words of the signal's explanation.
/// Cheap to clone: one reason explains several signals.
#[derive(Clone, Debug, thiserror::Error)]
#[error(
    "etcd refuses Status to the exporter's user (only the root role may call it on etcd \
     3.4.42+, 3.5.28-3.5.31 and 3.6.0-3.6.11) and its stand-in is not available: {0}"
)]
pub(super) struct NoStandIn(Arc<Unavailable>);

impl From<Unavailable> for NoStandIn {
    fn from(u: Unavailable) -> Self {
        NoStandIn(Arc::new(u))
    }
}

/// What keeps a stand-in from being read.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unavailable {
    #[error("--etcd.metrics-url is off")]
    MetricsOff,
    #[error("no HTTP client for {url}: {error}")]
    NoClient {
        url: RedactedUrl,
        error: crate::outside::http_client::SourceError,
    },
    /// The member did not answer; the message names the URL, redacted.
    #[error("{}", .0.message)]
    Request(SampleError),
    /// `/metrics` is not exposition text: `url: why`, scrubbed of the
    /// URL's credentials.
    #[error("{0}")]
    NotMetrics(String),
    #[error("etcd {0}'s /health writes to raft, which the exporter never does")]
    HealthWrites(String),
    #[error("the metrics name no etcd_server_version")]
    NoVersion,
    #[error("{0} does not end in /metrics, so /health is not beside it")]
    NoHealthBeside(RedactedUrl),
    #[error("{url}: {error}")]
    Health {
        url: RedactedUrl,
        error: crate::sources::etcd_metrics::HealthError,
    },
}

/// The Status loop's choice between Status and its stand-ins.
#[derive(Default)]
pub(super) struct StatusChoice {
    /// Set while Status is refused: when it is to be asked again.
    retry_status_at: Option<Instant>,
    http: Option<Result<HttpClient, NoStandIn>>,
}

impl StatusChoice {
    /// What a round now is called while pending.
    pub(super) fn what(&self) -> &'static str {
        if self.retry_status_at.is_some() {
            WITHOUT_ROOT
        } else {
            "Status"
        }
    }

    /// The time to the next round: the stand-ins at the metrics' pace.
    pub(super) fn period(&self, fast: Duration, http: Option<&MemberHttp>) -> Duration {
        match (self.retry_status_at, http) {
            (Some(_), Some(h)) => h.interval.max(fast),
            _ => fast,
        }
    }
}

impl Shared {
    /// One round: Status, or where it is refused for want of the root role,
    /// its stand-ins (Status asked again every [`RETRY_STATUS`]).
    pub(super) async fn status_or_stand_in(
        &self,
        choice: &mut StatusChoice,
    ) -> Result<Answer, SampleError> {
        let now = self.clock.now();
        if choice.retry_status_at.is_none_or(|at| now >= at) {
            match self.status_unless_refused().await? {
                Some(answer) => {
                    if choice.retry_status_at.take().is_some() {
                        tracing::info!(
                            "etcd answers Maintenance.Status to the exporter's user again: the Status \
                             signals come from Status"
                        );
                        self.set_status_staleness(self.config.fast());
                    }
                    return Ok(answer);
                }
                None => {
                    let first = choice.retry_status_at.is_none();
                    choice.retry_status_at = Some(now + RETRY_STATUS);
                    if first {
                        self.log_refusal();
                        let http = self.config.member_http.as_ref();
                        self.set_status_staleness(choice.period(self.config.fast(), http));
                    }
                }
            }
        }
        self.stand_in(choice)
            .await
            .map(|s| Answer::WithoutRoot(Box::new(s)))
    }

    fn log_refusal(&self) {
        let from = match &self.config.member_http {
            Some(h) => format!(
                "the member's metrics ({}), a serializable read's header and /health",
                h.metrics
            ),
            None => "a serializable read's header only (--etcd.metrics-url is off: leader, \
                     learner, indexes, sizes and alarms stay unknown)"
                .to_string(),
        };
        tracing::warn!(
            "etcd refuses Maintenance.Status to the exporter's user (only the root role may call \
             it on etcd 3.4.42+, 3.5.28-3.5.31 and 3.6.0-3.6.11): the Status signals come from \
             {from} instead; Status is asked again every {}s",
            RETRY_STATUS.as_secs()
        );
    }

    /// Status, `None` when etcd refuses it as `PermissionDenied`.
    async fn status_unless_refused(&self) -> Result<Option<Answer>, SampleError> {
        self.metrics.request(LABEL, "status");
        if let Some(api) = &self.api {
            let r = self.bounded("Status", api.status()).await;
            return self.after(r).map(|st| Some(Answer::Member(st)));
        }
        let r = self
            .bounded(
                "Status",
                Box::pin(self.with_session(|mut c| async move {
                    match c.status().await {
                        Err(etcd_client::Error::GRpcStatus(st))
                            if st.code() == tonic::Code::PermissionDenied =>
                        {
                            Ok(None)
                        }
                        r => r.map(|st| Some(Answer::Status(st))),
                    }
                })),
            )
            .await;
        self.after(r)
    }

    /// How long the Status signals stay good without a new answer, for
    /// rounds every `period`.
    fn set_status_staleness(&self, period: Duration) {
        let base = staleness_bound(period, self.config.timeout);
        let bound = Trust {
            base,
            contended_max: base + self.config.contended_max(),
        };
        for id in self.ids.status_ids().chain([self.ids.etcd_up]) {
            self.store.set_staleness(id, bound);
        }
    }

    /// The stand-ins, asked at once; the round fails only when the member
    /// does not answer the read.
    async fn stand_in(&self, choice: &mut StatusChoice) -> Result<StandIn, SampleError> {
        let http = self.config.member_http.as_ref().map(|h| {
            let client = choice
                .http
                .get_or_insert_with(|| self.member_http_client(h))
                .as_mut()
                .map(HttpClient::current)
                .map_err(|e| e.clone());
            (h, client)
        });
        let (header, member) = tokio::join!(self.serializable_header(), async {
            let why = match &http {
                Some((h, Ok(c))) => return self.member_http(h, c).await,
                Some((_, Err(e))) => e.clone(),
                None => Unavailable::MetricsOff.into(),
            };
            (Err(why.clone()), Err(why.clone()), Err(why))
        });
        let (gauges, nospace, corrupt) = member;
        Ok(StandIn {
            header: header?,
            gauges,
            nospace,
            corrupt,
        })
    }

    /// The client the metrics source builds, from the same files.
    fn member_http_client(&self, h: &MemberHttp) -> Result<HttpClient, NoStandIn> {
        let creds: Option<EtcdTls> = self
            .config
            .tls
            .clone()
            .filter(|_| h.metrics.starts_with("https://"));
        HttpClient::new(creds, self.config.timeout).map_err(|error| {
            Unavailable::NoClient {
                url: h.metrics.clone(),
                error,
            }
            .into()
        })
    }

    /// The header of a serializable keys-only read of the probe key.
    async fn serializable_header(&self) -> Result<Option<ResponseHeader>, SampleError> {
        let key = self.config.probe_key.clone();
        let opts = GetOptions::new()
            .with_keys_only()
            .with_limit(1)
            .with_serializable();
        self.metrics.request(LABEL, "range");
        let r = self
            .bounded(
                WITHOUT_ROOT,
                Box::pin(self.with_session(|mut c| {
                    let (key, opts) = (key.clone(), opts.clone());
                    async move { c.get(key, Some(opts)).await }
                })),
            )
            .await;
        self.after(r).map(|mut r| r.take_header())
    }

    /// The gauges of `/metrics`, then each alarm from `/health` (3.5 on).
    async fn member_http(
        &self,
        h: &MemberHttp,
        c: &reqwest::Client,
    ) -> (
        Result<StatusGauges, NoStandIn>,
        Result<bool, NoStandIn>,
        Result<bool, NoStandIn>,
    ) {
        let timeout = self.config.timeout;
        self.metrics.request(LABEL, "metrics");
        let gauges = http_client::get_ok(c, &h.metrics, timeout, h.max_body_bytes)
            .await
            .map_err(Unavailable::Request)
            .and_then(|body| {
                promtext::parse(&body).map_err(|e| {
                    let text = format!("{}: {e}", h.metrics);
                    Unavailable::NotMetrics(h.metrics.scrub(&text).into_owned())
                })
            })
            .map(|samples| status_gauges(&samples))
            .map_err(NoStandIn::from);
        let health: Result<RedactedUrl, NoStandIn> = match &gauges {
            Err(e) => Err(e.clone()),
            Ok(g) => match (g.version.as_deref(), health_url(&h.metrics)) {
                (Some(v), Some(url)) if health_is_local(v) => Ok(url),
                (Some(v), Some(_)) => Err(Unavailable::HealthWrites(v.to_string()).into()),
                (None, _) => Err(Unavailable::NoVersion.into()),
                (_, None) => Err(Unavailable::NoHealthBeside(h.metrics.clone()).into()),
            },
        };
        let alarm = |alarm: Alarm| {
            let health = health.clone();
            async move {
                let url = health?.join(&alarm.query());
                self.metrics.request(LABEL, "health");
                // /health answers 503 with its JSON when it is not healthy.
                let f = http_client::get(c, &url, timeout, 4096)
                    .await
                    .map_err(Unavailable::Request)?;
                alarm_from_health(alarm, &f.body)
                    .map_err(|error| Unavailable::Health { url, error }.into())
            }
        };
        let (nospace, corrupt) = tokio::join!(alarm(Alarm::Nospace), alarm(Alarm::Corrupt));
        (gauges, nospace, corrupt)
    }
}
