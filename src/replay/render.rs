//! What `replay` prints: the human summary (`text`), the stable JSON
//! document (`json`, described in docs/replay.md), JSON lines, and (from
//! `svg.rs`) the SVG timeline. Pure functions of the reports; no IO.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Serialize, Serializer};

use super::timeline::{Grid, Interval, MemberReport};
use crate::outside::checked::rfc3339;
use etcd_readiness_policy::text::fmt_duration;
use etcd_readiness_policy::verdict::CheckKind;

/// What was replayed, for the heading of every format.
pub struct Header<'a> {
    pub policy_path: &'a str,
    pub policy_sha256: &'a str,
    pub check_names: Vec<(String, CheckKind)>,
    pub grid: Grid,
    /// Signals the policy reads of which no selected member has a series.
    pub missing_signals: Vec<String>,
}

/// Unix milliseconds as JSON seconds: an integer when whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Secs(pub(super) i64);

impl Serialize for Secs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 % 1000 == 0 {
            s.serialize_i64(self.0 / 1000)
        } else {
            s.serialize_f64(self.0 as f64 / 1000.0)
        }
    }
}

/// Whether `c` must not reach a terminal or an SVG as it is: control
/// characters (ESC, CR, LF, BEL, DEL, C1) and the Unicode controls that
/// reorder or hide text (bidi embeddings, overrides and isolates, zero
/// width marks).
fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// `s` with every [`unprintable`] character written as a `\u{..}` escape:
/// what text from Prometheus goes through before it is printed or drawn.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(unprintable) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unprintable(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `{a="b",c="d"}`, as PromQL writes a label set; names and values made
/// [`printable`] (a hostile Prometheus can send any label name).
pub fn label_set(labels: &BTreeMap<String, String>) -> String {
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            // As Rust's `{:?}` quotes it: `\` and `"` escaped, so that an
            // escape cannot be forged, then the unprintable characters.
            let v = v.replace('\\', "\\\\").replace('"', "\\\"");
            format!("{}=\"{}\"", printable(k), printable(&v))
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// One stretch of a verdict as the JSON holds it. The fields of every JSON
/// object replay prints are declared in alphabetical order: the order the
/// document has always had.
#[derive(Serialize)]
struct IntervalJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    explanations: Option<BTreeMap<&'a str, &'a str>>,
    failing: &'a [String],
    from: Secs,
    ready: Option<bool>,
    to: Secs,
}

impl<'a> IntervalJson<'a> {
    fn new(i: &'a Interval, with_explanations: bool) -> Self {
        let why = with_explanations.then(|| {
            i.failing
                .iter()
                .zip(&i.explanations)
                .map(|(n, e)| (n.as_str(), e.as_str()))
                .collect()
        });
        IntervalJson {
            explanations: why,
            failing: &i.failing,
            from: Secs(i.from_ms),
            ready: i.ready,
            to: Secs(i.to_ms),
        }
    }
}

/// One check's span as the JSON holds it.
#[derive(Serialize)]
struct CheckJson<'a> {
    check: &'a str,
    explanation: &'a str,
    from: Secs,
    held: bool,
    kind: &'static str,
    recovering: bool,
    state: &'static str,
    to: Secs,
}

/// One member as the JSON document (and each JSON line) holds it.
#[derive(Serialize)]
pub struct MemberJson<'a> {
    checks: Vec<CheckJson<'a>>,
    differs_from_recorded: Vec<IntervalJson<'a>>,
    flips: u64,
    intervals: Vec<IntervalJson<'a>>,
    labels: &'a BTreeMap<String, String>,
    missing_signals: &'a [String],
    not_ready_seconds: Secs,
    ready_seconds: Secs,
    recorded: Vec<IntervalJson<'a>>,
    recorded_flips: u64,
    unknown_seconds: Secs,
}

/// Stretches as the JSON holds them.
fn intervals_json(v: &[Interval], with_explanations: bool) -> Vec<IntervalJson<'_>> {
    v.iter()
        .map(|i| IntervalJson::new(i, with_explanations))
        .collect()
}

