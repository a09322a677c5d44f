//! The source's three loops, on one task: the connection (a Watch stream
//! whose end is the event "connection lost"), Status, and the reads; and
//! the short async loop that drives a pending linearizable read's election
//! credit ([`super::credit`]) with the facts of the store and the time of
//! the clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::GetOptions;

use super::credit::{Credit, Effects, Facts, Peers, Role, quorum_peers};
use super::deadlines::{
    Deadline, Failed, LatencyWindow, next_serializable, wake_at_expiry, within,
};
use super::errors::{classify, explain, leader_changed};
use super::identity::MemberInfo;
use super::status::{LeaderChanges, record_answer, record_status_err};
use super::without_root::StatusChoice;
use super::{LABEL, Shared};
use crate::runtime::clock::NodeTime;
use crate::sources::SampleError;
use etcd_readiness_policy::signals::{SignalId, SignalStore, Source, Trust, Value};

/// What the read loop keeps from one round to the next.
struct Reads {
    /// The linearizable and the serializable reads' recent latencies.
    qget: LatencyWindow,
    sget: LatencyWindow,
    /// The epoch in which the last linearizable read was answered (`None`
    /// after a failure): only a member that was serving, with no loss
    /// since, earns the election credit.
    served_in: Option<u64>,
    next_sget: Instant,
}

