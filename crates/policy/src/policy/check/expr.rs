//! An expression → nodes: literals, names (a `let`, a signal, its source
//! configured or under a `??`, "did you mean"), the functions and their
//! arguments, and the signals a node reads.

use super::super::ast::{BinOp, Expr, ExprKind, Span, UnaryOp};
use super::super::diag::{Diagnostic, did_you_mean, line_col};
use super::super::program::{Leaf, NodeId, Op, Tri, Val};
use super::{Checker, FUNCTIONS, describe_ty, quoted};
use crate::signals::SignalType;

impl Checker<'_> {
    pub(super) fn first_signal(&self, e: &Expr) -> Option<String> {
        match &e.kind {
            ExprKind::Ident(n) => Some(n.clone()),
            ExprKind::Call { args, .. } => args.iter().find_map(|a| self.first_signal(a)),
            ExprKind::Unary(_, x) => self.first_signal(x),
            ExprKind::Binary(_, l, r) => self.first_signal(l).or_else(|| self.first_signal(r)),
            _ => None,
        }
    }

    /// The signals node `id` reads, in order of first mention, each `(signal,
    /// age)` once. A `let` contributes its precomputed list: linear in the
    /// node's own expression however deeply lets are stacked.
    pub(super) fn leaves(&self, id: NodeId, out: &mut Vec<Leaf>) {
        let Some(node) = self.nodes.get(id as usize) else {
            return;
        };
        let mut add = |leaf: Leaf| {
            if !out.contains(&leaf) {
                out.push(leaf)
            }
        };
        match node.op {
            Op::Signal(signal) => add(Leaf { signal, age: false }),
            Op::Age(signal) => add(Leaf { signal, age: true }),
            Op::Let(i) => {
                for leaf in self.let_leaves.get(i as usize).into_iter().flatten() {
                    add(*leaf);
                }
            }
            Op::Known(a) | Op::Not(a) | Op::Neg(a) => self.leaves(a, out),
            Op::Bin(_, a, b) | Op::Min(a, b) | Op::Max(a, b) => {
                self.leaves(a, out);
                self.leaves(b, out);
            }
            Op::Const(_) => {}
        }
    }

    /// A literal as a finite value, or a diagnostic: `1e999` or a duration of
    /// a thousand digits does not fit in a 64-bit float.
    pub(super) fn literal(&mut self, value: f64, span: Span) -> Option<f64> {
        if value.is_finite() {
            return Some(value);
        }
        self.diags.push(
            Diagnostic::new(
                format!("{} is too large to be a number", quoted(&self.text(span))),
                span,
            )
            .label("larger than 1.8e308")
            .help("write a smaller value"),
        );
        None
    }

    /// Compile an expression; `None` after reporting a problem in it.
    pub(super) fn expr(&mut self, e: &Expr) -> Option<NodeId> {
        match &e.kind {
            ExprKind::Bool(b) => Some(self.push(
                Op::Const(Val::B(Tri::from_bool(*b))),
                SignalType::Bool,
                e.span,
            )),
            ExprKind::Num(n) => {
                let n = self.literal(*n, e.span)?;
                Some(self.push(Op::Const(Val::N(Some(n))), SignalType::Number, e.span))
            }
            ExprKind::Duration(d) => {
                let d = self.literal(*d, e.span)?;
                Some(self.push(Op::Const(Val::N(Some(d))), SignalType::Duration, e.span))
            }
            ExprKind::Ident(name) => self.ident(name, e.span),
            ExprKind::Call {
                name,
                name_span,
                args,
            } => self.call(name, *name_span, args, e.span),
            ExprKind::Unary(op, x) => {
                let a = self.expr(x)?;
                let ty = self.ty(a);
                match op {
                    UnaryOp::Not if ty == SignalType::Bool => {
                        Some(self.push(Op::Not(a), ty, e.span))
                    }
                    UnaryOp::Not => {
                        self.diags.push(
                            Diagnostic::new(
                                format!(
                                    "`!` needs a bool, but `{}` is {}",
                                    self.text(x.span),
                                    describe_ty(ty)
                                ),
                                x.span,
                            )
                            .help("compare it first, e.g. `!(qget_ms < 1000)`"),
                        );
                        None
                    }
                    UnaryOp::Neg if ty != SignalType::Bool => {
                        Some(self.push(Op::Neg(a), ty, e.span))
                    }
                    UnaryOp::Neg => {
                        self.diags.push(Diagnostic::new(
                            format!(
                                "`-` needs a number or a duration, but `{}` is a bool",
                                self.text(x.span)
                            ),
                            x.span,
                        ));
                        None
                    }
                }
            }
            ExprKind::Binary(op, l, r) => {
                let optional = *op == BinOp::Coalesce;
                self.optional_depth += u32::from(optional);
                let a = self.expr(l);
                self.optional_depth -= u32::from(optional);
                let b = self.expr(r);
                let (a, b) = (a?, b?);
                let (ta, tb) = (self.ty(a), self.ty(b));
                self.binary_type(*op, l, ta, r, tb, e.span)
                    .map(|ty| self.push(Op::Bin(*op, a, b), ty, e.span))
            }
        }
    }

    pub(super) fn ident(&mut self, name: &str, span: Span) -> Option<NodeId> {
        if let Some(i) = self.lets.iter().position(|l| l.name == name) {
            let l = &self.lets[i];
            if l.root == u32::MAX {
                return None; // its definition was already reported
            }
            let ty = l.ty;
            return Some(self.push(Op::Let(i as u16), ty, span));
        }
        if let Some(id) = self.catalogue.lookup(name) {
            let def = self.catalogue.get(id);
            if self.optional_depth == 0 && !self.required.contains(&id) {
                self.required.push(id);
            }
            // Under a `??` the term is optional: without its source the
            // signal is unknown ("not configured") and the fallback decides.
            if !self.catalogue.is_enabled(id) && self.optional_depth == 0 {
                let source = def.source.label();
                let flag = def.source.enabled_by();
                self.diags.push(
                    Diagnostic::new(
                        format!("signal `{name}` comes from the {source} source, which is not configured"),
                        span,
                    )
                    .help(format!("set {flag} to enable it, or remove this term")),
                );
                return None;
            }
            let ty = def.ty;
            return Some(self.push(Op::Signal(id), ty, span));
        }
        if let Some(def_span) = self.later_lets.get(name).copied() {
            let (line, _) = line_col(self.src, def_span.start);
            self.diags.push(
                Diagnostic::new(format!("`{name}` is used before its `let`"), span).help(format!(
                    "move `let {name} = ...` (line {line}) above this line"
                )),
            );
            return None;
        }
        let lets: Vec<&str> = self.lets.iter().map(|l| l.name.as_str()).collect();
        let suggestion = did_you_mean(name, self.catalogue.names().chain(lets.iter().copied()));
        let mut d = Diagnostic::new(format!("unknown signal `{name}`"), span)
            .label("not a signal or a `let`");
        d = match suggestion {
            Some(s) => d.help(format!("did you mean `{s}`?")),
            None => d.help("`etcd-readiness-exporter signals` lists every signal"),
        };
        self.diags.push(d);
        None
    }

    pub(super) fn call(
        &mut self,
        name: &str,
        name_span: Span,
        args: &[Expr],
        span: Span,
    ) -> Option<NodeId> {
        let n = match name {
            "age" | "known" => 1,
            "min" | "max" => 2,
            _ => {
                self.unknown_function(name, name_span);
                return None;
            }
        };
        if !self.arity(name, args, n, span) {
            return None;
        }
        match name {
            "age" => self.age(args, span),
            "known" => {
                let a = self.expr(&args[0])?;
                Some(self.push(Op::Known(a), SignalType::Bool, span))
            }
            _ => self.min_max(name, args, span),
        }
    }

    /// Whether `name` got its `n` arguments; a diagnostic when not.
    pub(super) fn arity(&mut self, name: &str, args: &[Expr], n: usize, span: Span) -> bool {
        if args.len() == n {
            return true;
        }
        self.diags.push(Diagnostic::new(
            format!(
                "`{name}` takes {n} argument{}, but {} were given",
                if n == 1 { "" } else { "s" },
                args.len()
            ),
            span,
        ));
        false
    }

    /// `age(signal)`: its one argument must name a signal.
    pub(super) fn age(&mut self, args: &[Expr], span: Span) -> Option<NodeId> {
        let signal = match &args[0].kind {
            ExprKind::Ident(n) if self.catalogue.lookup(n).is_some() => Some(n.clone()),
            _ => None,
        };
        let Some(signal) = signal else {
            self.diags.push(
                Diagnostic::new("`age` takes a signal name", args[0].span)
                    .help("e.g. `age(snapshot_revision) < 10m`"),
            );
            return None;
        };
        // Resolve through `ident` for the not-configured check.
        let node = self.ident(&signal, args[0].span)?;
        let Op::Signal(id) = self.nodes[node as usize].op else {
            return None;
        };
        Some(self.push(Op::Age(id), SignalType::Duration, span))
    }

    /// `min(a, b)` or `max(a, b)`: two numbers or two durations.
    pub(super) fn min_max(&mut self, name: &str, args: &[Expr], span: Span) -> Option<NodeId> {
        let a = self.expr(&args[0]);
        let b = self.expr(&args[1]);
        let (a, b) = (a?, b?);
        let (ta, tb) = (self.ty(a), self.ty(b));
        if ta != tb || ta == SignalType::Bool {
            self.diags.push(Diagnostic::new(
                format!(
                    "`{name}` needs two numbers or two durations, but got {} and {}",
                    describe_ty(ta),
                    describe_ty(tb)
                ),
                span,
            ));
            return None;
        }
        let op = if name == "min" {
            Op::Min(a, b)
        } else {
            Op::Max(a, b)
        };
        Some(self.push(op, ta, span))
    }

    pub(super) fn unknown_function(&mut self, name: &str, name_span: Span) {
        let names = FUNCTIONS.iter().map(|(n, _)| *n);
        let mut d = Diagnostic::new(format!("unknown function `{name}`"), name_span);
        d = match did_you_mean(name, names) {
            Some(s) => d.help(format!("did you mean `{s}`?")),
            None => d.help("the functions are age, known, min and max"),
        };
        self.diags.push(d);
    }
}
