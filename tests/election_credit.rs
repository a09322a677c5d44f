//! The election credit (src/sources/etcd/credit.rs) as the kubelet sees
//! it: the real etcd source's read loop and the real engine, on tokio's
//! paused clock, against the simulated cluster (crates/testkit/src/sim),
//! each member's verdict sampled over virtual time. What is pinned is the
//! outcome, readiness and the `linearizable_read` check's state and
//! reason, at instants stated through the product's own values
//! ([`EtcdConfig::trust`], [`EtcdConfig::fast`], the member's election
//! timeout `EtcdConfig::etcd`, [`RENEWALS`]) within one tolerance
//! ([`SLACK`]):
//!
//! - a serving follower whose leader is killed stays ready through the
//!   election, its read answered by the new leader (renewed once where the
//!   election takes longer than the credit);
//! - a quorum loss's survivor: unready within the trust where its peer
//!   count is read, after one election timeout where it is not (today's
//!   behaviour, pinned);
//! - a frozen member: unready within the trust, ready at once after thaw;
//! - a leader cut off from its peers: no credit;
//! - a member whose last read failed: no credit (once per outage);
//! - a read still pending after one election timeout: sent again once, the
//!   member ready up to two election timeouts and no longer;
//! - a credit withdrawn when the member freezes or its last peer goes;
//! - a leader unseated by a healed member's term (no pre-vote): out within
//!   the policy's leaderless bound.
//!
//! Each test is one seeded run on a current-thread runtime with paused
//! time: the same every time but for tokio's choice among branches ready
//! at one instant, which [`SLACK`] absorbs. A failure prints the member's
//! timeline (every change of its answer, with the failing checks'
//! explanations) and its linearizable reads.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_readiness_exporter::engine::{EngineHandle, PENDING_TICK};
use etcd_readiness_exporter::sources::MIN_REQUESTED_GAP;
use etcd_readiness_exporter::sources::etcd::EtcdConfig;
use etcd_readiness_exporter::sources::etcd::settings::ELECTION_DRAW_MAX;
use etcd_readiness_policy::verdict::CheckState;
use etcd_readiness_testkit::sim::cluster::{
    Cluster, ELECTION, Fault, HEARTBEAT, Links, REJOIN, STEP,
};
use etcd_readiness_testkit::sim::member::{Logged, Read, ReadLog};
use etcd_readiness_testkit::sim::scenario::{etcd_config, exporter_with, shared};
use etcd_readiness_testkit::sim::timeline::{Seen, Timeline, record};
use etcd_readiness_testkit::wait::poll;
use tokio::time::Instant;

/// How far from its expected instant a change may be seen: the cluster's
/// step (a kill, an election, a heartbeat land on its grid), the
/// timeline's sampling (the same step), and the engine's pending tick.
const SLACK: Duration =
    Duration::from_millis(STEP.as_millis() as u64 * 2 + PENDING_TICK.as_millis() as u64);
/// From the cluster's start until the first fault: a leader elected, every
/// exporter's first rounds done, every member ready.
const WARMUP: Duration = Duration::from_secs(6);
/// How long each run is recorded, warm-up included.
const SPAN: Duration = Duration::from_secs(20);
/// How many times a credited read still waiting after one election
/// timeout is sent again (the credit's `RENEWALS`): raft draws an election
/// timeout up to this many times its setting.
const RENEWALS: u32 = ELECTION_DRAW_MAX - 1;
/// The check the credit is about.
const QGET: &str = "linearizable_read";
/// The default policy's bound on a member without a leader
/// (`leader || leaderless < 1s`).
const LEADERLESS: Duration = Duration::from_secs(1);

/// Whether each exporter reads its member's peer count (its metrics
/// source), or not: no metrics source runs, the count never answers, and
/// the credit decides without it (`Peers::NotRead`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeerCount {
    Read,
    NotRead,
}

/// One member's exporter, as the test sees it.
struct Member {
    timeline: Timeline,
    reads: ReadLog,
    _engine: EngineHandle,
}

