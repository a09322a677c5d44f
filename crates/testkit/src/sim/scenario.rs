//! One seeded run of the benchmark's fault script (benches/fault_accuracy.py)
//! on the simulated cluster: three exporters (the real etcd source behind
//! [`spawn_with`], the real engine, the default policy, default flags, the
//! member's peer count read as the metrics source reads it: [`PeerCount`]),
//! a kubelet worker per member on the shipped stanza, the truth (a
//! linearizable read through the member, sent every 100 ms, answered within
//! 1 s), scored as the benchmark scores.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use etcd_readiness_exporter::config::DEFAULT_POLICY;
use etcd_readiness_exporter::engine::metrics::EngineMetrics;
use etcd_readiness_exporter::engine::{EngineHandle, Timing};
use etcd_readiness_exporter::runtime::Runtime;
use etcd_readiness_exporter::runtime::clock::Clock;
use etcd_readiness_exporter::sources::etcd::{EtcdConfig, EtcdSettings, ReadFloor, spawn_with};
use etcd_readiness_exporter::sources::{
    self, Pace, Reason, RoundNotifier, SampleError, Sampler, Sampling, SourceMetrics,
};
use etcd_readiness_policy::policy::Policy;
use etcd_readiness_policy::signals::{Builtin, Catalogue, SignalId, SignalStore, Source, Value};
use etcd_readiness_policy::sync::TolerantLock;
use tokio::time::Instant;

use super::cluster::{Cluster, Fault, Links};
use super::kubelet::{Ready, Stanza, worker};
use super::{FAULTS, PHASES, Rng, Score, TICK};

/// The script's length (s) and the warm-up before it (the cluster elects,
/// the exporters and the workers start).
const SCRIPT: u64 = 88;
const WARMUP: Duration = Duration::from_secs(6);
/// A fault lands half a truth tick after its instant.
const OFFSET: Duration = Duration::from_millis(50);
/// The truth's bound: a read served within this is "can serve".
const TRUTH_BOUND: Duration = Duration::from_secs(1);

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("no runtime: {0}")]
    Runtime(std::io::Error),
    #[error("the default policy does not compile: {0}")]
    Policy(String),
}

/// Run seed `seed` of the script with `links`, the workers on `stanza`.
pub fn run(seed: u64, links: Links, stanza: Stanza) -> Result<Score, SimError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(SimError::Runtime)?;
    rt.block_on(run_in(seed, links, stanza))
}

/// The builtin catalogue (every source enabled, as the shipped default
/// with the member's metrics read: `active_peers` included, so the etcd
/// source's election credit waits for the count) and the default policy
/// compiled against it: the same for every run, so built once per process
/// and shared (neither has any state a run could change).
pub fn shared() -> Result<(Arc<Catalogue>, Arc<Policy>), SimError> {
    type Shared = Result<(Arc<Catalogue>, Arc<Policy>), String>;
    static SHARED: OnceLock<Shared> = OnceLock::new();
    let made = SHARED.get_or_init(|| {
        let catalogue = Arc::new(Catalogue::builtin());
        let policy = Policy::compile("<default>", DEFAULT_POLICY, &catalogue)
            .map_err(|e| format!("{e:?}"))?;
        Ok((catalogue, Arc::new(policy)))
    });
    made.clone().map_err(SimError::Policy)
}

/// The exporter's `etcd_metrics` source as far as the etcd source's
/// election credit reads it: `active_peers` from member `i`'s `/metrics`
/// ([`Cluster::metrics`]) every `--etcd.metrics-interval` (1 s) and at
/// each round the credit requests, run by the sources' own runner
/// ([`sources::spawn`](etcd_readiness_exporter::sources::spawn)), so the
/// requested rounds and their gap are the exporter's. No HTTP: a member
/// that is down refuses at once, a frozen one times out.
pub struct PeerCount {
    cluster: Arc<Cluster>,
    i: usize,
    id: SignalId,
}

