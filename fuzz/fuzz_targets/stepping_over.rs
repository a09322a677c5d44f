//! Fuzz target: a simulation that steps over settled steps
//! (`etcd_readiness_policy::simulation`, `policy::settle`) against one that
//! evaluates every step, on arbitrary policies. The input is the policy
//! text; when it compiles, both simulations run over a history derived from
//! the input's bytes — each signal the policy reads mostly keeping its
//! sample from step to step, as real ones do, sometimes moving to another
//! value (NaN, ±Inf, ±0, values either side of common constants, a value
//! of the wrong type), failing, or not being sampled, and some steps
//! without data. At every step the
//! verdict, every check's state, hold and recovery must agree, and at some
//! steps the full reports (explanations included).
#![no_main]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use etcd_readiness_policy::policy::Policy;
use etcd_readiness_policy::signals::{Catalogue, SignalType, Value};
use etcd_readiness_policy::simulation::{Clock, Sample, Simulation, Start};
use libfuzzer_sys::fuzz_target;

const NUMBERS: [f64; 14] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    5.0,
    299.0,
    300.0,
    301.0,
    999.5,
    1000.0,
    1e300,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];

/// What a history holds for one signal at one step.
#[derive(Clone, Copy)]
enum Held {
    Value(Value),
    Failed(usize),
    NotSampled,
}

fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let catalogue = Catalogue::builtin();
    let Ok(policy) = Policy::compile("fuzz.policy", src, &catalogue) else {
        return;
    };
    let policy = Arc::new(policy);
    let mut seed = data.iter().fold(0x9E37_79B9_7F4A_7C15u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01B3)
    }) | 1;
    let clock = Clock {
        origin: Instant::now(),
        wall: SystemTime::UNIX_EPOCH,
        step: Duration::from_secs(1 + next(&mut seed) % 15),
    };
    let start = if next(&mut seed) % 2 == 0 {
        Start::Fresh
    } else {
        Start::Resumed
    };
    let mut skipping = Simulation::new(policy.clone(), &catalogue, clock, start);
    let mut every =
        Simulation::new(policy.clone(), &catalogue, clock, start).evaluating_every_step();
    let used = policy.signals_used();
    let why: [Arc<str>; 2] = [Arc::from("refused"), Arc::from("timed out")];
    let mut held = vec![Held::NotSampled; used.len()];
    for i in 0..64u64 {
        for (h, id) in held.iter_mut().zip(&used) {
            let r = next(&mut seed);
            // Mostly what the step before held.
            if r % 8 != 0 {
                continue;
            }
            *h = match (r >> 3) % 10 {
                0 => Held::Failed(((r >> 8) % 2) as usize),
                1 => Held::NotSampled,
                // Now and then a value of the wrong type, as a careless
                // caller might pass.
                2 => Held::Value(match catalogue.get(*id).ty {
                    SignalType::Bool => {
                        Value::Num(NUMBERS[((r >> 8) % NUMBERS.len() as u64) as usize])
                    }
                    _ => Value::Bool((r >> 8) % 2 == 0),
                }),
                _ => Held::Value(match catalogue.get(*id).ty {
                    SignalType::Bool => Value::Bool((r >> 8) % 2 == 0),
                    _ => Value::Num(NUMBERS[((r >> 8) % NUMBERS.len() as u64) as usize]),
                }),
            };
        }
        if next(&mut seed) % 24 == 0 {
            skipping.absent();
            every.absent();
            continue;
        }
        let samples = || {
            used.iter().zip(&held).filter_map(|(id, h)| match *h {
                Held::Value(v) => Some((*id, Sample::Value(v))),
                Held::Failed(r) => Some((*id, Sample::Failed(&why[r]))),
                Held::NotSampled => None,
            })
        };
        let (Ok(a), Ok(b)) = (skipping.step(i, samples()), every.step(i, samples())) else {
            return;
        };
        let (ea, eb) = (a.evaluator(), b.evaluator());
        assert_eq!(a.ready(), b.ready(), "step {i}");
        assert!(ea.states().eq(eb.states()), "step {i}");
        assert!(ea.held().eq(eb.held()), "step {i}");
        assert!(ea.recovering().eq(eb.recovering()), "step {i}");
        if next(&mut seed) % 5 == 0 {
            assert_eq!(a.reports(), b.reports(), "step {i}");
        }
    }
});
