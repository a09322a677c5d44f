//! What a Status answer says, into the store: every Status signal, the
//! count of leader changes and since when the answers have shown no leader.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::StatusResponse;

use super::Ids;
use crate::sources::SampleError;
use etcd_readiness_policy::signals::{SignalStore, Value};

/// Counts changes of the leader's ID between Status answers, and since when
/// the answers have shown no leader.
#[derive(Default)]
pub(super) struct LeaderChanges {
    last: Option<u64>,
    count: u64,
    leaderless_since: Option<Instant>,
}

pub(super) fn record_status(
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

pub(super) fn record_status_err(ids: &Ids, store: &SignalStore, e: &SampleError, at: Instant) {
    let msg: Arc<str> = Arc::from(e.message.as_str());
    for id in ids.status_ids() {
        store.record_err(id, msg.clone(), at);
    }
    // The member did not answer: that is known, not unknown.
    store.record_ok(ids.etcd_up, Value::Bool(false), at);
}
