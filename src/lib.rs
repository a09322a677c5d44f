//! etcd-readiness-exporter: decides when an etcd member is ready to serve,
//! explains why, and exposes it to the kubelet, Prometheus and Grafana.
//!
//! Data flows one way: [`sources`] sample etcd and its neighbours into the
//! policy crate's signal store (`etcd_readiness_policy::signals`); the policy
//! (pure, no IO, `etcd_readiness_policy::policy`) turns readings into a
//! verdict; the [`engine`] runs that loop and publishes the verdict, which
//! [`http`] and [`metrics`] serve, behind the access control of [`web`].
//!
//! Each folder is one layer (see ARCHITECTURE.md, "Code map"):
//! [`cmd`] the commands the binary runs, on top; [`runtime`] what every
//! task runs on (the one clock, supervision, contention, the CPU quota,
//! logging); [`outside`] every read from outside, bounded and checked (files,
//! the one HTTP client, URLs with secrets, numbers); in between, the layers
//! of the data flow.

#![forbid(unsafe_code)]

pub mod cmd;
pub mod config;
pub mod engine;
pub mod http;
pub mod lint;
pub mod metrics;
pub mod outside;
pub mod reload;
pub mod replay;
pub mod runtime;
pub mod sources;
pub mod web;
