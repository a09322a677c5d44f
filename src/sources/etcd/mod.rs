//! The etcd source: one gRPC client for this one member, and three loops on
//! one supervised task (`sampler:etcd`) that keep its signals current
//! without writing to etcd (no call costs a raft proposal; alarms are read
//! from `Status.errors`, not `Maintenance.Alarm`, which goes through raft in
//! etcd 3.4). One file per idea:
//!
//! - `session.rs`: the client and its login ([`Shared::client`],
//!   [`Shared::with_session`]): a call whose token etcd refuses logs in
//!   again and is sent once more; `login.rs`: when a login may be tried and
//!   with which password, a pure state machine (a refused one backs off).
//! - `connection.rs`: the Watch stream on
//!   the probe key (served by the member itself, no raft), whose only job is
//!   to break. When the member's connection drops the stream ends, and every
//!   etcd signal becomes unknown at once ("connection to etcd lost: …"),
//!   without waiting for a sampling round.
//! - `loops.rs`: the loops. **connection**: re-opens the stream every
//!   [`EtcdConfig::retry`] while it is down; when it opens again, Status and
//!   the reads run at once. **status**: `Maintenance.Status`, answered
//!   locally by the member, every [`EtcdConfig::fast`] (a tenth of
//!   `--sample.interval`). While it is in flight its signals keep their last
//!   answer for its trust; a Status pending longer makes them unknown ("the
//!   last answer is outdated"), so a frozen member is seen in about
//!   `fast/2 + trust`, not after the call's timeout. **reads**: a
//!   linearizable single-key, keys-only Range every `fast`, and a
//!   serializable one every `--sample.interval` (every `fast` while it fails
//!   or takes 100 ms or more, `deadlines::next_serializable`), each given at least the policy's latency bound
//!   ([`EtcdConfig::read_timeout`]). While a read is in flight the store
//!   carries it as pending ([`SignalStore::record_pending`]): the last answer
//!   counts for its trust, then the reading is unknown, and a read pending
//!   for 1 s proves `qget_ms < 1000` false. A read etcd fails with "leader
//!   changed" is asked again at once. Status also gives `leaderless`, how
//!   long it has shown no leader.
//! - `credit.rs`: the election credit, a pure state machine: a follower that
//!   was serving and keeps answering Status has its pending linearizable
//!   read trusted up to the member's election timeout, since a new leader
//!   answers it; where the member's metrics are read, only with a peer
//!   count read after the read started that shows the peers a quorum needs
//!   besides it (`identity.rs` counts the voting members; a lost quorum's
//!   survivor gets none).
//! - `deadlines.rs`: how long a call is given (its timeout, plus the node's
//!   contended CPU time) and how long its last answer is trusted: the base
//!   of [`EtcdConfig::trust`], stretched to what this member's calls of that
//!   kind normally take.
//! - `settings.rs`: etcd's own heartbeat interval and election timeout,
//!   which every duration above is derived from with the flags and the
//!   policy in force (ARCHITECTURE.md, "Detection bounds").
//! - `errors.rs`: error classification by type, and the protocol probe.
//! - `api.rs`: the seam: the three calls the loops make (Status, a Range,
//!   the Watch) as the trait [`api::MemberApi`]; [`spawn_with`] runs the
//!   real loops against a member a test supplies (crates/testkit's
//!   simulated cluster, on virtual time). Without it, the client as above.
//! - `status.rs`: what a Status answer writes into the store.
//! - `without_root.rs`: what stands in for Status where etcd refuses it to
//!   a user without the root role (etcd 3.5): a serializable read's header,
//!   the member's `/metrics` and `/health`, at the metrics' pace.
//!
//! Every call is bounded twice: by the client's own request timeout and by
//! its deadline. A loss of the connection bumps an epoch; results of calls
//! started before it are dropped, so a late answer cannot overwrite the
//! loss. No clock is read here: every instant comes from the [`Clock`]
//! passed in.

pub mod api;
mod connection;
mod credit;
mod deadlines;
mod errors;
pub mod identity;
mod login;
mod loops;
mod session;
pub mod settings;
mod status;
mod without_root;

