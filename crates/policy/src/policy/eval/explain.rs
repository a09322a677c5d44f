//! Explanations: why a check does not pass, in words — the smallest failing
//! (or unknown) terms with the values observed, each unknown signal with its
//! reason — within a byte budget per check and per report.

use std::fmt::Write as _;

use super::super::Policy;
use super::super::ast::BinOp;
use super::super::program::{NodeId, Op, Tri, Val};
use super::signal_val;
use crate::signals::{Reading, SignalId, SignalType, Unknown};
use crate::text::{fmt_duration, fmt_num};

impl Policy {
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
    pub(in crate::policy) fn explain_with(
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
pub(in crate::policy) struct Walked {
    marks: Vec<u32>,
    round: u32,
}

impl Walked {
    pub(in crate::policy) fn new(nodes: usize) -> Self {
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
