//! Rate limit of the engine's transition log lines (regression: a check
//! flapping every few milliseconds wrote ~134 INFO lines a second, 17 MB in
//! 15 minutes). Each lane — one check, or the member's readiness — may log
//! at most [`LINES_PER_WINDOW`] transitions per [`WINDOW`]; the rest are
//! counted, and once the window is over one line says how many were
//! suppressed. The transition metrics still count every transition.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Transition lines one lane may write per window.
pub const LINES_PER_WINDOW: u32 = 5;
/// The window of [`LINES_PER_WINDOW`].
pub const WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Lane {
    started: Instant,
    logged: u32,
    suppressed: u64,
}

/// Per-lane budgets of log lines.
#[derive(Debug, Default)]
pub struct TransitionLog {
    lanes: HashMap<String, Lane>,
}

/// Transitions of one lane not logged in a window that is over.
#[derive(Debug, PartialEq, Eq)]
pub struct Suppressed {
    pub lane: String,
    pub count: u64,
}

impl TransitionLog {
    /// Whether a transition of `lane` at `now` may be logged; if not, it is
    /// counted for [`TransitionLog::flush`].
    pub fn allow(&mut self, lane: &str, now: Instant) -> bool {
        let l = self.lanes.entry(lane.to_string()).or_insert(Lane {
            started: now,
            logged: 0,
            suppressed: 0,
        });
        if now.saturating_duration_since(l.started) >= WINDOW && l.suppressed == 0 {
            l.started = now;
            l.logged = 0;
        }
        if l.logged < LINES_PER_WINDOW {
            l.logged += 1;
            true
        } else {
            l.suppressed += 1;
            false
        }
    }

    /// The lanes whose window is over with transitions suppressed in it
    /// (each then starts a new window), and forget idle lanes.
    pub fn flush(&mut self, now: Instant) -> Vec<Suppressed> {
        let mut out = Vec::new();
        self.lanes.retain(|lane, l| {
            let over = now.saturating_duration_since(l.started) >= WINDOW;
            if over && l.suppressed > 0 {
                out.push(Suppressed {
                    lane: lane.clone(),
                    count: l.suppressed,
                });
                l.started = now;
                l.logged = 0;
                l.suppressed = 0;
            }
            !over || l.logged > 0
        });
        out.sort_by(|a, b| a.lane.cmp(&b.lane));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a check flapping every 5 ms logged every transition. Now
    /// at most LINES_PER_WINDOW a second, then one count of the rest.
    #[test]
    fn a_check_flapping_every_few_ms_logs_a_few_lines_then_a_count() {
        let t0 = Instant::now();
        let mut log = TransitionLog::default();
        let mut logged = 0;
        // 200 transitions 5 ms apart: one second.
        for i in 0..200 {
            let now = t0 + Duration::from_millis(5 * i);
            if log.allow("leader", now) {
                logged += 1;
            }
            assert!(log.flush(now).is_empty(), "no summary inside the window");
        }
        assert_eq!(logged, LINES_PER_WINDOW);
        let after = t0 + WINDOW;
        assert_eq!(
            log.flush(after),
            [Suppressed {
                lane: "leader".into(),
                count: 200 - u64::from(LINES_PER_WINDOW)
            }]
        );
        // A new window: logged again, and nothing left to report.
        assert!(log.allow("leader", after));
        assert!(log.flush(after + WINDOW).is_empty());
        // Other lanes have budgets of their own.
        assert!(log.allow("readiness", after));
    }

    #[test]
    fn idle_lanes_are_forgotten() {
        let t0 = Instant::now();
        let mut log = TransitionLog::default();
        assert!(log.allow("a", t0));
        assert!(log.flush(t0 + WINDOW).is_empty());
        assert!(log.flush(t0 + WINDOW * 3).is_empty());
        assert!(log.lanes.len() <= 1);
    }
}
