//! The contract between sources and the runner: a [`Sampler`] writes one round
//! of its signals into the store, and says why a round failed with a
//! [`SampleError`] whose `reason` is a bounded metrics label.
//!
//! This file mirrors the `Sampler` trait of the shared contract; the
//! integrator merges it with the runner in `sources/mod.rs`.

use std::future::Future;
use std::time::Duration;

use crate::signals::{SignalStore, Source};

/// Why a sampling round (or a part of it) failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct SampleError {
    /// A bounded label for `etcd_readiness_sample_errors_total{reason}`:
    /// "timeout" | "connect" | "tls" | "status" | "parse" | "rpc" | "dns" |
    /// "nxdomain" | "servfail" | "mismatch".
    pub reason: &'static str,
    /// What failed, with what value; shown to operators.
    pub message: String,
}

/// One source of signals, run in rounds by the runner.
pub trait Sampler: Send + 'static {
    fn source(&self) -> Source;
    fn interval(&self) -> Duration;
    /// One round: write every signal of this source into the store (record_ok or record_err for
    /// each, with the round's Instant). Must bound its own time (timeouts on every network call).
    fn sample(
        &mut self,
        store: &SignalStore,
    ) -> impl Future<Output = Result<(), SampleError>> + Send;
}
