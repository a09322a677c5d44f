//! The evaluator over time: hold-down (`for`) timing, since-when, state kept
//! across policy replacement, explanations of failing terms, and readiness
//! with warnings. Time is virtual (Instants built by the test).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use etcd_readiness_policy::policy::{Evaluator, Policy, limits};
use etcd_readiness_policy::signals::{Catalogue, Reading, Value};
use etcd_readiness_policy::verdict::CheckState;

struct World {
    c: Catalogue,
    r: Vec<Reading>,
    t0: Instant,
}

impl World {
    fn new() -> Self {
        let c = Catalogue::builtin();
        let r = vec![Reading::NEVER; c.len()];
        World {
            c,
            r,
            t0: Instant::now(),
        }
    }
    fn set(&mut self, name: &str, v: Value) {
        let id = self.c.id(name);
        self.r[id.index()] = Reading::known(v);
    }
    fn fail(&mut self, name: &str, err: &str, ago: Duration) {
        let id = self.c.id(name);
        self.r[id.index()] = Reading::failed(err, ago);
    }
    fn at(&self, secs: f64) -> Instant {
        self.t0 + Duration::from_secs_f64(secs)
    }
    fn policy(&self, src: &str) -> Arc<Policy> {
        Arc::new(Policy::compile("t.policy", src, &self.c).unwrap_or_else(|d| panic!("{d}")))
    }
}

fn state(ev: &Evaluator, name: &str) -> CheckState {
    ev.states().find(|(n, _, _)| *n == name).unwrap().2
}

#[test]
fn hold_down_keeps_a_passing_check_passing_for_its_duration_only() {
    let mut w = World::new();
    let mut ev = Evaluator::new(w.policy("check read: qget_ms < 1000 for 10s"), w.t0);
    w.set("qget_ms", Value::Num(5.0));
    ev.evaluate(&w.r, w.at(0.0));
    assert_eq!(state(&ev, "read"), CheckState::Pass);
    w.set("qget_ms", Value::Num(2000.0));
    for t in [1.0, 5.0, 10.9] {
        ev.evaluate(&w.r, w.at(t));
        assert_eq!(state(&ev, "read"), CheckState::Pass, "held at {t}s");
        assert!(ev.ready());
    }
    let report = ev.report(&w.r, w.at(10.9), SystemTime::now());
    assert!(report[0].held);
    assert_eq!(
        report[0].explanation,
        "qget_ms < 1000 is false (qget_ms = 2000) (held passing by `for 10s`, 100ms left)"
    );
    ev.evaluate(&w.r, w.at(11.0));
    assert_eq!(state(&ev, "read"), CheckState::Fail);
    assert!(!ev.ready());
    // Passing again is immediate.
    w.set("qget_ms", Value::Num(5.0));
    ev.evaluate(&w.r, w.at(11.5));
    assert_eq!(state(&ev, "read"), CheckState::Pass);
}

#[test]
fn hold_down_restarts_after_a_true_sample() {
    let mut w = World::new();
    let mut ev = Evaluator::new(w.policy("check l: leader for 3s"), w.t0);
    w.set("leader", Value::Bool(true));
    ev.evaluate(&w.r, w.at(0.0));
    w.set("leader", Value::Bool(false));
    ev.evaluate(&w.r, w.at(1.0));
    w.set("leader", Value::Bool(true));
    ev.evaluate(&w.r, w.at(2.0));
    w.set("leader", Value::Bool(false));
    ev.evaluate(&w.r, w.at(4.5));
    assert_eq!(
        state(&ev, "l"),
        CheckState::Pass,
        "not continuously false for 3s"
    );
    ev.evaluate(&w.r, w.at(7.5));
    assert_eq!(state(&ev, "l"), CheckState::Fail);
}

#[test]
fn no_grace_for_a_check_that_never_passed() {
    let mut w = World::new();
    let mut ev = Evaluator::new(w.policy("check l: leader for 1h"), w.t0);
    w.set("leader", Value::Bool(false));
    ev.evaluate(&w.r, w.at(0.0));
    assert_eq!(state(&ev, "l"), CheckState::Fail);
}

