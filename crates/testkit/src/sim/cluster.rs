//! The simulated members: raft's election (randomised timeouts between one
//! and two election timeouts, pre-vote on or off, checkQuorum's step-down
//! and lease), linearizable reads that need a leader with a quorum round,
//! and the faults, all on tokio's clock (paused: virtual time). One driver
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
    /// Bumped at each kill: a call or watch of an older life fails.
    life: u64,
    /// A restarted member answers no client before this.
    serving_from: Instant,
    term: u64,
    role: Role,
    /// The leader it knows (1-based ID), 0 for none.
    leader: u64,
    last_heard: Instant,
    election_at: Instant,
    quorum_at: Instant,
    last_beat: Instant,
    index: u64,
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
            .min()
            .unwrap_or(last + Duration::from_secs(3600));
        let grid = |t: Instant| {
            let from = t.saturating_duration_since(self.origin).as_nanos();
            self.origin + STEP * from.div_ceil(STEP.as_nanos()) as u32
        };
        grid(due).max(grid(now)).max(last + STEP)
    }

    fn lead(&mut self, i: usize, now: Instant) -> bool {
        let mut changed = false;
        if now.duration_since(self.m[i].last_beat) >= HEARTBEAT {
            self.m[i].last_beat = now;
            self.m[i].index += 1;
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
                let (term, index) = (self.m[i].term, self.m[i].index);
                let f = &mut self.m[p];
                changed |= f.leader != i as u64 + 1 || f.role != Role::Follower;
                (f.term, f.leader, f.role) = (term, i as u64 + 1, Role::Follower);
                (f.last_heard, f.election_at, f.index) = (now, now + t, index);
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
        (m.term, m.leader, m.role, m.election_at) = (term, leader, Role::Follower, now + t);
    }

    /// `i`'s election timeout ran out: (pre-)vote, and win with a quorum.
    fn campaign(&mut self, i: usize, now: Instant) -> bool {
        let grants: Vec<usize> = (0..3)
            .filter(|&p| p != i && self.reachable(i, p))
            // checkQuorum's lease: a member that heard from a leader within
            // an election timeout (or leads with a quorum) refuses.
            .filter(|&p| match self.m[p].role {
                Role::Leader => now.duration_since(self.m[p].quorum_at) >= ELECTION,
                _ => self.m[p].leader == 0 || now.duration_since(self.m[p].last_heard) >= ELECTION,
            })
            .collect();
        let changed = self.m[i].leader != 0;
        self.m[i].leader = 0;
        let t = self.timeout();
        self.m[i].election_at = now + t;
        if self.links.pre_vote && grants.is_empty() {
            return changed;
        }
        self.m[i].term += 1;
        if grants.is_empty() {
            self.m[i].role = Role::Candidate;
            return changed;
        }
        let term = self.m[i].term;
        for &p in &grants {
            self.follow(p, term, 0, now);
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
            life: 0,
            serving_from: now,
            term: 1,
            role: Role::Follower,
            leader: 0,
            last_heard: now,
            election_at: now + ELECTION + ELECTION.mul_f64(rng.f64()),
            quorum_at: now,
            last_beat: now,
            index: 1,
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
                Fault::Freeze(i) => s.m[i].frozen = true,
                Fault::Thaw(i) => {
                    s.m[i].frozen = false;
                    s.m[i].election_at = now + t;
                }
                Fault::Cut(i) => s.m[i].cut = true,
                Fault::Heal(i) => s.m[i].cut = false,
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

    /// What member `i`'s `/metrics` says of its peers now
    /// (`etcd_network_active_peers`, summed): the peers whose connections
    /// are open, those that run (a frozen one's stay open; a killed one's
    /// close at once) and are not cut off from it (the sim closes them at
    /// the cut, etcd within its stream's read timeout). Answered as Status
    /// is: late while `i` is frozen, refused while it is down.
    pub async fn active_peers(&self, i: usize) -> Result<f64, etcd_client::Error> {
        self.until(i, |s| {
            let open = (0..3)
                .filter(|&p| p != i && s.m[p].up && !s.m[p].cut && !s.m[i].cut)
                .count();
            s.local(i, Instant::now(), |_| open as f64)
        })
        .await
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
