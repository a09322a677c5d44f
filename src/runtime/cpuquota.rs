//! The exporter's own CPU limit, read from its cgroup at start.
//!
//! A Kubernetes CPU limit is a CFS quota: so many milliseconds of CPU per
//! period (100 ms by default). A process that has used its quota is frozen
//! until the period ends, so a container limited to 50m can stand still for
//! about 95 ms while an answer from etcd waits in its socket. The etcd
//! source trusts its last answer for 100 ms while a newer call is pending
//! (`EtcdConfig::trust`); a freeze that long made healthy signals
//! "outdated" for a moment — a false not-ready the exporter caused itself
//! (`benches/cpu_quota.sh`, docs/BENCHMARKS.md). So when a quota is set, the
//! trust period covers one whole CFS period plus a margin: only a call still
//! pending after that says something about etcd. (Under a sustained flood a
//! freeze can last two periods; that case is measured, not covered.)
//!
//! Reads cgroup v2 (`cpu.max`) or v1 (`cpu.cfs_quota_us`,
//! `cpu.cfs_period_us`) at the path `/proc/self/cgroup` names, falling back
//! to the root of the mount (a container usually sees its own cgroup there).
//! Every read is a small sysfs file, through [`crate::outside::bounded_read`] capped
//! at 4 KiB; anything absent,
//! unreadable or absurd means "no quota known".

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A CFS quota: `quota` of CPU time per `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuQuota {
    pub quota: Duration,
    pub period: Duration,
}

impl CpuQuota {
    /// How long one spent quota freezes the process at most: one period.
    pub fn longest_freeze(&self) -> Duration {
        self.period
    }

    /// The quota in millicores, as a Kubernetes limit is written.
    pub fn millicores(&self) -> u128 {
        self.quota.as_micros() * 1000 / self.period.as_micros().max(1)
    }
}

/// Periods outside this range are not believed (the kernel allows 1 ms to
/// 1 s).
const PERIOD_RANGE: (u64, u64) = (1_000, 1_000_000);

/// Parse cgroup v2 `cpu.max`: `"max 100000"` (no quota) or
/// `"10000 100000"` (10 ms per 100 ms).
pub fn parse_cpu_max(text: &str) -> Option<CpuQuota> {
    let mut it = text.split_whitespace();
    let quota = it.next()?;
    let period = it.next().map_or(Some(100_000), |p| p.parse::<u64>().ok())?;
    if quota == "max" {
        return None;
    }
    quota_of(quota.parse::<u64>().ok()?, period)
}

/// Parse cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us` (`-1`: no
/// quota).
pub fn parse_cfs(quota: &str, period: &str) -> Option<CpuQuota> {
    let q: i64 = quota.trim().parse().ok()?;
    let p: u64 = period.trim().parse().ok()?;
    if q <= 0 {
        return None;
    }
    quota_of(q as u64, p)
}

fn quota_of(quota_us: u64, period_us: u64) -> Option<CpuQuota> {
    if !(PERIOD_RANGE.0..=PERIOD_RANGE.1).contains(&period_us) || quota_us == 0 {
        return None;
    }
    Some(CpuQuota {
        quota: Duration::from_micros(quota_us),
        period: Duration::from_micros(period_us),
    })
}

/// The cgroup paths `/proc/self/cgroup` names: (v2 path, v1 cpu path).
pub fn cgroup_paths(proc_self_cgroup: &str) -> (Option<String>, Option<String>) {
    let mut v2 = None;
    let mut v1 = None;
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "cpu") {
            v1 = Some(path.to_string());
        }
    }
    (v2, v1)
}

/// This process's CPU quota, if its cgroup has one.
pub fn current() -> Option<CpuQuota> {
    let own = read_small(Path::new("/proc/self/cgroup")).unwrap_or_default();
    let (v2, v1) = cgroup_paths(&own);
    let root = Path::new("/sys/fs/cgroup");
    for dir in candidates(root, v2.as_deref()) {
        if let Some(text) = read_small(&dir.join("cpu.max")) {
            return parse_cpu_max(&text);
        }
    }
    for mount in ["cpu", "cpu,cpuacct", "cpuacct,cpu"] {
        for dir in candidates(&root.join(mount), v1.as_deref()) {
            if let (Some(q), Some(p)) = (
                read_small(&dir.join("cpu.cfs_quota_us")),
                read_small(&dir.join("cpu.cfs_period_us")),
            ) {
                return parse_cfs(&q, &p);
            }
        }
    }
    None
}

/// The cgroup's own directory first, then the root of the mount.
fn candidates(mount: &Path, path: Option<&str>) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = path {
        let rel = p.trim_start_matches('/');
        if !rel.is_empty() && !rel.split('/').any(|c| c == "..") {
            v.push(mount.join(rel));
        }
    }
    v.push(mount.to_path_buf());
    v
}

fn read_small(path: &Path) -> Option<String> {
    let bytes = crate::outside::bounded_read::read_bounded(path, 4096).ok()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_v2_cpu_max() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        let q = parse_cpu_max("10000 100000\n").unwrap();
        assert_eq!(q.quota, Duration::from_millis(10));
        assert_eq!(q.period, Duration::from_millis(100));
        assert_eq!(q.millicores(), 100);
        assert_eq!(q.longest_freeze(), Duration::from_millis(100));
        // Absurd or broken contents mean "no quota known", never a panic.
        for bad in [
            "",
            "x 100000",
            "10000 0",
            "10000 99999999999",
            "0 100000",
            "-5 100000",
        ] {
            assert_eq!(parse_cpu_max(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cgroup_v1_cfs_files() {
        assert_eq!(parse_cfs("-1\n", "100000\n"), None);
        let q = parse_cfs("50000\n", "100000\n").unwrap();
        assert_eq!(q.millicores(), 500);
        for (a, b) in [
            ("", "100000"),
            ("5000", "abc"),
            ("5000", "0"),
            ("99999999999999999999", "100000"),
        ] {
            assert_eq!(parse_cfs(a, b), None, "{a:?} {b:?}");
        }
    }

    #[test]
    fn proc_self_cgroup_names_both_hierarchies() {
        let v1 = "12:cpu,cpuacct:/kubepods/burstable/pod1/abc\n11:memory:/x\n0::/\n";
        assert_eq!(
            cgroup_paths(v1),
            (
                Some("/".to_string()),
                Some("/kubepods/burstable/pod1/abc".to_string())
            )
        );
        let v2 = "0::/kubepods.slice/pod2.slice/cri-containerd-1.scope\n";
        assert_eq!(
            cgroup_paths(v2),
            (
                Some("/kubepods.slice/pod2.slice/cri-containerd-1.scope".to_string()),
                None
            )
        );
        // A path that tries to climb out is not followed.
        assert_eq!(
            candidates(Path::new("/sys/fs/cgroup"), Some("/../../etc")),
            vec![PathBuf::from("/sys/fs/cgroup")]
        );
    }
}
