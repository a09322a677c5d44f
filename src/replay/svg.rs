//! `replay --format svg`: the timeline, one lane per member with the
//! candidate's verdict, the recorded verdict under it, each check's
//! not-passing spans labelled by name, and a time axis. A pure function of
//! the reports; no IO.

use std::fmt::Write as _;

use super::render::{Header, dur, label_set, printable, span_text};
use super::timeline::{CheckSpan, Grid, Interval, MemberReport};
use crate::outside::checked::rfc3339;
use etcd_readiness_policy::text::{fmt_duration, html_escape};
use etcd_readiness_policy::verdict::{CheckKind, CheckState};

const READY: &str = "#2e7d32";
const NOT_READY: &str = "#c62828";
const UNKNOWN: &str = "#b0b0b0";
const WARN: &str = "#ef8f00";
const DIFF: &str = "#222222";
const HELD: &str = "#e8a09a";
const AXIS: &str = "#333333";

/// Text for SVG text and attributes: [`printable`] (XML 1.0 forbids most
/// control characters, even as references), then XML-escaped.
fn esc(s: &str) -> String {
    html_escape(&printable(s))
}

fn verdict_color(ready: Option<bool>) -> &'static str {
    match ready {
        Some(true) => READY,
        Some(false) => NOT_READY,
        None => UNKNOWN,
    }
}

fn verdict_word(ready: Option<bool>) -> &'static str {
    match ready {
        Some(true) => "ready",
        Some(false) => "not ready",
        None => "no data",
    }
}

/// Tick spacing for the time axis: the smallest that gives at most 12 ticks.
fn tick_ms(range_ms: i64) -> i64 {
    const STEPS: [i64; 16] = [
        1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200,
    ];
    STEPS
        .iter()
        .map(|s| s * 1000)
        .find(|s| range_ms / s <= 12)
        .unwrap_or(86_400_000 * (range_ms / 86_400_000 / 12 + 1))
}

/// Where a span's label goes: inside the span `a..b` when it fits, else
/// after it or before it when that does not run into the neighbours (`prev`
/// ends, `next` starts), else nowhere (the span's tooltip still has it).
/// Returns (x, text-anchor, inside).
fn label_at(
    a: f64,
    b: f64,
    prev: f64,
    next: f64,
    chars: usize,
) -> Option<(f64, &'static str, bool)> {
    let width = 6.0 * chars as f64 + 6.0;
    if b - a > width {
        Some((a + 3.0, "start", true))
    } else if b + width < next {
        Some((b + 3.0, "start", false))
    } else if a - width > prev {
        Some((a - 3.0, "end", false))
    } else {
        None
    }
}

/// The SVG's width, the timeline's left and right edges, the height of a
/// verdict lane and of a check's row.
const W: f64 = 1200.0;
const X0: f64 = 210.0;
const X1: f64 = 1180.0;
const BAR: f64 = 18.0;
const ROW: f64 = 14.0;

/// Where a time goes: the grid's range over `X0..X1`.
struct Scale {
    start_ms: i64,
    range: f64,
}

impl Scale {
    fn x(&self, ms: i64) -> f64 {
        X0 + (ms - self.start_ms) as f64 / self.range * (X1 - X0)
    }
}

