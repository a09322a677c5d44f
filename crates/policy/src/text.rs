//! How the project writes things for people, in one place: durations
//! (rounded, exact, or in whole seconds or milliseconds), numbers, values with their unit, text cut to a size, whitespace collapsed,
//! HTML escaped. `/readyz`, the status page, the CLI, `replay` and the
//! policy's explanations all write through these, so a value reads the same
//! everywhere and each rule (one cut marker, one escaped character set) is
//! written once. Pure string functions: no IO, no clock.

use std::borrow::Cow;
use std::time::Duration;

use crate::signals::Unit;

/// What ends a text that [`cut`] shortened; the count of bytes left out
/// follows it.
pub const CUT_MARKER: &str = "…";

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

/// Seconds as a person writes a duration, in the project's one duration
/// grammar ([`crate::duration`]): `250ms`, `3.2s`, `2m30s`, `1h5m`;
/// `unknown` for NaN or infinity.
pub fn fmt_duration(secs: f64) -> String {
    if !secs.is_finite() {
        return "unknown".to_string();
    }
    if secs < 0.0 {
        return format!("-{}", fmt_duration(-secs));
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

/// `d` exactly, in the units of the duration grammar plus `us` and `ns`
/// (`1h1ms`, `1s500ms`, `0s`): what a range error shows of the value
/// given, where [`fmt_duration`] rounds (`1h1ms` shown as `1h` would read
/// as inside the range it failed).
pub fn fmt_duration_exact(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_string();
    }
    const UNITS: [(u128, &str); 6] = [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let mut rest = d.as_nanos();
    let mut out = String::new();
    for (size, unit) in UNITS {
        let n = rest / size;
        rest %= size;
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// `d` in whole seconds when it has no milliseconds (`2s`), else in whole
/// milliseconds (`1100ms`, not `1s100ms`): a timeout and its parts, added
/// up, as an operator compares them (`1100ms (500ms plus 600ms …)`).
pub fn fmt_secs_or_ms(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// A number with its unit as the catalogue spells it: seconds as a duration
/// (`1.5s`), a unitless number bare (`3`), others with the unit after a
/// space (`4096 bytes`).
pub fn fmt_value(n: f64, unit: Unit) -> String {
    match unit {
        Unit::Seconds => fmt_duration(n),
        Unit::None => fmt_num(n),
        Unit::Milliseconds | Unit::Bytes => format!("{} {unit}", fmt_num(n)),
    }
}

/// The largest index `<= i` (and `<= s.len()`) that is a character boundary
/// of `s`.
pub fn floor_char_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// `s` cut to at most `max` bytes at a character boundary, without a
/// marker: for a value whose size is a hard limit (a label value).
pub fn cut_at(s: &str, max: usize) -> &str {
    &s[..floor_char_boundary(s, max)]
}

/// `s` cut to at most `max` bytes at a character boundary, followed by the
/// [`CUT_MARKER`] and how many bytes were left out: `abc… (120 bytes cut)`.
/// Unchanged when it fits.
pub fn cut(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let kept = cut_at(s, max);
    Cow::Owned(format!(
        "{kept}{CUT_MARKER} ({} bytes cut)",
        s.len() - kept.len()
    ))
}

/// Runs of whitespace (newlines included) as one space, none at the ends:
/// an expression as one line.
pub fn collapse_ws(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, w) in s.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

/// `s` safe inside HTML or SVG text and attribute values (quoted with
/// either quote): `& < > " '` escaped.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_durations() {
        assert_eq!(fmt_num(1432.0), "1432");
        assert_eq!(fmt_num(1.23456), "1.235");
        assert_eq!(fmt_num(-0.5), "-0.5");
        for (secs, text) in [
            (0.25, "250ms"),
            (3.21, "3.2s"),
            (150.0, "2m30s"),
            (120.0, "2m"),
            (3900.0, "1h5m"),
            (7200.0, "2h"),
            (-1.5, "-1.5s"),
            (f64::NAN, "unknown"),
            (f64::INFINITY, "unknown"),
            (1e13, "10000000000000s"),
        ] {
            assert_eq!(fmt_duration(secs), text, "{secs}");
        }
        assert_eq!(fmt_value(1.5, Unit::Seconds), "1.5s");
        assert_eq!(fmt_value(3.0, Unit::None), "3");
        assert_eq!(fmt_value(4096.0, Unit::Bytes), "4096 bytes");
        assert_eq!(fmt_value(12.5, Unit::Milliseconds), "12.5 ms");
    }

    #[test]
    fn exact_durations_and_seconds_or_milliseconds() {
        assert_eq!(fmt_duration_exact(Duration::from_millis(1500)), "1s500ms");
        assert_eq!(fmt_duration_exact(Duration::from_secs(90_061)), "25h1m1s");
        assert_eq!(
            fmt_duration_exact(Duration::from_millis(3_600_001)),
            "1h1ms"
        );
        assert_eq!(fmt_duration_exact(Duration::from_micros(9_999)), "9ms999us");
        assert_eq!(fmt_duration_exact(Duration::ZERO), "0s");
        assert_eq!(fmt_duration_exact(Duration::from_nanos(1)), "1ns");
        assert_eq!(fmt_secs_or_ms(Duration::from_secs(2)), "2s");
        assert_eq!(fmt_secs_or_ms(Duration::ZERO), "0s");
        assert_eq!(fmt_secs_or_ms(Duration::from_millis(500)), "500ms");
        assert_eq!(fmt_secs_or_ms(Duration::from_millis(1100)), "1100ms");
        // Below a millisecond does not count: whole seconds stay seconds.
        assert_eq!(fmt_secs_or_ms(Duration::from_micros(2_000_500)), "2s");
    }

    #[test]
    fn cutting_keeps_characters_whole() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("abcdef", 3), "abc… (3 bytes cut)");
        // "é" is two bytes: a cut inside it keeps it out entirely.
        assert_eq!(cut("aé", 2), "a… (2 bytes cut)");
        assert_eq!(cut_at("aé", 2), "a");
        assert_eq!(cut_at("aé", 99), "aé");
        assert_eq!(floor_char_boundary("aé", 2), 1);
        assert_eq!(cut("", 0), "");
        assert_eq!(cut("é", 0), "… (2 bytes cut)");
    }

    #[test]
    fn whitespace_and_html() {
        assert_eq!(collapse_ws("  a &&\n\t b  "), "a && b");
        assert_eq!(
            html_escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
