//! Limits that keep hostile or mistaken policies from hurting the process:
//! size, nesting depth, number of checks and lets, expression size. The
//! source-level ones run before parsing, on a plain scan of the text, so the
//! recursive-descent parser never sees input deep enough to exhaust the stack.

use super::ast::Span;
use super::diag::Diagnostic;

// The sizes below bound what one evaluation costs: the costliest policy
// they accept (benches/worst_policy.py), as both the policy in force and a
// candidate, costs the exporter at most a quarter of the 100m CPU limit of
// its sidecar component at the engine's highest evaluation rate
// (docs/BENCHMARKS.md, "The costliest valid policy"). Real policies are a
// fraction of them (the default: 9 checks in 3.3 KiB, most of it comments;
// policies/gardener.policy: 12 checks).

/// Largest accepted policy file.
pub const MAX_POLICY_BYTES: usize = 8 * 1024;
/// Deepest accepted nesting of parentheses and prefix operators.
pub const MAX_DEPTH: usize = 64;
/// Most `check`/`warn` statements (or top-level terms of a bare expression).
pub const MAX_CHECKS: usize = 16;
/// Most `let` statements.
pub const MAX_LETS: usize = 64;
/// Deepest accepted expression tree (long `a && b && ...` chains count one
/// level per operator).
pub const MAX_TREE_DEPTH: usize = 256;
/// Longest accepted hold-down (`for`), in seconds: one week.
pub const MAX_HOLD_DOWN_SECS: f64 = 7.0 * 24.0 * 3600.0;
/// Longest accepted recovery hold (`recover`), in seconds: one hour. The hold
/// keeps a member out of service for its whole length after every restart
/// and every failure, so a longer one is a mistake, not a policy.
pub const MAX_RECOVER_SECS: f64 = 3600.0;
/// Most nodes in the compiled program.
pub const MAX_NODES: usize = 2 * 1024;

/// Size and nesting limits, checked on the raw text before parsing.
pub fn check_source(src: &str) -> Result<(), Vec<Diagnostic>> {
    if src.len() > MAX_POLICY_BYTES {
        return Err(vec![
            Diagnostic::new(
                format!(
                    "policy is {} bytes, more than the limit of {} bytes",
                    src.len(),
                    MAX_POLICY_BYTES
                ),
                Span::new(0, 0),
            )
            .help("split it, or move repeated parts into `let` lines"),
        ]);
    }
    if let Some(bad) = src.find('\0') {
        return Err(vec![Diagnostic::new(
            "policy contains a NUL byte; is this a binary file?",
            Span::new(bad, bad + 1),
        )]);
    }
    // Nesting: parentheses, plus runs of prefix operators (`!!!!x`), which the
    // tree builder turns into nested nodes too. Comments are skipped.
    let mut depth = 0usize;
    let mut prefix_run = 0usize;
    let mut in_comment = false;
    for (i, c) in src.char_indices() {
        if in_comment {
            in_comment = c != '\n';
            continue;
        }
        match c {
            '#' => in_comment = true,
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        match c {
            '!' if !src[i + 1..].starts_with('=') => prefix_run += 1,
            '-' => prefix_run += 1,
            c if c.is_whitespace() || c == '(' => {}
            _ => prefix_run = 0,
        }
        if depth + prefix_run > MAX_DEPTH {
            return Err(vec![
                Diagnostic::new(
                    format!("expression nested more than {MAX_DEPTH} levels deep"),
                    Span::new(i, i + c.len_utf8()),
                )
                .help("flatten it with `let` lines"),
            ]);
        }
    }
    Ok(())
}

/// The pathological policy the cost limits are written against: `let a0 =
/// BASE`, `let aN = aN-1 && aN-1` up to `depth`, and a check `deep` on the
/// last — 2^depth leaves if each `let` were expanded at every use. Shared by
/// the regression tests so they all mean the same chain.
pub fn doubling_chain(base: &str, depth: usize) -> String {
    let mut src = format!("let a0 = {base}\n");
    for i in 1..=depth {
        src.push_str(&format!("let a{i} = a{} && a{}\n", i - 1, i - 1));
    }
    src.push_str(&format!("check deep: a{depth}\n"));
    src
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hundred_thousand_open_parens_is_an_error_not_a_crash() {
        let src = "(".repeat(100_000);
        let e = crate::policy::parse::parse(&src).unwrap_err();
        assert!(e[0].message.contains("more than"), "{}", e[0].message);
    }

    #[test]
    fn deep_but_small_nesting_is_rejected_with_a_position() {
        let src = format!("{}leader{}", "(".repeat(65), ")".repeat(65));
        let e = check_source(&src).unwrap_err();
        assert_eq!(e[0].message, "expression nested more than 64 levels deep");
        assert_eq!(e[0].span.start, 64);
    }

    #[test]
    fn nesting_at_the_limit_parses() {
        let src = format!("{}leader{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert!(crate::policy::parse::parse(&src).is_ok());
    }

    #[test]
    fn long_not_chains_are_bounded() {
        let src = format!("{}leader", "!".repeat(10_000));
        assert!(check_source(&src).is_err());
    }

    #[test]
    fn very_long_operator_chains_are_rejected_not_recursed() {
        // Under the size limit, past the tree's depth limit.
        let src = format!("leader{}", " && leader".repeat(700));
        let e = crate::policy::parse::parse(&src).unwrap_err();
        assert!(
            e[0].message.starts_with("expression too long"),
            "{}",
            e[0].message
        );
    }

    #[test]
    fn oversize_policy_is_rejected() {
        let src = format!("leader {}", "#".repeat(MAX_POLICY_BYTES));
        let e = check_source(&src).unwrap_err();
        assert!(e[0].message.contains("more than the limit"));
    }

    #[test]
    fn comments_do_not_count() {
        let src = format!("# {}\nleader", "(".repeat(500));
        assert!(check_source(&src).is_ok());
    }
}
