//! How many heavy tests (real etcd clusters, Chromium, Prometheus) run at
//! once, across every test process: a semaphore of lock files.
//!
//! `cargo test` runs the tests of one binary on as many threads as there
//! are CPUs, and nextest runs binaries side by side; on a 2-core machine
//! two or more 3-member clusters plus an exporter each starve one another
//! and a healthy cluster misses its own deadlines. A test that starts a
//! heavy part first takes a [`Slot`]: one of `ERE_HEAVY_TESTS` lock files
//! (default: half the CPUs, at least 1) under the temp dir, held with an
//! exclusive `flock` until the slot is dropped (the kernel releases it if
//! the process dies). The slot is per thread and re-entrant: a test that
//! starts two clusters takes one slot, not two (so it cannot deadlock with
//! itself).

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::sync::Arc;
use std::time::Duration;

use crate::wait::poll_blocking;

/// The longest a test waits for a slot before it fails, saying so.
const WAIT: Duration = Duration::from_secs(30 * 60);

thread_local! {
    static HELD: RefCell<Option<std::sync::Weak<File>>> = const { RefCell::new(None) };
}

/// A held heavy-test slot; dropping the last clone frees it (it may move to
/// another thread with what holds it).
#[derive(Clone, Debug)]
pub struct Slot(#[allow(dead_code)] Arc<File>);

/// How many heavy tests may run at once.
pub fn slots() -> usize {
    std::env::var("ERE_HEAVY_TESTS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            (cpus / 2).max(1)
        })
}

/// Take a heavy-test slot (or share the one this thread holds), waiting as
/// long as it takes for another test to finish, at most 30 minutes.
pub fn slot() -> Slot {
    if let Some(f) = HELD.with(|h| h.borrow().as_ref().and_then(|w| w.upgrade())) {
        return Slot(f);
    }
    let n = slots();
    let dir = std::env::temp_dir();
    let taken = poll_blocking(WAIT, Duration::from_millis(50), || {
        for i in 0..n {
            let path = dir.join(format!("etcd-readiness-heavy-test-{i}.lock"));
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .unwrap_or_else(|e| panic!("heavy-test slot {}: {e}", path.display()));
            if file.try_lock().is_ok() {
                let f = Arc::new(file);
                HELD.with(|h| *h.borrow_mut() = Some(Arc::downgrade(&f)));
                return Ok(Slot(f));
            }
        }
        Err(())
    });
    taken.unwrap_or_else(|()| {
        panic!(
            "no heavy-test slot of {n} free within {WAIT:?} (ERE_HEAVY_TESTS; lock files \
             etcd-readiness-heavy-test-*.lock in {})",
            dir.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_shares_its_slot_and_another_waits_for_it() {
        // Re-entrancy holds whatever ERE_HEAVY_TESTS says.
        let a = slot();
        let b = slot();
        assert!(Arc::ptr_eq(&a.0, &b.0), "one thread, one slot");
        drop(a);
        drop(b);
        // Freed: a new slot on this thread is a new lock, not the old one.
        let c = slot();
        drop(c);
    }
}
