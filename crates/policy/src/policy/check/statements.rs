//! Statements → checks and lets: a `let` is checked and kept, a
//! `check`/`warn` line is one check, a bare expression one check per
//! top-level `&&` term (named after its first signal), names unique.

use std::collections::HashMap;

use super::super::ast::{BinOp, Clause, Expr, ExprKind, Span, Stmt, StmtKind};
use super::super::diag::{Diagnostic, line_col};
use super::super::limits;
use super::super::program::{CheckDef, LetDef};
use super::Checker;
use super::timing::Timing;
use crate::signals::{Catalogue, SignalId, SignalType};
use crate::verdict::CheckKind;

/// A term of a check statement and its name, if the statement gave one.
type Term<'e> = (&'e Expr, Option<(String, Span)>);

/// [`compile`]'s state across statements: the expression checker, the
/// checks so far and the rules about bare expressions.
pub(super) struct PolicyCompiler<'a> {
    pub(super) c: Checker<'a>,
    pub(super) checks: Vec<CheckDef>,
    check_spans: HashMap<String, Span>,
    /// The policy has `check`/`warn` lines, so a bare expression is an error.
    has_named: bool,
    seen_bare: bool,
    /// A second bare expression was reported (once is enough).
    reported_extra: bool,
}

impl<'a> PolicyCompiler<'a> {
    pub(super) fn new(stmts: &[Stmt], src: &'a str, catalogue: &'a Catalogue) -> Self {
        PolicyCompiler {
            c: Checker {
                src,
                catalogue,
                nodes: Vec::new(),
                lets: Vec::new(),
                let_leaves: Vec::new(),
                optional_depth: 0,
                required: Vec::new(),
                later_lets: stmts
                    .iter()
                    .filter_map(|s| match s {
                        Stmt::Let {
                            name, name_span, ..
                        } => Some((name.clone(), *name_span)),
                        _ => None,
                    })
                    .collect(),
                diags: Vec::new(),
            },
            checks: Vec::new(),
            check_spans: HashMap::new(),
            has_named: stmts.iter().any(|s| {
                matches!(
                    s,
                    Stmt::Check {
                        kind: StmtKind::Check | StmtKind::Warn,
                        ..
                    }
                )
            }),
            seen_bare: false,
            reported_extra: false,
        }
    }

    /// A `check`/`warn` line (one check) or a bare expression (one check
    /// per top-level `&&` term), with its timing clauses.
    pub(super) fn define_checks(
        &mut self,
        kind: StmtKind,
        name: &Option<(String, Span)>,
        expr: &Expr,
        clauses: &[Clause],
        span: Span,
    ) {
        let terms = if kind == StmtKind::Bare {
            match self.bare_terms(expr, span) {
                Some(t) => t,
                None => return,
            }
        } else {
            vec![(expr, name.clone())]
        };
        let timing = self.c.timing(kind, clauses);
        for (term, name) in terms {
            if self.checks.len() >= limits::MAX_CHECKS {
                self.c.diags.push(Diagnostic::new(
                    format!("more than {} checks", limits::MAX_CHECKS),
                    term.span,
                ));
                break;
            }
            self.define_check(kind, term, name, timing);
        }
    }

    /// `let NAME = EXPR`: checked and kept; a bad one stays resolvable so
    /// its uses do not cascade into "unknown name" errors.
    pub(super) fn define_let(&mut self, name: &str, name_span: Span, expr: &Expr) {
        let c = &mut self.c;
        if c.lets.len() >= limits::MAX_LETS {
            c.diags.push(Diagnostic::new(
                format!("more than {} `let` lines", limits::MAX_LETS),
                name_span,
            ));
            return;
        }
        if c.lets.iter().any(|l| l.name == name) {
            c.diags.push(
                Diagnostic::new(format!("`{name}` is defined twice"), name_span)
                    .label("second definition")
                    .help("each `let` needs its own name"),
            );
            return;
        }
        if c.catalogue.lookup(name).is_some() {
            c.diags.push(
                Diagnostic::new(
                    format!("`{name}` is a signal and cannot be redefined"),
                    name_span,
                )
                .help("pick another name for this `let`"),
            );
            return;
        }
        let (root, ty, leaves) = match c.expr(expr) {
            Some(root) => {
                let mut leaves = Vec::new();
                c.leaves(root, &mut leaves);
                (root, c.nodes[root as usize].ty, leaves)
            }
            None => (u32::MAX, SignalType::Bool, Vec::new()),
        };
        c.lets.push(LetDef {
            name: name.to_string(),
            root,
            ty,
        });
        c.let_leaves.push(leaves);
    }

