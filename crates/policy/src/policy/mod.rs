//! The policy language: parse → check → evaluate + explain. Pure: no IO, no
//! clocks (time is passed in), no tokio or axum. See docs/policy-language.md.
//!
//! [`Policy::compile`] turns text into a checked, immutable [`Policy`] or a
//! set of [`Diagnostics`]; an [`Evaluator`] holds the per-check state
//! (since-when, hold-down and recovery hold timers) and evaluates a policy against signal
//! [`Reading`](crate::signals::Reading)s.

pub mod ast;
mod bounds;
pub mod check;
pub mod diag;
pub mod eval;
pub mod limits;
pub mod parse;
pub mod program;
pub mod settle;
pub mod state;

use std::sync::Arc;

use sha2::{Digest, Sha256};

pub use diag::{Diagnostic, Diagnostics};
pub use program::{CheckDef, LetDef, Tri};
pub use state::Evaluator;

use crate::signals::{Catalogue, SignalId};
use crate::verdict::CheckKind;
use program::Node;

/// A parsed and checked policy. Immutable; shared with `Arc`.
#[derive(Debug)]
pub struct Policy {
    path: String,
    source: String,
    sha256: String,
    nodes: Vec<Node>,
    lets: Vec<LetDef>,
    checks: Vec<CheckDef>,
    /// Per `let`, the signals it reads (see `check::Compiled::let_leaves`).
    let_leaves: Vec<Vec<program::Leaf>>,
    /// Signals named outside every `??` left-hand side (see
    /// [`Policy::signals_required`]).
    required: Vec<SignalId>,
    /// Names of every catalogue signal, by id, for explanations.
    signal_names: Arc<[String]>,
}

impl Policy {
    /// Parse and check `source` (read from `path`, which is only used in
    /// messages) against the signals in `catalogue`.
    pub fn compile(path: &str, source: &str, catalogue: &Catalogue) -> Result<Policy, Diagnostics> {
        let stmts = parse::parse(source).map_err(|d| Diagnostics::new(path, source, d))?;
        let compiled = check::compile(&stmts, source, catalogue)
            .map_err(|d| Diagnostics::new(path, source, d))?;
        Ok(Policy {
            path: path.to_string(),
            source: source.to_string(),
            sha256: hex::encode(Sha256::digest(source.as_bytes())),
            nodes: compiled.nodes,
            lets: compiled.lets,
            checks: compiled.checks,
            let_leaves: compiled.let_leaves,
            required: compiled.required,
            signal_names: catalogue.iter().map(|(_, d)| d.name.clone()).collect(),
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Hex SHA-256 of the source text.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Size of the compiled program, in nodes: at most one per token of the
    /// text (a use of a `let` is one node), and at most
    /// [`limits::MAX_NODES`].
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn checks(&self) -> &[CheckDef] {
        &self.checks
    }

    pub fn lets(&self) -> &[LetDef] {
        &self.lets
    }

    pub fn check(&self, name: &str) -> Option<&CheckDef> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// Every signal any check reads, in order of first mention.
    pub fn signals_used(&self) -> Vec<SignalId> {
        let mut out = Vec::new();
        for c in &self.checks {
            for s in &c.signals {
                if !out.contains(s) {
                    out.push(*s);
                }
            }
        }
        out
    }

    /// The signals whose sources the policy needs, in order of first
    /// mention: every signal it reads except those named only on the left
    /// of `??` (optional terms, which load without their source and whose
    /// fallback decides while it is not configured).
    pub fn signals_required(&self) -> Vec<SignalId> {
        self.required.clone()
    }

    pub fn signal_name(&self, id: SignalId) -> &str {
        self.signal_names
            .get(id.index())
            .map_or("?", |s| s.as_str())
    }

    /// One line for `check`: counts of checks and the signals used.
    pub fn summary(&self) -> String {
        let warns = self
            .checks
            .iter()
            .filter(|c| c.kind == CheckKind::Warn)
            .count();
        let held = self.checks.iter().filter(|c| c.hold.is_some()).count();
        let recovering = self.checks.iter().filter(|c| c.recover.is_some()).count();
        let signals: Vec<&str> = self
            .signals_used()
            .into_iter()
            .map(|s| self.signal_name(s))
            .collect();
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut parts = vec![plural(self.checks.len() - warns, "check", "checks")];
        if warns > 0 {
            parts.push(plural(warns, "warning", "warnings"));
        }
        if held > 0 {
            parts.push(format!("{held} with hold-down"));
        }
        if recovering > 0 {
            parts.push(format!("{recovering} with recovery hold"));
        }
        if !self.lets.is_empty() {
            parts.push(plural(self.lets.len(), "let", "lets"));
        }
        format!("{}; signals: {}", parts.join(", "), signals.join(", "))
    }
}
