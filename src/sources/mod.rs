//! Sources: the parts that sample the outside world — this etcd member (over
//! gRPC, and its own metrics endpoint), the backup sidecar, the DNS owner record, generic Prometheus endpoints — into
//! the signal store.
//! Each source but etcd implements [`Sampler`]; [`spawn`] runs one sampler on
//! its own tokio task at its interval, under the supervisor of the
//! [`Sampling`]'s [`Runtime`] (a panic restarts it with a fresh sampler, see
//! [`crate::runtime::supervise`]), records how long each round took
//! and why it failed, and tells the engine (through a [`RoundNotifier`]) that
//! new samples are in the store. The etcd source runs its own loops
//! ([`etcd::spawn`]: a connection watch, Status and the reads at their own
//! paces) on the same supervisor and tells the engine the same way, after
//! every call and at once when its connection is lost.

pub mod backup;
pub mod config;
pub mod etcd;
pub mod etcd_auth;
pub mod etcd_metrics;
pub mod owner;
pub mod promtext;
pub mod scrape;
pub mod scrape_set;
pub mod tls_material;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::runtime::Runtime;
use crate::runtime::clock::Clock;
use etcd_readiness_policy::signals::{SignalId, SignalStore, Source};
use etcd_readiness_policy::sync::TolerantLock;

/// The failure vocabulary of every read from outside, shared with the HTTP
/// client below this layer.
pub use crate::outside::failure::{Reason, SampleError};

/// How old a sample may be before its signal reads as unknown ("stale"):
/// three missed rounds plus one round's deadline. The one place this rule
/// lives; the engine's "evaluation wedged" bound uses it too.
pub fn staleness_bound(interval: Duration, timeout: Duration) -> Duration {
    interval.saturating_mul(3).saturating_add(timeout)
}

/// One source of signals.
pub trait Sampler: Send + 'static {
    /// Which source it is and how often and how long it samples.
    fn pace(&self) -> Pace;
    /// Every signal this sampler writes; the runner gives each the
    /// staleness bound of [`staleness_bound`].
    fn signals(&self) -> Vec<SignalId>;
    /// One round: write every signal of this source into the store (record_ok or record_err for
    /// each, with the round's Instant). Must bound its own time (timeouts on every network call).
    /// `clock` is the one clock: a sampler reads no other.
    fn sample(
        &mut self,
        store: &SignalStore,
        clock: &Clock,
    ) -> impl std::future::Future<Output = Result<(), SampleError>> + Send;
}

/// A sampler's source and pace: a round every `interval`, its calls
/// bounded by `timeout`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pace {
    pub source: Source,
    pub interval: Duration,
    /// The deadline of one round's calls.
    pub timeout: Duration,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    source: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    source: String,
    call: String,
}

/// `etcd_readiness_sample_duration_seconds{source}`,
/// `etcd_readiness_sample_errors_total{source,reason}` and
/// `etcd_readiness_source_requests_total{source,call}`.
#[derive(Clone, Debug)]
pub struct SourceMetrics {
    duration: Family<SourceLabels, Histogram>,
    errors: Family<ErrorLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
}

