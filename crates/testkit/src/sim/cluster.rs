//! The simulated members: raft's election (randomised timeouts between one
//! and two election timeouts, pre-vote on or off, checkQuorum's step-down
//! and lease, a vote only for a log as up to date, a higher term taken by
//! every member it reaches), linearizable reads that need a leader with a
//! quorum round,
//! each member's peer streams as its `/metrics` counts them
//! ([`Cluster::active_peers`]: a killed peer's closes at once, a silent
//! one's after [`CONN_READ_TIMEOUT`]), and the faults, a healed cut's links
//! back only after [`REJOIN`], all on tokio's clock (paused: virtual
//! time). One driver
//! task steps the members every [`STEP`]; a call waits on the cluster's
//! change counter, so a call that cannot be answered costs nothing until
//! something changes.

use std::sync::Arc;
use std::time::Duration;

use etcd_readiness_exporter::sources::etcd::api::{Call, MemberApi, MemberStatus, Watch};
use etcd_readiness_policy::sync::TolerantLock;
use tokio::time::Instant;

use super::Rng;

/// etcd's default heartbeat interval.
pub const HEARTBEAT: Duration = Duration::from_millis(100);
/// etcd's default election timeout.
pub const ELECTION: Duration = Duration::from_millis(1000);
/// The driver's step: the resolution of elections and heartbeats.
pub const STEP: Duration = Duration::from_millis(10);
/// etcd's rafthttp `ConnReadTimeout`: a peer stream that carries nothing
/// (its peer frozen, or packets dropped either way) is still counted in
/// `etcd_network_active_peers` until a read on it times out after this; a
/// killed peer's stream closes at once (its kernel resets the connection).
pub const CONN_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// After a cut is healed, the member's links come back after a delay drawn
/// uniformly from this range, not at once: iptables dropped its packets for
/// seconds, so the connections opened before the cut sit in TCP's
/// retransmission backoff and rafthttp's re-dials (each up to its peer dial
/// timeout, 1 s + the election timeout = 2 s at etcd's defaults, the SYN
/// resent after 1 s) land some time after the heal. Calibrated on
/// benches/fault_accuracy.py's leader partition on etcd 3.5.30 (docs/
/// BENCHMARKS.md: the kubelet's Ready back 2.0 s after the heal, the truth
/// 1.1 s): Ready follows the links by about 0.2 s (the next heartbeat, the
/// next read, the probe), so links back after 1.8 s on average: 200 seeds
/// give Ready back after 1.9 s, the truth 0.9 s (1.5–2.5 s gave 2.2 s).
pub const REJOIN: (Duration, Duration) = (Duration::from_millis(1300), Duration::from_millis(2300));

/// The links and the node: what a scenario varies besides its faults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Links {
    /// One-way delay between peers, and between a member and its client.
    pub delay: Duration,
    /// The share of heartbeats (and read confirmations) lost.
    pub loss: f64,
    /// CPU contention: each answer to a client is late by up to this.
    pub contention: Duration,
    /// `--pre-vote`.
    pub pre_vote: bool,
}

