//! Evaluation with three-valued (Kleene) logic, and explanations.
//!
//! [`Policy::eval`] computes a node's value from signal readings and the
//! already-computed `let` values; it allocates nothing and cannot panic on a
//! checked program (lookups are bounds-checked and fall back to unknown).
//! [`Policy::explain`] runs only for checks that do not pass and renders the
//! failing terms with the values observed.

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
    pub fn eval(&self, id: NodeId, readings: &[Reading], lets: &[Val]) -> Val {
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
            Op::Known(a) => Val::B(Tri::from_bool(self.eval(a, readings, lets).is_known())),
            Op::Not(a) => Val::B(not(self.eval(a, readings, lets).tri())),
            Op::Neg(a) => Val::N(self.eval(a, readings, lets).num().map(|n| -n)),
            Op::Min(a, b) | Op::Max(a, b) => {
                let x = self.eval(a, readings, lets).num();
                let y = self.eval(b, readings, lets).num();
                Val::N(match (x, y) {
                    (Some(x), Some(y)) if matches!(node.op, Op::Min(..)) => Some(x.min(y)),
                    (Some(x), Some(y)) => Some(x.max(y)),
                    _ => None,
                })
            }
            Op::Bin(op, a, b) => self.bin(op, a, b, readings, lets),
        }
    }

    fn bin(&self, op: BinOp, a: NodeId, b: NodeId, readings: &[Reading], lets: &[Val]) -> Val {
        match op {
            // Kleene: a false operand decides `&&` even if the other is unknown.
            BinOp::And => {
                let x = self.eval(a, readings, lets).tri();
                if x == Tri::False {
                    return Val::B(Tri::False);
                }
                Val::B(and(x, self.eval(b, readings, lets).tri()))
            }
            BinOp::Or => {
                let x = self.eval(a, readings, lets).tri();
                if x == Tri::True {
                    return Val::B(Tri::True);
                }
                Val::B(or(x, self.eval(b, readings, lets).tri()))
            }
            BinOp::Coalesce => {
                let x = self.eval(a, readings, lets);
                if x.is_known() {
                    x
                } else {
                    self.eval(b, readings, lets)
                }
            }
            BinOp::Eq | BinOp::Ne => {
                let x = self.eval(a, readings, lets);
                let y = self.eval(b, readings, lets);
                let eq = match (x, y) {
                    (Val::B(p), Val::B(q)) if p != Tri::Unknown && q != Tri::Unknown => {
                        Some(p == q)
                    }
                    (Val::N(Some(p)), Val::N(Some(q))) => Some(p == q),
                    _ => None,
                };
                Val::B(match eq {
                    None => Tri::Unknown,
                    Some(e) => Tri::from_bool(if op == BinOp::Eq { e } else { !e }),
                })
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let x = self.eval(a, readings, lets).num();
                let y = self.eval(b, readings, lets).num();
                Val::B(match (x, y) {
                    (Some(x), Some(y)) => Tri::from_bool(match op {
                        BinOp::Lt => x < y,
                        BinOp::Le => x <= y,
                        BinOp::Gt => x > y,
                        _ => x >= y,
                    }),
                    _ => Tri::Unknown,
                })
            }
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => {
                let x = self.eval(a, readings, lets).num();
                let y = self.eval(b, readings, lets).num();
                Val::N(match (x, y) {
                    (Some(x), Some(y)) => finite(match op {
                        BinOp::Add => x + y,
                        BinOp::Sub => x - y,
                        BinOp::Mul => x * y,
                        _ => x / y,
                    }),
                    _ => None,
                })
            }
        }
    }

    /// Why the check rooted at `root` does not pass: the failing (or unknown)
    /// terms with the values observed, joined by `; `. `lets` as in [`eval`].
    pub fn explain(&self, root: NodeId, readings: &[Reading], lets: &[Val]) -> String {
        let mut terms: Vec<NodeId> = Vec::new();
        let target = self.eval(root, readings, lets).tri();
        self.blame(root, target, readings, lets, &mut terms);
        let mut out = String::new();
        for (i, t) in terms.iter().enumerate() {
            if i > 0 {
                out.push_str("; ");
            }
            self.render_term(*t, readings, lets, &mut out);
        }
        out
    }

    /// Collect the smallest terms that make `id` evaluate to `result`
    /// (false or unknown), descending through `&&`, `||` and lets.
    fn blame(
        &self,
        id: NodeId,
        result: Tri,
        readings: &[Reading],
        lets: &[Val],
        out: &mut Vec<NodeId>,
    ) {
        let Some(node) = self.nodes.get(id as usize) else {
            return;
        };
        match node.op {
            Op::Bin(op @ (BinOp::And | BinOp::Or), a, b) => {
                let x = self.eval(a, readings, lets).tri();
                let y = self.eval(b, readings, lets).tri();
                // For `&&` false, each false side is to blame; for unknown, the
                // unknown sides. For `||`, every side that is not true.
                let culprit = |v: Tri| match (op, result) {
                    (BinOp::And, Tri::False) => v == Tri::False,
                    (BinOp::And, _) => v == Tri::Unknown,
                    (_, Tri::False) => v == Tri::False,
                    _ => v != Tri::True,
                };
                if culprit(x) {
                    self.blame(a, x, readings, lets, out);
                }
                if culprit(y) {
                    self.blame(b, y, readings, lets, out);
                }
            }
            // A let stands for its expression: blame what inside it failed.
            Op::Let(i) => match self.lets.get(i as usize) {
                Some(l) => self.blame(l.root, result, readings, lets, out),
                None => out.push(id),
            },
            _ => {
                if !out.contains(&id) {
                    out.push(id)
                }
            }
        }
    }

    fn render_term(&self, id: NodeId, readings: &[Reading], lets: &[Val], out: &mut String) {
        let node = &self.nodes[id as usize];
        let text = super::check::collapse_ws(node.span.text(&self.source));
        let v = self.eval(id, readings, lets).tri();
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
            && matches!(self.nodes[a as usize].op, Op::Signal(_))
        {
            return;
        }
        let mut shown: Vec<String> = Vec::new();
        self.values_in(id, readings, lets, &mut shown);
        if !shown.is_empty() {
            let _ = write!(out, " ({})", shown.join(", "));
        }
    }

    /// `name = value` for the signals, `age()`s and lets a term mentions directly.
    fn values_in(&self, id: NodeId, readings: &[Reading], lets: &[Val], out: &mut Vec<String>) {
        let Some(node) = self.nodes.get(id as usize) else {
            return;
        };
        let item = match node.op {
            Op::Signal(s) => Some(format!(
                "{} = {}",
                self.signal_name(s),
                fmt_val(signal_val(readings.get(s.index()), node.ty), node.ty)
            )),
            Op::Age(_) | Op::Let(_) => Some(format!(
                "{} = {}",
                super::check::collapse_ws(node.span.text(&self.source)),
                fmt_val(self.eval(id, readings, lets), node.ty)
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
            Op::Known(a) | Op::Not(a) | Op::Neg(a) => self.values_in(a, readings, lets, out),
            Op::Bin(_, a, b) | Op::Min(a, b) | Op::Max(a, b) => {
                self.values_in(a, readings, lets, out);
                self.values_in(b, readings, lets, out);
            }
            _ => {}
        }
    }

    fn unknown_signals(&self, id: NodeId, readings: &[Reading], out: &mut Vec<SignalId>) {
        let Some(node) = self.nodes.get(id as usize) else {
            return;
        };
        match node.op {
            Op::Signal(s) | Op::Age(s) => {
                let unknown = readings.get(s.index()).is_none_or(|r| {
                    if matches!(node.op, Op::Age(_)) {
                        r.last_good_age.is_none()
                    } else {
                        r.value.is_none()
                    }
                });
                if unknown && !out.contains(&s) {
                    out.push(s);
                }
            }
            Op::Let(i) => {
                if let Some(l) = self.lets.get(i as usize) {
                    self.unknown_signals(l.root, readings, out)
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

    /// The value of a signal as shown to users, with its unit.
    pub fn signal_display(&self, id: SignalId, reading: &Reading) -> String {
        let unit = self.signal_units.get(id.index()).copied().unwrap_or("");
        match reading.value {
            None => "unknown".to_string(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Num(n)) if unit == "s" => fmt_duration(n),
            Some(Value::Num(n)) => fmt_num(n),
        }
    }
}

fn signal_val(r: Option<&Reading>, ty: SignalType) -> Val {
    match (r.and_then(|r| r.value), ty) {
        (Some(Value::Bool(b)), SignalType::Bool) => Val::B(Tri::from_bool(b)),
        (Some(Value::Num(n)), SignalType::Number | SignalType::Duration) => Val::N(finite(n)),
        // Missing, or a source that wrote the wrong type: unknown, never a panic.
        (_, SignalType::Bool) => Val::B(Tri::Unknown),
        _ => Val::N(None),
    }
}

/// Why a reading is unknown, e.g. `last sample failed 3.2s ago: request timed out`.
pub fn describe_unknown(r: &Reading) -> String {
    match &r.unknown {
        Unknown::No => "known".to_string(),
        Unknown::NeverSampled => "never sampled".to_string(),
        Unknown::Failed { error, ago } => format!(
            "last sample failed {} ago: {error}",
            fmt_duration(ago.as_secs_f64())
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
    }
}

/// Integers without a fraction, others with up to three decimals.
pub fn fmt_num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        let s = format!("{n:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// `250ms`, `3.2s`, `2m30s`, `1h5m`.
pub fn fmt_duration(secs: f64) -> String {
    if !secs.is_finite() {
        return "unknown".to_string();
    }
    if secs < 0.0 {
        return format!("-{}", fmt_duration(-secs));
    }
    if secs < 1.0 {
        return format!("{}ms", fmt_num((secs * 1000.0).round()));
    }
    if secs < 60.0 {
        return format!("{}s", fmt_num((secs * 10.0).round() / 10.0));
    }
    if secs >= 1e12 {
        return format!("{}s", fmt_num(secs));
    }
    let total = secs as u64;
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    match (h, m, s) {
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
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

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_duration(0.25), "250ms");
        assert_eq!(fmt_duration(3.2), "3.2s");
        assert_eq!(fmt_duration(150.0), "2m30s");
        assert_eq!(fmt_duration(120.0), "2m");
        assert_eq!(fmt_duration(3900.0), "1h5m");
        assert_eq!(fmt_num(1432.0), "1432");
        assert_eq!(fmt_num(1.23456), "1.235");
    }
}
