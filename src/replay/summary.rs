//! The fleet summary `replay` ends with: folded member by member as the
//! reports stream past, so it holds aggregates and short "worst" lists,
//! never the reports. Pure; rendered as text for people and as JSON (the
//! `fleet` field of `--format json`, the last line of `--format jsonl`).
//!
//! A member is *changed* when the candidate's verdict differs from the
//! recorded one anywhere; it is *hurt* for the time the candidate says not
//! ready where the recorded verdict said ready, and *spared* for the
//! opposite. Hurt time is what the summary ranks members, clusters and
//! checks by: it is the service a rollout would take away.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::render::{Secs, dur, label_set};
use super::timeline::MemberReport;

/// How many members, clusters and checks the summary names.
pub const TOP: usize = 10;

/// One member as the summary's lists name it.
#[derive(Clone, Debug, PartialEq)]
pub struct Named {
    pub labels: BTreeMap<String, String>,
    pub ms: i64,
    /// The hurt time each failing check took part in, for a hurt member.
    pub checks: Vec<(String, i64)>,
}

/// What the summary adds up for one cluster (or one value of
/// `--cluster-label`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterTally {
    pub members: u64,
    pub hurt_members: u64,
    pub hurt_ms: i64,
}

/// What the summary adds up for one check.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckTally {
    pub members: u64,
    pub hurt_ms: i64,
}

/// The fleet summary, folded one member at a time ([`Summary::add`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub members: u64,
    pub changed: u64,
    pub not_ready_ms: i64,
    pub recorded_not_ready_ms: i64,
    /// The member the candidate keeps not ready longest.
    pub worst: Option<Named>,
    pub hurt_ms: i64,
    pub hurt_members: u64,
    pub spared_ms: i64,
    pub spared_members: u64,
    pub flips: u64,
    pub recorded_flips: u64,
    /// The [`TOP`] most hurt members, most first.
    pub most_hurt: Vec<Named>,
    /// By `etcd_readiness_member_info`'s `cluster_id` ("" when unknown).
    pub clusters: BTreeMap<String, ClusterTally>,
    /// By the value of `--cluster-label`, when given.
    pub cluster_label: Option<String>,
    pub by_label: BTreeMap<String, ClusterTally>,
    pub checks: BTreeMap<String, CheckTally>,
}

impl Summary {
    pub fn new(cluster_label: Option<String>) -> Summary {
        Summary {
            cluster_label,
            ..Summary::default()
        }
    }

    /// Fold in one member's report; `cluster_id` from its
    /// `etcd_readiness_member_info`, if any.
    pub fn add(&mut self, m: &MemberReport, cluster_id: Option<&str>) {
        self.members += 1;
        self.changed += u64::from(!m.differs_from_recorded.is_empty());
        self.not_ready_ms += m.not_ready_ms;
        self.recorded_not_ready_ms += m
            .recorded
            .iter()
            .filter(|i| i.ready == Some(false))
            .map(|i| i.to_ms - i.from_ms)
            .sum::<i64>();
        self.flips += m.flips;
        self.recorded_flips += m.recorded_flips;
        if m.not_ready_ms > 0 && self.worst.as_ref().is_none_or(|w| m.not_ready_ms > w.ms) {
            self.worst = Some(Named {
                labels: m.labels.clone(),
                ms: m.not_ready_ms,
                checks: Vec::new(),
            });
        }
        let (mut hurt, mut spared) = (0, 0);
        let mut by_check: BTreeMap<&str, i64> = BTreeMap::new();
        for d in &m.differs_from_recorded {
            let len = d.to_ms - d.from_ms;
            if d.ready == Some(false) {
                hurt += len;
                for c in &d.failing {
                    *by_check.entry(c).or_default() += len;
                }
            } else {
                spared += len;
            }
        }
        self.hurt_ms += hurt;
        self.spared_ms += spared;
        self.hurt_members += u64::from(hurt > 0);
        self.spared_members += u64::from(spared > 0);
        for (c, ms) in &by_check {
            let t = self.checks.entry(c.to_string()).or_default();
            t.members += 1;
            t.hurt_ms += ms;
        }
        let tally = |map: &mut BTreeMap<String, ClusterTally>, key: &str| {
            let t = map.entry(key.to_string()).or_default();
            t.members += 1;
            t.hurt_members += u64::from(hurt > 0);
            t.hurt_ms += hurt;
        };
        tally(&mut self.clusters, cluster_id.unwrap_or(""));
        if let Some(label) = &self.cluster_label {
            let value = m.labels.get(label).map_or("", String::as_str);
            tally(&mut self.by_label, value);
        }
        if hurt > 0 {
            let mut checks: Vec<(String, i64)> = by_check
                .into_iter()
                .map(|(c, ms)| (c.to_string(), ms))
                .collect();
            checks.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            self.most_hurt.push(Named {
                labels: m.labels.clone(),
                ms: hurt,
                checks,
            });
            // Most hurt first; among equals, the first in member order stays.
            self.most_hurt.sort_by_key(|n| std::cmp::Reverse(n.ms));
            self.most_hurt.truncate(TOP);
        }
    }