#[test]
fn since_tracks_state_changes_and_unknown_is_its_own_state() {
    let mut w = World::new();
    let mut ev = Evaluator::new(w.policy("leader && qget_ms < 1000"), w.t0);
    w.set("leader", Value::Bool(true));
    w.set("qget_ms", Value::Num(3.0));
    ev.evaluate(&w.r, w.at(0.0));
    ev.evaluate(&w.r, w.at(5.0));
    let rep = ev.report(&w.r, w.at(5.0), SystemTime::now());
    assert_eq!(rep[1].name, "qget_ms");
    assert_eq!(rep[1].in_state_for, Duration::from_secs(5));
    w.fail("qget_ms", "request timed out", Duration::from_millis(3200));
    ev.evaluate(&w.r, w.at(6.0));
    let rep = ev.report(&w.r, w.at(8.0), SystemTime::now());
    assert_eq!(rep[1].state, CheckState::Unknown);
    assert_eq!(rep[1].in_state_for, Duration::from_secs(2));
    assert_eq!(
        rep[1].explanation,
        "qget_ms unknown: last sample failed 3.2s ago: request timed out"
    );
    assert!(!ev.ready());
}

#[test]
fn explanations_list_the_failing_terms_with_values() {
    let mut w = World::new();
    let src = "let lag_ok = rev_lag < 5000\n\
               check serve: leader && (qget_ms < 1000 || sget_ms < 5) && lag_ok\n\
               warn space: !alarm_nospace";
    let mut ev = Evaluator::new(w.policy(src), w.t0);
    w.set("leader", Value::Bool(true));
    w.set("qget_ms", Value::Num(1432.0));
    w.set("sget_ms", Value::Num(7.0));
    w.set("rev_lag", Value::Num(6000.0));
    w.set("alarm_nospace", Value::Bool(true));
    ev.evaluate(&w.r, w.at(0.0));
    let rep = ev.report(&w.r, w.at(0.0), SystemTime::now());
    assert_eq!(
        rep[0].explanation,
        "qget_ms < 1000 is false (qget_ms = 1432); sget_ms < 5 is false (sget_ms = 7); rev_lag < 5000 is false (rev_lag = 6000)"
    );
    assert_eq!(rep[1].state, CheckState::Fail);
    assert_eq!(rep[1].explanation, "!alarm_nospace is false");
    // Only `serve` makes the member unready; the warning never does.
    w.set("rev_lag", Value::Num(1.0));
    w.set("qget_ms", Value::Num(3.0));
    ev.evaluate(&w.r, w.at(1.0));
    assert!(ev.ready());
    assert_eq!(state(&ev, "space"), CheckState::Fail);
}

#[test]
fn false_beats_unknown_in_explanations() {
    let mut w = World::new();
    let mut ev = Evaluator::new(w.policy("check a: leader && qget_ms < 1000"), w.t0);
    w.set("leader", Value::Bool(false));
    ev.evaluate(&w.r, w.at(0.0));
    let rep = ev.report(&w.r, w.at(0.0), SystemTime::now());
    assert_eq!(rep[0].state, CheckState::Fail);
    assert_eq!(rep[0].explanation, "leader is false");
}

