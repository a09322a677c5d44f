//! The `values` of one `query_range` series, `[[1796126400,"1"],[1796126415.5,"NaN"],…]`,
//! scanned from the answer's text straight into the caller's grid row: no
//! list of pairs and no string per value is built (parsing the pairs through
//! serde was half of a fleet replay's instructions). [`super::matrix`]
//! reads the rest of the answer and hands the scan the text where a
//! `values` starts ([`scan_at`]); the scan checks its shape, a list of
//! `[time, value]` pairs, and reads the numbers as serde_json and Rust's
//! `f64` parser read them: the common forms (a Unix time with at most three
//! decimals, a value of at most 15 significant digits) are computed
//! exactly here, anything else goes to those parsers. A time too large for
//! milliseconds is no point the grid holds. A value string Rust's `f64`
//! parser does not read (`"abc"`, `""`) is refused ([`NOT_A_NUMBER`]), not
//! taken as unknown: Prometheus' own `"NaN"`, `"+Inf"` and `"-Inf"` read
//! as numbers, and a store that sends anything else sent no sample replay
//! can judge by.

/// What is wrong with an answer's text, and where: in `values`, why it is
/// not a list of `[time, value]` pairs of numbers.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} at byte {at}")]
pub struct ShapeError {
    pub what: &'static str,
    pub at: usize,
}

/// The [`ShapeError`] of a value string that is not a number.
pub const NOT_A_NUMBER: &str = "a value that is not a number";

/// Hand every pair of `text` to `point` as `(Unix ms, value)`, in order.
pub fn scan(text: &str, point: impl FnMut(i64, f64)) -> Result<(), ShapeError> {
    let end = scan_at(text, 0, point)?;
    let mut c = Cursor { text, at: end };
    c.skip_ws();
    if c.at != text.len() {
        return Err(c.error("text after `values`"));
    }
    Ok(())
}

/// [`scan`] of the list that starts at byte `at` of `text` (after white
/// space); where it ends.
pub fn scan_at(
    text: &str,
    at: usize,
    mut point: impl FnMut(i64, f64),
) -> Result<usize, ShapeError> {
    let mut c = Cursor { text, at };
    let b = text.as_bytes();
    c.expect(b'[', "expected `[` to open `values`")?;
    if !c.eat(b']') {
        loop {
            // The form every store writes, read in one pass; anything
            // else (white space, other numbers) by the cursor.
            if let Some((t, v, end)) = compact_pair(b, c.at) {
                c.at = end;
                point(t, v);
            } else {
                c.expect(b'[', "expected a `[time, value]` pair in `values`")?;
                let t = c.time()?;
                c.expect(b',', "expected `,` after the time")?;
                let v = c.value()?;
                c.expect(b']', "expected `]` after the value")?;
                point(t, v);
            }
            match b.get(c.at) {
                Some(b',') => {
                    c.at += 1;
                    continue;
                }
                Some(b']') => {
                    c.at += 1;
                    break;
                }
                _ => {}
            }
            if c.eat(b']') {
                break;
            }
            c.expect(b',', "expected `,` or `]` after a pair in `values`")?;
        }
    }
    Ok(c.at)
}

/// The pair at `at` when it is written compactly as stores write it,
/// `[dddddddddd,"v"]`: a time of ten digits (every time from 2001 to 2286)
/// and a value [`inline_value`] reads, nothing between them. Its time in
/// ms, its value, and where it ends; `None` sends the pair to the cursor,
/// which reads it the same way (or says what is wrong with it). The ten
/// digits are read at fixed offsets rather than by [`inline_time`], whose
/// general lengths and fraction cost 5-8 % of a fleet replay's CPU (A/B,
/// 2026-12-05).
#[inline]
fn compact_pair(b: &[u8], at: usize) -> Option<(i64, f64, usize)> {
    let head = b.get(at..at + 13)?;
    if head[0] != b'[' || head[1] == b'0' || head[11] != b',' || head[12] != b'"' {
        return None;
    }
    let hi = two_digits(&head[1..3])?;
    let lo = eight_digits(&head[3..11])?;
    let (v, end) = inline_value(b, at + 12)?;
    if b.get(end) != Some(&b']') {
        return None;
    }
    let ms = (i64::from(hi) * 100_000_000 + i64::from(lo)) * 1000;
    Some((ms, v, end + 1))
}

/// Largest integer part of a time in seconds computed here: 10 digits
/// (until 2286); with three decimals the milliseconds stay far below 2^53,
/// where `(seconds × 1000).round()` of the parsed `f64` is exact too.
const FAST_TIME_DIGITS: usize = 10;