    /// The clusters (of one grouping) hurt most, most first.
    fn top(map: &BTreeMap<String, ClusterTally>) -> Vec<(&str, &ClusterTally)> {
        let mut v: Vec<(&str, &ClusterTally)> = map
            .iter()
            .filter(|(_, t)| t.hurt_ms > 0)
            .map(|(k, t)| (k.as_str(), t))
            .collect();
        v.sort_by(|a, b| {
            b.1.hurt_ms
                .cmp(&a.1.hurt_ms)
                .then(b.1.hurt_members.cmp(&a.1.hurt_members))
        });
        v.truncate(TOP);
        v
    }

    fn top_checks(&self) -> Vec<(&str, &CheckTally)> {
        let mut v: Vec<(&str, &CheckTally)> =
            self.checks.iter().map(|(k, t)| (k.as_str(), t)).collect();
        v.sort_by_key(|(_, t)| std::cmp::Reverse(t.hurt_ms));
        v
    }

    /// The summary people read, after the members' sections.
    pub fn text(&self, without_data: u64) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\nfleet: {} member{} replayed{}",
            self.members,
            plural(self.members),
            if without_data > 0 {
                format!(" ({without_data} more without data in the range, not shown)")
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "  the candidate changes {} of them (differs from the recorded verdict), {} the same",
            self.changed,
            self.members - self.changed
        );
        let _ = write!(
            out,
            "  not ready {} in total (recorded: {})",
            dur(self.not_ready_ms),
            dur(self.recorded_not_ready_ms)
        );
        match &self.worst {
            Some(w) => {
                let _ = writeln!(out, ", worst {} on {}", dur(w.ms), label_set(&w.labels));
            }
            None => out.push('\n'),
        }
        let _ = writeln!(
            out,
            "  not ready where recorded ready: {} over {} member{}; ready where recorded not ready: {} over {} member{}",
            dur(self.hurt_ms),
            self.hurt_members,
            plural(self.hurt_members),
            dur(self.spared_ms),
            self.spared_members,
            plural(self.spared_members)
        );
        let _ = writeln!(
            out,
            "  flips: {} (recorded: {})",
            self.flips, self.recorded_flips
        );
        if !self.most_hurt.is_empty() {
            self.ranked_text(&mut out);
        }
        out
    }

    /// The members, clusters and checks it hurts most, for [`Summary::text`].
    fn ranked_text(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "  members it hurts most (not ready where recorded ready):"
        );
        for n in &self.most_hurt {
            let why: Vec<String> = n
                .checks
                .iter()
                .map(|(c, ms)| format!("{c} {}", dur(*ms)))
                .collect();
            let _ = writeln!(
                out,
                "    {:>8}  {}  {}",
                dur(n.ms),
                label_set(&n.labels),
                why.join(", ")
            );
        }
        let groups = [("cluster_id", &self.clusters)]
            .into_iter()
            .chain(self.cluster_label.as_deref().map(|l| (l, &self.by_label)));
        for (name, map) in groups {
            let _ = writeln!(out, "  clusters it hurts most, by {name}:");
            for (k, t) in Self::top(map) {
                let key = if k.is_empty() { "(none)" } else { k };
                let _ = writeln!(
                    out,
                    "    {:>8}  {name}={key}: {} of {} member{} hurt",
                    dur(t.hurt_ms),
                    t.hurt_members,
                    t.members,
                    plural(t.members)
                );
            }
        }
        let _ = writeln!(out, "  checks that cause it:");
        for (c, t) in self.top_checks() {
            let _ = writeln!(
                out,
                "    {:>8}  {c} on {} member{}",
                dur(t.hurt_ms),
                t.members,
                plural(t.members)
            );
        }
    }

    /// The summary as JSON (docs/replay.md lists the fields).
    pub fn json(&self, without_data: u64) -> FleetJson<'_> {
        FleetJson {
            changed: self.changed,
            checks: (self.top_checks().into_iter())
                .map(|(c, t)| CheckJson {
                    check: c,
                    hurt_seconds: Secs(t.hurt_ms),
                    members: t.members,
                })
                .collect(),
            cluster_label: self.cluster_label.as_deref(),
            flips: self.flips,
            hurt_members: self.hurt_members,
            hurt_seconds: Secs(self.hurt_ms),
            members: self.members,
            most_hurt_by_cluster_label: clusters_json(&self.by_label),
            most_hurt_clusters: clusters_json(&self.clusters),
            most_hurt_members: self.most_hurt.iter().map(NamedJson::most_hurt).collect(),
            not_ready_seconds: Secs(self.not_ready_ms),
            recorded_flips: self.recorded_flips,
            recorded_not_ready_seconds: Secs(self.recorded_not_ready_ms),
            spared_members: self.spared_members,
            spared_seconds: Secs(self.spared_ms),
            without_data,
            worst_not_ready: self.worst.as_ref().map(|w| NamedJson {
                checks: None,
                labels: &w.labels,
                seconds: Secs(w.ms),
            }),
        }
    }
}