#[test]
fn replacing_the_policy_keeps_unchanged_checks_and_their_timers() {
    let mut w = World::new();
    let v1 = "check leader: leader\ncheck read: qget_ms < 1000 for 30s\ncheck lag: rev_lag < 5000";
    let mut ev = Evaluator::new(w.policy(v1), w.t0);
    w.set("leader", Value::Bool(true));
    w.set("qget_ms", Value::Num(5.0));
    w.set("rev_lag", Value::Num(10.0));
    ev.evaluate(&w.r, w.at(0.0));
    w.set("qget_ms", Value::Num(5000.0));
    ev.evaluate(&w.r, w.at(20.0)); // read is held: failing since 20s
    assert!(ev.ready());
    // Change only `lag`; whitespace changes in `read` do not count as a change.
    let v2 =
        "check leader: leader\ncheck read:   qget_ms <  1000   for 30s\ncheck lag: rev_lag < 9000";
    let kept = ev.replace_policy(w.policy(v2), w.at(25.0));
    assert_eq!(kept, 2);
    ev.evaluate(&w.r, w.at(25.0));
    assert!(
        ev.ready(),
        "a reload that leaves checks unchanged causes no blip"
    );
    let rep = ev.report(&w.r, w.at(25.0), SystemTime::now());
    assert_eq!(
        rep[0].in_state_for,
        Duration::from_secs(25),
        "leader kept its since"
    );
    assert!(rep[1].held);
    assert_eq!(rep[2].in_state_for, Duration::ZERO, "lag started fresh");
    // The hold-down timer of `read` kept counting from 20s: it fails at 50s.
    ev.evaluate(&w.r, w.at(49.0));
    assert_eq!(state(&ev, "read"), CheckState::Pass);
    ev.evaluate(&w.r, w.at(50.0));
    assert_eq!(state(&ev, "read"), CheckState::Fail);
}

#[test]
fn not_ready_before_the_first_evaluation() {
    let w = World::new();
    let ev = Evaluator::new(w.policy("true"), w.t0);
    assert!(!ev.ready());
}

/// Issue 10: explaining a failing check on a `let` chain expanded every `let`
/// at every use (2^40 steps at depth 40). The explanation still points at the
/// failing term inside the innermost `let`, with its value, once.
#[test]
fn regression_a_40_deep_let_chain_is_evaluated_and_explained_by_its_failing_term() {
    let mut w = World::new();
    let mut ev = Evaluator::new(
        w.policy(&limits::doubling_chain("qget_ms < 1000", 40)),
        w.t0,
    );
    w.set("qget_ms", Value::Num(5.0));
    ev.evaluate(&w.r, w.at(0.0));
    assert!(ev.ready());
    w.set("qget_ms", Value::Num(1500.0));
    ev.evaluate(&w.r, w.at(1.0));
    assert_eq!(state(&ev, "deep"), CheckState::Fail);
    let rep = ev.report(&w.r, w.at(1.0), SystemTime::now());
    assert_eq!(
        rep[0].explanation,
        "qget_ms < 1000 is false (qget_ms = 1500)"
    );
    w.fail("qget_ms", "request timed out", Duration::from_secs(2));
    ev.evaluate(&w.r, w.at(2.0));
    assert_eq!(state(&ev, "deep"), CheckState::Unknown);
    let rep = ev.report(&w.r, w.at(2.0), SystemTime::now());
    assert_eq!(
        rep[0].explanation,
        "qget_ms unknown: last sample failed 2s ago: request timed out"
    );
}

/// The checks of one report share the table of walked nodes: each check is
/// still explained by everything that failed in it, including the `let`s
/// an earlier check already walked.
#[test]
fn checks_sharing_lets_are_each_explained_in_full_in_one_report() {
    let mut w = World::new();
    let src = "let slow = qget_ms < 1000 && sget_ms < 1000\n\
               check a: slow && leader\n\
               check b: slow\n\
               check c: leader && slow for 1h\n";
    let mut ev = Evaluator::new(w.policy(src), w.t0);
    w.set("qget_ms", Value::Num(1500.0));
    w.set("sget_ms", Value::Num(2000.0));
    w.set("leader", Value::Bool(false));
    ev.evaluate(&w.r, w.at(0.0));
    let rep = ev.report(&w.r, w.at(0.0), SystemTime::now());
    let slow = "qget_ms < 1000 is false (qget_ms = 1500); sget_ms < 1000 is false (sget_ms = 2000)";
    assert_eq!(rep[0].explanation, format!("{slow}; leader is false"));
    assert_eq!(rep[1].explanation, slow);
    assert_eq!(rep[2].explanation, format!("leader is false; {slow}"));
}

