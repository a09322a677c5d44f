//! `/readyz` rendering, in the apiserver's conventions (`[+]name ok`,
//! `[-]name failed: reason`, `readyz check passed|failed`, `?verbose`,
//! `?exclude=`, `/readyz/<check>`) plus JSON. Pure functions of a verdict, so
//! the exact text users see is tested without a server. Bodies stay under
//! [`MAX_BODY`] bytes because the kubelet reads only the first 10 KB.

use std::time::Duration;

use axum::http::StatusCode;
use serde::Serialize;

use super::readyz_json::{CandidateFields, Disagreeing, MAX_BODY, MAX_EXPLANATION, ReadyzJson};
use super::views::Seconds;
use etcd_readiness_policy::duration::{self, DurationError};
use etcd_readiness_policy::policy::diag::did_you_mean;
use etcd_readiness_policy::text::cut;
use etcd_readiness_policy::verdict::{CheckKind, CheckReport, CheckState, Verdict};

/// The longest `?wait=` accepted; longer is a 400, not a silent clamp.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// Longest piece of the request (a check name, an `exclude`) echoed back.
pub const MAX_ECHO: usize = 200;
/// Most unmatched `exclude` names echoed back.
const MAX_ECHOED_EXCLUDES: usize = 10;

/// What a `/readyz` request asked for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadyzQuery {
    pub verbose: bool,
    pub json: bool,
    pub exclude: Vec<String>,
    /// `policy=live` (the default) or `policy=candidate`.
    pub policy: PolicyChoice,
    /// `wait=DURATION`: how long the answer may be held until it changes
    /// (`http::longpoll`), at most [`MAX_WAIT`]; `None` without it.
    pub wait: Option<Result<Duration, DurationError>>,
}

/// Which policy's verdict a request asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PolicyChoice {
    /// The policy in force: the member's readiness.
    #[default]
    Live,
    /// `--policy.candidate`: what it would answer, with [`CANDIDATE_STATUS`].
    Candidate,
    /// Anything else (echoed back, cut to [`MAX_ECHO`]).
    Unknown(String),
}

/// The status of every `?policy=candidate` answer, whatever the candidate
/// says: constant, so that no client can read the candidate's verdict from
/// the status, and not a success, so that a kubelet pointed at it by
/// mistake fails closed (the pod never becomes ready and a rollout stops at
/// its first pod, with "statuscode: 409" in the probe event) instead of
/// silently losing its readiness gate, as a constant 200 would make it.
/// Not 503, which is what a real "not ready" answers. The candidate's
/// verdict is in the body (docs/candidate.md).
pub const CANDIDATE_STATUS: StatusCode = StatusCode::CONFLICT;

impl ReadyzQuery {
    /// Parse `verbose`, `exclude=NAME` (repeatable) and `format=json` from a raw
    /// query string; `accept_json` comes from the `Accept` header.
    pub fn parse(raw: Option<&str>, accept_json: bool) -> Self {
        let mut q = ReadyzQuery {
            json: accept_json,
            ..Default::default()
        };
        // application/x-www-form-urlencoded, as browsers and kubectl send it.
        for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            match k.as_ref() {
                "verbose" => q.verbose = v.is_empty() || v != "false" && v != "0",
                "exclude" if !v.is_empty() => q.exclude.push(v.into_owned()),
                "format" => q.json = v == "json",
                "wait" => q.wait = Some(duration::parse(&v, MAX_WAIT)),
                "policy" => {
                    q.policy = match v.as_ref() {
                        "live" => PolicyChoice::Live,
                        "candidate" => PolicyChoice::Candidate,
                        other => PolicyChoice::Unknown(echo(other)),
                    }
                }
                _ => {}
            }
        }
        q
    }
}

/// A rendered response.
#[derive(Debug, PartialEq, Eq)]
pub struct Rendered {
    pub status: StatusCode,
    pub json: bool,
    pub body: String,
    /// The readiness the answer reports (the live verdict's, or with
    /// `?policy=candidate` the candidate's), what a held request compares;
    /// `None` for an error (404, 400), which is never held.
    pub ready: Option<bool>,
}

