//! What of a sample a policy can see: its [`Class`]. Two samples of a signal
//! in the same class give every check of the policy the same value, so a
//! simulation whose evaluator is [settled](super::Evaluator::settled) can
//! step over a step at which every signal's class is the one it had at the
//! step before (`replay` over a day of a fleet mostly sees such steps).
//!
//! A signal's [`Sense`] is read off the compiled program once:
//! - a bool: its value, or unknown;
//! - a number only ever compared with constants (`qget_ms < 300`,
//!   `rev_lag >= -5`), or asked `known()`: which side of each constant it
//!   is on, by the evaluator's own comparison ([`super::eval`]);
//! - a number used any other way (arithmetic, `min`/`max`, `??`, a `let`'s
//!   whole value, compared with another signal): its exact value;
//! - a signal read by `age()`: the age of a good sample taken at the step is
//!   zero at every step, but a failed one's grows, so a failed sample of it
//!   has no class (never the same).
//!
//! Pure and allocation-free per sample; built only from the checked
//! program, whose every node is well-typed.

use super::Policy;
use super::ast::BinOp;
use super::program::{NodeId, Op, Tri, Val};
use crate::signals::{SignalId, SignalType, Value};

/// At most this many comparisons per signal are told apart by side; a
/// signal compared with more is classed by its exact value.
const MAX_THRESHOLDS: usize = 64;

/// What a policy can see of one sample of one signal. Equal classes give
/// equal values to every check (for a signal read by `age()`, given a good
/// sample at each step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Failed, not finite, or of the wrong type for the signal: unknown.
    Unknown,
    Bool(bool),
    /// Bit `k`: the sample is on the true side of the signal's `k`-th
    /// comparison with a constant.
    Sides(u64),
    /// The value's bits (`-0.0` and `0.0` differ: a harmless miss).
    Exact(u64),
}

/// One comparison of a signal with a constant: `signal op constant`, or
/// `constant op signal` when `signal_left` is false.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Threshold {
    op: BinOp,
    constant: f64,
    signal_left: bool,
}

/// How a policy reads one signal's value.
#[derive(Clone, Debug, Default, PartialEq)]
enum Use {
    /// Not for its value (only by `known()` or `age()`, or not at all).
    #[default]
    None,
    /// Only compared with these constants (or asked `known()`).
    Thresholds(Vec<Threshold>),
    /// Its exact value matters.
    Exact,
}

/// How a policy reads one signal.
#[derive(Clone, Debug, PartialEq)]
struct Reads {
    value: Use,
    /// Read at all (for its value or its `age()`).
    read: bool,
    /// Read by `age()`.
    aged: bool,
    ty: SignalType,
}

/// How a policy reads each signal of the catalogue: what it takes for two
/// samples to be the same to it ([`Sense::class`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Sense {
    /// By signal index.
    signals: Vec<Reads>,
}

impl Sense {
    /// Whether the policy reads `id` at all.
    pub fn reads(&self, id: SignalId) -> bool {
        self.signals.get(id.index()).is_some_and(|r| r.read)
    }

    /// The class of a sample of `id`, a signal the policy reads:
    /// `Some(Value)` a recorded value, `None` a failed attempt. `None` when
    /// no class can stand for it (a failed sample of a signal read by
    /// `age()`).
    pub fn class(&self, id: SignalId, sample: Option<Value>) -> Option<Class> {
        let r = self.signals.get(id.index())?;
        // The store records a number that is not finite as a failure.
        let Some(value) = sample.filter(|v| !matches!(v, Value::Num(n) if !n.is_finite())) else {
            return (!r.aged).then_some(Class::Unknown);
        };
        Some(match (value, r.ty, &r.value) {
            (Value::Bool(b), SignalType::Bool, _) => Class::Bool(b),
            // A value of the wrong type reads as unknown, as a failure does
            // (but is a good sample: of age zero).
            (Value::Bool(_), ..) | (Value::Num(_), SignalType::Bool, _) => Class::Unknown,
            (Value::Num(n), _, Use::Thresholds(ts)) => Class::Sides(sides(ts, n)),
            (Value::Num(_), _, Use::None) => Class::Sides(0),
            (Value::Num(n), _, Use::Exact) => Class::Exact(n.to_bits()),
        })
    }

