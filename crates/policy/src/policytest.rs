//! `etcd-readiness-exporter test FILE...`: policy unit tests in the spirit of
//! `promtool test rules`. A YAML file names a policy and gives, per test case,
//! input series per signal at a fixed step and expectations at given times:
//! ready or not, which checks do not pass, and optionally explanations.
//!
//! Series notation: whitespace-separated samples, one per step. `_` is a
//! missing sample (the source failed), `VxN` is V repeated N times, booleans
//! are `true`/`false` or `1`/`0`, durations are written `30s` (or a plain
//! number of seconds). After its last sample a series is missing.
//!
//! Each case runs on the one [`Simulation`] `replay` runs on too: the
//! series' samples recorded at their steps into a signal store and
//! evaluated by `serve`'s evaluator on a virtual clock that starts at the
//! caller's `origin` (any instant) and at the Unix epoch.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use crate::policy::Policy;
use crate::policy::diag::did_you_mean;
use crate::signals::{Catalogue, SignalId, SignalType, Value};
use crate::simulation::{Clock, Sample, Simulation, Start, Step};
use crate::verdict::CheckState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestFile {
    /// Path of the policy, relative to the test file.
    pub policy: PathBuf,
    /// Time between samples, e.g. `1s` (default).
    #[serde(default)]
    pub step: Option<String>,
    pub tests: Vec<TestCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    pub name: String,
    /// Signal name → series.
    #[serde(default)]
    pub signals: BTreeMap<String, String>,
    pub expect: Vec<Expectation>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    /// When, e.g. `3s`; a multiple of the step.
    pub at: String,
    pub ready: Option<bool>,
    /// Checks (including warnings) that do not pass, in any order. Omit to not
    /// check; `[]` means all pass.
    pub failing: Option<Vec<String>>,
    /// Check → exact explanation text.
    #[serde(default)]
    pub explanations: BTreeMap<String, String>,
}

/// Errors that stop a test file from running at all.
#[derive(Debug, thiserror::Error)]
pub enum TestFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid test file: {0}")]
    Yaml(crate::yaml::YamlError),
    #[error("{0}")]
    Policy(#[from] crate::policy::Diagnostics),
    #[error("{path}: {problem}")]
    Invalid { path: String, problem: FileProblem },
}

/// What is wrong inside a test file that parsed.
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    #[error(transparent)]
    Step(TimeError),
    #[error("step must be longer than zero")]
    ZeroStep,
    #[error("step `{0}` is longer than the limit of 24h")]
    StepTooLong(String),
    #[error("test `{name}`: {problem}")]
    Case { name: String, problem: CaseProblem },
}

