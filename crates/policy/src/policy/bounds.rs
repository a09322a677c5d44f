//! How long a measurement in flight is worth waiting for, by the policy's
//! own comparisons: a pure reading of the compiled program.
//!
//! A pending measurement is known from below ([`Val::AtLeast`], see
//! `eval`), and a comparison of the signal with a constant is decided by
//! that lower bound once it passes the constant. Past the largest such
//! constant, waiting longer for the answer changes no comparison the policy
//! makes; before it, giving up (a sampler's timeout) turns an answer the
//! policy could still accept into a failure. So a sampler should wait at
//! least [`Policy::largest_compared`] for it.

use super::Policy;
use super::ast::BinOp;
use super::program::{Op, Val};
use crate::signals::SignalId;

impl Policy {
    /// The largest constant that a comparison (`<`, `<=`, `>`, `>=`, `==`,
    /// `!=`) sets directly against `signal`, in checks, warnings and lets;
    /// `None` when nothing compares it with a constant. A comparison through
    /// arithmetic (`qget_ms * 2 < 3000`) is not seen.
    pub fn largest_compared(&self, signal: SignalId) -> Option<f64> {
        let constant = |id: u32| match self.nodes.get(id as usize).map(|n| &n.op) {
            Some(Op::Const(Val::N(Some(c)))) if c.is_finite() => Some(*c),
            _ => None,
        };
        let is_signal = |id: u32| matches!(self.nodes.get(id as usize).map(|n| &n.op), Some(Op::Signal(s)) if *s == signal);
        let compared = self.nodes.iter().filter_map(|n| match n.op {
            Op::Bin(op, a, b) if is_comparison(op) => {
                if is_signal(a) {
                    constant(b)
                } else if is_signal(b) {
                    constant(a)
                } else {
                    None
                }
            }
            _ => None,
        });
        compared.reduce(f64::max)
    }
}

fn is_comparison(op: BinOp) -> bool {
    matches!(
        op,
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne
    )
}

#[cfg(test)]
mod tests {
    use crate::policy::Policy;
    use crate::signals::Catalogue;

    fn largest(src: &str, signal: &str) -> Option<f64> {
        let c = Catalogue::builtin();
        let p = Policy::compile("t", src, &c).expect("compiles");
        p.largest_compared(c.id(signal))
    }

    #[test]
    fn the_largest_constant_compared_with_the_signal_on_either_side() {
        assert_eq!(largest("qget_ms < 1000", "qget_ms"), Some(1000.0));
        assert_eq!(largest("2500 > qget_ms", "qget_ms"), Some(2500.0));
        let src = "check a: qget_ms < 1000\nwarn slow: qget_ms >= 3000\n";
        assert_eq!(largest(src, "qget_ms"), Some(3000.0));
    }

    #[test]
    fn lets_count_and_other_signals_do_not() {
        let src = "let slow = sget_ms > 4000\ncheck a: qget_ms < 1000 && !slow\n";
        assert_eq!(largest(src, "sget_ms"), Some(4000.0));
        assert_eq!(largest(src, "qget_ms"), Some(1000.0));
    }

    #[test]
    fn nothing_compared_is_none_and_arithmetic_is_not_seen() {
        assert_eq!(largest("leader", "qget_ms"), None);
        assert_eq!(largest("qget_ms * 2 < 3000", "qget_ms"), None);
        assert_eq!(largest("qget_ms < sget_ms", "qget_ms"), None);
    }
}