/// What one report spends on explanations is bounded whatever the number
/// of failing checks: the most checks a policy may have, failing through
/// the same long `let`, are explained in order until the report's budget is
/// spent; the rest say
/// they are not explained, and none is empty.
#[test]
fn the_explanations_of_one_report_stay_within_their_budget() {
    use etcd_readiness_policy::policy::eval::{
        MAX_EXPLANATION_BYTES, MAX_REPORT_EXPLANATION_BYTES, NOT_EXPLAINED,
    };
    let mut w = World::new();
    let terms: Vec<String> = (0..200)
        .map(|j| format!("qget_ms > {}", 1_000_000 + j))
        .collect();
    let mut src = format!("let bad = {}\n", terms.join(" && "));
    for c in 0..limits::MAX_CHECKS {
        src.push_str(&format!("check c{c}: bad && leader\n"));
    }
    let mut ev = Evaluator::new(w.policy(&src), w.t0);
    w.set("qget_ms", Value::Num(1.5));
    w.set("leader", Value::Bool(true));
    ev.evaluate(&w.r, w.at(0.0));
    let rep = ev.report(&w.r, w.at(0.0), SystemTime::now());
    let explained: Vec<usize> = rep
        .iter()
        .filter(|r| r.explanation != NOT_EXPLAINED)
        .map(|r| r.explanation.len())
        .collect();
    // Each explanation may end with its count of terms not shown.
    let total: usize = explained.iter().sum();
    assert!(
        total <= MAX_REPORT_EXPLANATION_BYTES + 40 * explained.len(),
        "{total} bytes in {} explanations",
        explained.len()
    );
    assert!(
        rep[0].explanation.len() > MAX_EXPLANATION_BYTES.min(MAX_REPORT_EXPLANATION_BYTES) - 100,
        "{}",
        rep[0].explanation
    );
    assert!(
        rep[0]
            .explanation
            .starts_with("qget_ms > 1000000 is false (qget_ms = 1.5); ")
    );
    assert!(
        rep[0].explanation.contains("more terms"),
        "{}",
        rep[0].explanation
    );
    assert!(rep.iter().all(|r| !r.explanation.is_empty()));
    let unexplained = rep
        .iter()
        .filter(|r| r.explanation == NOT_EXPLAINED)
        .count();
    assert!(
        unexplained >= limits::MAX_CHECKS - 2,
        "{unexplained} not explained"
    );
    assert_eq!(rep[limits::MAX_CHECKS - 1].explanation, NOT_EXPLAINED);
}

/// A term that uses a deep chain directly reports the unknown signals of the
/// chain (from each `let`'s list of signals, not by expanding it) and the
/// value of the `let` it names.
#[test]
fn unknown_signals_through_a_deep_chain_are_named_once_each() {
    let mut w = World::new();
    let mut src = limits::doubling_chain("qget_ms < 1000 && age(rev_lag) < 1m && leader", 40);
    src.push_str("check via_coalesce: a40 ?? false\ncheck shown: a40 == true\n");
    let mut ev = Evaluator::new(w.policy(&src), w.t0);
    w.set("leader", Value::Bool(true));
    ev.evaluate(&w.r, w.at(0.0));
    let rep = ev.report(&w.r, w.at(0.0), SystemTime::now());
    assert_eq!(
        rep[0].explanation,
        "qget_ms unknown: never sampled; rev_lag unknown: never sampled"
    );
    assert_eq!(rep[1].state, CheckState::Fail);
    assert_eq!(rep[1].explanation, "a40 ?? false is false (a40 = unknown)");
    assert_eq!(rep[2].state, CheckState::Unknown);
    assert_eq!(
        rep[2].explanation,
        "qget_ms unknown: never sampled; rev_lag unknown: never sampled"
    );
}

