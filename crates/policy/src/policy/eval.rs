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

use std::fmt::Write as _;

use super::Policy;
use super::ast::BinOp;
use super::program::{NodeId, Op, Tri, Val};
use crate::signals::{Reading, SignalId, SignalType, Unknown, Value};

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

    /// Why the check rooted at `root` does not pass: the failing (or unknown)
    /// terms with the values observed, joined by `; `. `lets` as in [`eval`].
    pub fn explain(&self, root: NodeId, readings: &[Reading], lets: &[Val]) -> String {
        let vals = self.node_values(readings, lets);
        let mut walked = Walked::new(self.nodes.len());
        self.explain_with(root, readings, &vals, &mut walked, MAX_EXPLANATION_BYTES)
    }

    /// [`explain`](Self::explain) with every node's value already computed by
    /// [`node_values`](Self::node_values) and one [`Walked`] table, both
    /// shared by all checks of a report. At most `cap` bytes long (at most
    /// [`MAX_EXPLANATION_BYTES`]): further terms are counted, not shown.
    pub(super) fn explain_with(
        &self,
        root: NodeId,
        readings: &[Reading],
        vals: &[Val],
        walked: &mut Walked,
        cap: usize,
    ) -> String {
        let cap = cap.min(MAX_EXPLANATION_BYTES);
        let target = value_of(vals, root).tri();
        let mut terms: Vec<NodeId> = Vec::new();
        walked.next_round();
        self.blame(root, target, vals, walked, &mut terms);
        let mut out = String::new();
        let mut piece = String::new();
        for (i, t) in terms.iter().enumerate() {
            piece.clear();
            self.render_term(*t, readings, vals, &mut piece);
            let sep = if out.is_empty() { "" } else { "; " };
            if out.len() + sep.len() + piece.len() > cap {
                let mut shown = i;
                if out.is_empty() {
                    out.push_str(crate::text::cut_at(&piece, cap));
                    out.push_str(crate::text::CUT_MARKER);
                    shown += 1;
                }
                let more = terms.len() - shown;
                if more > 0 {
                    let _ = write!(
                        out,
                        "; and {more} more term{}",
                        if more == 1 { "" } else { "s" }
                    );
                }
                break;
            }
            out.push_str(sep);
            out.push_str(&piece);
        }
        out
    }

    /// Collect the smallest terms that make `id` evaluate to `result`
    /// (false or unknown), descending through `&&`, `||` and lets.
    ///
    /// `result` is always the node's own value, so what a node contributes
    /// depends only on the node: `walked` makes each node (and so each `let`
    /// body, however often the let is used) walked at most once, which keeps
    /// this linear in the size of the program.
    fn blame(
        &self,
        id: NodeId,
        result: Tri,
        vals: &[Val],
        walked: &mut Walked,
        out: &mut Vec<NodeId>,
    ) {
        let Some(node) = self.nodes.get(id as usize) else {
            return;
        };
        if !walked.first_visit(id) {
            return;
        }
        match node.op {
            Op::Bin(op @ (BinOp::And | BinOp::Or), a, b) => {
                let x = value_of(vals, a).tri();
                let y = value_of(vals, b).tri();
                // For `&&` false, each false side is to blame; for unknown, the
                // unknown sides. For `||`, every side that is not true.
                let culprit = |v: Tri| match (op, result) {
                    (BinOp::And, Tri::False) => v == Tri::False,
                    (BinOp::And, _) => v == Tri::Unknown,
                    (_, Tri::False) => v == Tri::False,
                    _ => v != Tri::True,
                };
                if culprit(x) {
                    self.blame(a, x, vals, walked, out);
                }
                if culprit(y) {
                    self.blame(b, y, vals, walked, out);
                }
            }
            // A let stands for its expression: blame what inside it failed.
            Op::Let(i) => match self.lets.get(i as usize) {
                Some(l) => self.blame(l.root, result, vals, walked, out),
                None => out.push(id),
            },
            _ => out.push(id),
        }
    }

    fn render_term(&self, id: NodeId, readings: &[Reading], vals: &[Val], out: &mut String) {
        let Some(node) = self.nodes.get(id as usize) else {
            return;
        };
        let text = crate::text::collapse_ws(node.span.text(&self.source));
        let v = value_of(vals, id).tri();
        if v == Tri::Unknown {
            // Say why: each unknown signal inside the term, with its reason.
            let mut unknowns = Vec::new();
            self.unknown_signals(id, readings, &mut unknowns);
            if unknowns.is_empty() {
                let _ = write!(
                    out,
                    "{text} is unknown (a division by zero or an unknown value)"
                );
            } else {
                for (i, s) in unknowns.iter().enumerate() {
                    if i > 0 {
                        out.push_str("; ");
                    }
                    let name = self.signal_name(*s);
                    let reason = readings
                        .get(s.index())
                        .map_or("never sampled".to_string(), describe_unknown);
                    let _ = write!(out, "{name} unknown: {reason}");
                }
            }
            return;
        }
        let _ = write!(
            out,
            "{text} is {}",
            if v == Tri::True { "true" } else { "false" }
        );
        // A bare signal or `!signal` says everything already.
        if matches!(node.op, Op::Signal(_)) {
            return;
        }
        if let Op::Not(a) = node.op
            && matches!(
                self.nodes.get(a as usize).map(|n| n.op),
                Some(Op::Signal(_))
            )
        {
            return;
        }
        let mut shown: Vec<String> = Vec::new();
        self.values_in(id, readings, vals, &mut shown);
        if !shown.is_empty() {
            let _ = write!(out, " ({})", shown.join(", "));
        }
    }

    /// `name = value` for the signals, `age()`s and lets a term mentions
    /// directly (not through a let: a let is shown by its own value).
    fn values_in(&self, id: NodeId, readings: &[Reading], vals: &[Val], out: &mut Vec<String>) {
        let Some(node) = self.nodes.get(id as usize) else {
            return;
        };
        let item = match node.op {
            Op::Signal(s) => {
                let r = readings.get(s.index());
                let v = signal_val(r, node.ty);
                Some(match (v, r.and_then(|r| r.pending)) {
                    (Val::AtLeast { last, .. }, Some(p)) => {
                        let mut t = format!(
                            "{} {}: {} pending for {}",
                            self.signal_name(s),
                            fmt_val(v, node.ty),
                            p.what,
                            fmt_duration(p.waited.as_secs_f64())
                        );
                        if let Some(last) = last {
                            let _ = write!(t, ", last {}", fmt_val(Val::N(Some(last)), node.ty));
                        }
                        t
                    }
                    _ => format!("{} = {}", self.signal_name(s), fmt_val(v, node.ty)),
                })
            }
            Op::Age(_) | Op::Let(_) => Some(format!(
                "{} = {}",
                crate::text::collapse_ws(node.span.text(&self.source)),
                fmt_val(value_of(vals, id), node.ty)
            )),
            _ => None,
        };
        if let Some(item) = item {
            if !out.contains(&item) {
                out.push(item);
            }
            return;
        }
        match node.op {
            Op::Known(a) | Op::Not(a) | Op::Neg(a) => self.values_in(a, readings, vals, out),
            Op::Bin(_, a, b) | Op::Min(a, b) | Op::Max(a, b) => {
                self.values_in(a, readings, vals, out);
                self.values_in(b, readings, vals, out);
            }
            _ => {}
        }
    }

    /// The unknown signals a term reads, in order of first mention. A `let`
    /// contributes from the list of signals its body reads (computed once by
    /// the checker) instead of being expanded at every use.
    fn unknown_signals(&self, id: NodeId, readings: &[Reading], out: &mut Vec<SignalId>) {
        let Some(node) = self.nodes.get(id as usize) else {
            return;
        };
        match node.op {
            Op::Signal(s) => push_if_unknown(s, false, readings, out),
            Op::Age(s) => push_if_unknown(s, true, readings, out),
            Op::Let(i) => {
                for leaf in self.let_leaves.get(i as usize).into_iter().flatten() {
                    push_if_unknown(leaf.signal, leaf.age, readings, out);
                }
            }
            Op::Known(_) | Op::Const(_) => {}
            Op::Not(a) | Op::Neg(a) => self.unknown_signals(a, readings, out),
            Op::Bin(_, a, b) | Op::Min(a, b) | Op::Max(a, b) => {
                self.unknown_signals(a, readings, out);
                self.unknown_signals(b, readings, out);
            }
        }
    }
}