/// What is wrong with one test case.
#[derive(Debug, thiserror::Error)]
pub enum CaseProblem {
    #[error("unknown signal `{name}`{}", hint(.suggestion))]
    UnknownSignal {
        name: String,
        suggestion: Option<String>,
    },
    #[error("signal `{name}`: {problem}")]
    Series {
        name: String,
        problem: SeriesProblem,
    },
    #[error(transparent)]
    At(#[from] TimeError),
    #[error("`at: {0}` is more than {MAX_STEPS} steps after the start")]
    TooManySteps(String),
    #[error("`at: {0}` is not a multiple of the step")]
    NotAMultiple(String),
    #[error("unknown check `{name}` in the expectations{}", hint(.suggestion))]
    UnknownCheck {
        name: String,
        suggestion: Option<String>,
    },
    #[error("the test file simulates more than {MAX_FILE_STEPS} steps in all")]
    FileTooLong,
    /// A broken invariant: `at` and `step` are bounded so the times exist.
    #[error("{0}")]
    Time(#[from] crate::simulation::OutOfRange),
}

/// `; did you mean `x`?` where there is a close name.
fn hint(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map_or(String::new(), |s| format!("; did you mean `{s}`?"))
}

/// What is wrong with a series.
#[derive(Debug, thiserror::Error)]
pub enum SeriesProblem {
    #[error("bad repeat count in `{0}`")]
    RepeatCount(String),
    #[error("series longer than 100000 samples")]
    TooLong,
    #[error("`{value}` is not a {ty}")]
    NotA { value: String, ty: SignalType },
}

/// A `step` or `at` that is not a usable duration.
#[derive(Debug, thiserror::Error)]
pub enum TimeError {
    #[error("{what} `{text}` is not a duration like `1s`, `250ms` or `1m30s`")]
    Syntax { what: &'static str, text: String },
    #[error("{what} `{text}` is too long")]
    TooLong { what: &'static str, text: String },
}

/// The outcome of one file: the failures, each a readable block of text.
#[derive(Debug, Default)]
pub struct FileOutcome {
    pub cases: usize,
    pub expectations: usize,
    pub failures: Vec<String>,
}

/// A series: a sample per step, `None` where the source failed.
fn parse_series(text: &str, ty: SignalType) -> Result<Vec<Option<Value>>, SeriesProblem> {
    let mut out = Vec::new();
    for tok in text.split_whitespace() {
        let (val, times) = match tok.rsplit_once('x') {
            Some((v, n))
                if !v.is_empty() && !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) =>
            {
                let n: usize = n
                    .parse()
                    .map_err(|_| SeriesProblem::RepeatCount(tok.to_string()))?;
                (v, n)
            }
            _ => (tok, 1),
        };
        if times > 100_000 || out.len() + times > 100_000 {
            return Err(SeriesProblem::TooLong);
        }
        let s = if val == "_" {
            None
        } else {
            Some(parse_value(val, ty).ok_or_else(|| SeriesProblem::NotA {
                value: val.to_string(),
                ty,
            })?)
        };
        out.extend(std::iter::repeat_n(s, times));
    }
    Ok(out)
}

fn parse_value(v: &str, ty: SignalType) -> Option<Value> {
    match ty {
        SignalType::Bool => match v {
            "true" | "1" => Some(Value::Bool(true)),
            "false" | "0" => Some(Value::Bool(false)),
            _ => None,
        },
        SignalType::Number => v
            .replace('_', "")
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .map(Value::Num),
        SignalType::Duration => {
            let secs = if v.ends_with(|c: char| c.is_ascii_alphabetic()) {
                crate::duration::parse_secs(v)
            } else {
                v.parse::<f64>().ok()
            };
            secs.filter(|s| s.is_finite()).map(Value::Num)
        }
    }
}

fn parse_time(s: &str, what: &'static str) -> Result<Duration, TimeError> {
    use crate::duration::DurationError;
    let text = s.to_string();
    crate::duration::parse(s, Duration::MAX).map_err(|e| match e {
        DurationError::Syntax(_) => TimeError::Syntax { what, text },
        // Zero is within these bounds: only a length is refused.
        DurationError::TooLong { .. } | DurationError::Zero(_) => TimeError::TooLong { what, text },
    })
}

/// Largest accepted test file.
pub const MAX_TEST_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Most steps simulated for one test case (`at` divided by `step`), the same
/// bound as for a series.
pub const MAX_STEPS: u64 = 100_000;
/// Most steps simulated for one test file, all cases together.
pub const MAX_FILE_STEPS: u64 = 1_000_000;
/// Longest accepted `step`.
pub const MAX_STEP_SECS: f64 = 24.0 * 3600.0;

/// Run the test file `text` (read from `path`, which is used in messages and
/// to resolve the policy's path) against `catalogue`; `read_policy` reads the
/// policy it names. Pure: the caller reads the files (the binary's `test`
/// command with its bounded reader, the fuzz target from memory); `origin`
/// is any instant, where the virtual clock starts.
pub fn run_text(
    path: &Path,
    text: &str,
    catalogue: &Catalogue,
    origin: Instant,
    read_policy: impl FnOnce(&Path) -> std::io::Result<String>,
) -> Result<FileOutcome, TestFileError> {
    let shown = path.display().to_string();
    let file: TestFile = crate::yaml::from_str(&shown, text).map_err(TestFileError::Yaml)?;
    let invalid = |problem: FileProblem| TestFileError::Invalid {
        path: shown.clone(),
        problem,
    };
    let policy_path = path.parent().unwrap_or(Path::new(".")).join(&file.policy);
    let policy_shown = policy_path.display().to_string();
    let src = read_policy(&policy_path).map_err(|source| TestFileError::Read {
        path: policy_shown.clone(),
        source,
    })?;
    let policy = Arc::new(Policy::compile(&policy_shown, &src, catalogue)?);
    let step = parse_time(file.step.as_deref().unwrap_or("1s"), "step")
        .map_err(|e| invalid(FileProblem::Step(e)))?;
    if step.is_zero() {
        return Err(invalid(FileProblem::ZeroStep));
    }
    if step.as_secs_f64() > MAX_STEP_SECS {
        return Err(invalid(FileProblem::StepTooLong(
            file.step.clone().unwrap_or_default(),
        )));
    }
    let mut outcome = FileOutcome::default();
    let clock = Clock {
        origin,
        wall: SystemTime::UNIX_EPOCH,
        step,
    };
    let mut budget = MAX_FILE_STEPS;
    for case in &file.tests {
        outcome.cases += 1;
        outcome.expectations += case.expect.len();
        let failures =
            run_case(&policy, catalogue, clock, case, &mut budget).map_err(|problem| {
                invalid(FileProblem::Case {
                    name: case.name.clone(),
                    problem,
                })
            })?;
        for f in failures {
            outcome
                .failures
                .push(format!("{shown}: test `{}` {f}", case.name));
        }
    }
    Ok(outcome)
}

/// A case's series and expectations, checked against the policy and the
/// catalogue.
struct Case<'c> {
    series: Vec<(SignalId, Vec<Option<Value>>)>,
    /// (step, expectation), in time order.
    expects: Vec<(u64, &'c Expectation)>,
}

fn parse_case<'c>(
    policy: &Policy,
    catalogue: &Catalogue,
    step: Duration,
    case: &'c TestCase,
) -> Result<Case<'c>, CaseProblem> {
    let mut series = Vec::new();
    for (name, text) in &case.signals {
        let id = catalogue
            .lookup(name)
            .ok_or_else(|| CaseProblem::UnknownSignal {
                name: name.clone(),
                suggestion: did_you_mean(name, catalogue.names()).map(str::to_string),
            })?;
        let samples =
            parse_series(text, catalogue.get(id).ty).map_err(|problem| CaseProblem::Series {
                name: name.clone(),
                problem,
            })?;
        series.push((id, samples));
    }
    let check_names: Vec<&str> = policy.checks().iter().map(|c| c.name.as_str()).collect();
    let mut expects = Vec::new();
    for e in &case.expect {
        let at = parse_time(&e.at, "`at`")?;
        let ratio = at.as_secs_f64() / step.as_secs_f64();
        if ratio.round() > MAX_STEPS as f64 {
            return Err(CaseProblem::TooManySteps(e.at.clone()));
        }
        if (ratio - ratio.round()).abs() > 1e-9 {
            return Err(CaseProblem::NotAMultiple(e.at.clone()));
        }
        for name in e.failing.iter().flatten().chain(e.explanations.keys()) {
            if !check_names.contains(&name.as_str()) {
                return Err(CaseProblem::UnknownCheck {
                    name: name.clone(),
                    suggestion: did_you_mean(name, check_names.iter().copied()).map(str::to_string),
                });
            }
        }
        expects.push((ratio.round() as u64, e));
    }
    expects.sort_by_key(|(i, _)| *i);
    Ok(Case { series, expects })
}

/// Run one case on the [`Simulation`]: every step up to the last
/// expectation, each series' sample recorded at its step (missing after
/// its end), each expectation compared at its step.
fn run_case(
    policy: &Arc<Policy>,
    catalogue: &Catalogue,
    clock: Clock,
    case: &TestCase,
    budget: &mut u64,
) -> Result<Vec<String>, CaseProblem> {
    let Case { series, expects } = parse_case(policy, catalogue, clock.step, case)?;
    let last = expects.last().map_or(0, |(i, _)| *i);
    *budget = budget
        .checked_sub(last + 1)
        .ok_or(CaseProblem::FileTooLong)?;
    let missing: Arc<str> = Arc::from("no sample in the test series");
    let mut sim = Simulation::new(policy.clone(), catalogue, clock, Start::Fresh);
    let mut failures = Vec::new();
    let mut expects = expects.into_iter().peekable();
    for i in 0..=last {
        let samples = series.iter().map(|(id, samples)| {
            let sample = match samples.get(i as usize) {
                Some(Some(v)) => Sample::Value(*v),
                Some(None) | None => Sample::Failed(&missing),
            };
            (*id, sample)
        });
        // `last` ≤ MAX_STEPS and `step` ≤ MAX_STEP_SECS, so these times
        // exist; the error only turns a broken invariant into a message.
        let step = sim.step(i, samples)?;
        while let Some((_, e)) = expects.next_if(|(at, _)| *at == i) {
            failures.extend(compare(e, &step));
        }
    }
    Ok(failures)
}

/// `e` against the simulation at its step: `None` when it holds, else the
/// block of text that says how not, with what was not passing then.
fn compare(e: &Expectation, step: &Step) -> Option<String> {
    let reports = step.reports();
    let ready = step.ready();
    let mut problems = Vec::new();
    if let Some(want) = e.ready
        && want != ready
    {
        problems.push(format!("  ready: expected {want}, got {ready}"));
    }
    let got: BTreeSet<&str> = reports
        .iter()
        .filter(|r| r.state != CheckState::Pass)
        .map(|r| r.name.as_str())
        .collect();
    if let Some(want) = &e.failing {
        let want: BTreeSet<&str> = want.iter().map(String::as_str).collect();
        if want != got {
            problems.push(format!("  failing: expected {want:?}, got {got:?}"));
        }
    }
    for (name, want) in &e.explanations {
        let got = reports
            .iter()
            .find(|r| &r.name == name)
            .map_or("", |r| r.explanation.as_str());
        if got != want {
            problems.push(format!(
                "  explanation of `{name}`:\n    expected: {want}\n    got:      {got}"
            ));
        }
    }
    if problems.is_empty() {
        return None;
    }
    let context: Vec<String> = reports
        .iter()
        .filter(|r| r.state != CheckState::Pass)
        .map(|r| format!("    [-]{} {}: {}", r.name, r.state.as_str(), r.explanation))
        .collect();
    let mut block = format!("at {}:\n{}", e.at, problems.join("\n"));
    if !context.is_empty() {
        block.push_str(&format!(
            "\n  not passing at that time:\n{}",
            context.join("\n")
        ));
    }
    Some(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_notation() {
        let s = parse_series("20 20 1500x3 _ 20", SignalType::Number).unwrap();
        let v: Vec<Option<f64>> = s.iter().map(|s| s.map(Value::as_f64)).collect();
        assert_eq!(
            v,
            [
                Some(20.0),
                Some(20.0),
                Some(1500.0),
                Some(1500.0),
                Some(1500.0),
                None,
                Some(20.0)
            ]
        );
        let b = parse_series("true 0 1x2", SignalType::Bool).unwrap();
        assert_eq!(b.len(), 4);
        assert_eq!(b[1], Some(Value::Bool(false)));
        assert_eq!(
            parse_series("30s 1m", SignalType::Duration).unwrap()[1],
            Some(Value::Num(60.0))
        );
        assert!(parse_series("maybe", SignalType::Bool).is_err());
        assert!(parse_series("NaN inf 1e999", SignalType::Number).is_err());
        assert!(parse_series("1e999s", SignalType::Duration).is_err());
        assert!(parse_series("1s", SignalType::Number).is_err());
    }

    fn run(step: &str, at: &str) -> String {
        let yaml = format!(
            "policy: p.policy\nstep: \"{step}\"\ntests:\n  - name: t\n    signals: {{leader: \"true\"}}\n    expect:\n      - {{at: \"{at}\", ready: true}}\n"
        );
        let c = Catalogue::builtin();
        match run_text(Path::new("t.yaml"), &yaml, &c, Instant::now(), |_| {
            Ok("leader".into())
        }) {
            Ok(o) => format!("ok, {} failures", o.failures.len()),
            Err(e) => e.to_string(),
        }
    }

    /// Regression: `Duration::from_secs_f64` panicked on a huge `step` or `at`,
    /// `step * i` could overflow, and a huge `at` simulated billions of steps.
    #[test]
    fn regression_absurd_steps_and_times_are_errors_not_panics_or_wedges() {
        assert_eq!(run("1s", "0s"), "ok, 0 failures");
        assert_eq!(run("1s", "2s"), "ok, 1 failures");
        assert_eq!(
            run("99999999999999999999h", "0s"),
            "t.yaml: step `99999999999999999999h` is too long"
        );
        assert_eq!(
            run("1000h", "0s"),
            "t.yaml: step `1000h` is longer than the limit of 24h"
        );
        assert_eq!(
            run("1s", "1e30h"),
            "t.yaml: test `t`: `at` `1e30h` is not a duration like `1s`, `250ms` or `1m30s`"
        );
        assert_eq!(
            run("1s", "1000000h"),
            "t.yaml: test `t`: `at: 1000000h` is more than 100000 steps after the start"
        );
        assert_eq!(
            run("0.000001ms", "1s"),
            "t.yaml: test `t`: `at: 1s` is more than 100000 steps after the start"
        );
        assert_eq!(
            run("-1s", "0s"),
            "t.yaml: step `-1s` is not a duration like `1s`, `250ms` or `1m30s`"
        );
        assert_eq!(
            run("NaNs", "0s"),
            "t.yaml: step `NaNs` is not a duration like `1s`, `250ms` or `1m30s`"
        );
    }

    #[test]
    fn a_file_simulates_at_most_a_million_steps_in_all() {
        let case = "  - name: t\n    expect:\n      - {at: 99999s}\n";
        let yaml = format!("policy: p.policy\ntests:\n{}", case.repeat(11));
        let c = Catalogue::builtin();
        let e = run_text(Path::new("t.yaml"), &yaml, &c, Instant::now(), |_| {
            Ok("leader".into())
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.yaml: test `t`: the test file simulates more than 1000000 steps in all"
        );
    }
}
