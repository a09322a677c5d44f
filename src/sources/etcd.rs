//! The etcd source: one gRPC client for this one member, and three loops on
//! one supervised task (`sampler:etcd`) that keep its signals current
//! without writing to etcd (no call costs a raft proposal; alarms are read
//! from `Status.errors`, not `Maintenance.Alarm`, which goes through raft in
//! etcd 3.4):
//!
//! - **connection**: a Watch stream on the probe key (served by the member
//!   itself, no raft), whose only job is to break. When the member's
//!   connection drops the stream ends, and every etcd signal becomes
//!   unknown at once ("connection to etcd lost: …"), without waiting for a
//!   sampling round. While it is down the stream is re-opened every
//!   [`EtcdConfig::retry`]; when it opens again, Status and the reads run at
//!   once instead of at their next turn.
//! - **status**: `Maintenance.Status`, answered locally by the member, every
//!   [`EtcdConfig::fast`] (a tenth of `--sample.interval`). While it is in
//!   flight its signals keep their last answer for [`EtcdConfig::trust`]
//!   (one fast period); a Status pending longer makes them unknown ("the
//!   last answer is outdated"), so a frozen member is seen in about
//!   `fast/2 + trust`, not after the call's timeout.
//! - **reads**: a linearizable single-key, keys-only Range every
//!   [`EtcdConfig::fast`], and a serializable one every `--sample.interval`
//!   (every `fast` while it fails or is slow). While a read is in flight the
//!   store carries it as pending ([`SignalStore::record_pending`]): the last
//!   answer counts for [`EtcdConfig::trust`], then the reading is unknown,
//!   and a read pending for 1 s proves `qget_ms < 1000` false before its
//!   timeout. A follower that was serving and keeps answering Status earns
//!   the election credit ([`ELECTION_TRUST`]): its pending linearizable
//!   read is trusted, and given, up to 1 s, since a new leader answers it;
//!   a read etcd fails with "leader changed" is asked again at once. Where
//!   the member's metrics are read, the credit also needs a peer count read
//!   after the read started (asked for half-way through its trust): a lost
//!   quorum's survivor, whose peers' connections closed, gets none.
//!   Status also gives `leaderless`, how long it has shown no leader.
//!
//! Every call is bounded twice: by the client's own request timeout and by a
//! `tokio::time::timeout` around it. A loss of the connection bumps an epoch;
//! results of calls started before it are dropped, so a late answer cannot
//! overwrite the loss.

use std::error::Error as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    Certificate, Client, ConnectOptions, GetOptions, Identity, StatusResponse, TlsOptions,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::identity::MemberInfo;
use super::{
    MIN_REQUESTED_GAP, Reason, RoundNotifier, SampleError, SourceMetrics, staleness_bound,
};
use crate::redacted_url::RedactedUrl;
use crate::signals::{Builtin, Catalogue, SignalId, SignalStore, Source, Trust, Value};

/// PEM material for mTLS to etcd.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    pub ca: Vec<u8>,
    /// Client certificate and key; `None` for server-only TLS.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// What the etcd source needs.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    pub endpoint: RedactedUrl,
    pub tls: Option<EtcdTls>,
    pub probe_key: String,
    pub interval: Duration,
    pub timeout: Duration,
    /// The longest the exporter's own CPU limit can freeze it (one CFS
    /// period, see [`crate::cpuquota`]); zero without a limit.
    pub freeze: Duration,
}

/// The shortest period of any loop: a tiny `--sample.interval` must not
/// spin.
const MIN_FAST: Duration = Duration::from_millis(10);
/// The longest time between two attempts to re-open a lost connection.
const MAX_RETRY: Duration = Duration::from_millis(100);
/// The shortest trust period: below it, a loaded machine's scheduling delay
/// alone (a debug build under an HTTP flood took 26 ms for one read) would
/// outdate healthy answers.
const MIN_TRUST: Duration = Duration::from_millis(100);
/// The longest a pending call is trusted however long the node's CPU was
/// contended while it waited ([`crate::contention`]): the default check's
/// own bound (a read pending for 1 s proves `qget_ms < 1000` false). Only a
/// moment of contention is forgiven; a node saturated for longer than this
/// makes its member not ready, as its clients see it.
const CONTENDED_TRUST_MAX: Duration = Duration::from_secs(1);
/// The election credit: how long a pending linearizable read of a follower
/// that was serving and keeps answering Status is trusted, and how long it
/// is given before it times out. Such a follower's read waits for a leader
/// (one died or is cut off; etcd's default election timeout is 1 s), and
/// every read it holds is answered the moment one is elected: etcd's own
/// `/readyz` and `/health` answer them then too. 1 s is the default check's
/// own bound, where a pending read proves `qget_ms < 1000` false anyway.
/// The leader itself, a learner, a member whose Status does not answer, one
/// whose metrics show no active peer, and one whose last read failed get no
/// credit ([`Shared::election_credit`]).
const ELECTION_TRUST: Duration = Duration::from_secs(1);
/// Why a credit waits: the member's peer count, asked for while the read
/// waits, has not been read yet.
const PEERS_NOT_READ: &str = "its peer count was not read since the read started";
/// How much longer a pending linearizable read is trusted while the peer
/// count that decides its credit is being read (one GET of etcd's
/// `/metrics` on loopback; a few ms, more on a busy node): the price a lost
/// quorum pays in the worst case for an election's read being judged right.
const PEERS_READ_WAIT: Duration = Duration::from_millis(100);
/// How often a credited read checks that its member still earns the credit.
const CREDIT_CHECK: Duration = Duration::from_millis(10);
/// What the trust period adds to a freeze by the exporter's own CPU limit:
/// after a freeze the answer that arrived meanwhile still has to be read.
const FREEZE_MARGIN: Duration = Duration::from_millis(20);

impl EtcdConfig {
    /// The period of Status and the linearizable read: a tenth of the
    /// interval (100 ms by default), at least 10 ms.
    pub fn fast(&self) -> Duration {
        (self.interval / 10).max(MIN_FAST)
    }

