//! The checker: resolves names and types of a parsed policy against the signal
//! catalogue and compiles it into a [`Program`](super::program). Everything
//! that could go wrong at evaluation time is rejected here, and all problems
//! are reported at once.

use std::collections::HashMap;
use std::time::Duration;

use super::ast::{BinOp, Clause, ClauseKind, Expr, ExprKind, Span, Stmt, StmtKind, UnaryOp};
use super::diag::{Diagnostic, did_you_mean};
use super::limits;
use super::program::{CheckDef, Leaf, LetDef, Node, NodeId, Op, Tri, Val};
use crate::signals::{Catalogue, SignalId, SignalType};
use crate::verdict::CheckKind;

/// Functions a policy may call.
pub const FUNCTIONS: &[(&str, &str)] = &[
    (
        "age",
        "age(signal): duration since the signal's last good sample",
    ),
    ("known", "known(expr): true when expr is not unknown"),
    ("min", "min(a, b): the smaller of two numbers or durations"),
    ("max", "max(a, b): the larger of two numbers or durations"),
];

pub struct Compiled {
    pub nodes: Vec<Node>,
    pub lets: Vec<LetDef>,
    pub checks: Vec<CheckDef>,
    /// Per `let`, the signals its expression reads (through earlier lets too),
    /// in order of first mention: computed once, so nothing ever expands a
    /// `let` at each of its uses.
    pub let_leaves: Vec<Vec<Leaf>>,
    /// Signals named outside every `??` left-hand side, in order of first
    /// mention: a policy needs their sources configured; the others are
    /// optional terms.
    pub required: Vec<SignalId>,
}

struct Checker<'a> {
    src: &'a str,
    catalogue: &'a Catalogue,
    nodes: Vec<Node>,
    lets: Vec<LetDef>,
    /// Parallel to `lets`: see [`Compiled::let_leaves`].
    let_leaves: Vec<Vec<Leaf>>,
    /// Names of lets defined anywhere in the file, to tell "used before its let"
    /// from "unknown".
    later_lets: HashMap<String, Span>,
    /// How many `??` left-hand sides enclose the expression being checked:
    /// inside one, a signal whose source is not configured is allowed (it
    /// reads as unknown and the fallback decides).
    optional_depth: u32,
    /// Signals named at least once outside every `??` left-hand side (or in
    /// a `let`): `serve` needs their sources.
    required: Vec<SignalId>,
    diags: Vec<Diagnostic>,
}

pub fn compile(
    stmts: &[Stmt],
    src: &str,
    catalogue: &Catalogue,
) -> Result<Compiled, Vec<Diagnostic>> {
    let mut p = PolicyCompiler::new(stmts, src, catalogue);
    let mut reported_size = false;
    for stmt in stmts {
        if p.c.nodes.len() > limits::MAX_NODES && !std::mem::replace(&mut reported_size, true) {
            // The statement before this one crossed the limit; say where the
            // policy stopped fitting rather than pointing at the whole file.
            p.c.diags.push(too_many_nodes(stmt_span(stmt)));
        }
        match stmt {
            Stmt::Let {
                name,
                name_span,
                expr,
            } => p.define_let(name, *name_span, expr),
            Stmt::Check {
                kind,
                name,
                expr,
                clauses,
                span,
            } => p.define_checks(*kind, name, expr, clauses, *span),
        }
    }
    let PolicyCompiler { mut c, checks, .. } = p;
    if stmts.iter().all(|s| matches!(s, Stmt::Let { .. })) {
        c.diags.push(
            Diagnostic::new("the policy has no checks", Span::new(src.len(), src.len())).help(
                "add an expression such as `leader && qget_ms < 1000`, or `check NAME: EXPR` lines",
            ),
        );
    }
    if c.nodes.len() > limits::MAX_NODES && !reported_size {
        let last = stmts.last().map_or(Span::new(0, 0), stmt_span);
        c.diags.push(too_many_nodes(last));
    }
    if c.diags.is_empty() {
        Ok(Compiled {
            nodes: c.nodes,
            lets: c.lets,
            checks,
            let_leaves: c.let_leaves,
            required: c.required,
        })
    } else {
        c.diags.sort_by_key(|d| d.span.start);
        Err(c.diags)
    }
}

/// A check's timing clauses, checked.
#[derive(Clone, Copy, Default)]
struct Timing {
    hold: Option<Duration>,
    recover: Option<Duration>,
}

/// A term of a check statement and its name, if the statement gave one.
type Term<'e> = (&'e Expr, Option<(String, Span)>);

