//! The conformance table of the policy language: `expression, signals ->
//! result`, run through the real parser, checker and evaluator. Every row is
//! a promise made in docs/policy-language.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_readiness_policy::policy::{Evaluator, Policy};
use etcd_readiness_policy::signals::{Catalogue, Reading, Value};
use etcd_readiness_policy::verdict::CheckState;

/// Signal values for a row: `name=value` pairs separated by spaces; `_`
/// marks a failed sample, a missing name was never sampled.
fn readings(catalogue: &Catalogue, spec: &str) -> Vec<Reading> {
    let mut out = vec![Reading::NEVER; catalogue.len()];
    for pair in spec.split_whitespace() {
        let (name, v) = pair.split_once('=').expect("name=value");
        let id = catalogue
            .lookup(name)
            .unwrap_or_else(|| panic!("no signal {name}"));
        out[id.index()] = match v {
            "_" => Reading::failed("request timed out", Duration::from_millis(3200)),
            "true" => Reading::known(Value::Bool(true)),
            "false" => Reading::known(Value::Bool(false)),
            n => {
                let secs = n.strip_suffix('s').map(|s| s.parse::<f64>().unwrap());
                Reading::known(Value::Num(secs.unwrap_or_else(|| n.parse().unwrap())))
            }
        };
    }
    out
}

/// Evaluate `expr` as a check; `true` / `false` / `unknown`.
fn eval(expr: &str, spec: &str) -> &'static str {
    let c = Catalogue::builtin();
    let p =
        Policy::compile("row", &format!("check t: {expr}"), &c).unwrap_or_else(|d| panic!("{d}"));
    let now = Instant::now();
    let mut ev = Evaluator::new(Arc::new(p), now);
    ev.evaluate(&readings(&c, spec), now);
    match ev.states().next().unwrap().2 {
        CheckState::Pass => "true",
        CheckState::Fail => "false",
        CheckState::Unknown => "unknown",
    }
}