/// An explanation is bounded: a check that fails on thousands of terms shows
/// the first ones and counts the rest.
#[test]
fn very_long_explanations_are_cut_and_counted() {
    let mut w = World::new();
    let terms: Vec<String> = (0..250).map(|i| format!("qget_ms < {i}")).collect();
    let src = format!("check many: {}", terms.join(" || "));
    let mut ev = Evaluator::new(w.policy(&src), w.t0);
    w.set("qget_ms", Value::Num(1e6));
    ev.evaluate(&w.r, w.at(0.0));
    let rep = ev.report(&w.r, w.at(0.0), SystemTime::now());
    let e = &rep[0].explanation;
    assert!(
        e.len() <= etcd_readiness_policy::policy::eval::MAX_EXPLANATION_BYTES + 40,
        "{}",
        e.len()
    );
    assert!(
        e.starts_with("qget_ms < 0 is false (qget_ms = 1000000); qget_ms < 1 is false"),
        "{e}"
    );
    let shown = e.matches(" is false").count();
    assert!(
        e.ends_with(&format!("; and {} more terms", 250 - shown)),
        "{e}"
    );
}

impl World {
    /// `name` has the last answer `last` (if any) and a newer measurement
    /// pending for `waited`, at least `at_least` in the signal's unit.
    fn pending(&mut self, name: &str, last: Option<f64>, at_least: f64, waited: Duration) {
        let id = self.c.id(name);
        let base = match last {
            Some(v) => Reading::known(Value::Num(v)),
            None => Reading::failed("request timed out", Duration::from_secs(1)),
        };
        self.r[id.index()] = base.with_pending(at_least, waited, "read");
    }
}

#[test]
fn a_pending_read_fails_a_threshold_the_moment_its_bound_crosses_it() {
    let mut w = World::new();
    let mut ev = Evaluator::new(w.policy("check linearizable_read: qget_ms < 1000"), w.t0);
    w.set("qget_ms", Value::Num(3.0));
    ev.evaluate(&w.r, w.at(0.0));
    assert!(ev.ready());
    // A read in flight whose bound decides nothing: the last answer counts,
    // as if nothing were pending (no blip to unknown for every read sent).
    for ms in [0.0, 2.0, 999.0] {
        w.pending(
            "qget_ms",
            Some(3.0),
            ms,
            Duration::from_secs_f64(ms / 1000.0),
        );
        ev.evaluate(&w.r, w.at(0.5));
        assert!(ev.ready(), "pending {ms} ms");
    }
    // At 1000 ms pending the read cannot answer within 1000 ms: false, and
    // the explanation says exactly why.
    w.pending("qget_ms", Some(3.0), 1000.0, Duration::from_millis(1000));
    ev.evaluate(&w.r, w.at(1.0));
    assert_eq!(state(&ev, "linearizable_read"), CheckState::Fail);
    let rep = ev.report(&w.r, w.at(1.0), SystemTime::now());
    assert_eq!(
        rep[0].explanation,
        "qget_ms < 1000 is false (qget_ms ≥ 1000: read pending for 1s, last 3)"
    );
    // With no last answer (the previous read failed), an undecided bound is unknown.
    w.pending("qget_ms", None, 10.0, Duration::from_millis(10));
    ev.evaluate(&w.r, w.at(1.1));
    assert_eq!(state(&ev, "linearizable_read"), CheckState::Unknown);
    let rep = ev.report(&w.r, w.at(1.1), SystemTime::now());
    assert_eq!(
        rep[0].explanation,
        "qget_ms unknown: last sample failed 1s ago: request timed out; read pending for 10ms"
    );
    w.pending("qget_ms", None, 1500.0, Duration::from_millis(1500));
    ev.evaluate(&w.r, w.at(1.6));
    assert_eq!(state(&ev, "linearizable_read"), CheckState::Fail);
    let rep = ev.report(&w.r, w.at(1.6), SystemTime::now());
    assert_eq!(
        rep[0].explanation,
        "qget_ms < 1000 is false (qget_ms ≥ 1500: read pending for 1.5s)"
    );
    // The answer lands: back to a plain known value.
    w.set("qget_ms", Value::Num(1600.0));
    ev.evaluate(&w.r, w.at(1.7));
    assert_eq!(state(&ev, "linearizable_read"), CheckState::Fail);
    w.set("qget_ms", Value::Num(2.0));
    ev.evaluate(&w.r, w.at(1.8));
    assert!(ev.ready());
}