impl SourceMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let duration = Family::<SourceLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ])
        });
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "etcd_readiness_sample_duration_seconds",
            "Time one sample took: one round of a source; for etcd one call (Status, or the reads)",
            duration.clone(),
        );
        registry.register(
            "etcd_readiness_sample_errors",
            "Samples that failed (rounds; for etcd calls), by source and bounded reason",
            errors.clone(),
        );
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "etcd_readiness_source_requests",
            "Requests the exporter sent to a source, by call (etcd: status, range, watch, member_list)",
            requests.clone(),
        );
        SourceMetrics {
            duration,
            errors,
            requests,
        }
    }

    /// Create `source`'s error series at zero, one per [`Reason`], so that
    /// the family is in every scrape and `rate()`/`increase()` see a
    /// source's first failure (Prometheus' advice for known label values).
    pub fn start_source(&self, source: &str) {
        for reason in Reason::ALL {
            let _ = self.errors.get_or_create(&ErrorLabels {
                source: source.to_string(),
                reason: reason.to_string(),
            });
        }
    }

    /// Count one request of `call` to `source` (what the exporter costs the
    /// source; the accuracy benchmark reports its rate).
    pub fn request(&self, source: &str, call: &str) {
        self.requests
            .get_or_create(&RequestLabels {
                source: source.to_string(),
                call: call.to_string(),
            })
            .inc();
    }

    /// Count a failure that is not a round (the etcd connection's loss).
    pub fn error(&self, source: &str, reason: Reason) {
        self.errors
            .get_or_create(&ErrorLabels {
                source: source.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    pub(crate) fn observe(&self, source: &str, took: Duration, error: Option<&SampleError>) {
        self.duration
            .get_or_create(&SourceLabels {
                source: source.to_string(),
            })
            .observe(took.as_secs_f64());
        if let Some(e) = error {
            self.errors
                .get_or_create(&ErrorLabels {
                    source: source.to_string(),
                    reason: e.reason.to_string(),
                })
                .inc();
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct RoundInfo {
    /// `None` until the first round finishes.
    last: Option<Instant>,
    interval: Duration,
    timeout: Duration,
}

/// What the [`RoundNotifier`] knows of one source's rounds, for `/livez`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rounds {
    /// The source's label (`etcd`, `backup`, `scrape:NAME`, …).
    pub label: String,
    /// When its last round finished; `None` while the first one runs.
    pub last: Option<Instant>,
    pub interval: Duration,
    /// The deadline of one round's calls.
    pub timeout: Duration,
}

impl Rounds {
    /// How long after a round the next one must have finished: the
    /// [`staleness_bound`] its signals go stale at.
    pub fn bound(&self) -> Duration {
        staleness_bound(self.interval, self.timeout)
    }
}

/// Shared between the samplers and the engine: wakes the engine after each
/// round and remembers when each source last finished one (for `/livez` and
/// for the engine's "starting" state). Round notification only: the
/// supervisor and the clock are the [`Runtime`]'s, handed to each task.
#[derive(Clone, Debug, Default)]
pub struct RoundNotifier {
    notify: Arc<Notify>,
    rounds: Arc<Mutex<HashMap<String, RoundInfo>>>,
    /// Per source: a round asked for before its turn ([`Self::request_round`]).
    requests: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl RoundNotifier {
    pub fn new() -> Self {
        Self::default()
    }

    /// Say that `source` will finish a round every `interval`, each within
    /// `timeout`, before its first one: from now on `/livez` expects it.
    pub fn expect(&self, source: &Source, interval: Duration, timeout: Duration) {
        self.lock().entry(source.label()).or_insert(RoundInfo {
            last: None,
            interval,
            timeout,
        });
    }

    /// Record that `source` finished a round at `now` (the source's clock)
    /// and wake the engine. A source not [`expect`](Self::expect)ed is taken
    /// to need up to its interval for a round, the longest timeout the flags
    /// allow.
    pub fn round_finished(&self, source: &Source, interval: Duration, now: Instant) {
        self.lock()
            .entry(source.label())
            .and_modify(|r| {
                r.last = Some(now);
                r.interval = interval;
            })
            .or_insert(RoundInfo {
                last: Some(now),
                interval,
                timeout: interval,
            });
        self.notify.notify_one();
    }

    /// Wake the engine without finishing a round: a call still in flight
    /// has outlived the trust in the last answer, so its signals turn
    /// unknown now, not at the engine's next tick.
    pub fn wake(&self) {
        self.notify.notify_one();
    }

    /// Ask `source` for a round now, before its turn: the etcd source wants
    /// this member's peer count read after a linearizable read started to
    /// wait, to tell an election from a lost quorum. The source's loop runs
    /// a requested round at most every [`MIN_REQUESTED_GAP`]; a request
    /// while a round runs starts the next one after it; requests for a source
    /// that does not run are kept and cost nothing.
    pub fn request_round(&self, source: &Source) {
        self.round_requests(source).notify_one();
    }

    /// What [`run`] waits on beside its ticker: the requests for `source`.
    fn round_requests(&self, source: &Source) -> Arc<Notify> {
        let mut r = self.requests.locked();
        r.entry(source.label()).or_default().clone()
    }

    /// When `source` last finished a round.
    pub fn last_round(&self, source: &Source) -> Option<Instant> {
        self.lock().get(&source.label()).and_then(|r| r.last)
    }

    /// Every source expected or that has finished a round, by label.
    pub fn rounds(&self) -> Vec<Rounds> {
        let mut v: Vec<Rounds> = self
            .lock()
            .iter()
            .map(|(label, r)| Rounds {
                label: label.clone(),
                last: r.last,
                interval: r.interval,
                timeout: r.timeout,
            })
            .collect();
        v.sort_by(|a, b| a.label.cmp(&b.label));
        v
    }

    /// Wait until some source finishes a round (a round finished while nobody
    /// waited is remembered, so none is lost).
    pub async fn notified(&self) {
        self.notify.notified().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RoundInfo>> {
        self.rounds.locked()
    }
}

/// The shortest time between two requested rounds of a source
/// ([`RoundNotifier::request_round`]): what an outage can cost a source
/// asked again and again (10 more rounds a second at most).
pub const MIN_REQUESTED_GAP: Duration = Duration::from_millis(100);

/// What every sampler task writes into and reports through.
#[derive(Clone, Debug)]
pub struct Sampling {
    pub store: Arc<SignalStore>,
    pub notifier: RoundNotifier,
    pub metrics: SourceMetrics,
    /// The clock a sampler reads and the supervisor its task runs under.
    pub runtime: Runtime,
}

/// A sampler built from its spec and not yet running. [`prepare`] builds
/// it once, so a bad flag fails before anything starts; [`Prepared::spawn`]
/// runs that sampler and, after a panic, builds the next from the same spec.
pub struct Prepared(Box<StartSampler>);

type StartSampler = dyn FnOnce(&Sampling) -> JoinHandle<()> + Send;

/// Build the first sampler from `spec` (a closure over the source's
/// configuration and the catalogue), keeping `spec` for restarts.
pub fn prepare<S, F>(mut spec: F) -> Result<Prepared, crate::outside::http_client::SourceError>
where
    S: Sampler,
    F: FnMut() -> Result<S, crate::outside::http_client::SourceError> + Send + 'static,
{
    let first = spec()?;
    Ok(Prepared(Box::new(move |s: &Sampling| {
        spawn(first, spec, s.clone())
    })))
}

impl Prepared {
    /// Start the sampler's supervised task.
    pub fn spawn(self, sampling: &Sampling) -> JoinHandle<()> {
        (self.0)(sampling)
    }
}

/// Run `first` on its own supervised task (`sampler:<source>`): one round per
/// interval (a slow round delays the next tick instead of bursting), metrics
/// per round, a notification to the engine after each round. If a round
/// panics, the supervisor logs and counts it and, after a backoff, runs a
/// fresh sampler from `remake`. The task runs until the handle is aborted.
pub fn spawn<S, F>(first: S, mut remake: F, sampling: Sampling) -> JoinHandle<()>
where
    S: Sampler,
    F: FnMut() -> Result<S, crate::outside::http_client::SourceError> + Send + 'static,
{
    let pace = first.pace();
    let label = pace.source.label();
    sampling.metrics.start_source(&label);
    sampling
        .notifier
        .expect(&pace.source, pace.interval, pace.timeout);
    let mut first = Some(first);
    let supervisor = sampling.runtime.supervisor.clone();
    let task = format!("sampler:{label}");
    supervisor.spawn(task, move || {
        let sampler = first.take().map_or_else(&mut remake, Ok);
        let (sampling, label) = (sampling.clone(), label.clone());
        async move {
            match sampler {
                Ok(s) => run(s, sampling).await,
                // Returning makes the supervisor retry after its backoff.
                Err(e) => tracing::error!(source = %label, "cannot set up the sampler again: {e}"),
            }
        }
    })
}

async fn run<S: Sampler>(mut sampler: S, sampling: Sampling) {
    let Sampling {
        store,
        notifier,
        metrics,
        runtime: Runtime { clock, .. },
    } = sampling;
    let Pace {
        source,
        interval,
        timeout,
    } = sampler.pace();
    let label = source.label();
    let bound = staleness_bound(interval, timeout);
    for id in sampler.signals() {
        store.set_staleness(id, bound);
    }
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let requests = notifier.round_requests(&source);
    let mut last_requested: Option<Instant> = None;
    loop {
        // Biased, as every select of the sampling and evaluation loops: the
        // same branch wins every time both are ready (tokio's default
        // picks at random), so a run on virtual time is reproducible.
        tokio::select! {
            biased;
            _ = ticker.tick() => {}
            _ = requests.notified() => {
                // A requested round, no sooner than MIN_REQUESTED_GAP after
                // the last requested one; the ticker's next turn counts
                // from it.
                if let Some(at) = last_requested {
                    tokio::time::sleep_until((at + MIN_REQUESTED_GAP).into()).await;
                }
                last_requested = Some(clock.now());
                ticker.reset();
            }
        }
        let started = clock.now();
        let result = sampler.sample(&store, &clock).await;
        let took = clock.now().saturating_duration_since(started);
        metrics.observe(&label, took, result.as_ref().err());
        if let Err(e) = &result {
            tracing::debug!(source = %label, reason = e.reason.as_str(), "sample round failed: {}", e.message);
        }
        notifier.round_finished(&source, interval, clock.now());
    }
}