    /// How long the last answer of Status or a read stays trusted while a
    /// newer call is pending: one fast period, at least 100 ms (100 ms by
    /// default; a healthy member answers both in a few ms), and under a CPU
    /// limit at least one freeze plus 20 ms (120 ms with Kubernetes' 100 ms
    /// CFS period), so that the exporter's own throttling is not taken for a
    /// member that stopped answering. A call pending longer makes its
    /// signals unknown ("the last answer is outdated") until it answers or
    /// times out.
    ///
    /// The time the node's CPU was contended while the call waited extends
    /// it, to at most 1 s ([`Trust`], [`crate::contention`]): a healthy
    /// member on a node busy for a moment is late because it could not run.
    pub fn trust(&self) -> Trust {
        let freeze = if self.freeze.is_zero() {
            Duration::ZERO
        } else {
            self.freeze.saturating_add(FREEZE_MARGIN)
        };
        let base = self.fast().max(MIN_TRUST).max(freeze);
        Trust {
            base,
            contended_max: base.max(CONTENDED_TRUST_MAX),
        }
    }

    /// How often a lost connection is tried again: [`fast`](Self::fast), at
    /// most 100 ms. Attempts write nothing to the store; only the first
    /// success does something (an immediate Status and reads).
    pub fn retry(&self) -> Duration {
        self.fast().min(MAX_RETRY)
    }
}

#[derive(Clone, Copy, Debug)]
struct Ids {
    etcd_up: SignalId,
    leader: SignalId,
    is_leader: SignalId,
    learner: SignalId,
    qget_ms: SignalId,
    sget_ms: SignalId,
    revision: SignalId,
    raft_term: SignalId,
    raft_index: SignalId,
    applied_index: SignalId,
    apply_lag: SignalId,
    db_size_bytes: SignalId,
    db_in_use_bytes: SignalId,
    alarm_nospace: SignalId,
    alarm_corrupt: SignalId,
    leader_changes: SignalId,
    leaderless: SignalId,
}

impl Ids {
    /// Resolved at compile time: built-in ids are the same in every catalogue.
    const BUILTIN: Ids = Ids {
        etcd_up: Builtin::EtcdUp.id(),
        leader: Builtin::Leader.id(),
        is_leader: Builtin::IsLeader.id(),
        learner: Builtin::Learner.id(),
        qget_ms: Builtin::QgetMs.id(),
        sget_ms: Builtin::SgetMs.id(),
        revision: Builtin::Revision.id(),
        raft_term: Builtin::RaftTerm.id(),
        raft_index: Builtin::RaftIndex.id(),
        applied_index: Builtin::AppliedIndex.id(),
        apply_lag: Builtin::ApplyLag.id(),
        db_size_bytes: Builtin::DbSizeBytes.id(),
        db_in_use_bytes: Builtin::DbInUseBytes.id(),
        alarm_nospace: Builtin::AlarmNospace.id(),
        alarm_corrupt: Builtin::AlarmCorrupt.id(),
        leader_changes: Builtin::LeaderChanges.id(),
        leaderless: Builtin::Leaderless.id(),
    };

    /// Signals that come from `Maintenance.Status`: every etcd signal of the
    /// catalogue but etcd_up and the reads.
    fn status_ids(&self) -> impl Iterator<Item = SignalId> {
        let not_status = [self.etcd_up, self.qget_ms, self.sget_ms];
        Builtin::of(Source::Etcd)
            .map(Builtin::id)
            .filter(move |id| !not_status.contains(id))
    }

    /// Every etcd signal of the catalogue.
    fn all(&self) -> Vec<SignalId> {
        Builtin::of(Source::Etcd).map(Builtin::id).collect()
    }
}

/// Run the etcd source on its own supervised task (`sampler:etcd`); a panic
/// restarts it with a fresh client. Runs until the handle is aborted.
pub fn spawn(
    config: EtcdConfig,
    catalogue: &Catalogue,
    store: Arc<SignalStore>,
    notifier: RoundNotifier,
    metrics: SourceMetrics,
    member_info: Option<MemberInfo>,
) -> JoinHandle<()> {
    let ids = Ids::BUILTIN;
    // The member's own peer count, where its metrics source is configured.
    let active_peers = Some(Builtin::ActivePeers.id()).filter(|id| catalogue.is_enabled(*id));
    metrics.start_source(LABEL);
    let supervisor = notifier.supervisor().clone();
    supervisor.spawn(format!("sampler:{}", Source::Etcd.label()), move || {
        let sh = Arc::new(Shared {
            config: config.clone(),
            ids,
            store: store.clone(),
            notifier: notifier.clone(),
            metrics: metrics.clone(),
            client: tokio::sync::Mutex::new(None),
            epoch: Mutex::new(0),
            wake_status: Notify::new(),
            wake_reads: Notify::new(),
            member_info: member_info.clone(),
            qget_served: AtomicBool::new(false),
            qget_credited: AtomicBool::new(false),
            active_peers,
        });
        async move { sh.run().await }
    })
}

/// What the three loops share.
struct Shared {
    config: EtcdConfig,
    ids: Ids,
    store: Arc<SignalStore>,
    notifier: RoundNotifier,
    metrics: SourceMetrics,
    client: tokio::sync::Mutex<Option<Client>>,
    /// Bumped by every loss of the connection; a result is recorded only if
    /// the epoch is still the one its call started in (checked and recorded
    /// under this lock, so a loss cannot interleave).
    epoch: Mutex<u64>,
    wake_status: Notify,
    wake_reads: Notify,
    /// `etcd_readiness_member_info`, updated from successful Status answers.
    member_info: Option<MemberInfo>,
    /// The last linearizable read answered (false after a failure or a
    /// lost connection): only a member that was serving earns the election
    /// credit, so a credit is given at most once per outage.
    qget_served: AtomicBool,
    /// The pending linearizable read holds the election credit: `bounded`
    /// gives it until [`ELECTION_TRUST`].
    qget_credited: AtomicBool,
    /// `active_peers` when the member's metrics source is configured.
    active_peers: Option<SignalId>,
}

const LABEL: &str = "etcd";