/// A seeded cluster, an exporter at each member, after the warm-up.
struct Run {
    cluster: Arc<Cluster>,
    members: Vec<Member>,
    /// When the first fault lands (the end of the warm-up).
    t0: Instant,
    config: EtcdConfig,
}

/// Run `test` on a current-thread runtime with tokio's clock paused.
fn on_virtual_time(test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime")
        .block_on(test)
}

impl Run {
    /// Seed `seed`'s cluster on default links, an exporter at each member
    /// (its peer count read or not), warmed up: every member ready.
    async fn start(seed: u64, peers: PeerCount) -> Run {
        Run::start_on(seed, peers, Links::default()).await
    }

    /// [`Run::start`] on `links`.
    async fn start_on(seed: u64, peers: PeerCount, links: Links) -> Run {
        let cluster = Cluster::new(seed, links);
        tokio::spawn(cluster.clone().drive());
        let (catalogue, policy) = shared().expect("the default policy");
        let config = etcd_config();
        let members = (0..3)
            .map(|i| {
                let (api, reads) = Logged::new(cluster.api(i));
                let counted = (peers == PeerCount::Read).then_some((&cluster, i));
                let engine = exporter_with(api, counted, &catalogue, &policy);
                Member {
                    timeline: record(&engine, SPAN),
                    reads,
                    _engine: engine,
                }
            })
            .collect();
        let t0 = Instant::now() + WARMUP;
        tokio::time::sleep_until(t0).await;
        let run = Run {
            cluster,
            members,
            t0,
            config,
        };
        for i in 0..3 {
            run.expect(i, run.ready_at(i, t0), "ready after the warm-up");
        }
        run
    }

    /// Apply `fault` now.
    fn apply(&self, fault: Fault) {
        self.cluster.apply(fault);
    }

    /// Sleep until `after` past `t0`.
    async fn until(&self, after: Duration) {
        tokio::time::sleep_until(self.t0 + after).await;
    }

    fn at(&self, after: Duration) -> Instant {
        self.t0 + after
    }

    fn ready_at(&self, i: usize, t: Instant) -> bool {
        self.members[i].timeline.at(t).is_some_and(|s| s.ready)
    }

    /// The trust of a read's last answer, and the read's period.
    fn trust(&self) -> Duration {
        self.config.trust().base
    }

    fn fast(&self) -> Duration {
        self.config.fast()
    }

    /// The member's election timeout: how long the credit trusts a read.
    fn election(&self) -> Duration {
        self.config.etcd.election
    }

    /// Member `i`'s timeline and reads, for a failure's message.
    fn explain(&self, i: usize) -> String {
        let m = &self.members[i];
        let secs = |t: Instant| {
            let (a, b) = (t.max(self.t0) - self.t0, self.t0.max(t) - t);
            a.as_secs_f64() - b.as_secs_f64()
        };
        let reads: Vec<String> = m
            .reads
            .reads()
            .iter()
            .filter(|r| r.sent + Duration::from_secs(1) >= self.t0)
            .map(|r| match r.ended {
                Some((at, ok)) => {
                    let how = if ok { "answered" } else { "failed" };
                    format!("{:+.3} → {how} {:+.3}", secs(r.sent), secs(at))
                }
                None => format!("{:+.3} → given up or pending", secs(r.sent)),
            })
            .collect();
        format!(
            "member {i}, s from the fault:\n{}linearizable reads since 1 s before it:\n  {}",
            m.timeline.render(self.t0),
            reads.join("\n  ")
        )
    }

    /// Fail, explaining member `i`, unless `holds`.
    fn expect(&self, i: usize, holds: bool, what: &str) {
        assert!(holds, "{what}\n{}", self.explain(i));
    }

    /// Member `i` is ready at every sample in `[from, to]` (after `t0`).
    fn ready_throughout(&self, i: usize, (from, to): (Duration, Duration), what: &str) {
        let not = self.members[i]
            .timeline
            .first(self.at(from), self.at(to), |s| !s.ready);
        let when = not.as_ref().map(|s| s.at - self.t0);
        self.expect(i, not.is_none(), &format!("{what}: not ready at {when:?}"));
    }