/// Longest explanation of one check, in bytes; further terms are counted,
/// not shown (`/readyz` shows at most 1,000 bytes of it anyway).
pub const MAX_EXPLANATION_BYTES: usize = 8 * 1024;

/// Longest the explanations of one report are together: what an evaluation
/// spends on words is bounded whatever the number of failing checks (the
/// kubelet reads 10 KB of `/readyz`; the page and JSON show the same
/// words). Checks past it say so instead of being explained.
pub const MAX_REPORT_EXPLANATION_BYTES: usize = 2 * 1024;

/// What a failing check says once its report's explanations reached
/// [`MAX_REPORT_EXPLANATION_BYTES`].
pub const NOT_EXPLAINED: &str =
    "not explained: the failing checks before it used this evaluation's 2 KiB of explanations";

/// Which nodes the current explanation has walked, shared by the checks of
/// one report: a node is walked in this round when its mark is the round's
/// number, so starting the next check's explanation is one increment, not
/// clearing a table the size of the program (every check of a large policy
/// cleared one such table per evaluation).
pub(super) struct Walked {
    marks: Vec<u32>,
    round: u32,
}

impl Walked {
    pub(super) fn new(nodes: usize) -> Self {
        Walked {
            marks: vec![0; nodes],
            round: 0,
        }
    }

