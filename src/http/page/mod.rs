//! The status page at `/`: a pure function of what the engine published
//! (the verdict, the [`HistorySnapshot`], the readings of the latest
//! evaluation, the policy status) and the catalogue, so the exact HTML is
//! snapshot-tested without a server and a request never locks the signal
//! store or waits on etcd.
//!
//! The page is server-rendered HTML readable without JavaScript: a verdict
//! banner, the checks, a 15-minute timeline (inline SVG, one lane for
//! readiness and one per check, every span labelled in text and patterned,
//! so colour is never the only signal; the spans are [`timeline`]'s), the
//! signals, the policy in force and links to the machine endpoints. The
//! part that changes (`<div id=live>`) is also served alone at
//! `/?part=live`; the script (`assets/page.js`) swaps it in every
//! [`REFRESH_SECS`] seconds, read from the page, and without JavaScript a
//! `<noscript>` meta refresh reloads the page at the same pace. The
//! stylesheet, the script and the fill patterns are real files under
//! `assets/`, inlined so that the page is one response.
//!
//! Size: every lane has at most [`timeline::MAX_SPANS_PER_LANE`] spans,
//! explanations and errors are cut at [`MAX_TEXT`] bytes, so the page is
//! bounded by [`page_budget`]; `page::tests` hold it.

pub mod timeline;

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use std::sync::LazyLock;

use crate::engine::history::{CAPACITY, HistorySnapshot, Lane, LaneState, PublishedReadings};
use crate::engine::{CandidatePublished, CandidateStatus, PolicyStatus};
use etcd_readiness_policy::policy::eval::describe_unknown;
use etcd_readiness_policy::signals::{Catalogue, Reading, SignalType, Unit, Unknown, Value};
use etcd_readiness_policy::text::{cut, fmt_duration, fmt_value, html_escape};
use etcd_readiness_policy::verdict::{CheckKind, CheckReport, CheckState, Verdict};
use timeline::{WINDOW, lane_spans};

/// Longest explanation, error or reason shown, in bytes.
pub const MAX_TEXT: usize = 1_000;
/// Seconds between refreshes: the `<noscript>` meta refresh, the text in the
/// header, and the script's timer, which reads it from the page
/// (`data-refresh-secs`).
pub const REFRESH_SECS: u32 = 5;

/// [`page_budget`] for the default policy and the built-in catalogue.
pub const DEFAULT_BUDGET: usize = 160 * 1024;

/// The size budget of the page in bytes: a fixed part (head, CSS, script,
/// banner, links, axis), a part per lane (readiness + checks, each with its
/// worst-case timeline and table row), a part per configured signal, and
/// the policy text once escaped. `page::tests` render the worst cases and
/// hold the page to it; for the default policy and the built-in catalogue
/// that is [`DEFAULT_BUDGET`] (160 KiB) at most, whatever the history and
/// the error texts (docs/status-page.md).
pub fn page_budget(checks: usize, signals: usize, policy_text_escaped: usize) -> usize {
    const FIXED: usize = 8 * 1024;
    const PER_LANE: usize = 11 * 1024;
    const PER_SIGNAL: usize = 1_600;
    FIXED + PER_LANE * (checks + 1) + PER_SIGNAL * signals + policy_text_escaped
}

/// Everything one rendering reads, as the engine published it.
pub struct PageInput<'a> {
    pub verdict: &'a Verdict,
    /// How long ago the verdict was published.
    pub verdict_age: Duration,
    /// The verdict is older than the engine should let it get.
    pub stale: Option<Duration>,
    pub history: &'a HistorySnapshot,
    pub readings: &'a PublishedReadings,
    /// How long ago the readings were taken (added to every signal's age).
    pub readings_age: Duration,
    pub catalogue: &'a Catalogue,
    pub policy: &'a PolicyStatus,
    pub telemetry_path: &'a str,
    /// The wall clock at the request: the right edge of the timeline.
    pub now: SystemTime,
    /// With `--policy.candidate`: its lanes go under the live ones and a
    /// section says how far it disagreed.
    pub candidate: Option<CandidateInput<'a>>,
}

/// What the engine published about the candidate policy.
pub struct CandidateInput<'a> {
    pub status: &'a CandidateStatus,
    /// Its verdict of the latest evaluation (none until a candidate compiled).
    pub published: Option<&'a CandidatePublished>,
    pub history: &'a HistorySnapshot,
}

/// A wall-clock time as `2026-11-30 08:54:01Z`.
fn wall(t: SystemTime) -> String {
    match jiff::Timestamp::try_from(t) {
        Ok(ts) => ts.strftime("%Y-%m-%d %H:%M:%SZ").to_string(),
        Err(_) => "?".to_string(),
    }
}

/// A wall-clock time as `08:54:01`.
fn clock(t: SystemTime) -> String {
    match jiff::Timestamp::try_from(t) {
        Ok(ts) => ts.strftime("%H:%M:%S").to_string(),
        Err(_) => "?".to_string(),
    }
}

fn ago(now: SystemTime, t: SystemTime) -> String {
    match now.duration_since(t) {
        Ok(d) => format!("{} ago", fmt_duration(d.as_secs_f64())),
        Err(_) => "just now".to_string(),
    }
}

