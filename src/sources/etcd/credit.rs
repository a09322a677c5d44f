//! The election credit, as a pure state machine: what the member's own
//! signals say (the [`Facts`]) and the time, in; a [`Phase`] and its
//! [`Effects`] out. No IO and no clock read: the read loop
//! (`loops.rs`) gathers the facts from the store, passes the time, and
//! applies the effects.
//!
//! The rule, in one sentence: a follower that was serving, keeps answering
//! Status and (where its peer count is read) shows the peers a quorum needs
//! besides it has its pending
//! read trusted for as long as an election takes — one election timeout of
//! the member, sent again and trusted once more while it still waits,
//! since raft draws each election timeout between one and two times its
//! setting ([`ELECTION_DRAW_MAX`]) — because the new leader answers it.
//! Every duration here is the member's ([`super::EtcdSettings`]) or the
//! read's own trust; the only other is how often the machine is looked at
//! ([`STEP`]).
//!
//! Why a credit: a follower whose leader died or is cut off holds its
//! linearizable read until a new leader is elected, and every read it
//! holds is answered the moment one is: etcd's own `/readyz` and `/health`
//! answer them then too. Without the credit the short trust that catches
//! a frozen or cut-off member would fail it for every election.
//!
//! A read's life: [`Phase::Waiting`] while its last answer is trusted
//! anyway (where the member's peer count is what the credit would lack, it
//! is asked for half-way through that trust, so that a count read after the
//! read started is there when the credit is decided);
//! [`Phase::Deciding`] from just before that trust runs out, every
//! [`STEP`] until the credit is earned or the read is outdated (a Status
//! late for a moment does not cost the credit; while only the peer count
//! is missing, one trust period more); [`Phase::Credited`] while the
//! member still earns it, re-asking for the peer count every
//! [`PEERS_ASK_GAP`] (a quorum lost during an election ends it), until the
//! election timeout; then, [`RENEWALS`] times and only where a peer count
//! read since the read started shows a quorum's peers, the read is sent again
//! ([`Effects::resend`]) and credited for another election timeout: an
//! election that started late ends within the second, while a read that
//! has waited 1 s proves `qget_ms < 1000` false by its lower bound however
//! soon it is answered — a fresh read's bound starts at 0, as the truth
//! asks of a read sent now; [`Phase::Judged`] once refused or withdrawn:
//! the normal trust again, the engine woken.

use std::time::{Duration, Instant};

use super::STEP;
use super::settings::ELECTION_DRAW_MAX;
use etcd_readiness_policy::signals::Trust;

/// How many times a credited read still waiting after one election
/// timeout is sent again with the credit: raft's draw allows one more
/// timeout ([`ELECTION_DRAW_MAX`]), so the credit of one outage lasts at
/// most as long as the longest election timeout.
pub(super) const RENEWALS: u32 = ELECTION_DRAW_MAX - 1;
/// How often a credited read asks for the peer count again.
pub(super) const PEERS_ASK_GAP: Duration = crate::sources::MIN_REQUESTED_GAP;

/// The member's role, from its last trusted Status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    Leader,
    /// A follower or a candidate.
    Follower,
    Unknown,
}

/// The member's own peer count, as the credit sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Peers {
    /// No count to wait for: the member's metrics are not read, or their
    /// endpoint never answered (an etcd whose client port refuses
    /// `/metrics`): the credit is decided without it.
    NotRead,
    /// A count the metrics source read `read_after_start` or before the
    /// pending read started.
    Counted { peers: f64, read_after_start: bool },
    /// The endpoint answered before, but there is no count now.
    Unknown,
}

/// What the store says of the member at one instant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Facts {
    /// The last linearizable read was answered (not failed, no loss since):
    /// only a member that was serving earns the credit, so a credit is
    /// given at most once per outage.
    pub served: bool,
    /// Its Status answers (etcd_up true and still trusted).
    pub status_answers: bool,
    pub role: Role,
    /// Its last trusted Status names a leader (`Some(false)`: none, a
    /// candidate or a follower between terms).
    pub has_leader: Option<bool>,
    pub learner: Option<bool>,
    pub peers: Peers,
    /// How many active peers a quorum needs besides the member
    /// ([`quorum_peers`], from the member list etcd last answered).
    pub quorum_peers: u32,
    /// The pending read's last answer is still trusted (by the trust in
    /// force, contention included).
    pub read_trusted: bool,
}