/// The `--format svg` timeline: a legend, each member's rows, the time axis.
pub fn svg(h: &Header<'_>, members: &[MemberReport]) -> String {
    let g = &h.grid;
    let scale = Scale {
        start_ms: g.start_ms,
        range: (g.end_ms - g.start_ms).max(1) as f64,
    };
    let mut body = String::new();
    let mut y = 70.0;
    for m in members {
        y = member_svg(&mut body, h, m, &scale, y);
    }
    let axis_y = y - 10.0;
    let grid = time_axis(&mut body, g, &scale, axis_y);
    let height = axis_y + 50.0;
    let mut title = format!(
        "replay of {} (sha256 {})",
        h.policy_path,
        &h.policy_sha256[..h.policy_sha256.len().min(12)]
    );
    if !h.missing_signals.is_empty() {
        let _ = write!(
            title,
            " — no series in Prometheus for: {}",
            h.missing_signals.join(", ")
        );
    }
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height:.0}" viewBox="0 0 {W} {height:.0}" font-family="DejaVu Sans, Arial, sans-serif">
<style>
text {{ fill: #222; }}
.title {{ font-size: 16px; font-weight: bold; }}
.member {{ font-size: 13px; font-weight: bold; }}
.lane {{ font-size: 12px; }}
.check {{ font-size: 11px; }}
.note {{ font-size: 11px; fill: #444; }}
.tick {{ font-size: 11px; }}
.span {{ font-size: 10px; }}
.span.in {{ fill: #fff; }}
.track {{ stroke: #e4e4e4; }}
.grid {{ stroke: #ececec; }}
</style>
<rect width="100%" height="100%" fill="#fff"/>
<text x="10" y="24" class="title">{}</text>
{}
{grid}{body}</svg>
"##,
        esc(&title),
        legend()
    )
}

/// One member from `y` down: its labels and totals, the candidate's and
/// the recorded verdict, where they differ, a row per check. The `y` after it.
fn member_svg(body: &mut String, h: &Header<'_>, m: &MemberReport, s: &Scale, mut y: f64) -> f64 {
    let _ = writeln!(
        body,
        r#"<text x="10" y="{:.1}" class="member">{}</text>"#,
        y,
        esc(&label_set(&m.labels))
    );
    let _ = writeln!(
        body,
        r#"<text x="{X1}" y="{:.1}" class="note" text-anchor="end">ready {} · not ready {} · no data {} · {} flips (recorded {}) · {} differences</text>"#,
        y,
        dur(m.ready_ms),
        dur(m.not_ready_ms),
        dur(m.unknown_ms),
        m.flips,
        m.recorded_flips,
        m.differs_from_recorded.len()
    );
    y += 8.0;
    for (name, list) in [("candidate", &m.intervals), ("recorded", &m.recorded)] {
        verdict_lane(body, name, list, s, y);
        y += BAR + 3.0;
    }
    differs_row(body, &m.differs_from_recorded, s, y);
    y += ROW + 3.0;
    y += 4.0;
    for (name, kind) in &h.check_names {
        let spans: Vec<&CheckSpan> = m.checks.iter().filter(|c| &c.check == name).collect();
        check_row(body, name, *kind, &spans, s, y);
        y += ROW + 3.0;
    }
    y + 26.0
}

/// A verdict lane (`candidate` or `recorded`) at `y`, each stretch with its
/// failing checks in its tooltip.
fn verdict_lane(body: &mut String, name: &str, list: &[Interval], s: &Scale, y: f64) {
    let _ = writeln!(
        body,
        r#"<text x="{:.1}" y="{:.1}" class="lane" text-anchor="end">{name}</text>"#,
        X0 - 8.0,
        y + BAR - 5.0
    );
    for i in list {
        let (a, b) = (s.x(i.from_ms), s.x(i.to_ms));
        // One tooltip line per failing check: the line breaks are the
        // tooltip's own, escaped text never carries one.
        let mut title = esc(&format!(
            "{name}: {} {}",
            verdict_word(i.ready),
            span_text(i.from_ms, i.to_ms)
        ));
        for (n, e) in i.failing.iter().zip(&i.explanations) {
            title.push('\n');
            title.push_str(&esc(&format!("{n}: {e}")));
        }
        let _ = writeln!(
            body,
            r#"<rect x="{a:.2}" y="{y:.1}" width="{:.2}" height="{BAR}" fill="{}"><title>{title}</title></rect>"#,
            (b - a).max(0.5),
            verdict_color(i.ready),
        );
    }
}

/// Where the candidate and the recorded verdict differ: a row of its own,
/// each span saying which way.
fn differs_row(body: &mut String, diffs: &[Interval], s: &Scale, y: f64) {
    let _ = writeln!(
        body,
        r#"<text x="{:.1}" y="{:.1}" class="check" text-anchor="end">differs</text>"#,
        X0 - 8.0,
        y + ROW - 3.0
    );
    for (k, d) in diffs.iter().enumerate() {
        let (a, b) = (s.x(d.from_ms), s.x(d.to_ms));
        let w = (b - a).max(1.0);
        let prev = k.checked_sub(1).map_or(X0, |p| s.x(diffs[p].to_ms));
        let next = diffs.get(k + 1).map_or(W, |n| s.x(n.from_ms));
        let which = if d.ready == Some(true) {
            "candidate ready"
        } else {
            "candidate not ready"
        };
        let _ = writeln!(
            body,
            r#"<rect x="{a:.2}" y="{y:.1}" width="{w:.2}" height="{ROW}" fill="{DIFF}"><title>differs from recorded {}: {which}</title></rect>"#,
            esc(&span_text(d.from_ms, d.to_ms))
        );
        if let Some((tx, anchor, inside)) = label_at(a, b, prev, next, which.len()) {
            let class = if inside { "span in" } else { "span" };
            let _ = writeln!(
                body,
                r#"<text x="{tx:.2}" y="{:.1}" class="{class}" text-anchor="{anchor}">{which}</text>"#,
                y + ROW - 3.5
            );
        }
    }
}

/// The colour of a check's not-passing span.
fn check_color(c: &CheckSpan) -> &'static str {
    if c.held {
        return HELD;
    }
    match (c.state, c.kind) {
        (CheckState::Unknown, _) => UNKNOWN,
        (CheckState::Pass | CheckState::Fail, CheckKind::Warn) => WARN,
        (CheckState::Pass | CheckState::Fail, CheckKind::Check) => NOT_READY,
    }
}

/// One check's row at `y`: its name, a track, its not-passing spans, each
/// labelled where the label fits.
fn check_row(
    body: &mut String,
    name: &str,
    kind: CheckKind,
    spans: &[&CheckSpan],
    s: &Scale,
    y: f64,
) {
    let label = match kind {
        CheckKind::Warn => format!("warn {name}"),
        CheckKind::Check => name.to_string(),
    };
    let _ = writeln!(
        body,
        r#"<text x="{:.1}" y="{:.1}" class="check" text-anchor="end">{}</text>"#,
        X0 - 8.0,
        y + ROW - 3.0,
        esc(&label)
    );
    let _ = writeln!(
        body,
        r#"<line x1="{X0}" x2="{X1}" y1="{:.1}" y2="{:.1}" class="track"/>"#,
        y + ROW / 2.0,
        y + ROW / 2.0
    );
    for (k, c) in spans.iter().enumerate() {
        let (a, b) = (s.x(c.from_ms), s.x(c.to_ms));
        let prev = k.checked_sub(1).map_or(X0, |p| s.x(spans[p].to_ms));
        let next = spans.get(k + 1).map_or(W, |n| s.x(n.from_ms));
        let w = (b - a).max(1.0);
        let _ = writeln!(
            body,
            r#"<rect x="{a:.2}" y="{y:.1}" width="{w:.2}" height="{ROW}" fill="{}" opacity="0.85"><title>{} {} {}: {}</title></rect>"#,
            check_color(c),
            esc(&c.check),
            c.state.as_str(),
            esc(&span_text(c.from_ms, c.to_ms)),
            esc(&c.explanation)
        );
        let text = if c.held {
            format!("{} held", c.check)
        } else if c.recovering {
            format!("{} recovering", c.check)
        } else {
            format!("{} {}", c.check, c.state.as_str())
        };
        if let Some((tx, anchor, inside)) = label_at(a, b, prev, next, text.len()) {
            let class = if inside && !c.held { "span in" } else { "span" };
            let _ = writeln!(
                body,
                r#"<text x="{tx:.2}" y="{:.1}" class="{class}" text-anchor="{anchor}">{}</text>"#,
                y + ROW - 3.5,
                esc(&text)
            );
        }
    }
}

/// The time axis at `axis_y` and its note into `body`; the grid lines and
/// tick labels, which go under everything, returned.
fn time_axis(body: &mut String, g: &Grid, s: &Scale, axis_y: f64) -> String {
    let _ = writeln!(
        body,
        r#"<line x1="{X0}" x2="{X1}" y1="{axis_y:.1}" y2="{axis_y:.1}" stroke="{AXIS}"/>"#
    );
    let tick = tick_ms(g.end_ms - g.start_ms);
    let mut grid = String::new();
    let mut t = (g.start_ms + tick - 1).div_euclid(tick) * tick;
    while t <= g.end_ms {
        let tx = s.x(t);
        let label = rfc3339(t);
        let short = if tick >= 60_000 {
            label.get(11..16).unwrap_or(&label).to_string()
        } else {
            label.get(11..19).unwrap_or(&label).to_string()
        };
        let _ = writeln!(
            grid,
            r#"<line x1="{tx:.2}" x2="{tx:.2}" y1="60" y2="{:.1}" class="grid"/><text x="{tx:.2}" y="{:.1}" class="tick" text-anchor="middle">{short}</text>"#,
            axis_y + 4.0,
            axis_y + 17.0
        );
        t += tick;
    }
    let _ = writeln!(
        body,
        r#"<text x="{X0}" y="{:.1}" class="note">UTC; {} to {}, step {}</text>"#,
        axis_y + 34.0,
        rfc3339(g.start_ms),
        rfc3339(g.end_ms),
        fmt_duration(g.step_ms as f64 / 1000.0)
    );
    grid
}

/// The colours and what they mean, in one line under the title.
fn legend() -> String {
    let mut legend = String::new();
    let mut lx = X0;
    for (color, word) in [
        (READY, "ready"),
        (NOT_READY, "not ready / check failing"),
        (WARN, "warn failing"),
        (HELD, "held by hold-down"),
        (UNKNOWN, "unknown / no data"),
        (DIFF, "differs from recorded"),
    ] {
        let _ = write!(
            legend,
            r#"<rect x="{lx:.1}" y="38" width="12" height="12" fill="{color}"/><text x="{:.1}" y="48" class="note">{word}</text>"#,
            lx + 16.0
        );
        lx += 30.0 + 6.2 * word.len() as f64;
    }
    legend
}
