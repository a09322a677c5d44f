//! Evaluation with three-valued (Kleene) logic, and explanations.
//!
//! [`Policy::eval`] computes a node's value from signal readings and the
//! already-computed `let` values; it allocates nothing and cannot panic on a
//! checked program (lookups are bounds-checked and fall back to unknown).
//! [`Policy::explain`] runs only for checks that do not pass and renders the
//! failing terms with the values observed.
//!
//! A signal with a measurement in flight ([`Reading::pending`]) evaluates to
//! [`Val::AtLeast`]: the in-flight result is known only from below. A
//! comparison that this lower bound decides on its own is decided by it —
//! `qget_ms < 1000` is false the moment a read has been pending for
//! 1000 ms, and is explained as `qget_ms ≥ 1000: read pending for 1.0s`.
//! Where the bound decides nothing, the last answered value is used, exactly
//! as before the read was sent, so a read in flight for 2 ms never turns a
//! passing check unknown. Arithmetic keeps the bound where it stays a lower
//! bound (adding, subtracting a known number, scaling by a positive one,
//! `min`/`max`) and drops it elsewhere (negation, subtracting from).
//!
//! The explanations (why a check does not pass, in words, within a byte
//! budget) are in `explain.rs`.

mod explain;

pub(super) use explain::Walked;
pub use explain::{
    MAX_EXPLANATION_BYTES, MAX_REPORT_EXPLANATION_BYTES, NOT_EXPLAINED, describe_unknown, fmt_val,
};

use super::Policy;
use super::ast::BinOp;
use super::program::{NodeId, Op, Tri, Val};
use crate::signals::{Reading, SignalType, Value};

fn and(a: Tri, b: Tri) -> Tri {
    match (a, b) {
        (Tri::False, _) | (_, Tri::False) => Tri::False,
        (Tri::True, Tri::True) => Tri::True,
        _ => Tri::Unknown,
    }
}

fn or(a: Tri, b: Tri) -> Tri {
    match (a, b) {
        (Tri::True, _) | (_, Tri::True) => Tri::True,
        (Tri::False, Tri::False) => Tri::False,
        _ => Tri::Unknown,
    }
}

fn not(a: Tri) -> Tri {
    match a {
        Tri::True => Tri::False,
        Tri::False => Tri::True,
        Tri::Unknown => Tri::Unknown,
    }
}

/// Non-finite results (division by zero, overflow) are unknown.
fn finite(n: f64) -> Option<f64> {
    n.is_finite().then_some(n)
}

impl Policy {
    /// Evaluate node `id`. `lets` holds the values of the lets computed so far.
    ///
    /// A use of a `let` reads its value from `lets` (computed once per round
    /// by the [`Evaluator`](super::Evaluator)), so evaluating a check visits
    /// each node of its own expression at most once: evaluation costs what the
    /// text costs, however often a `let` is used.
    pub fn eval(&self, id: NodeId, readings: &[Reading], lets: &[Val]) -> Val {
        self.apply(id, readings, lets, &|child| {
            self.eval(child, readings, lets)
        })
    }

    /// The value of every node, in one pass in id order (children always have
    /// smaller ids than their parents). For explanations, which ask for the
    /// value of many nodes of the same check.
    pub(super) fn node_values(&self, readings: &[Reading], lets: &[Val]) -> Vec<Val> {
        let mut vals: Vec<Val> = Vec::with_capacity(self.nodes.len());
        for id in 0..self.nodes.len() {
            let v = self.apply(id as NodeId, readings, lets, &|child| {
                vals.get(child as usize).copied().unwrap_or(Val::N(None))
            });
            vals.push(v);
        }
        vals
    }

    /// The semantics of one node, given a way to get its operands' values:
    /// recursively ([`eval`](Self::eval)) or from a table
    /// ([`node_values`](Self::node_values)). `&&`, `||` and `??` ask for their
    /// right operand only when it decides the result.
    fn apply(
        &self,
        id: NodeId,
        readings: &[Reading],
        lets: &[Val],
        value: &impl Fn(NodeId) -> Val,
    ) -> Val {
        let Some(node) = self.nodes.get(id as usize) else {
            return Val::B(Tri::Unknown);
        };
        match node.op {
            Op::Const(v) => v,
            Op::Signal(s) => signal_val(readings.get(s.index()), node.ty),
            Op::Let(i) => lets.get(i as usize).copied().unwrap_or(Val::N(None)),
            Op::Age(s) => Val::N(
                readings
                    .get(s.index())
                    .and_then(|r| r.last_good_age)
                    .map(|d| d.as_secs_f64()),
            ),
            Op::Known(a) => Val::B(Tri::from_bool(value(a).is_known())),
            Op::Not(a) => Val::B(not(value(a).tri())),
            Op::Neg(a) => Val::N(value(a).num().map(|n| -n)),
            Op::Min(a, b) | Op::Max(a, b) => {
                min_max(matches!(node.op, Op::Min(..)), value(a), value(b))
            }
            Op::Bin(op, a, b) => bin(op, value(a), || value(b)),
        }
    }
}

