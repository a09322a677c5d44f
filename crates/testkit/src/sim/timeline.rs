//! One exporter's verdict over virtual time, as a test reads it back: the
//! verdict sampled every [`STEP`] (the cluster's own resolution) from when
//! [`record`] is called, readiness and each check's state and explanation,
//! so that a test asserts what the kubelet would have been told at an
//! instant and, when it fails, prints the transitions that explain it
//! ([`Timeline::render`]).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_readiness_exporter::engine::EngineHandle;
use etcd_readiness_policy::sync::TolerantLock;
use etcd_readiness_policy::verdict::CheckState;
use tokio::time::Instant;

use super::cluster::STEP;

/// One check, as one verdict reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub state: CheckState,
    pub explanation: String,
}

/// What the verdict said at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub at: Instant,
    pub ready: bool,
    /// Why it is not ready regardless of checks (`starting`).
    pub reason: Option<String>,
    pub checks: Vec<Check>,
}

impl Seen {
    /// The check `name`, if the verdict has it.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// Readiness and every check's state: what changes a probe's answer.
    fn answer(&self) -> (bool, Vec<CheckState>) {
        (self.ready, self.checks.iter().map(|c| c.state).collect())
    }
}

/// The samples so far, readable while the recording runs.
#[derive(Clone, Debug, Default)]
pub struct Timeline(Arc<Mutex<Vec<Seen>>>);

/// Sample `engine`'s verdict every [`STEP`] from now for `span`, on a task.
pub fn record(engine: &EngineHandle, span: Duration) -> Timeline {
    let timeline = Timeline::default();
    let (engine, into) = (engine.clone(), timeline.clone());
    let start = Instant::now();
    let steps = (span.as_nanos() / STEP.as_nanos()) as u32;
    tokio::spawn(async move {
        for i in 0..=steps {
            tokio::time::sleep_until(start + STEP * i).await;
            let published = engine.verdict();
            let v = &published.verdict;
            into.0.locked().push(Seen {
                at: Instant::now(),
                ready: v.ready,
                reason: v.reason.clone(),
                checks: v
                    .checks
                    .iter()
                    .map(|c| Check {
                        name: c.name.clone(),
                        state: c.state,
                        explanation: c.explanation.clone(),
                    })
                    .collect(),
            });
        }
    });
    timeline
}

impl Timeline {
    /// Every sample so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.0.locked().clone()
    }

    /// The samples in `[from, to]`.
    pub fn between(&self, from: Instant, to: Instant) -> Vec<Seen> {
        let all = self.0.locked();
        all.iter()
            .filter(|s| s.at >= from && s.at <= to)
            .cloned()
            .collect()
    }

    /// The last sample at or before `t`.
    pub fn at(&self, t: Instant) -> Option<Seen> {
        let all = self.0.locked();
        all.iter().rev().find(|s| s.at <= t).cloned()
    }

    /// The first sample in `[from, to]` that `is`.
    pub fn first(&self, from: Instant, to: Instant, is: impl Fn(&Seen) -> bool) -> Option<Seen> {
        self.between(from, to).into_iter().find(|s| is(s))
    }

    /// The samples at which the answer changed (readiness or a check's
    /// state), the first one included, with their failing checks'
    /// explanations; instants in seconds from `origin`.
    pub fn render(&self, origin: Instant) -> String {
        let secs = |t: Instant| {
            let (a, b) = (t.max(origin) - origin, origin.max(t) - t);
            a.as_secs_f64() - b.as_secs_f64()
        };
        let mut out = String::new();
        let mut last = None;
        for s in self.seen() {
            if last.as_ref() == Some(&s.answer()) {
                continue;
            }
            last = Some(s.answer());
            let ready = if s.ready { "ready" } else { "NOT ready" };
            let _ = write!(out, "{:+8.3} s {ready}", secs(s.at));
            if let Some(r) = &s.reason {
                let _ = write!(out, " ({r})");
            }
            for c in s.checks.iter().filter(|c| c.state != CheckState::Pass) {
                let _ = write!(out, "; {} {}: {}", c.name, c.state.as_str(), c.explanation);
            }
            out.push('\n');
        }
        out
    }
}