/// Why the verdict itself cannot be trusted (starting, wedged evaluator).
fn verdict_problem(verdict: &Verdict, stale: Option<Duration>) -> Option<String> {
    if let Some(age) = stale {
        return Some(format!(
            "verdict is stale: evaluator wedged (last evaluation {:.1}s ago)",
            age.as_secs_f64()
        ));
    }
    verdict.reason.clone()
}

/// Request input as it may be echoed back.
fn echo(s: &str) -> String {
    cut(s, MAX_ECHO).into_owned()
}

/// Request input as a text message shows it without quotes of its own:
/// [`echo`]ed, and escaped as Rust's `{:?}` escapes a string (a NUL as
/// `\0`, a newline as `\n`, `\u{..}` for what does not print), so that no
/// control character reaches the client raw and none can forge a line.
fn shown(s: &str) -> String {
    echo(s).escape_debug().to_string()
}

fn explanation(c: &CheckReport) -> String {
    let e = if c.explanation.is_empty() {
        format!("`{}` is {}", c.expr, c.state.as_str())
    } else {
        c.explanation.clone()
    };
    cut(&e, MAX_EXPLANATION).into_owned()
}

/// One `[+]`/`[-]` line and whether it fails readiness.
fn check_line(c: &CheckReport, excluded: bool) -> (String, bool) {
    if excluded {
        return (format!("[+]{} excluded: ok", c.name), false);
    }
    match (c.kind, c.state) {
        (CheckKind::Check, CheckState::Pass) if c.held => (
            format!("[+]{} ok (held: {})", c.name, explanation(c)),
            false,
        ),
        (_, CheckState::Pass) => (format!("[+]{} ok", c.name), false),
        (CheckKind::Warn, _) => (
            format!("[+]{} ok (warning: {})", c.name, explanation(c)),
            false,
        ),
        (CheckKind::Check, _) => (format!("[-]{} failed: {}", c.name, explanation(c)), true),
    }
}

/// Fit lines plus a closing line under [`MAX_BODY`].
fn join_bounded(lines: Vec<String>, closing: &str) -> String {
    let mut body = String::new();
    let reserve = closing.len() + 64;
    let total = lines.len();
    for (i, l) in lines.into_iter().enumerate() {
        if body.len() + l.len() + 1 + reserve > MAX_BODY {
            body.push_str(&format!("... {} more lines truncated\n", total - i));
            break;
        }
        body.push_str(&l);
        body.push('\n');
    }
    body.push_str(closing);
    body.push('\n');
    body
}

/// An answer before it is written out: what [`render_candidate`] wraps.
struct Draft<'a> {
    status: StatusCode,
    /// As [`Rendered::ready`].
    ready: Option<bool>,
    body: DraftBody<'a>,
}

enum DraftBody<'a> {
    Text(String),
    /// A verdict's JSON, not yet fitted under [`MAX_BODY`].
    Json(Box<ReadyzJson<'a>>),
    /// `/readyz/NAME` naming no check, asked as JSON: why.
    JsonError(String),
}

impl Draft<'_> {
    fn finish(self) -> Rendered {
        let (json, body) = match self.body {
            DraftBody::Text(body) => (false, body),
            DraftBody::Json(mut body) => {
                body.fit();
                (true, body.write())
            }
            DraftBody::JsonError(error) => (true, error_json(&error)),
        };
        Rendered {
            status: self.status,
            json,
            body,
            ready: self.ready,
        }
    }
}

/// `{"error": …}`, the JSON of every refused request.
fn error_json(error: &str) -> String {
    #[derive(Serialize)]
    struct ErrorBody<'a> {
        error: &'a str,
    }
    serde_json::to_string(&ErrorBody { error }).unwrap_or_default()
}