impl Shared {
    async fn run(self: Arc<Self>) {
        let fast = self.config.fast();
        // A call is given up to CONTENDED_TRUST_MAX more on a busy node
        // (`bounded`); its samples are kept as much longer. The reads share
        // one loop, and a linearizable read holding the election credit is
        // given until ELECTION_TRUST: both reads' samples are kept as much
        // longer (the serializable one waits for its round).
        let bound = |period, deadline| {
            let base = staleness_bound(period, deadline);
            Trust {
                base,
                contended_max: base + CONTENDED_TRUST_MAX,
            }
        };
        for id in self.ids.all() {
            self.store
                .set_staleness(id, bound(fast, self.config.timeout));
        }
        let reads = self.config.timeout.max(ELECTION_TRUST);
        self.store
            .set_staleness(self.ids.qget_ms, bound(fast, reads));
        self.store
            .set_staleness(self.ids.sget_ms, bound(self.config.interval, reads));
        tokio::join!(self.connection_loop(), self.status_loop(), self.read_loop());
    }

    fn epoch(&self) -> u64 {
        *self.epoch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `record` if no loss happened since `epoch`.
    fn record_in(&self, epoch: u64, record: impl FnOnce(&SignalStore)) -> bool {
        let cur = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
        if *cur != epoch {
            return false;
        }
        record(&self.store);
        true
    }

    fn round_finished(&self) {
        self.notifier
            .round_finished(&Source::Etcd, self.config.interval);
    }

    async fn client(&self) -> Result<Client, SampleError> {
        let mut slot = self.client.lock().await;
        if let Some(c) = &*slot {
            return Ok(c.clone());
        }
        let cfg = &self.config;
        // The client's own request timeout leaves room for the contention
        // credit: [`bounded`] decides when a call has taken too long.
        let mut opts = ConnectOptions::new()
            .with_timeout(cfg.timeout + CONTENDED_TRUST_MAX)
            .with_connect_timeout(cfg.timeout + CONTENDED_TRUST_MAX);
        if let Some(tls) = &cfg.tls {
            let mut t = TlsOptions::new().ca_certificate(Certificate::from_pem(&tls.ca));
            if let Some((cert, key)) = &tls.identity {
                t = t.identity(Identity::from_pem(cert, key));
            }
            opts = opts.with_tls(t);
        }
        let endpoint = cfg.endpoint.expose_for_request().to_string();
        let client = bounded(cfg.timeout, &cfg.endpoint, "connect", async move {
            Client::connect([endpoint], Some(opts)).await
        })
        .await?;
        // Keep the client even after errors: tonic reconnects by itself, and
        // a fresh client would not help a member that does not answer.
        *slot = Some(client.clone());
        Ok(client)
    }

    /// The connection broke: every signal is unknown now, with `why`.
    fn lost(&self, why: &str) {
        let why = self.config.endpoint.scrub(why);
        let at = Instant::now();
        {
            let mut epoch = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
            *epoch += 1;
            self.qget_served.store(false, Ordering::Relaxed);
            let msg: Arc<str> = Arc::from(format!("connection to etcd lost: {why}"));
            for id in self.ids.all() {
                self.store.record_err(id, msg.clone(), at);
            }
            // The member cannot be reached: that is known, not unknown.
            self.store
                .record_ok(self.ids.etcd_up, Value::Bool(false), at);
        }
        self.metrics.error(LABEL, Reason::Connect);
        tracing::info!(endpoint = %self.config.endpoint, "connection to etcd lost: {why}");
        self.round_finished();
    }

    /// Keep a Watch stream open; its end is the event "connection lost".
    async fn connection_loop(&self) {
        let cfg = &self.config;
        let mut was_lost = false;
        loop {
            match self.open_watch().await {
                Ok(mut stream) => {
                    if was_lost {
                        tracing::info!(endpoint = %cfg.endpoint, "connection to etcd is back");
                    }
                    // Sample at once: the member answers again.
                    self.wake_status.notify_one();
                    self.wake_reads.notify_one();
                    let why = loop {
                        match stream.message().await {
                            Ok(Some(_)) => continue,
                            Ok(None) => break "the member closed the watch stream".to_string(),
                            Err(e) => break classify("watch stream", &e, cfg.timeout).message,
                        }
                    };
                    was_lost = true;
                    self.lost(&why);
                }
                Err(_) => {
                    // Status and the reads report their own failures; this
                    // loop only notices when the member answers again.
                    tokio::time::sleep(cfg.retry()).await;
                }
            }
        }
    }

    /// Open a watch on the probe key and wait for etcd's "created" answer.
    async fn open_watch(&self) -> Result<etcd_client::WatchStream, SampleError> {
        let cfg = &self.config;
        let mut c = self.client().await?;
        let key = cfg.probe_key.clone();
        self.metrics.request(LABEL, "watch");
        let mut stream = bounded(cfg.timeout, &cfg.endpoint, "watch", async move {
            c.watch(key, None).await
        })
        .await?;
        match bounded(cfg.timeout, &cfg.endpoint, "watch", stream.message()).await? {
            Some(r) if r.created() => Ok(stream),
            _ => Err(SampleError::new(
                Reason::Rpc,
                "watch: the member did not create the watch",
            )),
        }
    }

    async fn status_loop(&self) {
        let fast = self.config.fast();
        let mut leader_changes = LeaderChanges::default();
        let trust = self.config.trust();
        let pending: Vec<SignalId> = self.ids.status_ids().chain([self.ids.etcd_up]).collect();
        loop {
            let epoch = self.epoch();
            let started = Instant::now();
            self.record_in(epoch, |store| {
                note_contention(store);
                for id in &pending {
                    store.record_pending(*id, started, None, trust, "Status");
                }
            });
            let result = wake_at_expiry(&self.notifier, trust.base, self.status()).await;
            let took = started.elapsed();
            let recorded = self.record_in(epoch, |store| match &result {
                Ok(st) => record_status(&self.ids, store, st, &mut leader_changes, started),
                Err(e) => record_status_err(&self.ids, store, e, started),
            });
            self.metrics.observe(LABEL, took, result.as_ref().err());
            if recorded {
                self.round_finished();
            }
            if let (Some(info), Ok(st)) = (&self.member_info, &result)
                && let Ok(client) = self.client().await
            {
                info.observe(
                    &client,
                    st.header(),
                    st.is_learner(),
                    self.config.timeout,
                    &self.metrics,
                )
                .await;
            }
            tokio::select! {
                _ = tokio::time::sleep(fast) => {}
                _ = self.wake_status.notified() => {}
            }
        }
    }

    async fn status(&self) -> Result<StatusResponse, SampleError> {
        let cfg = &self.config;
        let mut c = self.client().await?;
        self.metrics.request(LABEL, "status");
        bounded(cfg.timeout, &cfg.endpoint, "Status", async move {
            c.status().await
        })
        .await
    }

    async fn read_loop(&self) {
        let cfg = &self.config;
        let fast = cfg.fast();
        let trust = cfg.trust();
        let mut next_sget = Instant::now();
        loop {
            let epoch = self.epoch();
            let with_sget = Instant::now() >= next_sget;
            let started = Instant::now();
            // In flight from now: the store shows them as pending reads
            // (unless the connection was lost meanwhile: a loss ends them).
            let ids = self.ids;
            self.record_in(epoch, |store| {
                note_contention(store);
                store.record_pending(ids.qget_ms, started, Some(1000.0), trust, "read");
                if with_sget {
                    store.record_pending(ids.sget_ms, started, Some(1000.0), trust, "read");
                }
            });
            // Each read's answer is recorded the moment it arrives: a
            // serializable read answered locally in 1 ms must not wait for a
            // linearizable one stuck without quorum (it was outdated then, and
            // the serializable_read check flapped with every round).
            let record = |id: SignalId, r: &Result<f64, SampleError>| {
                self.record_in(epoch, |store| match r {
                    Ok(ms) => store.record_ok(id, Value::Num(*ms), started),
                    Err(e) => store.record_err(id, Arc::from(e.message.as_str()), started),
                })
            };
            let (q, s) = tokio::join!(
                async {
                    let q = self.credited(started, trust, self.read(false)).await;
                    let recorded = record(ids.qget_ms, &q);
                    if recorded {
                        self.qget_served.store(q.is_ok(), Ordering::Relaxed);
                    }
                    (recorded, q)
                },
                async {
                    if with_sget {
                        let s = wake_at_expiry(&self.notifier, trust.base, self.read(true)).await;
                        self.notifier.wake();
                        Some((record(ids.sget_ms, &s), s))
                    } else {
                        None
                    }
                }
            );
            let took = started.elapsed();
            let (recorded, q) = q;
            let s = s.map(|(_, s)| s);
            let err = q
                .as_ref()
                .err()
                .or(s.as_ref().and_then(|s| s.as_ref().err()));
            self.metrics.observe(LABEL, took, err);
            if recorded {
                self.round_finished();
            }
            if let Some(s) = &s {
                // The serializable read again in a full interval when it was
                // good and quick; at the fast pace while it fails or is slow.
                let good = s.as_ref().is_ok_and(|ms| *ms < fast.as_secs_f64() * 1000.0);
                next_sget = started + if good { cfg.interval } else { fast };
            }
            tokio::select! {
                _ = tokio::time::sleep(fast) => {}
                _ = self.wake_reads.notified() => { next_sget = Instant::now(); }
            }
        }
    }

    /// One keys-only, limit-1 Range of the probe key; its latency in ms.
    async fn read(&self, serializable: bool) -> Result<f64, SampleError> {
        let cfg = &self.config;
        let mut opts = GetOptions::new().with_keys_only().with_limit(1);
        if serializable {
            opts = opts.with_serializable();
        }
        let what = if serializable {
            "serializable read"
        } else {
            "linearizable read"
        };
        let mut c = self.client().await?;
        let key = cfg.probe_key.clone();
        self.metrics.request(LABEL, "range");
        let started = Instant::now();
        // The election credit gives a credited linearizable read until
        // ELECTION_TRUST instead of `timeout`.
        let credit = || {
            if !serializable && self.qget_credited.load(Ordering::Relaxed) {
                ELECTION_TRUST.saturating_sub(cfg.timeout)
            } else {
                Duration::ZERO
            }
        };
        // etcd fails every read that waited through a change of leader with
        // "leader changed", a retryable error (its own client retries it):
        // the member has a leader again. Asked again at once, within the
        // same deadline; its latency counts from the first attempt.
        bounded_with(cfg.timeout, &cfg.endpoint, what, &credit, async move {
            match c.get(key.clone(), Some(opts.clone())).await {
                Err(e) if leader_changed(&e) => c.get(key, Some(opts)).await,
                r => r,
            }
        })
        .await?;
        Ok(started.elapsed().as_secs_f64() * 1000.0)
    }

    /// Whether this member earns the election credit now for a linearizable
    /// read started at `started`: its last linearizable read was answered,
    /// it answers Status (its last answer is still trusted), it is a
    /// follower or a candidate (not the leader: a leader whose read waits
    /// cannot reach a quorum, and no election will answer it), not a
    /// learner, and, where its metrics source is configured, its peer count
    /// was read after the read started and shows at least one peer (a
    /// survivor of a lost quorum sees its peers' connections close at once,
    /// while one whose leader died keeps the other followers; a member cut
    /// off from every peer cannot take part in an election).
    /// A credit already given is `kept` under the same conditions but the
    /// role: a follower that wins the election while its read waits is
    /// the leader now, and answers that read once its term's first entry
    /// commits (withdrawing it then flipped the new leader's readiness).
    /// `Err` says which condition is not met.
    fn election_credit(
        &self,
        now: Instant,
        started: Instant,
        kept: bool,
    ) -> Result<(), &'static str> {
        let is = |id, want| self.store.reading(id, now).value == Some(Value::Bool(want));
        if !self.qget_served.load(Ordering::Relaxed) {
            Err("its last linearizable read failed")
        } else if !is(self.ids.etcd_up, true) {
            Err("its Status is not answered in time")
        } else if !kept && !is(self.ids.is_leader, false) {
            Err("it is the leader, or its role is not known")
        } else if !is(self.ids.learner, false) {
            Err("it is a learner, or that is not known")
        } else if let Some(id) = self.active_peers {
            let peers = self.store.reading(id, now);
            let since_start = now.saturating_duration_since(started);
            match (peers.value, peers.last_good_age) {
                (Some(Value::Num(n)), Some(age)) if age <= since_start => {
                    if n < 1.0 {
                        Err("its metrics show no active peer")
                    } else {
                        Ok(())
                    }
                }
                _ => Err(PEERS_NOT_READ),
            }
        } else {
            Ok(())
        }
    }