#[test]
fn a_pending_bound_is_exact_under_every_comparison_and_kept_by_monotone_arithmetic() {
    let mut w = World::new();
    // (policy, pending bound in ms, expected state); the last answer is 3 ms.
    let cases = [
        ("qget_ms < 1000", 1000.0, CheckState::Fail),
        ("qget_ms <= 1000", 1000.0, CheckState::Pass), // last answer decides
        ("qget_ms <= 1000", 1001.0, CheckState::Fail),
        ("qget_ms > 500", 501.0, CheckState::Pass),
        ("qget_ms >= 500", 500.0, CheckState::Pass),
        ("qget_ms > 500", 400.0, CheckState::Fail), // last answer 3 decides
        ("1000 > qget_ms", 1000.0, CheckState::Fail),
        ("qget_ms == 3", 4.0, CheckState::Fail),
        ("qget_ms != 3", 4.0, CheckState::Pass),
        ("qget_ms == 3", 2.0, CheckState::Pass),
        // Scaled, shifted, added, min/max: still a lower bound.
        ("qget_ms / 1000 < 1", 1000.0, CheckState::Fail),
        ("qget_ms * 2 < 2000", 1000.0, CheckState::Fail),
        ("qget_ms + 10 < 1010", 1000.0, CheckState::Fail),
        ("qget_ms - 10 < 990", 1000.0, CheckState::Fail),
        ("qget_ms + sget_ms < 1000", 1000.0, CheckState::Fail),
        ("max(qget_ms, 5) < 1000", 1000.0, CheckState::Fail),
        ("min(qget_ms, 5) < 1000", 1000.0, CheckState::Pass), // min(≥1000, 5) is 5
        ("min(qget_ms, 2000) < 1000", 1000.0, CheckState::Fail),
        // Negation and subtracting from turn the bound into an upper one:
        // dropped, the last answer decides.
        ("-qget_ms > -1000", 5000.0, CheckState::Pass),
        ("2000 - qget_ms > 1000", 5000.0, CheckState::Pass),
        ("qget_ms * -1 > -1000", 5000.0, CheckState::Pass),
        // `known` and `??` see the last answer.
        ("known(qget_ms)", 5000.0, CheckState::Pass),
        ("(qget_ms ?? 99999) < 1000", 1000.0, CheckState::Fail),
    ];
    for (src, bound, want) in cases {
        let mut ev = Evaluator::new(w.policy(&format!("check c: {src}")), w.t0);
        w.set("sget_ms", Value::Num(1.0));
        w.pending(
            "qget_ms",
            Some(3.0),
            bound,
            Duration::from_millis(bound as u64),
        );
        ev.evaluate(&w.r, w.at(0.0));
        assert_eq!(state(&ev, "c"), want, "{src} with a read pending ≥ {bound}");
    }
}

#[test]
fn an_outdated_last_answer_is_unknown_until_the_bound_decides() {
    use etcd_readiness_policy::signals::Unknown;
    let mut w = World::new();
    let mut ev = Evaluator::new(w.policy("check linearizable_read: qget_ms < 1000"), w.t0);
    let id = w.c.id("qget_ms");
    let outdated = |ms: u64| {
        Reading {
            value: Err(Unknown::Outdated {
                waited: Duration::from_millis(ms),
                trust: Duration::from_millis(200),
                contended: Duration::ZERO,
                what: "read",
            }),
            last_good_age: Some(Duration::from_millis(ms + 100)),
            pending: None,
        }
        .with_pending(ms as f64, Duration::from_millis(ms), "read")
    };
    w.r[id.index()] = outdated(300);
    ev.evaluate(&w.r, w.at(0.0));
    assert_eq!(state(&ev, "linearizable_read"), CheckState::Unknown);
    let rep = ev.report(&w.r, w.at(0.0), SystemTime::now());
    assert_eq!(
        rep[0].explanation,
        "qget_ms unknown: the last answer is outdated: a read has been pending for 300ms, longer than 200ms"
    );
    w.r[id.index()] = outdated(1000);
    ev.evaluate(&w.r, w.at(0.7));
    assert_eq!(state(&ev, "linearizable_read"), CheckState::Fail);
    let rep = ev.report(&w.r, w.at(0.7), SystemTime::now());
    assert_eq!(
        rep[0].explanation,
        "qget_ms < 1000 is false (qget_ms ≥ 1000: read pending for 1s)"
    );
}