/// `<time>` with the full time in `datetime` and `title`, the clock time
/// alone when it is the same day as `now`, and how long ago.
fn time_el(now: SystemTime, t: SystemTime) -> String {
    let full = wall(t);
    let short = if full.get(..10) == wall(now).get(..10) {
        format!("{}Z", clock(t))
    } else {
        full.clone()
    };
    format!(
        "<time datetime=\"{}\" title=\"{full}\">{short}</time> <small>({})</small>",
        full.replace(' ', "T"),
        ago(now, t)
    )
}

/// A relative link from the page (kept relative so the page works behind
/// `kubectl proxy` or any path prefix).
fn rel(path: &str) -> String {
    format!("./{}", path.trim_start_matches('/'))
}

/// An asset as the page inlines it: its header comment (through the first
/// line that ends one, `*/` or `-->`) dropped, its lines joined.
fn inlined(asset: &str) -> String {
    let mut lines = asset.lines();
    for line in lines.by_ref() {
        if line.ends_with("*/") || line.ends_with("-->") {
            break;
        }
    }
    lines.collect()
}

static CSS: LazyLock<String> = LazyLock::new(|| inlined(include_str!("assets/page.css")));
/// Fill patterns: each state has its own texture as well as its colour.
static PATTERNS: LazyLock<String> = LazyLock::new(|| inlined(include_str!("assets/patterns.svg")));
/// Swaps `#live` for `?part=live` every [`REFRESH_SECS`] (read from
/// `#upd`); a changed policy (sha256) reloads the whole page.
static SCRIPT: LazyLock<String> = LazyLock::new(|| inlined(include_str!("assets/page.js")));

/// The whole page.
pub fn render_page(i: &PageInput) -> String {
    let mut out = String::with_capacity(32 * 1024);
    let verdict_word = Banner::of(i).word();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<title>{} · etcd-readiness-exporter</title>\
<noscript><meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\"></noscript>\
<style>{}</style></head>\n<body>\n{}\n\
<header><h1>etcd-readiness-exporter</h1><nav aria-label=\"machine endpoints\">",
        verdict_word.0, *CSS, *PATTERNS,
    );
    let tp = html_escape(&rel(i.telemetry_path));
    for (href, text) in [
        ("./readyz?verbose", "/readyz?verbose"),
        ("./readyz?format=json", "/readyz?format=json"),
        ("./livez?verbose", "/livez?verbose"),
        (tp.as_str(), tp.trim_start_matches('.')),
        ("./signals", "/signals"),
        ("./policy", "/policy"),
        ("./history", "/history"),
    ] {
        let _ = write!(out, "<a href=\"{href}\">{text}</a> ");
    }
    let _ = writeln!(
        out,
        "</nav> <small data-refresh-secs=\"{REFRESH_SECS}\" id=\"upd\">refreshes every {REFRESH_SECS}s</small></header>"
    );
    out.push_str(&render_live(i));
    let _ = write!(
        out,
        "\n<h2>Policy text</h2>\n<pre id=\"policy-text\">{}</pre>\n\
<script>{}</script>\n</body></html>\n",
        html_escape(i.policy.policy.source()),
        *SCRIPT,
    );
    out
}

/// What the banner says (a stale verdict is not ready, whatever it said).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Banner {
    Ready,
    Starting,
    NotReady,
}

impl Banner {
    fn of(i: &PageInput) -> Banner {
        let v = i.verdict;
        if i.stale.is_some() {
            Banner::NotReady
        } else if v.ready {
            Banner::Ready
        } else if v.reason.is_some() && v.checks.is_empty() {
            Banner::Starting
        } else {
            Banner::NotReady
        }
    }

    /// (`READY`, class).
    fn word(self) -> (&'static str, &'static str) {
        match self {
            Banner::Ready => ("READY", "ready"),
            Banner::Starting => ("STARTING", "starting"),
            Banner::NotReady => ("NOT READY", "notready"),
        }
    }

    /// The readiness lane's state that says the same.
    fn lane_state(self) -> LaneState {
        match self {
            Banner::Ready => LaneState::Ready,
            Banner::Starting => LaneState::Starting,
            Banner::NotReady => LaneState::NotReady,
        }
    }
}

/// The part of the page that changes: banner, checks, timeline, signals,
/// policy metadata. Served alone at `/?part=live`.
pub fn render_live(i: &PageInput) -> String {
    let mut out = String::with_capacity(24 * 1024);
    let _ = writeln!(
        out,
        "<div id=\"live\" data-sha=\"{}\">",
        html_escape(i.policy.policy.sha256())
    );
    banner(&mut out, i);
    checks_table(&mut out, i);
    timeline(&mut out, i);
    candidate_section(&mut out, i);
    signals_table(&mut out, i);
    policy_meta(&mut out, i);
    out.push_str("</div>");
    out
}

