//! Property tests (proptest, stable toolchain, run by `cargo test`): random
//! policies built from the grammar with extreme literals (huge, tiny,
//! overflowing, thousands of digits, `_` separators), deep nesting around the
//! limits, stacked `let` chains, hold-downs and recovery holds, evaluated over readings with
//! NaN, ±Inf and negative values. Whatever the input: no panic; a compiled
//! policy is no larger than its text and within the node limit; explanations
//! stay within their bound. And the `test` command's YAML with extreme
//! numbers in `step`, `at` and series gives errors, never a panic. The
//! recovery hold only ever delays a pass, and passes exactly after its
//! duration of unbroken truth.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use proptest::prelude::*;

use etcd_readiness_policy::policy::eval::MAX_EXPLANATION_BYTES;
use etcd_readiness_policy::policy::{Evaluator, Policy, limits};
use etcd_readiness_policy::policytest;
use etcd_readiness_policy::signals::{Catalogue, Reading, SignalType, Value};

/// Literals a user could write, from the ordinary to the absurd.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        20 => (0u64..100_000).prop_map(|n| n.to_string()),
        2 => Just("0".to_string()),
        2 => Just("1_000_000".to_string()),
        2 => Just("1.5".to_string()),
        1 => Just("1e308".to_string()),
        1 => Just("1e309".to_string()),
        1 => Just("1e999".to_string()),
        1 => Just("1e-999".to_string()),
        1 => Just("0.000000000000000000000000001".to_string()),
        1 => Just("99999999999999999999".to_string()),
        1 => (300usize..400).prop_map(|n| "9".repeat(n)),
        1 => (1usize..40).prop_map(|n| format!("1{}", "_0".repeat(n))),
    ]
}

fn duration() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            12 => (0u64..100_000).prop_map(|n| n.to_string()),
            2 => Just("0.5".to_string()),
            1 => Just("99999999999999999999".to_string()),
            1 => (300usize..400).prop_map(|n| "9".repeat(n)),
        ],
        prop::sample::select(vec!["ms", "s", "m", "h"]),
    )
        .prop_map(|(n, u)| format!("{n}{u}"))
}

/// Hold-downs: mostly sensible, sometimes any duration at all.
fn hold() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (1u64..600).prop_map(|n| format!("{n}s")),
        1 => duration(),
    ]
}

fn size() -> impl Strategy<Value = String> {
    (
        number().prop_filter("sizes have no exponent", |n| !n.contains('e')),
        prop::sample::select(vec!["KiB", "MiB", "GiB", "KB", "MB", "GB"]),
    )
        .prop_map(|(n, u)| format!("{n}{u}"))
}

/// A random expression of type `ty` ('b', 'n', 'd'); mostly well-typed.
fn typed(ty: char, depth: u32, lets: bool) -> BoxedStrategy<String> {
    let leaf: BoxedStrategy<String> = match ty {
        'b' => prop_oneof![
            prop::sample::select(vec!["leader", "learner", "owner_ok", "true", "false"])
                .prop_map(str::to_string),
            prop::sample::select(if lets {
                vec!["l0", "l1", "l2", "c0"]
            } else {
                vec!["leader"]
            })
            .prop_map(str::to_string),
        ]
        .boxed(),
        'n' => prop_oneof![
            number(),
            size(),
            prop::sample::select(vec!["qget_ms", "rev_lag", "db_size_bytes"])
                .prop_map(str::to_string),
        ]
        .boxed(),
        _ => prop_oneof![
            duration(),
            prop::sample::select(vec!["snapshot_age", "age(leader)", "age(qget_ms)"])
                .prop_map(str::to_string),
        ]
        .boxed(),
    };
    if depth == 0 {
        return leaf;
    }
    let sub = move |t: char| typed(t, depth - 1, lets);
    match ty {
        'b' => prop_oneof![
            leaf,
            sub('b').prop_map(|e| format!("!{e}")),
            (
                sub('b'),
                sub('b'),
                prop::sample::select(vec!["&&", "||", "??", "=="])
            )
                .prop_map(|(a, b, op)| format!("({a} {op} {b})")),
            (
                sub('n'),
                sub('n'),
                prop::sample::select(vec!["<", "<=", ">", ">=", "==", "!="])
            )
                .prop_map(|(a, b, op)| format!("({a} {op} {b})")),
            (sub('d'), sub('d')).prop_map(|(a, b)| format!("({a} < {b})")),
            sub('n').prop_map(|e| format!("known({e})")),
        ]
        .boxed(),
        t => prop_oneof![
            leaf,
            sub(t).prop_map(|e| format!("-{e}")),
            (sub(t), sub(t), prop::sample::select(vec!["+", "-", "??"]))
                .prop_map(|(a, b, op)| format!("({a} {op} {b})")),
            (sub(t), sub('n'), prop::sample::select(vec!["*", "/"]))
                .prop_map(|(a, b, op)| format!("({a} {op} {b})")),
            (sub(t), sub(t), prop::sample::select(vec!["min", "max"]))
                .prop_map(|(a, b, f)| format!("{f}({a}, {b})")),
        ]
        .boxed(),
    }
}