/// Why a read gets no credit, or loses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum Refusal {
    #[error("its last linearizable read failed")]
    LastReadFailed,
    #[error("its Status is not answered in time")]
    StatusNotAnswered,
    /// A leader whose read waits cannot reach a quorum; no election will
    /// answer it.
    #[error("it is the leader, or its role is not known")]
    LeaderOrRoleUnknown,
    /// A leader that stepped down (a rejoining member's higher term, on a
    /// cluster without pre-vote) resets its election timer: no election
    /// can start for one election timeout, so its read waits at least that.
    #[error("it led when its read was sent and has no leader now")]
    SteppedDown,
    #[error("it is a learner, or that is not known")]
    Learner,
    /// A lost quorum's survivor sees its peers' connections close at once:
    /// fewer are left than a quorum needs besides it, so no election ends.
    #[error("its metrics show fewer active peers than a quorum needs")]
    TooFewPeers,
    #[error("its peer count was not read since the read started")]
    PeersNotRead,
    #[error("its read has waited as long as an election takes")]
    ElectionOver,
}

/// Whether the member earns the credit by `f`, its read sent in the role
/// `sent_as`. A credit already given is `kept` under the same conditions
/// but the role: a follower that wins the election while its read waits is
/// the leader now, and answers that read once its term's first entry
/// commits.
///
/// Weighed and not taken: refusing a follower whose term rose by more than
/// the credit's rounds since its read was sent (the mark of a member that
/// campaigned alone and is back, on a cluster without pre-vote). On the
/// simulated cluster's no-pre-vote variant, which has that disruption
/// election, the part above the look-ahead floor went from 2.2 to 2.5 s
/// at the median and from 3.6 to 3.2 s at the 90th percentile over 200
/// seeds: the election it would give up on ends within the credit about
/// as often as not.
pub(super) fn earns(f: &Facts, kept: bool, sent_as: Role) -> Result<(), Refusal> {
    if !f.served {
        Err(Refusal::LastReadFailed)
    } else if !f.status_answers {
        Err(Refusal::StatusNotAnswered)
    } else if !kept && sent_as == Role::Leader && f.has_leader == Some(false) {
        Err(Refusal::SteppedDown)
    } else if !kept && f.role != Role::Follower {
        Err(Refusal::LeaderOrRoleUnknown)
    } else if f.learner != Some(false) {
        Err(Refusal::Learner)
    } else {
        match f.peers {
            Peers::NotRead => Ok(()),
            Peers::Counted {
                peers,
                read_after_start: true,
            } if peers >= f64::from(f.quorum_peers) => Ok(()),
            Peers::Counted {
                read_after_start: true,
                ..
            } => Err(Refusal::TooFewPeers),
            _ => Err(Refusal::PeersNotRead),
        }
    }
}

/// How many active peers a quorum needs besides a member of a cluster
/// with `voting` members (learners aside): half of them, rounded down
/// (3 → 1, 5 → 2), at least 1 (a follower with none is never served);
/// 1, a three-member cluster's, while the member list is not known. An
/// absurd count only makes the credit harder to earn.
pub(super) fn quorum_peers(voting: Option<usize>) -> u32 {
    voting.map_or(1, |n| u32::try_from(n / 2).unwrap_or(u32::MAX).max(1))
}

/// A peer count read since the read started shows the peers a quorum
/// needs: without it a lost quorum's survivor looks like an election, and a
/// renewal would double its time in service without one.
fn shows_quorum_peers(f: &Facts) -> bool {
    matches!(
        f.peers,
        Peers::Counted {
            peers,
            read_after_start: true,
        } if peers >= f64::from(f.quorum_peers)
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Waiting,
    Deciding,
    Credited,
    Judged,
}

/// What the driver does after a step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Effects {
    /// The pending read's trust from now on (the store's
    /// `set_pending_trust`).
    pub trust: Option<Trust>,
    /// Ask the member's metrics source for a round now.
    pub ask_peers: bool,
    /// Wake the engine: the read's signal changed (it turned outdated).
    pub wake: bool,
    /// The credit was refused or withdrawn, and why (a debug log line).
    pub refused: Option<Refusal>,
    /// Send the read again now and record it as pending from now, with
    /// `trust` (the credited one): the credit is renewed
    /// ([`RENEWALS`]).
    pub resend: bool,
}

