//! Checked conversions of numbers that come from outside — flags, the backup
//! sidecar, scrape sources — into durations, times and ages. Every helper
//! returns an error that says what was wrong with which value instead of
//! panicking (as `Duration::from_secs_f64` does on NaN, negative or huge
//! input) or silently clamping (as `duration_since(..).unwrap_or_default()`
//! turns a future timestamp into "age 0").

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_readiness_policy::text::{fmt_duration, fmt_duration_exact};

/// How far in the future a peer's timestamp may be and still count as "now":
/// clocks of two containers on different nodes drift apart by this much at
/// most under NTP. A later timestamp is an error, not age 0.
pub const CLOCK_SKEW_ALLOWANCE: Duration = Duration::from_secs(60);

/// The latest time accepted from a peer: 9999-12-31T23:59:59Z. Larger
/// values (e.g. `1e19`, `1e300`) are not timestamps.
pub const MAX_UNIX_SECONDS: f64 = 253_402_300_799.0;

/// The range each duration and size flag (and the same setting in the
/// `--config` sources file) accepts. Values outside are
/// refused at start (exit code 2) with the flag and the range, so no
/// arithmetic on them later can overflow.
pub struct FlagRanges;

impl FlagRanges {
    pub const SAMPLE_INTERVAL: (Duration, Duration) =
        (Duration::from_millis(10), Duration::from_secs(3600));
    /// Also at most `--sample.interval`.
    pub const SAMPLE_TIMEOUT: (Duration, Duration) =
        (Duration::from_millis(1), Duration::from_secs(3600));
    pub const POLICY_RELOAD_INTERVAL: (Duration, Duration) =
        (Duration::from_millis(100), Duration::from_secs(24 * 3600));
    pub const OWNER_INTERVAL: (Duration, Duration) =
        (Duration::from_millis(100), Duration::from_secs(24 * 3600));
    /// Also at most `--owner.interval`.
    pub const OWNER_TIMEOUT: (Duration, Duration) =
        (Duration::from_millis(1), Duration::from_secs(3600));
    pub const MAX_BODY_BYTES: (u64, u64) = (1024, 256 * 1024 * 1024);
    pub const WEB_MAX_CONNECTIONS: (usize, usize) = (1, 1_000_000);
    /// `--web.read-header-timeout` and `--web.idle-timeout`.
    pub const WEB_TIMEOUT: (Duration, Duration) =
        (Duration::from_millis(100), Duration::from_secs(3600));
    /// The kubelet's default grace period is 30s; leave room for the rest.
    pub const WEB_SHUTDOWN_TIMEOUT: (Duration, Duration) =
        (Duration::ZERO, Duration::from_secs(25));
}

/// Why a number is not a usable duration or timestamp.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CheckedError {
    #[error("{} is not a number", num(*.value))]
    NotANumber { value: f64 },
    #[error("{} is negative", num(*.value))]
    Negative { value: f64 },
    #[error("{} is out of range (at most {})", num(*.value), num(*.max))]
    TooLarge { value: f64, max: f64 },
    #[error(
        "{ahead:.1}s in the future (more than the allowed clock skew of {}s)",
        CLOCK_SKEW_ALLOWANCE.as_secs()
    )]
    Future { ahead: f64 },
}