fn banner(out: &mut String, i: &PageInput) {
    let shown = Banner::of(i);
    let (word, class) = shown.word();
    let v = i.verdict;
    // Since when, from the history, when it agrees with the verdict shown.
    let shown = shown.lane_state();
    let since = i
        .history
        .current
        .iter()
        .find(|(l, s, _)| *l == Lane::Readiness && *s == shown)
        .map(|(_, _, at)| *at);
    let _ = write!(
        out,
        "<section class=\"banner b-{class}\" role=\"status\" aria-live=\"polite\" id=\"verdict\" data-verdict=\"{class}\">\
This member is <b>{word}</b>"
    );
    if let Some(s) = since {
        let _ = write!(out, " since {}", time_el(i.now, s));
    }
    out.push_str("<br>");
    if let Some(age) = i.stale {
        let _ = write!(
            out,
            "<span class=\"err\">verdict is stale: the last evaluation was {} ago (evaluator wedged)</span>",
            fmt_duration(age.as_secs_f64())
        );
    } else if let Some(r) = &v.reason {
        let _ = write!(out, "{}", html_escape(&cut(r, MAX_TEXT)));
    } else {
        let failing: Vec<&str> = v
            .checks
            .iter()
            .filter(|c| c.kind == CheckKind::Check && c.state != CheckState::Pass)
            .map(|c| c.name.as_str())
            .collect();
        let warns = v
            .checks
            .iter()
            .filter(|c| c.kind == CheckKind::Warn && c.state != CheckState::Pass)
            .count();
        let checks = v
            .checks
            .iter()
            .filter(|c| c.kind == CheckKind::Check)
            .count();
        if failing.is_empty() {
            let _ = write!(out, "all {checks} checks pass");
        } else {
            let _ = write!(
                out,
                "{} of {checks} checks not passing: {}",
                failing.len(),
                html_escape(&cut(&failing.join(", "), MAX_TEXT))
            );
        }
        if warns > 0 {
            let _ = write!(
                out,
                "; {warns} warning{} raised",
                if warns == 1 { "" } else { "s" }
            );
        }
    }
    let _ = writeln!(
        out,
        " <small>· evaluated {} ago</small></section>",
        fmt_duration(i.verdict_age.as_secs_f64())
    );
}

fn state_badge(s: LaneState) -> String {
    let class = match s {
        LaneState::NotReady => "notready",
        other => other.as_str(),
    };
    format!("<span class=\"st st-{class}\">{}</span>", s.as_str())
}

fn checks_table(out: &mut String, i: &PageInput) {
    let v = i.verdict;
    out.push_str("<h2 id=\"checks\">Checks</h2>\n");
    if v.checks.is_empty() {
        out.push_str("<p>No check has been evaluated yet.</p>\n");
        return;
    }
    out.push_str(
        "<div class=\"scroll\"><table id=\"checks-table\" class=\"cards\"><thead><tr><th scope=\"col\">Check</th><th scope=\"col\">Kind</th>\
<th scope=\"col\">State</th><th scope=\"col\">Since</th><th scope=\"col\">Hold-down left</th><th scope=\"col\">Explanation</th></tr></thead><tbody>\n",
    );
    let policy = &i.policy.policy;
    for c in &v.checks {
        let kind = c.kind.as_str();
        let state = LaneState::of_report(c);
        let def = policy.check(&c.name);
        let hold_cell = hold_cell(c, def.and_then(|d| d.hold), def.and_then(|d| d.recover));
        let explanation = if c.explanation.is_empty() {
            "<small>passing</small>".to_string()
        } else {
            html_escape(&cut(&c.explanation, MAX_TEXT))
        };
        let _ = writeln!(
            out,
            "<tr data-check=\"{}\" data-state=\"{}\"><th scope=\"row\">{}<br><code>{}</code></th><td data-l=\"kind\">{kind}</td><td>{}</td>\
<td data-l=\"since\">{}</td><td data-l=\"hold-down left\">{hold_cell}</td><td class=\"x\">{explanation}</td></tr>",
            html_escape(&c.name),
            state.as_str(),
            html_escape(&c.name),
            html_escape(&cut(&c.expr, MAX_TEXT)),
            state_badge(state),
            time_el(i.now, c.since),
        );
    }
    out.push_str("</tbody></table></div>\n");
}

/// The "hold-down left" cell: how long the hold in force still holds the
/// check — passing (`for`, while held) or failing (`recover`, while
/// recovering) — or, with neither in force, the clauses the check has.
fn hold_cell(c: &CheckReport, hold: Option<Duration>, recover: Option<Duration>) -> String {
    let d = |d: Duration| fmt_duration(d.as_secs_f64());
    if let Some(left) = c.hold_left {
        return match hold {
            Some(h) => format!("{} of {}", d(left), d(h)),
            None => d(left),
        };
    }
    if let Some(left) = c.recover_left {
        return match recover {
            Some(r) => format!("{} of {} <small>(recover)</small>", d(left), d(r)),
            None => format!("{} <small>(recover)</small>", d(left)),
        };
    }
    match (hold, recover) {
        (Some(h), Some(r)) => format!("— <small>(for {}, recover {})</small>", d(h), d(r)),
        (Some(h), None) => format!("— <small>(for {})</small>", d(h)),
        (None, Some(r)) => format!("— <small>(recover {})</small>", d(r)),
        (None, None) => "—".to_string(),
    }
}

fn pct(d: Duration) -> f64 {
    d.as_secs_f64() / WINDOW.as_secs_f64() * 100.0
}