/// The outcome of a step: effects, and when to step again (`None`: only
/// the read's answer or its deadline is left).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Step {
    pub effects: Effects,
    pub next: Option<Instant>,
}

/// One pending linearizable read's credit.
#[derive(Clone, Debug)]
pub(super) struct Credit {
    started: Instant,
    /// The member's role when the read was sent.
    sent_as: Role,
    trust: Trust,
    phase: Phase,
    /// The peer count was asked for since the read started.
    asked: Option<Instant>,
    /// One trust period more is given while the peer count is read (once
    /// per read).
    peers_wait_given: bool,
    peers_wait_on: bool,
    /// The engine was woken at the trust's end (or the read was judged after it).
    expiry_woken: bool,
    /// How often the read was sent again with the credit.
    renewed: u32,
    /// The member's election timeout: how long a credited read is trusted,
    /// and given.
    election: Duration,
}

impl Credit {
    /// A read sent at `started` by a member in the role `sent_as`, its last
    /// answer trusted by `trust`, on a member whose election timeout is
    /// `election`.
    pub(super) fn new(started: Instant, sent_as: Role, trust: Trust, election: Duration) -> Credit {
        Credit {
            started,
            sent_as,
            trust,
            phase: Phase::Waiting,
            asked: None,
            peers_wait_given: false,
            peers_wait_on: false,
            expiry_woken: false,
            renewed: 0,
            election,
        }
    }

    #[cfg(test)]
    fn phase(&self) -> Phase {
        self.phase
    }

    /// The trust of a credited read.
    fn credited_trust(&self) -> Trust {
        Trust {
            base: self.election.max(self.trust.base),
            contended_max: self.election.max(self.trust.contended_max),
        }
    }

    /// A millisecond past the trust: the store calls a read outdated once it
    /// has waited longer than that.
    fn expiry(&self) -> Instant {
        self.started + self.trust.base + Duration::from_millis(1)
    }

    fn ask(&mut self, now: Instant, fx: &mut Effects) {
        self.asked = Some(now);
        fx.ask_peers = true;
    }

    /// The member's facts at `now`: the next phase and its effects.
    pub(super) fn step(&mut self, now: Instant, f: &Facts) -> Step {
        let mut fx = Effects::default();
        let next = match self.phase {
            Phase::Waiting => self.waiting(now, f, &mut fx),
            Phase::Deciding => self.deciding(now, f, &mut fx),
            Phase::Credited => self.credited(now, f, &mut fx),
            Phase::Judged => self.judged(now, &mut fx),
        };
        Step { effects: fx, next }
    }

    fn waiting(&mut self, now: Instant, f: &Facts, fx: &mut Effects) -> Option<Instant> {
        let half = self.started + self.trust.base / 2;
        let decide = self.started + self.trust.base.saturating_sub(STEP);
        // The count is asked for once, and only where it is all the credit
        // lacks (not for a leader, nor in an outage: no GET for nothing).
        if now >= half
            && self.asked.is_none()
            && earns(f, false, self.sent_as) == Err(Refusal::PeersNotRead)
        {
            self.ask(now, fx);
        }
        if now < decide {
            let wants_count = f.peers != Peers::NotRead && self.asked.is_none();
            return Some(if now < half && wants_count {
                half
            } else {
                decide
            });
        }
        self.phase = Phase::Deciding;
        self.deciding(now, f, fx)
    }

    fn deciding(&mut self, now: Instant, f: &Facts, fx: &mut Effects) -> Option<Instant> {
        let earned = earns(f, false, self.sent_as);
        match earned {
            Ok(()) => {
                // The count is asked for again a gap after the credit.
                self.phase = Phase::Credited;
                self.asked = Some(now);
                fx.trust = Some(self.credited_trust());
                return Some(now + STEP);
            }
            Err(Refusal::PeersNotRead) => {
                if self.asked.is_none() {
                    self.ask(now, fx);
                }
                if !self.peers_wait_given {
                    (self.peers_wait_given, self.peers_wait_on) = (true, true);
                    fx.trust = Some(Trust {
                        base: self.trust.base * 2,
                        contended_max: self.trust.contended_max + self.trust.base,
                    });
                }
            }
            Err(_) if self.peers_wait_on => {
                // Decided against: the extra wait is taken back at once,
                // and the read judged again by the trust it had.
                self.peers_wait_on = false;
                fx.trust = Some(self.trust);
                return Some(now);
            }
            Err(_) => {}
        }
        if fx.trust.is_none() && !f.read_trusted {
            self.judge(now, earned.err(), fx);
            return self.judged(now, fx);
        }
        Some(now + STEP)
    }

