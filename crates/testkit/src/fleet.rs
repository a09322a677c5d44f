//! A synthetic fleet's history, the same for every store: `members` etcd
//! members in clusters of three (`namespace="shoot--fleet--NNNNN"`,
//! `pod="etcd-main-K"`, `job="etcd-readiness"`), sampled every `step`
//! seconds for `steps + 1` samples, each written 5 s before its step so
//! that a replay at that step sees it. Every member exports what the
//! exporter does for `leader` and `qget_ms`: `etcd_readiness_signal_known`
//! (1, or 0 while unknown) and the value while known; and its recorded
//! verdict under [`REFERENCE`]; its `etcd_readiness_member_info` carries
//! `cluster_id`.
//!
//! What happens in it, by member index `i`:
//! - `i % 37 == 0`: no leader for 4 steps (not ready under both policies);
//! - `i % 111 == 5` ([`changed`]): `qget_ms` at 400 for 10 + i % 20 steps:
//!   ready under the reference (`< 500`), not under [`CANDIDATE`] (`< 300`);
//! - `i % 53 == 7` ([`unknown`]): `qget_ms` unknown for 3 steps (not ready
//!   under both);
//! - everyone else: `qget_ms` between 10 and 29.
//!
//! Written as OpenMetrics (seconds, `# EOF`: what `promtool tsdb
//! create-blocks-from openmetrics` reads) or as Prometheus text with
//! millisecond timestamps (what VictoriaMetrics' `/api/v1/import/prometheus`
//! reads), streamed to any writer: the `fleet-history` binary gives the
//! benchmarks the same history.

use std::io::{self, Write};

/// The policy that wrote the recorded verdict.
pub const REFERENCE: &str = "check leader: leader\ncheck fast: qget_ms < 500\n";
/// The candidate: stricter on latency.
pub const CANDIDATE: &str = "check leader: leader\ncheck fast: qget_ms < 300\n";

/// The two text formats stores ingest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics, timestamps in seconds, ending in `# EOF` (promtool).
    OpenMetrics,
    /// Prometheus text, timestamps in milliseconds (VictoriaMetrics).
    PromText,
}

/// The fleet's shape: `members` from `start` (Unix seconds, the first
/// step), `steps + 1` samples `step` seconds apart.
#[derive(Clone, Copy, Debug)]
pub struct Fleet {
    pub members: usize,
    pub start: i64,
    pub step: i64,
    pub steps: i64,
}

/// Whether member `i` is one the candidate changes.
pub fn changed(i: usize) -> bool {
    i % 111 == 5
}

/// Whether member `i` has steps at which `qget_ms` is unknown.
pub fn unknown(i: usize) -> bool {
    i % 53 == 7
}

/// Member `i`'s labels as the replay reports them.
pub fn member_labels(i: usize) -> [(&'static str, String); 3] {
    [
        ("job", "etcd-readiness".to_string()),
        ("namespace", format!("shoot--fleet--{:05}", i / 3)),
        ("pod", format!("etcd-main-{}", i % 3)),
    ]
}

/// `cluster_id` of member `i`'s cluster.
pub fn cluster_id(i: usize) -> String {
    format!("{:x}", 0x5eed_0000_u64 + (i / 3) as u64)
}

impl Fleet {
    /// Member `i`'s `(leader, qget_ms)` at sample `s`.
    pub fn sample(&self, i: usize, s: i64) -> (f64, f64) {
        let n = self.steps.max(1);
        let leaderless = i.is_multiple_of(37) && {
            let at = (i as i64 * 5) % n;
            (at..at + 4).contains(&s)
        };
        let slow = changed(i) && {
            let at = (i as i64 * 13) % (n / 2).max(1);
            (at..at + 10 + (i % 20) as i64).contains(&s)
        };
        let q = if slow {
            400.0
        } else {
            10.0 + ((i as i64 * 7 + s) % 20) as f64
        };
        (if leaderless { 0.0 } else { 1.0 }, q)
    }

    /// Whether member `i`'s `qget_ms` is known at sample `s`.
    pub fn qget_known(&self, i: usize, s: i64) -> bool {
        let at = (i as i64 * 17) % self.steps.max(1);
        !(unknown(i) && (at..at + 3).contains(&s))
    }

    /// Write the whole history in `format`.
    pub fn write(&self, format: Format, out: &mut impl Write) -> io::Result<()> {
        self.write_samples(format, 0, self.steps, out)
    }

    /// Write samples `first..=last` only (a benchmark feeds promtool one
    /// block's worth at a time: it reads its whole input once per block).
    // long because: one loop per family, each a few lines; apart they
    // would share the closures through arguments.
    pub fn write_samples(
        &self,
        format: Format,
        first: i64,
        last: i64,
        out: &mut impl Write,
    ) -> io::Result<()> {
        let samples = first.max(0)..=last.min(self.steps);
        let ts = |s: i64| {
            let t = self.start + s * self.step - 5;
            match format {
                Format::OpenMetrics => t,
                Format::PromText => t * 1000,
            }
        };
        let labels = |i: usize| {
            let [(a, va), (b, vb), (c, vc)] = member_labels(i);
            format!("{a}=\"{va}\",{b}=\"{vb}\",{c}=\"{vc}\"")
        };
        let family = |out: &mut dyn Write, name: &str| -> io::Result<()> {
            if format == Format::OpenMetrics {
                writeln!(out, "# HELP {name} synthetic\n# TYPE {name} gauge")?;
            }
            Ok(())
        };
        family(out, "etcd_readiness_ready")?;
        for i in 0..self.members {
            let l = labels(i);
            for s in samples.clone() {
                let (leader, q) = self.sample(i, s);
                let ready = u8::from(leader == 1.0 && q < 500.0 && self.qget_known(i, s));
                writeln!(out, "etcd_readiness_ready{{{l}}} {ready} {}", ts(s))?;
            }
        }
        family(out, "etcd_readiness_signal_value")?;
        for i in 0..self.members {
            let l = labels(i);
            for (signal, pick) in [("leader", 0), ("qget_ms", 1)] {
                for s in samples.clone() {
                    if pick == 1 && !self.qget_known(i, s) {
                        continue;
                    }
                    let v = self.sample(i, s);
                    let v = if pick == 0 { v.0 } else { v.1 };
                    writeln!(
                        out,
                        "etcd_readiness_signal_value{{{l},signal=\"{signal}\",source=\"etcd\"}} {v} {}",
                        ts(s)
                    )?;
                }
            }
        }
        family(out, "etcd_readiness_signal_known")?;
        for i in 0..self.members {
            let l = labels(i);
            for signal in ["leader", "qget_ms"] {
                for s in samples.clone() {
                    let known = u8::from(signal == "leader" || self.qget_known(i, s));
                    writeln!(
                        out,
                        "etcd_readiness_signal_known{{{l},signal=\"{signal}\",source=\"etcd\"}} {known} {}",
                        ts(s)
                    )?;
                }
            }
        }
        family(out, "etcd_readiness_member_info")?;
        for i in 0..self.members {
            let l = labels(i);
            let (c, m) = (cluster_id(i), format!("{:x}", 0xabc0_0000_u64 + i as u64));
            // Every 10th sample is enough for the index to hold it.
            for s in samples.clone().filter(|s| s.rem_euclid(10) == 0) {
                writeln!(
                    out,
                    "etcd_readiness_member_info{{{l},cluster_id=\"{c}\",member_id=\"{m}\",name=\"m{i}\"}} 1 {}",
                    ts(s)
                )?;
            }
        }
        if format == Format::OpenMetrics {
            writeln!(out, "# EOF")?;
        }
        Ok(())
    }
}