/// Policy text: three `let`s, a doubling chain of random depth on top of
/// them, checks with random hold-downs, and optionally deep nesting.
fn policy() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(typed('b', 3, false), 3),
        0usize..48,
        prop::collection::vec(
            (
                typed('b', 4, true),
                prop::option::of(hold()),
                prop::option::of(hold()),
            ),
            1..4,
        ),
        prop_oneof![9 => 0usize..50, 1 => 60usize..80],
    )
        .prop_map(|(lets, chain, checks, nest)| {
            let mut src = String::new();
            for (i, e) in lets.iter().enumerate() {
                src.push_str(&format!("let l{i} = {e}\n"));
            }
            src.push_str("let c0 = l0 || l1\n");
            for i in 1..=chain {
                src.push_str(&format!("let c{i} = c{} && c{}\n", i - 1, i - 1));
            }
            for (i, (e, hold, recover)) in checks.iter().enumerate() {
                let hold = hold.as_ref().map_or(String::new(), |h| format!(" for {h}"));
                let recover = recover
                    .as_ref()
                    .map_or(String::new(), |r| format!(" recover {r}"));
                src.push_str(&format!("check k{i}: {e}{hold}{recover}\n"));
            }
            src.push_str(&format!(
                "warn nested: {}c{chain}{}\n",
                "(".repeat(nest),
                ")".repeat(nest)
            ));
            src
        })
}