    /// Await the linearizable read `call`, started at `started` with
    /// `trust`, giving it the election credit once its member earns it
    /// while its last answer is still trusted ([`Self::earn_credit`]), and
    /// keeping it while the member still earns it, until the read answers
    /// or has waited [`ELECTION_TRUST`]. Withdrawn, the read is judged by
    /// `trust` again (outdated at once if it waited longer). The engine is
    /// woken when the read's signal turns outdated.
    async fn credited<T>(
        &self,
        started: Instant,
        trust: Trust,
        call: impl std::future::Future<Output = T>,
    ) -> T {
        let mut call = std::pin::pin!(call);
        let qget = self.ids.qget_ms;
        match self.earn_credit(started, trust, &mut call).await {
            Credit::Answered(r) => return r,
            Credit::Refused => {
                self.notifier.wake();
                return call.await;
            }
            Credit::Earned => {}
        }
        self.qget_credited.store(true, Ordering::Relaxed);
        self.store.set_pending_trust(
            qget,
            Trust {
                base: ELECTION_TRUST.max(trust.base),
                contended_max: ELECTION_TRUST.max(trust.contended_max),
            },
        );
        let mut asked = Instant::now();
        let r = loop {
            tokio::select! {
                r = &mut call => break Some(r),
                _ = tokio::time::sleep(CREDIT_CHECK) => {}
            }
            if started.elapsed() > ELECTION_TRUST {
                break None;
            }
            // While credited, the peer count is read again every
            // MIN_REQUESTED_GAP: a quorum lost during an election ends it.
            if self.active_peers.is_some() && asked.elapsed() >= MIN_REQUESTED_GAP {
                asked = Instant::now();
                self.notifier.request_round(&Source::EtcdMetrics);
            }
            if let Err(why) = self.election_credit(Instant::now(), started, true) {
                tracing::debug!(
                    "the election credit of a pending linearizable read is withdrawn: {why}"
                );
                break None;
            }
        };
        self.qget_credited.store(false, Ordering::Relaxed);
        match r {
            Some(r) => r,
            None => {
                self.store.set_pending_trust(qget, trust);
                self.notifier.wake();
                let left = (started + trust.base).saturating_duration_since(Instant::now());
                wake_at_expiry(&self.notifier, left, call).await
            }
        }
    }