fn timeline(out: &mut String, i: &PageInput) {
    let now = i.now;
    let start = now.checked_sub(WINDOW).unwrap_or(SystemTime::UNIX_EPOCH);
    let h = i.history;
    out.push_str("<h2 id=\"timeline\">Last 15 minutes</h2>\n");
    if let Some(du) = h.dropped_until.filter(|du| *du > start) {
        let _ = writeln!(
            out,
            "<p class=\"note\" id=\"truncated\">History truncated: {} older transitions were dropped to keep \
the buffer at {CAPACITY}; lanes before {} show “truncated”.</p>",
            h.dropped,
            clock(du)
        );
    }
    out.push_str("<div class=\"scroll\"><table class=\"tl\" id=\"timeline-table\"><tbody>\n");
    lane_rows(out, h, i.verdict, "", start, now);
    if let Some(c) = &i.candidate
        && let Some(p) = c.published
    {
        out.push_str(
            "<tr class=\"tl-cand\"><th scope=\"rowgroup\" colspan=\"2\">candidate policy \
<small>(decides nothing; what it would have answered, on the same readings)</small></th></tr>\n",
        );
        lane_rows(out, c.history, &p.verdict, "candidate:", start, now);
    }
    let _ = write!(
        out,
        "<tr><th></th><td><div class=\"axis\"><span>{} (−15m)</span><span class=\"hide-n\">{} (−10m)</span>\
<span class=\"hide-n\">{} (−5m)</span><span>{} (now)</span></div></td></tr>\n</tbody></table></div>\n",
        clock(start),
        clock(start + WINDOW / 3),
        clock(start + 2 * WINDOW / 3),
        clock(now)
    );
}

/// One row per lane (readiness, then each check of `verdict`) of history
/// `h`; `prefix` goes before each row's `data-lane` (`candidate:` for the
/// candidate policy's lanes).
fn lane_rows(
    out: &mut String,
    h: &HistorySnapshot,
    verdict: &Verdict,
    prefix: &str,
    start: SystemTime,
    now: SystemTime,
) {
    let mut lanes: Vec<(Lane, &str)> = vec![(Lane::Readiness, "readiness")];
    for c in &verdict.checks {
        let lane = h
            .current
            .iter()
            .find(|(l, _, _)| matches!(l, Lane::Check(n) if **n == *c.name))
            .map_or_else(
                || Lane::Check(c.name.as_str().into()),
                |(l, _, _)| l.clone(),
            );
        lanes.push((lane, c.kind.as_str()));
    }
    for (lane, kind) in &lanes {
        let spans = lane_spans(h, lane, start, now);
        let name = html_escape(lane.name());
        let label = match (*lane == Lane::Readiness, prefix.is_empty()) {
            (true, true) => "<b>readiness</b>".to_string(),
            (true, false) => "<b>readiness</b> <small>candidate</small>".to_string(),
            (false, true) => format!("{name} <small>{kind}</small>"),
            (false, false) => format!("{name} <small>{kind}, candidate</small>"),
        };
        let _ = write!(
            out,
            "<tr data-lane=\"{}\"><th scope=\"row\">{label}</th><td><svg class=\"lane\" role=\"img\" aria-label=\"{}{name}: {} spans over the last 15 minutes\">",
            if *lane == Lane::Readiness {
                format!("{prefix}readiness")
            } else {
                format!("{prefix}check:{name}")
            },
            if prefix.is_empty() { "" } else { "candidate " },
            spans.len()
        );
        for s in &spans {
            let from = s.from.duration_since(start).unwrap_or_default();
            let x = pct(from);
            let w = pct(s.len()).max(0.25);
            let text = s.kind.label();
            let _ = write!(
                out,
                "<svg x=\"{x:.2}%\" width=\"{w:.2}%\" class=\"f-{}\"><title>{text}: {}–{} ({}){}{}</title><rect/><text x=\"3\" y=\"11\">{text}</text></svg>",
                s.kind.class(),
                clock(s.from),
                clock(s.to),
                fmt_duration(s.len().as_secs_f64()),
                if s.detail.is_empty() { "" } else { ": " },
                s.detail,
            );
        }
        out.push_str("</svg></td></tr>\n");
    }
}

/// With `--policy.candidate`: what it would answer now and how long it
/// disagreed with the policy in force so far, by direction.
fn candidate_section(out: &mut String, i: &PageInput) {
    let Some(c) = &i.candidate else {
        return;
    };
    out.push_str("<h2 id=\"candidate\">Candidate policy</h2>\n<dl id=\"candidate-meta\">");
    match (&c.status.policy, c.published) {
        (Some(policy), Some(p)) => {
            let word = |ready: bool| if ready { "ready" } else { "not ready" };
            let _ = write!(
                out,
                "<dt>would answer</dt><dd id=\"candidate-verdict\" data-verdict=\"{}\"><b>{}</b> \
<small>(the member is {}; the candidate decides nothing)</small></dd>",
                if p.verdict.ready { "ready" } else { "notready" },
                word(p.verdict.ready),
                word(p.live_ready),
            );
            let d = p.disagreement;
            let _ = write!(
                out,
                "<dt>disagreement so far</dt><dd id=\"candidate-disagreement\">would fail while ready \
<b data-direction=\"would_fail_while_ready\">{}</b>, would pass while unready \
<b data-direction=\"would_pass_while_unready\">{}</b>",
                fmt_duration(d.would_fail_while_ready.as_secs_f64()),
                fmt_duration(d.would_pass_while_unready.as_secs_f64()),
            );
            if let Some((dir, since)) = p.disagreeing_since {
                let _ = write!(
                    out,
                    "; <span class=\"err\">{} since {}</span>",
                    dir.as_str(),
                    time_el(i.now, since)
                );
            }
            let _ = write!(
                out,
                "</dd><dt>sha256</dt><dd><code>{}</code> ({})</dd>",
                html_escape(policy.sha256()),
                html_escape(&cut(&policy.summary(), MAX_TEXT))
            );
            if let Some(at) = c.status.loaded_at {
                let _ = write!(
                    out,
                    "<dt>in force since</dt><dd>{}</dd>",
                    time_el(i.now, at)
                );
            }
        }
        _ => {
            out.push_str("<dt>in force</dt><dd>none yet: the candidate file has not compiled</dd>")
        }
    }
    if let Some(e) = &c.status.last_reload_error {
        let _ = write!(
            out,
            "<dt>last reload</dt><dd class=\"err\">failed: {}</dd>",
            html_escape(&cut(e, MAX_TEXT))
        );
    }
    out.push_str(
        "<dt>details</dt><dd><a href=\"./readyz?policy=candidate&amp;verbose\">/readyz?policy=candidate&amp;verbose</a> \
<small>(always 409: not a readiness answer)</small></dd></dl>\n",
    );
}