    /// The terms of a bare expression (its top-level `&&` operands, one
    /// check each), or `None` with a diagnostic when a bare expression is
    /// not allowed here.
    fn bare_terms<'e>(&mut self, expr: &'e Expr, span: Span) -> Option<Vec<Term<'e>>> {
        if self.has_named || self.seen_bare {
            if std::mem::replace(&mut self.reported_extra, true) {
                return None;
            }
            let starts = expr.span.text(self.c.src);
            let word = starts
                .split(|ch: char| !ch.is_alphanumeric())
                .next()
                .unwrap_or("");
            if matches!(word, "and" | "or" | "not" | "AND" | "OR") {
                self.c.diags.push(
                    Diagnostic::new(
                        format!("`{word}` is not an operator"),
                        Span::new(expr.span.start, expr.span.start + word.len()),
                    )
                    .help("write `&&` for and, `||` for or, `!` for not"),
                );
                return None;
            }
            self.c.diags.push(
                Diagnostic::new("unexpected expression", Span::new(span.start, span.start))
                    .label("a second expression starts here")
                    .help(if self.has_named {
                        "a policy is either one bare expression or a list of `check`/`warn` lines; write `check NAME: EXPR`"
                    } else {
                        "join the terms with `&&` (or `||`), or name each one with `check NAME: EXPR`"
                    }),
            );
            return None;
        }
        self.seen_bare = true;
        let mut terms = Vec::new();
        flatten_and(expr, &mut terms);
        Some(terms.into_iter().map(|t| (t, None)).collect())
    }

    /// One check: named (or named after its first signal), unique, a
    /// condition, with its timing clauses and the signals it reads.
    fn define_check(
        &mut self,
        kind: StmtKind,
        term: &Expr,
        name: Option<(String, Span)>,
        timing: Timing,
    ) {
        let c = &mut self.c;
        let (name, name_span) = match name {
            Some(n) => n,
            None => {
                let base = c.first_signal(term).unwrap_or_else(|| "term".to_string());
                (unique_name(&base, &self.check_spans), term.span)
            }
        };
        if let Some(prev) = self.check_spans.get(&name) {
            let (line, _) = line_col(c.src, prev.start);
            c.diags.push(
                Diagnostic::new(format!("check `{name}` is defined twice"), name_span)
                    .label("second definition")
                    .help(format!(
                        "the first is on line {line}; check names must be unique"
                    )),
            );
            return;
        }
        self.check_spans.insert(name.clone(), name_span);
        let Some(root) = c.expr(term) else { return };
        let ty = c.nodes[root as usize].ty;
        if ty != SignalType::Bool {
            c.diags.push(
                Diagnostic::new(
                    format!("check `{name}` must be a condition, but this expression is a {ty}"),
                    term.span,
                )
                .label(format!("this is a {ty}"))
                .help("compare it with something, e.g. `qget_ms < 1000`"),
            );
            return;
        }
        let mut leaves = Vec::new();
        c.leaves(root, &mut leaves);
        let mut signals: Vec<SignalId> = Vec::new();
        for leaf in leaves {
            if !signals.contains(&leaf.signal) {
                signals.push(leaf.signal);
            }
        }
        self.checks.push(CheckDef {
            name,
            kind: if kind == StmtKind::Warn {
                CheckKind::Warn
            } else {
                CheckKind::Check
            },
            root,
            expr_text: crate::text::collapse_ws(term.span.text(c.src)),
            hold: timing.hold,
            recover: timing.recover,
            signals,
        });
    }
}

fn flatten_and<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match &e.kind {
        ExprKind::Binary(BinOp::And, l, r) => {
            flatten_and(l, out);
            flatten_and(r, out);
        }
        _ => out.push(e),
    }
}

fn unique_name(base: &str, taken: &HashMap<String, Span>) -> String {
    if !taken.contains_key(base) {
        return base.to_string();
    }
    (2..)
        .map(|n| format!("{base}_{n}"))
        .find(|n| !taken.contains_key(n))
        .expect("an unused suffix exists")
}
