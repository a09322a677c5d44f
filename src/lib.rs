//! etcd-readiness-exporter: decides when an etcd member is ready to serve,
//! explains why, and exposes it to the kubelet, Prometheus and Grafana.
//!
//! Data flows one way: [`sources`] sample etcd and its neighbours into the
//! [`signals`] store; the [`policy`] (pure, no IO) turns readings into a
//! [`verdict`]; the [`engine`] runs that loop and publishes the verdict, which
//! [`http`] and [`metrics`] serve, behind the access control of [`web`].
//! See ARCHITECTURE.md.

#![forbid(unsafe_code)]

pub mod bounded_read;
pub mod build_info;
pub mod checked;
pub mod cli;
pub mod clock;
pub mod config;
pub mod contention;
pub mod cpuquota;
pub mod demo;
pub mod engine;
pub mod filewatch;
pub mod http;
pub mod lint;
pub mod localcluster;
pub mod logging;
pub mod metrics;
pub mod redacted_url;
pub use etcd_readiness_policy::yaml as policy_yaml;
pub use etcd_readiness_policy::{duration, policy, policytest, signals, text, verdict};
pub mod reload;
pub mod replay;
pub mod serve;
pub mod sources;
pub mod supervise;
pub mod web;