impl Default for Links {
    fn default() -> Self {
        Links {
            delay: Duration::from_micros(500),
            loss: 0.0,
            contention: Duration::ZERO,
            pre_vote: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Follower,
    Candidate,
    Leader,
}

#[derive(Clone, Debug)]
struct Member {
    up: bool,
    frozen: bool,
    /// Cut off from its peers (its clients still reach it).
    cut: bool,
    /// Since when it has been frozen or cut: its peer streams carry nothing.
    quiet_since: Option<Instant>,
    /// A healed cut's links come back at this instant ([`REJOIN`]).
    rejoin_at: Option<Instant>,
    /// Bumped at each kill: a call or watch of an older life fails.
    life: u64,
    /// A restarted member answers no client before this.
    serving_from: Instant,
    term: u64,
    /// Whom it voted for in `term` (0-based), if anyone.
    voted: Option<usize>,
    role: Role,
    /// The leader it knows (1-based ID), 0 for none.
    leader: u64,
    last_heard: Instant,
    election_at: Instant,
    quorum_at: Instant,
    last_beat: Instant,
    index: u64,
    /// The term of its last entry: with `index`, how up to date its log is
    /// (raft's vote compares the last term, then the index).
    log_term: u64,
}

/// The members' state and the seeded draws.
struct State {
    m: [Member; 3],
    /// The members' draws (election timeouts, lost heartbeats, boots): made
    /// by the driver in a fixed order.
    rng: Rng,
    /// The calls' draws are keyed by (seed, member, instant) instead, so
    /// that the order in which calls arrive at one instant changes none.
    seed: u64,
    origin: Instant,
    links: Links,
}

/// A simulated 3-member cluster; [`Cluster::api`] is one member's
/// [`MemberApi`].
pub struct Cluster {
    state: std::sync::Mutex<State>,
    changed: tokio::sync::watch::Sender<u64>,
}

enum Answer<T> {
    Now(T, Duration),
    Wait,
    Refused,
}

fn refused() -> etcd_client::Error {
    etcd_client::Error::GRpcStatus(tonic::Status::unavailable(
        "connection error: connection refused",
    ))
}

impl State {
    fn timeout(&mut self) -> Duration {
        ELECTION + ELECTION.mul_f64(self.rng.f64())
    }

    /// `i` runs and is not frozen (it may still be starting).
    fn alive(&self, i: usize) -> bool {
        self.m[i].up && !self.m[i].frozen
    }

    fn reachable(&self, a: usize, b: usize) -> bool {
        a == b || (self.alive(a) && self.alive(b) && !self.m[a].cut && !self.m[b].cut)
    }

    fn lost(&mut self) -> bool {
        self.links.loss > 0.0 && self.rng.f64() < self.links.loss
    }

    /// A draw of a call to `i` at `now`, the `n`th of its kind.
    fn call_draw(&self, i: usize, now: Instant, n: u64) -> f64 {
        let at = now.duration_since(self.origin).as_nanos() as u64;
        Rng::new(self.seed ^ (i as u64).wrapping_mul(0x9e37_79b9) ^ at.rotate_left(17) ^ n).f64()
    }

    fn client_delay(&self, i: usize, now: Instant) -> Duration {
        let c = self.links.contention.mul_f64(self.call_draw(i, now, 0));
        self.links.delay * 2 + c
    }

    /// One step of every member at `now`; whether anything a call waits on
    /// changed.
    fn step(&mut self, now: Instant) -> bool {
        let mut changed = false;
        for i in 0..3 {
            if self.m[i].rejoin_at.is_some_and(|at| at <= now) {
                self.rejoin(i);
                changed = true;
            }
        }
        for i in 0..3 {
            if !self.alive(i) || now < self.m[i].serving_from {
                continue;
            }
            changed |= match self.m[i].role {
                Role::Leader => self.lead(i, now),
                _ if now >= self.m[i].election_at => self.campaign(i, now),
                _ => false,
            };
        }
        changed
    }

    /// The first instant of the [`STEP`] grid after `last` (the last step)
    /// and not before `now` at which [`State::step`] has something due (far
    /// off while nothing is).
    fn next_step(&self, last: Instant, now: Instant) -> Instant {
        let due = (0..3)
            .filter(|&i| self.alive(i))
            .map(|i| {
                let m = &self.m[i];
                let due = match m.role {
                    Role::Leader => (m.last_beat + HEARTBEAT).min(m.quorum_at + ELECTION),
                    _ => m.election_at,
                };
                due.max(m.serving_from)
            })
            .chain(self.m.iter().filter_map(|m| m.rejoin_at))
            .min()
            .unwrap_or(last + Duration::from_secs(3600));
        let grid = |t: Instant| {
            let from = t.saturating_duration_since(self.origin).as_nanos();
            self.origin + STEP * from.div_ceil(STEP.as_nanos()) as u32
        };
        grid(due).max(grid(now)).max(last + STEP)
    }

    /// A healed cut's links are back: `i` reaches its peers again.
    fn rejoin(&mut self, i: usize) {
        let m = &mut self.m[i];
        (m.cut, m.rejoin_at) = (false, None);
        if !m.frozen {
            m.quiet_since = None;
        }
    }

    /// `i`'s peer stream with `p` is open at `now`, as `i`'s
    /// `etcd_network_active_peers{Remote=p}` says: both run, and the link
    /// carries traffic or has been silent for less than
    /// [`CONN_READ_TIMEOUT`].
    fn stream_open(&self, i: usize, p: usize, now: Instant) -> bool {
        let runs = |k: usize| self.m[k].up && now >= self.m[k].serving_from;
        if !runs(i) || !runs(p) {
            return false;
        }
        if self.reachable(i, p) {
            return true;
        }
        let quiet = [i, p].iter().filter_map(|&k| self.m[k].quiet_since).min();
        quiet.is_some_and(|since| now.duration_since(since) < CONN_READ_TIMEOUT)
    }

    fn active_peers(&self, i: usize, now: Instant) -> usize {
        (0..3)
            .filter(|&p| p != i && self.stream_open(i, p, now))
            .count()
    }

    fn lead(&mut self, i: usize, now: Instant) -> bool {
        let mut changed = false;
        if now.duration_since(self.m[i].last_beat) >= HEARTBEAT {
            self.m[i].last_beat = now;
            self.m[i].index += 1;
            self.m[i].log_term = self.m[i].term;
            let peers: Vec<usize> = (0..3).filter(|&p| p != i && self.reachable(i, p)).collect();
            for p in peers {
                if self.m[p].term > self.m[i].term {
                    // A higher term answers: the leader steps down.
                    let term = self.m[p].term;
                    self.follow(i, term, 0, now);
                    return true;
                }
                if self.lost() {
                    continue;
                }
                let t = self.timeout();
                let (term, index, log_term) = (self.m[i].term, self.m[i].index, self.m[i].log_term);
                let f = &mut self.m[p];
                changed |= f.leader != i as u64 + 1 || f.role != Role::Follower;
                if f.term != term {
                    f.voted = None;
                }
                (f.term, f.leader, f.role) = (term, i as u64 + 1, Role::Follower);
                (f.last_heard, f.election_at) = (now, now + t);
                (f.index, f.log_term) = (index, log_term);
                self.m[i].quorum_at = now;
            }
        }
        if now.duration_since(self.m[i].quorum_at) >= ELECTION {
            // checkQuorum: no peer heard from in an election timeout.
            let term = self.m[i].term;
            self.follow(i, term, 0, now);
            return true;
        }
        changed
    }

    fn follow(&mut self, i: usize, term: u64, leader: u64, now: Instant) {
        let t = self.timeout();
        let m = &mut self.m[i];
        if m.term != term {
            m.voted = None;
        }
        (m.term, m.leader, m.role, m.election_at) = (term, leader, Role::Follower, now + t);
    }

    /// `i`'s election timeout ran out: (pre-)vote, and win with a quorum.
    /// A voter grants a term above its own (without pre-vote also its own,
    /// while it has neither a leader nor given its vote to another) to a
    /// log as up to date as its own (raft compares the last entry's term,
    /// then its index). A vote's term is taken by every voter, granting or
    /// not, and a voter's higher term by the candidate: so without pre-vote
    /// a member that campaigned alone comes back with a term that unseats
    /// the leader and a log that wins no vote, and each of its campaigns
    /// resets the others' election timers (3.4's disruption election).
    fn campaign(&mut self, i: usize, now: Instant) -> bool {
        let voters: Vec<usize> = (0..3)
            .filter(|&p| p != i && self.reachable(i, p))
            // checkQuorum's lease: a member that heard from a leader within
            // an election timeout (or leads with a quorum) ignores it.
            .filter(|&p| match self.m[p].role {
                Role::Leader => now.duration_since(self.m[p].quorum_at) >= ELECTION,
                _ => self.m[p].leader == 0 || now.duration_since(self.m[p].last_heard) >= ELECTION,
            })
            .collect();
        let changed = self.m[i].leader != 0;
        self.m[i].leader = 0;
        let t = self.timeout();
        self.m[i].election_at = now + t;
        let term = self.m[i].term + 1;
        let (c, pre_vote) = (&self.m[i], self.links.pre_vote);
        let grants: Vec<usize> = voters
            .iter()
            .copied()
            .filter(|&p| {
                let v = &self.m[p];
                let free = v.term < term
                    || (!pre_vote
                        && v.term == term
                        && v.leader == 0
                        && v.voted.is_none_or(|x| x == i));
                free && (c.log_term, c.index) >= (v.log_term, v.index)
            })
            .collect();
        let top = voters.iter().map(|&p| self.m[p].term).max().unwrap_or(0);
        if top > term || (pre_vote && grants.is_empty() && top > self.m[i].term) {
            // A voter's higher term answers: the candidate follows it.
            self.follow(i, top, 0, now);
            return true;
        }
        if pre_vote && grants.is_empty() {
            return changed;
        }
        (self.m[i].term, self.m[i].voted) = (term, Some(i));
        for &p in &voters {
            if self.m[p].term < term {
                self.follow(p, term, 0, now);
            }
        }
        if grants.is_empty() {
            self.m[i].role = Role::Candidate;
            return true;
        }
        for &p in &grants {
            // Granting restarts the voter's election timer.
            self.follow(p, term, 0, now);
            self.m[p].voted = Some(i);
        }
        let m = &mut self.m[i];
        (m.role, m.leader, m.quorum_at) = (Role::Leader, i as u64 + 1, now);
        m.last_beat = now.checked_sub(HEARTBEAT).unwrap_or(now);
        true
    }

    fn serving(&self, i: usize, now: Instant) -> Result<bool, ()> {
        if !self.m[i].up || now < self.m[i].serving_from {
            return Err(());
        }
        Ok(!self.m[i].frozen)
    }

    fn linearizable(&mut self, i: usize, now: Instant) -> Answer<()> {
        match self.serving(i, now) {
            Err(()) => return Answer::Refused,
            Ok(false) => return Answer::Wait,
            Ok(true) => {}
        }
        let l = match self.m[i].leader {
            0 => return Answer::Wait,
            l => l as usize - 1,
        };
        let quorum = (0..3).any(|p| p != l && self.reachable(l, p));
        if !(self.alive(l) && self.m[l].role == Role::Leader && self.reachable(i, l) && quorum) {
            return Answer::Wait;
        }
        // Forwarded to the leader (unless it is), one heartbeat round to
        // confirm its leadership, a lost round retried at the next beat.
        let mut d = self.client_delay(i, now) + self.links.delay * if i == l { 2 } else { 4 };
        for n in 1..20 {
            // Both peers' acknowledgements lost: the next beat confirms.
            if self.call_draw(i, now, n) >= self.links.loss.powi(2) {
                break;
            }
            d += HEARTBEAT;
        }
        Answer::Now((), d)
    }

    fn local<T>(&mut self, i: usize, now: Instant, f: impl FnOnce(&Member) -> T) -> Answer<T> {
        match self.serving(i, now) {
            Err(()) => Answer::Refused,
            Ok(false) => Answer::Wait,
            Ok(true) => {
                let d = self.client_delay(i, now);
                Answer::Now(f(&self.m[i]), d)
            }
        }
    }
}

/// A fault or a repair, applied at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Kill(usize),
    Restart(usize),
    Freeze(usize),
    Thaw(usize),
    Cut(usize),
    Heal(usize),
}

impl Cluster {
    /// Three members, none a leader yet, `links` between them; `seed`
    /// decides every draw.
    pub fn new(seed: u64, links: Links) -> Arc<Cluster> {
        let now = Instant::now();
        let mut rng = Rng::new(seed);
        let m = std::array::from_fn(|_| Member {
            up: true,
            frozen: false,
            cut: false,
            quiet_since: None,
            rejoin_at: None,
            life: 0,
            serving_from: now,
            term: 1,
            voted: None,
            role: Role::Follower,
            leader: 0,
            last_heard: now,
            election_at: now + ELECTION + ELECTION.mul_f64(rng.f64()),
            quorum_at: now,
            last_beat: now,
            index: 1,
            log_term: 1,
        });
        Arc::new(Cluster {
            state: std::sync::Mutex::new(State {
                m,
                rng,
                seed,
                origin: now,
                links,
            }),
            changed: tokio::sync::watch::Sender::new(0),
        })
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    /// Step the members until the task is aborted: at the instants of the
    /// [`STEP`] grid at which a step can change anything (a heartbeat, a
    /// leader's quorum check, an election timeout due), re-planned whenever
    /// the cluster changes; a step between them would find nothing due.
    pub async fn drive(self: Arc<Self>) {
        let mut rx = self.changed.subscribe();
        let mut last = Instant::now();
        loop {
            let at = self.state.locked().next_step(last, Instant::now());
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(at) => {
                    last = at;
                    if self.state.locked().step(at) {
                        self.bump();
                    }
                }
                r = rx.changed() => if r.is_err() { return },
            }
        }
    }

