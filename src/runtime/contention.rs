//! How long this node's CPU has been contended: Linux pressure stall
//! information (`/proc/pressure/cpu`, `some total=` in microseconds: the
//! time at least one runnable task waited for a CPU).
//!
//! The etcd source trusts its last answer for a short period while a newer
//! call is pending; a call still pending after that says the member is
//! frozen or cut off. On a node whose CPU is saturated for a moment (another
//! pod's burst, a browser starting, a compile), a healthy member's answer is
//! late only because neither it nor the exporter could run. The store lets
//! the time the CPU was contended while a call waited extend that trust, up
//! to a cap ([`etcd_readiness_policy::signals::Trust`]); this module is the clock it is fed
//! from, read at each call's start and at each evaluation — like
//! `Instant::now()`, a read of the node, not of etcd.
//!
//! The file is read through [`crate::outside::bounded_read`] (4 KiB). A kernel
//! without PSI (booted with `psi=0`, or older than 4.20) gives `None` once
//! and is not asked again: the trust then stays at its base period, as
//! before this module existed. `/proc/pressure` is not namespaced, so in a
//! container it is the node's, which is what is wanted: the etcd container
//! beside the exporter waits for the same CPUs.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const PSI_CPU: &str = "/proc/pressure/cpu";

static UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// The node's contended CPU time so far (monotonic), or `None` where the
/// kernel does not say.
pub fn cpu_stalled() -> Option<Duration> {
    if UNAVAILABLE.load(Ordering::Relaxed) {
        return None;
    }
    let stalled = read(Path::new(PSI_CPU));
    if stalled.is_none() {
        UNAVAILABLE.store(true, Ordering::Relaxed);
    }
    stalled
}

/// Whether the kernel reports CPU pressure (for the start-up log line).
pub fn available() -> bool {
    cpu_stalled().is_some()
}

fn read(path: &Path) -> Option<Duration> {
    let bytes = crate::outside::bounded_read::read_bounded(path, 4096).ok()?;
    parse_some_total(std::str::from_utf8(&bytes).ok()?)
}

/// The `total=` of the `some` line of a PSI file, e.g.
/// `some avg10=0.00 avg60=0.00 avg300=0.00 total=4391307`.
pub fn parse_some_total(text: &str) -> Option<Duration> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let total = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?;
    total.parse::<u64>().ok().map(Duration::from_micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_some_line_gives_the_total() {
        let text = "some avg10=14.00 avg60=4.40 avg300=1.17 total=4391307\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(
            parse_some_total(text),
            Some(Duration::from_micros(4_391_307))
        );
    }

    #[test]
    fn absurd_or_missing_fields_are_no_reading() {
        for bad in [
            "",
            "full avg10=0.00 total=5",
            "some avg10=1.00",
            "some total=-3",
            "some total=1e9",
            "some total=99999999999999999999999",
        ] {
            assert_eq!(parse_some_total(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn this_kernel_is_read_without_error_when_it_has_psi() {
        // Where the file exists, the clock reads it; where it does not, None.
        let exists = Path::new(PSI_CPU).exists();
        let got = read(Path::new(PSI_CPU));
        if exists {
            assert!(got.is_some(), "{PSI_CPU} exists but did not parse");
        } else {
            assert_eq!(got, None);
        }
    }
}
