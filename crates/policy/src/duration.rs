//! The one duration grammar of the project: one or more `number unit` pairs,
//! units `ms`, `s`, `m`, `h` (Prometheus' spelling), e.g. `250ms`, `1.5s`,
//! `2m`, `1h`, `1m30s`. Policy literals (`for 2m`, `age(x) < 90s`), every
//! duration flag, the `--config` sources file and the `test` files all read
//! durations through [`parse_secs`], so what one accepts the others accept.
//! Ranges are each caller's business; this module only refuses what is not a
//! finite, non-negative duration.

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

/// `text` as a [`Duration`] of at most `max`.
pub fn parse(text: &str, max: Duration) -> Result<Duration, DurationError> {
    let secs = parse_secs(text.trim()).ok_or_else(|| DurationError::Syntax(text.to_string()))?;
    if secs > max.as_secs_f64() {
        return Err(DurationError::TooLong {
            text: text.to_string(),
            limit: human(max.as_secs_f64()),
        });
    }
    Duration::try_from_secs_f64(secs).map_err(|_| DurationError::Syntax(text.to_string()))
}

/// A number as explanations show it: integers without a fraction, others
/// with up to three decimals (`1432`, `1.235`).
pub fn fmt_num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        let s = format!("{n:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Seconds as a person writes a duration, in the grammar above:
/// `250ms`, `3.2s`, `2m30s`, `1h5m`; `unknown` for NaN or infinity.
pub fn human(secs: f64) -> String {
    if !secs.is_finite() {
        return "unknown".to_string();
    }
    if secs < 0.0 {
        return format!("-{}", human(-secs));
    }
    if secs < 1.0 {
        return format!("{}ms", fmt_num((secs * 1000.0).round()));
    }
    if secs < 60.0 {
        return format!("{}s", fmt_num((secs * 10.0).round() / 10.0));
    }
    if secs >= 1e12 {
        return format!("{}s", fmt_num(secs));
    }
    let total = secs as u64;
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    match (h, m, s) {
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
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
    fn formatting() {
        for (secs, text) in [
            (0.25, "250ms"),
            (3.2, "3.2s"),
            (150.0, "2m30s"),
            (120.0, "2m"),
            (3900.0, "1h5m"),
            (f64::NAN, "unknown"),
        ] {
            assert_eq!(human(secs), text, "{secs}");
        }
        assert_eq!(fmt_num(1432.0), "1432");
        assert_eq!(fmt_num(1.23456), "1.235");
    }
}