    /// The leader now (0-based), if one leads with a quorum.
    pub fn leader(&self) -> Option<usize> {
        let s = self.state.locked();
        (0..3).find(|&i| {
            s.alive(i) && s.m[i].role == Role::Leader && (0..3).any(|p| p != i && s.reachable(i, p))
        })
    }

    /// How many of member `i`'s peer streams are open now: its
    /// `etcd_network_active_peers`, summed.
    pub fn active_peers(&self, i: usize) -> usize {
        self.state.locked().active_peers(i, Instant::now())
    }

    /// Member `i`'s `/metrics` as the exporter's metrics source reads it:
    /// its [`Cluster::active_peers`] after a client's delay, refused while
    /// it is down or booting, unanswered while it is frozen.
    pub async fn metrics(&self, i: usize) -> Result<usize, etcd_client::Error> {
        self.until(i, |s| {
            let now = Instant::now();
            let n = s.active_peers(i, now);
            s.local(i, now, |_| n)
        })
        .await
    }

    /// A follower (0-based) other than `not`.
    pub fn follower(&self, not: Option<usize>) -> usize {
        let l = self.leader();
        (0..3)
            .find(|&i| Some(i) != l && Some(i) != not)
            .unwrap_or(0)
    }

    pub fn apply(&self, fault: Fault) {
        let now = Instant::now();
        {
            let mut s = self.state.locked();
            let t = s.timeout();
            let boot = Duration::from_millis(200) + Duration::from_millis(400).mul_f64(s.rng.f64());
            match fault {
                Fault::Kill(i) => {
                    let m = &mut s.m[i];
                    (m.up, m.life, m.role, m.leader) = (false, m.life + 1, Role::Follower, 0);
                }
                Fault::Restart(i) => {
                    let m = &mut s.m[i];
                    (m.up, m.serving_from, m.election_at) = (true, now + boot, now + boot + t);
                }
                Fault::Freeze(i) => {
                    s.m[i].frozen = true;
                    s.m[i].quiet_since.get_or_insert(now);
                }
                Fault::Thaw(i) => {
                    let m = &mut s.m[i];
                    (m.frozen, m.election_at) = (false, now + t);
                    if !m.cut {
                        m.quiet_since = None;
                    }
                }
                Fault::Cut(i) => {
                    s.m[i].cut = true;
                    s.m[i].quiet_since.get_or_insert(now);
                }
                Fault::Heal(i) => {
                    let (lo, hi) = REJOIN;
                    let delay = lo + (hi - lo).mul_f64(s.rng.f64());
                    s.m[i].rejoin_at = Some(now + delay);
                }
            }
        }
        self.bump();
    }