/// The value of a signal with its unit, as the page shows it.
fn value_text(ty: SignalType, unit: Unit, r: &Reading) -> String {
    match r.get() {
        None => "—".to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Num(n)) if ty == SignalType::Duration => fmt_value(n, Unit::Seconds),
        Some(Value::Num(n)) => fmt_value(n, unit),
    }
}

fn signals_table(out: &mut String, i: &PageInput) {
    out.push_str(
        "<h2 id=\"signals\">Signals</h2>\n<div class=\"scroll\"><table id=\"signals-table\" class=\"cards\"><thead><tr><th scope=\"col\">Signal</th>\
<th scope=\"col\">Value</th><th scope=\"col\">Known</th><th scope=\"col\">Age</th><th scope=\"col\">Source</th><th scope=\"col\">Last error</th></tr></thead><tbody>\n",
    );
    let cat = i.catalogue;
    for (id, def) in cat.iter() {
        if !cat.is_enabled(id) {
            continue;
        }
        let r = i
            .readings
            .readings
            .get(id.index())
            .unwrap_or(&Reading::NEVER);
        let known = match &r.value {
            Ok(_) => "<span class=\"st st-pass\">known</span>".to_string(),
            // The error itself is in the last column.
            Err(Unknown::Failed { ago, .. }) => format!(
                "<span class=\"st st-unknown\">unknown</span> <small>last sample failed {} ago</small>",
                fmt_duration(ago.as_secs_f64())
            ),
            Err(Unknown::NeverSampled | Unknown::Stale { .. } | Unknown::Outdated { .. }) => {
                format!(
                    "<span class=\"st st-unknown\">unknown</span> <small>{}</small>",
                    html_escape(&cut(&describe_unknown(r), MAX_TEXT))
                )
            }
        };
        let age = r.last_good_age.map_or("—".to_string(), |a| {
            fmt_duration((a + i.readings_age).as_secs_f64())
        });
        let error = match &r.value {
            Err(Unknown::Failed { error, .. }) => {
                format!(
                    "<span class=\"err\">{}</span>",
                    html_escape(&cut(error, MAX_TEXT))
                )
            }
            Ok(_)
            | Err(Unknown::NeverSampled | Unknown::Stale { .. } | Unknown::Outdated { .. }) => {
                "—".to_string()
            }
        };
        let _ = writeln!(
            out,
            "<tr data-signal=\"{}\"><th scope=\"row\" title=\"{}\"><code>{}</code></th><td data-l=\"value\">{}</td><td>{known}</td><td data-l=\"age\">{age}</td><td data-l=\"source\">{}</td><td class=\"x\" data-l=\"last error\">{error}</td></tr>",
            html_escape(&def.name),
            html_escape(&cut(&def.help, MAX_TEXT)),
            html_escape(&def.name),
            html_escape(&value_text(def.ty, def.unit, r)),
            html_escape(&def.source.label()),
        );
    }
    out.push_str("</tbody></table></div>\n");
}

