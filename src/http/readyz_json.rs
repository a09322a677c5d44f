//! The JSON body of `/readyz` and `/readyz/NAME` as a typed view, and how it
//! is fitted under [`MAX_BODY`]: the size of each part (the frame, each
//! check) is measured once per shedding step and the body's size is their
//! sum, so what to shed is a computation, not a loop of serialisations.
//! Keys are written in alphabetical order, the order the body has always
//! had.

use std::borrow::Cow;

use serde::Serialize;

use super::views::{Seconds, UnixTime};
use etcd_readiness_policy::text::cut;
use etcd_readiness_policy::verdict::{CheckKind, CheckReport, CheckState, UsedSignal, Verdict};

/// Bodies are kept below this many bytes (the kubelet reads 10 KiB).
pub const MAX_BODY: usize = 10_000;
/// Longest explanation shown for one check.
pub(super) const MAX_EXPLANATION: usize = 1_000;

/// Explanations are cut to this many bytes when the body is too long with
/// them whole.
const SHED_EXPLANATION: usize = 80;

/// The JSON body of a `/readyz` answer.
#[derive(Debug)]
pub struct ReadyzJson<'a> {
    answer: Answer<'a>,
    /// With `?policy=candidate`: how the candidate compares with the policy
    /// in force.
    candidate: Option<CandidateFields>,
    /// Part of the body was shed to fit under [`MAX_BODY`].
    truncated: bool,
}

/// What the body answers.
#[derive(Debug)]
enum Answer<'a> {
    /// The verdict, with every check or with the one asked for.
    Verdict {
        ready: bool,
        reason: Option<String>,
        evaluated_at: UnixTime,
        scope: Scope<'a>,
    },
    /// `/readyz/NAME?policy=candidate` naming no check: why.
    Error(String),
    /// Too long even when shed: only what the kubelet needs.
    Shed { ready: bool, reason: Option<String> },
}

/// Which checks a verdict's body shows.
#[derive(Debug)]
enum Scope<'a> {
    /// `/readyz`: every check, and the `exclude` names that match none.
    All {
        checks: Vec<CheckJson<'a>>,
        unmatched_excludes: Vec<String>,
        /// How many more unmatched names there were than are echoed.
        unmatched_excludes_not_shown: usize,
    },
    /// `/readyz/NAME`: that check, `None` before it was evaluated.
    One(Option<CheckJson<'a>>),
}

/// One check's report as the body shows it.
#[derive(Debug, Serialize)]
struct CheckJson<'a> {
    excluded: bool,
    explanation: Cow<'a, str>,
    /// `None` (with `signals`) once shed.
    #[serde(skip_serializing_if = "Option::is_none")]
    expr: Option<&'a str>,
    held: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    hold_left: Option<Seconds>,
    in_state_for: Seconds,
    kind: CheckKind,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    recover_left: Option<Seconds>,
    recovering: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    signals: Option<&'a [UsedSignal]>,
    since: UnixTime,
    state: CheckState,
    #[serde(skip_serializing_if = "Option::is_none")]
    true_for: Option<Seconds>,
}

impl<'a> CheckJson<'a> {
    fn of(c: &'a CheckReport, excluded: bool) -> Self {
        CheckJson {
            excluded,
            explanation: cut(&c.explanation, MAX_EXPLANATION),
            expr: Some(&c.expr),
            held: c.held,
            hold_left: c.hold_left.map(Seconds),
            in_state_for: Seconds(c.in_state_for),
            kind: c.kind,
            name: &c.name,
            recover_left: c.recover_left.map(Seconds),
            recovering: c.recovering,
            signals: Some(&c.signals),
            since: UnixTime(c.since),
            state: c.state,
            true_for: c.true_for.map(Seconds),
        }
    }
}

/// The fields `?policy=candidate` adds.
#[derive(Clone, Copy, Debug)]
pub struct CandidateFields {
    pub live_ready: bool,
    pub would_fail_while_ready: Seconds,
    pub would_pass_while_unready: Seconds,
    pub disagreeing: Option<Disagreeing>,
}