/// `--etcd.metrics-interval`'s default, and the round's deadline the flags
/// give it (`--sample-timeout`'s 500 ms, at most the interval).
const METRICS_INTERVAL: Duration = Duration::from_secs(1);
const METRICS_TIMEOUT: Duration = Duration::from_millis(500);

impl Sampler for PeerCount {
    fn pace(&self) -> Pace {
        Pace {
            source: Source::EtcdMetrics,
            interval: METRICS_INTERVAL,
            timeout: METRICS_TIMEOUT,
        }
    }

    fn signals(&self) -> Vec<SignalId> {
        vec![self.id]
    }

    async fn sample(&mut self, store: &SignalStore, clock: &Clock) -> Result<(), SampleError> {
        let got = tokio::time::timeout(METRICS_TIMEOUT, self.cluster.metrics(self.i)).await;
        let at = clock.now();
        let err = match got {
            Ok(Ok(n)) => {
                store.record_ok(self.id, Value::Num(n as f64), at);
                return Ok(());
            }
            Ok(Err(e)) => SampleError::new(Reason::Connect, e.to_string()),
            Err(_) => SampleError::new(Reason::Timeout, "the member's /metrics timed out"),
        };
        store.record_err(self.id, Arc::from(err.message.as_str()), at);
        Err(err)
    }
}

/// The etcd source's configuration in every exporter of the sim: the
/// default flags (`--sample.interval 1s --sample.timeout 500ms`, no CPU
/// limit), the member behind the seam, etcd's default settings (those the
/// simulated members run).
pub fn etcd_config() -> EtcdConfig {
    EtcdConfig {
        endpoint: "http://sim:2379".into(),
        tls: None,
        auth: None,
        probe_key: "health".into(),
        interval: Duration::from_secs(1),
        timeout: Duration::from_millis(500),
        freeze: Duration::ZERO,
        member_http: None,
        etcd: EtcdSettings {
            heartbeat: super::cluster::HEARTBEAT,
            election: super::cluster::ELECTION,
        },
    }
}

/// One exporter at member `i` of `cluster` with the default flags and
/// policy, its member's peer count read ([`PeerCount`]).
fn exporter(
    cluster: &Arc<Cluster>,
    i: usize,
    catalogue: &Arc<Catalogue>,
    policy: &Arc<Policy>,
) -> EngineHandle {
    exporter_with(cluster.api(i), Some((cluster, i)), catalogue, policy)
}

/// One exporter at member `api` with the default flags ([`etcd_config`])
/// and policy: the real etcd source ([`spawn_with`]) and the real engine,
/// running; with `peers`, the peer count of member `i` of that cluster
/// read ([`PeerCount`]); without, none (the credit decides without it).
pub fn exporter_with(
    api: Arc<dyn etcd_readiness_exporter::sources::etcd::api::MemberApi>,
    peers: Option<(&Arc<Cluster>, usize)>,
    catalogue: &Arc<Catalogue>,
    policy: &Arc<Policy>,
) -> EngineHandle {
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let runtime = Runtime::new(Clock::manual(wall, None));
    let store = Arc::new(SignalStore::new(catalogue));
    let notifier = RoundNotifier::new();
    let mut registry = prometheus_client::registry::Registry::default();
    let config = etcd_config();
    let timing = Timing {
        sample_interval: config.interval,
        sample_timeout: config.timeout,
    };
    let engine = EngineHandle::new(
        policy.clone(),
        catalogue.clone(),
        store.clone(),
        notifier.clone(),
        EngineMetrics::register(&mut registry),
        timing,
        runtime.clone(),
    );
    engine.spawn();
    let floor = ReadFloor::default();
    floor.follow(policy);
    let sampling = Sampling {
        store,
        notifier,
        metrics: SourceMetrics::register(&mut registry),
        runtime,
    };
    if let Some((cluster, i)) = peers {
        let peers = move |cluster: Arc<Cluster>| PeerCount {
            cluster,
            i,
            id: Builtin::ActivePeers.id(),
        };
        let (first, c) = (peers(cluster.clone()), cluster.clone());
        sources::spawn(first, move || Ok(peers(c.clone())), sampling.clone());
    }
    spawn_with(api, config, catalogue, sampling, floor);
    engine
}

