//! `/livez` rendering: whether the exporter's own loops are alive,
//! independent of etcd's health. A pure function of what the loops left
//! behind — when the engine last published, when each source last finished
//! a round ([`Rounds`]), the supervisor's [`TaskStatus`]es — and `now`, so
//! the exact text is tested without a server or a clock.
//!
//! One rule for "too long ago", the sources' own: a sampler fails when its
//! last round (before its first, the start) is older than
//! [`sources::staleness_bound`](crate::sources::staleness_bound) of its
//! interval and timeout ([`Rounds::bound`]), the age at which its signals
//! turn stale; the engine fails when its verdict is older than the same
//! bound of `--sample.interval` and `--sample.timeout`
//! ([`Timing::verdict_stale_after`]), the age at which `/readyz` calls it
//! wedged. A restart is information, not a failure: a task that stays down
//! fails through its sampler's or the engine's line.

use std::time::Instant;

use axum::http::StatusCode;

use super::readyz::{MAX_ECHO, Rendered};
use crate::engine::Timing;
use crate::runtime::supervise::TaskStatus;
use crate::sources::Rounds;
use etcd_readiness_policy::text::cut;

/// Everything one `/livez` answer reads.
#[derive(Clone, Debug)]
pub struct LivezInput<'a> {
    pub now: Instant,
    /// When serving started: the "last round" of a source before its first.
    pub started: Instant,
    /// When the engine published its latest verdict.
    pub verdict_at: Instant,
    pub timing: Timing,
    pub rounds: &'a [Rounds],
    pub tasks: &'a [TaskStatus],
}

