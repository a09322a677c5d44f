//! Which etcd member this exporter watches, as a metric:
//! `etcd_readiness_member_info{cluster_id, member_id, name} 1`, so that
//! Prometheus can group members by cluster without Kubernetes labels. The
//! IDs come from the header of the `Maintenance.Status` answer the etcd
//! sampler already has, in lowercase hex without padding, as etcdctl and
//! etcd's own log print them (`%x`); the name comes from `Cluster.MemberList`,
//! which etcd (3.4 and later, with `linearizable: false` as etcd-client sends
//! it) answers from the member's own view of the membership, without a raft
//! round-trip or proposal and without needing quorum.
//!
//! The same answer's voting members (learners aside) size the quorum the
//! election credit asks the member's peer count for (`credit.rs`).
//!
//! MemberList is asked when the IDs are new, when the member stops being a
//! learner, and otherwise at most every [`RELIST_EVERY`] — after an answer
//! and after a failure alike — and every call is counted in
//! `etcd_readiness_source_requests_total{source="etcd",call="member_list"}`.
//! A learner cannot tell its name: etcd 3.4 and 3.5 refuse every call on a
//! learner but Status and serializable reads ("rpc not supported for
//! learner"), Status carries no name, and names are not in the keyspace a
//! serializable read could reach. So a learner's name stays empty (or the
//! one it had, for the same member) until it is promoted, and the reason is
//! logged once at info level.
//!
//! There is at most one series. An identity never seen (no Status answered
//! yet) is no series; once seen, it stays while etcd does not answer (a
//! member that is down is still a member of its cluster); when it changes
//! (another cluster or member ID, a name published late), the old series is
//! removed and the new one added.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::MemberListResponse;
use etcd_readiness_policy::sync::TolerantLock;
use etcd_readiness_policy::text::fmt_duration;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::runtime::clock::Clock;
use crate::sources::SampleError;

/// The labels of `etcd_readiness_member_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    cluster_id: String,
    member_id: String,
    name: String,
}

/// A member's identity as etcd reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub cluster_id: u64,
    pub member_id: u64,
    /// Empty while the member has not published its name (etcd publishes it
    /// through raft after start, so a member that never saw quorum has none),
    /// or when MemberList failed for a newly seen member. At most
    /// [`MAX_NAME_BYTES`] long.
    pub name: String,
}

impl Identity {
    fn labels(&self) -> InfoLabels {
        InfoLabels {
            cluster_id: hex_id(self.cluster_id),
            member_id: hex_id(self.member_id),
            name: self.name.clone(),
        }
    }
}

/// The longest member name exported, in bytes: a Kubernetes object name is
/// at most 253, and a label value from outside must stay bounded. A bound
/// on input.
pub const MAX_NAME_BYTES: usize = 253;

/// `name` cut to at most [`MAX_NAME_BYTES`], at a character boundary.
fn bounded_name(name: &str) -> String {
    etcd_readiness_policy::text::cut_at(name, MAX_NAME_BYTES).to_string()
}

/// An etcd ID as etcdctl prints it: `fmt.Sprintf("%x", id)`.
pub fn hex_id(id: u64) -> String {
    format!("{id:x}")
}

/// What one round learnt: the IDs from the Status header, and the name from
/// MemberList (`Ok(None)`: the list answered but without this member's
/// name; `Err`: MemberList failed).
fn next(
    current: Option<&Identity>,
    cluster_id: u64,
    member_id: u64,
    listed: Result<Option<String>, ()>,
) -> Option<Identity> {
    if cluster_id == 0 || member_id == 0 {
        // A header without IDs tells nothing: keep what we knew.
        return current.cloned();
    }
    let same_ids = current.is_some_and(|c| c.cluster_id == cluster_id && c.member_id == member_id);
    let name = match listed {
        Ok(name) => name.unwrap_or_default(),
        // MemberList failed: the name we had is still right for the same
        // member; a new member's name is not known yet.
        Err(()) if same_ids => current.map(|c| c.name.clone()).unwrap_or_default(),
        Err(()) => String::new(),
    };
    Some(Identity {
        cluster_id,
        member_id,
        name,
    })
}