const TABLE: &[(&str, &str, &str)] = &[
    // literals and signals
    ("true", "", "true"),
    ("false", "", "false"),
    ("leader", "leader=true", "true"),
    ("leader", "leader=false", "false"),
    ("leader", "", "unknown"),
    ("leader", "leader=_", "unknown"),
    // Kleene AND
    ("leader && etcd_up", "leader=true etcd_up=true", "true"),
    ("leader && etcd_up", "leader=true etcd_up=false", "false"),
    ("leader && etcd_up", "leader=true", "unknown"),
    ("leader && etcd_up", "leader=false", "false"),
    ("leader && etcd_up", "etcd_up=false", "false"),
    ("leader && etcd_up", "", "unknown"),
    // Kleene OR
    ("leader || etcd_up", "leader=false etcd_up=false", "false"),
    ("leader || etcd_up", "leader=false etcd_up=true", "true"),
    ("leader || etcd_up", "leader=false", "unknown"),
    ("leader || etcd_up", "etcd_up=true", "true"),
    ("leader || etcd_up", "leader=true", "true"),
    ("leader || etcd_up", "", "unknown"),
    // NOT
    ("!leader", "leader=true", "false"),
    ("!leader", "leader=false", "true"),
    ("!leader", "", "unknown"),
    // comparisons
    ("qget_ms < 1000", "qget_ms=999", "true"),
    ("qget_ms < 1000", "qget_ms=1000", "false"),
    ("qget_ms <= 1000", "qget_ms=1000", "true"),
    ("qget_ms > 5", "qget_ms=6", "true"),
    ("qget_ms >= 6", "qget_ms=6", "true"),
    ("qget_ms == 6", "qget_ms=6", "true"),
    ("qget_ms != 6", "qget_ms=6", "false"),
    ("qget_ms < 1000", "qget_ms=_", "unknown"),
    ("qget_ms < 1000", "", "unknown"),
    ("leader == true", "leader=true", "true"),
    ("leader != etcd_up", "leader=true etcd_up=false", "true"),
    ("leader == etcd_up", "leader=true", "unknown"),
    // arithmetic
    (
        "revision - rev_lag == 900",
        "revision=1000 rev_lag=100",
        "true",
    ),
    ("qget_ms + sget_ms < 10", "qget_ms=4 sget_ms=5", "true"),
    ("qget_ms * 2 == 8", "qget_ms=4", "true"),
    ("qget_ms / 4 == 1", "qget_ms=4", "true"),
    ("-qget_ms < 0", "qget_ms=4", "true"),
    ("qget_ms + sget_ms < 10", "qget_ms=4", "unknown"),
    ("revision / rev_lag > 1", "revision=10 rev_lag=0", "unknown"),
    (
        "revision / rev_lag > 1 || true",
        "revision=10 rev_lag=0",
        "true",
    ),
    ("2 + 3 * 4 == 14", "", "true"),
    ("(2 + 3) * 4 == 20", "", "true"),
    ("10 - 4 - 3 == 3", "", "true"),
    // durations and sizes
    ("snapshot_age < 1h", "snapshot_age=3599s", "true"),
    ("snapshot_age < 1h", "snapshot_age=3600s", "false"),
    ("snapshot_age < 250ms * 4", "snapshot_age=0.5s", "true"),
    ("snapshot_age / 1m == 2", "snapshot_age=120s", "true"),
    ("1m == 60s && 1s == 1000ms && 1h == 60m", "", "true"),
    ("db_size_bytes < 2GiB", "db_size_bytes=2147483647", "true"),
    ("db_size_bytes < 2GiB", "db_size_bytes=2147483648", "false"),
    (
        "5_000 == 5000 && 1e3 == 1000 && 1KB == 1000 && 1KiB == 1024",
        "",
        "true",
    ),
    // coalesce
    ("owner_ok ?? true", "", "true"),
    ("owner_ok ?? true", "owner_ok=_", "true"),
    ("owner_ok ?? true", "owner_ok=false", "false"),
    ("qget_ms ?? 0 < 1000", "", "true"),
    ("qget_ms ?? 5000 < 1000", "qget_ms=_", "false"),
    ("owner_ok ?? leader", "", "unknown"),
    // functions
    ("known(qget_ms)", "qget_ms=3", "true"),
    ("known(qget_ms)", "qget_ms=_", "false"),
    ("known(qget_ms)", "", "false"),
    ("known(leader && etcd_up)", "leader=false", "true"),
    ("age(leader) < 1s", "leader=true", "true"),
    ("age(leader) < 1s", "", "unknown"),
    ("min(qget_ms, sget_ms) == 2", "qget_ms=2 sget_ms=9", "true"),
    ("max(qget_ms, sget_ms) == 9", "qget_ms=2 sget_ms=9", "true"),
    ("max(qget_ms, sget_ms) == 9", "qget_ms=2", "unknown"),
    // precedence: && binds tighter than ||, comparison tighter than &&
    ("true || false && false", "", "true"),
    ("!false && true", "", "true"),
    ("!(true && false)", "", "true"),
];

#[test]
fn conformance_table() {
    let mut failures = Vec::new();
    for (expr, spec, want) in TABLE {
        let got = eval(expr, spec);
        if got != *want {
            failures.push(format!("{expr}  [{spec}]  expected {want}, got {got}"));
        }
    }
    assert!(
        failures.is_empty(),
        "conformance failures:\n{}",
        failures.join("\n")
    );
}

#[test]
fn age_reads_time_since_last_good_sample_even_after_a_failure() {
    let c = Catalogue::builtin();
    let p = Policy::compile("row", "check t: age(qget_ms) < 5s", &c).unwrap();
    let now = Instant::now();
    let mut ev = Evaluator::new(Arc::new(p), now);
    let mut r = vec![Reading::NEVER; c.len()];
    let mut failed = Reading::failed("timeout", Duration::from_secs(1));
    failed.last_good_age = Some(Duration::from_secs(4));
    r[c.id("qget_ms").index()] = failed.clone();
    ev.evaluate(&r, now);
    assert_eq!(ev.states().next().unwrap().2, CheckState::Pass);
    failed.last_good_age = Some(Duration::from_secs(6));
    r[c.id("qget_ms").index()] = failed;
    ev.evaluate(&r, now);
    assert_eq!(ev.states().next().unwrap().2, CheckState::Fail);
}