    /// Member `i` turns unready within `[from, to]` (after `t0`), and is
    /// ready until then; the first unready sample.
    fn unready_within(&self, i: usize, (from, to): (Duration, Duration), what: &str) -> Seen {
        self.ready_throughout(i, (Duration::ZERO, from), what);
        let seen = self.members[i]
            .timeline
            .first(self.at(from), self.at(to), |s| !s.ready);
        self.expect(i, seen.is_some(), &format!("{what}: still ready at {to:?}"));
        seen.expect("checked")
    }

    /// Member `i` is not ready at any sample in `[from, to]` (after `t0`).
    fn unready_throughout(&self, i: usize, (from, to): (Duration, Duration), what: &str) {
        let ready = self.members[i]
            .timeline
            .first(self.at(from), self.at(to), |s| s.ready);
        let when = ready.as_ref().map(|s| s.at - self.t0);
        self.expect(i, ready.is_none(), &format!("{what}: ready at {when:?}"));
    }

    /// The first instant, a [`STEP`] apart from `from` (after `t0`) and
    /// within `within` of it, at which `holds` of the cluster.
    async fn first_instant(
        &self,
        from: Duration,
        within: Duration,
        holds: impl Fn(&Cluster) -> bool,
    ) -> Option<Duration> {
        self.until(from).await;
        let seen = poll(within, STEP, || {
            let at = Instant::now() - self.t0;
            let held = holds(&self.cluster);
            async move { if held { Ok(at) } else { Err(()) } }
        });
        seen.await.ok()
    }

    /// Member `i`'s linearizable_read check at `after` past `t0`.
    fn qget_at(&self, i: usize, after: Duration) -> (CheckState, String) {
        let seen = self.members[i].timeline.at(self.at(after));
        let check = seen.as_ref().and_then(|s| s.check(QGET)).cloned();
        let check = check.unwrap_or_else(|| panic!("no {QGET} check\n{}", self.explain(i)));
        (check.state, check.explanation)
    }
}

/// The window in which a read pending from the fault is judged when its
/// `trust` runs out: it was sent between the fault (one in flight then is
/// a few ms older) and one read period later.
fn judged(run: &Run, trust: Duration) -> (Duration, Duration) {
    (trust - STEP, trust + run.fast() + SLACK)
}

/// The seeds of the election case: each draws its own election timeouts,
/// so the election ends at another instant of the credit.
const ELECTION_SEEDS: [u64; 6] = [1, 2, 3, 4, 5, 6];
/// The seed of every other case (the case does not depend on the draws).
const SEED: u64 = 1;

/// Member `i`'s linearizable reads sent from `from` on.
fn reads_from(run: &Run, i: usize, from: Instant) -> Vec<Read> {
    let reads = run.members[i].reads.reads();
    reads.into_iter().filter(|r| r.sent >= from).collect()
}

