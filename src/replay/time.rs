//! The times and steps `replay` reads from its flags: `--start`/`--end` as
//! RFC 3339, Unix seconds, `now`, or a duration before now in the project's
//! one duration grammar (`-24h`, `now-90m`); `--step` in that grammar. All of
//! them become whole Unix milliseconds, and every absurd value (before 1970,
//! past the year 9999, a step of zero, a step longer than a day) is an error
//! that names the flag and the value, never a panic.

use std::time::Duration;

use etcd_readiness_policy::duration;

/// Latest time a `--start`/`--end` may name: 9999-12-31T23:59:59Z.
const MAX_UNIX_SECS: f64 = 253_402_300_799.0;
/// A relative time reaches back at most this far (ten years).
const MAX_RELATIVE: Duration = Duration::from_secs(10 * 366 * 86_400);
/// The longest `--step`.
pub const MAX_STEP: Duration = Duration::from_secs(86_400);

/// Why a time or step flag was refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum TimeError {
    #[error(
        "{flag} `{text}` is not a time: write RFC 3339 (2026-11-30T08:00:00Z), Unix seconds \
         (1796025600), `now`, or a duration before now (-24h, now-90m)"
    )]
    Syntax { flag: &'static str, text: String },
    #[error("{flag} `{text}` is out of range: {why}")]
    Range {
        flag: &'static str,
        text: String,
        why: String,
    },
    #[error("--step `{text}`: {why}")]
    Step { text: String, why: String },
}

/// `text` as Unix milliseconds, with `now_ms` the present. `flag` names the
/// flag in errors.
pub fn parse_time(flag: &'static str, text: &str, now_ms: i64) -> Result<i64, TimeError> {
    let t = text.trim();
    let syntax = || TimeError::Syntax {
        flag,
        text: text.to_string(),
    };
    let range = |why: String| TimeError::Range {
        flag,
        text: text.to_string(),
        why,
    };
    if t == "now" {
        return Ok(now_ms);
    }
    let relative = t.strip_prefix("now-").or_else(|| t.strip_prefix('-'));
    if let Some(d) = relative {
        let back = duration::parse(d, MAX_RELATIVE).map_err(|e| range(e.to_string()))?;
        let back_ms = i64::try_from(back.as_millis()).map_err(|_| syntax())?;
        return Ok(now_ms - back_ms);
    }
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        let secs: f64 = t.parse().map_err(|_| syntax())?;
        if !(secs.is_finite() && (0.0..=MAX_UNIX_SECS).contains(&secs)) {
            return Err(range(
                "Unix seconds must lie between 0 (1970) and 253402300799 (year 9999)".to_string(),
            ));
        }
        return Ok((secs * 1000.0).round() as i64);
    }
    let ts: jiff::Timestamp = t.parse().map_err(|_| syntax())?;
    let ms = ts.as_millisecond();
    if ms < 0 {
        return Err(range("times before 1970 hold no samples".to_string()));
    }
    Ok(ms)
}

/// `--step` as whole milliseconds: at least 1 ms, at most a day.
pub fn parse_step(text: &str) -> Result<i64, TimeError> {
    let err = |why: String| TimeError::Step {
        text: text.to_string(),
        why,
    };
    let d = duration::parse(text, MAX_STEP).map_err(|e| err(e.to_string()))?;
    let ms = d.as_millis();
    if ms == 0 {
        return Err(err("the step must be at least 1ms".to_string()));
    }
    if d.as_nanos() % 1_000_000 != 0 {
        return Err(err(
            "the step must be a whole number of milliseconds".to_string()
        ));
    }
    Ok(ms as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outside::checked::rfc3339;

    const NOW: i64 = 1_796_025_600_000; // 2026-11-30T08:00:00Z

    #[test]
    fn every_form_of_a_time() {
        for (text, ms) in [
            ("now", NOW),
            ("-24h", NOW - 86_400_000),
            ("now-90m", NOW - 5_400_000),
            ("-1m30s", NOW - 90_000),
            ("1796025600", NOW),
            ("1796025600.5", NOW + 500),
            ("2026-11-30T08:00:00Z", NOW),
            ("2026-11-30T09:00:00+01:00", NOW),
            ("2026-11-30T08:00:00.250Z", NOW + 250),
        ] {
            assert_eq!(parse_time("--start", text, NOW), Ok(ms), "{text}");
        }
    }

    #[test]
    fn absurd_times_are_errors_naming_the_flag() {
        for text in [
            "",
            "yesterday",
            "-24",
            "24h",
            "1e9",
            "2026-13-01T00:00:00Z",
            "--1h",
        ] {
            let e = parse_time("--start", text, NOW).unwrap_err();
            assert!(
                matches!(e, TimeError::Syntax { .. } | TimeError::Range { .. }),
                "{text}: {e}"
            );
            assert!(e.to_string().starts_with("--start `"), "{e}");
        }
        for text in [
            "99999999999999999999",
            "253402300800",
            "-99999999h",
            "-11000d",
        ] {
            assert!(parse_time("--end", text, NOW).is_err(), "{text}");
        }
        assert!(matches!(
            parse_time("--end", "1969-12-31T23:59:59Z", NOW),
            Err(TimeError::Range { .. })
        ));
    }

    #[test]
    fn steps() {
        assert_eq!(parse_step("15s"), Ok(15_000));
        assert_eq!(parse_step("1m30s"), Ok(90_000));
        assert_eq!(parse_step("250ms"), Ok(250));
        for bad in ["0s", "0.5ms", "2d", "25h", "15", "-1s", "1e400s"] {
            assert!(parse_step(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rfc3339_round_trips() {
        assert_eq!(rfc3339(NOW), "2026-11-30T08:00:00Z");
        assert_eq!(rfc3339(NOW + 250), "2026-11-30T08:00:00.250Z");
        assert_eq!(parse_time("--start", &rfc3339(NOW + 250), 0), Ok(NOW + 250));
    }
}