/// The direction the candidate and the live policy disagree in now.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Disagreeing {
    pub direction: &'static str,
    /// Since when, Unix seconds.
    pub since: f64,
}

/// The body as written: every key the answers may have, in alphabetical
/// order, each present or absent as [`ReadyzJson`] says.
#[derive(Serialize)]
struct Wire<'b, 'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    check: Option<&'b Option<CheckJson<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checks: Option<&'b [CheckJson<'a>]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decides_readiness: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disagreeing: Option<Option<Disagreeing>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'b str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    evaluated_at: Option<UnixTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    live_ready: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ready: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<Option<&'b str>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    unmatched_excludes: Option<&'b [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unmatched_excludes_not_shown: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    would_fail_while_ready_seconds: Option<Seconds>,
    #[serde(skip_serializing_if = "Option::is_none")]
    would_pass_while_unready_seconds: Option<Seconds>,
}

impl Serialize for ReadyzJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.wire().serialize(s)
    }
}

impl<'a> ReadyzJson<'a> {
    /// `/readyz`: the verdict with every check (`excluded` says which were
    /// excluded) and the echoed `exclude` names that matched none.
    pub fn all(
        verdict: &'a Verdict,
        ready: bool,
        reason: Option<String>,
        excluded: impl Fn(&CheckReport) -> bool,
        unmatched_excludes: Vec<String>,
        unmatched_excludes_not_shown: usize,
    ) -> Self {
        let checks = verdict
            .checks
            .iter()
            .map(|c| CheckJson::of(c, excluded(c)))
            .collect();
        Self::verdict(
            verdict,
            ready,
            reason,
            Scope::All {
                checks,
                unmatched_excludes,
                unmatched_excludes_not_shown,
            },
        )
    }

    /// `/readyz/NAME`: the verdict with that check's report, if it has one.
    pub fn one(
        verdict: &'a Verdict,
        ready: bool,
        reason: Option<String>,
        report: Option<&'a CheckReport>,
    ) -> Self {
        let check = report.map(|c| CheckJson::of(c, false));
        Self::verdict(verdict, ready, reason, Scope::One(check))
    }

    fn verdict(verdict: &Verdict, ready: bool, reason: Option<String>, scope: Scope<'a>) -> Self {
        ReadyzJson {
            answer: Answer::Verdict {
                ready,
                reason,
                evaluated_at: UnixTime(verdict.evaluated_at),
                scope,
            },
            candidate: None,
            truncated: false,
        }
    }

    /// An error answer (`{"error": …}`).
    pub fn error(message: String) -> Self {
        ReadyzJson {
            answer: Answer::Error(message),
            candidate: None,
            truncated: false,
        }
    }

    /// The same body with the fields of a candidate answer.
    pub fn with_candidate(self, candidate: CandidateFields) -> Self {
        ReadyzJson {
            candidate: Some(candidate),
            ..self
        }
    }

    /// Written out, after [`fit`](Self::fit).
    pub fn write(&self) -> String {
        // Only strings, numbers and our own structs: serde_json cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    fn wire(&self) -> Wire<'_, 'a> {
        let c = self.candidate.as_ref();
        let mut w = Wire {
            check: None,
            checks: None,
            decides_readiness: c.map(|_| false),
            disagreeing: c.map(|c| c.disagreeing),
            error: None,
            evaluated_at: None,
            live_ready: c.map(|c| c.live_ready),
            policy: c.map(|_| "candidate"),
            ready: None,
            reason: None,
            truncated: self.truncated,
            unmatched_excludes: None,
            unmatched_excludes_not_shown: None,
            would_fail_while_ready_seconds: c.map(|c| c.would_fail_while_ready),
            would_pass_while_unready_seconds: c.map(|c| c.would_pass_while_unready),
        };
        match &self.answer {
            Answer::Verdict {
                ready,
                reason,
                evaluated_at,
                scope,
            } => {
                w.ready = Some(*ready);
                w.reason = Some(reason.as_deref());
                w.evaluated_at = Some(*evaluated_at);
                match scope {
                    Scope::All {
                        checks,
                        unmatched_excludes,
                        unmatched_excludes_not_shown,
                    } => {
                        w.checks = Some(checks);
                        w.unmatched_excludes = Some(unmatched_excludes);
                        w.unmatched_excludes_not_shown =
                            Some(*unmatched_excludes_not_shown).filter(|n| *n > 0);
                    }
                    Scope::One(check) => w.check = Some(check),
                }
            }
            Answer::Error(e) => w.error = Some(e),
            Answer::Shed { ready, reason } => {
                w.ready = Some(*ready);
                w.reason = Some(reason.as_deref());
            }
        }
        w
    }

