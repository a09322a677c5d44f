//! Test-only stand-ins and harness parts for etcd-readiness-exporter (the
//! backup sidecar stand-in; the heavy-test semaphore; fetched binaries), in one place shared by
//! the integration tests (a dev-dependency), the shell-driven monitoring test
//! and the benchmarks (the `fake-backup-sidecar` binary). Nothing here ships
//! in the exporter. The local etcd cluster launcher is not here: `demo` needs
//! it too, so it lives in the exporter's `localcluster` module.

#![forbid(unsafe_code)]

pub mod backup;
pub mod binaries;
pub mod heavy;
