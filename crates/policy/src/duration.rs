//! The one duration grammar of the project: one or more `number unit` pairs,
//! units `ms`, `s`, `m`, `h` (Prometheus' spelling), e.g. `250ms`, `1.5s`,
//! `2m`, `1h`, `1m30s`. Policy literals (`for 2m`, `age(x) < 90s`), every
//! duration flag, the `--config` sources file and the `test` files all read
//! durations through [`parse_secs`], so what one accepts the others accept.
//! Each caller says what it accepts beside the grammar ([`Bounds`]: a
//! longest duration, and whether zero is one) and [`parse`] refuses the rest
//! with the same messages everywhere.

use std::time::Duration;

/// The units, longest spelling first so `ms` is not read as `m` + `s`.
const UNITS: [(&str, f64); 4] = [("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)];

/// Why a text is not a duration.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DurationError {
    #[error(
        "`{0}` is not a duration: write a number with a unit ms, s, m or h, e.g. `500ms`, `1m30s`"
    )]
    Syntax(String),
    #[error("`{text}` is longer than the limit of {limit}")]
    TooLong { text: String, limit: String },
    #[error("`{0}` must be longer than zero")]
    Zero(String),
}

/// What a caller accepts beside the grammar: at most `max`, and zero only
/// where it means something (a timeout of zero, a period of zero do not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    max: Duration,
    zero: bool,
}

impl Bounds {
    /// Zero up to `max`.
    pub const fn at_most(max: Duration) -> Bounds {
        Bounds { max, zero: true }
    }

    /// Longer than zero, up to `max`.
    pub const fn positive_at_most(max: Duration) -> Bounds {
        Bounds { max, zero: false }
    }
}

/// A longest duration alone: zero is accepted.
impl From<Duration> for Bounds {
    fn from(max: Duration) -> Bounds {
        Bounds::at_most(max)
    }
}

/// Seconds in `text`, or `None` when it is not in the grammar. Digits may be
/// grouped with `_` (`1_000ms`), as in policy number literals. The result is
/// finite and non-negative but may be huge: callers check their range.
pub fn parse_secs(text: &str) -> Option<f64> {
    let mut rest = text;
    let mut total = 0.0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
            .unwrap_or(rest.len());
        let num = &rest[..num_len];
        if !num.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let n: f64 = num.replace('_', "").parse().ok()?;
        rest = &rest[num_len..];
        let (unit, mult) = UNITS.iter().find(|(u, _)| rest.starts_with(u))?;
        rest = &rest[unit.len()..];
        total += n * mult;
    }
    (total.is_finite() && total >= 0.0).then_some(total)
}

/// `text` as a [`Duration`] within `bounds` (a [`Bounds`], or a longest
/// [`Duration`] alone).
pub fn parse(text: &str, bounds: impl Into<Bounds>) -> Result<Duration, DurationError> {
    let Bounds { max, zero } = bounds.into();
    let secs = parse_secs(text.trim()).ok_or_else(|| DurationError::Syntax(text.to_string()))?;
    if secs > max.as_secs_f64() {
        return Err(DurationError::TooLong {
            text: text.to_string(),
            limit: crate::text::fmt_duration(max.as_secs_f64()),
        });
    }
    let d =
        Duration::try_from_secs_f64(secs).map_err(|_| DurationError::Syntax(text.to_string()))?;
    if d.is_zero() && !zero {
        return Err(DurationError::Zero(text.to_string()));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar() {
        for (text, secs) in [
            ("250ms", 0.25),
            ("1.5s", 1.5),
            ("2m", 120.0),
            ("1h", 3600.0),
            ("1m30s", 90.0),
            ("1h2m3s4ms", 3723.004),
            ("1_000ms", 1.0),
            ("0s", 0.0),
        ] {
            assert_eq!(parse_secs(text), Some(secs), "{text}");
        }
        for bad in [
            "", "1", "ms", "1x", "1.s5", "-1s", "1 s", "s1", "1e400s", "1sm",
        ] {
            assert_eq!(parse_secs(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn huge_values_are_errors_not_panics() {
        let day = Duration::from_secs(86_400);
        assert_eq!(parse("1m30s", day), Ok(Duration::from_secs(90)));
        assert!(matches!(
            parse("99999999999999999999h", day),
            Err(DurationError::TooLong { .. })
        ));
        assert!(matches!(parse("1y", day), Err(DurationError::Syntax(_))));
    }

    #[test]
    fn bounds_say_whether_zero_is_a_duration() {
        let day = Duration::from_secs(86_400);
        assert_eq!(parse("0s", day), Ok(Duration::ZERO));
        assert_eq!(parse("0s", Bounds::at_most(day)), Ok(Duration::ZERO));
        let positive = Bounds::positive_at_most(day);
        assert_eq!(
            parse("0ms", positive).unwrap_err().to_string(),
            "`0ms` must be longer than zero"
        );
        assert_eq!(parse("1ms", positive), Ok(Duration::from_millis(1)));
        assert_eq!(
            parse("25h", positive).unwrap_err().to_string(),
            "`25h` is longer than the limit of 24h"
        );
    }

    #[test]
    fn what_is_written_reads_back() {
        // `text::fmt_duration` writes in this grammar (rounded as it says).
        for secs in [0.25, 3.2, 59.0, 150.0, 120.0, 3900.0, 7200.0] {
            let text = crate::text::fmt_duration(secs);
            assert_eq!(parse_secs(&text), Some(secs), "{text}");
        }
    }
}