/// `min` or `max` of two numbers; a pending bound is kept where it still
/// bounds the result from below.
fn min_max(is_min: bool, x: Val, y: Val) -> Val {
    let pick = |p: f64, q: f64| if is_min { p.min(q) } else { p.max(q) };
    let last = match (x.num(), y.num()) {
        (Some(p), Some(q)) => Some(pick(p, q)),
        _ => None,
    };
    match (x, y) {
        (Val::AtLeast { bound, .. }, Val::N(Some(k)))
        | (Val::N(Some(k)), Val::AtLeast { bound, .. }) => {
            if is_min && k <= bound {
                // min(≥ bound, k) is k exactly.
                Val::N(Some(k))
            } else {
                Val::AtLeast {
                    last,
                    bound: pick(bound, k),
                }
            }
        }
        (Val::AtLeast { bound: p, .. }, Val::AtLeast { bound: q, .. }) => Val::AtLeast {
            last,
            bound: pick(p, q),
        },
        _ => Val::N(last),
    }
}

/// A comparison decided by the intervals the operands lie in alone
/// (`None` when they overlap in a way that leaves it open).
fn by_interval(op: BinOp, x: Val, y: Val) -> Option<bool> {
    let ((xl, xh), (yl, yh)) = (x.interval()?, y.interval()?);
    let lt = |al: f64, ah: f64, bl: f64, bh: f64| {
        if ah < bl {
            Some(true)
        } else if al >= bh {
            Some(false)
        } else {
            None
        }
    };
    let le = |al: f64, ah: f64, bl: f64, bh: f64| {
        if ah <= bl {
            Some(true)
        } else if al > bh {
            Some(false)
        } else {
            None
        }
    };
    match op {
        BinOp::Lt => lt(xl, xh, yl, yh),
        BinOp::Le => le(xl, xh, yl, yh),
        BinOp::Gt => lt(yl, yh, xl, xh),
        BinOp::Ge => le(yl, yh, xl, xh),
        BinOp::Eq | BinOp::Ne => {
            let disjoint = xh < yl || yh < xl;
            disjoint.then_some(op == BinOp::Ne)
        }
        _ => None,
    }
}

/// Arithmetic with a pending operand: the result keeps a lower bound where
/// the operation is monotone increasing in it, and is the plain result on
/// the last values elsewhere.
fn arith_pending(op: BinOp, x: Val, y: Val, last: Option<f64>) -> Val {
    let lo = |v: Val| match v {
        Val::AtLeast { bound, .. } => Some(bound),
        Val::N(Some(n)) => Some(n),
        _ => None,
    };
    let bound = match (op, x, y) {
        (BinOp::Add, _, _) => lo(x).zip(lo(y)).map(|(p, q)| p + q),
        (BinOp::Sub, Val::AtLeast { bound, .. }, Val::N(Some(k))) => Some(bound - k),
        (BinOp::Mul, Val::AtLeast { bound, .. }, Val::N(Some(k)))
        | (BinOp::Mul, Val::N(Some(k)), Val::AtLeast { bound, .. })
            if k > 0.0 =>
        {
            Some(bound * k)
        }
        (BinOp::Div, Val::AtLeast { bound, .. }, Val::N(Some(k))) if k > 0.0 => Some(bound / k),
        _ => None,
    };
    match bound.and_then(finite) {
        Some(bound) => Val::AtLeast { last, bound },
        None => Val::N(last),
    }
}

/// A binary operator on its left value and (lazily) its right one.
fn bin(op: BinOp, x: Val, y: impl FnOnce() -> Val) -> Val {
    let pending = |v: Val| matches!(v, Val::AtLeast { .. });
    if pending(x) && !matches!(op, BinOp::And | BinOp::Or | BinOp::Coalesce) {
        return bin_pending(op, x, y());
    }
    if matches!(x, Val::N(_)) && op != BinOp::Coalesce {
        // Numeric operators: a pending right operand is handled alike.
        let y = y();
        if pending(y) {
            return bin_pending(op, x, y);
        }
        return bin_plain(op, x, || y);
    }
    bin_plain(op, x, y)
}

/// A binary operator applied to two values, as evaluation applies it (for
/// [`super::settle`], which classes samples by comparisons).
pub(super) fn binary(op: BinOp, x: Val, y: Val) -> Val {
    bin(op, x, || y)
}

/// A numeric operator with at least one pending operand.
fn bin_pending(op: BinOp, x: Val, y: Val) -> Val {
    match op {
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => {
            match by_interval(op, x, y) {
                Some(b) => Val::B(Tri::from_bool(b)),
                // Not decided by the bound: as if nothing were pending.
                None => bin_plain(op, Val::N(x.num()), || Val::N(y.num())),
            }
        }
        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => {
            let last = match bin_plain(op, Val::N(x.num()), || Val::N(y.num())) {
                Val::N(n) => n,
                _ => None,
            };
            arith_pending(op, x, y, last)
        }
        // Unreachable for checked programs (logical operators take bools).
        BinOp::And | BinOp::Or | BinOp::Coalesce => bin_plain(op, x, || y),
    }
}