/// The most hurt clusters (or values of `--cluster-label`) as the JSON
/// lists them.
fn clusters_json(map: &BTreeMap<String, ClusterTally>) -> Vec<ClusterJson<'_>> {
    Summary::top(map)
        .into_iter()
        .map(|(k, t)| ClusterJson {
            hurt_members: t.hurt_members,
            hurt_seconds: Secs(t.hurt_ms),
            members: t.members,
            value: k,
        })
        .collect()
}

/// The fleet summary as JSON: the `fleet` field of `--format json`, the
/// last line of `--format jsonl`. The fields of every object in
/// alphabetical order, the order the document has always had.
#[derive(Serialize)]
pub struct FleetJson<'a> {
    changed: u64,
    checks: Vec<CheckJson<'a>>,
    cluster_label: Option<&'a str>,
    flips: u64,
    hurt_members: u64,
    hurt_seconds: Secs,
    members: u64,
    most_hurt_by_cluster_label: Vec<ClusterJson<'a>>,
    most_hurt_clusters: Vec<ClusterJson<'a>>,
    most_hurt_members: Vec<NamedJson<'a>>,
    not_ready_seconds: Secs,
    recorded_flips: u64,
    recorded_not_ready_seconds: Secs,
    spared_members: u64,
    spared_seconds: Secs,
    without_data: u64,
    worst_not_ready: Option<NamedJson<'a>>,
}

/// A member the summary names: the hurt checks' time for the most hurt,
/// none for the worst.
#[derive(Serialize)]
struct NamedJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    checks: Option<Vec<CheckSeconds<'a>>>,
    labels: &'a BTreeMap<String, String>,
    seconds: Secs,
}

impl<'a> NamedJson<'a> {
    /// One of the most hurt members, with its checks' hurt time.
    fn most_hurt(n: &'a Named) -> Self {
        let checks = n.checks.iter().map(|(c, ms)| CheckSeconds {
            check: c,
            seconds: Secs(*ms),
        });
        NamedJson {
            checks: Some(checks.collect()),
            labels: &n.labels,
            seconds: Secs(n.ms),
        }
    }
}

#[derive(Serialize)]
struct CheckSeconds<'a> {
    check: &'a str,
    seconds: Secs,
}

#[derive(Serialize)]
struct ClusterJson<'a> {
    hurt_members: u64,
    hurt_seconds: Secs,
    members: u64,
    value: &'a str,
}

