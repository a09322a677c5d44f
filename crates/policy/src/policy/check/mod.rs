//! The checker: resolves names and types of a parsed policy against the signal
//! catalogue and compiles it into a [`Program`](super::program). Everything
//! that could go wrong at evaluation time is rejected here, and all problems
//! are reported at once.
//!
//! This file holds the entry point ([`compile`]), its result and the
//! expression checker's state; the ideas are in their own files:
//! `statements.rs` (statements → checks and lets, bare expressions),
//! `expr.rs` (an expression → nodes: names, literals, calls), `types.rs`
//! (the operators' type rules and their messages), `timing.rs` (`for` and
//! `recover` clauses).

mod expr;
mod statements;
mod timing;
mod types;

use std::collections::HashMap;

use super::ast::{Span, Stmt};
use super::diag::Diagnostic;
use super::limits;
use super::program::{CheckDef, Leaf, LetDef, Node, NodeId, Op};
use crate::signals::{Catalogue, SignalId, SignalType};
use statements::PolicyCompiler;

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

fn describe_ty(ty: SignalType) -> &'static str {
    match ty {
        SignalType::Bool => "a bool",
        SignalType::Number => "a number",
        SignalType::Duration => "a duration",
    }
}

impl Checker<'_> {
    pub(super) fn push(&mut self, op: Op, ty: SignalType, span: Span) -> NodeId {
        self.nodes.push(Node { op, ty, span });
        (self.nodes.len() - 1) as NodeId
    }

    pub(super) fn ty(&self, id: NodeId) -> SignalType {
        self.nodes[id as usize].ty
    }

    pub(super) fn text(&self, span: Span) -> String {
        crate::text::collapse_ws(span.text(self.src))
    }
}
