//! A `query_range` answer read in one pass:
//! `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{…},"values":[…]},…]}}`.
//! Each series' labels are handed to the caller as soon as they are read,
//! and its `values` scanned straight into the row the caller gives
//! ([`super::values`]); a series the caller does not want is stepped over.
//! serde_json checked the whole text before the values were scanned a
//! second time, and that check was a third of a fleet replay's CPU time.
//!
//! The scan reads JSON as serde_json does for what the API sends (objects,
//! arrays, strings with every escape, numbers, literals), steps over any
//! member it does not know (`warnings`, `infos`, `stats`, a native
//! histogram's `histograms`) and nests at most [`MAX_DEPTH`] deep, on the
//! one [`Cursor`] that also scans the values. A text it cannot read is a
//! [`Failure::Syntax`] naming what and where, or, in a series' `values`
//! (a value that is not a number among them), a [`Failure::Values`] that
//! also names the series; the caller reports that, or the body itself
//! where the store answered with an error status.

use std::collections::BTreeMap;

use super::values::{self, Cursor, ShapeError};

/// Deepest nesting stepped over (serde_json's own recursion limit).
const MAX_DEPTH: usize = 128;

/// What the envelope said, and the result type of its `data`.
#[derive(Debug, Default, PartialEq)]
pub struct Answer {
    pub status: Option<String>,
    pub error_type: Option<String>,
    pub error: Option<String>,
    /// `data` was there, and not `null`.
    pub data: bool,
    /// `data.resultType`.
    pub result_type: Option<String>,
}

/// Why the scan stopped.
#[derive(Debug, PartialEq)]
pub enum Failure<E> {
    /// The caller refused a series (its budget).
    Refused(E),
    /// The text is not such an answer.
    Syntax(ShapeError),
    /// A series' `values` are not `[time, value]` pairs of numbers.
    Values {
        /// The series' labels; `None` where its `values` came before its
        /// `metric` and did not scan.
        labels: Option<BTreeMap<String, String>>,
        error: ShapeError,
        /// The text where the error is, at most [`NEAR_CHARS`] characters.
        near: String,
    },
}

/// Characters of the text shown where a series' `values` went wrong.
pub const NEAR_CHARS: usize = 32;

/// The [`Failure::Values`] of `error` in the series whose `metric` starts
/// at `metric_at` in `text` (its labels read again: a failure is rare, and
/// the series read did not keep them).
fn values_failure<E>(text: &str, metric_at: Option<usize>, error: ShapeError) -> Failure<E> {
    let labels = metric_at.and_then(|at| labels::<()>(&mut Cursor { text, at }).ok());
    let near = text.get(error.at..).unwrap_or_default();
    Failure::Values {
        labels,
        near: near.chars().take(NEAR_CHARS).collect(),
        error,
    }
}

/// `{"name": "value", …}`: a series' labels.
fn labels<E>(c: &mut Cursor<'_>) -> Result<BTreeMap<String, String>, Failure<E>> {
    let mut labels = BTreeMap::new();
    c.object(|c, name| {
        let name = name.to_string();
        let value = c.string()?;
        labels.insert(name, value);
        Ok(())
    })?;
    Ok(labels)
}

/// Read `text`. Every series' labels go to `series`, which gives the row
/// its points go to (`None`: drop them); `point` puts one point
/// `(Unix ms, value)` into that row, with a hint it may keep from one point
/// of the series to the next (the step it expects next).
pub fn read<R, E>(
    text: &str,
    mut series: impl FnMut(BTreeMap<String, String>) -> Result<Option<R>, E>,
    mut point: impl FnMut(&mut R, i64, f64, &mut usize),
) -> Result<Answer, Failure<E>> {
    let mut c = Cursor { text, at: 0 };
    let mut answer = Answer::default();
    c.object(|c, key| {
        match key {
            "status" => answer.status = c.string_or_null()?,
            "errorType" => answer.error_type = c.string_or_null()?,
            "error" => answer.error = c.string_or_null()?,
            "data" if c.null()? => {}
            "data" => {
                answer.data = true;
                c.object(|c, key| match key {
                    "resultType" => {
                        answer.result_type = c.string_or_null()?;
                        Ok(())
                    }
                    "result" => c.array(|c| one_series(c, &mut series, &mut point)),
                    _ => c.skip(0),
                })?
            }
            _ => c.skip(0)?,
        }
        Ok(())
    })?;
    c.skip_ws();
    if c.at != text.len() {
        return Err(Failure::Syntax(c.error("text after the answer")));
    }
    Ok(answer)
}

