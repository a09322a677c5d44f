//! The commands the binary runs, on top of every other layer: the command
//! line ([`cli`]), `serve` (wiring the runtime, the sources, the engine and
//! the listeners together), and the demo and the local etcd cluster it (and the
//! tests) start.

pub mod cli;
pub mod demo;
pub mod localcluster;
pub mod serve;