    fn credited(&mut self, now: Instant, f: &Facts, fx: &mut Effects) -> Option<Instant> {
        let kept = earns(f, true, self.sent_as);
        let over = now.saturating_duration_since(self.started) >= self.election;
        if over && kept.is_ok() && self.renewed < RENEWALS && shows_quorum_peers(f) {
            // Sent again: a read from now, credited as the first was.
            self.renewed += 1;
            self.started = now;
            fx.resend = true;
            fx.trust = Some(self.credited_trust());
            return Some(now + STEP);
        }
        let why = if over {
            Err(Refusal::ElectionOver)
        } else {
            kept
        };
        if let Err(why) = why {
            fx.trust = Some(self.trust);
            self.judge(now, Some(why), fx);
            return self.judged(now, fx);
        }
        let due = self
            .asked
            .is_none_or(|at| now.saturating_duration_since(at) >= PEERS_ASK_GAP);
        if f.peers != Peers::NotRead && due {
            self.ask(now, fx);
        }
        // Stepped at the credit's end exactly: the read's deadline is often
        // that instant, and the renewal must be decided before it.
        Some((now + STEP).min(self.started + self.election))
    }

    fn judge(&mut self, now: Instant, why: Option<Refusal>, fx: &mut Effects) {
        self.phase = Phase::Judged;
        fx.wake = true;
        fx.refused = why;
        self.expiry_woken = now >= self.expiry();
    }

    fn judged(&mut self, now: Instant, fx: &mut Effects) -> Option<Instant> {
        if self.expiry_woken {
            return None;
        }
        if now >= self.expiry() {
            self.expiry_woken = true;
            fx.wake = true;
            return None;
        }
        Some(self.expiry())
    }
}