/// One `{"metric": {…}, "values": […]}`. Stores send `metric` first; where
/// `values` comes first it is checked and stepped over, and scanned again
/// from where it starts once the labels are read (nothing is held for it
/// but that offset).
fn one_series<R, E>(
    c: &mut Cursor<'_>,
    series: &mut impl FnMut(BTreeMap<String, String>) -> Result<Option<R>, E>,
    point: &mut impl FnMut(&mut R, i64, f64, &mut usize),
) -> Result<(), Failure<E>> {
    let mut row: Option<Option<R>> = None;
    let mut early: Vec<usize> = Vec::new();
    let mut next = 0;
    let mut metric_at = None;
    c.object(|c, key| {
        match key {
            "metric" if row.is_none() => {
                metric_at = Some(c.at);
                let labels = labels(c)?;
                row = Some(series(labels).map_err(Failure::Refused)?);
            }
            "values" => {
                let at = c.at;
                let end = match &mut row {
                    Some(Some(r)) => values::scan_at(c.text, at, |t, v| point(r, t, v, &mut next)),
                    Some(None) => values::scan_at(c.text, at, |_, _| {}),
                    None => {
                        early.push(at);
                        values::scan_at(c.text, at, |_, _| {})
                    }
                };
                c.at = end.map_err(|e| values_failure(c.text, metric_at, e))?;
            }
            _ => c.skip(0)?,
        }
        Ok(())
    })?;
    match row {
        Some(Some(mut r)) => {
            for at in early {
                // Checked when it was stepped over: it scans again alike.
                values::scan_at(c.text, at, |t, v| point(&mut r, t, v, &mut next))
                    .map_err(|e| values_failure(c.text, metric_at, e))?;
            }
        }
        Some(None) => {}
        None => return Err(Failure::Syntax(c.error("a series without `metric`"))),
    }
    Ok(())
}

/// A failure to read the text, where it happened.
impl<E> From<ShapeError> for Failure<E> {
    fn from(e: ShapeError) -> Self {
        Failure::Syntax(e)
    }
}