    /// Wait for `f`'s answer: re-asked at every change.
    async fn until<T>(
        &self,
        i: usize,
        mut f: impl FnMut(&mut State) -> Answer<T>,
    ) -> Result<T, etcd_client::Error> {
        let mut rx = self.changed.subscribe();
        let life = self.state.locked().m[i].life;
        for _ in 0..1_000_000 {
            let answer = f(&mut self.state.locked());
            match answer {
                Answer::Refused => return Err(refused()),
                Answer::Now(v, d) => {
                    tokio::time::sleep(d).await;
                    return match self.state.locked().m[i].life == life {
                        true => Ok(v),
                        false => Err(refused()),
                    };
                }
                Answer::Wait => {
                    if rx.changed().await.is_err() {
                        break;
                    }
                }
            }
        }
        Err(refused())
    }

    /// Member `i` (0-based) as a [`MemberApi`].
    pub fn api(self: &Arc<Self>, i: usize) -> Arc<dyn MemberApi> {
        Arc::new(SimMember {
            cluster: self.clone(),
            i,
        })
    }
}

struct SimMember {
    cluster: Arc<Cluster>,
    i: usize,
}

impl MemberApi for SimMember {
    fn status(&self) -> Call<'_, MemberStatus> {
        let i = self.i;
        Box::pin(self.cluster.until(i, move |s| {
            s.local(i, Instant::now(), |m| MemberStatus {
                member_id: i as u64 + 1,
                leader: m.leader,
                raft_term: m.term,
                raft_index: m.index,
                raft_applied_index: m.index,
                revision: Some(m.index as i64),
                ..MemberStatus::default()
            })
        }))
    }