    fn get(&mut self, s: SignalId) -> Option<&mut Reads> {
        self.signals.get_mut(s.index())
    }
}

/// Which side of each threshold `n` is on, by the evaluator's comparison.
fn sides(ts: &[Threshold], n: f64) -> u64 {
    ts.iter().enumerate().fold(0, |bits, (k, t)| {
        let (x, y) = if t.signal_left {
            (n, t.constant)
        } else {
            (t.constant, n)
        };
        let v = super::eval::binary(t.op, Val::N(Some(x)), Val::N(Some(y)));
        bits | (u64::from(v == Val::B(Tri::True)) << k)
    })
}

impl Use {
    /// The signal is also compared with a constant this way.
    fn compared(&mut self, t: Threshold) {
        match self {
            Use::None => *self = Use::Thresholds(vec![t]),
            Use::Thresholds(ts) if ts.contains(&t) => {}
            Use::Thresholds(ts) if ts.len() < MAX_THRESHOLDS => ts.push(t),
            Use::Thresholds(_) => *self = Use::Exact,
            Use::Exact => {}
        }
    }
}

impl Policy {
    /// How this policy reads each signal: see [`Sense`].
    pub fn sense(&self) -> Sense {
        let unread = Reads {
            value: Use::None,
            read: false,
            aged: false,
            ty: SignalType::Number,
        };
        let mut sense = Sense {
            signals: vec![unread; self.signal_names.len()],
        };
        // Every number signal's node is somebody's operand, or a let's (or
        // check's) whole value.
        for s in self.lets.iter().filter_map(|l| self.number_signal(l.root)) {
            sense.exact(s);
        }
        for node in &self.nodes {
            match node.op {
                Op::Signal(s) => {
                    if let Some(r) = sense.get(s) {
                        (r.ty, r.read) = (node.ty, true);
                    }
                }
                Op::Age(s) => {
                    if let Some(r) = sense.get(s) {
                        (r.aged, r.read) = (true, true);
                    }
                }
                Op::Bin(
                    op @ (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne),
                    a,
                    b,
                ) => self.comparison(op, a, b, &mut sense),
                // `known()` sees only knownness, which every class keeps.
                Op::Known(_) | Op::Const(_) | Op::Let(_) => {}
                Op::Neg(a) | Op::Not(a) => self.exact(&[a], &mut sense),
                Op::Bin(_, a, b) | Op::Min(a, b) | Op::Max(a, b) => self.exact(&[a, b], &mut sense),
            }
        }
        sense
    }

    /// `a op b`: a threshold where one side is a number signal and the
    /// other a constant; otherwise the signals' exact values matter.
    fn comparison(&self, op: BinOp, a: NodeId, b: NodeId, sense: &mut Sense) {
        let (x, y) = (self.number_signal(a), self.number_signal(b));
        let threshold = |constant, signal_left| Threshold {
            op,
            constant,
            signal_left,
        };
        match (x, y, self.constant(a), self.constant(b)) {
            (Some(s), _, _, Some(c)) => sense.compared(s, threshold(c, true)),
            (_, Some(s), Some(c), _) => sense.compared(s, threshold(c, false)),
            _ => self.exact(&[a, b], sense),
        }
    }

    /// Of `operands`, the number signals' exact values matter.
    fn exact(&self, operands: &[NodeId], sense: &mut Sense) {
        for s in operands.iter().filter_map(|&o| self.number_signal(o)) {
            sense.exact(s);
        }
    }

    /// The number (or duration) signal node `id` reads, if it is one.
    fn number_signal(&self, id: NodeId) -> Option<SignalId> {
        match self.nodes.get(id as usize).map(|n| (n.op, n.ty)) {
            Some((Op::Signal(s), ty)) if ty != SignalType::Bool => Some(s),
            _ => None,
        }
    }

    /// The constant number node `id` is (a literal, or a negated one).
    fn constant(&self, id: NodeId) -> Option<f64> {
        match self.nodes.get(id as usize).map(|n| n.op) {
            Some(Op::Const(Val::N(Some(c)))) => Some(c),
            Some(Op::Neg(a)) => self.constant(a).map(|c| -c),
            _ => None,
        }
    }
}

impl Sense {
    /// `s` is compared with a constant as `t` says.
    fn compared(&mut self, s: SignalId, t: Threshold) {
        if let Some(r) = self.get(s) {
            r.value.compared(t);
        }
    }