/// Most significant digits of a value computed here: under 2^53, so the
/// digits are an exact `f64`, and one division by an exact power of ten
/// is the correctly rounded value Rust's parser returns.
const FAST_VALUE_DIGITS: usize = 15;

/// Exact powers of ten in an `f64`.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// A cursor over JSON text: the pairs' scan here, the rest of an answer in
/// [`super::matrix`].
pub(super) struct Cursor<'a> {
    pub(super) text: &'a str,
    pub(super) at: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn error(&self, what: &'static str) -> ShapeError {
        ShapeError { what, at: self.at }
    }

    pub(super) fn skip_ws(&mut self) {
        let b = self.text.as_bytes();
        while self.at < b.len() && matches!(b[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    /// The next byte after white space, taken if it is `byte`.
    pub(super) fn eat(&mut self, byte: u8) -> bool {
        self.skip_ws();
        let hit = self.text.as_bytes().get(self.at) == Some(&byte);
        self.at += usize::from(hit);
        hit
    }

    pub(super) fn expect(&mut self, byte: u8, what: &'static str) -> Result<(), ShapeError> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(self.error(what))
        }
    }

    /// The JSON number at the cursor (after white space), as text.
    fn number(&mut self) -> &'a str {
        self.skip_ws();
        let b = self.text.as_bytes();
        let from = self.at;
        while self.at < b.len()
            && matches!(b[self.at], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
        {
            self.at += 1;
        }
        // Only ASCII was taken: the slice is on character boundaries.
        self.text.get(from..self.at).unwrap_or_default()
    }

    /// A pair's time in Unix seconds, as milliseconds.
    fn time(&mut self) -> Result<i64, ShapeError> {
        self.skip_ws();
        if let Some((ms, end)) = inline_time(self.text.as_bytes(), self.at) {
            self.at = end;
            return Ok(ms);
        }
        let at = self.at;
        let tok = self.number();
        if let Some(ms) = fast_time_ms(tok) {
            return Ok(ms);
        }
        match serde_json::from_str::<f64>(tok) {
            // Saturating: a time out of any grid is dropped by the caller.
            Ok(s) => Ok((s * 1000.0).round() as i64),
            Err(_) => Err(ShapeError {
                what: "the time is not a number",
                at,
            }),
        }
    }

    /// A pair's value: a string (`"1"`, `"NaN"`, `"+Inf"`), or a number.
    fn value(&mut self) -> Result<f64, ShapeError> {
        self.skip_ws();
        let b = self.text.as_bytes();
        if b.get(self.at) != Some(&b'"') {
            let at = self.at;
            let tok = self.number();
            return serde_json::from_str::<f64>(tok).map_err(|_| ShapeError {
                what: "the value is neither a string nor a number",
                at,
            });
        }
        if let Some((v, end)) = inline_value(b, self.at) {
            self.at = end;
            return Ok(v);
        }
        let open = self.at;
        self.at += 1;
        let mut escaped = false;
        while self.at < b.len() && b[self.at] != b'"' {
            // The byte after a backslash never closes the string.
            let step = if b[self.at] == b'\\' { 2 } else { 1 };
            escaped |= step == 2;
            self.at += step;
        }
        if self.at >= b.len() {
            return Err(self.error("the value's string does not end"));
        }
        self.at += 1;
        let quoted = self.text.get(open..self.at).unwrap_or_default();
        if escaped {
            let s = serde_json::from_str::<String>(quoted).map_err(|_| ShapeError {
                what: "the value is not a JSON string",
                at: open,
            })?;
            return parse_value(&s).ok_or(ShapeError {
                what: NOT_A_NUMBER,
                at: open,
            });
        }
        let inside = quoted.get(1..quoted.len().saturating_sub(1));
        parse_value(inside.unwrap_or_default()).ok_or(ShapeError {
            what: NOT_A_NUMBER,
            at: open,
        })
    }
}

/// The time at `at` read in one pass when it is `digits[.d[d[d]]]` (at most
/// [`FAST_TIME_DIGITS`] digits before the point, no leading zero) and no
/// other number character follows: its milliseconds and where it ends.
fn inline_time(b: &[u8], mut at: usize) -> Option<(i64, usize)> {
    let from = at;
    let mut whole: i64 = 0;
    // Every time of this century has ten digits: read them as two and
    // eight at once, then go on byte by byte as for any other.
    if let Some(ten) = b.get(at..at + FAST_TIME_DIGITS)
        && let (Some(hi), Some(lo)) = (two_digits(&ten[..2]), eight_digits(&ten[2..]))
    {
        whole = i64::from(hi) * 100_000_000 + i64::from(lo);
        at += FAST_TIME_DIGITS;
    }
    while let Some(&c) = b.get(at).filter(|c| c.is_ascii_digit()) {
        if at - from == FAST_TIME_DIGITS {
            // Too long for this path (and for `whole`): the parsers decide.
            return None;
        }
        whole = whole * 10 + i64::from(c - b'0');
        at += 1;
    }
    let digits = at - from;
    if digits == 0 || digits > FAST_TIME_DIGITS || (digits > 1 && b[from] == b'0') {
        return None;
    }
    let mut ms = whole * 1000;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let mut scale = 100;
        let frac = at;
        while let Some(&c) = b.get(at).filter(|c| c.is_ascii_digit()) {
            ms += scale * i64::from(c - b'0');
            scale /= 10;
            at += 1;
        }
        if at == frac || at - frac > 3 {
            return None;
        }
    }
    match b.get(at) {
        Some(b'e' | b'E' | b'+' | b'-' | b'.') => None,
        _ => Some((ms, at)),
    }
}

