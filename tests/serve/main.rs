//! The other tests that run the exporter against real parts — a real etcd,
//! dnsmasq, Prometheus and promtool, curl, the backup sidecar stand-in, a
//! real cgroup — in one binary. Each module was its own binary
//! `tests/NAME.rs`; test paths stay `NAME::test` (e.g.
//! `cargo test --test serve web_config::`). Support code is the testkit
//! crate (`crates/testkit`).
//!
//! Three tests keep a binary of their own because they measure state of the
//! whole test process that parallel tests in the same process would
//! disturb: `tests/process_fds.rs` counts this process's open descriptors,
//! `tests/hostile_sources.rs` compares this process's RSS before and after
//! hostile answers, and `tests/hostile_policy.rs` counts this process's
//! threads and bytes read (`/proc/self/status`, `/proc/self/io`) and sends
//! it SIGHUP, which every in-process exporter here would also receive.
//! `cpu_quota` is here: what it reads is the exporter child's own quota in
//! its own cgroup, not this process.

mod candidate_policy;
mod cpu_quota;
mod credentials;
mod dual_stack;
mod http_hardening;
mod longpoll;
mod policy_reload_limits;
mod promtool;
mod replay;
mod replay_fleet;
mod serve_reload;
mod sources;
mod supervision;
mod web_config;