fn status_of(failing: bool) -> StatusCode {
    if failing {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

/// `/readyz` for the whole verdict.
pub fn render_all(verdict: &Verdict, stale: Option<Duration>, q: &ReadyzQuery) -> Rendered {
    draft_all(verdict, stale, q).finish()
}

fn draft_all<'a>(verdict: &'a Verdict, stale: Option<Duration>, q: &ReadyzQuery) -> Draft<'a> {
    let problem = verdict_problem(verdict, stale);
    let unmatched: Vec<&String> = q
        .exclude
        .iter()
        .filter(|e| !verdict.checks.iter().any(|c| &c.name == *e))
        .collect();
    let mut failing = problem.is_some();
    let mut lines = Vec::new();
    if let Some(p) = &problem {
        lines.push(format!("[-]verdict failed: {p}"));
    }
    for c in &verdict.checks {
        let (line, fails) = check_line(c, q.exclude.contains(&c.name));
        failing |= fails;
        lines.push(line);
    }
    // Echoed request input is cut so that it cannot push the body past MAX_BODY.
    let echoed: Vec<String> = unmatched
        .iter()
        .take(MAX_ECHOED_EXCLUDES)
        .map(|n| echo(n))
        .collect();
    let more = unmatched.len().saturating_sub(MAX_ECHOED_EXCLUDES);
    if !unmatched.is_empty() {
        let mut names: Vec<String> = echoed.iter().map(|n| format!("{n:?}")).collect();
        if more > 0 {
            names.push(format!("and {more} more"));
        }
        lines.push(format!(
            "warn: some checks cannot be excluded: no matches for {}",
            names.join(", ")
        ));
    }
    let body = if q.json {
        let excluded = |c: &CheckReport| q.exclude.contains(&c.name);
        DraftBody::Json(Box::new(ReadyzJson::all(
            verdict, !failing, problem, excluded, echoed, more,
        )))
    } else {
        DraftBody::Text(text(failing, !q.verbose, lines))
    };
    Draft {
        status: status_of(failing),
        ready: Some(!failing),
        body,
    }
}

/// The plain-text body: `ok` when passing and `terse`, else the lines and
/// the closing line of the apiserver convention.
fn text(failing: bool, terse: bool, lines: Vec<String>) -> String {
    if !failing && terse {
        return "ok".to_string();
    }
    let last = if failing {
        "readyz check failed"
    } else {
        "readyz check passed"
    };
    join_bounded(lines, last)
}

/// `/readyz/NAME`. `known_checks` are the check names of the policy in force
/// (the verdict has none while starting); an unknown name is a 404 with a
/// suggestion.
pub fn render_one(
    verdict: &Verdict,
    stale: Option<Duration>,
    name: &str,
    known_checks: &[&str],
    q: &ReadyzQuery,
) -> Rendered {
    draft_one(verdict, stale, name, known_checks, q).finish()
}

fn draft_one<'a>(
    verdict: &'a Verdict,
    stale: Option<Duration>,
    name: &str,
    known_checks: &[&str],
    q: &ReadyzQuery,
) -> Draft<'a> {
    if !known_checks.contains(&name) {
        let body = no_such_check(name, known_checks);
        return Draft {
            status: StatusCode::NOT_FOUND,
            ready: None,
            body: if q.json {
                DraftBody::JsonError(body.trim_end().to_string())
            } else {
                DraftBody::Text(body)
            },
        };
    }
    let problem = verdict_problem(verdict, stale);
    let report = verdict.checks.iter().find(|c| c.name == name);
    let (line, failing) = match (&problem, report) {
        (Some(p), _) => (format!("[-]{name} failed: {p}"), true),
        (None, Some(c)) => check_line(c, false),
        (None, None) => (format!("[-]{name} failed: not evaluated yet"), true),
    };
    let body = if q.json {
        DraftBody::Json(Box::new(ReadyzJson::one(
            verdict, !failing, problem, report,
        )))
    } else {
        let terse = !q.verbose && line == format!("[+]{name} ok");
        DraftBody::Text(text(failing, terse, vec![line]))
    };
    Draft {
        status: status_of(failing),
        ready: Some(!failing),
        body,
    }
}

