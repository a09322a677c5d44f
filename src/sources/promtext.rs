//! A parser for the Prometheus text exposition format (0.0.4), enough to read
//! samples: metric name, labels (with `\\`, `\"` and `\n` escapes), value
//! (including `NaN`, `+Inf`, `-Inf`) and an optional timestamp, which is
//! checked and ignored. `#` lines (HELP, TYPE, comments, OpenMetrics `# EOF`)
//! are skipped. Our own parser rather than a crate: we need only samples, and
//! the crates on offer are either unmaintained or pull in regex for what is a
//! hundred lines of scanning.

use std::fmt;

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    /// Label pairs in the order written.
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether every `(name, value)` matcher equals the sample's label (a
    /// missing label matches the empty string, as in PromQL).
    pub fn matches<'a>(&self, matchers: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
        matchers
            .into_iter()
            .all(|(k, v)| self.label(k).unwrap_or("") == v)
    }
}

impl fmt::Display for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if !self.labels.is_empty() {
            f.write_str("{")?;
            for (i, (k, v)) in self.labels.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{k}={v:?}")?;
            }
            f.write_str("}")?;
        }
        write!(f, " {}", self.value)
    }
}

/// A line that is not valid exposition text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    pub problem: LineProblem,
}

/// What is wrong with a line; columns are 1-based.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    #[error("expected a metric name")]
    NoMetricName,
    #[error("expected a label name at column {0}")]
    NoLabelName(usize),
    #[error("expected `=` after label `{0}`")]
    NoEquals(String),
    #[error("expected `\"` at column {0}")]
    NoQuote(usize),
    #[error("unterminated label value")]
    Unterminated,
    #[error("expected `,` or `}}` at column {0}")]
    NoLabelEnd(usize),
    #[error("missing value for `{0}`")]
    NoValue(String),
    #[error("invalid value `{0}`")]
    InvalidValue(String),
    #[error("invalid timestamp `{0}`")]
    InvalidTimestamp(String),
    #[error("unexpected `{0}` after the value")]
    Trailing(String),
}

/// Parse a whole exposition into its samples.
pub fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_matches(|c| c == ' ' || c == '\t' || c == '\r');
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse_line(line).map_err(|problem| ParseError {
            line: i + 1,
            problem,
        })?);
    }
    Ok(out)
}

fn parse_line(line: &str) -> Result<Sample, LineProblem> {
    let mut cur = Cursor { s: line, pos: 0 };
    let name = cur.name(true).ok_or(LineProblem::NoMetricName)?.to_string();
    cur.skip_ws();
    let mut labels = Vec::new();
    if cur.eat('{') {
        loop {
            cur.skip_ws();
            if cur.eat('}') {
                break;
            }
            let key = cur
                .name(false)
                .ok_or(LineProblem::NoLabelName(cur.pos + 1))?
                .to_string();
            cur.skip_ws();
            if !cur.eat('=') {
                return Err(LineProblem::NoEquals(key));
            }
            cur.skip_ws();
            let value = cur.quoted()?;
            labels.push((key, value));
            cur.skip_ws();
            if cur.eat(',') {
                continue;
            }
            if cur.eat('}') {
                break;
            }
            return Err(LineProblem::NoLabelEnd(cur.pos + 1));
        }
    }
    let rest = &line[cur.pos..];
    let mut fields = rest.split_ascii_whitespace();
    let value = fields
        .next()
        .ok_or_else(|| LineProblem::NoValue(name.clone()))?;
    let value = parse_value(value).ok_or_else(|| LineProblem::InvalidValue(value.to_string()))?;
    if let Some(ts) = fields.next()
        && ts.parse::<i64>().is_err()
    {
        return Err(LineProblem::InvalidTimestamp(ts.to_string()));
    }
    if let Some(extra) = fields.next() {
        return Err(LineProblem::Trailing(extra.to_string()));
    }
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// A sample value: a Go float, `NaN`, `+Inf`, `-Inf`.
pub fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => {
            // Rust also accepts "inf", "infinity", "nan" in any case; the format does not.
            if s.bytes()
                .any(|b| b.is_ascii_alphabetic() && b != b'e' && b != b'E')
            {
                return None;
            }
            s.parse().ok()
        }
    }
}

struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn skip_ws(&mut self) {
        while matches!(self.s.as_bytes().get(self.pos), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, c: char) -> bool {
        if self.s[self.pos..].starts_with(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*` (colons only in metric names).
    fn name(&mut self, colons: bool) -> Option<&'a str> {
        let start = self.pos;
        for (i, b) in self.s.as_bytes()[start..].iter().enumerate() {
            let ok = b.is_ascii_alphabetic()
                || *b == b'_'
                || (colons && *b == b':')
                || (i > 0 && b.is_ascii_digit());
            if !ok {
                break;
            }
            self.pos += 1;
        }
        (self.pos > start).then(|| &self.s[start..self.pos])
    }

    fn quoted(&mut self) -> Result<String, LineProblem> {
        if !self.eat('"') {
            return Err(LineProblem::NoQuote(self.pos + 1));
        }
        let mut out = String::new();
        let mut chars = self.s[self.pos..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, '\\')) => out.push('\\'),
                    Some((_, '"')) => out.push('"'),
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, other)) => {
                        // The format defines only three escapes; keep others verbatim.
                        out.push('\\');
                        out.push(other);
                    }
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(LineProblem::Unterminated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Sample {
        let mut v = parse(line).unwrap();
        assert_eq!(v.len(), 1, "{v:?}");
        v.remove(0)
    }

    #[test]
    fn skips_help_type_comments_and_blank_lines() {
        let text = "# HELP etcdbr_snapshot_latest_revision Latest revision.\n\
                    # TYPE etcdbr_snapshot_latest_revision gauge\n\
                    \n\
                    # just a comment\n\
                    etcdbr_snapshot_latest_revision{kind=\"Full\"} 42\n\
                    etcdbr_snapshot_latest_revision{kind=\"Incr\"} 0\n\
                    # EOF\n";
        let v = parse(text).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].name, "etcdbr_snapshot_latest_revision");
        assert_eq!(v[0].label("kind"), Some("Full"));
        assert_eq!(v[0].value, 42.0);
        assert_eq!(v[1].value, 0.0);
    }

    #[test]
    fn label_values_with_escapes() {
        let s = one(r#"m{a="say \"hi\"",b="back\\slash",c="line\nbreak",d="x,y}z"} 1"#);
        assert_eq!(s.label("a"), Some(r#"say "hi""#));
        assert_eq!(s.label("b"), Some(r"back\slash"));
        assert_eq!(s.label("c"), Some("line\nbreak"));
        assert_eq!(s.label("d"), Some("x,y}z"));
    }

    #[test]
    fn special_values_and_timestamps() {
        assert!(one("m NaN").value.is_nan());
        assert_eq!(one("m +Inf").value, f64::INFINITY);
        assert_eq!(one("m -Inf 1700000000000").value, f64::NEG_INFINITY);
        assert_eq!(one("m{le=\"+Inf\"} 3 1700000000000").value, 3.0);
        assert_eq!(one("m 1.5e3").value, 1500.0);
        assert_eq!(one("m -0.25").value, -0.25);
    }

    #[test]
    fn spaces_trailing_commas_and_colons() {
        let s = one("job:up:sum { a = \"1\" , b=\"2\", } \t 7  ");
        assert_eq!(s.name, "job:up:sum");
        assert_eq!(
            s.labels,
            vec![("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        assert_eq!(s.value, 7.0);
        assert_eq!(one("m{} 1").labels, vec![]);
    }

    #[test]
    fn rejects_broken_lines_with_their_line_number() {
        for (text, want) in [
            ("ok 1\nm{a=\"1\" 2", "expected `,` or `}`"),
            ("ok 1\nm{a=\"1} 2", "unterminated label value"),
            ("ok 1\nm", "missing value"),
            ("ok 1\nm inf", "invalid value `inf`"),
            ("ok 1\nm 1 notatime", "invalid timestamp"),
            ("ok 1\nm 1 2 3", "unexpected `3`"),
            ("ok 1\n{a=\"b\"} 1", "expected a metric name"),
            ("ok 1\nm{a=1} 1", "expected `\"`"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, 2, "{text}");
            assert!(e.problem.to_string().contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn a_problem_is_a_value_with_its_column_not_only_a_text() {
        let e = parse("m{a=1} 1").unwrap_err();
        assert_eq!(e.problem, LineProblem::NoQuote(5));
        assert_eq!(e.to_string(), "line 1: expected `\"` at column 5");
        let e = parse("m{a=\"1\" 2").unwrap_err();
        assert_eq!(e.problem, LineProblem::NoLabelEnd(9));
    }

    #[test]
    fn matchers_are_exact_and_missing_label_is_empty() {
        let s = one(r#"m{kind="Full",x=""} 1"#);
        assert!(s.matches([("kind", "Full")]));
        assert!(!s.matches([("kind", "Incr")]));
        assert!(s.matches([("x", ""), ("missing", "")]));
        assert!(!s.matches([("missing", "a")]));
    }

    #[test]
    fn parses_a_real_etcd_histogram_excerpt() {
        let text = "# HELP etcd_disk_wal_fsync_duration_seconds The latency distributions of fsync called by WAL.\n\
# TYPE etcd_disk_wal_fsync_duration_seconds histogram\n\
etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.001\"} 0\n\
etcd_disk_wal_fsync_duration_seconds_bucket{le=\"+Inf\"} 5\n\
etcd_disk_wal_fsync_duration_seconds_sum 0.010591216\n\
etcd_disk_wal_fsync_duration_seconds_count 5\n";
        let v = parse(text).unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v[1].label("le"), Some("+Inf"));
        assert_eq!(v[3].value, 5.0);
    }
}