    /// Until the read `call` answers, its last answer's trust runs out, or
    /// its member earns the election credit: checked every
    /// [`CREDIT_CHECK`] from just before the trust runs out (a Status late
    /// for a moment does not cost the credit). Where the member's metrics
    /// are read, its peer count is asked for half-way through the trust,
    /// and while it is being read the trust is [`PEERS_READ_WAIT`] longer.
    async fn earn_credit<F: std::future::Future>(
        &self,
        started: Instant,
        trust: Trust,
        call: &mut std::pin::Pin<&mut F>,
    ) -> Credit<F::Output> {
        let qget = self.ids.qget_ms;
        // The count is asked for once, and only where it is all the credit
        // lacks (not for a leader, nor in an outage: no GET for nothing).
        let mut asked = false;
        let mut ask_if_only_peers_lack = |earned: Result<(), &str>| {
            if earned == Err(PEERS_NOT_READ) && !asked {
                asked = true;
                self.notifier.request_round(&Source::EtcdMetrics);
            }
        };
        if self.active_peers.is_some() {
            // Half-way through the trust, so that the count is read after
            // this read started by the time the credit is decided.
            tokio::select! {
                r = call.as_mut() => return Credit::Answered(r),
                _ = tokio::time::sleep_until((started + trust.base / 2).into()) => {}
            }
            ask_if_only_peers_lack(self.election_credit(Instant::now(), started, false));
        }
        let decide = started + trust.base.saturating_sub(CREDIT_CHECK);
        tokio::select! {
            r = call.as_mut() => return Credit::Answered(r),
            _ = tokio::time::sleep_until(decide.into()) => {}
        }
        // The extra trust while the peer count is read: given once, taken
        // back the moment the credit is decided against.
        let (mut peers_wait_given, mut waits_for_peers) = (false, false);
        loop {
            let now = Instant::now();
            let earned = self.election_credit(now, started, false);
            if earned.is_ok() {
                return Credit::Earned;
            }
            ask_if_only_peers_lack(earned);
            if earned == Err(PEERS_NOT_READ) && !peers_wait_given {
                (peers_wait_given, waits_for_peers) = (true, true);
                self.store.set_pending_trust(
                    qget,
                    Trust {
                        base: trust.base + PEERS_READ_WAIT,
                        contended_max: trust.contended_max + PEERS_READ_WAIT,
                    },
                );
            } else if earned != Err(PEERS_NOT_READ) && waits_for_peers {
                waits_for_peers = false;
                self.store.set_pending_trust(qget, trust);
            }
            if self.store.reading(qget, now).value.is_none() {
                if let Err(why) = earned {
                    tracing::debug!(
                        "a linearizable read outlived its trust without the election credit: {why}"
                    );
                }
                return Credit::Refused;
            }
            tokio::select! {
                r = call.as_mut() => return Credit::Answered(r),
                _ = tokio::time::sleep(CREDIT_CHECK) => {}
            }
        }
    }
}

/// How [`Shared::earn_credit`] ended.
enum Credit<T> {
    /// The read answered first.
    Answered(T),
    /// Its last answer's trust ran out without the credit.
    Refused,
    Earned,
}

/// Tell the store how long the node's CPU has been contended, so that a call
/// recorded as pending now is judged from this moment's counter.
fn note_contention(store: &SignalStore) {
    if let Some(stalled) = crate::contention::cpu_stalled() {
        store.set_cpu_stalled(stalled);
    }
}

