//! Evaluation does not allocate: the card policy with every signal known (and
//! then with a read in flight), the gardener policy and a check with both
//! holds cycling through their phases are evaluated many times under a counting
//! allocator (dhat), and the number of heap allocations made during those
//! evaluations must be zero.
//!
//! This file is its own test binary because it installs a global allocator.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_readiness_policy::policy::{Evaluator, Policy};
use etcd_readiness_policy::signals::{Catalogue, Reading, Value};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[test]
fn evaluating_allocates_nothing() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let c = Catalogue::builtin();
    let mut readings = vec![Reading::NEVER; c.len()];
    for (name, v) in [
        ("leader", Value::Bool(true)),
        ("qget_ms", Value::Num(12.0)),
        ("owner_ok", Value::Bool(true)),
        ("rev_lag", Value::Num(100.0)),
    ] {
        readings[c.id(name).index()] = Reading::known(v);
    }
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../policies/card.policy"
    ))
    .unwrap();
    let policy = Arc::new(Policy::compile("card.policy", &src, &c).unwrap());
    let gardener = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../policies/gardener.policy"
    ))
    .unwrap();
    let gardener = Arc::new(Policy::compile("gardener.policy", &gardener, &c).unwrap());
    let t0 = Instant::now();
    let mut ev = Evaluator::new(policy, t0);
    let mut ev2 = Evaluator::new(gardener, t0);
    // Both holds cycling through every phase: recovering, passing, held, failing.
    let holds =
        Arc::new(Policy::compile("holds.policy", "check r: leader for 1s recover 2s", &c).unwrap());
    let mut ev3 = Evaluator::new(holds, t0);
    let mut flipping = readings.clone();
    let leader = c.id("leader").index();

    let before = dhat::HeapStats::get();
    for i in 0..10_000u32 {
        let now = t0 + Duration::from_millis(u64::from(i));
        ev.evaluate(&readings, now);
        ev2.evaluate(&readings, now); // partly unknown signals, hold-down timers
        flipping[leader] = match i % 5000 {
            0..3000 => Reading::known(Value::Bool(true)),
            3000..4500 => Reading::known(Value::Bool(false)),
            _ => Reading::NEVER,
        };
        ev3.evaluate(&flipping, now);
    }
    let after = dhat::HeapStats::get();
    assert!(ev.ready());
    dhat::assert_eq!(after.total_blocks - before.total_blocks, 0);

    // A read in flight (a lower bound, `Val::AtLeast`) allocates nothing
    // either, whether the bound decides `qget_ms < 1000` or not.
    let q = c.id("qget_ms").index();
    let before = dhat::HeapStats::get();
    for i in 0..10_000u32 {
        let now = t0 + Duration::from_millis(u64::from(i));
        readings[q] = Reading::known(Value::Num(12.0)).with_pending(
            f64::from(i % 2000),
            Duration::from_millis(u64::from(i % 2000)),
            "read",
        );
        ev.evaluate(&readings, now);
        ev2.evaluate(&readings, now);
    }
    let after = dhat::HeapStats::get();
    assert!(!ev.ready(), "the last bound (1999) fails qget_ms < 1000");
    dhat::assert_eq!(after.total_blocks - before.total_blocks, 0);
}