pub use without_root::MemberHttp;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use self::deadlines::FREEZE_MARGIN;
pub use self::deadlines::{MAX_POLICY_READ_BOUND, ReadFloor};
use self::identity::MemberInfo;
pub use self::settings::EtcdSettings;
use super::{RoundNotifier, SourceMetrics, staleness_bound};
use crate::outside::redacted_url::RedactedUrl;
use crate::runtime::Runtime;
use crate::runtime::clock::Clock;
use crate::sources::etcd_auth::LoginMetrics;
use etcd_readiness_policy::signals::{Builtin, Catalogue, SignalId, SignalStore, Source, Trust};
use etcd_readiness_policy::sync::TolerantLock;

/// The etcd TLS files (CA; client certificate and key, `None` for
/// server-only TLS), re-read when they change ([`crate::sources::tls_material`]).
pub type EtcdTls = crate::sources::tls_material::Credentials;

/// What the etcd source needs.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    pub endpoint: RedactedUrl,
    pub tls: Option<EtcdTls>,
    /// `--etcd.user` and its password file, when etcd's authentication is on.
    pub auth: Option<crate::sources::etcd_auth::EtcdAuth>,
    pub probe_key: String,
    pub interval: Duration,
    pub timeout: Duration,
    /// The longest the exporter's own CPU limit can freeze it (one CFS
    /// period, see [`crate::runtime::cpuquota`]); zero without a limit.
    pub freeze: Duration,
    /// Where Status' stand-ins are read when etcd refuses Status to
    /// `auth`'s user: the member's metrics source; `None` when it is off.
    pub member_http: Option<MemberHttp>,
    /// The member's heartbeat interval and election timeout, which the
    /// timing below is derived from ([`settings`]).
    pub etcd: EtcdSettings,
}

/// The finest step of any of the source's loops: the shortest fast period
/// (a tiny `--sample.interval` must not spin) and how often a pending
/// read's election credit is looked at. A tunable (ARCHITECTURE.md).
pub(super) const STEP: Duration = Duration::from_millis(10);

impl EtcdConfig {
    /// The period of Status and the linearizable read: a tenth of the
    /// interval (100 ms by default), at least 10 ms.
    pub fn fast(&self) -> Duration {
        (self.interval / 10).max(STEP)
    }

    /// How long the last answer of Status or a read stays trusted while a
    /// newer call is pending: one fast period, at least one heartbeat
    /// interval of the member (100 ms by default: a healthy member answers
    /// both in a few ms, and below its own heartbeat a loaded machine's
    /// scheduling delay alone would outdate healthy answers), and under a
    /// CPU limit at least one freeze plus [`FREEZE_MARGIN`] (120 ms with
    /// Kubernetes' 100 ms CFS period), so that the exporter's own
    /// throttling is not taken for a member that stopped answering. A call
    /// pending longer makes its signals unknown ("the last answer is
    /// outdated") until it answers or times out.
    ///
    /// The time the node's CPU was contended while the call waited extends
    /// it, to at most [`contended_max`](Self::contended_max) ([`Trust`],
    /// [`crate::runtime::contention`]): a healthy member on a node busy for
    /// a moment is late because it could not run. Each call stretches this
    /// base to what its kind of call normally takes on this member
    /// (`deadlines::LatencyWindow`).
    pub fn trust(&self) -> Trust {
        let freeze = if self.freeze.is_zero() {
            Duration::ZERO
        } else {
            self.freeze.saturating_add(FREEZE_MARGIN)
        };
        let base = self.fast().max(self.etcd.heartbeat).max(freeze);
        Trust {
            base,
            contended_max: base.max(self.contended_max()),
        }
    }

    /// The most contended CPU time a call is forgiven, in its deadline and
    /// its trust: one election timeout of the member. A node starved for
    /// longer makes its member's heartbeats late enough for its peers to
    /// elect without it: an outage etcd itself acts on, so the exporter
    /// does too.
    pub fn contended_max(&self) -> Duration {
        self.etcd.election
    }

    /// How often a lost connection is tried again: [`fast`](Self::fast), at
    /// most one heartbeat interval. Attempts write nothing to the store;
    /// only the first success does something (an immediate Status and
    /// reads).
    pub fn retry(&self) -> Duration {
        self.fast().min(self.etcd.heartbeat)
    }

