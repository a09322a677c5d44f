//! The wall clock as the tests compare it with the exporter's timestamps
//! and with etcd's: seconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in (fractional) seconds since the Unix epoch.
pub fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs_f64()
}
