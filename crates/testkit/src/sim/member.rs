//! What a test sees of one simulated member besides the verdict: [`Logged`],
//! a [`MemberApi`] that passes every call to the member and logs the
//! linearizable reads the exporter sends (when, and when and how each
//! ended: answered, failed, or given up); and [`spawn_peer_count`], the
//! member's metrics source as the exporter's own runner drives it (its
//! interval, the rounds the etcd source asks for), reading only
//! `active_peers` from the cluster ([`Cluster::active_peers`]), so that the
//! election credit is decided with the peer count as it is where the
//! member's `/metrics` is read.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_readiness_exporter::runtime::Runtime;
use etcd_readiness_exporter::runtime::clock::Clock;
use etcd_readiness_exporter::sources::etcd::api::{Call, MemberApi, MemberStatus, Watch};
use etcd_readiness_exporter::sources::{Pace, Reason, SampleError, Sampler, Sampling};
use etcd_readiness_exporter::sources::{SourceMetrics, spawn};
use etcd_readiness_policy::signals::{Builtin, SignalId, SignalStore, Source, Value};
use etcd_readiness_policy::sync::TolerantLock;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::cluster::Cluster;

/// One linearizable read sent to the member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    pub sent: Instant,
    /// When it ended and whether it was answered (`None`: still in flight,
    /// or given up by the exporter: a resend or its deadline dropped it).
    pub ended: Option<(Instant, bool)>,
}

/// A member whose linearizable reads are logged.
pub struct Logged {
    inner: Arc<dyn MemberApi>,
    reads: Arc<Mutex<Vec<Read>>>,
}

impl Logged {
    /// `inner`, its reads logged; the log to read them back.
    pub fn new(inner: Arc<dyn MemberApi>) -> (Arc<Logged>, ReadLog) {
        let reads = Arc::new(Mutex::new(Vec::new()));
        let log = ReadLog(reads.clone());
        (Arc::new(Logged { inner, reads }), log)
    }
}

/// The reads a [`Logged`] member saw, readable while it runs.
#[derive(Clone, Debug)]
pub struct ReadLog(Arc<Mutex<Vec<Read>>>);

impl ReadLog {
    pub fn reads(&self) -> Vec<Read> {
        self.0.locked().clone()
    }
}

impl MemberApi for Logged {
    fn status(&self) -> Call<'_, MemberStatus> {
        self.inner.status()
    }

    fn range(&self, serializable: bool) -> Call<'_, ()> {
        if serializable {
            return self.inner.range(true);
        }
        Box::pin(async move {
            let k = {
                let mut reads = self.reads.locked();
                reads.push(Read {
                    sent: Instant::now(),
                    ended: None,
                });
                reads.len() - 1
            };
            let r = self.inner.range(false).await;
            self.reads.locked()[k].ended = Some((Instant::now(), r.is_ok()));
            r
        })
    }

    fn watch(&self) -> Call<'_, Box<dyn Watch>> {
        self.inner.watch()
    }
}

/// The member's metrics source, `active_peers` only.
struct PeerCount {
    cluster: Arc<Cluster>,
    i: usize,
    pace: Pace,
    id: SignalId,
}

impl Sampler for PeerCount {
    fn pace(&self) -> Pace {
        self.pace.clone()
    }

    fn signals(&self) -> Vec<SignalId> {
        vec![self.id]
    }

    async fn sample(&mut self, store: &SignalStore, clock: &Clock) -> Result<(), SampleError> {
        let at = clock.now();
        let timeout = self.pace.timeout;
        let r = match tokio::time::timeout(timeout, self.cluster.active_peers(self.i)).await {
            Ok(Ok(peers)) => Ok(peers),
            Ok(Err(e)) => Err(SampleError::new(Reason::Connect, e.to_string())),
            Err(_) => Err(SampleError::new(Reason::Timeout, "/metrics timed out")),
        };
        match &r {
            Ok(peers) => store.record_ok(self.id, Value::Num(*peers), at),
            Err(e) => store.record_err(self.id, Arc::from(e.message.as_str()), at),
        }
        r.map(|_| ())
    }
}

/// Run member `i`'s metrics source (`active_peers` from the cluster) into
/// `engine`'s store, every `interval` within `timeout` (the exporter's
/// `--sample.interval` and `--sample.timeout`), on the exporter's runner.
pub fn spawn_peer_count(
    cluster: &Arc<Cluster>,
    i: usize,
    engine: &etcd_readiness_exporter::engine::EngineHandle,
    (interval, timeout): (Duration, Duration),
) -> JoinHandle<()> {
    let mut registry = prometheus_client::registry::Registry::default();
    let sampling = Sampling {
        store: engine.store().clone(),
        notifier: engine.notifier().clone(),
        metrics: SourceMetrics::register(&mut registry),
        runtime: Runtime::new(Clock::manual(std::time::SystemTime::UNIX_EPOCH, None)),
    };
    let make = {
        let cluster = cluster.clone();
        move || PeerCount {
            cluster: cluster.clone(),
            i,
            pace: Pace {
                source: Source::EtcdMetrics,
                interval,
                timeout,
            },
            id: Builtin::ActivePeers.id(),
        }
    };
    let first = make();
    spawn(first, move || Ok(make()), sampling)
}
