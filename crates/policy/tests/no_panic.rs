//! Robustness: random policies (well-formed and not) never panic the parser,
//! the checker, the evaluator or the explainer, whatever the readings.
//! Deterministic: a fixed-seed xorshift generator, bounded iterations.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use etcd_readiness_policy::policy::{Evaluator, Policy};
use etcd_readiness_policy::signals::{Catalogue, Reading, SignalType, Value};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

/// A random well-typed expression of the given type ('b' bool, 'n' number, 'd' duration).
fn typed(r: &mut Rng, ty: char, depth: u32) -> String {
    let leaf = depth == 0 || r.below(3) == 0;
    match ty {
        'b' if leaf => r
            .pick(&[
                "leader",
                "learner",
                "owner_ok",
                "alarm_nospace",
                "true",
                "false",
            ])
            .to_string(),
        'n' if leaf => r
            .pick(&[
                "qget_ms",
                "rev_lag",
                "revision",
                "apply_lag",
                "0",
                "1000",
                "1.5",
                "1GiB",
            ])
            .to_string(),
        'd' if leaf => r
            .pick(&[
                "snapshot_age",
                "age(leader)",
                "age(qget_ms)",
                "250ms",
                "2m",
                "0s",
            ])
            .to_string(),
        'b' => match r.below(7) {
            0 => format!("!{}", typed(r, 'b', depth - 1)),
            1 => {
                let t = ['b', 'n', 'd'][r.below(3)];
                format!("known({})", typed(r, t, depth - 1))
            }
            2 => format!(
                "({} ?? {})",
                typed(r, 'b', depth - 1),
                typed(r, 'b', depth - 1)
            ),
            3 | 4 => {
                let t = if r.below(2) == 0 { 'n' } else { 'd' };
                let op = r.pick(&["<", "<=", ">", ">=", "==", "!="]);
                format!("{} {op} {}", typed(r, t, depth - 1), typed(r, t, depth - 1))
            }
            _ => {
                let op = r.pick(&["&&", "||"]);
                format!(
                    "({} {op} {})",
                    typed(r, 'b', depth - 1),
                    typed(r, 'b', depth - 1)
                )
            }
        },
        t => match r.below(5) {
            0 => format!("-{}", typed(r, t, depth - 1)),
            1 => format!(
                "{}({}, {})",
                r.pick(&["min", "max"]),
                typed(r, t, depth - 1),
                typed(r, t, depth - 1)
            ),
            2 if t == 'd' => format!(
                "({} * {})",
                typed(r, 'd', depth - 1),
                typed(r, 'n', depth - 1)
            ),
            2 => format!(
                "({} / {})",
                typed(r, 'n', depth - 1),
                typed(r, 'n', depth - 1)
            ),
            3 => format!("({} ?? {})", typed(r, t, depth - 1), typed(r, t, depth - 1)),
            _ => {
                let op = r.pick(&["+", "-"]);
                format!(
                    "({} {op} {})",
                    typed(r, t, depth - 1),
                    typed(r, t, depth - 1)
                )
            }
        },
    }
}

/// Mostly well-typed, sometimes a wrong atom swapped in (the checker's job).
fn expr(r: &mut Rng, depth: u32) -> String {
    let e = typed(r, 'b', depth);
    if r.below(10) == 0 {
        e.replacen("leader", "qget_ms", 1)
    } else {
        e
    }
}

fn random_readings(r: &mut Rng, c: &Catalogue) -> Vec<Reading> {
    c.iter()
        .map(|(_, d)| match r.below(5) {
            0 => Reading::NEVER,
            1 => Reading::failed("boom", Duration::from_millis(r.below(10_000) as u64)),
            _ => Reading::known(match d.ty {
                SignalType::Bool => Value::Bool(r.below(2) == 0),
                _ => Value::Num(match r.below(6) {
                    0 => 0.0,
                    1 => -1.0,
                    2 => f64::MAX,
                    3 => 1e-300,
                    _ => r.below(10_000) as f64,
                }),
            }),
        })
        .collect()
}

#[test]
fn random_well_formed_policies_never_panic() {
    let c = Catalogue::builtin();
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let mut compiled = 0;
    for i in 0..3000 {
        let mut src = String::new();
        if r.below(3) == 0 {
            src.push_str(&format!("let l{i} = {}\n", expr(&mut r, 3)));
        }
        for k in 0..1 + r.below(3) {
            let kind = if r.below(4) == 0 { "warn" } else { "check" };
            let hold = if r.below(4) == 0 { " for 2s" } else { "" };
            let e = if src.starts_with("let") && r.below(2) == 0 {
                format!("l{i}")
            } else {
                expr(&mut r, 4)
            };
            src.push_str(&format!("{kind} c{k}: {e}{hold}\n"));
        }
        let Ok(p) = Policy::compile("fuzz", &src, &c) else {
            continue;
        };
        compiled += 1;
        let t0 = Instant::now();
        let mut ev = Evaluator::new(Arc::new(p), t0);
        for step in 0..4u64 {
            let readings = random_readings(&mut r, &c);
            let now = t0 + Duration::from_secs(step);
            ev.evaluate(&readings, now);
            let _ = ev.report(&readings, now, SystemTime::now());
        }
    }
    // The generator must actually exercise the evaluator, not only the checker.
    assert!(compiled > 300, "only {compiled} random policies compiled");
}

#[test]
fn random_bytes_never_panic_the_loader() {
    let c = Catalogue::builtin();
    let mut r = Rng(12345);
    let alphabet: Vec<char> =
        "()!&|?=<>+-*/:#\n \t0123456789.smhKiBleadrqget_ckwnfoxy\u{e9}\u{1F600}"
            .chars()
            .collect();
    for _ in 0..3000 {
        let len = r.below(60);
        let s: String = (0..len)
            .map(|_| alphabet[r.below(alphabet.len())])
            .collect();
        let _ = Policy::compile("fuzz", &s, &c).map_err(|d| d.to_string());
    }
}