/// Timed rows: a check on `leader`, its value at each evaluation (`T`, `F`,
/// or `U` for unknown) at whole seconds, and the check's state after each
/// one (`p`ass, `f`ail, `u`nknown). The evaluator starts at 0s.
const TIMELINE: &[(&str, &str, &str)] = &[
    // No hold: passes at its first true evaluation.
    ("leader", "0:T", "p"),
    // A recovery hold applies from the start: true for 3s before passing.
    ("leader recover 3s", "0:T 1:T 2:T 3:T", "f f f p"),
    // Evaluations need not fall on the boundary: the first at or after it passes.
    ("leader recover 3s", "0:T 2:T 4:T", "f f p"),
    // Unknown breaks the run like false does: the hold restarts at 2s.
    ("leader recover 3s", "0:T 1:U 2:T 4:T 5:T", "f u f f p"),
    ("leader recover 3s", "0:T 1:F 2:T 4:T 5:T", "f f f f p"),
    // Unknown from the start: the hold counts from the first true.
    ("leader recover 3s", "0:U 1:U 2:T 4:T 5:T", "u u f f p"),
    // After passing, the first failure re-arms the hold.
    (
        "leader recover 3s",
        "0:T 3:T 4:F 5:T 7:T 8:T",
        "f p f f f p",
    ),
    // Passing, a true check stays passing: the hold is for the rise only.
    ("leader recover 3s", "0:T 3:T 10:T 100:T", "f p p p"),
    // With `for`: a blip shorter than the hold-down never fails, so it needs no recovery.
    ("leader for 2s recover 3s", "0:T 3:T 4:F 5:T", "f p p p"),
    // A fall past the hold-down fails, and the rise then waits for `recover`.
    (
        "leader for 2s recover 3s",
        "0:T 3:T 4:F 5:F 6:F 7:T 9:T 10:T",
        "f p p p f f f p",
    ),
    // Unknown while held passing stays held; past the hold-down it is unknown; then recovering.
    (
        "leader for 2s recover 3s",
        "0:T 3:T 4:U 5:U 6:U 7:T 10:T",
        "f p p p u f p",
    ),
    // The clauses in the other order mean the same.
    (
        "leader recover 3s for 2s",
        "0:T 3:T 4:F 5:F 6:F 7:T 9:T 10:T",
        "f p p p f f f p",
    ),
    // A hold-down alone gives no grace before the first pass (unchanged).
    ("leader for 1h", "0:F 1:T", "f p"),
];

#[test]
fn conformance_timeline() {
    let c = Catalogue::builtin();
    let leader = c.id("leader").index();
    let mut failures = Vec::new();
    for (check, series, want) in TIMELINE {
        let p = Policy::compile("row", &format!("check t: {check}"), &c)
            .unwrap_or_else(|d| panic!("{d}"));
        let t0 = Instant::now();
        let mut ev = Evaluator::new(Arc::new(p), t0);
        let mut r = vec![Reading::NEVER; c.len()];
        let mut got = Vec::new();
        for sample in series.split_whitespace() {
            let (at, v) = sample.split_once(':').expect("SECS:T|F|U");
            r[leader] = match v {
                "T" => Reading::known(Value::Bool(true)),
                "F" => Reading::known(Value::Bool(false)),
                _ => Reading::failed("request timed out", Duration::ZERO),
            };
            ev.evaluate(&r, t0 + Duration::from_secs(at.parse().unwrap()));
            got.push(match ev.states().next().unwrap().2 {
                CheckState::Pass => "p",
                CheckState::Fail => "f",
                CheckState::Unknown => "u",
            });
        }
        let got = got.join(" ");
        if got != *want {
            failures.push(format!("{check}  [{series}]  expected {want}, got {got}"));
        }
    }
    assert!(
        failures.is_empty(),
        "timeline conformance failures:\n{}",
        failures.join("\n")
    );
}