/// [`compile`]'s state across statements: the expression checker, the
/// checks so far and the rules about bare expressions.
struct PolicyCompiler<'a> {
    c: Checker<'a>,
    checks: Vec<CheckDef>,
    check_spans: HashMap<String, Span>,
    /// The policy has `check`/`warn` lines, so a bare expression is an error.
    has_named: bool,
    seen_bare: bool,
    /// A second bare expression was reported (once is enough).
    reported_extra: bool,
}

impl<'a> PolicyCompiler<'a> {
    fn new(stmts: &[Stmt], src: &'a str, catalogue: &'a Catalogue) -> Self {
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
    fn define_checks(
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
    fn define_let(&mut self, name: &str, name_span: Span, expr: &Expr) {
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
            let (line, _) = super::diag::line_col(c.src, prev.start);
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

fn quoted(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 24 {
        return format!("`{text}`");
    }
    let head: String = chars[..12].iter().collect();
    let tail: String = chars[chars.len() - 6..].iter().collect();
    format!("`{head}…{tail}` ({} characters)", chars.len())
}

fn stmt_span(stmt: &Stmt) -> Span {
    match stmt {
        Stmt::Let {
            name_span, expr, ..
        } => name_span.to(expr.span),
        Stmt::Check { span, .. } => *span,
    }
}

fn too_many_nodes(span: Span) -> Diagnostic {
    Diagnostic::new(
        format!(
            "the policy compiles to more than {} nodes by the end of this statement",
            limits::MAX_NODES
        ),
        Span::new(span.start, span.start),
    )
    .help("each name, literal, operator and call is a node; put repeated parts in a `let` (a use of a `let` is one node)")
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

fn describe_ty(ty: SignalType) -> &'static str {
    match ty {
        SignalType::Bool => "a bool",
        SignalType::Number => "a number",
        SignalType::Duration => "a duration",
    }
}

impl Checker<'_> {
    fn push(&mut self, op: Op, ty: SignalType, span: Span) -> NodeId {
        self.nodes.push(Node { op, ty, span });
        (self.nodes.len() - 1) as NodeId
    }

    fn ty(&self, id: NodeId) -> SignalType {
        self.nodes[id as usize].ty
    }

    fn text(&self, span: Span) -> String {
        crate::text::collapse_ws(span.text(self.src))
    }

    fn first_signal(&self, e: &Expr) -> Option<String> {
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
    fn leaves(&self, id: NodeId, out: &mut Vec<Leaf>) {
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

    /// The timing clauses of one statement, or diagnostics: each clause at
    /// most once, each duration within its limits, no `recover` on a `warn`.
    fn timing(&mut self, kind: StmtKind, clauses: &[Clause]) -> Timing {
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
    fn recover(&mut self, secs: f64, span: Span) -> Option<Duration> {
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
    fn hold_down(&mut self, secs: f64, span: Span) -> Option<Duration> {
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
    fn hold_clause(
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

    /// A literal as a finite value, or a diagnostic: `1e999` or a duration of
    /// a thousand digits does not fit in a 64-bit float.
    fn literal(&mut self, value: f64, span: Span) -> Option<f64> {
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
    fn expr(&mut self, e: &Expr) -> Option<NodeId> {
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

    fn ident(&mut self, name: &str, span: Span) -> Option<NodeId> {
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
            let (line, _) = super::diag::line_col(self.src, def_span.start);
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

    fn call(&mut self, name: &str, name_span: Span, args: &[Expr], span: Span) -> Option<NodeId> {
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
    fn arity(&mut self, name: &str, args: &[Expr], n: usize, span: Span) -> bool {
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
    fn age(&mut self, args: &[Expr], span: Span) -> Option<NodeId> {
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
    fn min_max(&mut self, name: &str, args: &[Expr], span: Span) -> Option<NodeId> {
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

    fn unknown_function(&mut self, name: &str, name_span: Span) {
        let names = FUNCTIONS.iter().map(|(n, _)| *n);
        let mut d = Diagnostic::new(format!("unknown function `{name}`"), name_span);
        d = match did_you_mean(name, names) {
            Some(s) => d.help(format!("did you mean `{s}`?")),
            None => d.help("the functions are age, known, min and max"),
        };
        self.diags.push(d);
    }

    fn binary_type(
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
    fn logic_operands(
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
    fn ordered_operands(&mut self, sym: &str, operands: [(&Expr, SignalType); 2]) -> bool {
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

    fn mismatch(
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