    fn range(&self, serializable: bool) -> Call<'_, ()> {
        let i = self.i;
        Box::pin(self.cluster.until(i, move |s| match serializable {
            true => s.local(i, Instant::now(), |_| ()),
            false => s.linearizable(i, Instant::now()),
        }))
    }

    fn watch(&self) -> Call<'_, Box<dyn Watch>> {
        let i = self.i;
        Box::pin(async move {
            let cluster = &self.cluster;
            cluster
                .until(i, |s| s.local(i, Instant::now(), |_| ()))
                .await?;
            let life = cluster.state.locked().m[i].life;
            let w: Box<dyn Watch> = Box::new(SimWatch {
                cluster: cluster.clone(),
                i,
                life,
            });
            Ok(w)
        })
    }
}

struct SimWatch {
    cluster: Arc<Cluster>,
    i: usize,
    life: u64,
}

impl Watch for SimWatch {
    fn ended(&mut self) -> Call<'_, ()> {
        Box::pin(async move {
            let mut rx = self.cluster.changed.subscribe();
            for _ in 0..1_000_000 {
                if self.cluster.state.locked().m[self.i].life != self.life {
                    break;
                }
                if rx.changed().await.is_err() {
                    break;
                }
            }
            Err(refused())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A killed peer's stream closes at once, a cut-off one's after
    /// [`CONN_READ_TIMEOUT`] (on both sides); a healed cut's links are back
    /// within [`REJOIN`], not before.
    #[tokio::test(start_paused = true)]
    async fn peer_streams_close_as_rafthttp_notices_and_a_healed_cut_rejoins_late() {
        let c = Cluster::new(1, Links::default());
        tokio::spawn(c.clone().drive());
        let counts = |c: &Cluster| [0, 1, 2].map(|i| c.active_peers(i));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(counts(&c), [2, 2, 2]);
        c.apply(Fault::Kill(2));
        assert_eq!(counts(&c), [1, 1, 0]);
        c.apply(Fault::Restart(2));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(counts(&c), [2, 2, 2]);
        c.apply(Fault::Cut(0));
        tokio::time::sleep(CONN_READ_TIMEOUT - STEP).await;
        assert_eq!(counts(&c), [2, 2, 2]);
        tokio::time::sleep(STEP).await;
        assert_eq!(counts(&c), [0, 1, 1]);
        c.apply(Fault::Heal(0));
        tokio::time::sleep(REJOIN.0 - STEP).await;
        assert_eq!(counts(&c), [0, 1, 1]);
        tokio::time::sleep(REJOIN.1 - REJOIN.0 + STEP * 2).await;
        assert_eq!(counts(&c), [2, 2, 2]);
    }

    /// A leader cut off for 12 s steps down, a new one is elected; at the
    /// heal, without pre-vote, the member's campaigns alone have raised its
    /// term: the new leader steps down at its first heartbeat to it, and
    /// as the member's log is behind, a member with the log leads next.
    /// With pre-vote its term stayed, and the new leader keeps leading.
    #[tokio::test(start_paused = true)]
    async fn a_healed_member_unseats_the_leader_only_without_pre_vote() {
        for pre_vote in [true, false] {
            let c = Cluster::new(
                7,
                Links {
                    pre_vote,
                    ..Links::default()
                },
            );
            tokio::spawn(c.clone().drive());
            tokio::time::sleep(Duration::from_secs(3)).await;
            let cut = c.leader().expect("a leader after 3 s");
            c.apply(Fault::Cut(cut));
            tokio::time::sleep(Duration::from_secs(12)).await;
            let lead = c.leader().expect("the others elect a leader");
            assert_ne!(lead, cut);
            c.apply(Fault::Heal(cut));
            let mut unseated = false;
            crate::wait::sample(Duration::from_secs(10), STEP, || {
                unseated |= c.leader() != Some(lead);
                async { std::ops::ControlFlow::Continue(()) }
            })
            .await;
            assert_eq!(unseated, !pre_vote, "pre-vote {pre_vote}");
            let after = c.leader();
            assert!(
                after.is_some() && after != Some(cut),
                "pre-vote {pre_vote}: {after:?}"
            );
        }
    }
}