/// The fault script, from `t0`, at the times of [`FAULTS`] (the
/// benchmark's); the member each fault is about.
async fn script(cluster: &Cluster, t0: Instant, about: &Mutex<[usize; 4]>) {
    let at = |s: u64| tokio::time::sleep_until(t0 + Duration::from_secs(s) + OFFSET);
    at(FAULTS[0].1).await;
    let leader = cluster.leader().unwrap_or(0);
    cluster.apply(Fault::Kill(leader));
    about.locked()[0] = leader;
    at(FAULTS[0].2).await;
    cluster.apply(Fault::Restart(leader));
    at(FAULTS[1].1).await;
    let leader = cluster.leader().unwrap_or(0);
    let other = cluster.follower(Some(leader));
    cluster.apply(Fault::Kill(leader));
    cluster.apply(Fault::Kill(other));
    about.locked()[1] = 3 - leader - other;
    at(FAULTS[1].2).await;
    cluster.apply(Fault::Restart(leader));
    cluster.apply(Fault::Restart(other));
    at(FAULTS[2].1).await;
    let stopped = cluster.follower(None);
    cluster.apply(Fault::Freeze(stopped));
    about.locked()[2] = stopped;
    at(FAULTS[2].2).await;
    cluster.apply(Fault::Thaw(stopped));
    at(FAULTS[3].1).await;
    let leader = cluster.leader().unwrap_or(0);
    cluster.apply(Fault::Cut(leader));
    about.locked()[3] = leader;
    at(FAULTS[3].2).await;
    cluster.apply(Fault::Heal(leader));
}

type Series = Arc<Mutex<Vec<[Option<bool>; 3]>>>;
/// How long each truth read took (s).
type Took = Arc<Mutex<Vec<[Option<f64>; 3]>>>;

async fn run_in(seed: u64, links: Links, stanza: Stanza) -> Result<Score, SimError> {
    let cluster = Cluster::new(seed, links);
    let mut rng = Rng::new(seed ^ 0x005e_ed0f_ca5e);
    tokio::spawn(cluster.clone().drive());
    let (catalogue, policy) = shared()?;
    let t0 = Instant::now() + WARMUP;
    let mut readies = Vec::new();
    for i in 0..3 {
        let engine = exporter(&cluster, i, &catalogue, &policy);
        let ready = Ready::default();
        let phase = stanza.period.mul_f64(rng.f64());
        let start = t0 - WARMUP + Duration::from_secs(1) + phase;
        tokio::spawn(worker(engine, stanza, start, ready.clone()));
        readies.push(ready);
    }
    let n = (SCRIPT * 10) as usize;
    let truth: Series = Arc::new(Mutex::new(vec![[None; 3]; n]));
    let took: Took = Arc::new(Mutex::new(vec![[None; 3]; n]));
    let mut said = vec![[false; 3]; n];
    let (s, about) = (cluster.clone(), Arc::new(Mutex::new([0; 4])));
    let a = about.clone();
    tokio::spawn(async move { script(&s, t0, &a).await });
    for (i, said) in said.iter_mut().enumerate() {
        tokio::time::sleep_until(t0 + TICK * i as u32).await;
        for (k, ready) in readies.iter().enumerate() {
            said[k] = ready.get();
            let (api, truth, took) = (cluster.api(k), truth.clone(), took.clone());
            tokio::spawn(async move {
                let sent = Instant::now();
                let ok = tokio::time::timeout(TRUTH_BOUND, api.range(false)).await;
                truth.locked()[i][k] = Some(matches!(ok, Ok(Ok(()))));
                took.locked()[i][k] = Some(sent.elapsed().as_secs_f64());
            });
        }
    }
    tokio::time::sleep(TRUTH_BOUND + TICK).await;
    let (truth, took) = (truth.locked().clone(), took.locked().clone());
    let about = *about.locked();
    Ok(Score::of(&said, (&truth, &took), &PHASES, about))
}