/// The name of `member_id` in what MemberList `answer`ed (the outer error:
/// it ran out of time; the inner: etcd's), logging a failure: at info level
/// a learner's refusal when it is the `first_refusal` for this member, at
/// debug level the rest.
fn listed(
    answer: Result<Result<MemberListResponse, etcd_client::Error>, SampleError>,
    member_id: u64,
    first_refusal: bool,
) -> Result<Option<String>, ()> {
    match answer {
        Ok(Ok(list)) => Ok(list
            .members()
            .iter()
            .find(|m| m.id() == member_id)
            .map(|m| bounded_name(m.name()))),
        Ok(Err(e)) if learner_refused(&e) => {
            if first_refusal {
                tracing::info!(
                    member_id = %hex_id(member_id),
                    "the member is a learner: etcd answers MemberList only once it is promoted, so its name stays unknown until then (asked again every {})",
                    fmt_duration(RELIST_EVERY.as_secs_f64())
                );
            }
            Err(())
        }
        Ok(Err(e)) => {
            tracing::debug!("MemberList failed: {e}");
            Err(())
        }
        Err(timed_out) => {
            tracing::debug!("{}", timed_out.message);
            Err(())
        }
    }
}

/// The `etcd_readiness_member_info` family and the identity it shows. Cheap
/// to clone; clones share both, so a sampler rebuilt after a panic removes
/// the series its predecessor added.
#[derive(Clone, Debug, Default)]
pub struct MemberInfo {
    family: Family<InfoLabels, Gauge>,
    current: Arc<Mutex<Option<Identity>>>,
    /// When MemberList was last asked (whatever came of it), for which IDs,
    /// and whether the member was a learner then.
    asked: Arc<Mutex<Option<Asked>>>,
    /// How many voting members (not learners) the last MemberList that
    /// answered named: the size of a quorum, for the election credit.
    voting: Arc<Mutex<Option<usize>>>,
}

/// The last MemberList call.
#[derive(Clone, Copy, Debug)]
struct Asked {
    at: std::time::Instant,
    ids: (u64, u64),
    learner: bool,
}

/// How often MemberList is asked again for unchanged IDs, whether it
/// answered (a name published late) or failed (a learner, an old etcd).
/// Status runs many times a second; this bounds MemberList to one call in
/// 30 s on a member that keeps refusing it. A call budget (ARCHITECTURE.md).
pub const RELIST_EVERY: Duration = Duration::from_secs(30);

/// etcd's `ErrGRPCNotSupportedForLearner`: a learner refusing MemberList.
/// etcd 3.4 and 3.5 send it as `Unavailable`, 3.6 as `FailedPrecondition`;
/// the message is etcd's own name for the error (etcd's client tells its
/// errors apart by it), matched whole, so another status that merely quotes
/// it is not taken for a learner's refusal.
fn learner_refused(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(st)
        if matches!(st.code(), tonic::Code::Unavailable | tonic::Code::FailedPrecondition)
            && st.message() == "etcdserver: rpc not supported for learner")
}

impl MemberInfo {
    /// Register `etcd_readiness_member_info` in `registry` (the root one: the
    /// name is given in full).
    pub fn register(registry: &mut Registry) -> Self {
        let m = MemberInfo::default();
        registry.register(
            "etcd_readiness_member_info",
            "The etcd member this exporter samples: cluster and member ID in hex as etcdctl prints them, and the member's name (value 1)",
            m.family.clone(),
        );
        m
    }

    /// The identity now exported, if any.
    pub fn current(&self) -> Option<Identity> {
        self.lock().clone()
    }

    /// Whether MemberList is due for `ids` now: new IDs, a learner just
    /// promoted, or [`RELIST_EVERY`] since the last call.
    fn due(&self, ids: (u64, u64), learner: bool, now: std::time::Instant) -> bool {
        let asked = *self.asked.locked();
        match asked {
            None => true,
            Some(a) if a.ids != ids => true,
            Some(a) if a.learner && !learner => true,
            Some(a) => now.saturating_duration_since(a.at) >= RELIST_EVERY,
        }
    }

    /// After a successful Status with `header` (`learner`: what Status said):
    /// ask MemberList for the member's name when it is due (within
    /// `timeout`, extended like every etcd call while the node's CPU is
    /// contended, [`super::deadlines::within`]; counted in `metrics` as source
    /// `etcd`, call `member_list`) and update the series. A failure of
    /// MemberList is logged at debug level (a learner's refusal once at
    /// info) and changes no signal.
    pub async fn observe(
        &self,
        client: &etcd_client::Client,
        header: Option<&etcd_client::ResponseHeader>,
        learner: bool,
        timeout: (Duration, Duration),
        metrics: &super::SourceMetrics,
        clock: &Clock,
    ) {
        let Some(h) = header else { return };
        let ids = (h.cluster_id(), h.member_id());
        let Some(first_refusal) = self.ask(ids, learner, clock.now()) else {
            return;
        };
        metrics.request("etcd", "member_list");
        let mut c = client.clone();
        let answer = super::deadlines::within(clock, timeout, "MemberList", async move {
            Ok(c.member_list().await)
        })
        .await;
        if let Ok(Ok(list)) = &answer {
            let voting = list.members().iter().filter(|m| !m.is_learner()).count();
            *self.voting.locked() = Some(voting);
        }
        let listed = listed(answer, ids.1, first_refusal);
        self.update(ids.0, ids.1, listed);
    }