/// One member as the JSON document (and each JSON line) holds it.
pub fn member_json(m: &MemberReport) -> MemberJson<'_> {
    MemberJson {
        checks: m
            .checks
            .iter()
            .map(|c| CheckJson {
                check: &c.check,
                explanation: &c.explanation,
                from: Secs(c.from_ms),
                held: c.held,
                kind: c.kind.as_str(),
                recovering: c.recovering,
                state: c.state.as_str(),
                to: Secs(c.to_ms),
            })
            .collect(),
        differs_from_recorded: intervals_json(&m.differs_from_recorded, false),
        flips: m.flips,
        intervals: intervals_json(&m.intervals, true),
        labels: &m.labels,
        missing_signals: &m.missing_signals,
        not_ready_seconds: Secs(m.not_ready_ms),
        ready_seconds: Secs(m.ready_ms),
        recorded: intervals_json(&m.recorded, false),
        recorded_flips: m.recorded_flips,
        unknown_seconds: Secs(m.unknown_ms),
    }
}

/// The fields of the `--format json` document before `members`.
#[derive(Serialize)]
struct DocHead {
    end: Secs,
}

/// The fields after `members`, and the fleet summary (when there is one)
/// last.
#[derive(Serialize)]
struct DocTail<'a, F> {
    missing_signals: &'a [String],
    policy_sha256: &'a str,
    start: Secs,
    step: Secs,
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<&'a F>,
}

/// The fields of `value` (an object) as they stand pretty-printed in the
/// document, one level deep: without its braces.
fn fields_of(value: &impl Serialize) -> String {
    let pretty = serde_json::to_string_pretty(value).unwrap_or_default();
    let inner = pretty.strip_prefix("{\n").unwrap_or(&pretty);
    inner.strip_suffix("\n}").unwrap_or(inner).to_string()
}

/// The indentation of the document's fields, and so of `"members"`.
const INDENT: &str = "  ";

/// The `--format json` document written as replay goes, member by member,
/// byte for byte what pretty-printing it whole gives: [`JsonStream::head`],
/// a [`JsonStream::member`] each, then [`JsonStream::tail`].
pub struct JsonStream {
    head: String,
    start: Secs,
    step: Secs,
    policy_sha256: String,
    missing_signals: Vec<String>,
    members: usize,
}

impl JsonStream {
    pub fn new(h: &Header<'_>) -> JsonStream {
        let head = DocHead {
            end: Secs(h.grid.end_ms),
        };
        let head = format!("{{\n{},\n{INDENT}\"members\": ", fields_of(&head));
        JsonStream {
            head: json_escape_unprintable(&head),
            start: Secs(h.grid.start_ms),
            step: Secs(h.grid.step_ms),
            policy_sha256: h.policy_sha256.to_string(),
            missing_signals: h.missing_signals.clone(),
            members: 0,
        }
    }

    /// Everything before the first member.
    pub fn head(&self) -> &str {
        &self.head
    }

    /// The next member, with what separates it from the one before.
    pub fn member(&mut self, m: &MemberReport) -> String {
        let pretty = serde_json::to_string_pretty(&member_json(m)).unwrap_or_default();
        let inner = format!("{INDENT}  ");
        let mut out = String::from(if self.members == 0 { "[\n" } else { ",\n" });
        for (i, line) in pretty.lines().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&inner);
            out.push_str(line);
        }
        self.members += 1;
        json_escape_unprintable(&out)
    }

    /// Everything after the last member; `fleet` (the fleet summary) is
    /// added as the last field.
    pub fn tail(&self, fleet: Option<&impl Serialize>) -> String {
        let mut out = if self.members == 0 {
            "[]".to_string()
        } else {
            format!("\n{INDENT}]")
        };
        let tail = DocTail {
            missing_signals: &self.missing_signals,
            policy_sha256: &self.policy_sha256,
            start: self.start,
            step: self.step,
            fleet,
        };
        out.push_str(&json_escape_unprintable(&format!(
            ",\n{}\n}}\n",
            fields_of(&tail)
        )));
        out
    }
}

