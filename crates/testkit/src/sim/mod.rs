//! A deterministic simulated etcd cluster in virtual time, to score the
//! exporter's readiness on the benchmark's fault script in seconds rather
//! than minutes, and the same every time: [`cluster`] (three members:
//! election, reads, faults), [`kubelet`] (the kubelet's worker on the
//! shipped stanza), [`member`] (a member's reads logged), [`timeline`]
//! (an exporter's verdict sampled over virtual time), [`scenario`] (one
//! seeded run: the real etcd source behind its seam, the real engine,
//! scored as benches/fault_accuracy.py scores). No wall clock: every instant is tokio's, paused.

pub mod cluster;
pub mod kubelet;
pub mod member;
pub mod scenario;
pub mod timeline;

use std::time::Duration;

/// The truth's and the score's tick.
pub const TICK: Duration = Duration::from_millis(100);

/// A per-tick series of the three members (`None`: not known at that tick).
pub type PerTick<T> = [[Option<T>; 3]];

/// The script's phases (their start, s), as benches/fault_accuracy.py names
/// them.
pub const PHASES: [(u64, &str); 9] = [
    (0, "steady"),
    (5, "leader SIGKILL"),
    (13, "leader restart"),
    (23, "quorum lost (2 SIGKILL)"),
    (31, "quorum back (2 restarts)"),
    (41, "follower SIGSTOP"),
    (51, "follower SIGCONT"),
    (59, "leader partitioned"),
    (71, "partition healed"),
];

/// The fault kinds, as the benchmark's `FAULTS`: name, fault and recovery
/// (s into the script); the member each is about is the script's.
pub const FAULTS: [(&str, u64, u64); 4] = [
    ("leader SIGKILL", 5, 13),
    ("quorum loss, survivor", 23, 31),
    ("follower SIGSTOP", 41, 51),
    ("leader partition", 59, 71),
];

/// Seconds from `fault` until `state` (per tick) is false (0 if it already
/// was; `None`: true until `recover`), and from `recover` until it is true
/// again (negative: before the recovery; `None`: not by `horizon`), as the
/// benchmark's `out_and_back`, on the ticks.
pub fn out_and_back(
    state: impl Fn(usize) -> Option<bool>,
    (fault, recover, horizon): (f64, f64, f64),
) -> (Option<f64>, Option<f64>) {
    let t = TICK.as_secs_f64();
    let tick = |s: f64| (s / t + 1e-9).floor() as usize;
    let at = |i: usize| i as f64 * t;
    let out = if state(tick(fault)) == Some(false) {
        Some(fault)
    } else {
        (tick(fault) + 1..=tick(recover))
            .find(|&i| state(i) == Some(false))
            .map(at)
    };
    let Some(out) = out else {
        return (None, None);
    };
    let back = (tick(out) + 1..=tick(horizon)).find(|&i| state(i) == Some(true));
    let r = |x: f64| (x * 100.0).round() / 100.0;
    (Some(r(out - fault)), back.map(|i| r(at(i) - recover)))
}

/// splitmix64: one u64 seed, the same draws.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One run's figures, as the benchmark's `score`: seconds false-ready and
/// false-unready over the three members, in all and per phase, and the
/// mean decision lag (their sum over the truth's transitions).
#[derive(Clone, Debug, PartialEq)]
pub struct Score {
    pub false_ready: f64,
    pub false_unready: f64,
    pub lag: f64,
    /// (false-ready, false-unready) per phase of [`PHASES`].
    pub per_phase: Vec<(f64, f64)>,
    /// Per fault of [`FAULTS`], for the member it is about: [`out_and_back`]
    /// of the kubelet's Ready, then of the truth.
    pub faults: Vec<[(Option<f64>, Option<f64>); 2]>,
    /// (false-ready, false-unready) that the truth's look-ahead costs every
    /// prober: [`look_ahead_floor`].
    pub floor: (f64, f64),
}

impl Score {
    /// False-ready plus false-unready above [`Score::floor`]: what a design
    /// can still win (the rest is the draw of the run's elections).
    pub fn above_floor(&self) -> f64 {
        self.false_ready + self.false_unready - self.floor.0 - self.floor.1
    }
}