/// A binary operator without pending operands.
fn bin_plain(op: BinOp, x: Val, y: impl FnOnce() -> Val) -> Val {
    match op {
        // Kleene: a false operand decides `&&` even if the other is unknown.
        BinOp::And => {
            let x = x.tri();
            if x == Tri::False {
                return Val::B(Tri::False);
            }
            Val::B(and(x, y().tri()))
        }
        BinOp::Or => {
            let x = x.tri();
            if x == Tri::True {
                return Val::B(Tri::True);
            }
            Val::B(or(x, y().tri()))
        }
        BinOp::Coalesce => {
            if x.is_known() {
                x
            } else {
                y()
            }
        }
        BinOp::Eq | BinOp::Ne => {
            let eq = match (x, y()) {
                (Val::B(p), Val::B(q)) if p != Tri::Unknown && q != Tri::Unknown => Some(p == q),
                (Val::N(Some(p)), Val::N(Some(q))) => Some(p == q),
                _ => None,
            };
            Val::B(match eq {
                None => Tri::Unknown,
                Some(e) => Tri::from_bool(if op == BinOp::Eq { e } else { !e }),
            })
        }
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => Val::B(match (x.num(), y().num()) {
            (Some(x), Some(y)) => compare(op, x, y).map_or(Tri::Unknown, Tri::from_bool),
            _ => Tri::Unknown,
        }),
        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => Val::N(match (x.num(), y().num()) {
            (Some(x), Some(y)) => arithmetic(op, x, y).and_then(finite),
            _ => None,
        }),
    }
}

/// A comparison operator applied to two numbers; `None` for an operator
/// that is not one (every operator is named, so a new one must say).
fn compare(op: BinOp, x: f64, y: f64) -> Option<bool> {
    match op {
        BinOp::Lt => Some(x < y),
        BinOp::Le => Some(x <= y),
        BinOp::Gt => Some(x > y),
        BinOp::Ge => Some(x >= y),
        BinOp::Or
        | BinOp::And
        | BinOp::Coalesce
        | BinOp::Eq
        | BinOp::Ne
        | BinOp::Add
        | BinOp::Sub
        | BinOp::Mul
        | BinOp::Div => None,
    }
}

/// An arithmetic operator applied to two numbers; `None` for an operator
/// that is not one.
fn arithmetic(op: BinOp, x: f64, y: f64) -> Option<f64> {
    match op {
        BinOp::Add => Some(x + y),
        BinOp::Sub => Some(x - y),
        BinOp::Mul => Some(x * y),
        BinOp::Div => Some(x / y),
        BinOp::Or
        | BinOp::And
        | BinOp::Coalesce
        | BinOp::Eq
        | BinOp::Ne
        | BinOp::Lt
        | BinOp::Le
        | BinOp::Gt
        | BinOp::Ge => None,
    }
}

/// A reading as a value of its type: a pending measurement is a lower
/// bound, a missing or mistyped one unknown.
pub(super) fn signal_val(r: Option<&Reading>, ty: SignalType) -> Val {
    if let (
        Some(Reading {
            pending: Some(p), ..
        }),
        SignalType::Number | SignalType::Duration,
    ) = (r, ty)
        && let Some(bound) = p.at_least.filter(|b| b.is_finite())
    {
        let last = match r.and_then(Reading::get) {
            Some(Value::Num(n)) => finite(n),
            _ => None,
        };
        return Val::AtLeast { last, bound };
    }
    match (r.and_then(Reading::get), ty) {
        (Some(Value::Bool(b)), SignalType::Bool) => Val::B(Tri::from_bool(b)),
        (Some(Value::Num(n)), SignalType::Number | SignalType::Duration) => Val::N(finite(n)),
        // Missing, or a source that wrote the wrong type: unknown, never a panic.
        (_, SignalType::Bool) => Val::B(Tri::Unknown),
        _ => Val::N(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kleene_tables() {
        use Tri::*;
        // Kleene's strong three-valued logic, written out: (a, b, a && b, a || b).
        let table = [
            (True, True, True, True),
            (True, False, False, True),
            (True, Unknown, Unknown, True),
            (False, True, False, True),
            (False, False, False, False),
            (False, Unknown, False, Unknown),
            (Unknown, True, Unknown, True),
            (Unknown, False, False, Unknown),
            (Unknown, Unknown, Unknown, Unknown),
        ];
        for (a, b, and_ab, or_ab) in table {
            assert_eq!(and(a, b), and_ab, "{a:?} && {b:?}");
            assert_eq!(or(a, b), or_ab, "{a:?} || {b:?}");
        }
        for (a, not_a) in [(True, False), (False, True), (Unknown, Unknown)] {
            assert_eq!(not(a), not_a, "!{a:?}");
        }
    }
}