    fn next_round(&mut self) {
        self.round = self.round.wrapping_add(1);
        if self.round == 0 {
            self.marks.fill(0);
            self.round = 1;
        }
    }

    /// Whether `id` is walked for the first time this round (and mark it).
    fn first_visit(&mut self, id: NodeId) -> bool {
        match self.marks.get_mut(id as usize) {
            Some(m) if *m != self.round => {
                *m = self.round;
                true
            }
            _ => false,
        }
    }
}

fn value_of(vals: &[Val], id: NodeId) -> Val {
    vals.get(id as usize).copied().unwrap_or(Val::N(None))
}

/// `signal` (or its `age()`) is unknown in `readings`: add it once.
fn push_if_unknown(signal: SignalId, age: bool, readings: &[Reading], out: &mut Vec<SignalId>) {
    let unknown = readings.get(signal.index()).is_none_or(|r| {
        if age {
            r.last_good_age.is_none()
        } else {
            r.value.is_err()
        }
    });
    if unknown && !out.contains(&signal) {
        out.push(signal);
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

fn signal_val(r: Option<&Reading>, ty: SignalType) -> Val {
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

/// Why a reading is unknown, e.g. `last sample failed 3.2s ago: request timed out`
/// (and, with a measurement in flight, `; read pending for 0.3s`).
pub fn describe_unknown(r: &Reading) -> String {
    let mut s = describe_unknown_only(r);
    if let Some(p) = &r.pending
        && !matches!(r.value, Err(Unknown::Outdated { .. }))
    {
        let _ = write!(
            s,
            "; {} pending for {}",
            p.what,
            fmt_duration(p.waited.as_secs_f64())
        );
    }
    s
}

fn describe_unknown_only(r: &Reading) -> String {
    let Err(unknown) = &r.value else {
        return "known".to_string();
    };
    match unknown {
        Unknown::NeverSampled => "never sampled".to_string(),
        Unknown::Failed { error, ago } => format!(
            "last sample failed {} ago: {error}",
            fmt_duration(ago.as_secs_f64())
        ),
        Unknown::Outdated {
            waited,
            trust,
            contended,
            what,
        } if contended.is_zero() => format!(
            "the last answer is outdated: a {what} has been pending for {}, longer than {}",
            fmt_duration(waited.as_secs_f64()),
            fmt_duration(trust.as_secs_f64())
        ),
        Unknown::Outdated {
            waited,
            trust,
            contended,
            what,
        } => format!(
            "the last answer is outdated: a {what} has been pending for {}, longer than {} \
             ({} plus {} while the node's CPU was contended)",
            fmt_duration(waited.as_secs_f64()),
            fmt_duration(trust.as_secs_f64()),
            fmt_duration(trust.saturating_sub(*contended).as_secs_f64()),
            fmt_duration(contended.as_secs_f64())
        ),
        Unknown::Stale { age, bound } => format!(
            "last good sample is {} old (stale after {})",
            fmt_duration(age.as_secs_f64()),
            fmt_duration(bound.as_secs_f64())
        ),
    }
}

pub fn fmt_val(v: Val, ty: SignalType) -> String {
    match v {
        Val::B(Tri::True) => "true".to_string(),
        Val::B(Tri::False) => "false".to_string(),
        Val::B(Tri::Unknown) | Val::N(None) => "unknown".to_string(),
        Val::N(Some(n)) if ty == SignalType::Duration => fmt_duration(n),
        Val::N(Some(n)) => fmt_num(n),
        Val::AtLeast { bound, .. } => format!("≥ {}", fmt_val(Val::N(Some(bound)), ty)),
    }
}

use crate::text::{fmt_duration, fmt_num};

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