/// What the truth's look-ahead costs every prober that is not told the
/// future, as the benchmark's `look_ahead_floor`: the truth at a tick is
/// whether a read sent then is served within 1 s, so after an outage it
/// turns true up to 1 s before any answer can show the member serving.
/// Per member and outage (D false ticks after a true one, ended at a tick
/// whose read took `took` s, A true ticks before its answer): a prober
/// that stays ready through it is false-ready for D ticks, one that waits
/// for an answer false-unready for A; the cheaper, summed, as seconds
/// (false-ready, false-unready).
pub fn look_ahead_floor(truth: &PerTick<bool>, took: &PerTick<f64>) -> (f64, f64) {
    let t = TICK.as_secs_f64();
    let (mut fr, mut fu) = (0usize, 0usize);
    for k in 0..3 {
        let (mut seen_true, mut down) = (false, 0usize);
        for (i, tr) in truth.iter().enumerate() {
            match tr[k] {
                None => continue,
                Some(false) => down += usize::from(seen_true),
                Some(true) => {
                    if let (true, Some(l)) = (down > 0, took.get(i).and_then(|x| x[k])) {
                        let end = i as f64 * t + l;
                        let ahead = (i..truth.len())
                            .take_while(|&j| (j as f64) * t < end - 1e-9)
                            .filter(|&j| truth[j][k] == Some(true))
                            .count();
                        match down < ahead {
                            true => fr += down,
                            false => fu += ahead,
                        }
                    }
                    (seen_true, down) = (true, 0);
                }
            }
        }
    }
    let secs = |n: usize| (n as f64 * t * 10.0).round() / 10.0;
    (secs(fr), secs(fu))
}

impl Score {
    /// `said[i][k]`: member k's Ready condition at tick i; `truth[i][k]`,
    /// and how long its read took (`took`, s); `about`: the member each
    /// fault of [`FAULTS`] is about.
    pub fn of(
        said: &[[bool; 3]],
        (truth, took): (&PerTick<bool>, &PerTick<f64>),
        phases: &[(u64, &str)],
        about: [usize; 4],
    ) -> Score {
        let t = TICK.as_secs_f64();
        let (mut fr, mut fu) = (0u32, 0u32);
        let mut per = vec![(0u32, 0u32); phases.len()];
        let mut transitions = 0u32;
        for (i, (s, tr)) in said.iter().zip(truth).enumerate() {
            let ph = phases
                .iter()
                .rposition(|(at, _)| (i as f64) * t >= *at as f64 - 1e-9)
                .unwrap_or(0);
            for k in 0..3 {
                if i > 0 && tr[k] != truth[i - 1][k] {
                    transitions += 1;
                }
                match (s[k], tr[k]) {
                    (true, Some(false)) => (fr, per[ph].0) = (fr + 1, per[ph].0 + 1),
                    (false, Some(true)) => (fu, per[ph].1) = (fu + 1, per[ph].1 + 1),
                    _ => {}
                }
            }
        }
        let secs = |n: u32| (n as f64 * t * 10.0).round() / 10.0;
        Score {
            false_ready: secs(fr),
            false_unready: secs(fu),
            lag: (fr + fu) as f64 * t / transitions.max(1) as f64,
            per_phase: per.iter().map(|&(a, b)| (secs(a), secs(b))).collect(),
            faults: Score::faults(said, truth, about),
            floor: look_ahead_floor(truth, took),
        }
    }
}

impl Score {
    fn faults(
        said: &[[bool; 3]],
        truth: &[[Option<bool>; 3]],
        about: [usize; 4],
    ) -> Vec<[(Option<f64>, Option<f64>); 2]> {
        let offset = 0.05;
        let end = said.len() as f64 * TICK.as_secs_f64();
        FAULTS
            .iter()
            .zip(about)
            .map(|(&(_, fault, recover), k)| {
                let horizon = FAULTS
                    .iter()
                    .map(|f| f.1 as f64)
                    .find(|&f| f > recover as f64)
                    .unwrap_or(end);
                let when = (fault as f64 + offset, recover as f64 + offset, horizon);
                [
                    out_and_back(|i| said.get(i).map(|s| s[k]), when),
                    out_and_back(|i| truth.get(i).and_then(|s| s[k]), when),
                ]
            })
            .collect()
    }
}