/// A number as short as it can be read: `1e19`, not twenty digits.
fn num(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1e15 {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// `secs` seconds as a [`Duration`], refusing NaN, ±Inf, negative values and
/// anything above `max`.
pub fn duration_from_secs(secs: f64, max: Duration) -> Result<Duration, CheckedError> {
    if secs.is_nan() {
        return Err(CheckedError::NotANumber { value: secs });
    }
    if secs < 0.0 {
        return Err(CheckedError::Negative { value: secs });
    }
    if secs > max.as_secs_f64() {
        return Err(CheckedError::TooLarge {
            value: secs,
            max: max.as_secs_f64(),
        });
    }
    Duration::try_from_secs_f64(secs).map_err(|_| CheckedError::TooLarge {
        value: secs,
        max: max.as_secs_f64(),
    })
}

/// A Unix timestamp in seconds (as Prometheus gauges carry them) as a
/// [`SystemTime`]; NaN, ±Inf, negative and beyond year 9999 are errors.
pub fn unix_time(secs: f64) -> Result<SystemTime, CheckedError> {
    let d = duration_from_secs(secs, Duration::from_secs_f64(MAX_UNIX_SECONDS))?;
    UNIX_EPOCH.checked_add(d).ok_or(CheckedError::TooLarge {
        value: secs,
        max: MAX_UNIX_SECONDS,
    })
}

/// How long ago `then` was at `now`. A `then` up to [`CLOCK_SKEW_ALLOWANCE`]
/// ahead of `now` is age 0 (clock skew); further ahead is an error.
pub fn age(then: SystemTime, now: SystemTime) -> Result<Duration, CheckedError> {
    match now.duration_since(then) {
        Ok(age) => Ok(age),
        Err(e) if e.duration() <= CLOCK_SKEW_ALLOWANCE => Ok(Duration::ZERO),
        Err(e) => Err(CheckedError::Future {
            ahead: e.duration().as_secs_f64(),
        }),
    }
}

/// A flag's duration outside its allowed range; the message names the
/// flag, the value as given and the range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{flag} {} is out of range: allowed {} to {}",
    fmt_duration_exact(*.value),
    fmt_duration(.min.as_secs_f64()),
    fmt_duration(.max.as_secs_f64())
)]
pub struct OutOfRange {
    pub flag: String,
    pub value: Duration,
    pub min: Duration,
    pub max: Duration,
}

/// Check that a flag's duration lies in `min..=max`.
pub fn duration_in_range(
    flag: &str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<Duration, OutOfRange> {
    if value < min || value > max {
        return Err(OutOfRange {
            flag: flag.to_string(),
            value,
            min,
            max,
        });
    }
    Ok(value)
}

/// Unix milliseconds as RFC 3339 in UTC (`2026-11-30T08:00:00Z`), for text
/// and SVG output.
pub fn rfc3339(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => {
            if ms % 1000 == 0 {
                t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
            } else {
                t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
            }
        }
        Err(_) => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: `--sample.interval 1h1ms` said "1h is out of range:
    /// allowed 10ms to 1h".
    #[test]
    fn range_errors_state_the_value_given() {
        let (min, max) = (Duration::from_millis(10), Duration::from_secs(3600));
        let e = duration_in_range(
            "--sample.interval",
            max + Duration::from_millis(1),
            min,
            max,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "--sample.interval 1h1ms is out of range: allowed 10ms to 1h"
        );
        let e = duration_in_range("--x", Duration::from_micros(9_999), min, max)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--x 9ms999us is out of range"), "{e}");
    }

    #[test]
    fn absurd_seconds_are_errors_not_panics() {
        let max = Duration::from_secs(3600);
        for bad in [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -1.0,
            1e19,
            1e300,
            3601.0,
        ] {
            assert!(duration_from_secs(bad, max).is_err(), "{bad}");
        }
        assert_eq!(
            duration_from_secs(1.5, max),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(
            duration_from_secs(1e300, max).unwrap_err().to_string(),
            "1e300 is out of range (at most 3600)"
        );
    }

    #[test]
    fn unix_time_refuses_what_no_clock_reads() {
        for bad in [f64::NAN, f64::INFINITY, -5.0, 1e19, 1e300] {
            assert!(unix_time(bad).is_err(), "{bad}");
        }
        assert_eq!(
            unix_time(1.7e9),
            Ok(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
    }

    #[test]
    fn a_future_timestamp_beyond_the_skew_allowance_is_an_error() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            age(now - Duration::from_secs(5), now),
            Ok(Duration::from_secs(5))
        );
        assert_eq!(age(now + Duration::from_secs(30), now), Ok(Duration::ZERO));
        let e = age(now + Duration::from_secs(3600), now).unwrap_err();
        assert_eq!(
            e.to_string(),
            "3600.0s in the future (more than the allowed clock skew of 60s)"
        );
    }

    #[test]
    fn ranges_name_the_flag() {
        let e = duration_in_range(
            "--sample.interval",
            Duration::from_secs(7200),
            Duration::from_millis(10),
            Duration::from_secs(3600),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "--sample.interval 2h is out of range: allowed 10ms to 1h"
        );
    }
}