#[test]
fn a_recovery_hold_explains_where_it_stands_and_passes_after_continuous_truth() {
    let mut w = World::new();
    let mut ev = Evaluator::new(w.policy("check lag: rev_lag < 5000 recover 30s"), w.t0);
    // Held from the start: a freshly started member must earn its first pass.
    w.set("rev_lag", Value::Num(10.0));
    ev.evaluate(&w.r, w.at(0.0));
    ev.evaluate(&w.r, w.at(12.0));
    assert_eq!(state(&ev, "lag"), CheckState::Fail);
    assert!(!ev.ready());
    assert_eq!(ev.recovering().collect::<Vec<_>>(), [true]);
    let rep = ev.report(&w.r, w.at(12.0), SystemTime::now());
    assert!(rep[0].recovering && !rep[0].held);
    assert_eq!(rep[0].explanation, "recovering: true for 12s of 30s");
    assert_eq!(rep[0].true_for, Some(Duration::from_secs(12)));
    assert_eq!(rep[0].recover_left, Some(Duration::from_secs(18)));
    assert_eq!(rep[0].in_state_for, Duration::from_secs(12));
    ev.evaluate(&w.r, w.at(29.9));
    assert_eq!(state(&ev, "lag"), CheckState::Fail);
    ev.evaluate(&w.r, w.at(30.0));
    assert_eq!(state(&ev, "lag"), CheckState::Pass);
    assert!(ev.ready());
    let rep = ev.report(&w.r, w.at(30.0), SystemTime::now());
    assert!(!rep[0].recovering);
    assert_eq!((rep[0].true_for, rep[0].recover_left), (None, None));
    assert_eq!(rep[0].explanation, "");

    // A failure re-arms the hold, and says so.
    w.set("rev_lag", Value::Num(9000.0));
    ev.evaluate(&w.r, w.at(31.0));
    let rep = ev.report(&w.r, w.at(31.0), SystemTime::now());
    assert_eq!(
        rep[0].explanation,
        "rev_lag < 5000 is false (rev_lag = 9000) (then held failing by `recover 30s`)"
    );
    w.set("rev_lag", Value::Num(10.0));
    ev.evaluate(&w.r, w.at(32.0));
    // Unknown for one evaluation breaks the run: it counts again from 40s.
    w.fail("rev_lag", "sidecar timed out", Duration::ZERO);
    ev.evaluate(&w.r, w.at(39.0));
    assert_eq!(state(&ev, "lag"), CheckState::Unknown);
    assert_eq!(ev.recovering().collect::<Vec<_>>(), [false]);
    w.set("rev_lag", Value::Num(10.0));
    ev.evaluate(&w.r, w.at(40.0));
    ev.evaluate(&w.r, w.at(69.0));
    let rep = ev.report(&w.r, w.at(69.0), SystemTime::now());
    assert_eq!(rep[0].explanation, "recovering: true for 29s of 30s");
    ev.evaluate(&w.r, w.at(70.0));
    assert_eq!(state(&ev, "lag"), CheckState::Pass);
}

