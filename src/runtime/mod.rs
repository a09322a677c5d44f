//! What every task runs on, below the data flow: the one clock of the node
//! ([`clock`]: monotonic time, wall time, whether the CPU is stalled — read
//! here and nowhere else), supervision of the long-running tasks
//! ([`supervise`]), the node's CPU contention and the container's CPU quota
//! that the clock reports, and logging.
//!
//! [`Runtime`] bundles the clock and the supervisor: `serve` builds one and
//! hands it to the engine, the samplers, the reloaders' watchers and the
//! HTTP state, so what a task runs on is a parameter it is given, never
//! something it looks up.

pub mod clock;
pub mod contention;
pub mod cpuquota;
pub mod logging;
pub mod supervise;

use clock::Clock;
use supervise::Supervisor;

/// The clock every task reads and the supervisor every long-running task
/// runs under. Built once by `serve`; cheap to clone (both parts are shared).
#[derive(Clone, Debug)]
pub struct Runtime {
    /// The one clock (see [`clock`]).
    pub clock: Clock,
    /// Restarts, counts and last failures of the tasks (`/livez?verbose`).
    pub supervisor: Supervisor,
}

impl Runtime {
    /// `clock` with a supervisor of its own, no task running yet.
    pub fn new(clock: Clock) -> Runtime {
        Runtime {
            supervisor: Supervisor::new(clock.clone()),
            clock,
        }
    }
}
