//! The operators' type rules: which operand types each accepts and what
//! it yields, and the messages when they do not fit (with the usual
//! mistakes named: a duration against a number of milliseconds, a number
//! without a unit).

use super::super::ast::{BinOp, Expr, ExprKind, Span};
use super::super::diag::Diagnostic;
use super::{Checker, describe_ty};
use crate::signals::SignalType;

impl Checker<'_> {
    pub(super) fn binary_type(
        &mut self,
        op: BinOp,
        l: &Expr,
        ta: SignalType,
        r: &Expr,
        tb: SignalType,
        span: Span,
    ) -> Option<SignalType> {
        use SignalType::*;
        let sym = op.symbol();
        match op {
            BinOp::And | BinOp::Or => self.logic_operands(sym, [(l, ta), (r, tb)]),
            BinOp::Coalesce => {
                if ta != tb {
                    self.mismatch(sym, l, ta, r, tb, span);
                    return None;
                }
                Some(ta)
            }
            BinOp::Eq | BinOp::Ne => {
                if ta != tb {
                    self.mismatch(sym, l, ta, r, tb, span);
                    return None;
                }
                Some(Bool)
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                if !self.ordered_operands(sym, [(l, ta), (r, tb)]) {
                    return None;
                }
                if ta != tb {
                    self.mismatch(sym, l, ta, r, tb, span);
                    return None;
                }
                Some(Bool)
            }
            BinOp::Add | BinOp::Sub => {
                if ta == Bool || tb == Bool || ta != tb {
                    self.mismatch(sym, l, ta, r, tb, span);
                    return None;
                }
                Some(ta)
            }
            BinOp::Mul => match (ta, tb) {
                (Number, Number) => Some(Number),
                (Duration, Number) | (Number, Duration) => Some(Duration),
                _ => {
                    self.mismatch(sym, l, ta, r, tb, span);
                    None
                }
            },
            BinOp::Div => match (ta, tb) {
                (Number, Number) | (Duration, Duration) => Some(Number),
                (Duration, Number) => Some(Duration),
                _ => {
                    self.mismatch(sym, l, ta, r, tb, span);
                    None
                }
            },
        }
    }

    /// `&&` and `||`: both operands bool, a diagnostic for each that is not.
    pub(super) fn logic_operands(
        &mut self,
        sym: &str,
        operands: [(&Expr, SignalType); 2],
    ) -> Option<SignalType> {
        for (e, t) in operands {
            if t != SignalType::Bool {
                self.diags.push(
                    Diagnostic::new(
                        format!(
                            "`{sym}` needs bool operands, but `{}` is {}",
                            self.text(e.span),
                            describe_ty(t)
                        ),
                        e.span,
                    )
                    .label(format!("this is {}", describe_ty(t)))
                    .help(format!("compare it, e.g. `{} > 0`", self.text(e.span))),
                );
            }
        }
        operands
            .iter()
            .all(|(_, t)| *t == SignalType::Bool)
            .then_some(SignalType::Bool)
    }

    /// `<`, `<=`, `>`, `>=`: no bool operand (a diagnostic for the first
    /// one found).
    pub(super) fn ordered_operands(
        &mut self,
        sym: &str,
        operands: [(&Expr, SignalType); 2],
    ) -> bool {
        let Some((e, _)) = operands.iter().find(|(_, t)| *t == SignalType::Bool) else {
            return true;
        };
        self.diags.push(
            Diagnostic::new(
                format!(
                    "`{sym}` compares numbers or durations, but `{}` is a bool",
                    self.text(e.span)
                ),
                e.span,
            )
            .label("this is a bool")
            .help(format!(
                "use a bool directly (`{0}` or `!{0}`), or compare with `==`",
                self.text(e.span)
            )),
        );
        false
    }

    pub(super) fn mismatch(
        &mut self,
        sym: &str,
        l: &Expr,
        ta: SignalType,
        r: &Expr,
        tb: SignalType,
        span: Span,
    ) {
        let (lt, rt) = (self.text(l.span), self.text(r.span));
        let mut d = Diagnostic::new(
            format!(
                "mismatched types: `{lt}` is {} but `{rt}` is {}",
                describe_ty(ta),
                describe_ty(tb)
            ),
            span,
        )
        .label(format!(
            "`{sym}` cannot combine {} and {}",
            describe_ty(ta),
            describe_ty(tb)
        ));
        // The common mistakes: a duration literal against a number signal in
        // ms, or a plain number against a duration.
        let hint = match (&l.kind, ta, &r.kind, tb) {
            (_, SignalType::Number, ExprKind::Duration(secs), _)
            | (ExprKind::Duration(secs), _, _, SignalType::Number) => {
                let other = if ta == SignalType::Number { &lt } else { &rt };
                if other.ends_with("_ms") {
                    Some(format!(
                        "`{other}` is a number of milliseconds: write `{}`",
                        crate::text::fmt_num(secs * 1000.0)
                    ))
                } else {
                    Some(format!(
                        "`{other}` is a plain number: write a number, not a duration"
                    ))
                }
            }
            (_, SignalType::Duration, ExprKind::Num(n), _)
            | (ExprKind::Num(n), _, _, SignalType::Duration) => Some(format!(
                "durations are written with a unit: `{}s`, `{}ms`",
                crate::text::fmt_num(*n),
                crate::text::fmt_num(*n)
            )),
            _ => None,
        };
        if let Some(h) = hint {
            d = d.help(h);
        }
        self.diags.push(d);
    }
}