/// Case 1: the leader killed, a serving follower's read is credited and
/// renewed until the new leader answers it: ready throughout. Where its
/// peer count is not read, the credit ends after one election timeout (no
/// renewal without a peer shown) and the member is ready again as soon as
/// the new leader answers.
#[test]
fn a_serving_follower_whose_leader_is_killed_stays_ready_through_the_election() {
    for seed in ELECTION_SEEDS {
        on_virtual_time(async move {
            let run = Run::start(seed, PeerCount::Read).await;
            let leader = run.cluster.leader().expect("a leader");
            let f = run.cluster.follower(Some(leader));
            run.apply(Fault::Kill(leader));
            // An election ends within two election timeouts of the last
            // heartbeat.
            let horizon = ELECTION * 3;
            run.until(horizon).await;
            let what = format!("seed {seed}: a follower through its leader's death");
            run.ready_throughout(f, (Duration::ZERO, horizon), &what);
            let new = run.cluster.leader();
            run.expect(f, new.is_some_and(|n| n != leader), "a new leader by then");
            let reads = reads_from(&run, f, run.t0 - STEP);
            let answered = reads.iter().find(|r| r.ended.is_some());
            let failed = reads.iter().any(|r| matches!(r.ended, Some((_, false))));
            run.expect(f, !failed, "no read failed");
            // The read pending at the fault, sent again at most once, is
            // what the new leader answered: it waited longer than the trust.
            let first = reads.first().map(|r| r.sent);
            let held = answered
                .zip(first)
                .map(|(r, s)| r.ended.expect("ended").0 - s);
            let credited = held.is_some_and(|h| h > run.trust());
            let resends = reads.iter().take_while(|r| Some(*r) != answered).count();
            run.expect(
                f,
                credited,
                &format!("{what}: held {held:?}, no longer than the trust"),
            );
            let within = resends <= RENEWALS as usize;
            run.expect(f, within, &format!("{what}: sent again {resends} times"));
        });
    }
    on_virtual_time(async {
        let run = Run::start(SEED, PeerCount::NotRead).await;
        let leader = run.cluster.leader().expect("a leader");
        let f = run.cluster.follower(Some(leader));
        run.apply(Fault::Kill(leader));
        run.until(ELECTION * 3).await;
        let what = "without its peer count, the credit ends after an election timeout";
        run.unready_within(f, judged(&run, run.election()), what);
        let back = reads_from(&run, f, run.at(run.election() - STEP))
            .iter()
            .find_map(|r| r.ended.filter(|e| e.1).map(|e| e.0));
        run.expect(f, back.is_some(), "a read answered by the new leader");
        let back = back.expect("checked") - run.t0;
        let what = "ready again once the new leader answers";
        run.ready_throughout(f, (back + SLACK, ELECTION * 3), what);
    });
}

/// Case 2: a quorum loss's survivor (both peers killed). Its peer count
/// read (0): no credit, unready when the read's normal trust runs out.
/// Not read (`Peers::NotRead`): today it looks like an election to the
/// credit, and is credited for one election timeout — pinned as such.
#[test]
fn a_quorum_loss_survivor_goes_unready_within_the_trust_or_at_the_credits_end() {
    for peers in [PeerCount::Read, PeerCount::NotRead] {
        on_virtual_time(async move {
            let run = Run::start(SEED, peers).await;
            let leader = run.cluster.leader().expect("a leader");
            let other = run.cluster.follower(Some(leader));
            let s = 3 - leader - other;
            run.apply(Fault::Kill(leader));
            run.apply(Fault::Kill(other));
            let back = ELECTION * 3;
            run.until(back).await;
            let (trust, what) = match peers {
                PeerCount::Read => (run.trust(), "no active peer: the normal trust"),
                PeerCount::NotRead => (run.election(), "no peer count: credited"),
            };
            let out = run.unready_within(s, judged(&run, trust), what);
            let qget = out.check(QGET).map(|c| c.state);
            run.expect(
                s,
                qget != Some(CheckState::Pass),
                "the quorum read is what fails",
            );
            // Case 5 as the kubelet sees it: the read that failed is not
            // followed by a credited one (the member's last read failed):
            // not ready while its peers are down.
            let (_, until) = judged(&run, trust);
            run.unready_throughout(s, (until, back), "no second credit in one outage");
        });
    }
}

/// Case 3: a frozen member (SIGSTOP): its Status and reads wait, no
/// credit: unready within the trust; ready at once after the thaw.
#[test]
fn a_frozen_member_is_unready_within_the_trust_and_ready_at_once_after_thaw() {
    on_virtual_time(async {
        let run = Run::start(SEED, PeerCount::Read).await;
        let leader = run.cluster.leader().expect("a leader");
        let f = run.cluster.follower(Some(leader));
        run.apply(Fault::Freeze(f));
        let thaw = ELECTION * 3;
        run.until(thaw).await;
        run.apply(Fault::Thaw(f));
        run.until(thaw + ELECTION).await;
        let (_, by) = judged(&run, run.trust());
        run.unready_within(f, judged(&run, run.trust()), "frozen");
        let (qget, why) = run.qget_at(f, by);
        let outdated = qget == CheckState::Unknown && why.contains("outdated");
        run.expect(f, outdated, &format!("the read is not credited: {why}"));
        run.unready_throughout(f, (by, thaw), "frozen");
        run.ready_throughout(f, (thaw + SLACK, thaw + ELECTION), "thawed");
    });
}