    /// How many voting members the member list etcd last answered named
    /// (asked with the name, [`RELIST_EVERY`]), if it ever answered.
    pub fn voting_members(&self) -> Option<usize> {
        *self.voting.locked()
    }

    /// Whether MemberList is to be asked for `ids` now (see [`Self::due`]);
    /// if so, the call is noted at `now`, and the answer says whether a
    /// learner's refusal would be the first for these IDs.
    fn ask(&self, ids: (u64, u64), learner: bool, now: std::time::Instant) -> Option<bool> {
        if ids.0 == 0 || ids.1 == 0 || !self.due(ids, learner, now) {
            return None;
        }
        let mut asked = self.asked.locked();
        let was = asked.filter(|a| a.ids == ids && a.learner);
        *asked = Some(Asked {
            at: now,
            ids,
            learner,
        });
        Some(was.is_none())
    }

    fn update(&self, cluster_id: u64, member_id: u64, listed: Result<Option<String>, ()>) {
        let mut current = self.lock();
        let new = next(current.as_ref(), cluster_id, member_id, listed);
        if new == *current {
            return;
        }
        if let Some(old) = current.as_ref() {
            self.family.remove(&old.labels());
        }
        if let Some(id) = &new {
            self.family.get_or_create(&id.labels()).set(1);
            tracing::info!(
                cluster_id = %hex_id(id.cluster_id),
                member_id = %hex_id(id.member_id),
                name = %id.name,
                "etcd member identity"
            );
        }
        *current = new;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Identity>> {
        self.current.locked()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn samples(registry: &Registry) -> Vec<String> {
        let mut out = String::new();
        encode(&mut out, registry).unwrap();
        out.lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    }

    const CLUSTER: u64 = 6869456268555768984;
    const MEMBER: u64 = 491284798129241405;

    #[test]
    fn ids_are_printed_as_etcdctl_prints_them() {
        // Figures from a real etcd 3.4.23: `etcdctl endpoint status -w json`
        // gave these decimals, `-w table` and the etcd log the hex.
        assert_eq!(hex_id(CLUSTER), "5f5536148f58d498");
        // No zero padding: 15 digits, as etcdctl shows it.
        assert_eq!(hex_id(MEMBER), "6d164ebc40afd3d");
        assert_eq!(hex_id(u64::MAX), "ffffffffffffffff");
    }

    #[test]
    fn unknown_identity_is_no_series() {
        let mut r = Registry::default();
        let m = MemberInfo::register(&mut r);
        assert!(samples(&r).is_empty());
        // A header without IDs does not make one up.
        m.update(0, MEMBER, Ok(Some("m1".into())));
        m.update(CLUSTER, 0, Ok(Some("m1".into())));
        assert!(samples(&r).is_empty());
        assert_eq!(m.current(), None);
    }

    #[test]
    fn a_change_of_identity_replaces_the_series() {
        let mut r = Registry::default();
        let m = MemberInfo::register(&mut r);
        m.update(CLUSTER, MEMBER, Ok(Some("m1".into())));
        assert_eq!(
            samples(&r),
            [
                "etcd_readiness_member_info{cluster_id=\"5f5536148f58d498\",member_id=\"6d164ebc40afd3d\",name=\"m1\"} 1"
            ]
        );
        // The same answer again changes nothing.
        m.update(CLUSTER, MEMBER, Ok(Some("m1".into())));
        assert_eq!(samples(&r).len(), 1);
        // The member was replaced (new data dir, new ID): one series, the new one.
        m.update(CLUSTER, 0xabc, Ok(Some("m1".into())));
        assert_eq!(
            samples(&r),
            [
                "etcd_readiness_member_info{cluster_id=\"5f5536148f58d498\",member_id=\"abc\",name=\"m1\"} 1"
            ]
        );
    }

    #[test]
    fn a_failed_member_list_keeps_the_name_of_the_same_member_only() {
        let mut r = Registry::default();
        let m = MemberInfo::register(&mut r);
        // Name not published yet: the IDs are known, the name is empty.
        m.update(CLUSTER, MEMBER, Ok(None));
        assert_eq!(m.current().unwrap().name, "");
        m.update(CLUSTER, MEMBER, Ok(Some("m1".into())));
        m.update(CLUSTER, MEMBER, Err(()));
        assert_eq!(m.current().unwrap().name, "m1");
        m.update(CLUSTER, 0xabc, Err(()));
        assert_eq!(
            samples(&r),
            [
                "etcd_readiness_member_info{cluster_id=\"5f5536148f58d498\",member_id=\"abc\",name=\"\"} 1"
            ]
        );
    }

    #[test]
    fn absurd_names_are_bounded_and_escaped() {
        let long = "é".repeat(1000);
        let cut = bounded_name(&long);
        assert!(cut.len() <= MAX_NAME_BYTES && cut.len() >= MAX_NAME_BYTES - 1);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(bounded_name("m1"), "m1");
        let mut r = Registry::default();
        let m = MemberInfo::register(&mut r);
        m.update(CLUSTER, MEMBER, Ok(Some("a\"b\nc".into())));
        assert_eq!(
            samples(&r),
            [
                "etcd_readiness_member_info{cluster_id=\"5f5536148f58d498\",member_id=\"6d164ebc40afd3d\",name=\"a\\\"b\\nc\"} 1"
            ]
        );
    }

    /// Regression: on a learner, MemberList was asked again on every Status
    /// (~10 calls/s) because only an answer set the time of the last call.
    /// Now a call of any outcome does; new IDs and a promotion ask at once.
    #[test]
    fn member_list_is_due_at_most_every_30s_whatever_it_answered() {
        let m = MemberInfo::default();
        let ids = (CLUSTER, MEMBER);
        let now = std::time::Instant::now();
        assert!(m.due(ids, true, now), "never asked");
        let asked = |at: std::time::Instant, learner| {
            *m.asked.lock().unwrap() = Some(Asked { at, ids, learner });
        };
        asked(now, true);
        assert!(!m.due(ids, true, now), "a learner asked just now");
        assert!(m.due(ids, false, now), "promoted: ask at once");
        assert!(m.due((CLUSTER, 0xabc), true, now), "another member");
        asked(now, false);
        assert!(!m.due(ids, false, now));
        assert!(!m.due(ids, false, now + RELIST_EVERY / 2));
        assert!(m.due(ids, false, now + RELIST_EVERY), "30 s later");
    }

    #[test]
    fn learner_refusals_are_classified_by_code_not_text() {
        let st = |s: tonic::Status| etcd_client::Error::GRpcStatus(s);
        let refusal = "etcdserver: rpc not supported for learner";
        // etcd 3.4 and 3.5, and 3.6.
        assert!(learner_refused(&st(tonic::Status::unavailable(refusal))));
        assert!(learner_refused(&st(tonic::Status::failed_precondition(
            refusal
        ))));
        // The same words with another code, another Unavailable, or a
        // message that only quotes them are not it.
        assert!(!learner_refused(&st(tonic::Status::internal(refusal))));
        assert!(!learner_refused(&st(tonic::Status::unavailable(
            "etcdserver: leader changed"
        ))));
        assert!(!learner_refused(&st(tonic::Status::unavailable(format!(
            "proxy: {refusal}"
        )))));
        assert!(!learner_refused(&etcd_client::Error::InvalidArgs(
            refusal.to_string()
        )));
    }

    #[test]
    fn every_failure_of_member_list_is_no_name() {
        let refused = etcd_client::Error::GRpcStatus(tonic::Status::unavailable(
            "etcdserver: rpc not supported for learner",
        ));
        assert_eq!(listed(Ok(Err(refused)), MEMBER, true), Err(()));
        let other = etcd_client::Error::GRpcStatus(tonic::Status::internal("x"));
        assert_eq!(listed(Ok(Err(other)), MEMBER, false), Err(()));
        let late = SampleError::new(
            crate::sources::Reason::Timeout,
            "MemberList: request timed out after 500ms".to_string(),
        );
        assert_eq!(listed(Err(late), MEMBER, false), Err(()));
    }

    #[test]
    fn clones_share_the_series() {
        let mut r = Registry::default();
        let m = MemberInfo::register(&mut r);
        m.update(CLUSTER, MEMBER, Ok(Some("m1".into())));
        // A sampler rebuilt after a panic gets a clone: it must remove the
        // series its predecessor added.
        let rebuilt = m.clone();
        rebuilt.update(CLUSTER + 1, MEMBER, Ok(Some("m1".into())));
        assert_eq!(samples(&r).len(), 1);
        assert_eq!(m.current().unwrap().cluster_id, CLUSTER + 1);
    }
}