/// The `/livez` answer: `ok` (200) or, with `verbose` or when failing, one
/// `[+]`/`[-]` line per loop and `livez check passed|failed`.
pub fn render(i: &LivezInput, verbose: bool) -> Rendered {
    let mut lines = Vec::new();
    let mut failing = false;
    let age = i.now.saturating_duration_since(i.verdict_at);
    let bound = i.timing.verdict_stale_after();
    if age > bound {
        failing = true;
        lines.push(format!(
            "[-]evaluation failed: last evaluation {:.1}s ago (limit {:.1}s)",
            age.as_secs_f64(),
            bound.as_secs_f64()
        ));
    } else {
        lines.push("[+]evaluation ok".to_string());
    }
    for r in i.rounds {
        let (line, ok) = sampler_line(r, i.now, i.started);
        failing |= !ok;
        lines.push(line);
    }
    lines.extend(i.tasks.iter().filter_map(|t| task_line(t, i.now)));
    let status = if failing {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = if !failing && !verbose {
        "ok".to_string()
    } else {
        lines.push(
            if failing {
                "livez check failed"
            } else {
                "livez check passed"
            }
            .to_string(),
        );
        lines.join("\n") + "\n"
    };
    Rendered {
        status,
        json: false,
        body,
        // Never held: /livez ignores `?wait=`.
        ready: None,
    }
}

/// A source's line and whether it is alive.
fn sampler_line(r: &Rounds, now: Instant, started: Instant) -> (String, bool) {
    let bound = r.bound();
    let age = now.saturating_duration_since(r.last.unwrap_or(started));
    let first = r.last.is_none();
    if age <= bound {
        let running = if first { " (first round running)" } else { "" };
        return (format!("[+]sampler:{} ok{running}", r.label), true);
    }
    let what = if first {
        format!("no round finished in {:.1}s since start", age.as_secs_f64())
    } else {
        format!("last round finished {:.1}s ago", age.as_secs_f64())
    };
    let line = format!(
        "[-]sampler:{} failed: {what} (limit {:.1}s)",
        r.label,
        bound.as_secs_f64()
    );
    (line, false)
}

/// A line for a task that failed at least once (never a failing line), its
/// failure cut to [`MAX_ECHO`] bytes so that the body stays small.
fn task_line(t: &TaskStatus, now: Instant) -> Option<String> {
    let (why, when) = t.last_failure.as_ref()?;
    Some(format!(
        "[+]task:{} {} (restarted {} time{}; last {:.1}s ago: {})",
        t.name,
        if t.restarting { "restarting" } else { "ok" },
        t.restarts,
        if t.restarts == 1 { "" } else { "s" },
        now.saturating_duration_since(*when).as_secs_f64(),
        cut(why, MAX_ECHO)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::staleness_bound;
    use std::time::Duration;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    /// `--sample.interval 1s --sample.timeout 500ms`: every bound is 3.5 s.
    const TIMING: Timing = Timing {
        sample_interval: S,
        sample_timeout: Duration::from_millis(500),
    };

    fn rounds(label: &str, last: Option<Instant>) -> Rounds {
        Rounds {
            label: label.into(),
            last,
            interval: TIMING.sample_interval,
            timeout: TIMING.sample_timeout,
        }
    }

    /// `/livez` at `start + at` with the verdict published at `start +
    /// verdict_at`.
    fn livez(
        at: Duration,
        verdict_at: Duration,
        r: &[Rounds],
        t: &[TaskStatus],
        v: bool,
    ) -> Rendered {
        let start = Instant::now();
        render(
            &LivezInput {
                now: start + at,
                started: start,
                verdict_at: start + verdict_at,
                timing: TIMING,
                rounds: r,
                tasks: t,
            },
            v,
        )
    }

    #[test]
    fn the_bound_is_the_sources_staleness_bound() {
        let bound = staleness_bound(S, Duration::from_millis(500));
        assert_eq!(rounds("etcd", None).bound(), bound);
        assert_eq!(TIMING.verdict_stale_after(), bound);
        assert_eq!(bound, Duration::from_millis(3500));
    }

    #[test]
    fn everything_fresh_is_ok_and_verbose_lists_every_loop() {
        let start = Instant::now();
        let r = [
            Rounds {
                last: Some(start + 9 * S),
                ..rounds("backup", None)
            },
            Rounds {
                last: Some(start + 10 * S),
                ..rounds("etcd", None)
            },
        ];
        let at = |now: Duration, verbose| {
            render(
                &LivezInput {
                    now: start + now,
                    started: start,
                    verdict_at: start + 10 * S,
                    timing: TIMING,
                    rounds: &r,
                    tasks: &[],
                },
                verbose,
            )
        };
        let terse = at(10 * S, false);
        assert_eq!((terse.status, terse.body.as_str()), (StatusCode::OK, "ok"));
        assert_eq!(
            at(10 * S, true).body,
            "[+]evaluation ok\n[+]sampler:backup ok\n[+]sampler:etcd ok\nlivez check passed\n"
        );
        // At the bound exactly, still alive; one millisecond past it, not.
        assert_eq!(at(9 * S + 3500 * MS, false).status, StatusCode::OK);
        let late = at(9 * S + 3501 * MS, false);
        assert_eq!(late.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            late.body,
            "[+]evaluation ok\n[-]sampler:backup failed: last round finished 3.5s ago (limit 3.5s)\n\
             [+]sampler:etcd ok\nlivez check failed\n"
        );
    }

    #[test]
    fn a_wedged_evaluation_fails_with_its_age_and_limit() {
        let l = livez(10 * S, 6 * S, &[], &[], false);
        assert_eq!(l.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            l.body,
            "[-]evaluation failed: last evaluation 4.0s ago (limit 3.5s)\nlivez check failed\n"
        );
    }

    #[test]
    fn a_source_without_a_first_round_fails_only_after_the_bound_since_start() {
        // Any source, etcd or not, is judged by its own interval and timeout.
        let r = [
            rounds("etcd", None),
            Rounds {
                interval: 30 * S,
                timeout: 5 * S,
                ..rounds("owner", None)
            },
        ];
        let early = livez(3 * S, 3 * S, &r, &[], true);
        assert_eq!(early.status, StatusCode::OK);
        assert_eq!(
            early.body,
            "[+]evaluation ok\n[+]sampler:etcd ok (first round running)\n\
             [+]sampler:owner ok (first round running)\nlivez check passed\n"
        );
        let late = livez(4 * S, 4 * S, &r, &[], false);
        assert_eq!(late.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            late.body,
            "[+]evaluation ok\n[-]sampler:etcd failed: no round finished in 4.0s since start (limit 3.5s)\n\
             [+]sampler:owner ok (first round running)\nlivez check failed\n"
        );
        // The owner's bound is 3 × 30 s + 5 s.
        assert_eq!(
            livez(95 * S, 95 * S, &r[1..], &[], false).status,
            StatusCode::OK
        );
        assert_eq!(
            livez(96 * S, 96 * S, &r[1..], &[], false).status,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[test]
    fn a_restart_is_shown_but_does_not_fail() {
        let start = Instant::now();
        let tasks = [
            TaskStatus {
                name: "engine".into(),
                restarts: 0,
                last_failure: None,
                restarting: false,
            },
            TaskStatus {
                name: "sampler:backup".into(),
                restarts: 1,
                last_failure: Some(("panicked: absurd".into(), start + 8 * S)),
                restarting: true,
            },
            TaskStatus {
                name: "sampler:etcd".into(),
                restarts: 3,
                last_failure: Some(("the task ended by itself".into(), start + 2 * S)),
                restarting: false,
            },
        ];
        let l = livez(10 * S, 10 * S, &[], &tasks, false);
        assert_eq!((l.status, l.body.as_str()), (StatusCode::OK, "ok"));
        assert_eq!(
            livez(10 * S, 10 * S, &[], &tasks, true).body,
            "[+]evaluation ok\n\
             [+]task:sampler:backup restarting (restarted 1 time; last 2.0s ago: panicked: absurd)\n\
             [+]task:sampler:etcd ok (restarted 3 times; last 8.0s ago: the task ended by itself)\n\
             livez check passed\n"
        );
        // A panic message of any size is cut: the kubelet reads 10 KiB.
        let huge = [TaskStatus {
            last_failure: Some(("x".repeat(100_000), start)),
            ..tasks[1].clone()
        }];
        let body = livez(10 * S, 10 * S, &[], &huge, true).body;
        assert!(body.len() < 400, "{} bytes", body.len());
        assert!(body.contains("bytes cut)"), "{body}");
    }
}