    /// `s`'s exact value matters.
    fn exact(&mut self, s: SignalId) {
        if let Some(r) = self.get(s) {
            r.value = Use::Exact;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::Catalogue;

    fn sense(src: &str) -> (Sense, Catalogue) {
        let c = Catalogue::builtin();
        let p = Policy::compile("p", src, &c).unwrap();
        (p.sense(), c)
    }

    fn num(n: f64) -> Option<Value> {
        Some(Value::Num(n))
    }

    #[test]
    fn a_number_compared_with_constants_is_classed_by_its_sides() {
        let (s, c) = sense("check q: qget_ms < 300 && qget_ms >= -5\ncheck k: known(qget_ms)");
        let q = c.id("qget_ms");
        assert_eq!(s.class(q, num(12.0)), s.class(q, num(299.5)));
        assert_ne!(s.class(q, num(12.0)), s.class(q, num(300.0)));
        assert_ne!(s.class(q, num(-4.0)), s.class(q, num(-5.5)));
        assert_eq!(s.class(q, None), Some(Class::Unknown));
        assert_eq!(s.class(q, num(f64::NAN)), Some(Class::Unknown));
        assert_eq!(s.class(q, num(f64::INFINITY)), Some(Class::Unknown));
        let (s, c) = sense("check k: known(qget_ms)");
        let q = c.id("qget_ms");
        assert_eq!(s.class(q, num(1.0)), s.class(q, num(2.0)), "known() alone");
        assert_ne!(s.class(q, num(1.0)), s.class(q, None));
    }

    #[test]
    fn a_constant_on_the_left_and_equality_are_sides_too() {
        let (s, c) = sense("check q: 300 > qget_ms && rev_lag != 0");
        let (q, r) = (c.id("qget_ms"), c.id("rev_lag"));
        assert_eq!(s.class(q, num(1.0)), s.class(q, num(2.0)));
        assert_ne!(s.class(q, num(1.0)), s.class(q, num(301.0)));
        assert_eq!(s.class(r, num(1.0)), s.class(r, num(7.0)));
        assert_ne!(s.class(r, num(1.0)), s.class(r, num(0.0)));
    }

    #[test]
    fn any_other_use_of_a_number_is_classed_by_its_value() {
        for src in [
            "check q: qget_ms * 2 < 300",
            "check q: min(qget_ms, 5) < 300",
            "check q: (qget_ms ?? 0) < 300",
            "check q: qget_ms < rev_lag",
            "check q: -qget_ms < 300",
            "let q = qget_ms\ncheck q: q < 300",
        ] {
            let (s, c) = sense(src);
            let q = c.id("qget_ms");
            assert_ne!(s.class(q, num(1.0)), s.class(q, num(2.0)), "{src}");
            assert_eq!(s.class(q, num(1.0)), s.class(q, num(1.0)), "{src}");
        }
    }

    #[test]
    fn a_bool_by_its_value_and_a_failed_aged_signal_by_nothing() {
        let (s, c) = sense("check l: leader && age(qget_ms) < 5s");
        let (l, q, r) = (c.id("leader"), c.id("qget_ms"), c.id("rev_lag"));
        assert!(s.reads(q) && !s.reads(r));
        assert_ne!(
            s.class(l, Some(Value::Bool(true))),
            s.class(l, Some(Value::Bool(false)))
        );
        assert_ne!(s.class(l, Some(Value::Bool(true))), s.class(l, None));
        assert_eq!(s.class(q, None), None, "its age grows while it fails");
        assert_eq!(s.class(q, num(1.0)), s.class(q, num(1.0)));
        assert_eq!(s.class(q, num(f64::NAN)), None);
        let (s, _) = sense("check l: age(leader) < 5s");
        assert_eq!(s.class(l, num(f64::NAN)), None, "recorded as a failure");
        assert_eq!(
            s.class(l, num(1.0)),
            Some(Class::Unknown),
            "the wrong type, of age 0"
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_is_unknown() {
        let (s, c) = sense("check l: leader && qget_ms < 300");
        let (l, q) = (c.id("leader"), c.id("qget_ms"));
        assert_eq!(s.class(q, Some(Value::Bool(true))), Some(Class::Unknown));
        assert_eq!(s.class(l, num(1.0)), Some(Class::Unknown));
    }
}
