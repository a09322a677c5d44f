//! A check's timing clauses: `for` (hold-down) and `recover` (recovery
//! hold), each at most once, within their limits, no `recover` on a `warn`.

use std::time::Duration;

use super::super::ast::{Clause, ClauseKind, Span, StmtKind};
use super::super::diag::Diagnostic;
use super::super::limits;
use super::{Checker, quoted};

/// A check's timing clauses, checked.
#[derive(Clone, Copy, Default)]
pub(super) struct Timing {
    pub(super) hold: Option<Duration>,
    pub(super) recover: Option<Duration>,
}

impl Checker<'_> {
    /// The timing clauses of one statement, or diagnostics: each clause at
    /// most once, each duration within its limits, no `recover` on a `warn`.
    pub(super) fn timing(&mut self, kind: StmtKind, clauses: &[Clause]) -> Timing {
        let mut t = Timing::default();
        for (i, clause) in clauses.iter().enumerate() {
            let kw = clause.kind.keyword();
            if let Some(first) = clauses[..i].iter().find(|c| c.kind == clause.kind) {
                let first = self.text(first.clause_span);
                self.diags.push(
                    Diagnostic::new(format!("`{kw}` is given twice"), clause.clause_span)
                        .label("second clause")
                        .help(format!(
                            "a check takes at most one `for` and one `recover`; keep `{first}` or this one"
                        )),
                );
                continue;
            }
            match clause.kind {
                ClauseKind::For => t.hold = self.hold_down(clause.secs, clause.span),
                ClauseKind::Recover if kind == StmtKind::Warn => self.diags.push(
                    Diagnostic::new("a `warn` cannot have a recovery hold", clause.clause_span)
                        .label("a warning never makes the member unready")
                        .help(
                            "`recover` keeps a member out of service until it has stayed well; \
                             make this a `check`, or keep an alert firing with its rule's `keep_firing_for`",
                        ),
                ),
                ClauseKind::Recover => t.recover = self.recover(clause.secs, clause.span),
            }
        }
        t
    }

    /// A recovery hold (`recover DURATION`) as a `Duration`, or a diagnostic.
    pub(super) fn recover(&mut self, secs: f64, span: Span) -> Option<Duration> {
        self.hold_clause(
            secs,
            span,
            "recovery hold",
            Some("without `recover` a check passes at its first true evaluation"),
            limits::MAX_RECOVER_SECS,
            "the member stays out of service for the whole hold after every restart; use at most `recover 1h`",
        )
    }

    /// A hold-down (`for DURATION`) as a `Duration`, or a diagnostic.
    pub(super) fn hold_down(&mut self, secs: f64, span: Span) -> Option<Duration> {
        self.hold_clause(
            secs,
            span,
            "hold-down",
            None,
            limits::MAX_HOLD_DOWN_SECS,
            "a hold-down bridges blips of seconds or minutes; use at most `for 168h`",
        )
    }

    /// The duration of a `for` or `recover` clause, within `(0, max]`, or a
    /// diagnostic naming the clause (`what`) with its help.
    pub(super) fn hold_clause(
        &mut self,
        secs: f64,
        span: Span,
        what: &str,
        zero_help: Option<&str>,
        max: f64,
        over_help: &str,
    ) -> Option<Duration> {
        if secs.is_finite() && secs <= 0.0 {
            let d = Diagnostic::new(format!("{what} must be longer than zero"), span);
            self.diags.push(match zero_help {
                Some(h) => d.help(h),
                None => d,
            });
            return None;
        }
        match Duration::try_from_secs_f64(secs) {
            Ok(d) if secs <= max => Some(d),
            _ => {
                self.diags.push(
                    Diagnostic::new(
                        format!(
                            "{what} {} is longer than the limit of {}",
                            quoted(&self.text(span)),
                            crate::text::fmt_duration(max)
                        ),
                        span,
                    )
                    .help(over_help),
                );
                None
            }
        }
    }
}