#[test]
fn a_recovery_hold_combines_with_a_hold_down() {
    let mut w = World::new();
    let mut ev = Evaluator::new(
        w.policy("check read: qget_ms < 1000 for 10s recover 5s"),
        w.t0,
    );
    w.set("qget_ms", Value::Num(5.0));
    ev.evaluate(&w.r, w.at(0.0));
    ev.evaluate(&w.r, w.at(5.0));
    assert_eq!(state(&ev, "read"), CheckState::Pass);
    // A blip inside the hold-down never failed, so it needs no recovery.
    w.set("qget_ms", Value::Num(2000.0));
    ev.evaluate(&w.r, w.at(6.0));
    let rep = ev.report(&w.r, w.at(6.0), SystemTime::now());
    assert_eq!(
        rep[0].explanation,
        "qget_ms < 1000 is false (qget_ms = 2000) (held passing by `for 10s`, 10s left)"
    );
    w.set("qget_ms", Value::Num(5.0));
    ev.evaluate(&w.r, w.at(7.0));
    assert_eq!(state(&ev, "read"), CheckState::Pass);
    // A fall past the hold-down fails; the rise then waits for `recover`.
    w.set("qget_ms", Value::Num(2000.0));
    ev.evaluate(&w.r, w.at(8.0));
    ev.evaluate(&w.r, w.at(18.0));
    assert_eq!(state(&ev, "read"), CheckState::Fail);
    w.set("qget_ms", Value::Num(5.0));
    ev.evaluate(&w.r, w.at(19.0));
    assert_eq!(state(&ev, "read"), CheckState::Fail);
    ev.evaluate(&w.r, w.at(24.0));
    assert_eq!(state(&ev, "read"), CheckState::Pass);
}

#[test]
fn a_reload_neither_starts_nor_drops_a_recovery_hold() {
    let mut w = World::new();
    let mut ev = Evaluator::new(
        w.policy("check leader: leader\ncheck lag: rev_lag < 5000"),
        w.t0,
    );
    w.set("leader", Value::Bool(true));
    w.set("rev_lag", Value::Num(9000.0));
    ev.evaluate(&w.r, w.at(0.0));
    // A new check with a hold is not held before its first failure: an edit
    // of the ConfigMap is not a restart of every member.
    let v2 = "check leader: leader\ncheck lag: rev_lag < 5000\ncheck fresh: leader recover 1m";
    ev.replace_policy(w.policy(v2), w.at(1.0));
    ev.evaluate(&w.r, w.at(1.0));
    assert_eq!(state(&ev, "fresh"), CheckState::Pass);
    // `lag` kept its state (failing); recovering once true, it passes at once
    // without a hold …
    w.set("rev_lag", Value::Num(10.0));
    ev.evaluate(&w.r, w.at(2.0));
    assert_eq!(state(&ev, "lag"), CheckState::Pass);
    // … and a hold added by a reload to a failing check holds it.
    w.set("rev_lag", Value::Num(9000.0));
    ev.evaluate(&w.r, w.at(3.0));
    let v3 = "check leader: leader\ncheck lag: rev_lag < 5000 recover 10s\ncheck fresh: leader recover 1m";
    assert_eq!(ev.replace_policy(w.policy(v3), w.at(4.0)), 3);
    w.set("rev_lag", Value::Num(10.0));
    ev.evaluate(&w.r, w.at(4.0));
    assert_eq!(state(&ev, "lag"), CheckState::Fail);
    ev.evaluate(&w.r, w.at(14.0));
    assert_eq!(state(&ev, "lag"), CheckState::Pass);
}

#[test]
fn a_resumed_evaluator_applies_the_recovery_hold_only_after_a_failure() {
    let mut w = World::new();
    let mut ev = Evaluator::resumed(w.policy("check l: leader recover 10s"), w.t0);
    w.set("leader", Value::Bool(true));
    ev.evaluate(&w.r, w.at(0.0));
    assert_eq!(state(&ev, "l"), CheckState::Pass);
    w.set("leader", Value::Bool(false));
    ev.evaluate(&w.r, w.at(1.0));
    w.set("leader", Value::Bool(true));
    ev.evaluate(&w.r, w.at(2.0));
    assert_eq!(state(&ev, "l"), CheckState::Fail);
    ev.evaluate(&w.r, w.at(12.0));
    assert_eq!(state(&ev, "l"), CheckState::Pass);
}