/// Await `call`; if it is still in flight when the last answer's trust runs
/// out, wake the engine at that instant (the call's signals turn unknown
/// then) instead of leaving it to the engine's next tick, up to
/// [`crate::engine::TICK`] later. A call that answers in time wakes nothing
/// here (its answer does, when it is recorded).
async fn wake_at_expiry<T>(
    notifier: &RoundNotifier,
    trust: Duration,
    call: impl std::future::Future<Output = T>,
) -> T {
    let mut call = std::pin::pin!(call);
    tokio::select! {
        r = &mut call => return r,
        // A millisecond past `trust`: the store calls a call outdated once
        // it has waited *longer* than that.
        _ = tokio::time::sleep(trust + Duration::from_millis(1)) => notifier.wake(),
    }
    call.await
}

/// Counts changes of the leader's ID between Status answers, and since when
/// the answers have shown no leader.
#[derive(Default)]
struct LeaderChanges {
    last: Option<u64>,
    count: u64,
    leaderless_since: Option<Instant>,
}

fn record_status(
    ids: &Ids,
    store: &SignalStore,
    status: &StatusResponse,
    changes: &mut LeaderChanges,
    at: Instant,
) {
    let member_id = status.header().map_or(0, |h| h.member_id());
    let leader = status.leader();
    let ok = |id, v| store.record_ok(id, v, at);
    ok(ids.etcd_up, Value::Bool(true));
    ok(ids.leader, Value::Bool(leader != 0));
    ok(
        ids.is_leader,
        Value::Bool(leader != 0 && leader == member_id),
    );
    ok(ids.learner, Value::Bool(status.is_learner()));
    if let Some(h) = status.header() {
        ok(ids.revision, Value::Num(h.revision() as f64));
    }
    ok(ids.raft_term, Value::Num(status.raft_term() as f64));
    ok(ids.raft_index, Value::Num(status.raft_index() as f64));
    ok(
        ids.applied_index,
        Value::Num(status.raft_applied_index() as f64),
    );
    ok(
        ids.apply_lag,
        Value::Num(
            status
                .raft_index()
                .saturating_sub(status.raft_applied_index()) as f64,
        ),
    );
    ok(ids.db_size_bytes, Value::Num(status.db_size() as f64));
    ok(
        ids.db_in_use_bytes,
        Value::Num(status.raft_used_db_size() as f64),
    );
    // Status.errors lists raised alarms as e.g. "memberID:123 alarm:NOSPACE".
    let errors = status.errors();
    ok(
        ids.alarm_nospace,
        Value::Bool(errors.iter().any(|e| e.contains("NOSPACE"))),
    );
    ok(
        ids.alarm_corrupt,
        Value::Bool(errors.iter().any(|e| e.contains("CORRUPT"))),
    );
    if leader != 0 {
        if changes.last.is_some_and(|l| l != leader) {
            changes.count += 1;
        }
        changes.last = Some(leader);
        changes.leaderless_since = None;
    } else if changes.leaderless_since.is_none() {
        changes.leaderless_since = Some(at);
    }
    ok(ids.leader_changes, Value::Num(changes.count as f64));
    let leaderless = changes
        .leaderless_since
        .map_or(Duration::ZERO, |since| at.saturating_duration_since(since));
    ok(ids.leaderless, Value::Num(leaderless.as_secs_f64()));
}

fn record_status_err(ids: &Ids, store: &SignalStore, e: &SampleError, at: Instant) {
    let msg: Arc<str> = Arc::from(e.message.as_str());
    for id in ids.status_ids() {
        store.record_err(id, msg.clone(), at);
    }
    // The member did not answer: that is known, not unknown.
    store.record_ok(ids.etcd_up, Value::Bool(false), at);
}

