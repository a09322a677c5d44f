//! Process and build metrics, the same for every component: CPU, memory,
//! file descriptors and start time read from `/proc/self` at each scrape
//! ([`ProcessCollector`]), and `etcd_readiness_build_info`.

use std::time::SystemTime;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    rustc: String,
}

/// Process metrics read from `/proc/self` at each scrape.
#[derive(Debug)]
pub struct ProcessCollector {
    start_time: f64,
}

impl ProcessCollector {
    pub fn register(registry: &mut Registry) {
        let start_time =
            process_start_time().unwrap_or_else(|| crate::verdict::unix_seconds(SystemTime::now()));
        registry.register_collector(Box::new(ProcessCollector { start_time }));
    }
}

impl prometheus_client::collector::Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stat = read_stat();
        if let Some(cpu) = stat.as_ref().map(|s| s.cpu_seconds) {
            let c = ConstCounter::new(cpu);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                c.metric_type(),
            )?)?;
        }
        if let Some(rss) = stat.as_ref().map(|s| s.rss_bytes) {
            let g = ConstGauge::new(rss);
            g.encode(encoder.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                None,
                g.metric_type(),
            )?)?;
        }
        let g = ConstGauge::new(self.start_time);
        g.encode(encoder.encode_descriptor(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            None,
            g.metric_type(),
        )?)?;
        Ok(())
    }
}

struct ProcStat {
    cpu_seconds: f64,
    rss_bytes: f64,
    start_ticks: f64,
}

/// Clock ticks per second; 100 on every Linux we run on (USER_HZ).
const TICKS: f64 = 100.0;
const PAGE: f64 = 4096.0;

fn read_stat() -> Option<ProcStat> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name is in parentheses and may contain spaces: split after it.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields from 3 (state) on: utime=14, stime=15, starttime=22, rss=24 (1-based in proc(5)).
    let get = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    Some(ProcStat {
        cpu_seconds: (get(14)? + get(15)?) / TICKS,
        start_ticks: get(22)?,
        rss_bytes: get(24)? * PAGE,
    })
}

fn process_start_time() -> Option<f64> {
    let stat = read_stat()?;
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
    Some(boot + stat.start_ticks / TICKS)
}

/// Register the process collector and `etcd_readiness_build_info`.
pub fn register(registry: &mut Registry) {
    ProcessCollector::register(registry);
    let build = Family::<BuildLabels, Gauge>::default();
    build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION").to_string(),
            rustc: env!("ERE_RUSTC_VERSION").to_string(),
        })
        .set(1);
    registry.register(
        "etcd_readiness_build_info",
        "Build information; value 1",
        build,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_is_readable() {
        let s = read_stat().expect("/proc/self/stat");
        assert!(s.rss_bytes > 0.0);
        assert!(process_start_time().unwrap() > 1.0e9);
    }
}