fn policy_meta(out: &mut String, i: &PageInput) {
    let p = &i.policy;
    let _ = write!(
        out,
        "<h2 id=\"policy\">Policy in force</h2>\n<dl><dt>file</dt><dd><code>{}</code></dd><dt>sha256</dt><dd><code>{}</code></dd>\
<dt>loaded at</dt><dd>{}</dd><dt>summary</dt><dd>{}</dd><dt>last reload error</dt><dd>{}</dd></dl>\n",
        html_escape(p.policy.path()),
        html_escape(p.policy.sha256()),
        time_el(i.now, p.loaded_at),
        html_escape(&p.policy.summary()),
        match &p.last_reload_error {
            None => "none".to_string(),
            Some(e) => format!(
                "<pre class=\"err\" id=\"reload-error\">{}</pre>",
                html_escape(&cut(e, 4 * MAX_TEXT))
            ),
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_POLICY;
    use crate::engine::history::History;
    use etcd_readiness_policy::policy::Policy;
    use etcd_readiness_policy::verdict::{CheckReport, UsedSignal};
    use std::sync::Arc;
    use std::time::Instant;
    use timeline::{MAX_SPANS_PER_LANE, MIN_SPAN, SpanKind};

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600 + s)
    }

    fn report(name: &str, kind: CheckKind, state: CheckState, why: &str) -> CheckReport {
        CheckReport {
            in_state_for: Duration::from_secs(60),
            since: at(840),
            explanation: why.into(),
            signals: vec![UsedSignal {
                name: "leader".into(),
                value: None,
            }],
            ..CheckReport::new(name, kind, state, &format!("{name}_expr"))
        }
    }

    /// The default policy's checks, with `failing` not passing.
    fn verdict_of(policy: &Policy, failing: &[&str], why: &str) -> Verdict {
        let checks: Vec<CheckReport> = policy
            .checks()
            .iter()
            .map(|c| {
                let st = if failing.contains(&c.name.as_str()) {
                    CheckState::Fail
                } else {
                    CheckState::Pass
                };
                let mut r = report(
                    &c.name,
                    c.kind,
                    st,
                    if st == CheckState::Pass { "" } else { why },
                );
                r.expr = c.expr_text.clone();
                r
            })
            .collect();
        Verdict {
            ready: Verdict::ready_from(&checks),
            reason: None,
            evaluated_at: at(900),
            checks,
        }
    }

    struct Fixture {
        catalogue: Catalogue,
        policy: PolicyStatus,
        history: History,
        verdict: Verdict,
    }

    fn fixture(policy_text: &str) -> Fixture {
        let catalogue = Catalogue::builtin();
        let policy = Arc::new(Policy::compile("/etc/ere/policy", policy_text, &catalogue).unwrap());
        let history = History::new(Instant::now(), at(0));
        let verdict = verdict_of(&policy, &[], "");
        Fixture {
            catalogue,
            policy: PolicyStatus {
                policy,
                loaded_at: at(10),
                last_reload_error: None,
            },
            history,
            verdict,
        }
    }

    /// The fixture's page input at 900 s, evaluated 120 ms before.
    fn input<'a>(
        f: &'a Fixture,
        h: &'a HistorySnapshot,
        r: &'a PublishedReadings,
    ) -> PageInput<'a> {
        PageInput {
            verdict: &f.verdict,
            verdict_age: Duration::from_millis(120),
            stale: None,
            history: h,
            readings: r,
            readings_age: Duration::from_millis(120),
            catalogue: &f.catalogue,
            policy: &f.policy,
            telemetry_path: "/metrics",
            now: at(900),
            candidate: None,
        }
    }

    fn render(f: &Fixture, readings: &[Reading], live: bool) -> String {
        let h = f.history.snapshot();
        let r = PublishedReadings {
            at: Instant::now(),
            wall: at(900),
            readings: readings.to_vec(),
        };
        let input = input(f, &h, &r);
        if live {
            render_live(&input)
        } else {
            render_page(&input)
        }
    }

    /// A fixed run: starting, ready at 5 s, `linearizable_read` fails from
    /// 600 s to 700 s (unknown for the first 20 s), readiness follows.
    fn scripted(f: &Fixture) -> Vec<Reading> {
        let p = &f.policy.policy;
        let now = Instant::now();
        f.history
            .observe(&Verdict::starting(at(0)), &[], now, at(0));
        f.history.observe(&verdict_of(p, &[], ""), &[], now, at(5));
        let mut v = verdict_of(p, &["linearizable_read"], "qget_ms is unknown");
        v.checks[1].state = CheckState::Unknown;
        f.history.observe(&v, &[], now, at(600));
        f.history.observe(
            &verdict_of(
                p,
                &["linearizable_read"],
                "qget_ms < 1000 is false (qget_ms = 1432)",
            ),
            &[],
            now,
            at(620),
        );
        f.history
            .observe(&verdict_of(p, &[], ""), &[], now, at(700));
        f.history.observe(
            &verdict_of(p, &["serializable_read"], "x"),
            &[],
            now,
            at(840),
        );
        let mut readings = vec![Reading::NEVER; f.catalogue.len()];
        readings[f.catalogue.id("leader").index()] = Reading::known(Value::Bool(true));
        readings[f.catalogue.id("qget_ms").index()] = Reading::known(Value::Num(12.5));
        readings[f.catalogue.id("sget_ms").index()] = Reading::failed(
            "Range: deadline exceeded <after 250ms>",
            Duration::from_secs(1),
        );
        readings
    }

    #[test]
    fn a_recovering_check_shows_its_state_and_how_long_the_hold_still_holds() {
        let mut f = fixture(
            "check leader: leader\ncheck lag: rev_lag < 5000 for 10s recover 30s\ncheck read: qget_ms < 1000 recover 5s",
        );
        let mut v = verdict_of(&f.policy.policy, &["lag"], "");
        let lag = &mut v.checks[1];
        lag.recovering = true;
        lag.true_for = Some(Duration::from_secs(12));
        lag.recover_left = Some(Duration::from_secs(18));
        lag.explanation = "recovering: true for 12s of 30s".into();
        assert_eq!(LaneState::of_report(lag), LaneState::Recovering);
        f.verdict = v;
        f.history.observe(&f.verdict, &[], Instant::now(), at(890));
        let readings = vec![Reading::NEVER; f.catalogue.len()];
        let page = render(&f, &readings, false);
        let row = page
            .lines()
            .find(|l| l.starts_with("<tr data-check=\"lag\""))
            .expect("a row for lag");
        assert!(row.contains("data-state=\"recovering\""), "{row}");
        assert!(
            row.contains("<td data-l=\"hold-down left\">18s of 30s <small>(recover)</small></td>"),
            "{row}"
        );
        assert!(row.contains("recovering: true for 12s of 30s"), "{row}");
        let read = page
            .lines()
            .find(|l| l.starts_with("<tr data-check=\"read\""))
            .expect("a row for read");
        assert!(read.contains(">— <small>(recover 5s)</small><"), "{read}");
        // The timeline draws the lane's recovering span with its own texture.
        assert!(
            page.contains("f-recovering"),
            "no recovering span in the timeline"
        );
    }

    #[test]
    fn snapshot_of_a_fixed_verdict_and_history() {
        let mut f = fixture(DEFAULT_POLICY);
        let readings = scripted(&f);
        f.verdict = verdict_of(
            &f.policy.policy,
            &["serializable_read"],
            "sget_ms < 1000 is unknown (sget_ms: last sample failed 1s ago: Range: deadline exceeded <after 250ms>)",
        );
        f.policy.last_reload_error =
            Some("policy:3:7: unknown signal `ledaer` <did you mean `leader`?>".into());
        let page = render(&f, &readings, false);
        eprintln!("fixed page: {} bytes", page.len());
        insta::assert_snapshot!("status_page_full", page);
        insta::assert_snapshot!("status_page_live", render(&f, &readings, true));
    }

    /// With a candidate: its lanes under the live ones and the
    /// disagreement so far; the live part of the page is unchanged.
    #[test]
    fn snapshot_of_the_candidate_lanes_and_disagreement() {
        use crate::engine::candidate::{Direction, Disagreement};
        let f = fixture("check leader: leader\n");
        let now = Instant::now();
        f.history.observe(&f.verdict, &[], now, at(100));
        let cand_policy = Arc::new(
            Policy::compile(
                "/etc/ere/candidate",
                "check leader: leader\ncheck not_leader: !leader\n",
                &f.catalogue,
            )
            .unwrap(),
        );
        let cand_history = History::new(now, at(0));
        let mut failing = verdict_of(
            &cand_policy,
            &["not_leader"],
            "!leader is false (leader = true)",
        );
        cand_history.observe(&verdict_of(&cand_policy, &[], ""), &[], now, at(100));
        failing.evaluated_at = at(900);
        cand_history.observe(&failing, &[], now, at(600));
        let status = CandidateStatus {
            policy: Some(cand_policy),
            loaded_at: Some(at(100)),
            last_reload_error: Some("/etc/ere/candidate:2:7: unknown signal `ledaer`".into()),
        };
        let published = CandidatePublished {
            verdict: failing,
            at: now,
            live_ready: true,
            disagreement: Disagreement {
                would_fail_while_ready: Duration::from_secs(300),
                would_pass_while_unready: Duration::from_millis(1500),
            },
            disagreeing_since: Some((Direction::WouldFailWhileReady, at(600))),
        };
        let h = f.history.snapshot();
        let ch = cand_history.snapshot();
        let r = PublishedReadings {
            at: now,
            wall: at(900),
            readings: Vec::new(),
        };
        let without = input(&f, &h, &r);
        let plain = render_live(&without);
        let with = PageInput {
            candidate: Some(CandidateInput {
                status: &status,
                published: Some(&published),
                history: &ch,
            }),
            ..without
        };
        let page = render_live(&with);
        let timeline = &page[page.find("id=\"timeline\"").unwrap()
            ..page.find("id=\"signals").unwrap_or(page.len())];
        insta::assert_snapshot!("status_page_candidate", timeline);
        // Everything before the timeline's candidate rows is as without one.
        let cut = page.find("<tr class=\"tl-cand\"").unwrap();
        assert_eq!(&page[..cut], &plain[..cut]);
    }

    #[test]
    fn policy_text_reload_errors_and_explanations_are_escaped() {
        let text = format!("{DEFAULT_POLICY}\n# </pre><script>alert('x')</script> & \"q\"\n");
        let mut f = fixture(&text);
        f.verdict = verdict_of(
            &f.policy.policy,
            &["leader"],
            "<img src=x onerror=alert(1)>",
        );
        f.policy.last_reload_error = Some("</pre><script>bad()</script>".into());
        let page = render(&f, &[], false);
        assert!(!page.contains("<script>alert"), "policy text not escaped");
        assert!(!page.contains("<script>bad"), "reload error not escaped");
        assert!(!page.contains("<img"), "explanation not escaped");
        assert!(page.contains(
            "&lt;/pre&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        ));
        assert_eq!(
            page.matches("<script>").count(),
            1,
            "only the page's own script"
        );
    }

    /// One constant paces the page: the meta refresh, the header's text and
    /// the script's timer, which reads it from the page rather than holding
    /// a number of its own.
    #[test]
    fn one_refresh_constant_drives_the_meta_refresh_the_text_and_the_script() {
        let page = render(&fixture(DEFAULT_POLICY), &[], false);
        assert!(page.contains(&format!(
            "<meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">"
        )));
        assert!(page.contains(&format!(
            "<small data-refresh-secs=\"{REFRESH_SECS}\" id=\"upd\">refreshes every {REFRESH_SECS}s</small>"
        )));
        assert!(SCRIPT.contains("getAttribute('data-refresh-secs')"));
        assert!(
            !SCRIPT
                .chars()
                .any(|c| c.is_ascii_digit() && c != '0' && c != '1'),
            "a number in the script besides s*1000: {}",
            *SCRIPT
        );
    }

    /// The assets are inlined with their lines joined: their headers are
    /// dropped and nothing in them depends on a line break.
    #[test]
    fn the_inlined_assets_have_no_header_and_no_line_comment() {
        for asset in [&*CSS, &*PATTERNS, &*SCRIPT] {
            assert!(!asset.contains('\n'));
            assert!(!asset.contains("<!--") && !asset.contains("/*"), "{asset}");
        }
        assert!(
            !SCRIPT.contains("//"),
            "a // comment would swallow the rest"
        );
        assert!(CSS.starts_with("*{box-sizing:border-box}"));
        assert!(PATTERNS.starts_with("<svg ") && PATTERNS.ends_with("</svg>"));
        assert!(SCRIPT.starts_with("(function(){") && SCRIPT.ends_with("})();"));
    }

    /// Worst case for a lane: a long span (exactly MIN_SPAN) then a single
    /// short one, over and over: nothing coalesces, the most spans there can be.
    fn worst_history(f: &Fixture) {
        let p = &f.policy.policy;
        let names: Vec<&str> = p.checks().iter().map(|c| c.name.as_str()).collect();
        let now = Instant::now();
        let mut t = 0;
        let mut fail = false;
        while t < 900 {
            let failing: &[&str] = if fail { &names } else { &[] };
            let why = "x".repeat(5000);
            f.history
                .observe(&verdict_of(p, failing, &why), &[], now, at(t));
            t += if fail { 1 } else { MIN_SPAN.as_secs() };
            fail = !fail;
        }
    }

    fn lane_span_counts(page: &str) -> Vec<usize> {
        page.split("<tr data-lane=")
            .skip(1)
            .map(|lane| {
                lane.split("</svg></td>")
                    .next()
                    .unwrap()
                    .matches("<svg x=")
                    .count()
            })
            .collect()
    }

    #[test]
    fn the_page_holds_its_budget_for_the_default_policy_whatever_the_history() {
        let mut f = fixture(DEFAULT_POLICY);
        worst_history(&f);
        f.verdict = verdict_of(
            &f.policy.policy,
            &f.policy
                .policy
                .checks()
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            &"y".repeat(5000),
        );
        f.policy.last_reload_error = Some("e".repeat(100_000));
        let readings: Vec<Reading> = (0..f.catalogue.len())
            .map(|_| Reading::failed(&"z".repeat(100_000), Duration::from_secs(1)))
            .collect();
        let page = render(&f, &readings, false);
        let counts = lane_span_counts(&page);
        assert_eq!(counts.len(), f.policy.policy.checks().len() + 1);
        // Every lane is at the worst case: the bound is reached, not beyond.
        assert!(
            counts
                .iter()
                .all(|n| *n > MAX_SPANS_PER_LANE * 3 / 4 && *n <= MAX_SPANS_PER_LANE),
            "{counts:?}"
        );
        let budget = page_budget(
            f.policy.policy.checks().len(),
            f.catalogue.len(),
            html_escape(f.policy.policy.source()).len(),
        );
        assert!(page.len() <= budget, "{} > {budget}", page.len());
        assert!(
            page.len() <= DEFAULT_BUDGET,
            "{} > {DEFAULT_BUDGET}",
            page.len()
        );
        eprintln!(
            "worst-case default page: {} bytes (budget {budget})",
            page.len()
        );
    }

    #[test]
    fn the_page_holds_its_budget_for_the_largest_policy() {
        let mut text = String::new();
        for i in 0..etcd_readiness_policy::policy::limits::MAX_CHECKS {
            let _ = writeln!(
                text,
                "check c_{i:03}_{}: leader && qget_ms < 1000",
                "n".repeat(40)
            );
        }
        while text.len() + 80 < etcd_readiness_policy::policy::limits::MAX_POLICY_BYTES {
            text.push_str(
                "# <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<\n",
            );
        }
        let f = fixture(&text);
        worst_history(&f);
        let page = render(&f, &[], false);
        let counts = lane_span_counts(&page);
        assert_eq!(
            counts.len(),
            etcd_readiness_policy::policy::limits::MAX_CHECKS + 1
        );
        assert!(
            counts.iter().all(|n| *n <= MAX_SPANS_PER_LANE),
            "{counts:?}"
        );
        let budget = page_budget(
            f.policy.policy.checks().len(),
            f.catalogue.len(),
            html_escape(f.policy.policy.source()).len(),
        );
        assert!(page.len() <= budget, "{} > {budget}", page.len());
        eprintln!(
            "worst-case largest page: {} bytes (budget {budget})",
            page.len()
        );
    }

    #[test]
    fn a_truncated_history_is_said_and_lanes_resume_from_their_base_state() {
        let mut f = fixture(DEFAULT_POLICY);
        f.history = History::with_capacity(4, Instant::now(), at(0));
        let p = f.policy.policy.clone();
        let now = Instant::now();
        for i in 0..10u64 {
            let failing: &[&str] = if i % 2 == 1 { &["leader"] } else { &[] };
            f.verdict = verdict_of(&p, failing, "leader is false");
            f.history.observe(&f.verdict, &[], now, at(100 + 10 * i));
        }
        let snap = f.history.snapshot();
        assert_eq!(snap.transitions.len(), 4);
        assert!(snap.dropped > 0);
        let lane = Lane::Check("leader".into());
        let spans = lane_spans(&snap, &lane, at(0), at(900));
        assert_eq!(spans[0].kind, SpanKind::Truncated);
        assert_eq!(spans[0].from, at(0));
        assert_eq!(spans[0].to, snap.dropped_until.unwrap());
        // From there on the lane is drawn from its base state, then the kept transitions.
        let last = spans.last().unwrap();
        assert_eq!(
            (last.kind, last.from, last.to),
            (SpanKind::State(LaneState::Fail), at(190), at(900))
        );
        let page = render(&f, &[], false);
        assert!(
            page.contains("id=\"truncated\""),
            "the page says the history is truncated"
        );
        assert!(page.contains(&format!("were dropped to keep the buffer at {CAPACITY}")));
        assert!(page.contains(">truncated</text>"));
    }
}
