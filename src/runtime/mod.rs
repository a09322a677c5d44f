//! What every task runs on, below the data flow: the one clock of the node
//! ([`clock`]: monotonic time, wall time, whether the CPU is stalled — read
//! here and nowhere else), supervision of the long-running tasks
//! ([`supervise`]), the node's CPU contention and the container's CPU quota
//! that the clock reports, and logging.

pub mod clock;
pub mod contention;
pub mod cpuquota;
pub mod logging;
pub mod supervise;
