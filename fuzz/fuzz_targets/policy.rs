//! Fuzz target: policy compile + evaluate + explain. The input is the policy
//! text; when it compiles, it is evaluated and explained over a few rounds of
//! readings derived from the input's bytes (known values including NaN, ±Inf,
//! negative and huge numbers; never sampled; failed; stale). Nothing may panic,
//! the compiled program must stay within the node limit, and every round must
//! finish (libFuzzer reports an input that runs too long as a timeout).
#![no_main]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use etcd_readiness_policy::policy::{Evaluator, Policy, limits};
use etcd_readiness_policy::signals::{Catalogue, Reading, SignalType, Unknown, Value};
use libfuzzer_sys::fuzz_target;

const NUMBERS: [f64; 10] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    999.0,
    1e300,
    f64::MAX,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];

fn readings(catalogue: &Catalogue, seed: &mut u64) -> Vec<Reading> {
    catalogue
        .iter()
        .map(|(_, def)| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            let k = (*seed % 16) as usize;
            match k {
                0 => Reading::NEVER,
                1 => Reading::failed("fuzz", Duration::from_millis(*seed % 100_000)),
                2 => Reading {
                    value: Err(Unknown::Stale {
                        age: Duration::from_secs(*seed % 1_000),
                        bound: Duration::from_secs(3),
                    }),
                    last_good_age: Some(Duration::from_secs(*seed % 1_000)),
                    pending: None,
                },
                _ => Reading::known(match def.ty {
                    SignalType::Bool => Value::Bool(k.is_multiple_of(2)),
                    _ => Value::Num(NUMBERS[k % NUMBERS.len()]),
                }),
            }
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let catalogue = Catalogue::builtin();
    let policy = match Policy::compile("fuzz.policy", src, &catalogue) {
        Ok(p) => p,
        Err(d) => {
            // Rendering the diagnostics (carets, line:col) must not panic either.
            let _ = d.to_string();
            let _ = d.one_line();
            return;
        }
    };
    assert!(policy.node_count() <= limits::MAX_NODES);
    let _ = policy.summary();
    let mut seed = data.iter().fold(0x9E37_79B9_7F4A_7C15u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01B3)
    }) | 1;
    let t0 = Instant::now();
    let mut ev = Evaluator::new(Arc::new(policy), t0);
    for round in 0..3u64 {
        let r = readings(&catalogue, &mut seed);
        let now = t0 + Duration::from_secs(round * 7);
        ev.evaluate(&r, now);
        let _ = ev.ready();
        for report in ev.report(&r, now, SystemTime::now()) {
            assert!(report.explanation.len() <= 4 * limits::MAX_POLICY_BYTES + 4096);
        }
    }
});