/// One member as a line of `--format jsonl`.
pub fn member_line(m: &MemberReport) -> String {
    let mut s =
        json_escape_unprintable(&serde_json::to_string(&member_json(m)).unwrap_or_default());
    s.push('\n');
    s
}

/// The fleet summary as the last line of `--format jsonl`, `{"fleet": …}`,
/// made printable like every member's line (its labels come from
/// Prometheus).
pub fn fleet_line(fleet: &impl Serialize) -> String {
    #[derive(Serialize)]
    struct Line<'a, F> {
        fleet: &'a F,
    }
    let mut s =
        json_escape_unprintable(&serde_json::to_string(&Line { fleet }).unwrap_or_default());
    s.push('\n');
    s
}

/// The `--format json` document.
pub fn json(h: &Header<'_>, members: &[MemberReport]) -> String {
    let mut doc = JsonStream::new(h);
    let mut out = doc.head().to_string();
    for m in members {
        out.push_str(&doc.member(m));
    }
    out.push_str(&doc.tail(None::<&()>));
    out
}

/// serde_json escapes the characters JSON requires (below U+0020) but
/// writes DEL, the C1 controls and the bidi controls raw, which a terminal
/// showing the document acts on. Outside strings pretty JSON has only
/// ASCII whitespace, so every other [`unprintable`] character is inside a
/// string, where `\uXXXX` means the same.
fn json_escape_unprintable(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len());
    for c in doc.chars() {
        if unprintable(c) && !matches!(c, '\n' | '\t' | '\r') {
            // Every unprintable character is in the BMP.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Milliseconds as a duration in the project's grammar (`0s`, not `0ms`).
pub(super) fn dur(ms: i64) -> String {
    if ms == 0 {
        "0s".to_string()
    } else {
        fmt_duration(ms as f64 / 1000.0)
    }
}

pub(super) fn span_text(from_ms: i64, to_ms: i64) -> String {
    format!(
        "{} → {} ({})",
        rfc3339(from_ms),
        rfc3339(to_ms),
        dur(to_ms - from_ms)
    )
}

/// The first lines of the `--format text` summary, for `members` members.
pub fn text_head(h: &Header<'_>, members: usize) -> String {
    let g = &h.grid;
    let mut out = format!(
        "replay of {} (sha256 {}) from {} to {}, step {}, {} member{}\n",
        h.policy_path,
        &h.policy_sha256[..h.policy_sha256.len().min(12)],
        rfc3339(g.start_ms),
        rfc3339(g.end_ms),
        fmt_duration(g.step_ms as f64 / 1000.0),
        members,
        if members == 1 { "" } else { "s" }
    );
    if !h.missing_signals.is_empty() {
        let _ = writeln!(
            out,
            "warning: the policy reads signals Prometheus holds no series of: {}",
            h.missing_signals.join(", ")
        );
    }
    out
}

/// The `--format text` summary.
pub fn text(h: &Header<'_>, members: &[MemberReport]) -> String {
    let mut out = text_head(h, members.len());
    for m in members {
        member_text(&mut out, h, m);
    }
    out
}

/// One member's part of the summary: totals, then its stretches.
pub fn member_text(out: &mut String, h: &Header<'_>, m: &MemberReport) {
    let _ = writeln!(out, "\n{}", label_set(&m.labels));
    let _ = writeln!(
        out,
        "  ready {}, not ready {}, unknown {}; {} flip{} (recorded: {})",
        dur(m.ready_ms),
        dur(m.not_ready_ms),
        dur(m.unknown_ms),
        m.flips,
        if m.flips == 1 { "" } else { "s" },
        m.recorded_flips
    );
    let only_here: Vec<&str> = m
        .missing_signals
        .iter()
        .filter(|s| !h.missing_signals.contains(s))
        .map(|s| s.as_str())
        .collect();
    if !only_here.is_empty() {
        let _ = writeln!(
            out,
            "  no series in Prometheus for: {}",
            only_here.join(", ")
        );
    }
    // A stretch starting at the last step, when that step is `end`,
    // lasts nothing: the JSON keeps it, the summary does not.
    for i in m.not_ready_intervals().filter(|i| i.to_ms > i.from_ms) {
        let _ = writeln!(out, "  not ready {}", span_text(i.from_ms, i.to_ms));
        for (name, why) in i.failing.iter().zip(&i.explanations) {
            let _ = writeln!(out, "    {name}: {why}");
        }
    }
    for i in m
        .intervals
        .iter()
        .filter(|i| i.ready.is_none() && i.to_ms > i.from_ms)
    {
        let _ = writeln!(out, "  no data {}", span_text(i.from_ms, i.to_ms));
    }
    holds_and_warns(out, m);
    differences(out, m);
}

/// The spans a hold-down held passing or a recovery hold held failing,
/// and the warns that did not pass.
fn holds_and_warns(out: &mut String, m: &MemberReport) {
    for c in m.checks.iter().filter(|c| c.held) {
        let _ = writeln!(
            out,
            "  {} held passing by its hold-down {}",
            c.check,
            span_text(c.from_ms, c.to_ms)
        );
    }
    for c in m.checks.iter().filter(|c| c.recovering) {
        let _ = writeln!(
            out,
            "  {} held failing by its recovery hold {}",
            c.check,
            span_text(c.from_ms, c.to_ms)
        );
    }
    for c in m
        .checks
        .iter()
        .filter(|c| c.kind == CheckKind::Warn && !c.held)
    {
        let _ = writeln!(
            out,
            "  warn {} {} {}: {}",
            c.check,
            c.state.as_str(),
            span_text(c.from_ms, c.to_ms),
            c.explanation
        );
    }
}

/// Where the candidate's verdict differs from the recorded one.
fn differences(out: &mut String, m: &MemberReport) {
    if m.differs_from_recorded.is_empty() {
        let _ = writeln!(out, "  same verdict as recorded wherever both are known");
    }
    for d in &m.differs_from_recorded {
        let (cand, rec) = if d.ready == Some(true) {
            ("ready", "not ready")
        } else {
            ("not ready", "ready")
        };
        let _ = write!(
            out,
            "  differs from recorded {}: candidate {cand}, recorded {rec}",
            span_text(d.from_ms, d.to_ms)
        );
        if !d.failing.is_empty() {
            let _ = write!(out, " (failing: {})", d.failing.join(", "));
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::svg::svg;
    use crate::replay::timeline::CheckSpan;
    use etcd_readiness_policy::verdict::CheckState;
    use serde_json::{Value as Json, json};

    fn report() -> MemberReport {
        let iv = |from_ms, to_ms, ready, failing: &[&str], why: &[&str]| Interval {
            from_ms,
            to_ms,
            ready,
            failing: failing.iter().map(|s| s.to_string()).collect(),
            explanations: why.iter().map(|s| s.to_string()).collect(),
        };
        MemberReport {
            labels: BTreeMap::from([("pod".to_string(), "etcd-0".to_string())]),
            ready_ms: 15_000,
            not_ready_ms: 7_500,
            unknown_ms: 0,
            flips: 1,
            recorded_flips: 0,
            intervals: vec![
                iv(1_000_000, 1_015_000, Some(true), &[], &[]),
                iv(
                    1_015_000,
                    1_022_500,
                    Some(false),
                    &["fast"],
                    &["qget_ms < 1 is false (qget_ms = 2)"],
                ),
                iv(
                    1_022_500,
                    1_022_500,
                    Some(false),
                    &["fast"],
                    &["qget_ms < 1 is false (qget_ms = 2)"],
                ),
            ],
            recorded: vec![iv(1_000_000, 1_022_500, Some(true), &[], &[])],
            differs_from_recorded: vec![iv(1_015_000, 1_022_500, Some(false), &["fast"], &[])],
            checks: vec![CheckSpan {
                check: "fast".to_string(),
                kind: CheckKind::Check,
                state: CheckState::Fail,
                held: false,
                recovering: false,
                from_ms: 1_015_000,
                to_ms: 1_022_500,
                explanation: "qget_ms < 1 is false (qget_ms = 2)".to_string(),
            }],
            missing_signals: Vec::new(),
        }
    }

    fn header() -> Header<'static> {
        Header {
            policy_path: "candidate.policy",
            policy_sha256: "0123456789abcdef",
            check_names: vec![("fast".to_string(), CheckKind::Check)],
            grid: Grid {
                start_ms: 1_000_000,
                end_ms: 1_022_500,
                step_ms: 7_500,
                steps: 4,
            },
            missing_signals: Vec::new(),
        }
    }

    #[test]
    fn the_json_document_has_the_documented_fields_and_unix_seconds() {
        let doc: Json = serde_json::from_str(&json(&header(), &[report()])).unwrap();
        let keys = |v: &Json| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            keys(&doc),
            [
                "end",
                "members",
                "missing_signals",
                "policy_sha256",
                "start",
                "step"
            ]
        );
        assert_eq!(
            (
                doc["start"].clone(),
                doc["end"].clone(),
                doc["step"].clone()
            ),
            (json!(1000), json!(1022.5), json!(7.5))
        );
        let m = &doc["members"][0];
        assert_eq!(
            keys(m),
            [
                "checks",
                "differs_from_recorded",
                "flips",
                "intervals",
                "labels",
                "missing_signals",
                "not_ready_seconds",
                "ready_seconds",
                "recorded",
                "recorded_flips",
                "unknown_seconds"
            ]
        );
        assert_eq!(
            m["intervals"][1],
            json!({"from": 1015, "to": 1022.5, "ready": false, "failing": ["fast"],
                   "explanations": {"fast": "qget_ms < 1 is false (qget_ms = 2)"}})
        );
        assert_eq!(
            m["differs_from_recorded"][0],
            json!({"from": 1015, "to": 1022.5, "ready": false, "failing": ["fast"]})
        );
        assert_eq!(
            keys(&m["checks"][0]),
            [
                "check",
                "explanation",
                "from",
                "held",
                "kind",
                "recovering",
                "state",
                "to"
            ]
        );
    }

    /// What `json` printed when it pretty-printed the document whole.
    fn whole(h: &Header<'_>, members: &[MemberReport]) -> String {
        let doc = json!({
            "start": Secs(h.grid.start_ms),
            "end": Secs(h.grid.end_ms),
            "step": Secs(h.grid.step_ms),
            "policy_sha256": h.policy_sha256,
            "missing_signals": h.missing_signals,
            "members": members.iter().map(member_json).collect::<Vec<_>>(),
        });
        let mut s = json_escape_unprintable(&serde_json::to_string_pretty(&doc).unwrap());
        s.push('\n');
        s
    }

    #[test]
    fn the_streamed_json_is_the_document_pretty_printed_whole_plus_the_fleet_last() {
        let mut h = header();
        h.missing_signals = vec!["rev_lag".to_string()];
        let mut other = report();
        other
            .labels
            .insert("pod".to_string(), "etcd-1\u{1b}\u{202e}".to_string());
        for members in [vec![], vec![report()], vec![report(), other]] {
            assert_eq!(
                json(&h, &members),
                whole(&h, &members),
                "{} members",
                members.len()
            );
        }
        let mut doc = JsonStream::new(&h);
        let mut out = doc.head().to_string();
        out.push_str(&doc.member(&report()));
        out.push_str(&doc.tail(Some(&json!({"members": 1, "x": [1, 2]}))));
        let v: Json = serde_json::from_str(&out).unwrap();
        assert_eq!(v["fleet"], json!({"members": 1, "x": [1, 2]}));
        assert_eq!(v["members"].as_array().map(Vec::len), Some(1));
        assert!(out.ends_with("\n  }\n}\n"), "{out}");
    }

    #[test]
    fn the_fleet_line_is_one_printable_json_line() {
        let mut hostile = report();
        hostile
            .labels
            .insert("pod".to_string(), "etcd-1\u{1b}\u{202e}\u{9b}".to_string());
        let mut fleet = crate::replay::summary::Summary::new(None);
        fleet.add(&hostile, None);
        let line = fleet_line(&fleet.json(0));
        assert!(line.ends_with("}\n") && line.lines().count() == 1, "{line}");
        assert!(!line.trim_end().chars().any(unprintable), "{line:?}");
        let v: Json = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v["fleet"]["worst_not_ready"]["labels"]["pod"],
            "etcd-1\u{1b}\u{202e}\u{9b}"
        );
        assert_eq!(v["fleet"], serde_json::to_value(fleet.json(0)).unwrap());
    }

    #[test]
    fn the_text_summary_skips_stretches_of_no_length() {
        let t = text(&header(), &[report()]);
        assert_eq!(t.matches("  not ready ").count(), 1, "{t}");
        assert!(
            t.contains("ready 15s, not ready 7.5s, unknown 0s; 1 flip (recorded: 0)"),
            "{t}"
        );
        assert!(
            t.contains("    fast: qget_ms < 1 is false (qget_ms = 2)"),
            "{t}"
        );
    }

    fn span(
        check: &str,
        kind: CheckKind,
        state: CheckState,
        from_ms: i64,
        to_ms: i64,
    ) -> CheckSpan {
        CheckSpan {
            check: check.to_string(),
            kind,
            state,
            held: false,
            recovering: false,
            from_ms,
            to_ms,
            explanation: format!("{check} is {}", state.as_str()),
        }
    }

    /// The text and the SVG a user sees, for two members and every kind of
    /// span: a failing check, a warn held by its hold-down then failing, an
    /// unknown check then one held by its recovery, a difference from the
    /// recorded verdict, a member agreeing with it, missing series.
    #[test]
    fn snapshot_of_the_text_and_the_svg_with_every_kind_of_span() {
        let mut h = header();
        h.check_names.push(("slow".to_string(), CheckKind::Warn));
        h.check_names.push(("lag".to_string(), CheckKind::Check));
        h.missing_signals = vec!["rev_lag".to_string()];
        let mut m = report();
        m.missing_signals = vec!["rev_lag".to_string(), "defrag".to_string()];
        let held = CheckSpan {
            held: true,
            ..span(
                "slow",
                CheckKind::Warn,
                CheckState::Fail,
                1_000_000,
                1_007_500,
            )
        };
        let recovering = CheckSpan {
            recovering: true,
            ..span(
                "lag",
                CheckKind::Check,
                CheckState::Fail,
                1_015_000,
                1_022_500,
            )
        };
        m.checks.extend([
            held,
            span(
                "slow",
                CheckKind::Warn,
                CheckState::Fail,
                1_007_500,
                1_015_000,
            ),
            span(
                "lag",
                CheckKind::Check,
                CheckState::Unknown,
                1_000_000,
                1_007_500,
            ),
            recovering,
        ]);
        let mut agrees = report();
        agrees.labels = BTreeMap::from([("pod".to_string(), "etcd-1".to_string())]);
        agrees.differs_from_recorded.clear();
        agrees.checks.clear();
        agrees.intervals[0].ready = None;
        let members = [m, agrees];
        insta::assert_snapshot!("replay_text", text(&h, &members));
        insta::assert_snapshot!("replay_svg", svg(&h, &members));
    }

    #[test]
    fn svg_escapes_labels() {
        let mut r = report();
        r.labels.insert("x".to_string(), "<&\">".to_string());
        let s = svg(&header(), &[r]);
        assert!(s.contains("x=&quot;&lt;&amp;\\&quot;&gt;&quot;"), "{s}");
        assert!(!s.contains("<&"));
    }
}