/// The 404 of `/readyz/NAME`: the name, a suggestion, the checks there are.
fn no_such_check(name: &str, known_checks: &[&str]) -> String {
    let mut body = format!("no check named {:?}", echo(name));
    // A name far longer than any check cannot be a typo of one (and the
    // edit distance is quadratic in its length).
    let best = (name.len() <= MAX_ECHO)
        .then(|| did_you_mean(name, known_checks.iter().copied()))
        .flatten();
    if let Some(best) = best {
        body.push_str(&format!("; did you mean {best:?}?"));
    }
    body.push_str(&format!(" (checks: {})", known_checks.join(", ")));
    body = cut(&body, MAX_BODY - 100).into_owned();
    body.push('\n');
    body
}

/// `?policy=` named neither `live` nor `candidate`.
pub fn render_unknown_policy(name: &str, json: bool) -> Rendered {
    let msg = format!("unknown policy {name:?}: use policy=live (the default) or policy=candidate");
    Rendered {
        status: StatusCode::BAD_REQUEST,
        ready: None,
        json,
        body: if json { error_json(&msg) } else { msg + "\n" },
    }
}

/// `?policy=candidate` without `--policy.candidate`, or before a candidate
/// file ever compiled (`error` says why).
pub fn render_no_candidate(error: Option<&str>, json: bool) -> Rendered {
    #[derive(Serialize)]
    struct NoCandidate<'a> {
        error: &'a str,
        policy: &'static str,
    }
    let msg = match error {
        None => "no candidate policy: start with --policy.candidate FILE".to_string(),
        Some(e) => format!(
            "no candidate policy in force yet: its file has not compiled ({})",
            cut(e, MAX_EXPLANATION)
        ),
    };
    let body = if json {
        let body = NoCandidate {
            error: &msg,
            policy: "candidate",
        };
        serde_json::to_string(&body).unwrap_or_default()
    } else {
        msg + "\n"
    };
    Rendered {
        status: StatusCode::NOT_FOUND,
        ready: None,
        json,
        body,
    }
}

/// How the candidate compares with the policy in force, as the candidate
/// answers show it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CandidateContext {
    /// The live verdict of the same evaluation.
    pub live_ready: bool,
    pub would_fail_while_ready: Duration,
    pub would_pass_while_unready: Duration,
    /// The direction the two disagree in now and since when (Unix seconds).
    pub disagreeing: Option<(&'static str, f64)>,
}

impl CandidateContext {
    fn fields(&self) -> CandidateFields {
        CandidateFields {
            live_ready: self.live_ready,
            would_fail_while_ready: Seconds(self.would_fail_while_ready),
            would_pass_while_unready: Seconds(self.would_pass_while_unready),
            disagreeing: self
                .disagreeing
                .map(|(direction, since)| Disagreeing { direction, since }),
        }
    }
}

/// `/readyz?policy=candidate` (and `/readyz/NAME?policy=candidate` with
/// `one` naming the check): the candidate's verdict rendered as the live one
/// would be, always verbose, always with [`CANDIDATE_STATUS`], opened by a
/// line (or JSON fields) saying that it decides nothing.
pub fn render_candidate(
    verdict: &Verdict,
    stale: Option<Duration>,
    one: Option<(&str, &[&str])>,
    ctx: &CandidateContext,
    q: &ReadyzQuery,
) -> Rendered {
    let verbose = ReadyzQuery {
        verbose: true,
        policy: PolicyChoice::Live,
        ..q.clone()
    };
    let inner = match one {
        Some((name, known)) => draft_one(verdict, stale, name, known, &verbose),
        None => draft_all(verdict, stale, &verbose),
    };
    let (json, body) = match inner.body {
        DraftBody::Json(mut body) => {
            // Fitted as the live answer would be, then again with the
            // candidate's fields.
            body.fit();
            let mut body = (*body).with_candidate(ctx.fields());
            body.fit();
            (true, body.write())
        }
        DraftBody::JsonError(error) => {
            let mut body = ReadyzJson::error(error).with_candidate(ctx.fields());
            body.fit();
            (true, body.write())
        }
        DraftBody::Text(body) => (false, candidate_text(inner.status, ctx, &body)),
    };
    Rendered {
        status: if inner.status == StatusCode::NOT_FOUND {
            StatusCode::NOT_FOUND
        } else {
            CANDIDATE_STATUS
        },
        json,
        body,
        ready: inner.ready,
    }
}

