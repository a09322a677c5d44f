//! How `replay` reads a fleet: it finds the members the selector matches
//! with one index query (`/api/v1/series` of `etcd_readiness_ready`), their
//! clusters (`etcd_readiness_member_info`) and the signals the store holds
//! at all (`/api/v1/label/signal/values`), then reads and evaluates the
//! members in batches of `--batch`, at most `--concurrency` batches in
//! flight, each batch's three `query_range` requests one after the other.
//! Results come back in member order; each batch is charged to the memory
//! budget while it is held and released once its members are written, so
//! memory follows the batch, not the fleet.
//!
//! A store's refusal that names a limit fewer members meet (samples or
//! series per query, query time, the answer's size, our own
//! `--prometheus.timeout`) splits the batch in two and asks again, down to
//! one member; a limit on points per series shortens the time chunks
//! ([`super::prometheus`]). What still fails is the error, naming the limit.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::prometheus::{
    self, INFO_LABELS, MEMBER_COST, PER_SIGNAL_LABELS, PromError, Prometheus, Split,
    member_matchers, selector_query,
};
use super::timeline::{self, Grid, MemberHistory, MemberReport};
use super::{ReplayError, assemble};
use etcd_readiness_policy::policy::Policy;
use etcd_readiness_policy::signals::Catalogue;

/// A member: its identifying labels.
pub type Key = BTreeMap<String, String>;

/// Answer bytes a batch's largest request is sized for when `--batch` is
/// not given: about 24 bytes of JSON a point.
pub const BATCH_ANSWER_BYTES: u64 = 2 * 1024 * 1024;

/// Members per batch at most, whatever their size.
pub const MAX_BATCH: usize = 500;

/// A member's labels held for the whole run, compactly: one text of
/// every name and value and where each ends (two allocations, not a map's
/// node and one per string: the fleet's labels were most of what replay's
/// memory grew by with the fleet). Ordered as its [`Key`] is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    text: Box<str>,
    /// The end in `text` of each name and value, in turn.
    ends: Box<[u32]>,
}

impl Member {
    /// `key` held compactly; `None` when its text passes 4 GiB.
    pub fn new(key: &Key) -> Option<Member> {
        let mut text = String::new();
        let mut ends = Vec::with_capacity(2 * key.len());
        for (k, v) in key {
            for part in [k, v] {
                text.push_str(part);
                ends.push(u32::try_from(text.len()).ok()?);
            }
        }
        Some(Member {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        })
    }

    /// Its labels, in order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut from = 0;
        let mut parts = self.ends.iter().map(move |&end| {
            let part = self.text.get(from..end as usize).unwrap_or_default();
            from = end as usize;
            part
        });
        std::iter::from_fn(move || Some((parts.next()?, parts.next()?)))
    }

    /// Its labels as a map again.
    pub fn key(&self) -> Key {
        self.pairs()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

impl Ord for Member {
    /// As [`Key`]s compare: pair by pair, name then value.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.pairs().cmp(other.pairs())
    }
}

