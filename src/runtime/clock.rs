//! The one clock of the runtime: what time it is on this node, read in one
//! place and passed down to the engine and the sources, which read no clock
//! and no `/proc` themselves.
//!
//! A reading ([`NodeTime`]) has three parts: the monotonic instant (from
//! tokio's clock, so that a test under `tokio::time::pause` drives every
//! timer and every instant the runtime compares with one virtual clock), the
//! wall time, and how long the node's CPU has been contended so far (PSI,
//! [`crate::runtime::contention`]; `None` where the kernel does not say). The
//! exporter's own CFS quota ([`crate::runtime::cpuquota`]) is read once, when the
//! node clock is made: it does not change while the process runs.
//!
//! [`Clock::node`] reads the node; [`Clock::manual`] is for tests: its
//! instants are still tokio's (paused or not), its wall time follows them
//! from a given origin, and its contended CPU time is whatever the test
//! says ([`Clock::stall`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::runtime::cpuquota::CpuQuota;

/// One reading of the node's clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeTime {
    /// Monotonic: what every timing rule compares.
    pub now: Instant,
    /// What people read (logs, `/signals`, the verdict's `evaluated_at`).
    pub wall: SystemTime,
    /// The node's contended CPU time so far (a counter whose origin does not
    /// matter), `None` where the kernel does not say.
    pub cpu_stalled: Option<Duration>,
}

impl NodeTime {
    /// A reading without CPU pressure: what a caller that steps time itself
    /// (a test, a simulation) hands the engine.
    pub fn at(now: Instant, wall: SystemTime) -> NodeTime {
        NodeTime {
            now,
            wall,
            cpu_stalled: None,
        }
    }
}

/// The clock handed to the engine and the sources; cheap to clone.
#[derive(Clone, Debug)]
pub struct Clock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
enum Inner {
    Node {
        /// The kernel has no PSI: not asked again.
        no_psi: AtomicBool,
        quota: Option<CpuQuota>,
    },
    Manual {
        origin: (Instant, SystemTime),
        stalled_us: AtomicU64,
        quota: Option<CpuQuota>,
    },
}

impl Default for Clock {
    fn default() -> Self {
        Clock::node()
    }
}

/// The monotonic instant, from tokio's clock where a runtime runs (virtual
/// under `tokio::time::pause`), else the system's.
fn monotonic() -> Instant {
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::time::Instant::now().into_std()
    } else {
        Instant::now()
    }
}

impl Clock {
    /// This node's clocks, its CPU pressure and the process's CPU quota.
    pub fn node() -> Clock {
        Clock {
            inner: Arc::new(Inner::Node {
                no_psi: AtomicBool::new(false),
                quota: crate::runtime::cpuquota::current(),
            }),
        }
    }

    /// A clock for tests: tokio's instants, a wall time that starts at
    /// `wall` now and follows them, no contention until [`Clock::stall`],
    /// and `quota` as the process's CPU quota.
    pub fn manual(wall: SystemTime, quota: Option<CpuQuota>) -> Clock {
        Clock {
            inner: Arc::new(Inner::Manual {
                origin: (monotonic(), wall),
                stalled_us: AtomicU64::new(0),
                quota,
            }),
        }
    }

    /// The monotonic instant.
    pub fn now(&self) -> Instant {
        monotonic()
    }

    /// All of the node's clocks at once.
    pub fn read(&self) -> NodeTime {
        let now = monotonic();
        match &*self.inner {
            Inner::Node { no_psi, .. } => NodeTime {
                now,
                wall: SystemTime::now(),
                cpu_stalled: if no_psi.load(Ordering::Relaxed) {
                    None
                } else {
                    let s = crate::runtime::contention::cpu_stalled();
                    if s.is_none() {
                        no_psi.store(true, Ordering::Relaxed);
                    }
                    s
                },
            },
            Inner::Manual {
                origin, stalled_us, ..
            } => NodeTime {
                now,
                wall: origin.1 + now.saturating_duration_since(origin.0),
                cpu_stalled: Some(Duration::from_micros(stalled_us.load(Ordering::Relaxed))),
            },
        }
    }

    /// The wall time.
    pub fn wall(&self) -> SystemTime {
        match &*self.inner {
            Inner::Node { .. } => SystemTime::now(),
            Inner::Manual { .. } => self.read().wall,
        }
    }

    /// The exporter's own CPU quota, read when the clock was made.
    pub fn cpu_quota(&self) -> Option<CpuQuota> {
        match &*self.inner {
            Inner::Node { quota, .. } | Inner::Manual { quota, .. } => *quota,
        }
    }

    /// Whether the node's contended CPU time is known (the kernel has PSI).
    pub fn has_cpu_pressure(&self) -> bool {
        self.read().cpu_stalled.is_some()
    }

    /// A manual clock's node was contended for `d` more (nothing on the node
    /// clock: its pressure is the kernel's).
    pub fn stall(&self, d: Duration) {
        if let Inner::Manual { stalled_us, .. } = &*self.inner {
            let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
            stalled_us.fetch_add(us, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_manual_clock_follows_tokios_paused_time_in_every_part() {
        let w0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let c = Clock::manual(w0, None);
        let t0 = c.read();
        assert_eq!(t0.wall, w0);
        assert_eq!(t0.cpu_stalled, Some(Duration::ZERO));
        tokio::time::advance(Duration::from_millis(250)).await;
        c.stall(Duration::from_millis(40));
        let t1 = c.read();
        assert_eq!(t1.now - t0.now, Duration::from_millis(250));
        assert_eq!(t1.wall, w0 + Duration::from_millis(250));
        assert_eq!(t1.cpu_stalled, Some(Duration::from_millis(40)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_node_clocks_instants_are_tokios() {
        let c = Clock::node();
        let a = c.now();
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(c.now() - a >= Duration::from_secs(3600));
    }
}