/// The machine alone, in the cases the simulated cluster cannot produce or
/// not at a chosen instant (a slow peer count, a learner, a step-down seen
/// while the read sent as the leader waits, a moved leadership, a contended
/// node, an election answered within the first credit); the rest run
/// through the real read loop and engine in `tests/election_credit.rs`.
#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The member as a script: its facts at each instant (ms after the read
    /// started), but `read_trusted`, which the drive derives from the trust
    /// in force as the store does (plus the node's contended time).
    struct Member {
        facts: fn(u64) -> Facts,
        /// Contended CPU ms by then, counted into the trust up to 1 s.
        contended: fn(u64) -> u64,
        /// When the read answers (ms), if before its deadline.
        answers_at: Option<u64>,
    }

    /// What the drive saw: when each thing happened, in ms after the start.
    #[derive(Debug, Default, PartialEq)]
    struct Trace {
        credited: Option<u64>,
        judged: Option<(u64, Option<Refusal>)>,
        asks: Vec<u64>,
        /// (when, the trust's base from then on)
        trusts: Vec<(u64, u64)>,
        wakes: Vec<u64>,
        /// When the read was sent again with the credit.
        resends: Vec<u64>,
    }

    /// The read's deadline (`--sample.timeout 2s`: past the credit, so that
    /// its end is seen; with the default, the 1 s deadline ends it too).
    const DEADLINE: u64 = 2000;

    /// Drive the machine as the read loop does: step, apply, sleep until
    /// the next step, the answer or the deadline (virtual time).
    fn drive(m: &Member) -> Trace {
        let t0 = Instant::now();
        let base = Trust {
            base: ms(100),
            contended_max: ms(1000),
        };
        // The role when the read was sent: the script's at 0 ms.
        let mut credit = Credit::new(t0, (m.facts)(0).role, base, ms(1000));
        let mut trust = base;
        let mut trace = Trace::default();
        let mut t = 0u64;
        // When the read in flight was sent (a resend starts it again).
        let mut sent = 0u64;
        for _ in 0..10_000 {
            let mut f = (m.facts)(t);
            let (ok, _) = trust.with_contention(ms((m.contended)(t)));
            f.read_trusted = ms(t - sent) <= ok;
            let step = credit.step(t0 + ms(t), &f);
            let fx = step.effects;
            if let Some(tr) = fx.trust {
                trust = tr;
                trace.trusts.push((t, tr.base.as_millis() as u64));
            }
            if fx.ask_peers {
                trace.asks.push(t);
            }
            if fx.wake {
                trace.wakes.push(t);
            }
            if fx.resend {
                trace.resends.push(t);
                sent = t;
            }
            if credit.phase() == Phase::Credited && trace.credited.is_none() {
                trace.credited = Some(t);
            }
            if credit.phase() == Phase::Judged && trace.judged.is_none() {
                trace.judged = Some((t, fx.refused));
            }
            let deadline = sent + DEADLINE;
            let next = step
                .next
                .map_or(deadline, |n| (n - t0).as_millis() as u64)
                .min(deadline);
            let end = m.answers_at.unwrap_or(deadline);
            if next >= end {
                return trace;
            }
            t = next;
        }
        panic!("the machine did not settle: {trace:?}");
    }

    fn check(table: Vec<(&str, Member, Trace)>) {
        for (what, member, want) in table {
            assert_eq!(drive(&member), want, "{what}");
        }
    }

    const FOLLOWER: Facts = Facts {
        served: true,
        status_answers: true,
        role: Role::Follower,
        has_leader: Some(true),
        learner: Some(false),
        peers: Peers::NotRead,
        quorum_peers: 1,
        read_trusted: true,
    };

    const LEADER: Facts = Facts {
        role: Role::Leader,
        ..FOLLOWER
    };

    fn none(_: u64) -> u64 {
        0
    }

    fn counted(peers: f64, read_after_start: bool) -> Peers {
        Peers::Counted {
            peers,
            read_after_start,
        }
    }

    fn with_peers(peers: Peers) -> Facts {
        Facts { peers, ..FOLLOWER }
    }

    #[test]
    fn elections_keep_or_win_the_credit() {
        // (what, the member, expected trace), on virtual time
        let table: Vec<(&str, Member, Trace)> = vec![(
            // An election: the follower's read is credited just before its
            // trust runs out and answered by the new leader at 600 ms.
            "an election",
            Member {
                facts: |_| FOLLOWER,
                contended: none,
                answers_at: Some(600),
            },
            Trace {
                credited: Some(90),
                trusts: vec![(90, 1000)],
                ..Trace::default()
            },
        )];
        check(table);
    }

    #[test]
    fn a_lost_quorum_gets_none_where_its_peers_are_counted_and_one_election_without() {
        use Refusal::*;
        // (what, the member, expected trace), on virtual time
        let table: Vec<(&str, Member, Trace)> = vec![(
            // The count comes late: one trust period more, taken back the
            // moment it says 0, the read judged at once (it waited longer).
            "a lost quorum whose peer count is slow",
            Member {
                facts: |t| {
                    with_peers(if t < 150 {
                        counted(2.0, false)
                    } else {
                        counted(0.0, true)
                    })
                },
                contended: none,
                answers_at: None,
            },
            Trace {
                asks: vec![50],
                trusts: vec![(90, 200), (150, 100)],
                judged: Some((150, Some(TooFewPeers))),
                wakes: vec![150],
                ..Trace::default()
            },
        )];
        check(table);
    }

    #[test]
    fn the_leader_a_learner_and_a_member_whose_last_read_failed_get_none() {
        use Refusal::*;
        // (what, the member, expected trace), on virtual time
        let table: Vec<(&str, Member, Trace)> = vec![
            (
                "a learner",
                Member {
                    facts: |_| Facts {
                        learner: Some(true),
                        ..FOLLOWER
                    },
                    contended: none,
                    answers_at: None,
                },
                Trace {
                    judged: Some((110, Some(Learner))),
                    wakes: vec![110],
                    ..Trace::default()
                },
            ),
            (
                // A member whose last read failed gets none (once per outage).
                "a member whose last read failed",
                Member {
                    facts: |_| Facts {
                        served: false,
                        ..FOLLOWER
                    },
                    contended: none,
                    answers_at: None,
                },
                Trace {
                    judged: Some((110, Some(LastReadFailed))),
                    wakes: vec![110],
                    ..Trace::default()
                },
            ),
        ];
        check(table);
    }

    #[test]
    fn a_leader_that_steps_down_gets_none_and_a_candidate_or_a_moved_leadership_keeps_it() {
        use Refusal::*;
        // (what, the member, expected trace), on virtual time
        let table: Vec<(&str, Member, Trace)> = vec![
            (
                // A leader that steps down for a higher term (a member that
                // rejoins a cluster without pre-vote): it waits an election
                // timeout before it campaigns, so its read gets no credit.
                "a leader that steps down",
                Member {
                    facts: |t| {
                        if t < 30 {
                            LEADER
                        } else {
                            Facts {
                                has_leader: Some(false),
                                ..FOLLOWER
                            }
                        }
                    },
                    contended: none,
                    answers_at: None,
                },
                Trace {
                    judged: Some((110, Some(SteppedDown))),
                    wakes: vec![110],
                    ..Trace::default()
                },
            ),
            (
                // A leadership moved on (etcd's leader transfer): the new
                // leader is known before the credit is decided; credited.
                "a leader whose leadership moved",
                Member {
                    facts: |t| {
                        if t < 30 {
                            LEADER
                        } else if t < 40 {
                            Facts {
                                has_leader: Some(false),
                                ..FOLLOWER
                            }
                        } else {
                            FOLLOWER
                        }
                    },
                    contended: none,
                    answers_at: Some(300),
                },
                Trace {
                    credited: Some(90),
                    trusts: vec![(90, 1000)],
                    ..Trace::default()
                },
            ),
        ];
        check(table);
    }

    #[test]
    fn a_frozen_member_gets_none_or_loses_it_and_contention_only_delays_the_verdict() {
        use Refusal::*;
        // (what, the member, expected trace), on virtual time
        let table: Vec<(&str, Member, Trace)> = vec![(
            // Contention: the leader's read is trusted as much longer as
            // the node's CPU was contended (the store's rule), so it is
            // judged later, not given a credit.
            "the leader on a contended node",
            Member {
                facts: |_| Facts {
                    role: Role::Leader,
                    ..FOLLOWER
                },
                contended: |t| t.saturating_sub(50).min(200),
                answers_at: None,
            },
            Trace {
                judged: Some((310, Some(LeaderOrRoleUnknown))),
                wakes: vec![310],
                ..Trace::default()
            },
        )];
        check(table);
    }

    #[test]
    fn refusals_are_typed_and_say_why_in_words() {
        assert_eq!(earns(&FOLLOWER, false, Role::Follower), Ok(()));
        let leader = Facts {
            role: Role::Leader,
            ..FOLLOWER
        };
        assert_eq!(
            earns(&leader, false, Role::Leader),
            Err(Refusal::LeaderOrRoleUnknown)
        );
        assert_eq!(
            earns(&leader, true, Role::Follower),
            Ok(()),
            "kept by a follower that won"
        );
        let stepped_down = Facts {
            has_leader: Some(false),
            ..FOLLOWER
        };
        assert_eq!(
            earns(&stepped_down, false, Role::Leader),
            Err(Refusal::SteppedDown)
        );
        assert_eq!(
            earns(&stepped_down, false, Role::Follower),
            Ok(()),
            "a candidate"
        );
        let unknown_learner = Facts {
            learner: None,
            ..FOLLOWER
        };
        assert_eq!(
            earns(&unknown_learner, false, Role::Follower),
            Err(Refusal::Learner)
        );
        let stale_count = with_peers(Peers::Counted {
            peers: 2.0,
            read_after_start: false,
        });
        assert_eq!(
            earns(&stale_count, false, Role::Follower),
            Err(Refusal::PeersNotRead)
        );
        assert_eq!(
            earns(&with_peers(Peers::Unknown), false, Role::Follower),
            Err(Refusal::PeersNotRead)
        );
        // (voting members, peers a quorum needs besides the member)
        for (voting, needed) in [
            (None, 1),
            (Some(0), 1),
            (Some(1), 1),
            (Some(2), 1),
            (Some(3), 1),
            (Some(4), 2),
            (Some(5), 2),
            (Some(7), 3),
            (Some(usize::MAX), u32::MAX),
        ] {
            assert_eq!(quorum_peers(voting), needed, "{voting:?} voting members");
        }
        // A five-member cluster's quorum needs two peers besides the member.
        let five = |peers| Facts {
            quorum_peers: 2,
            ..with_peers(counted(peers, true))
        };
        assert_eq!(
            earns(&five(1.0), false, Role::Follower),
            Err(Refusal::TooFewPeers),
            "a minority of five"
        );
        assert_eq!(earns(&five(2.0), false, Role::Follower), Ok(()));
        assert_eq!(
            Refusal::PeersNotRead.to_string(),
            "its peer count was not read since the read started"
        );
    }
}