/// Run one etcd call with a hard deadline, turning every failure into a
/// [`SampleError`] with a message an operator can act on. A failure that
/// looks like the wrong protocol (HTTP/1, TLS vs plain text) is diagnosed
/// with one extra [`probe`] of `endpoint`, within the same deadline.
///
/// The deadline is `timeout` plus the time the node's CPU was contended
/// while the call ran, at most [`CONTENDED_TRUST_MAX`]: the same credit a
/// pending call's trust gets ([`EtcdConfig::trust`]), so one rule decides how
/// long a call is given, whether its answer is awaited or its lateness
/// judged. A healthy member on a node busy for a moment is late because it
/// could not run, not because it cannot serve; a frozen member on an idle
/// node still times out at `timeout`.
async fn bounded<T>(
    timeout: Duration,
    endpoint: &RedactedUrl,
    what: &str,
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, SampleError> {
    bounded_with(timeout, endpoint, what, &|| Duration::ZERO, call).await
}

/// [`bounded`], with `credit` (checked whenever the deadline is reached)
/// extending the deadline too, to at most `timeout` + [`CONTENDED_TRUST_MAX`]:
/// the election credit of a linearizable read.
async fn bounded_with<T>(
    timeout: Duration,
    endpoint: &RedactedUrl,
    what: &str,
    credit: &(dyn Fn() -> Duration + Sync),
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, SampleError> {
    let started = Instant::now();
    let stalled_at_start = crate::contention::cpu_stalled();
    let contended = || match (stalled_at_start, crate::contention::cpu_stalled()) {
        (Some(a), Some(b)) => b
            .saturating_sub(a)
            .min(started.elapsed())
            .min(CONTENDED_TRUST_MAX),
        _ => Duration::ZERO,
    };
    let contention = contended;
    let contended = || contention().max(credit().min(CONTENDED_TRUST_MAX));
    tokio::pin!(call);
    let mut granted = Duration::ZERO;
    let outcome = loop {
        let deadline = tokio::time::Instant::from_std(started + timeout + granted);
        match tokio::time::timeout_at(deadline, &mut call).await {
            Ok(v) => break Some(v),
            Err(_) => {
                // Another check once the credit grew by at least 1 ms, so
                // the loop ends: the credit is capped and only grows.
                let credit = contended();
                if credit < granted + Duration::from_millis(1) {
                    break None;
                }
                granted = credit;
            }
        }
    };
    match outcome {
        None => Err(SampleError::new(
            Reason::Timeout,
            if granted.is_zero() {
                format!("{what}: request timed out after {}", fmt_ms(timeout))
            } else if contention() < granted {
                format!(
                    "{what}: request timed out after {} ({} plus {} while the member, a follower answering Status, waited for a leader)",
                    fmt_ms(timeout + granted),
                    fmt_ms(timeout),
                    fmt_ms(granted)
                )
            } else {
                format!(
                    "{what}: request timed out after {} ({} plus {} while the node's CPU was contended)",
                    fmt_ms(timeout + granted),
                    fmt_ms(timeout),
                    fmt_ms(granted)
                )
            },
        )),
        Some(Err(e)) => {
            // tonic's own request timeout is set CONTENDED_TRUST_MAX later.
            let mut err = classify(what, &e, timeout + CONTENDED_TRUST_MAX);
            if err.reason == Reason::Protocol {
                let left = (timeout + granted).saturating_sub(started.elapsed());
                if let Some(hint) = diagnose(endpoint, left).await {
                    err.message = format!("{what}: {hint} ({})", chain(&e));
                }
            }
            err.message = endpoint.scrub(&err.message).into_owned();
            Err(err)
        }
        Some(Ok(v)) => Ok(v),
    }
}

fn fmt_ms(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The first error of the chain below `e` (etcd-client's own `source()`
/// stops at its wrapper; the tonic `Status` keeps the transport error).
fn first_source(e: &etcd_client::Error) -> Option<&(dyn std::error::Error + 'static)> {
    match e {
        etcd_client::Error::GRpcStatus(st) => st.source(),
        etcd_client::Error::TransportError(t) => Some(t),
        etcd_client::Error::IoError(io) => Some(io),
        other => other.source(),
    }
}

/// Every error in the chain below `e` (see [`super::client::causes`]).
fn causes(e: &etcd_client::Error) -> Vec<&(dyn std::error::Error + 'static)> {
    super::client::causes(first_source(e))
}

/// A compact description: the gRPC status message (or the error itself) and
/// the root cause, without tonic's debug dumps.
fn chain(e: &etcd_client::Error) -> String {
    let head = match e {
        etcd_client::Error::GRpcStatus(st) => st.message().to_string(),
        other => other.to_string(),
    };
    let root = causes(e).last().map(|r| r.to_string());
    match root {
        Some(r) if !head.contains(&r) && !r.is_empty() => {
            if head.is_empty() {
                r
            } else {
                format!("{head}: {r}")
            }
        }
        _ => head,
    }
}

/// Classify by the types in the error chain: the gRPC status code, io error
/// kinds, rustls, hyper and h2 errors. `protocol` means the peer does not
/// speak what we expect (HTTP/1, TLS vs plain text); [`bounded`] then probes.
/// etcd's `ErrGRPCLeaderChanged`: a request that waited while the member's
/// leader changed, which the caller may send again.
fn leader_changed(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(st)
        if st.code() == tonic::Code::Unavailable && st.message() == "etcdserver: leader changed")
}

fn classify(what: &str, e: &etcd_client::Error, timeout: Duration) -> SampleError {
    use std::io::ErrorKind as K;
    let text = chain(e);
    let code = match e {
        etcd_client::Error::GRpcStatus(st) => Some(st.code()),
        _ => None,
    };
    let causes = causes(e);
    let io_kind = causes
        .iter()
        .find_map(|c| c.downcast_ref::<std::io::Error>().map(|io| io.kind()));
    let tls = causes.iter().any(|c| c.is::<rustls::Error>());
    let h2 = causes.iter().any(|c| c.is::<h2::Error>());
    let hyper_parse = causes.iter().any(|c| {
        c.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_parse())
    });
    let transport = causes.iter().any(|c| c.is::<tonic::transport::Error>());
    // tonic turns its own request timeout (`TimeoutExpired`) into a bare
    // `Cancelled` status carrying that error's text and no source.
    let tonic_timeout = causes.iter().any(|c| c.is::<tonic::TimeoutExpired>())
        || matches!(e, etcd_client::Error::GRpcStatus(st)
            if st.code() == tonic::Code::Cancelled
                && st.message() == tonic::TimeoutExpired(()).to_string());
    let reason = if tls {
        Reason::Tls
    } else if tonic_timeout
        || matches!(io_kind, Some(K::TimedOut))
        || code == Some(tonic::Code::DeadlineExceeded)
    {
        Reason::Timeout
    } else if matches!(
        io_kind,
        Some(K::ConnectionRefused | K::AddrNotAvailable | K::NotFound | K::HostUnreachable)
    ) {
        Reason::Connect
    } else if h2
        || hyper_parse
        || (transport
            && matches!(
                io_kind,
                Some(K::BrokenPipe | K::ConnectionReset | K::UnexpectedEof | K::ConnectionAborted)
            ))
    {
        Reason::Protocol
    } else if transport || code == Some(tonic::Code::Unavailable) {
        Reason::Connect
    } else {
        Reason::Rpc
    };
    let message = match reason {
        Reason::Timeout => format!(
            "{what}: request timed out after {} ({text})",
            fmt_ms(timeout)
        ),
        _ if text.is_empty() => format!("{what}: failed"),
        Reason::Connect if io_kind == Some(K::ConnectionRefused) => {
            format!("{what}: connection refused ({text})")
        }
        Reason::Tls => format!("{what}: TLS error: {text}"),
        _ => format!("{what}: {text}"),
    };
    SampleError::new(reason, message)
}

/// What answered at the endpoint, by the first bytes it sends back to a
/// plain-text HTTP/2 connection preface.
#[derive(Debug, PartialEq, Eq)]
enum Peer {
    /// An HTTP/2 SETTINGS frame: plain-text HTTP/2 (gRPC) is spoken here.
    PlainHttp2,
    /// Text such as `HTTP/1.1 400` or an HTML page: an HTTP/1 server.
    Http1,
    /// A TLS record (alert or handshake), or a close without a word, which
    /// is what a TLS port does with plain text.
    TlsOrSilent,
}

fn peer_from_reply(reply: &[u8]) -> Peer {
    match reply {
        [] => Peer::TlsOrSilent,
        [0x15 | 0x16, 0x03, ..] => Peer::TlsOrSilent,
        [_, _, _, 0x04, ..] => Peer::PlainHttp2,
        _ => Peer::Http1,
    }
}

/// Connect to `endpoint` in plain text, send the HTTP/2 preface and an
/// empty SETTINGS frame, and look at the first bytes of the answer. Sends
/// nothing etcd would act on. `None` if the probe itself fails.
async fn probe(endpoint: &RedactedUrl, within: Duration) -> Option<Peer> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (host, port) = endpoint.parse_http().ok()?.host_and_port()?;
    let work = async move {
        let mut s = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .ok()?;
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        // A peer that closes at once may reset the write: that is an answer too.
        let _ = s.write_all(&hello).await;
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await.unwrap_or(0);
        Some(peer_from_reply(&buf[..n]))
    };
    tokio::time::timeout(within, work).await.ok().flatten()
}

/// A sentence naming what is wrong, from a probe of `endpoint`.
async fn diagnose(endpoint: &RedactedUrl, within: Duration) -> Option<String> {
    let https = endpoint.starts_with("https://");
    match (probe(endpoint, within).await?, https) {
        (Peer::Http1, _) => Some(format!(
            "the endpoint answered HTTP/1.x, not gRPC: is {endpoint} etcd's client port?"
        )),
        (Peer::PlainHttp2, true) => Some(format!(
            "TLS handshake to a plain-text endpoint: {endpoint} speaks plain-text HTTP/2; \
             use http:// (without --etcd.cacert), or enable TLS on etcd"
        )),
        (Peer::TlsOrSilent, false) => Some(format!(
            "plain-text to a TLS port: {endpoint} closed the connection on plain-text HTTP/2, \
             as a TLS port does; use https:// and --etcd.cacert"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(st: tonic::Status) -> Reason {
        classify(
            "Status",
            &etcd_client::Error::GRpcStatus(st),
            Duration::from_millis(500),
        )
        .reason
    }

    #[test]
    fn only_etcds_leader_changed_status_is_retried() {
        let st = |s: tonic::Status| etcd_client::Error::GRpcStatus(s);
        assert!(leader_changed(&st(tonic::Status::unavailable(
            "etcdserver: leader changed"
        ))));
        // The same words with another code, or another Unavailable, are not it.
        assert!(!leader_changed(&st(tonic::Status::internal(
            "etcdserver: leader changed"
        ))));
        assert!(!leader_changed(&st(tonic::Status::unavailable(
            "etcdserver: no leader"
        ))));
    }

    #[test]
    fn statuses_are_classified_by_code_not_text() {
        // tonic's own request timeout: Cancelled with TimeoutExpired's text.
        let expired = tonic::TimeoutExpired(()).to_string();
        assert_eq!(reason(tonic::Status::cancelled(expired)), Reason::Timeout);
        assert_eq!(
            reason(tonic::Status::deadline_exceeded("x")),
            Reason::Timeout
        );
        assert_eq!(reason(tonic::Status::unavailable("x")), Reason::Connect);
        // Words in a message do not decide: "timeout" in an rpc error is an rpc error.
        assert_eq!(
            reason(tonic::Status::invalid_argument("timeout certificate tls")),
            Reason::Rpc
        );
    }

    #[test]
    fn a_cpu_limit_stretches_the_trust_over_one_freeze() {
        let mut c = EtcdConfig {
            endpoint: "http://127.0.0.1:2379".into(),
            tls: None,
            probe_key: "k".into(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            freeze: Duration::ZERO,
        };
        assert_eq!(c.trust().base, Duration::from_millis(100));
        c.freeze = Duration::from_millis(100);
        assert_eq!(c.trust().base, Duration::from_millis(120));
        // A long interval's fast period still wins when it is longer.
        c.interval = Duration::from_secs(5);
        assert_eq!(c.trust().base, Duration::from_millis(500));
        // CPU contention may stretch it to 1 s, never below the base.
        assert_eq!(c.trust().contended_max, Duration::from_millis(1000));
        c.interval = Duration::from_secs(20);
        assert_eq!(c.trust().contended_max, Duration::from_secs(2));
    }

    /// Whether the notifier holds a wake-up right now (without waiting).
    async fn woken(notifier: &RoundNotifier) -> bool {
        tokio::select! {
            biased;
            _ = notifier.notified() => true,
            _ = std::future::ready(()) => false,
        }
    }

    #[tokio::test]
    async fn a_call_pending_past_its_trust_wakes_the_engine_at_once() {
        let notifier = RoundNotifier::new();
        // A call that never answers: the engine is woken while it is still
        // in flight (bounded by a deadline, not timed).
        let woke = tokio::time::timeout(Duration::from_secs(30), async {
            tokio::select! {
                _ = wake_at_expiry(&notifier, Duration::from_millis(5), std::future::pending::<()>()) => false,
                _ = notifier.notified() => true,
            }
        })
        .await;
        assert_eq!(woke, Ok(true));
        // A call that answers before its trust runs out wakes nothing.
        let answer = wake_at_expiry(&notifier, Duration::from_secs(3600), async { 7 }).await;
        assert_eq!(answer, 7);
        assert!(!woken(&notifier).await);
    }

    #[test]
    fn probe_replies_name_the_peer() {
        assert_eq!(peer_from_reply(b""), Peer::TlsOrSilent);
        assert_eq!(
            peer_from_reply(&[0x15, 0x03, 0x03, 0, 2]),
            Peer::TlsOrSilent
        );
        assert_eq!(
            peer_from_reply(&[0, 0, 0x0c, 0x04, 0, 0, 0, 0, 0]),
            Peer::PlainHttp2
        );
        assert_eq!(peer_from_reply(b"HTTP/1.1 400 Bad"), Peer::Http1);
        assert_eq!(peer_from_reply(b"<!DOCTYPE HTML>"), Peer::Http1);
    }
}
