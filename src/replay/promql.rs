//! The PromQL `replay` sends: a metric with the `--selector`'s matchers
//! (checked to be matchers only, bounded in size, [`check_selector`]) and
//! a batch's members as regex matchers of literal values.

use std::collections::BTreeMap;

/// `metric` with the matchers of `selector` (`{namespace="prod"}`, or empty)
/// and `extra` matchers, as one PromQL selector.
pub fn selector_query(metric: &str, selector: &str, extra: &[String]) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let inner = selector_inner(selector);
    if !inner.is_empty() {
        parts.push(inner);
    }
    parts.extend(extra.iter().map(String::as_str));
    format!("{metric}{{{}}}", parts.join(","))
}

/// The matchers inside `{…}`, without a trailing comma.
fn selector_inner(selector: &str) -> &str {
    let s = selector.trim();
    let s = s.strip_prefix('{').unwrap_or(s);
    let s = s.strip_suffix('}').unwrap_or(s);
    s.trim().trim_end_matches(',').trim()
}

/// Matchers that select exactly the members of `batch` (label sets without
/// the per-signal labels) among the series of one metric, or a few more
/// where the members' labels cross (those are dropped as they are read):
/// a label all of them have with one value is `k="v"`, any other label
/// `k=~"v1|v2|…"`, with `""` among the values where some member lacks it.
pub fn member_matchers(batch: &[BTreeMap<String, String>]) -> Vec<String> {
    let mut values: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    for m in batch {
        for (k, v) in m {
            values.entry(k).or_default().insert(v);
        }
    }
    values
        .into_iter()
        .map(|(k, vs)| {
            let everywhere = batch.iter().all(|m| m.contains_key(k));
            if everywhere && vs.len() == 1 {
                let v = vs.into_iter().next().unwrap_or_default();
                format!("{k}=\"{}\"", promql_string(v))
            } else {
                let mut alts: Vec<String> = vs.into_iter().map(regex_literal).collect();
                if !everywhere {
                    alts.push(String::new());
                }
                format!("{k}=~\"{}\"", promql_string(&alts.join("|")))
            }
        })
        .collect()
}

/// `s` matched literally in an RE2 regex (Go's `regexp.QuoteMeta`).
fn regex_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The inside of a double-quoted PromQL string holding `s` (Go's escapes).
fn promql_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// The longest `--selector` replay sends.
const MAX_SELECTOR_BYTES: usize = 4096;

/// Why `--selector` is refused before any query.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "--selector `{0}` must be label matchers in braces, e.g. \
         '{{namespace=\"prod\",pod=~\"etcd-.*\"}}'"
    )]
    NotMatchers(String),
    #[error("--selector is longer than {MAX_SELECTOR_BYTES} bytes")]
    TooLong,
}

/// Check the shape of `--selector`: `{…}` (Prometheus checks the matchers).
pub fn check_selector(selector: &str) -> Result<(), SelectorError> {
    let s = selector.trim();
    if s.is_empty() {
        return Ok(());
    }
    if !(s.starts_with('{') && s.ends_with('}')) {
        return Err(SelectorError::NotMatchers(selector.to_string()));
    }
    if s.len() > MAX_SELECTOR_BYTES {
        return Err(SelectorError::TooLong);
    }
    Ok(())
}
