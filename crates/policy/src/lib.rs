//! The readiness policy language of etcd-readiness-exporter, as a crate of
//! its own so that the data flow is enforced by Cargo: this crate knows the
//! [`signals`] catalogue and readings, the [`policy`] language (parse →
//! check → evaluate + explain) and the [`verdict`] it produces, and the
//! [`policytest`] runner behind the `test` command, and how all of it is
//! written for people ([`text`]). It depends on no async
//! runtime, HTTP stack or clock: time is passed in as `Instant`s, so the same
//! evaluator runs in `serve`, in `test` and in the conformance tables.

#![forbid(unsafe_code)]

pub mod duration;
pub mod policy;
pub mod policytest;
pub mod signals;
pub mod simulation;
pub mod text;
pub mod verdict;
pub mod yaml;