    /// The checks that shedding may cut, if the body lists them.
    fn checks_mut(&mut self) -> Option<&mut Vec<CheckJson<'a>>> {
        match &mut self.answer {
            Answer::Verdict {
                scope: Scope::All { checks, .. },
                ..
            } => Some(checks),
            _ => None,
        }
    }

    /// The body's size in bytes but for its checks' items: what each step
    /// of [`fit`](Self::fit) adds the items to.
    fn frame_len(&self) -> usize {
        let w = self.wire();
        json_len(&Wire {
            checks: w.checks.map(|_| &[][..]),
            ..w
        })
    }

    /// Shed detail until the body is at most [`MAX_BODY`] bytes, what the
    /// kubelet needs least first: the checks' expressions and signals, then
    /// the length of their explanations, then the last checks (all but the
    /// first, marked `truncated`); failing that, only readiness and its
    /// reason. A body that fits is left as it is.
    pub fn fit(&mut self) {
        let frame = self.frame_len();
        let fits = |checks: &[CheckJson]| frame + items_len(checks) <= MAX_BODY;
        let shed: [fn(&mut CheckJson); 2] = [
            |c| {
                c.expr = None;
                c.signals = None;
            },
            |c| c.explanation = Cow::Owned(cut(&c.explanation, SHED_EXPLANATION).into_owned()),
        ];
        let mut checks = self.checks_mut().map(std::mem::take).unwrap_or_default();
        let mut fitted = fits(&checks);
        for step in shed {
            if fitted {
                break;
            }
            checks.iter_mut().for_each(step);
            fitted = fits(&checks);
        }
        if !fitted {
            let keep = most_that_fit(frame, &checks);
            checks.truncate(keep);
        }
        if let Some(slot) = self.checks_mut() {
            *slot = checks;
        }
        if fitted {
            return;
        }
        self.truncated = true;
        let checks = self.checks_mut().map_or(&[][..], |c| &c[..]);
        let size = items_len(checks);
        if self.frame_len() + size > MAX_BODY {
            *self = self.shed();
        }
    }

    /// Only readiness and its reason (cut), marked `truncated`.
    fn shed(&self) -> Self {
        let (ready, reason) = match &self.answer {
            Answer::Verdict { ready, reason, .. } | Answer::Shed { ready, reason } => {
                (*ready, reason.as_deref())
            }
            Answer::Error(_) => (false, None),
        };
        ReadyzJson {
            answer: Answer::Shed {
                ready,
                reason: reason.map(|r| cut(r, MAX_EXPLANATION).into_owned()),
            },
            candidate: None,
            truncated: true,
        }
    }
}

/// How many of the first `checks` fit after a frame of `frame` bytes; at
/// least one where there is one.
fn most_that_fit(frame: usize, checks: &[CheckJson]) -> usize {
    let mut size = frame;
    let mut keep = 0;
    for (i, c) in checks.iter().enumerate() {
        size += json_len(c) + usize::from(i > 0);
        if size > MAX_BODY {
            break;
        }
        keep = i + 1;
    }
    keep.max(checks.len().min(1))
}

/// The size of a list's items as written: each item and the commas between.
fn items_len(items: &[CheckJson]) -> usize {
    items.iter().map(json_len).sum::<usize>() + items.len().saturating_sub(1)
}

/// How many bytes `v` takes as compact JSON, counted without keeping them.
fn json_len<T: Serialize>(v: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    // As in `write`: serialising these types cannot fail.
    let _ = serde_json::to_writer(&mut n, v);
    n.0
}
