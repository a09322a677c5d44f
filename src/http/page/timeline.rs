//! The status page's timeline as a model, without HTML: each lane
//! (readiness, each check) of a [`HistorySnapshot`] over the last
//! [`WINDOW`] as [`Span`]s that tile it, coalesced so that a lane has at
//! most [`MAX_SPANS_PER_LANE`] whatever the flapping rate — a run of spans
//! shorter than [`MIN_SPAN`] becomes one "flapping" span (or "warming up"
//! right after the start) with the number of changes. The page
//! (`super`) draws them.

use std::time::{Duration, SystemTime};

use crate::engine::history::{HistorySnapshot, Lane, LaneState};
use etcd_readiness_policy::text::fmt_duration;
/// The timeline's width in time.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Spans shorter than this, two or more in a row, are drawn as one
/// "flapping" span with the number of changes.
pub const MIN_SPAN: Duration = Duration::from_secs(30);
/// At most this many spans per lane: every other span is at least
/// [`MIN_SPAN`] long, so 2 × 15 min / 30 s + 1 = 61, and the span still
/// going on, which is never coalesced: 62.
pub const MAX_SPANS_PER_LANE: usize = 2 * (WINDOW.as_secs() / MIN_SPAN.as_secs()) as usize + 2;

/// What a span of a lane shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    State(LaneState),
    /// Before recording started or before the lane existed.
    NoData,
    /// Transitions were dropped to keep the buffer bounded.
    Truncated,
    /// A run of short spans with this many changes between them.
    Flapping(u32),
    /// A run of short spans right after the exporter started (its first
    /// answers settling), with this many changes: not flapping.
    WarmingUp(u32),
}