fn extreme_readings(c: &Catalogue, pick: &[u8]) -> Vec<Reading> {
    const N: [f64; 8] = [
        0.0,
        -1.0,
        1e300,
        f64::MAX,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        5.0,
    ];
    c.iter()
        .enumerate()
        .map(|(i, (_, d))| {
            let k = pick.get(i % pick.len().max(1)).copied().unwrap_or(0) as usize;
            match k % 10 {
                0 => Reading::NEVER,
                1 => Reading::failed("boom", Duration::from_millis(k as u64 * 97)),
                _ => Reading::known(match d.ty {
                    SignalType::Bool => Value::Bool(k.is_multiple_of(2)),
                    _ => Value::Num(N[k % N.len()]),
                }),
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_policies_with_extreme_literals_never_panic_and_stay_small(
        src in policy(),
        pick in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let c = Catalogue::builtin();
        match Policy::compile("prop.policy", &src, &c) {
            Err(d) => {
                // Every problem has a location and renders.
                prop_assert!(!d.items.is_empty());
                let _ = d.to_string();
            }
            Ok(p) => {
                prop_assert!(p.node_count() <= limits::MAX_NODES);
                // At most one node per token, and every token is at least a byte.
                prop_assert!(p.node_count() <= src.len(), "{} nodes for {} bytes", p.node_count(), src.len());
                for check in p.checks() {
                    if let Some(h) = check.hold {
                        prop_assert!(h.as_secs_f64() <= limits::MAX_HOLD_DOWN_SECS);
                    }
                    if let Some(r) = check.recover {
                        prop_assert!(r > Duration::ZERO && r.as_secs_f64() <= limits::MAX_RECOVER_SECS);
                    }
                }
                let t0 = Instant::now();
                let mut ev = Evaluator::new(Arc::new(p), t0);
                for (round, chunk) in pick.chunks(8).enumerate() {
                    let r = extreme_readings(&c, chunk);
                    let now = t0 + Duration::from_secs(round as u64);
                    ev.evaluate(&r, now);
                    for rep in ev.report(&r, now, SystemTime::now()) {
                        prop_assert!(rep.explanation.len() <= MAX_EXPLANATION_BYTES + 64);
                    }
                }
            }
        }
    }

    #[test]
    fn literals_compile_to_finite_values_or_a_diagnostic_at_their_position(
        n in number(), d in duration(), s in size(),
    ) {
        let src = format!("check a: qget_ms < {n}\ncheck b: snapshot_age < {d}\ncheck c: db_size_bytes < {s}\ncheck e: leader for {d}\ncheck f: leader recover {d}\n");
        match Policy::compile("lit.policy", &src, &Catalogue::builtin()) {
            Ok(p) => {
                let hold = p.check("e").unwrap().hold.unwrap();
                prop_assert!(hold > Duration::ZERO && hold.as_secs_f64() <= limits::MAX_HOLD_DOWN_SECS);
                let recover = p.check("f").unwrap().recover.unwrap();
                prop_assert!(recover > Duration::ZERO && recover.as_secs_f64() <= limits::MAX_RECOVER_SECS);
            }
            Err(diags) => {
                for item in &diags.items {
                    let at = item.span.text(&src);
                    prop_assert!(at == n || at == d || at == s, "{}", diags);
                    prop_assert!(
                        item.message.contains("too large")
                            || item.message.contains("hold-down")
                            || item.message.contains("recovery hold"),
                        "{}", diags
                    );
                }
            }
        }
    }

    #[test]
    fn test_files_with_extreme_numbers_give_errors_not_panics(
        step in prop_oneof![duration(), number(), Just("-1s".to_string()), Just("NaNs".to_string()), Just("infs".to_string())],
        at in prop_oneof![duration(), number(), Just("-0s".to_string())],
        series in prop::collection::vec(prop_oneof![number(), Just("_".to_string()), Just("1e999x99999999999999999999".to_string()), Just("5x100001".to_string()), Just("NaN".to_string()), Just("-inf".to_string())], 0..6),
        dur in prop::collection::vec(prop_oneof![duration(), Just("-5".to_string()), Just("1e400".to_string())], 0..4),
    ) {
        let yaml = format!(
            "policy: p.policy\nstep: \"{step}\"\ntests:\n  - name: t\n    signals:\n      qget_ms: \"{}\"\n      snapshot_age: \"{}\"\n    expect:\n      - at: \"{at}\"\n        ready: false\n",
            series.join(" "),
            dur.join(" "),
        );
        let c = Catalogue::builtin();
        let origin = std::time::Instant::now();
        let _ = policytest::run_text(Path::new("t.test.yaml"), &yaml, &c, origin, |_| {
            Ok("check read: qget_ms < 1000 for 10s\ncheck snap: snapshot_age < 1h\n".to_string())
        });
    }
}

/// The generator must exercise the evaluator, not only the checker: a good
/// share of its policies compile, including some with deep `let` chains.
#[test]
fn the_policy_generator_produces_compiling_policies() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let c = Catalogue::builtin();
    let mut runner = TestRunner::deterministic();
    let (mut compiled, mut deep) = (0, 0);
    for _ in 0..200 {
        let src = policy().new_tree(&mut runner).unwrap().current();
        if Policy::compile("prop.policy", &src, &c).is_ok() {
            compiled += 1;
            if src.contains("let c30 =") {
                deep += 1;
            }
        }
    }
    assert!(
        compiled >= 60,
        "only {compiled} of 200 random policies compiled"
    );
    assert!(
        deep >= 15,
        "only {deep} compiling policies had a 30-deep chain"
    );
}

/// A timeline for one bool signal: per evaluation, the time since the last
/// one (ms) and the value (0 true, 1 false, 2 unknown).
fn timeline() -> impl Strategy<Value = Vec<(u64, u8)>> {
    prop::collection::vec((0u64..4000, 0u8..3), 1..120)
}

/// The check's state after each evaluation of `check c: leader CLAUSES`
/// over `tl`, with each evaluation's time and whether `leader` was true.
fn run_timeline(clauses: &str, tl: &[(u64, u8)]) -> Vec<(Duration, bool, bool)> {
    let c = Catalogue::builtin();
    let p = Policy::compile("t.policy", &format!("check c: leader {clauses}"), &c)
        .unwrap_or_else(|d| panic!("{d}"));
    let leader = c.id("leader").index();
    let t0 = Instant::now();
    let mut ev = Evaluator::new(Arc::new(p), t0);
    let mut r = vec![Reading::NEVER; c.len()];
    let mut at = Duration::ZERO;
    tl.iter()
        .map(|&(dt, v)| {
            at += Duration::from_millis(dt);
            r[leader] = match v {
                0 => Reading::known(Value::Bool(true)),
                1 => Reading::known(Value::Bool(false)),
                _ => Reading::failed("boom", Duration::ZERO),
            };
            ev.evaluate(&r, t0 + at);
            (at, v == 0, ev.ready())
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The recovery hold only ever delays a pass: with it, a check passes at
    /// an evaluation only if it passes there without it (same `for`, if any).
    #[test]
    fn a_recovery_hold_never_makes_a_check_pass_earlier(
        tl in timeline(),
        recover_ms in 1u64..20_000,
        hold_ms in prop::option::of(1u64..20_000),
    ) {
        let for_ = hold_ms.map_or(String::new(), |h| format!("for {h}ms"));
        let without = run_timeline(&for_, &tl);
        let with = run_timeline(&format!("{for_} recover {recover_ms}ms"), &tl);
        for (i, (w, wo)) in with.iter().zip(&without).enumerate() {
            prop_assert!(!w.2 || wo.2, "passes with the hold but not without at evaluation {i} ({:?})", w.0);
        }
    }

    /// A check with `recover D` goes from not passing to passing only at an
    /// evaluation where `leader` has been true at every evaluation for at
    /// least D; and once it has been, it passes (the hold never holds longer).
    #[test]
    fn a_recovery_hold_passes_exactly_after_continuous_truth_of_its_duration(
        tl in timeline(),
        recover_ms in 1u64..20_000,
    ) {
        let d = Duration::from_millis(recover_ms);
        let out = run_timeline(&format!("recover {recover_ms}ms"), &tl);
        let mut run_start: Option<Duration> = None;
        let mut passing = false;
        for (i, &(at, truth, pass)) in out.iter().enumerate() {
            run_start = if truth { Some(run_start.unwrap_or(at)) } else { None };
            let run = run_start.map(|s| at - s);
            if pass && !passing {
                prop_assert!(run.is_some_and(|r| r >= d), "passed at evaluation {i} ({at:?}) after a run of {run:?}, hold {d:?}");
            }
            if run.is_some_and(|r| r >= d) {
                prop_assert!(pass, "true for {run:?} ≥ {d:?} at evaluation {i} but not passing");
            }
            // Without `for`, a check passes only while its expression is true.
            prop_assert!(!pass || truth);
            passing = pass;
        }
    }
}
