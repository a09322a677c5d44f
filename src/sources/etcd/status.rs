//! What a Status answer says, into the store: every Status signal, the
//! count of leader changes and since when the answers have shown no leader;
//! and the same from Status' stand-ins where etcd refuses Status to a user
//! without the root role ([`super::without_root`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Ids;
use super::api::MemberStatus;
use super::without_root::{Answer, NoStandIn, StandIn};
use crate::sources::SampleError;
use etcd_readiness_policy::signals::{SignalStore, Value};

/// Counts changes of the leader's ID between Status answers, and since when
/// the answers have shown no leader.
#[derive(Default)]
pub(super) struct LeaderChanges {
    last: Option<u64>,
    count: u64,
    leaderless_since: Option<Instant>,
    /// The member's own count (`etcd_server_leader_changes_seen_total`)
    /// at the last stand-in round: what it grew by since is counted.
    seen: Option<f64>,
}

impl LeaderChanges {
    /// Whether the member has a leader, at `at`: since when it has none.
    fn leader_seen(&mut self, has_leader: bool, at: Instant) {
        if has_leader {
            self.leaderless_since = None;
        } else if self.leaderless_since.is_none() {
            self.leaderless_since = Some(at);
        }
    }

    fn leaderless(&self, at: Instant) -> f64 {
        self.leaderless_since
            .map_or(Duration::ZERO, |since| at.saturating_duration_since(since))
            .as_secs_f64()
    }

    /// The member's own count now: what it grew by is added (a member
    /// that restarted counts from zero again: its new count is the base).
    fn member_counted(&mut self, seen: f64) {
        if let Some(before) = self.seen
            && seen >= before
        {
            self.count += (seen - before) as u64;
        }
        self.seen = Some(seen);
        // Status' leader IDs and the member's count are not compared.
        self.last = None;
    }
}

/// Record one round's answer, Status or its stand-ins.
pub(super) fn record_answer(
    ids: &Ids,
    store: &SignalStore,
    answer: &Answer,
    changes: &mut LeaderChanges,
    at: Instant,
) {
    match answer {
        Answer::Status(st) => record_status(ids, store, &MemberStatus::from(st), changes, at),
        Answer::Member(st) => record_status(ids, store, st, changes, at),
        Answer::WithoutRoot(s) => record_stand_in(ids, store, s, changes, at),
    }
}

pub(super) fn record_status(
    ids: &Ids,
    store: &SignalStore,
    status: &MemberStatus,
    changes: &mut LeaderChanges,
    at: Instant,
) {
    changes.seen = None;
    let member_id = status.member_id;
    let leader = status.leader;
    let ok = |id, v| store.record_ok(id, v, at);
    ok(ids.etcd_up, Value::Bool(true));
    ok(ids.leader, Value::Bool(leader != 0));
    ok(
        ids.is_leader,
        Value::Bool(leader != 0 && leader == member_id),
    );
    ok(ids.learner, Value::Bool(status.is_learner));
    if let Some(revision) = status.revision {
        ok(ids.revision, Value::Num(revision as f64));
    }
    ok(ids.raft_term, Value::Num(status.raft_term as f64));
    ok(ids.raft_index, Value::Num(status.raft_index as f64));
    ok(
        ids.applied_index,
        Value::Num(status.raft_applied_index as f64),
    );
    ok(
        ids.apply_lag,
        Value::Num(status.raft_index.saturating_sub(status.raft_applied_index) as f64),
    );
    ok(ids.db_size_bytes, Value::Num(status.db_size as f64));
    ok(ids.db_in_use_bytes, Value::Num(status.db_in_use as f64));
    // Status.errors lists raised alarms as e.g. "memberID:123 alarm:NOSPACE".
    let errors = &status.errors;
    ok(
        ids.alarm_nospace,
        Value::Bool(errors.iter().any(|e| e.contains("NOSPACE"))),
    );
    ok(
        ids.alarm_corrupt,
        Value::Bool(errors.iter().any(|e| e.contains("CORRUPT"))),
    );
    if leader != 0 && changes.last.is_some_and(|l| l != leader) {
        changes.count += 1;
    }
    if leader != 0 {
        changes.last = Some(leader);
    }
    changes.leader_seen(leader != 0, at);
    ok(ids.leader_changes, Value::Num(changes.count as f64));
    ok(ids.leaderless, Value::Num(changes.leaderless(at)));
}