/// What reads the rest of an answer, on the cursor that scans its values.
impl<'a> Cursor<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// `{ "key": value, … }`, `member` reading each value after its key.
    fn object<E>(
        &mut self,
        mut member: impl FnMut(&mut Self, &str) -> Result<(), Failure<E>>,
    ) -> Result<(), Failure<E>> {
        self.expect(b'{', "expected an object")?;
        if self.eat(b'}') {
            return Ok(());
        }
        loop {
            let key = self.string()?;
            self.expect(b':', "expected `:` after a key")?;
            member(self, &key)?;
            if self.eat(b'}') {
                return Ok(());
            }
            self.expect(b',', "expected `,` or `}` in an object")?;
        }
    }

    /// `[ item, … ]`, `item` reading each.
    fn array<E>(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<(), Failure<E>>,
    ) -> Result<(), Failure<E>> {
        self.expect(b'[', "expected a list")?;
        if self.eat(b']') {
            return Ok(());
        }
        loop {
            item(self)?;
            if self.eat(b']') {
                return Ok(());
            }
            self.expect(b',', "expected `,` or `]` in a list")?;
        }
    }

    /// `null`, taken if it is next.
    fn null<E>(&mut self) -> Result<bool, Failure<E>> {
        self.skip_ws();
        let hit = self
            .bytes()
            .get(self.at..)
            .unwrap_or_default()
            .starts_with(b"null");
        self.at += if hit { 4 } else { 0 };
        Ok(hit)
    }

    fn string_or_null<E>(&mut self) -> Result<Option<String>, Failure<E>> {
        if self.null()? {
            return Ok(None);
        }
        self.string().map(Some)
    }

    /// A JSON string, its escapes read as serde_json reads them.
    fn string<E>(&mut self) -> Result<String, Failure<E>> {
        let (from, to, escaped) = self.string_span()?;
        let quoted = self.text.get(from..to).unwrap_or_default();
        if !escaped {
            let inside = quoted.get(1..quoted.len().saturating_sub(1));
            return Ok(inside.unwrap_or_default().to_string());
        }
        serde_json::from_str::<String>(quoted).map_err(|_| {
            Failure::Syntax(ShapeError {
                what: "a string with a bad escape",
                at: from,
            })
        })
    }

    /// Where the string at the cursor starts and ends (its quotes
    /// included) and whether it has escapes; the cursor goes past it. Raw
    /// control characters are refused, as JSON does.
    fn string_span<E>(&mut self) -> Result<(usize, usize, bool), Failure<E>> {
        self.skip_ws();
        let b = self.bytes();
        let from = self.at;
        if b.get(from) != Some(&b'"') {
            return Err(Failure::Syntax(self.error("expected a string")));
        }
        let mut at = from + 1;
        let mut escaped = false;
        loop {
            match b.get(at) {
                None => return Err(Failure::Syntax(self.error("a string that does not end"))),
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    at += 2;
                }
                Some(c) if *c < 0x20 => {
                    self.at = at;
                    return Err(Failure::Syntax(
                        self.error("a control character in a string"),
                    ));
                }
                Some(_) => at += 1,
            }
        }
        self.at = at + 1;
        Ok((from, at + 1, escaped))
    }

    /// Step over any one value, nested at most [`MAX_DEPTH`] deep.
    fn skip<E>(&mut self, depth: usize) -> Result<(), Failure<E>> {
        if depth >= MAX_DEPTH {
            return Err(Failure::Syntax(self.error("nested too deep")));
        }
        self.skip_ws();
        match self.bytes().get(self.at) {
            Some(b'"') => self.string_span().map(|_| ()),
            Some(b'{') => self.object(|c, _| c.skip(depth + 1)),
            Some(b'[') => self.array(|c| c.skip(depth + 1)),
            Some(_) => {
                let rest = self.bytes().get(self.at..).unwrap_or_default();
                for word in [&b"true"[..], b"false", b"null"] {
                    if rest.starts_with(word) {
                        self.at += word.len();
                        return Ok(());
                    }
                }
                let from = self.at;
                let n = rest
                    .iter()
                    .take_while(|c| matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .count();
                let number = self.text.get(from..from + n).unwrap_or_default();
                if n == 0 || serde_json::from_str::<serde::de::IgnoredAny>(number).is_err() {
                    return Err(Failure::Syntax(self.error("expected a value")));
                }
                self.at += n;
                Ok(())
            }
            None => Err(Failure::Syntax(self.error("the answer ends early"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Rows = BTreeMap<String, Vec<Option<f64>>>;

    /// `text` read into rows of `steps` steps at 1000 s, 1015 s, … for
    /// every series but those whose `m` is "drop".
    fn read_rows(text: &str, steps: usize) -> Result<(Answer, Rows), Failure<()>> {
        let mut rows: Rows = BTreeMap::new();
        let answer = read(
            text,
            |labels| {
                let m = labels.get("m").cloned().unwrap_or_default();
                Ok((m != "drop").then_some(m))
            },
            |m: &mut String, t, v, _next| {
                let row = rows.entry(m.clone()).or_insert_with(|| vec![None; steps]);
                let i = ((t - 1_000_000) / 15_000) as usize;
                if (t - 1_000_000) % 15_000 == 0 && i < row.len() {
                    row[i] = Some(v);
                }
            },
        )?;
        Ok((answer, rows))
    }

    #[test]
    fn every_series_goes_to_its_row_whichever_key_comes_first() {
        let text = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"m":"s0","x":"a\"b"},"values":[[1000,"1"],[1015,"2.5"],[1022,"9"]],"histograms":[[1,{"a":[1,2.5e3,true,null]}]]},
            {"values":[[1030,"NaN"],[1045,"0"]],"metric":{"m":"s1"}},
            {"metric":{"m":"drop"},"values":[[1000,"1"]]}],
            "stats":{"x":{"y":[]}}},"warnings":["a"],"infos":[]}"#;
        let (answer, rows) = read_rows(text, 4).map_err(|e| format!("{e:?}")).unwrap();
        assert_eq!(answer.status.as_deref(), Some("success"));
        assert_eq!(answer.result_type.as_deref(), Some("matrix"));
        assert_eq!(rows["s0"], [Some(1.0), Some(2.5), None, None]);
        let s1 = &rows["s1"];
        assert!(s1[..2] == [None, None] && s1[2].unwrap().is_nan() && s1[3] == Some(0.0));
    }

    #[test]
    fn an_error_answer_is_read_for_its_words() {
        let text = r#"{"status":"error","errorType":"bad_data","error":"query processing would load too many samples into memory","data":null}"#;
        let (answer, _) = read_rows(text, 1).map_err(|e| format!("{e:?}")).unwrap();
        assert_eq!(answer.status.as_deref(), Some("error"));
        assert_eq!(answer.error_type.as_deref(), Some("bad_data"));
        assert!(answer.error.unwrap().contains("too many samples"));
        assert!(!answer.data && answer.result_type.is_none());
    }

    #[test]
    fn bad_values_name_their_series_whichever_key_comes_first() {
        let metric_first = r#"{"data":{"result":[{"metric":{"m":"a"},"values":[[1000,"1"]]},
            {"metric":{"m":"b","x":"y"},"values":[[1000,"1"],[1015,"up"]]}]}}"#;
        let values_first = r#"{"data":{"result":[{"values":[[1000,"1"],[1015,"up"]],"metric":{"m":"b","x":"y"}}]}}"#;
        let b = BTreeMap::from([("m".into(), "b".into()), ("x".into(), "y".into())]);
        for (text, labels) in [(metric_first, Some(b)), (values_first, None)] {
            let Err(Failure::Values {
                labels: got,
                error,
                near,
            }) = read_rows(text, 2)
            else {
                panic!("{text}");
            };
            assert_eq!(got, labels, "{text}");
            assert_eq!(error.what, values::NOT_A_NUMBER);
            assert!(near.starts_with(r#""up"]]"#), "{near}");
        }
    }

    #[test]
    fn a_refused_series_stops_the_read() {
        let text = r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[]}]}}"#;
        let r = read(text, |_| Err::<Option<()>, _>("budget"), |_, _, _, _| {});
        assert_eq!(r, Err(Failure::Refused("budget")));
    }

    #[test]
    fn what_is_not_such_an_answer_is_a_syntax_error_never_a_panic() {
        let deep = format!("{{\"x\":{}{}}}", "[".repeat(200), "]".repeat(200));
        let long = "[".repeat(100_000);
        for bad in [
            "",
            "{",
            "[]",
            "{\"status\"}",
            "{\"status\":\"success\",}",
            "{\"status\":\"succ",
            "{\"status\":\"a\u{1}b\"}",
            "{\"status\":\"\\x\"}",
            "{\"data\":{\"result\":[{\"values\":[]}]}}",
            "{\"data\":{\"result\":[{\"metric\":{\"a\":1}}]}}",
            "{\"data\":{\"result\":[{\"metric\":{},\"values\":[[1]]}]}}",
            "{\"data\":{\"result\":{}}}",
            "{\"x\":tru}",
            "{\"x\":-}",
            "{\"x\":1.}",
            "{} x",
            &deep,
            &long,
        ] {
            let r = read_rows(bad, 1);
            assert!(
                matches!(r, Err(Failure::Syntax(_) | Failure::Values { .. })),
                "{bad:.40}: {r:?}"
            );
        }
    }
}
