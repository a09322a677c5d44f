//! Test support for etcd-readiness-exporter, in one place: the integration
//! tests (a dev-dependency), the shell-driven monitoring test and the
//! benchmarks (the `fake-backup-sidecar` binary) use it. Nothing here ships
//! in the exporter. The local etcd cluster launcher itself is the
//! exporter's `localcluster` module (`demo` needs it too); [`etcd`] wraps it
//! with test timings and the heavy-test slot.
//!
//! One mechanism each: ports from [`ports`], waits with a deadline from
//! [`wait`], the wall clock from [`clock`], children killed on drop by
//! [`process::ChildGuard`], fetched binaries from [`binaries`],
//! which Prometheus and promtool from [`prometheus`], VictoriaMetrics from
//! [`victoriametrics`], a synthetic fleet's history from [`fleet`], a
//! delaying relay on loopback (a slow link between members) from [`slowlink`].

#![forbid(unsafe_code)]

pub mod atomic_writer;
pub mod backup;
pub mod binaries;
pub mod clock;
pub mod dns;
pub mod etcd;
pub mod exporter;
pub mod fleet;
pub mod heavy;
pub mod hostile;
pub mod pki;
pub mod ports;
pub mod process;
pub mod prometheus;
pub mod sim;
pub mod slowlink;
pub mod victoriametrics;
pub mod wait;