impl SpanKind {
    pub fn class(self) -> &'static str {
        match self {
            SpanKind::State(LaneState::Ready) => "ready",
            SpanKind::State(LaneState::NotReady) => "not_ready",
            SpanKind::State(LaneState::Starting) => "starting",
            SpanKind::State(LaneState::Pass) => "pass",
            SpanKind::State(LaneState::Held) => "held",
            SpanKind::State(LaneState::Recovering) => "recovering",
            SpanKind::State(LaneState::Fail) => "fail",
            SpanKind::State(LaneState::Unknown) => "unknown",
            SpanKind::State(LaneState::Removed) => "removed",
            SpanKind::NoData => "nodata",
            SpanKind::Truncated => "trunc",
            SpanKind::Flapping(_) => "flap",
            SpanKind::WarmingUp(_) => "starting",
        }
    }

    pub fn label(self) -> String {
        match self {
            SpanKind::State(s) => s.as_str().to_string(),
            SpanKind::NoData => "no data".to_string(),
            SpanKind::Truncated => "truncated".to_string(),
            SpanKind::Flapping(n) => {
                format!("flapping, {n} change{}", if n == 1 { "" } else { "s" })
            }
            SpanKind::WarmingUp(n) => {
                format!("warming up, {n} change{}", if n == 1 { "" } else { "s" })
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub from: SystemTime,
    pub to: SystemTime,
    pub kind: SpanKind,
    /// For a flapping span: the states it covers, in order (at most
    /// [`MAX_DETAIL`] listed), for its tooltip.
    pub detail: String,
}

/// Most states a flapping span's tooltip lists.
const MAX_DETAIL: usize = 8;

impl Span {
    pub fn len(&self) -> Duration {
        self.to.duration_since(self.from).unwrap_or_default()
    }
}

/// The spans of one lane over `[start, now]`, coalesced so that there are
/// at most [`MAX_SPANS_PER_LANE`].
pub fn lane_spans(
    h: &HistorySnapshot,
    lane: &Lane,
    start: SystemTime,
    now: SystemTime,
) -> Vec<Span> {
    let mut raw: Vec<Span> = Vec::new();
    let push = |raw: &mut Vec<Span>, from: SystemTime, to: SystemTime, kind: SpanKind| {
        let from = from.max(start);
        let to = to.min(now);
        if to <= from {
            return;
        }
        match raw.last_mut() {
            Some(last) if last.kind == kind && last.to >= from => last.to = to,
            _ => raw.push(Span {
                from,
                to,
                kind,
                detail: String::new(),
            }),
        }
    };
    // The state at the start of the window, and from when history is whole.
    let mut cursor = h.started.min(now);
    let mut state = SpanKind::NoData;
    push(&mut raw, start, cursor, SpanKind::NoData);
    if let Some(du) = h.dropped_until {
        push(&mut raw, cursor, du, SpanKind::Truncated);
        cursor = cursor.max(du);
        state = h
            .base
            .iter()
            .find(|(l, _)| l == lane)
            .map_or(SpanKind::NoData, |(_, s)| SpanKind::State(*s));
    }
    for t in h.transitions.iter().filter(|t| t.lane == *lane) {
        if t.at > cursor {
            push(&mut raw, cursor, t.at, state);
            cursor = t.at;
        }
        state = SpanKind::State(t.to);
    }
    push(&mut raw, cursor, now, state);
    for s in &mut raw {
        if s.kind == SpanKind::State(LaneState::Removed) {
            s.kind = SpanKind::NoData;
        }
    }
    coalesce(raw, h.started)
}

/// Runs of two or more spans shorter than [`MIN_SPAN`] become one flapping
/// span counting the changes in it — except the span still going on (it is
/// short only because it has not lasted yet) and a run that starts when the
/// exporter started (its first answers settling: "warming up").
fn coalesce(mut raw: Vec<Span>, started: SystemTime) -> Vec<Span> {
    let ongoing = raw.pop();
    let mut out: Vec<Span> = Vec::with_capacity(raw.len().min(MAX_SPANS_PER_LANE));
    let mut run: Vec<Span> = Vec::new();
    let flush = |out: &mut Vec<Span>, run: &mut Vec<Span>| {
        match run.len() {
            0 => {}
            1 => out.push(run[0].clone()),
            n => {
                let mut detail: Vec<String> = run
                    .iter()
                    .take(MAX_DETAIL)
                    .map(|s| format!("{} {}", s.kind.label(), fmt_duration(s.len().as_secs_f64())))
                    .collect();
                if n > MAX_DETAIL {
                    detail.push(format!("… {} more", n - MAX_DETAIL));
                }
                let changes = n as u32 - 1;
                out.push(Span {
                    from: run[0].from,
                    to: run[n - 1].to,
                    kind: if run[0].from <= started && run[n - 1].to <= started + MIN_SPAN {
                        SpanKind::WarmingUp(changes)
                    } else {
                        SpanKind::Flapping(changes)
                    },
                    detail: detail.join(" → "),
                })
            }
        }
        run.clear();
    };
    for s in raw {
        if s.len() < MIN_SPAN {
            run.push(s);
        } else {
            flush(&mut out, &mut run);
            out.push(s);
        }
    }
    flush(&mut out, &mut run);
    out.extend(ongoing);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600 + s)
    }

    #[test]
    fn coalescing_bounds_the_spans_whatever_the_pattern() {
        let start = at(0);
        let now = at(900);
        for step_ms in [1u64, 7, 250, 999, 1000, 14_999, 29_999, 30_000, 31_000] {
            let mut raw = Vec::new();
            let mut t = start;
            let mut fail = false;
            while t < now {
                let to = (t
                    + Duration::from_millis(step_ms)
                    + if fail { Duration::ZERO } else { MIN_SPAN })
                .min(now);
                let s = if fail {
                    LaneState::Fail
                } else {
                    LaneState::Pass
                };
                raw.push(Span {
                    from: t,
                    to,
                    kind: SpanKind::State(s),
                    detail: String::new(),
                });
                t = to;
                fail = !fail;
            }
            let out = coalesce(raw, start);
            assert!(
                out.len() <= MAX_SPANS_PER_LANE,
                "step {step_ms}: {}",
                out.len()
            );
            // The spans still tile the window.
            assert_eq!(out.first().unwrap().from, start);
            assert_eq!(out.last().unwrap().to, now);
            assert!(out.windows(2).all(|w| w[0].to == w[1].from));
        }
    }

    #[test]
    fn the_first_seconds_after_start_are_warming_up_and_the_ongoing_span_is_itself() {
        let span = |from: u64, to: u64, s: LaneState| Span {
            from: at(from),
            to: at(to),
            kind: SpanKind::State(s),
            detail: String::new(),
        };
        // Started at 100: starting 2 s, not ready 3 s, ready since (4 s).
        let raw = vec![
            Span {
                from: at(0),
                to: at(100),
                kind: SpanKind::NoData,
                detail: String::new(),
            },
            span(100, 102, LaneState::Starting),
            span(102, 105, LaneState::NotReady),
            span(105, 109, LaneState::Ready),
        ];
        let out = coalesce(raw, at(100));
        let kinds: Vec<SpanKind> = out.iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            [
                SpanKind::NoData,
                SpanKind::WarmingUp(1),
                SpanKind::State(LaneState::Ready)
            ]
        );
        assert_eq!(out[1].kind.label(), "warming up, 1 change");
        // Short spans later than the start are flapping, still.
        let raw = vec![
            span(100, 200, LaneState::Ready),
            span(200, 201, LaneState::NotReady),
            span(201, 202, LaneState::Ready),
            span(202, 203, LaneState::NotReady),
            span(203, 204, LaneState::Ready),
        ];
        let kinds: Vec<SpanKind> = coalesce(raw, at(100)).iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            [
                SpanKind::State(LaneState::Ready),
                SpanKind::Flapping(2),
                SpanKind::State(LaneState::Ready)
            ]
        );
    }
}