impl Shared {
    /// Keep a Watch stream open; its end is the event "connection lost".
    pub(super) async fn connection_loop(&self) {
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
                    let why = match stream.ended().await {
                        Ok(()) => "the member closed the watch stream".to_string(),
                        Err(e) => classify("watch stream", &e, cfg.timeout).message,
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

    pub(super) async fn status_loop(&self) {
        let fast = self.config.fast();
        let mut leader_changes = LeaderChanges::default();
        let mut choice = StatusChoice::default();
        let mut latency = LatencyWindow::default();
        let pending: Vec<SignalId> = self.ids.status_ids().chain([self.ids.etcd_up]).collect();
        loop {
            let epoch = self.epoch();
            let trust = latency.trust(self.config.trust(), self.config.contended_max());
            let start = self.clock.read();
            let started = start.now;
            self.record_in(epoch, |store| {
                note_contention(store, &start);
                for id in &pending {
                    store.record_pending(*id, started, None, trust, choice.what());
                }
            });
            let result = wake_at_expiry(
                &self.notifier,
                trust.base,
                self.status_or_stand_in(&mut choice),
            )
            .await;
            let took = self.clock.now().saturating_duration_since(started);
            if result.is_ok() {
                latency.record(took);
            }
            let recorded = self.record_in(epoch, |store| match &result {
                Ok(answer) => record_answer(&self.ids, store, answer, &mut leader_changes, started),
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
                    (self.config.timeout, self.config.contended_max()),
                    &self.metrics,
                    &self.clock,
                )
                .await;
            }
            // Start to start: a late answer (a thaw, the end of an election)
            // is followed at once by a fresh call, not a period later.
            let next = started + choice.period(fast, self.config.member_http.as_ref());
            // Biased, as every select here: reproducible on virtual time.
            tokio::select! {
                biased;
                _ = self.wake_status.notified() => {}
                _ = tokio::time::sleep_until(next.into()) => {}
            }
        }
    }

    pub(super) async fn read_loop(&self) {
        let mut reads = Reads {
            qget: LatencyWindow::default(),
            sget: LatencyWindow::default(),
            served_in: None,
            next_sget: self.clock.now(),
        };
        let mut deadline = None;
        loop {
            // A reloaded policy may give the reads longer
            // (`EtcdConfig::read_timeout`): their samples are kept as long.
            let now = self.read_timeout();
            if deadline != Some(now) {
                deadline = Some(now);
                self.set_read_staleness(now);
            }
            // Start to start, as Status: a read answered late (at the end of
            // an election, after a thaw) is followed at once by a fresh one,
            // whose quick answer is what ends the outage in the verdict.
            let next = self.clock.now() + self.config.fast();
            self.read_round(&mut reads).await;
            tokio::select! {
                biased;
                _ = self.wake_reads.notified() => { reads.next_sget = self.clock.now(); }
                _ = tokio::time::sleep_until(next.into()) => {}
            }
        }
    }

    /// Both reads (the serializable one when it is due), each recorded the
    /// moment it answers.
    async fn read_round(&self, reads: &mut Reads) {
        let cfg = &self.config;
        let fast = cfg.fast();
        let epoch = self.epoch();
        let start = self.clock.read();
        let started = start.now;
        let with_sget = started >= reads.next_sget;
        // At most the deadline: pending that long fails the check anyway.
        let read_timeout = self.read_timeout();
        let qtrust = reads.qget.trust(cfg.trust(), read_timeout);
        let strust = reads.sget.trust(cfg.trust(), read_timeout);
        // In flight from now: the store shows them as pending reads
        // (unless the connection was lost meanwhile: a loss ends them).
        let ids = self.ids;
        self.record_in(epoch, |store| {
            note_contention(store, &start);
            read_pending(store, ids.qget_ms, started, qtrust);
            if with_sget {
                read_pending(store, ids.sget_ms, started, strust);
            }
        });
        // Each read's answer is recorded the moment it arrives: a
        // serializable read answered locally in 1 ms must not wait for a
        // linearizable one stuck without quorum (it was outdated then, and
        // the serializable_read check flapped with every round).
        let record = |id: SignalId, r: &Result<f64, SampleError>, sent: Instant| {
            self.record_in(epoch, |store| match r {
                Ok(ms) => store.record_ok(id, Value::Num(*ms), sent),
                Err(e) => store.record_err(id, Arc::from(e.message.as_str()), sent),
            })
        };
        let served = reads.served_in == Some(epoch);
        let (q, s) = tokio::join!(
            async {
                let (sent, q) = self.linearizable(epoch, &start, qtrust, served).await;
                (record(ids.qget_ms, &q, sent), q)
            },
            async {
                if with_sget {
                    let read = within(
                        &self.clock,
                        (read_timeout, cfg.contended_max()),
                        "serializable read",
                        self.range(true),
                    );
                    let s = wake_at_expiry(&self.notifier, strust.base, read).await;
                    self.notifier.wake();
                    Some((record(ids.sget_ms, &s, started), s))
                } else {
                    None
                }
            }
        );
        let took = self.clock.now().saturating_duration_since(started);
        let (recorded, q) = q;
        let s = s.map(|(_, s)| s);
        let err = q
            .as_ref()
            .err()
            .or(s.as_ref().and_then(|s| s.as_ref().err()));
        self.metrics.observe(LABEL, took, err);
        if recorded {
            reads.served_in = q.is_ok().then_some(epoch);
            self.round_finished();
        }
        if let Ok(ms) = &q {
            reads.qget.record(Duration::from_secs_f64(ms / 1000.0));
        }
        if let Some(s) = &s {
            let took = s
                .as_ref()
                .ok()
                .map(|ms| Duration::from_secs_f64(ms / 1000.0));
            if let Some(took) = took {
                reads.sget.record(took);
            }
            reads.next_sget =
                next_serializable(started, took, fast, cfg.interval, cfg.etcd.heartbeat);
        }
    }

    /// One keys-only, limit-1 Range of the probe key; its latency in ms.
    /// etcd fails every read that waited through a change of leader with
    /// "leader changed", a retryable error (its own client retries it): the
    /// member has a leader again. Asked again at once; its latency counts
    /// from the first attempt. No deadline here: the caller's.
    async fn range(&self, serializable: bool) -> Result<f64, SampleError> {
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
        let answer = match &self.api {
            Some(api) => {
                self.metrics.request(LABEL, "range");
                let sent = self.clock.now();
                let answer = match api.range(serializable).await {
                    Err(e) if leader_changed(&e) => api.range(serializable).await,
                    r => r,
                };
                (sent, answer.map_err(Failed::Etcd))
            }
            None => self.client_range(opts).await?,
        };
        let (sent, answer) = answer;
        let took = self.clock.now().saturating_duration_since(sent);
        match answer {
            Ok(_) => Ok(took.as_secs_f64() * 1000.0),
            Err(Failed::Explained(e)) => Err(e),
            Err(Failed::Etcd(e)) => {
                let left = self.read_timeout().saturating_sub(took);
                self.after(Err(explain(
                    what,
                    &e,
                    &cfg.endpoint,
                    cfg.client_timeout(),
                    left,
                )
                .await))
            }
        }
    }

    /// [`Shared::range`] on the session's client: when it was sent (once the
    /// session was ready), and its answer.
    async fn client_range(
        &self,
        opts: GetOptions,
    ) -> Result<(Instant, Result<(), Failed>), SampleError> {
        let ready = self.ready().await?;
        let key = self.config.probe_key.clone();
        self.metrics.request(LABEL, "range");
        let sent = self.clock.now();
        // Boxed: the calls' futures are large, and this one is awaited in
        // every read's.
        let answer = Box::pin(self.in_session(ready, |mut c| {
            let (key, opts) = (key.clone(), opts.clone());
            async move {
                match c.get(key.clone(), Some(opts.clone())).await {
                    Err(e) if leader_changed(&e) => c.get(key, Some(opts)).await,
                    r => r,
                }
            }
        }))
        .await;
        Ok((sent, answer.map(|_| ())))
    }

    /// The linearizable read of the round started at `start`, pending in
    /// the store with `trust`, within its deadline, its election credit
    /// decided by [`Credit`] from the store's facts at each step; when the
    /// credit is renewed, the read is sent again and pending from then. The
    /// result, and when the read that gave it was sent.
    async fn linearizable(
        &self,
        epoch: u64,
        start: &NodeTime,
        trust: Trust,
        served: bool,
    ) -> (Instant, Result<f64, SampleError>) {
        let sent_as = self.role(start.now);
        let cfg = &self.config;
        let mut credit = Credit::new(start.now, sent_as, trust, cfg.etcd.election);
        let mut deadline = Deadline::new(start, self.read_timeout(), cfg.contended_max());
        let mut sent = start.now;
        let mut call = std::pin::pin!(self.range(false));
        loop {
            let now = self.clock.read();
            // The peer count is judged against the round's start: a count
            // read since then still shows the member's peers after a resend.
            let step = credit.step(now.now, &self.credit_facts(now.now, start.now, served));
            let mut fx = step.effects;
            if fx.resend {
                // The read that waited is given up (etcd answers the new one
                // with it), the new one is pending from now, credited.
                call.set(self.range(false));
                sent = now.now;
                deadline = Deadline::new(&now, self.read_timeout(), cfg.contended_max());
                let trust = fx.trust.take().unwrap_or(trust);
                self.record_in(epoch, |store| {
                    note_contention(store, &now);
                    read_pending(store, self.ids.qget_ms, sent, trust);
                });
            }
            self.apply(fx);
            if deadline.expired(&now) {
                return (sent, Err(deadline.timed_out("linearizable read")));
            }
            let next = step.next.map_or(deadline.at(), |n| n.min(deadline.at()));
            // An answer ready at the step's instant wins.
            tokio::select! {
                biased;
                r = &mut call => return (sent, r),
                _ = tokio::time::sleep_until(next.into()) => {}
            }
        }
    }

    /// What the store says of the member at `now`, for the credit of a read
    /// started at `started`.
    fn credit_facts(&self, now: Instant, started: Instant, served: bool) -> Facts {
        let store = &self.store;
        let flag = |id| match store.reading(id, now).get() {
            Some(Value::Bool(b)) => Some(b),
            _ => None,
        };
        let peers = match self.active_peers {
            None => Peers::NotRead,
            Some(id) => {
                let r = store.reading(id, now);
                match (r.get(), r.last_good_age) {
                    // Never answered (an etcd that refuses /metrics where it
                    // is asked by default): decided as without the count.
                    (_, None) => Peers::NotRead,
                    (Some(Value::Num(peers)), Some(age)) => Peers::Counted {
                        peers,
                        read_after_start: age <= now.saturating_duration_since(started),
                    },
                    _ => Peers::Unknown,
                }
            }
        };
        Facts {
            served,
            status_answers: flag(self.ids.etcd_up) == Some(true),
            role: self.role(now),
            has_leader: flag(self.ids.leader),
            learner: flag(self.ids.learner),
            peers,
            quorum_peers: quorum_peers(
                self.member_info
                    .as_ref()
                    .and_then(MemberInfo::voting_members),
            ),
            read_trusted: store.reading(self.ids.qget_ms, now).value.is_ok(),
        }
    }

    /// The member's role by its last trusted Status at `now`.
    fn role(&self, now: Instant) -> Role {
        match self.store.reading(self.ids.is_leader, now).get() {
            Some(Value::Bool(true)) => Role::Leader,
            Some(Value::Bool(false)) => Role::Follower,
            _ => Role::Unknown,
        }
    }

    fn apply(&self, fx: Effects) {
        if let Some(trust) = fx.trust {
            self.store.set_pending_trust(self.ids.qget_ms, trust);
        }
        if fx.ask_peers {
            self.notifier.request_round(&Source::EtcdMetrics);
        }
        if let Some(why) = fx.refused {
            tracing::debug!(
                "a pending linearizable read gets no election credit, or loses it: {why}"
            );
        }
        if fx.wake {
            self.notifier.wake();
        }
    }
}

/// A read of `id` sent at `at` is in flight, its last answer trusted by
/// `trust`: its latency, in ms, is at least the time it has waited.
fn read_pending(store: &SignalStore, id: SignalId, at: Instant, trust: Trust) {
    store.record_pending(id, at, Some(1000.0), trust, "read");
}

/// Tell the store how long the node's CPU has been contended, so that a call
/// recorded as pending now is judged from this moment's counter.
fn note_contention(store: &SignalStore, now: &NodeTime) {
    if let Some(stalled) = now.cpu_stalled {
        store.set_cpu_stalled(stalled);
    }
}