    /// The deadline of a read: `--sample.timeout`, but never less than what
    /// the policy in force compares the reads' latency with ([`ReadFloor`];
    /// 1 s for the shipped policies' `qget_ms < 1000`): a read given less
    /// than the policy accepts would turn a slow answer the policy calls
    /// good into a failure, while one pending that long fails the check by
    /// its lower bound anyway.
    pub fn read_timeout(&self, floor: &ReadFloor) -> Duration {
        self.timeout.max(floor.get())
    }

    /// tonic's own request timeout: later than every deadline of
    /// [`deadlines`], which decide when a call has taken too long, whatever
    /// policy is put in force later.
    fn client_timeout(&self) -> Duration {
        self.timeout.max(MAX_POLICY_READ_BOUND) + self.contended_max()
    }

    /// How long opening a connection may take: the deadline of a call that
    /// does not follow the policy, plus the contention it is forgiven.
    fn connect_timeout(&self) -> Duration {
        self.timeout + self.contended_max()
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Ids {
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
    pub(super) fn status_ids(&self) -> impl Iterator<Item = SignalId> {
        let not_status = [self.etcd_up, self.qget_ms, self.sget_ms];
        Builtin::of(Source::Etcd)
            .map(Builtin::id)
            .filter(move |id| !not_status.contains(id))
    }

    /// Every etcd signal of the catalogue.
    pub(super) fn all(&self) -> Vec<SignalId> {
        Builtin::of(Source::Etcd).map(Builtin::id).collect()
    }
}

/// The metric families the etcd source updates besides the sources' own.
#[derive(Clone, Debug, Default)]
pub struct Families {
    /// `etcd_readiness_member_info`; `None`: not exported.
    pub member_info: Option<MemberInfo>,
    pub logins: LoginMetrics,
}

impl Families {
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> Families {
        Families {
            member_info: Some(MemberInfo::register(registry)),
            logins: LoginMetrics::register(registry),
        }
    }
}

/// Run the etcd source on its own supervised task (`sampler:etcd`); a panic
/// restarts it with a fresh client. Runs until the handle is aborted.
pub fn spawn(
    config: EtcdConfig,
    catalogue: &Catalogue,
    sampling: super::Sampling,
    families: Families,
    read_floor: ReadFloor,
) -> JoinHandle<()> {
    spawn_inner(config, catalogue, sampling, families, read_floor, None)
}

/// [`spawn`] with `api` in place of the etcd client: the real loops,
/// deadlines and credit, asking a member a test supplies (a simulated one,
/// on tokio's paused clock). No member identity family, no login: `api`
/// stands for the whole session.
pub fn spawn_with(
    api: Arc<dyn api::MemberApi>,
    config: EtcdConfig,
    catalogue: &Catalogue,
    sampling: super::Sampling,
    read_floor: ReadFloor,
) -> JoinHandle<()> {
    let families = Families {
        member_info: None,
        logins: LoginMetrics::default(),
    };
    spawn_inner(config, catalogue, sampling, families, read_floor, Some(api))
}

fn spawn_inner(
    config: EtcdConfig,
    catalogue: &Catalogue,
    sampling: super::Sampling,
    families: Families,
    read_floor: ReadFloor,
    api: Option<Arc<dyn api::MemberApi>>,
) -> JoinHandle<()> {
    let super::Sampling {
        store,
        notifier,
        metrics,
        runtime: Runtime { clock, supervisor },
    } = sampling;
    let ids = Ids::BUILTIN;
    // The member's own peer count, where its metrics source is configured.
    let active_peers = Some(Builtin::ActivePeers.id()).filter(|id| catalogue.is_enabled(*id));
    metrics.start_source(LABEL);
    supervisor.spawn(format!("sampler:{}", Source::Etcd.label()), move || {
        let sh = Arc::new(Shared {
            config: config.clone(),
            ids,
            store: store.clone(),
            notifier: notifier.clone(),
            metrics: metrics.clone(),
            client: tokio::sync::Mutex::new(session::Slot::default()),
            tls_refused: AtomicBool::new(false),
            epoch: Mutex::new(0),
            wake_status: Notify::new(),
            wake_reads: Notify::new(),
            member_info: families.member_info.clone(),
            login_metrics: families.logins.clone(),
            read_floor: read_floor.clone(),
            active_peers,
            clock: clock.clone(),
            api: api.clone(),
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
    /// The client and its login (`session.rs`).
    client: tokio::sync::Mutex<session::Slot>,
    /// A call failed in the TLS handshake: the next builds a new client.
    tls_refused: AtomicBool,
    /// Bumped by every loss of the connection; a result is recorded only if
    /// the epoch is still the one its call started in (checked and recorded
    /// under this lock, so a loss cannot interleave).
    epoch: Mutex<u64>,
    wake_status: Notify,
    wake_reads: Notify,
    /// `etcd_readiness_member_info`, updated from successful Status answers;
    /// its member list's voting members also size the quorum the election
    /// credit asks the peer count for (`None`: one peer, as in the sim).
    member_info: Option<MemberInfo>,
    login_metrics: LoginMetrics,
    /// `active_peers` when the member's metrics source is configured.
    active_peers: Option<SignalId>,
    /// How long the policy in force still compares the reads' latency:
    /// every read is given at least this long (run-time state, followed by
    /// the policy's reloads; not configuration).
    read_floor: ReadFloor,
    clock: Clock,
    /// The member behind a seam ([`spawn_with`]); `None`: the etcd client.
    api: Option<Arc<dyn api::MemberApi>>,
}

const LABEL: &str = "etcd";

/// How long a read's sample is kept, a read asked every `period` within
/// `deadline`: a sample is stamped when its read was sent, so it must
/// outlive its own read (up to `deadline`) and the next one's (up to
/// `deadline` again, judged meanwhile by its trust and by its time pending
/// as a lower bound, not by staleness): a member whose reads take 900 ms
/// and then 400 ms, both within the policy's `qget_ms < 1000`, serves.
fn read_kept(period: Duration, deadline: Duration, contended_max: Duration) -> Trust {
    kept(period, deadline.saturating_mul(2), contended_max)
}

/// How long a sample of a call asked every `period` within `deadline` is
/// kept: a call is given up to `contended_max` more on a busy node
/// ([`EtcdConfig::contended_max`]), so its samples are kept as much longer.
fn kept(period: Duration, deadline: Duration, contended_max: Duration) -> Trust {
    let base = staleness_bound(period, deadline);
    Trust {
        base,
        contended_max: base + contended_max,
    }
}

impl Shared {
    async fn run(self: Arc<Self>) {
        let fast = self.config.fast();
        for id in self.ids.all() {
            self.store.set_staleness(
                id,
                kept(fast, self.config.timeout, self.config.contended_max()),
            );
        }
        // The reads' bounds are set by the read loop, before each round.
        tokio::join!(self.connection_loop(), self.status_loop(), self.read_loop());
    }

    /// How long the reads' samples are kept when a read is given
    /// `deadline` ([`EtcdConfig::read_timeout`], which follows the policy in
    /// force): [`read_kept`] (the serializable read's period is the
    /// interval: it waits for its round).
    fn set_read_staleness(&self, deadline: Duration) {
        let cfg = &self.config;
        self.store.set_staleness(
            self.ids.qget_ms,
            read_kept(cfg.fast(), deadline, cfg.contended_max()),
        );
        self.store.set_staleness(
            self.ids.sget_ms,
            read_kept(cfg.interval, deadline, cfg.contended_max()),
        );
    }

    fn epoch(&self) -> u64 {
        *self.epoch.locked()
    }

    /// Run `record` if no loss happened since `epoch`.
    fn record_in(&self, epoch: u64, record: impl FnOnce(&SignalStore)) -> bool {
        let cur = self.epoch.locked();
        if *cur != epoch {
            return false;
        }
        record(&self.store);
        true
    }

    /// The reads' deadline now ([`EtcdConfig::read_timeout`] under the
    /// policy in force).
    fn read_timeout(&self) -> Duration {
        self.config.read_timeout(&self.read_floor)
    }

    fn round_finished(&self) {
        self.notifier
            .round_finished(&Source::Etcd, self.config.interval, self.clock.now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags' defaults (`--sample.interval 1s --sample.timeout 500ms`).
    fn defaults() -> EtcdConfig {
        EtcdConfig {
            endpoint: "http://127.0.0.1:2379".into(),
            tls: None,
            auth: None,
            probe_key: "k".into(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            freeze: Duration::ZERO,
            member_http: None,
            etcd: EtcdSettings::default(),
        }
    }

    /// The default policy's read floor (`qget_ms < 1000`: 1 s).
    fn default_floor() -> ReadFloor {
        let catalogue = Catalogue::builtin();
        let p = etcd_readiness_policy::policy::Policy::compile(
            "default",
            crate::config::DEFAULT_POLICY,
            &catalogue,
        )
        .unwrap();
        let floor = ReadFloor::default();
        floor.follow(&p);
        floor
    }

    #[test]
    fn a_cpu_limit_stretches_the_trust_over_one_freeze() {
        let mut c = defaults();
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

    #[test]
    fn the_trust_and_the_contention_forgiven_follow_etcds_own_settings() {
        let mut c = defaults();
        c.interval = Duration::from_millis(500);
        // A fast period of 50 ms: the member's heartbeat is the floor.
        assert_eq!(c.trust().base, Duration::from_millis(100));
        assert_eq!(c.retry(), Duration::from_millis(50));
        c.etcd = EtcdSettings::from_millis(250, 2500).unwrap();
        assert_eq!(c.trust().base, Duration::from_millis(250));
        assert_eq!(c.trust().contended_max, Duration::from_millis(2500));
        assert_eq!(c.contended_max(), Duration::from_millis(2500));
        assert_eq!(c.connect_timeout(), Duration::from_millis(3000));
    }

    #[test]
    fn a_read_is_never_given_less_than_the_policys_latency_bound() {
        let mut c = defaults();
        // No policy compares the reads: --sample.timeout.
        assert_eq!(
            c.read_timeout(&ReadFloor::default()),
            Duration::from_millis(500)
        );
        assert_eq!(c.read_timeout(&default_floor()), Duration::from_secs(1));
        c.timeout = Duration::from_secs(3);
        assert_eq!(c.read_timeout(&default_floor()), Duration::from_secs(3));
        assert!(c.client_timeout() > c.read_timeout(&default_floor()));
    }

    #[test]
    fn a_reads_sample_outlives_its_own_read_and_the_next_one() {
        let c = defaults();
        let deadline = c.read_timeout(&default_floor());
        let kept = read_kept(c.fast(), deadline, c.contended_max());
        // Stamped when sent: answered after the whole deadline, the next
        // read pending for its whole deadline too, it is still not stale.
        assert!(kept.base > deadline * 2, "{kept:?}");
        assert_eq!(kept.base, Duration::from_millis(2300));
        assert_eq!(kept.contended_max, kept.base + c.etcd.election);
    }

    #[test]
    fn a_read_is_given_what_the_policy_in_force_compares_its_latency_with() {
        let c = defaults();
        let floor = ReadFloor::default();
        let catalogue = Catalogue::builtin();
        let follow = |src: &str| {
            let p = etcd_readiness_policy::policy::Policy::compile("t", src, &catalogue).unwrap();
            floor.follow(&p);
            c.read_timeout(&floor)
        };
        assert_eq!(
            follow("leader && qget_ms < 2500"),
            Duration::from_millis(2500)
        );
        assert_eq!(follow("sget_ms <= 4000.5"), Duration::from_millis(4001));
        // Less than the timeout, nothing compared, absurd: the timeout,
        // the cap.
        assert_eq!(follow("qget_ms < 200"), Duration::from_millis(500));
        assert_eq!(follow("leader"), Duration::from_millis(500));
        assert_eq!(follow("qget_ms < 1e300"), MAX_POLICY_READ_BOUND);
        assert!(c.client_timeout() > MAX_POLICY_READ_BOUND);
        assert!(c.connect_timeout() < MAX_POLICY_READ_BOUND);
    }
}