/// The `q` quantile (0..=1) of `xs`, nearest rank; 0 for none.
pub fn quantile(xs: &[f64], q: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n => v[((n - 1) as f64 * q).round() as usize],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_and_back_reads_the_ticks_as_the_benchmark_reads_transitions() {
        // Ready until 5.3 s, back at 6.0 s; the fault at 5.05, the recovery at 5.85.
        let state = |i: usize| Some(!(53..60).contains(&i));
        assert_eq!(
            out_and_back(state, (5.05, 5.85, 20.0)),
            (Some(0.25), Some(0.15))
        );
        // Already not ready at the fault: 0; never back by the horizon.
        let down = |i: usize| Some(i < 50);
        assert_eq!(out_and_back(down, (5.05, 5.85, 20.0)), (Some(0.0), None));
        // Ready throughout: no figure.
        assert_eq!(
            out_and_back(|_| Some(true), (5.05, 5.85, 20.0)),
            (None, None)
        );
    }

    #[test]
    fn a_score_counts_each_tick_against_the_truth_per_phase() {
        let phases = [(0, "a"), (1, "b")];
        // Tick 0..20 (2 s): member 0 says ready while the truth says not
        // at ticks 12..15, and not ready while it can serve at tick 5.
        let truth: Vec<[Option<bool>; 3]> = (0..20)
            .map(|i| [Some(!(12..15).contains(&i)), Some(true), None])
            .collect();
        let said: Vec<[bool; 3]> = (0..20).map(|i| [i != 5, true, true]).collect();
        let took = vec![[Some(0.01); 3]; 20];
        let s = Score::of(&said, (&truth, &took), &phases, [0; 4]);
        assert_eq!((s.false_ready, s.false_unready), (0.3, 0.1), "{s:?}");
        assert_eq!(s.per_phase, vec![(0.0, 0.1), (0.3, 0.0)]);
        // Two truth transitions (12 and 15): (3 + 1) ticks over 2.
        assert!((s.lag - 0.2).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn the_look_ahead_floor_takes_the_cheaper_side_of_each_outage() {
        // As the benchmark's self-test: member 0 down 3 ticks, then true at
        // a read that took 0.25 s (3 ticks ahead: waiting is cheaper);
        // member 1 down 1 tick, then a read of 0.5 s (5 ahead: staying
        // ready is); member 2 starts down (no outage before it is true).
        let (t, f) = (Some(true), Some(false));
        let rows = [
            [t, t, f, f, f, t, t, t, t, t],
            [t, f, t, t, t, t, t, t, t, t],
            [f, f, t, t, t, t, t, t, t, t],
        ];
        let took = [
            [0.01, 0.01, 0.01, 0.01, 0.01, 0.25, 0.01, 0.01, 0.01, 0.01],
            [0.01, 1.0, 0.5, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01],
            [1.0, 1.0, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01],
        ];
        let truth: Vec<[Option<bool>; 3]> =
            (0..10).map(|i| [0, 1, 2].map(|k| rows[k][i])).collect();
        let took: Vec<[Option<f64>; 3]> = (0..10)
            .map(|i| [0, 1, 2].map(|k| Some(took[k][i])))
            .collect();
        assert_eq!(look_ahead_floor(&truth, &took), (0.1, 0.3));
    }

    /// The benchmark's fault script, as `benches/fault_accuracy.py` writes
    /// it: the sim scores the same phases and fault kinds, so an edit of one
    /// without the other fails here.
    #[test]
    fn the_phases_and_faults_are_the_benchmarks() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../benches/fault_accuracy.py"
        );
        let script = std::fs::read_to_string(path).expect("benches/fault_accuracy.py");
        let list = |name: &str| -> String {
            let start = script.find(&format!("\n{name} = [\n")).expect(name);
            let body = &script[start + name.len() + 6..];
            body[..body.find("\n]").expect("the list's end")].to_string()
        };
        let phases: Vec<String> = PHASES
            .iter()
            .map(|(at, name)| format!("    ({at}, \"{name}\"),"))
            .collect();
        assert_eq!(list("PHASES"), phases.join("\n"));
        let faults = list("FAULTS");
        let faults: Vec<&str> = faults.lines().collect();
        assert_eq!(faults.len(), FAULTS.len(), "{faults:?}");
        for ((name, fault, recover), line) in FAULTS.iter().zip(&faults) {
            let head = format!("    (\"{name}\", {fault}, {recover}, ");
            assert!(line.starts_with(&head), "{line:?} is not {head:?}…");
        }
    }

    #[test]
    fn the_shipped_stanza_is_read_from_the_deploy_files() {
        let s = kubelet::Stanza::read(kubelet::SHIPPED_PROBE).expect("the shipped stanza");
        assert!(s.period >= Duration::from_secs(1), "{s:?}");
        assert!(s.wait.is_none_or(|w| w < s.timeout), "{s:?}");
        assert!(s.success >= 1 && s.failure >= 1, "{s:?}");
    }
}
