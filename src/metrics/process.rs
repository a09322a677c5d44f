//! Process and build metrics, the same for every component: CPU, memory,
//! file descriptors and start time read from `/proc/self` at each scrape
//! ([`ProcessCollector`], the families and meanings of client_golang's
//! process collector), and `etcd_readiness_build_info` ([`crate::metrics::build_info`]).
//!
//! Clock ticks (`_SC_CLK_TCK`) and the page size (`_SC_PAGESIZE`) come from
//! `sysconf` through rustix's safe wrappers, read once: USER_HZ is not 100
//! everywhere and arm64 kernels run with 16K or 64K pages.

use std::time::SystemTime;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use crate::metrics::build_info;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    revision: String,
    branch: String,
    rustc: String,
    target: String,
}

/// Process metrics read from `/proc/self` at each scrape.
#[derive(Debug)]
pub struct ProcessCollector {
    start_time: f64,
    units: Units,
}

/// The kernel's units of `/proc/self/stat`.
#[derive(Clone, Copy, Debug)]
struct Units {
    ticks_per_second: f64,
    page_bytes: f64,
}

impl Units {
    fn of_this_kernel() -> Self {
        Units {
            ticks_per_second: rustix::param::clock_ticks_per_second() as f64,
            page_bytes: rustix::param::page_size() as f64,
        }
    }
}

impl ProcessCollector {
    pub fn register(registry: &mut Registry, now: SystemTime) {
        let units = Units::of_this_kernel();
        let start_time = process_start_time(units)
            .unwrap_or_else(|| etcd_readiness_policy::verdict::unix_seconds(now));
        registry.register_collector(Box::new(ProcessCollector { start_time, units }));
    }
}

impl prometheus_client::collector::Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stat = read_stat(self.units);
        if let Some(cpu) = stat.as_ref().map(|s| s.cpu_seconds) {
            let c = ConstCounter::new(cpu);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                c.metric_type(),
            )?)?;
        }
        let mut gauge = |name: &str, help: &str, value: f64| -> Result<(), std::fmt::Error> {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
        };
        if let Some(s) = &stat {
            gauge(
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                s.rss_bytes,
            )?;
            gauge(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                s.vsize_bytes,
            )?;
        }
        if let Some(n) = open_fds() {
            gauge(
                "process_open_fds",
                "Number of open file descriptors",
                n as f64,
            )?;
        }
        if let Some(n) = max_fds() {
            gauge(
                "process_max_fds",
                "Maximum number of open file descriptors (the soft RLIMIT_NOFILE)",
                n as f64,
            )?;
        }
        gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            self.start_time,
        )?;
        Ok(())
    }
}

struct ProcStat {
    cpu_seconds: f64,
    rss_bytes: f64,
    vsize_bytes: f64,
    start_ticks: f64,
}

fn read_stat(units: Units) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?, units)
}

/// The fields of a `/proc/PID/stat` line we export.
fn parse_stat(s: &str, units: Units) -> Option<ProcStat> {
    // The command name is in parentheses and may contain spaces: split after it.
    let rest = s.get(s.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields from 3 (state) on, 1-based as in proc(5): utime=14, stime=15,
    // starttime=22, vsize=23 (bytes), rss=24 (pages).
    let get = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    Some(ProcStat {
        cpu_seconds: (get(14)? + get(15)?) / units.ticks_per_second,
        start_ticks: get(22)?,
        vsize_bytes: get(23)?,
        rss_bytes: get(24)? * units.page_bytes,
    })
}

/// Entries of `/proc/self/fd` (the directory's own descriptor included while
/// it is read, as client_golang counts).
fn open_fds() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count())
}

/// The soft limit on open descriptors, which the HTTP connection cap stays below.
fn max_fds() -> Option<u64> {
    rlimit::getrlimit(rlimit::Resource::NOFILE)
        .ok()
        .map(|(soft, _)| soft)
}

fn process_start_time(units: Units) -> Option<f64> {
    let stat = read_stat(units)?;
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
    Some(boot + stat.start_ticks / units.ticks_per_second)
}

/// Register the process collector and `etcd_readiness_build_info`; `now`,
/// the wall time, stands for the start time where /proc does not say it.
pub fn register(registry: &mut Registry, now: SystemTime) {
    ProcessCollector::register(registry, now);
    let build = Family::<BuildLabels, Gauge>::default();
    build
        .get_or_create(&BuildLabels {
            version: build_info::VERSION.to_string(),
            revision: build_info::REVISION.to_string(),
            branch: build_info::BRANCH.to_string(),
            rustc: build_info::RUSTC.to_string(),
            target: build_info::TARGET.to_string(),
        })
        .set(1);
    registry.register(
        "etcd_readiness_build_info",
        "Build information (version, git revision and branch, rustc, target); value 1",
        build,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_is_readable() {
        let units = Units::of_this_kernel();
        let s = read_stat(units).expect("/proc/self/stat");
        assert!(s.rss_bytes > 0.0);
        assert!(s.vsize_bytes >= s.rss_bytes);
        assert!(process_start_time(units).unwrap() > 1.0e9);
    }

    #[test]
    fn stat_fields_are_scaled_by_the_kernel_units() {
        // A command name with spaces and parentheses, as proc(5) allows.
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 \
                    3 0 1000 123456789 7 18446744073709551615";
        let units = Units {
            ticks_per_second: 250.0,
            page_bytes: 65536.0,
        };
        let s = parse_stat(line, units).expect("parses");
        assert_eq!(s.cpu_seconds, 300.0 / 250.0);
        assert_eq!(s.start_ticks, 1000.0);
        assert_eq!(s.vsize_bytes, 123_456_789.0);
        assert_eq!(s.rss_bytes, 7.0 * 65536.0);
    }
}