/// Case 4: a leader cut off from its peers: its own read waits (no
/// quorum), it is the leader: no credit, unready within the trust, until
/// the partition heals.
#[test]
fn a_leader_cut_off_from_its_peers_gets_no_credit() {
    on_virtual_time(async {
        let run = Run::start(SEED, PeerCount::Read).await;
        let leader = run.cluster.leader().expect("a leader");
        run.apply(Fault::Cut(leader));
        let heal = ELECTION * 4;
        run.until(heal).await;
        run.apply(Fault::Heal(leader));
        // Its links are back within REJOIN of the heal.
        let end = heal + REJOIN.1 + ELECTION;
        run.until(end).await;
        let (_, by) = judged(&run, run.trust());
        let out = run.unready_within(leader, judged(&run, run.trust()), "cut off");
        let leads = out.check("leader").map(|c| c.state);
        run.expect(leader, leads == Some(CheckState::Pass), "it still leads");
        let (qget, why) = run.qget_at(leader, by);
        let outdated = qget == CheckState::Unknown && why.contains("outdated");
        run.expect(
            leader,
            outdated,
            &format!("the read is not credited: {why}"),
        );
        run.unready_throughout(leader, (by, heal), "cut off");
        let back = heal + REJOIN.1 + HEARTBEAT + run.fast() + SLACK;
        run.ready_throughout(leader, (back, end), "healed");
    });
}

/// Case 6: the leader killed and the other follower frozen: an election
/// cannot end, the frozen peer's connection stays open (one active peer).
/// The read pending after one election timeout is sent again once, and the
/// member is ready up to two election timeouts and no longer; without the
/// peer count, no renewal.
#[test]
fn a_read_pending_at_the_credits_end_is_sent_again_once_and_no_more() {
    for peers in [PeerCount::Read, PeerCount::NotRead] {
        on_virtual_time(async move {
            let run = Run::start(SEED, peers).await;
            let leader = run.cluster.leader().expect("a leader");
            let f = run.cluster.follower(Some(leader));
            run.apply(Fault::Kill(leader));
            run.apply(Fault::Freeze(3 - leader - f));
            let end = ELECTION * 4;
            run.until(end).await;
            let renewals = match peers {
                PeerCount::Read => RENEWALS,
                PeerCount::NotRead => 0,
            };
            let credit = run.election() * (1 + renewals);
            let what = format!("{peers:?}: credited for {credit:?}");
            run.unready_within(f, judged(&run, credit), &what);
            let (_, after) = judged(&run, credit);
            run.unready_throughout(f, (after, end), "no further credit");
            let reads = reads_from(&run, f, run.t0 - STEP);
            let sent: Vec<Duration> = reads.iter().map(|r| r.sent - reads[0].sent).collect();
            // Sent again at the credit's end (once per renewal), then the
            // next round's read after the last one ran out.
            let again = sent.iter().take_while(|&&d| d < credit - STEP).count() - 1;
            run.expect(
                f,
                again == renewals as usize,
                &format!("sent again at {sent:?}"),
            );
        });
    }
}