/// The live answer's text `body` (with `status`) as the candidate's: a line
/// saying it decides nothing, the lines, the disagreement so far.
fn candidate_text(status: StatusCode, ctx: &CandidateContext, body: &str) -> String {
    let would = |ready: bool| if ready { "ready" } else { "not ready" };
    let head = format!(
        "candidate policy: it would answer {} (it decides nothing; the member's readiness, {}, is /readyz)",
        would(status == StatusCode::OK),
        would(ctx.live_ready),
    );
    let tail = format!(
        "disagreement so far: would fail while ready {}s, would pass while unready {}s{}",
        Seconds(ctx.would_fail_while_ready).as_f64(),
        Seconds(ctx.would_pass_while_unready).as_f64(),
        match ctx.disagreeing {
            Some((d, _)) => format!(" (now: {d})"),
            None => String::new(),
        }
    );
    let body = body
        .replace("readyz check failed", "candidate check failed")
        .replace("readyz check passed", "candidate check passed");
    let body = format!("{head}\n{body}{tail}\n");
    if body.len() > MAX_BODY {
        cut(&body, MAX_BODY - 100).into_owned()
    } else {
        body
    }
}

/// `?wait=` that is not a duration of at most [`MAX_WAIT`]; the
/// value as the client sent it is [`shown`], cut and escaped.
pub fn render_bad_wait(e: &DurationError, json: bool) -> Rendered {
    let e = match e {
        DurationError::Syntax(text) => DurationError::Syntax(shown(text)),
        DurationError::TooLong { text, limit } => DurationError::TooLong {
            text: shown(text),
            limit: limit.clone(),
        },
        DurationError::Zero(text) => DurationError::Zero(shown(text)),
    };
    let msg = format!(
        "bad wait: {}; wait=DURATION holds the answer until it changes, at most {} (e.g. wait=5s)",
        e,
        etcd_readiness_policy::text::fmt_duration(MAX_WAIT.as_secs_f64())
    );
    Rendered {
        status: StatusCode::BAD_REQUEST,
        ready: None,
        json,
        body: if json { error_json(&msg) } else { msg + "\n" },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parsing_handles_repeats_encoding_and_flags() {
        let q = ReadyzQuery::parse(
            Some("verbose&exclude=leader&exclude=non%5Flearner&format=json"),
            false,
        );
        assert_eq!(
            q,
            ReadyzQuery {
                verbose: true,
                json: true,
                exclude: vec!["leader".into(), "non_learner".into()],
                policy: PolicyChoice::Live,
                wait: None,
            }
        );
        assert_eq!(
            ReadyzQuery::parse(Some("policy=candidate"), false).policy,
            PolicyChoice::Candidate
        );
        assert_eq!(
            ReadyzQuery::parse(Some("policy=nope"), false).policy,
            PolicyChoice::Unknown("nope".into())
        );
        assert!(!ReadyzQuery::parse(Some("verbose=false"), false).verbose);
        assert!(ReadyzQuery::parse(None, true).json);
        let q = ReadyzQuery::parse(Some("exclude=a%2&exclude=%e2%9c%93&exclude=x+y"), false);
        assert_eq!(q.exclude, ["a%2", "\u{2713}", "x y"]);
    }

    fn verdict() -> Verdict {
        Verdict {
            ready: true,
            reason: None,
            evaluated_at: std::time::SystemTime::UNIX_EPOCH,
            checks: Vec::new(),
        }
    }

    #[test]
    fn echoed_input_never_pushes_a_body_past_max_body() {
        let long = "x".repeat(60_000);
        let many: Vec<String> = (0..5_000).map(|i| format!("c{i}")).collect();
        for exclude in [vec![long.clone()], many] {
            for json in [false, true] {
                let q = ReadyzQuery {
                    verbose: true,
                    json,
                    exclude: exclude.clone(),
                    ..Default::default()
                };
                let r = render_all(&verdict(), None, &q);
                assert!(r.body.len() <= MAX_BODY, "{} bytes", r.body.len());
                assert_eq!(r.status, StatusCode::OK);
            }
        }
        for json in [false, true] {
            let q = ReadyzQuery {
                json,
                ..Default::default()
            };
            let r = render_one(&verdict(), None, &long, &["leader"], &q);
            assert_eq!(r.status, StatusCode::NOT_FOUND);
            assert!(r.body.len() <= MAX_BODY, "{} bytes", r.body.len());
            assert!(r.body.contains("… ("), "{}", r.body);
        }
    }

    /// What a person or a script reads from `?policy=candidate`: the
    /// candidate's lines, what the member really answers, the disagreement,
    /// and always the same status.
    #[test]
    fn the_candidate_answer_says_it_decides_nothing() {
        use etcd_readiness_policy::verdict::{CheckKind, CheckReport};
        let check = |name: &str, state: CheckState, why: &str| CheckReport {
            in_state_for: Duration::from_secs(12),
            since: std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600),
            explanation: why.into(),
            ..CheckReport::new(name, CheckKind::Check, state, &format!("{name}_expr"))
        };
        let failing = Verdict {
            ready: false,
            reason: None,
            evaluated_at: std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_612),
            checks: vec![
                check("leader", CheckState::Pass, ""),
                check(
                    "not_leader",
                    CheckState::Fail,
                    "!leader is false (leader = true)",
                ),
            ],
        };
        let ctx = CandidateContext {
            live_ready: true,
            would_fail_while_ready: Duration::from_millis(12_250),
            would_pass_while_unready: Duration::ZERO,
            disagreeing: Some(("would fail while ready", 1_767_225_600.0)),
        };
        let plain = render_candidate(&failing, None, None, &ctx, &ReadyzQuery::default());
        assert_eq!(plain.status, CANDIDATE_STATUS);
        insta::assert_snapshot!("readyz_candidate_plain", plain.body);
        let q = ReadyzQuery {
            json: true,
            ..Default::default()
        };
        let json = render_candidate(&failing, None, None, &ctx, &q);
        assert_eq!(json.status, CANDIDATE_STATUS);
        let v: serde_json::Value = serde_json::from_str(&json.body).unwrap();
        insta::assert_snapshot!(
            "readyz_candidate_json",
            serde_json::to_string_pretty(&v).unwrap()
        );
        // Passing, the status is the same: only the body says.
        let passing = Verdict {
            ready: true,
            checks: vec![check("leader", CheckState::Pass, "")],
            ..failing.clone()
        };
        let r = render_candidate(&passing, None, None, &ctx, &ReadyzQuery::default());
        assert_eq!(r.status, CANDIDATE_STATUS);
        assert!(
            r.body
                .starts_with("candidate policy: it would answer ready"),
            "{}",
            r.body
        );
        let one = render_candidate(
            &failing,
            None,
            Some(("nope", &["leader", "not_leader"])),
            &ctx,
            &ReadyzQuery::default(),
        );
        assert_eq!(one.status, StatusCode::NOT_FOUND, "{}", one.body);
        assert_eq!(
            render_unknown_policy("next", false).body,
            "unknown policy \"next\": use policy=live (the default) or policy=candidate\n"
        );
    }
}