impl PartialOrd for Member {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// What the index queries found.
pub struct Fleet {
    /// Every member, in label order.
    pub members: Vec<Member>,
    /// `cluster_id` of each member (same index), from its info series.
    pub clusters: Vec<Option<String>>,
    /// Signals the policy reads of which no member has a series.
    pub missing_signals: Vec<String>,
}

/// `labels` without the ones in `drop`.
pub fn without(labels: &BTreeMap<String, String>, drop: &[&str]) -> Key {
    labels
        .iter()
        .filter(|(k, _)| !drop.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Find the members, their clusters and the signals there are.
pub async fn discover(
    prom: &Prometheus,
    selector: &str,
    policy: &Policy,
    grid: &Grid,
) -> Result<Fleet, ReplayError> {
    // Each series is folded in as it is parsed: the answers' label sets
    // are never all held at once.
    let found = std::cell::RefCell::new(BTreeSet::new());
    let too_long = std::cell::Cell::new(false);
    prom.series(
        &[selector_query("etcd_readiness_ready", selector, &[])],
        grid,
        &|l| match Member::new(&without(l, &PER_SIGNAL_LABELS)) {
            Some(m) => {
                found.borrow_mut().insert(m);
            }
            None => too_long.set(true),
        },
    )
    .await?;
    if too_long.get() {
        return Err(ReplayError::Flag(
            "a member's labels are longer than 4 GiB".to_string(),
        ));
    }
    let members: Vec<Member> = found.into_inner().into_iter().collect();
    let clusters = std::cell::RefCell::new(vec![None; members.len()]);
    prom.series(
        &[selector_query("etcd_readiness_member_info", selector, &[])],
        grid,
        &|l| {
            let at = Member::new(&without(l, &INFO_LABELS)).map(|m| members.binary_search(&m));
            if let (Some(Ok(i)), Some(id)) = (at, l.get("cluster_id")) {
                clusters.borrow_mut()[i] = Some(id.clone());
            }
        },
    )
    .await?;
    let clusters = clusters.into_inner();
    let names = signal_names(policy);
    let missing_signals = if names.is_empty() || members.is_empty() {
        Vec::new()
    } else {
        let only = [signal_matcher(&names)];
        let present = prom
            .label_values(
                "signal",
                &[
                    selector_query("etcd_readiness_signal_value", selector, &only),
                    selector_query("etcd_readiness_signal_known", selector, &only),
                ],
                grid,
            )
            .await?;
        names.into_iter().filter(|n| !present.contains(n)).collect()
    };
    Ok(Fleet {
        members,
        clusters,
        missing_signals,
    })
}

/// The names of the signals `policy` reads, in its order.
pub fn signal_names(policy: &Policy) -> Vec<String> {
    policy
        .signals_used()
        .into_iter()
        .map(|id| policy.signal_name(id).to_string())
        .collect()
}

/// `signal=~"a|b"`: signal names are identifiers (checked by the
/// catalogue), safe in a regex.
fn signal_matcher(names: &[String]) -> String {
    format!("signal=~\"{}\"", names.join("|"))
}

/// Members per batch when `--batch` is not given: what keeps the largest
/// answer (every signal's values over the grid) near [`BATCH_ANSWER_BYTES`].
pub fn auto_batch(steps: usize, signals: usize) -> usize {
    let per_member =
        24 * steps.min(prometheus::MAX_POINTS_PER_QUERY) as u64 * signals.max(1) as u64;
    ((BATCH_ANSWER_BYTES / per_member.max(1)) as usize).clamp(1, MAX_BATCH)
}

/// What every batch needs, shared by the batches in flight.
pub struct Reader {
    pub prom: Prometheus,
    pub policy: Arc<Policy>,
    pub catalogue: Catalogue,
    pub grid: Grid,
    pub selector: String,
    pub names: Vec<String>,
    /// The virtual clock's origin, one for the whole replay.
    pub origin: Instant,
}

/// One batch, read and replayed: its members' reports (those with data in
/// the range), how many had none, and the budget it holds until released.
pub struct BatchOut {
    /// With the index of each member in [`Fleet::members`].
    pub reports: Vec<(usize, MemberReport)>,
    pub without_data: u64,
    pub charged: u64,
}

impl Reader {
    /// Read and replay `members` (indices `first..`), splitting on limits.
    pub async fn batch(
        self: Arc<Self>,
        first: usize,
        members: Vec<Key>,
    ) -> Result<BatchOut, ReplayError> {
        let (histories, charged) = self.read(&members).await?;
        let reports = timeline::replay(
            &self.policy,
            &self.catalogue,
            &self.grid,
            &histories,
            self.origin,
        );
        drop(histories);
        let reports = match reports {
            Ok(r) => r,
            Err(e) => {
                self.prom.release(charged);
                return Err(e.into());
            }
        };
        let without_data = (members.len() - reports.len()) as u64;
        // Reports come in label order, as `members` are: pair them up.
        let mut at = 0;
        let reports = reports
            .into_iter()
            .map(|r| {
                while at < members.len() && members[at] != r.labels {
                    at += 1;
                }
                (first + at, r)
            })
            .collect();
        Ok(BatchOut {
            reports,
            without_data,
            charged,
        })
    }

    /// The histories of `members`; a refusal that fewer members meet
    /// splits them in two.
    async fn read(&self, members: &[Key]) -> Result<(Vec<MemberHistory>, u64), ReplayError> {
        match self.read_once(members).await {
            Err(ReplayError::Prometheus(e)) if members.len() > 1 && fewer_members_help(&e) => {
                let (a, b) = members.split_at(members.len() / 2);
                let (mut ha, ca) = Box::pin(self.read(a)).await?;
                let (hb, cb) = match Box::pin(self.read(b)).await {
                    Ok(x) => x,
                    Err(e) => {
                        self.prom.release(ca);
                        return Err(e);
                    }
                };
                ha.extend(hb);
                Ok((ha, ca + cb))
            }
            other => other,
        }
    }

    async fn read_once(&self, members: &[Key]) -> Result<(Vec<MemberHistory>, u64), ReplayError> {
        let mut charged = 0;
        let result = async {
            let wanted: BTreeSet<&Key> = members.iter().collect();
            let keep = |labels: &BTreeMap<String, String>| {
                wanted.contains(&without(labels, &PER_SIGNAL_LABELS))
            };
            let matchers = member_matchers(members);
            let q = selector_query("etcd_readiness_ready", &self.selector, &matchers);
            let (ready, c) = self.prom.query_range(&q, &self.grid, &keep).await?;
            charged += c;
            if self.names.is_empty() {
                return Ok::<_, ReplayError>(assemble(&self.grid, ready, Vec::new(), Vec::new()));
            }
            let mut with_signal = matchers;
            with_signal.push(signal_matcher(&self.names));
            let q = selector_query("etcd_readiness_signal_value", &self.selector, &with_signal);
            let (values, c) = self.prom.query_range(&q, &self.grid, &keep).await?;
            charged += c;
            // Only where it is 0: a signal with a value is known, so the 1s
            // (most of the points, the store's and ours to encode and read)
            // say nothing `values` does not ([`unknown_query`]).
            let q = unknown_query(&selector_query(
                "etcd_readiness_signal_known",
                &self.selector,
                &with_signal,
            ));
            let (known, c) = self.prom.query_range(&q, &self.grid, &keep).await?;
            charged += c;
            Ok(assemble(&self.grid, ready, values, known))
        }
        .await;
        // The reports the histories become, charged once they are read.
        let reports = members.len() as u64 * MEMBER_COST;
        let result = result.and_then(|h| {
            charged += reports;
            if self.prom.charge(reports) {
                Ok(h)
            } else {
                let q = selector_query("etcd_readiness_ready", &self.selector, &[]);
                Err(self.prom.over_budget(&q, self.grid.steps).into())
            }
        });
        match result {
            Ok(h) => Ok((h, charged)),
            Err(e) => {
                self.prom.release(charged);
                Err(e)
            }
        }
    }
}

/// The steps at which `known` (a selector of `etcd_readiness_signal_known`)
/// is 0. The exporter exports a signal's value exactly while it is known
/// (`etcd_readiness_signal_known` 1), so at a step with a 1 the value is
/// there and says it; a 0 is what adds something (the reason "unknown to
/// the exporter", and a signal that was never known still has a series).
pub fn unknown_query(known: &str) -> String {
    format!("{known} == 0")
}

/// Whether asking for fewer members at a time may meet what refused `e`.
fn fewer_members_help(e: &PromError) -> bool {
    match e {
        PromError::Refused { limit: Some(l), .. } => l.split == Split::Members,
        PromError::Unreachable { timed_out, .. } => *timed_out,
        PromError::TooLarge { .. } | PromError::OverBudget { .. } => true,
        _ => false,
    }
}

/// Run `batch` over `members` in batches of `size`, at most `concurrency`
/// at once, handing each finished batch to `each` in member order. Runs
/// on a [`tokio::task::LocalSet`] (the batches share one thread).
pub async fn run_batches(
    reader: Arc<Reader>,
    members: &[Member],
    size: usize,
    concurrency: usize,
    mut each: impl FnMut(BatchOut) -> Result<(), ReplayError>,
) -> Result<(), ReplayError> {
    let mut starts = (0..members.len()).step_by(size.max(1));
    let mut flight: VecDeque<tokio::task::JoinHandle<Result<BatchOut, ReplayError>>> =
        VecDeque::new();
    loop {
        while flight.len() < concurrency.max(1) {
            let Some(first) = starts.next() else { break };
            let batch = members[first..(first + size).min(members.len())]
                .iter()
                .map(Member::key)
                .collect();
            flight.push_back(tokio::task::spawn_local(reader.clone().batch(first, batch)));
        }
        let Some(next) = flight.pop_front() else {
            return Ok(());
        };
        let out = match next.await {
            Ok(out) => out,
            Err(e) => Err(ReplayError::Flag(format!("a replay batch failed: {e}"))),
        };
        match out {
            Ok(out) => {
                let charged = out.charged;
                let r = each(out);
                reader.prom.release(charged);
                r?;
            }
            Err(e) => {
                flight.iter().for_each(|t| t.abort());
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(pairs: &[(&str, &str)]) -> Key {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_the_steps_at_which_a_signal_was_unknown_are_asked_for() {
        let q = selector_query("etcd_readiness_signal_known", "{job=\"e\"}", &[]);
        assert_eq!(
            unknown_query(&q),
            "etcd_readiness_signal_known{job=\"e\"} == 0"
        );
    }

    #[test]
    fn members_held_compactly_give_their_labels_back_and_sort_as_their_keys() {
        let keys = [
            key(&[]),
            key(&[("a", "")]),
            key(&[("a", "b"), ("c", "d")]),
            key(&[("a", "b\u{0}"), ("c", "d")]),
            key(&[("ab", "")]),
            key(&[("a", "bc")]),
            key(&[("job", "ere"), ("pod", "etcd-1")]),
            key(&[("job", "ere"), ("pod", "etcd-10")]),
            key(&[("job", "ere"), ("namespace", "x"), ("pod", "etcd-0")]),
            key(&[("jo", "bere")]),
        ];
        let members: Vec<Member> = keys.iter().map(|k| Member::new(k).unwrap()).collect();
        for (m, k) in members.iter().zip(&keys) {
            assert_eq!(&m.key(), k);
        }
        for (a, ka) in members.iter().zip(&keys) {
            for (b, kb) in members.iter().zip(&keys) {
                assert_eq!(a.cmp(b), ka.cmp(kb), "{ka:?} vs {kb:?}");
                assert_eq!(a == b, ka == kb);
            }
        }
    }
}