/// Record what stood in for Status: the member answered the read; each
/// signal its stand-in gave, or why it has none.
fn record_stand_in(
    ids: &Ids,
    store: &SignalStore,
    s: &StandIn,
    changes: &mut LeaderChanges,
    at: Instant,
) {
    let put = |id, v: Result<Value, &NoStandIn>| match v {
        Ok(v) => store.record_ok(id, v, at),
        Err(e) => store.record_err(id, Arc::from(e.to_string()), at),
    };
    let num = |v: f64| Value::Num(v);
    store.record_ok(ids.etcd_up, Value::Bool(true), at);
    match &s.header {
        Some(h) => {
            store.record_ok(ids.revision, num(h.revision() as f64), at);
            store.record_ok(ids.raft_term, num(h.raft_term() as f64), at);
        }
        None => {
            let why: Arc<str> =
                Arc::from("the serializable read standing in for Status had no header");
            store.record_err(ids.revision, why.clone(), at);
            store.record_err(ids.raft_term, why, at);
        }
    }
    for (id, v) in [
        (ids.alarm_nospace, &s.nospace),
        (ids.alarm_corrupt, &s.corrupt),
    ] {
        put(id, v.as_ref().map(|b| Value::Bool(*b)));
    }
    let g = match &s.gauges {
        Ok(g) => g,
        Err(e) => {
            for id in [
                ids.leader,
                ids.is_leader,
                ids.learner,
                ids.raft_index,
                ids.applied_index,
                ids.apply_lag,
                ids.db_size_bytes,
                ids.db_in_use_bytes,
                ids.leader_changes,
                ids.leaderless,
            ] {
                put(id, Err(e));
            }
            return;
        }
    };
    record_gauges(ids, store, g, changes, at);
}

/// The member's metrics gauges standing in for Status.
fn record_gauges(
    ids: &Ids,
    store: &SignalStore,
    g: &crate::sources::etcd_metrics::StatusGauges,
    changes: &mut LeaderChanges,
    at: Instant,
) {
    let num = Value::Num;
    let text = |m: &crate::sources::etcd_metrics::Missing| {
        format!(
            "etcd refuses Status to the exporter's user (root role only) and its stand-in in the member's metrics is missing: {}",
            m.message
        )
    };
    let flag = |id, v: &Result<bool, _>| match v {
        Ok(b) => store.record_ok(id, Value::Bool(*b), at),
        Err(m) => store.record_err(id, Arc::from(text(m).as_str()), at),
    };
    let number = |id, v: &Result<f64, _>| match v {
        Ok(n) => store.record_ok(id, num(*n), at),
        Err(m) => store.record_err(id, Arc::from(text(m).as_str()), at),
    };
    flag(ids.leader, &g.has_leader);
    flag(ids.is_leader, &g.is_leader);
    flag(ids.learner, &g.is_learner);
    number(ids.raft_index, &g.committed_index);
    number(ids.applied_index, &g.applied_index);
    let lag = match (&g.committed_index, &g.applied_index) {
        (Ok(c), Ok(a)) => Ok((c - a).max(0.0)),
        (Err(m), _) | (_, Err(m)) => Err(m.clone()),
    };
    number(ids.apply_lag, &lag);
    number(ids.db_size_bytes, &g.db_size);
    number(ids.db_in_use_bytes, &g.db_in_use);
    match &g.leader_changes_seen {
        Ok(seen) => {
            changes.member_counted(*seen);
            store.record_ok(ids.leader_changes, num(changes.count as f64), at);
        }
        Err(m) => number(ids.leader_changes, &Err(m.clone())),
    }
    match &g.has_leader {
        Ok(has) => {
            changes.leader_seen(*has, at);
            store.record_ok(ids.leaderless, num(changes.leaderless(at)), at);
        }
        Err(m) => number(ids.leaderless, &Err(m.clone())),
    }
}

pub(super) fn record_status_err(ids: &Ids, store: &SignalStore, e: &SampleError, at: Instant) {
    let msg: Arc<str> = Arc::from(e.message.as_str());
    for id in ids.status_ids() {
        store.record_err(id, msg.clone(), at);
    }
    // The member did not answer: that is known, not unknown.
    store.record_ok(ids.etcd_up, Value::Bool(false), at);
}
