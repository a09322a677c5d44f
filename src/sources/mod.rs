//! Sources: the parts that sample the world (the backup sidecar, the DNS
//! owner record, generic Prometheus endpoints) into the signal store. Each
//! implements [`Sampler`]; a runner calls it at its interval.

pub mod backup;
pub mod client;
pub mod config;
pub mod owner;
pub mod promtext;
pub mod sampler;
pub mod scrape;

pub use sampler::{SampleError, Sampler};