#[derive(Serialize)]
struct CheckJson<'a> {
    check: &'a str,
    hurt_seconds: Secs,
    members: u64,
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::timeline::Interval;
    use serde_json::json;

    fn labels(ns: &str, pod: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("namespace".to_string(), ns.to_string()),
            ("pod".to_string(), pod.to_string()),
        ])
    }

    fn iv(from_s: i64, to_s: i64, ready: Option<bool>, failing: &[&str]) -> Interval {
        Interval {
            from_ms: from_s * 1000,
            to_ms: to_s * 1000,
            ready,
            failing: failing.iter().map(|s| s.to_string()).collect(),
            explanations: Vec::new(),
        }
    }

    /// A member of a one-hour replay: `hurt` stretches where the candidate
    /// is not ready and the recorded verdict ready, `spared` the opposite.
    fn member(
        ns: &str,
        pod: &str,
        hurt: &[(i64, i64, &[&str])],
        spared: &[(i64, i64)],
    ) -> MemberReport {
        let mut differs: Vec<Interval> = hurt
            .iter()
            .map(|(a, b, f)| iv(*a, *b, Some(false), f))
            .collect();
        differs.extend(spared.iter().map(|(a, b)| iv(*a, *b, Some(true), &[])));
        let not_ready: i64 = hurt.iter().map(|(a, b, _)| (b - a) * 1000).sum();
        MemberReport {
            labels: labels(ns, pod),
            ready_ms: 3_600_000 - not_ready,
            not_ready_ms: not_ready,
            unknown_ms: 0,
            flips: 2 * hurt.len() as u64,
            recorded_flips: 2 * spared.len() as u64,
            intervals: Vec::new(),
            recorded: spared
                .iter()
                .map(|(a, b)| iv(*a, *b, Some(false), &[]))
                .collect(),
            differs_from_recorded: differs,
            checks: Vec::new(),
            missing_signals: Vec::new(),
        }
    }

    fn fleet() -> Summary {
        let mut s = Summary::new(Some("namespace".to_string()));
        let members = [
            (
                member("shoot--a", "etcd-main-0", &[(600, 1500, &["fast"])], &[]),
                Some("5eed0001"),
            ),
            (
                member(
                    "shoot--a",
                    "etcd-main-1",
                    &[(600, 900, &["fast", "leader"])],
                    &[],
                ),
                Some("5eed0001"),
            ),
            (
                member("shoot--a", "etcd-main-2", &[], &[]),
                Some("5eed0001"),
            ),
            (
                member("shoot--b", "etcd-main-0", &[], &[(0, 60)]),
                Some("5eed0002"),
            ),
            (
                member("shoot--c", "etcd-main-0", &[(100, 160, &["leader"])], &[]),
                None,
            ),
        ];
        for (m, c) in &members {
            s.add(m, *c);
        }
        s
    }

    #[test]
    fn the_summary_adds_up_hurt_and_spared_time_by_member_cluster_and_check() {
        let s = fleet();
        assert_eq!((s.members, s.changed), (5, 4));
        assert_eq!((s.hurt_ms, s.hurt_members), (1_260_000, 3));
        assert_eq!((s.spared_ms, s.spared_members), (60_000, 1));
        assert_eq!(
            s.worst.as_ref().map(|w| (w.labels["pod"].as_str(), w.ms)),
            Some(("etcd-main-0", 900_000))
        );
        let most: Vec<(&str, i64)> = s
            .most_hurt
            .iter()
            .map(|n| (n.labels["namespace"].as_str(), n.ms))
            .collect();
        assert_eq!(
            most,
            [
                ("shoot--a", 900_000),
                ("shoot--a", 300_000),
                ("shoot--c", 60_000)
            ]
        );
        assert_eq!(
            s.clusters["5eed0001"],
            ClusterTally {
                members: 3,
                hurt_members: 2,
                hurt_ms: 1_200_000
            }
        );
        assert_eq!(
            s.clusters[""].hurt_ms, 60_000,
            "a member without member_info"
        );
        assert_eq!(
            s.checks["fast"],
            CheckTally {
                members: 2,
                hurt_ms: 1_200_000
            }
        );
        assert_eq!(
            s.checks["leader"],
            CheckTally {
                members: 2,
                hurt_ms: 360_000
            }
        );
        let j = serde_json::to_value(s.json(1)).unwrap();
        assert_eq!(j["without_data"], 1);
        assert_eq!(j["hurt_seconds"], 1260);
        assert_eq!(
            j["most_hurt_clusters"][0],
            json!({"value": "5eed0001", "members": 3, "hurt_members": 2, "hurt_seconds": 1200})
        );
        assert_eq!(
            j["checks"][0],
            json!({"check": "fast", "members": 2, "hurt_seconds": 1200})
        );
    }

    #[test]
    fn the_most_hurt_list_keeps_the_top_ten_in_member_order_among_equals() {
        let mut s = Summary::new(None);
        for i in 0..25 {
            let hurt = 60 + 60 * (i % 3);
            s.add(
                &member("ns", &format!("p{i:02}"), &[(0, hurt, &["fast"])], &[]),
                None,
            );
        }
        let pods: Vec<&str> = s
            .most_hurt
            .iter()
            .map(|n| n.labels["pod"].as_str())
            .collect();
        assert_eq!(
            pods,
            [
                "p02", "p05", "p08", "p11", "p14", "p17", "p20", "p23", "p01", "p04"
            ]
        );
    }

    /// The text a platform team reads at the end of a fleet replay.
    #[test]
    fn snapshot_of_the_fleet_summary() {
        insta::assert_snapshot!("replay_fleet_summary", fleet().text(0));
    }
}