/// Two ASCII digits as a number.
fn two_digits(b: &[u8]) -> Option<u32> {
    match b {
        [h @ b'0'..=b'9', l @ b'0'..=b'9'] => Some(u32::from(h - b'0') * 10 + u32::from(l - b'0')),
        _ => None,
    }
}

/// Eight ASCII digits as a number, all at once in a `u64` (the bytes are
/// first checked to be digits, each at once too).
fn eight_digits(b: &[u8]) -> Option<u32> {
    let x = u64::from_le_bytes(b.try_into().ok()?);
    const ONES: u64 = 0x0101_0101_0101_0101;
    // A byte below `0` borrows into its top bit; one above `9` carries into it.
    let below = x.wrapping_sub(ONES * u64::from(b'0'));
    let above = x.wrapping_add(ONES * u64::from(0x7f - b'9'));
    if (below | above | x) & (ONES * 0x80) != 0 {
        return None;
    }
    // Digits pairwise, then in fours, then all eight (the first byte is
    // the most significant digit).
    let d = below;
    let d = (d.wrapping_mul(10) + (d >> 8)) & 0x00ff_00ff_00ff_00ff;
    let d = (d.wrapping_mul(100) + (d >> 16)) & 0x0000_ffff_0000_ffff;
    let d = (d.wrapping_mul(10_000) + (d >> 32)) & 0xffff_ffff;
    u32::try_from(d).ok()
}

/// The string value at `at` (its opening quote) read in one pass when it
/// is `[-]digits[.digits]` of at most [`FAST_VALUE_DIGITS`] digits:
/// the value and where the string ends.
fn inline_value(b: &[u8], mut at: usize) -> Option<(f64, usize)> {
    at += 1;
    let negative = b.get(at) == Some(&b'-');
    at += usize::from(negative);
    let (mut m, mut digits, mut point) = (0u64, 0usize, None);
    loop {
        match *b.get(at)? {
            c @ b'0'..=b'9' => {
                m = m * 10 + u64::from(c - b'0');
                digits += 1;
                if digits > FAST_VALUE_DIGITS {
                    return None;
                }
            }
            b'.' if point.is_none() && digits > 0 => point = Some(digits),
            b'"' => break,
            _ => return None,
        }
        at += 1;
    }
    let decimals = match point {
        Some(p) if p == digits => return None,
        Some(p) => digits - p,
        None if digits == 0 => return None,
        None => 0,
    };
    // `m` < 10^15 converts exactly, and in one instruction as an `i64`;
    // an integer (every bool, most counts) needs no division.
    let m = m as i64 as f64;
    let v = if decimals == 0 {
        m
    } else {
        m / POW10[decimals]
    };
    Some((if negative { -v } else { v }, at + 1))
}

/// Unix seconds as `digits[.d[d[d]]]`, as milliseconds.
fn fast_time_ms(tok: &str) -> Option<i64> {
    let (int, frac) = tok.split_once('.').unwrap_or((tok, ""));
    let digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
    if int.is_empty() || int.len() > FAST_TIME_DIGITS || frac.len() > 3 || !digits(int) {
        return None;
    }
    if tok.contains('.') && (frac.is_empty() || !digits(frac)) {
        return None;
    }
    let whole: i64 = int.parse().ok()?;
    let part: i64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    Some(whole * 1000 + part * 10_i64.pow(3 - frac.len() as u32))
}

/// A sample value's text as Rust's `f64` parser reads it (`None`: it is
/// not a number), computed here for plain decimals.
fn parse_value(s: &str) -> Option<f64> {
    fast_value(s).or_else(|| s.parse().ok())
}