/// A credit is withdrawn the moment the member stops earning it: the
/// leader killed, a credited follower that then freezes (its Status no
/// longer answers) is unready within the trust of that Status; one whose
/// last peer goes while its renewed read waits (the frozen peer killed
/// too: no active peer) is unready within a round of its peer count.
#[test]
fn a_credit_is_withdrawn_when_the_member_freezes_or_its_last_peer_goes() {
    on_virtual_time(async {
        let run = Run::start(SEED, PeerCount::Read).await;
        let leader = run.cluster.leader().expect("a leader");
        let f = run.cluster.follower(Some(leader));
        run.apply(Fault::Kill(leader));
        let freeze = run.election() / 2;
        run.until(freeze).await;
        run.apply(Fault::Freeze(f));
        run.until(ELECTION * 2).await;
        let (from, to) = judged(&run, run.trust());
        let out = run.unready_within(f, (freeze + from, freeze + to), "credited, then frozen");
        let (qget, why) = run.qget_at(f, out.at - run.t0 + SLACK);
        let outdated = qget == CheckState::Unknown && why.contains("outdated");
        run.expect(f, outdated, &format!("the credit is withdrawn: {why}"));
    });
    on_virtual_time(async {
        let run = Run::start(SEED, PeerCount::Read).await;
        let leader = run.cluster.leader().expect("a leader");
        let f = run.cluster.follower(Some(leader));
        let other = 3 - leader - f;
        run.apply(Fault::Kill(leader));
        run.apply(Fault::Freeze(other));
        let gone = run.election() + run.election() * 3 / 10;
        run.until(gone).await;
        run.apply(Fault::Kill(other));
        run.until(ELECTION * 3).await;
        // The credit asks for the count every MIN_REQUESTED_GAP, which the
        // metrics source's runner also keeps between two asked rounds.
        let within = gone + MIN_REQUESTED_GAP * 2 + SLACK;
        run.unready_within(f, (gone, within), "its last peer gone while renewed");
    });
}

/// Case 7: without pre-vote a leader cut off steps down and campaigns
/// alone, raising its term; once the partition heals, that term unseats
/// the leader elected meanwhile at its first heartbeat to it (3.4's
/// disruption election). The unseated leader knows no leader: whether its
/// pending read is refused (sent while it led) or credited as any
/// follower's in an election (sent once its Status showed the step-down),
/// it is out no later than the default policy's `leaderless < 1s` allows,
/// and ready again once a new leader answers.
#[test]
fn a_leader_unseated_by_a_healed_members_term_is_out_within_the_leaderless_bound() {
    on_virtual_time(async {
        let links = Links {
            pre_vote: false,
            ..Links::default()
        };
        let run = Run::start_on(SEED, PeerCount::Read, links).await;
        let cut = run.cluster.leader().expect("a leader");
        run.apply(Fault::Cut(cut));
        let heal = ELECTION * 6;
        run.until(heal).await;
        let lead = run.cluster.leader();
        let elected = lead.is_some_and(|l| l != cut);
        run.expect(cut, elected, "the others elect a leader meanwhile");
        let lead = lead.expect("checked");
        run.apply(Fault::Heal(cut));
        // Until the links are surely back and a heartbeat has gone out.
        let down = run
            .first_instant(heal, REJOIN.1 + HEARTBEAT * 2, |c| c.leader() != Some(lead))
            .await;
        run.expect(lead, down.is_some(), "unseated once the links are back");
        let down = down.expect("checked");
        let back = run
            .first_instant(down, ELECTION * 6, |c| c.leader().is_some())
            .await;
        run.expect(
            lead,
            back.is_some(),
            "a leader again within 6 election timeouts",
        );
        let back = back.expect("checked");
        run.until(back + ELECTION).await;
        run.ready_throughout(lead, (heal, down), "the leader until unseated");
        // The default policy's `leaderless < 1s`, from the first Status
        // that shows no leader (one read period after the step-down at most).
        let bound = LEADERLESS + run.fast() + SLACK;
        let out = run.members[lead]
            .timeline
            .first(run.at(down), run.at(down + bound), |s| !s.ready);
        run.expect(lead, out.is_some(), "out within the leaderless bound");
        let ready = back + run.fast() + SLACK;
        run.ready_throughout(lead, (ready, back + ELECTION), "a leader again");
    });
}
