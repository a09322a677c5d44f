//! The verdict: what the evaluator concluded about readiness at one instant,
//! with one report per check. It is built by the evaluation loop, published
//! atomically, and only read by the HTTP surface and metrics.

use std::time::{Duration, SystemTime};

use serde::Serialize;

/// Outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckState {
    Pass,
    Fail,
    Unknown,
}

impl CheckState {
    pub const ALL: [CheckState; 3] = [CheckState::Pass, CheckState::Fail, CheckState::Unknown];

    pub fn as_str(self) -> &'static str {
        match self {
            CheckState::Pass => "pass",
            CheckState::Fail => "fail",
            CheckState::Unknown => "unknown",
        }
    }
}

/// A `check` makes the member unready when it does not pass; a `warn` never does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckKind {
    Check,
    Warn,
}

impl CheckKind {
    /// The keyword that declares it, as logs, labels, JSON and pages spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckKind::Check => "check",
            CheckKind::Warn => "warn",
        }
    }
}

/// A signal value used by a check, as shown to users.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UsedSignal {
    pub name: String,
    /// `None` when the signal is unknown.
    pub value: Option<serde_json::Value>,
}

/// One check's outcome with its explanation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckReport {
    pub name: String,
    pub kind: CheckKind,
    pub state: CheckState,
    /// How long the check has been in `state`.
    #[serde(serialize_with = "ser_secs")]
    pub in_state_for: Duration,
    /// Wall-clock time the check entered `state`.
    #[serde(serialize_with = "ser_unix")]
    pub since: SystemTime,
    /// The expression is not true but the hold-down (`for`) keeps the check passing.
    pub held: bool,
    /// While `held`: how much of the hold-down is left before the check fails.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt_secs"
    )]
    pub hold_left: Option<Duration>,
    /// The expression is true but the recovery hold (`recover`) keeps the
    /// check failing until it has been true for the whole hold.
    pub recovering: bool,
    /// While `recovering`: how much of the recovery hold is left before the
    /// check passes, if the expression stays true.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt_secs"
    )]
    pub recover_left: Option<Duration>,
    /// While `recovering`: how long the expression has been true without a break.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt_secs"
    )]
    pub true_for: Option<Duration>,
    /// The policy text of the check's expression.
    pub expr: String,
    /// Empty when passing (and not held); `recovering: true for 12s of 30s`
    /// while recovering; otherwise the failing terms with values,
    /// e.g. `qget_ms < 1000 is false (qget_ms = 1432)`.
    pub explanation: String,
    pub signals: Vec<UsedSignal>,
}

impl CheckReport {
    /// Check `name` (`expr` its expression's text) in `state` since the
    /// Unix epoch, for no time yet, nothing held, without explanation or
    /// signals: the one base every hand-made report (the tests' fixtures)
    /// sets its other fields on, `CheckReport { explanation, ..CheckReport::new(…) }`.
    pub fn new(name: &str, kind: CheckKind, state: CheckState, expr: &str) -> CheckReport {
        CheckReport {
            name: name.to_string(),
            kind,
            state,
            in_state_for: Duration::ZERO,
            since: SystemTime::UNIX_EPOCH,
            held: false,
            hold_left: None,
            recovering: false,
            recover_left: None,
            true_for: None,
            expr: expr.to_string(),
            explanation: String::new(),
            signals: Vec::new(),
        }
    }
}

/// The readiness verdict at one instant.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub ready: bool,
    /// Why the verdict is not ready regardless of checks, e.g. `starting`.
    pub reason: Option<String>,
    #[serde(serialize_with = "ser_unix")]
    pub evaluated_at: SystemTime,
    pub checks: Vec<CheckReport>,
}

impl Verdict {
    /// The verdict before the first sample round has finished.
    pub fn starting(now: SystemTime) -> Verdict {
        Verdict {
            ready: false,
            reason: Some("starting: the first sample round has not finished".to_string()),
            evaluated_at: now,
            checks: Vec::new(),
        }
    }

    /// Readiness from the checks alone: every non-warn check passes.
    pub fn ready_from(checks: &[CheckReport]) -> bool {
        checks
            .iter()
            .all(|c| c.kind == CheckKind::Warn || c.state == CheckState::Pass)
    }
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(seconds(*d))
}

fn ser_opt_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => ser_secs(d, s),
        None => s.serialize_none(),
    }
}

fn ser_unix<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(unix_seconds(*t))
}

/// `t` as Unix seconds with millisecond precision, as every JSON body and
/// timestamp metric of the exporter shows time; 0 before 1970. The one
/// place wall-clock times become numbers.
pub fn unix_seconds(t: SystemTime) -> f64 {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    to_millisecond(secs)
}

/// `d` in seconds with millisecond precision, as every JSON body shows a
/// duration: the one place durations become numbers.
pub fn seconds(d: Duration) -> f64 {
    to_millisecond(d.as_secs_f64())
}

fn to_millisecond(secs: f64) -> f64 {
    (secs * 1000.0).round() / 1000.0
}