/// `[-]digits[.digits]` with at most [`FAST_VALUE_DIGITS`] digits in all.
fn fast_value(s: &str) -> Option<f64> {
    let (negative, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() || (body.contains('.') && frac.is_empty()) {
        return None;
    }
    if int.len() + frac.len() > FAST_VALUE_DIGITS {
        return None;
    }
    let mut m: u64 = 0;
    for c in int.bytes().chain(frac.bytes()) {
        if !c.is_ascii_digit() {
            return None;
        }
        m = m * 10 + u64::from(c - b'0');
    }
    let v = m as f64 / POW10[frac.len()];
    Some(if negative { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(text: &str) -> Result<Vec<(i64, f64)>, ShapeError> {
        let mut out = Vec::new();
        scan(text, |t, v| out.push((t, v)))?;
        Ok(out)
    }

    /// What the serde parse replay used before read of the same text.
    fn by_serde(text: &str) -> Vec<(i64, f64)> {
        let pairs: Vec<(f64, serde_json::Value)> = serde_json::from_str(text).unwrap();
        pairs
            .into_iter()
            .map(|(t, v)| {
                let v = match v {
                    serde_json::Value::String(s) => s.parse().unwrap_or(f64::NAN),
                    serde_json::Value::Number(n) => n.as_f64().unwrap(),
                    other => panic!("{other}"),
                };
                ((t * 1000.0).round() as i64, v)
            })
            .collect()
    }

    fn same(a: &[(i64, f64)], b: &[(i64, f64)]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.0 == y.0 && x.1.to_bits() == y.1.to_bits())
    }

    #[test]
    fn pairs_read_as_serde_and_rusts_parser_read_them() {
        let text = r#" [ [1796126400,"1"], [1796126415.5 , "0"],[1796126430.125,"12.345"],
            [1796126445.1234,"-0.1"],[1.7e9,"NaN"],[1796126460,"+Inf"],[1796126475,"-Inf"],
            [1796126490,"1e3"],[1796126505,"123456789012345678"],[1796126520,"0.30000000000000004"],
            [1796126565,"\u0031\u0032"],[1796126580,7],
            [1796126595,-2.5e-3],[-15,"1"],[17961265950,"1"],[0.5,"007"],
            [1796126640,"1."],[1796126655,".5"] ] "#;
        let got = points(text).unwrap();
        let want = by_serde(text);
        assert!(same(&got, &want), "{got:?}\n{want:?}");
        assert_eq!(got[0], (1_796_126_400_000, 1.0));
        assert_eq!(got[2], (1_796_126_430_125, 12.345));
        assert!(got[4].1.is_nan());
        assert_eq!(got[10].1, 12.0);
    }

    #[test]
    fn a_value_string_that_is_not_a_number_is_refused_not_taken_as_unknown() {
        // replay took these as NaN, unknown, and judged the member by a
        // value the store never had.
        for (bad, value) in [
            (r#"[[1796126535,"x"]]"#, r#""x""#),
            (r#"[[1,"1"],[2,""]]"#, r#""""#),
            (r#"[[1796126625,"-"]]"#, r#""-""#),
            (r#"[[1796126670,"1.5e"]]"#, r#""1.5e""#),
            (r#"[[1796126670,"\u0078"]]"#, r#""\u0078""#),
            (r#"[ [ 1 , "1 " ] ]"#, r#""1 ""#),
        ] {
            let e = points(bad).unwrap_err();
            let at = bad.find(value).unwrap();
            assert_eq!(
                e,
                ShapeError {
                    what: NOT_A_NUMBER,
                    at
                },
                "{bad}"
            );
        }
    }

    /// A list of 5,000 pairs, each written by `pair` from its index and a
    /// pseudo-random number.
    fn pairs_text(pair: impl Fn(u64, u64) -> String) -> String {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut pairs = Vec::new();
        for i in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            pairs.push(pair(i, x));
        }
        format!("[{}]", pairs.join(","))
    }

    #[test]
    fn decimals_are_rounded_as_rusts_parser_rounds_them() {
        let text = pairs_text(|i, x| {
            let digits = (x % 1_000_000_000_000_000) as f64;
            let v = format!("{}", digits / POW10[(x >> 60) as usize % 16]);
            let t = format!("{}.{:03}", 1_796_126_400 + i, x % 1000);
            format!("[{t},\"{v}\"]")
        });
        assert!(same(&points(&text).unwrap(), &by_serde(&text)));
    }

    #[test]
    fn compact_pairs_read_as_the_cursor_reads_them() {
        // The form stores write, taken by compact_pair, beside its near
        // misses (nine or eleven digits, a fraction, white space, values it leaves
        // to the parsers), all against serde.
        let text = pairs_text(|i, x| {
            let digits = (x % 1_000_000_000_000_000_000) as f64;
            let v = match x % 7 {
                0 => "NaN".to_string(),
                1 => format!("-{}", digits / POW10[(x >> 60) as usize % 16]),
                2 => format!("{}", x % 2),
                _ => format!("{}", digits / POW10[(x >> 58) as usize % 23]),
            };
            let t = match (x >> 40) % 9 {
                0 => format!("{}", 796_126_400 + i),
                1 => format!("1{}", 1_796_126_400 + i),
                2 => format!("{}.5", 1_796_126_400 + i),
                _ => format!("{}", 1_796_126_400 + i),
            };
            let sep = if (x >> 50).is_multiple_of(11) {
                " "
            } else {
                ""
            };
            format!("[{t},{sep}\"{v}\"]")
        });
        assert!(same(&points(&text).unwrap(), &by_serde(&text)));
        assert_eq!(
            compact_pair(b"[1796126400,\"-12.5\"]", 0),
            Some((1_796_126_400_000, -12.5, 20))
        );
        for miss in [
            &b"[0796126400,\"1\"]"[..],
            b"[17961264001,\"1\"]",
            b"[1796126400 ,\"1\"]",
            b"[1796126400,\"1\" ]",
            b"[1796126400,\"1e3\"]",
            b"[179612640x,\"1\"]",
            b"[1796126400,\"1\"",
        ] {
            assert_eq!(
                compact_pair(miss, 0),
                None,
                "{}",
                String::from_utf8_lossy(miss)
            );
        }
    }

    #[test]
    fn eight_digits_at_once_are_the_digits_one_by_one() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = x.to_le_bytes();
            // Mostly digits, sometimes a byte just outside them or any byte.
            for (k, c) in b.iter_mut().enumerate() {
                let r = (x >> (k * 3)) as u8;
                *c = match r % 16 {
                    0 => [b'/', b':', 0x80 + b'0', 0xff, b' '][usize::from(r / 16) % 5],
                    1 => r,
                    _ => b'0' + r % 10,
                };
            }
            let want = b.iter().try_fold(0u32, |n, &c| {
                c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
            });
            assert_eq!(eight_digits(&b), want, "{b:?}");
        }
        assert_eq!(eight_digits(b"12345678"), Some(12_345_678));
        assert_eq!(eight_digits(b"1234567"), None);
    }

    #[test]
    fn an_empty_list_has_no_points() {
        assert_eq!(points("[]"), Ok(vec![]));
        assert_eq!(points(" [ ] "), Ok(vec![]));
    }

    #[test]
    fn anything_but_a_list_of_pairs_is_a_shape_error_never_a_panic() {
        for bad in [
            "",
            "null",
            "{}",
            "[1]",
            "[[1]]",
            "[[1,\"1\",2]]",
            "[[\"1\",\"1\"]]",
            "[[1,true]]",
            "[[1,null]]",
            "[[1,\"1\"]",
            "[[1,\"1\"],]",
            "[[1,\"1]]",
            "[[1,\"1\\\"]]",
            "[[1,\"\\x\"]]",
            "[[1e999,\"1\"]]",
            "[[1,\"1\"]] x",
            "[[1796126610.,\"1\"]]",
            "[[1,\"1\"][2,\"1\"]]",
            "[[,\"1\"]]",
            "[[1,--]]",
            "[[1,\"é\"],[\u{1F600},1]]",
        ] {
            let e = points(bad);
            assert!(e.is_err(), "{bad:?}: {e:?}");
            let msg = e.unwrap_err().to_string();
            assert!(msg.contains(" at byte "), "{msg}");
        }
    }

    #[test]
    fn a_time_of_hundreds_of_digits_is_read_by_the_parsers_not_overflowed() {
        // The fuzzer's find (replay_matrix): a 20-digit time overflowed
        // the fast path's accumulator (a panic where overflow is checked).
        let text = format!("[[{},\"1\"],[{}.5,\"1\"]]", "9".repeat(20), "1".repeat(300));
        let got = points(&text).unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|p| p.0 == i64::MAX), "{got:?}");
    }

    #[test]
    fn absurd_times_saturate_and_fall_off_any_grid() {
        let got = points("[[1e300,\"1\"],[-1e300,\"1\"],[99999999999.999,\"1\"]]").unwrap();
        assert_eq!(got[0].0, i64::MAX);
        assert_eq!(got[1].0, i64::MIN);
        assert_eq!(got[2].0, 99_999_999_999_999);
    }
}
