//! Policy evaluation speed: the card policy
//! `leader && qget_ms < 1000 && owner_ok && rev_lag < 5000` with every signal
//! known, evaluated by our evaluator, and — side by side, in the same run —
//! the same expression compiled once and evaluated by the `cel` (0.15) and
//! `evalexpr` (13) crates. Results are recorded in docs/BENCHMARKS.md.
//!
//! Run: `cargo bench -p etcd-readiness-benches --bench policy_eval`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use etcd_readiness_policy::policy::{Evaluator, Policy};
use etcd_readiness_policy::signals::{Catalogue, Reading, Value};

const CARD: &str = "leader && qget_ms < 1000 && owner_ok && rev_lag < 5000";

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("card_policy");

    // Ours: the whole policy (four checks, with their state and since-when).
    let cat = Catalogue::builtin();
    let mut readings = vec![Reading::NEVER; cat.len()];
    for (name, v) in [
        ("leader", Value::Bool(true)),
        ("qget_ms", Value::Num(12.0)),
        ("owner_ok", Value::Bool(true)),
        ("rev_lag", Value::Num(100.0)),
    ] {
        readings[cat.id(name).index()] = Reading::known(v);
    }
    let policy = Arc::new(Policy::compile("card.policy", CARD, &cat).unwrap());
    let t0 = Instant::now();
    let mut ev = Evaluator::new(policy, t0);
    ev.evaluate(&readings, t0);
    assert!(ev.ready());
    let mut tick = 0u64;
    g.bench_function("etcd-readiness-exporter", |b| {
        b.iter(|| {
            tick += 1;
            ev.evaluate(black_box(&readings), t0 + Duration::from_nanos(tick));
            black_box(ev.ready())
        })
    });

    // cel 0.15: compiled once, variables bound once.
    let program = cel::Program::compile(CARD).unwrap();
    let mut ctx = cel::Context::default();
    ctx.add_variable("leader", true).unwrap();
    ctx.add_variable("qget_ms", 12.0).unwrap();
    ctx.add_variable("owner_ok", true).unwrap();
    ctx.add_variable("rev_lag", 100.0).unwrap();
    assert_eq!(program.execute(&ctx).unwrap(), cel::Value::Bool(true));
    g.bench_function("cel 0.15", |b| {
        b.iter(|| black_box(program.execute(black_box(&ctx)).unwrap()))
    });

    // evalexpr 13: precompiled operator tree, HashMapContext.
    use evalexpr::{ContextWithMutableVariables, DefaultNumericTypes, HashMapContext};
    let tree = evalexpr::build_operator_tree::<DefaultNumericTypes>(CARD).unwrap();
    let mut ectx = HashMapContext::<DefaultNumericTypes>::new();
    ectx.set_value("leader".into(), evalexpr::Value::from(true))
        .unwrap();
    ectx.set_value("qget_ms".into(), evalexpr::Value::from_float(12.0))
        .unwrap();
    ectx.set_value("owner_ok".into(), evalexpr::Value::from(true))
        .unwrap();
    ectx.set_value("rev_lag".into(), evalexpr::Value::from_float(100.0))
        .unwrap();
    assert_eq!(tree.eval_boolean_with_context(&ectx), Ok(true));
    g.bench_function("evalexpr 13", |b| {
        b.iter(|| black_box(tree.eval_boolean_with_context(black_box(&ectx)).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
