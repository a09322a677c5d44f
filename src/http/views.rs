//! The JSON bodies of `/signals`, `/policy` and `/history` as typed views:
//! one `Serialize` struct per body, built from what the store and the engine
//! give, so a field cannot be misspelt or carry the wrong type. Fields are
//! declared in alphabetical order, the order the bodies have always had.
//! [`Seconds`] and [`UnixTime`] are the one way durations and wall times
//! are written in JSON: seconds rounded to the millisecond.

use std::time::{Duration, SystemTime};

use serde::{Serialize, Serializer};

use crate::engine::history::{CAPACITY, HistorySnapshot, Lane, LaneState};
use etcd_readiness_policy::signals::{Catalogue, SlotInfo, Unit, Value};

/// A duration written as seconds, rounded to the millisecond.
#[derive(Clone, Copy, Debug)]
pub struct Seconds(pub Duration);

impl Seconds {
    pub fn as_f64(self) -> f64 {
        etcd_readiness_policy::verdict::seconds(self.0)
    }
}

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.as_f64())
    }
}

/// A wall time written as Unix seconds, rounded to the millisecond.
#[derive(Clone, Copy, Debug)]
pub struct UnixTime(pub SystemTime);

impl Serialize for UnixTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(etcd_readiness_policy::verdict::unix_seconds(self.0))
    }
}

/// One signal of `/signals`.
#[derive(Serialize)]
pub struct SignalView<'a> {
    pub age_seconds: Option<Seconds>,
    pub known: bool,
    pub last_error: Option<&'a str>,
    pub last_good_at: Option<UnixTime>,
    pub name: &'a str,
    /// A measurement in flight: its result will be at least this.
    pub pending: Option<PendingView>,
    pub source: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub unit: Unit,
    pub unknown_reason: Option<String>,
    pub value: Option<ValueView>,
}

/// A signal's value as JSON: a boolean or a number.
#[derive(Serialize)]
#[serde(untagged)]
pub enum ValueView {
    Bool(bool),
    Num(f64),
}

impl From<Value> for ValueView {
    fn from(v: Value) -> Self {
        match v {
            Value::Bool(b) => ValueView::Bool(b),
            Value::Num(n) => ValueView::Num(n),
        }
    }
}

/// A call in flight.
#[derive(Serialize)]
pub struct PendingView {
    pub at_least: Option<f64>,
    /// The node's contended CPU time counted on top of `trusted_seconds`.
    pub contended_seconds: Seconds,
    pub seconds: Seconds,
    /// How long the last answer is trusted meanwhile.
    pub trusted_seconds: Seconds,
    pub what: &'static str,
}

impl<'a> SignalView<'a> {
    pub fn of(cat: &'a Catalogue, i: &'a SlotInfo) -> Self {
        let def = cat.get(i.id);
        let r = &i.reading;
        SignalView {
            age_seconds: r.last_good_age.map(Seconds),
            known: r.value.is_ok(),
            last_error: i.last_error.as_deref(),
            last_good_at: i.last_good_wall.map(UnixTime),
            name: &def.name,
            pending: r.pending.map(|p| PendingView {
                at_least: p.at_least,
                contended_seconds: Seconds(p.contended),
                seconds: Seconds(p.waited),
                trusted_seconds: Seconds(p.trusted),
                what: p.what,
            }),
            source: def.source.label(),
            ty: def.ty.to_string(),
            unit: def.unit,
            unknown_reason: r
                .value
                .is_err()
                .then(|| etcd_readiness_policy::policy::eval::describe_unknown(r)),
            value: r.get().map(ValueView::from),
        }
    }
}

/// `/policy`: the policy in force and, with `--policy.candidate`, the
/// candidate.
#[derive(Serialize)]
pub struct PolicyView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<CandidateView<'a>>,
    pub last_reload_error: Option<&'a str>,
    pub loaded_at: UnixTime,
    pub path: &'a str,
    pub sha256: &'a str,
    pub summary: String,
    pub text: &'a str,
}

/// The candidate in force (all `null` until its file compiled once) and its
/// own reload error.
#[derive(Serialize)]
pub struct CandidateView<'a> {
    pub last_reload_error: Option<&'a str>,
    pub loaded_at: Option<UnixTime>,
    pub path: Option<String>,
    pub sha256: Option<&'a str>,
    pub summary: Option<String>,
    pub text: Option<&'a str>,
}

/// `/history`: the ring buffer with its bound and what was dropped.
#[derive(Serialize)]
pub struct HistoryView<'a> {
    pub base: Vec<LaneView<'a>>,
    pub capacity: usize,
    pub current: Vec<LaneView<'a>>,
    pub dropped: u64,
    pub dropped_until: Option<UnixTime>,
    pub started_at: UnixTime,
    pub transitions: Vec<TransitionView<'a>>,
}

/// A lane's state, and since when where that is known.
#[derive(Serialize)]
pub struct LaneView<'a> {
    pub kind: &'static str,
    pub name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<UnixTime>,
    pub state: LaneState,
}

/// One transition of a lane.
#[derive(Serialize)]
pub struct TransitionView<'a> {
    pub at: UnixTime,
    pub kind: &'static str,
    pub name: &'a str,
    pub state: LaneState,
}

fn lane_kind(l: &Lane) -> &'static str {
    match l {
        Lane::Readiness => "readiness",
        Lane::Check(_) => "check",
    }
}

impl<'a> HistoryView<'a> {
    pub fn of(h: &'a HistorySnapshot) -> Self {
        let lane = |l: &'a Lane, state: LaneState, since: Option<SystemTime>| LaneView {
            kind: lane_kind(l),
            name: l.name(),
            since: since.map(UnixTime),
            state,
        };
        HistoryView {
            base: h.base.iter().map(|(l, s)| lane(l, *s, None)).collect(),
            capacity: CAPACITY,
            current: h
                .current
                .iter()
                .map(|(l, s, since)| lane(l, *s, Some(*since)))
                .collect(),
            dropped: h.dropped,
            dropped_until: h.dropped_until.map(UnixTime),
            started_at: UnixTime(h.started),
            transitions: h
                .transitions
                .iter()
                .map(|t| TransitionView {
                    at: UnixTime(t.at),
                    kind: lane_kind(&t.lane),
                    name: t.lane.name(),
                    state: t.to,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::history::Transition;
    use std::sync::Arc;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(secs * 1000 + 1234)
    }

    /// What `/history` readers parse: keys, their order and their types.
    #[test]
    fn history_body_snapshot() {
        let check = Lane::Check(Arc::from("leader"));
        let h = HistorySnapshot {
            started: at(1_000),
            transitions: vec![Transition {
                at: at(1_010),
                lane: check.clone(),
                to: LaneState::Fail,
            }],
            dropped: 3,
            dropped_until: Some(at(1_005)),
            base: vec![(check.clone(), LaneState::Pass)],
            current: vec![
                (Lane::Readiness, LaneState::Fail, at(1_010)),
                (check, LaneState::Fail, at(1_010)),
            ],
        };
        insta::assert_snapshot!(serde_json::to_string_pretty(&HistoryView::of(&h)).unwrap());
    }

    #[test]
    fn seconds_are_rounded_to_the_millisecond() {
        let j = serde_json::to_string(&Seconds(Duration::from_micros(1_234_567))).unwrap();
        assert_eq!(j, "1.235");
    }
}
