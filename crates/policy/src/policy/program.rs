//! The compiled form of a policy: a flat, typed array of nodes that the
//! evaluator walks without allocating, plus the checks and lets that point
//! into it. Built only by the checker, so every node here is well-typed.

use std::time::Duration;

use super::ast::{BinOp, Span};
use crate::signals::{SignalId, SignalType};
use crate::verdict::CheckKind;

pub type NodeId = u32;

/// Three-valued (Kleene) truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tri {
    True,
    False,
    Unknown,
}

impl Tri {
    pub fn from_bool(b: bool) -> Tri {
        if b { Tri::True } else { Tri::False }
    }
}

/// A value during evaluation. Numbers and durations (seconds) share `N`;
/// `None` is unknown.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val {
    B(Tri),
    N(Option<f64>),
    /// A number with a newer measurement in flight: that measurement will be
    /// at least `bound`; `last` is the last answered one (or unknown). A
    /// comparison the bound decides by itself is decided by it (`x < 1000`
    /// is false once `bound ≥ 1000`); any other use sees `last`, as if
    /// nothing were pending. See `eval`.
    AtLeast {
        last: Option<f64>,
        bound: f64,
    },
}

impl Val {
    pub fn is_known(self) -> bool {
        !matches!(
            self,
            Val::B(Tri::Unknown) | Val::N(None) | Val::AtLeast { last: None, .. }
        )
    }

    pub fn tri(self) -> Tri {
        match self {
            Val::B(t) => t,
            // Unreachable for checked programs; unknown is the safe answer.
            Val::N(_) | Val::AtLeast { .. } => Tri::Unknown,
        }
    }

    pub fn num(self) -> Option<f64> {
        match self {
            Val::N(n) | Val::AtLeast { last: n, .. } => n,
            Val::B(_) => None,
        }
    }

    /// The interval the value is known to lie in, for comparisons: a point
    /// for a known number, `[bound, +∞)` for a pending one.
    pub fn interval(self) -> Option<(f64, f64)> {
        match self {
            Val::N(Some(n)) => Some((n, n)),
            Val::AtLeast { bound, .. } => Some((bound, f64::INFINITY)),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    Const(Val),
    Signal(SignalId),
    /// The value of the n-th `let`.
    Let(u16),
    /// Time since the signal's last good sample.
    Age(SignalId),
    Known(NodeId),
    Not(NodeId),
    Neg(NodeId),
    /// Logical (`&& || ??`), comparison and arithmetic operators.
    Bin(BinOp, NodeId, NodeId),
    Min(NodeId, NodeId),
    Max(NodeId, NodeId),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub ty: SignalType,
    pub span: Span,
}

/// A signal an expression reads: its value, or (`age`) its `age()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaf {
    pub signal: SignalId,
    pub age: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LetDef {
    pub name: String,
    pub root: NodeId,
    pub ty: SignalType,
}

/// One check of a compiled policy.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckDef {
    pub name: String,
    pub kind: CheckKind,
    pub root: NodeId,
    /// The expression as written, whitespace collapsed; with the name, the key
    /// under which hold-down state survives a reload.
    pub expr_text: String,
    /// The hold-down (`for`): how long a passing check keeps passing after its
    /// expression stops being true.
    pub hold: Option<Duration>,
    /// The recovery hold (`recover`): how long the expression must be true
    /// without a break before a check that has failed (or just started)
    /// passes again.
    pub recover: Option<Duration>,
    /// Signals the check reads, directly or through lets, in order of mention.
    pub signals: Vec<SignalId>,
}
