//! The seam between the source's loops and the member: the three calls the
//! loops make (Status, a single-key Range, the Watch whose end is the event
//! "connection lost") as a trait, [`MemberApi`], so that a test can put a
//! simulated member behind the *real* loops, deadlines and credit and run
//! them on tokio's paused clock ([`super::spawn_with`]).
//!
//! The exporter itself never uses it: without an api, every call goes
//! through the session's etcd client as before (`session.rs`), login, TLS
//! and all. Errors are etcd-client's, classified and explained by the same
//! code as the client's (`errors.rs`).

use std::future::Future;
use std::pin::Pin;

/// A boxed future of a call to the member.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, etcd_client::Error>> + Send + 'a>>;

/// What the loops ask of one etcd member.
pub trait MemberApi: Send + Sync + 'static {
    /// `Maintenance.Status`, answered by the member from its own state.
    fn status(&self) -> Call<'_, MemberStatus>;
    /// A keys-only, limit-1 Range of the probe key: linearizable (it needs
    /// a leader and a round of its heartbeats) or serializable (answered
    /// locally).
    fn range(&self, serializable: bool) -> Call<'_, ()>;
    /// Open a Watch on the probe key; `Ok` once the member created it.
    fn watch(&self) -> Call<'_, Box<dyn Watch>>;
}

/// An open Watch stream.
pub trait Watch: Send {
    /// Resolves when the stream ends: `Ok` when the member closed it, the
    /// error otherwise.
    fn ended(&mut self) -> Call<'_, ()>;
}

/// What `Maintenance.Status` says, the fields the source records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberStatus {
    /// The answering member's ID (its header's).
    pub member_id: u64,
    /// The leader it knows, 0 for none.
    pub leader: u64,
    pub is_learner: bool,
    /// The header's revision, when there is a header.
    pub revision: Option<i64>,
    pub raft_term: u64,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    pub db_size: i64,
    pub db_in_use: i64,
    /// `Status.errors`: raised alarms, e.g. "memberID:123 alarm:NOSPACE".
    pub errors: Vec<String>,
}

impl From<&etcd_client::StatusResponse> for MemberStatus {
    fn from(st: &etcd_client::StatusResponse) -> Self {
        MemberStatus {
            member_id: st.header().map_or(0, |h| h.member_id()),
            leader: st.leader(),
            is_learner: st.is_learner(),
            revision: st.header().map(|h| h.revision()),
            raft_term: st.raft_term(),
            raft_index: st.raft_index(),
            raft_applied_index: st.raft_applied_index(),
            db_size: st.db_size(),
            db_in_use: st.raft_used_db_size(),
            errors: st.errors().to_vec(),
        }
    }
}
