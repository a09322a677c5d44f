//! Parsing: policy text → syntax tree. Enforces the size and nesting limits
//! *before* handing the text to pest, so hostile input (a 100,000-deep `((((`)
//! gets an error instead of overflowing the stack, and translates pest's
//! expectations into words ("expected `)`", "expected an operator").

use pest::Parser;
use pest::error::{ErrorVariant, InputLocation};
use pest::iterators::Pair;
use pest_derive::Parser;

use super::ast::{BinOp, Clause, ClauseKind, Expr, ExprKind, Span, Stmt, StmtKind, UnaryOp};
use super::diag::Diagnostic;
use super::limits;

#[derive(Parser)]
#[grammar = "../../../grammar/policy.pest"]
struct PolicyParser;

/// Parse a policy. On failure returns every problem found (limits, or the
/// first syntax error — a parser cannot reliably go on after one).
pub fn parse(src: &str) -> Result<Vec<Stmt>, Vec<Diagnostic>> {
    limits::check_source(src)?;
    // pest descends about ten rules per parenthesis, with large frames in debug
    // builds; parse on a thread whose stack is sized for the nesting limit
    // rather than on whatever thread (a 2 MiB tokio worker) asked.
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("policy-parse".into())
            .stack_size(PARSE_STACK_BYTES)
            .spawn_scoped(s, || parse_on_this_thread(src))
            .map_err(|e| {
                vec![Diagnostic::new(
                    format!("cannot start the parser thread: {e}"),
                    Span::new(0, 0),
                )]
            })?
            .join()
            .unwrap_or_else(|_| {
                Err(vec![Diagnostic::new(
                    "the parser failed unexpectedly",
                    Span::new(0, 0),
                )])
            })
    })
}

/// Stack for the parser thread: enough for [`limits::MAX_DEPTH`] in a debug build
/// with a wide margin (measured by the `nesting_at_the_limit_parses` test).
const PARSE_STACK_BYTES: usize = 64 * 1024 * 1024;

fn parse_on_this_thread(src: &str) -> Result<Vec<Stmt>, Vec<Diagnostic>> {
    let mut pairs = PolicyParser::parse(Rule::policy, src).map_err(|e| vec![translate(src, e)])?;
    let policy = pairs
        .next()
        .expect("the policy rule always yields one pair");
    let mut stmts = Vec::new();
    let mut problems = Vec::new();
    for pair in policy.into_inner() {
        let stmt = match pair.as_rule() {
            Rule::EOI => continue,
            Rule::let_stmt => let_stmt(pair),
            Rule::check_stmt | Rule::warn_stmt => check_stmt(pair),
            Rule::bare_expr => bare_stmt(pair),
            r => unreachable!("unexpected statement rule {r:?}"),
        };
        match stmt {
            Ok(stmt) => stmts.push(stmt),
            Err(d) => problems.push(d),
        }
    }
    if problems.is_empty() {
        Ok(stmts)
    } else {
        Err(problems)
    }
}

/// `let NAME = EXPR`.
fn let_stmt(pair: Pair<'_, Rule>) -> Result<Stmt, Diagnostic> {
    let mut it = pair.into_inner();
    let _kw = it.next();
    let name = it.next().expect("let name");
    let _assign = it.next();
    let expr = build_expr(it.next().expect("let expr"))?;
    Ok(Stmt::Let {
        name: name.as_str().to_string(),
        name_span: span_of(&name),
        expr,
    })
}

/// `check NAME: EXPR` or `warn NAME: EXPR`, with its `for` and `recover`
/// clauses.
fn check_stmt(pair: Pair<'_, Rule>) -> Result<Stmt, Diagnostic> {
    let kind = if pair.as_rule() == Rule::check_stmt {
        StmtKind::Check
    } else {
        StmtKind::Warn
    };
    let span = span_of(&pair);
    let mut it = pair.into_inner();
    let _kw = it.next();
    let name = it.next().expect("check name");
    let _colon = it.next();
    let expr = build_expr(it.next().expect("check expr"))?;
    let clauses = it.map(clause).collect();
    Ok(Stmt::Check {
        kind,
        name: Some((name.as_str().to_string(), span_of(&name))),
        expr,
        clauses,
        span,
    })
}

/// `for DURATION` or `recover DURATION`.
fn clause(c: Pair<'_, Rule>) -> Clause {
    let kind = if c.as_rule() == Rule::recover {
        ClauseKind::Recover
    } else {
        ClauseKind::For
    };
    let clause_span = span_of(&c);
    let d = c.into_inner().nth(1).expect("clause duration");
    Clause {
        kind,
        secs: duration_literal(d.as_str()),
        span: span_of(&d),
        clause_span,
    }
}

/// An expression on its own line: an unnamed check.
fn bare_stmt(pair: Pair<'_, Rule>) -> Result<Stmt, Diagnostic> {
    let span = span_of(&pair);
    let expr = build_expr(pair.into_inner().next().expect("bare expr"))?;
    Ok(Stmt::Check {
        kind: StmtKind::Bare,
        name: None,
        expr,
        clauses: Vec::new(),
        span,
    })
}

fn span_of(p: &Pair<'_, Rule>) -> Span {
    let s = p.as_span();
    Span::new(s.start(), s.end())
}

/// Builds an expression tree, refusing to make one deeper than
/// [`limits::MAX_TREE_DEPTH`] (long operator chains are left-deep), so that
/// every later recursive pass — checking, evaluation, even `Drop` — is bounded.
fn build_expr(pair: Pair<'_, Rule>) -> Result<Expr, Diagnostic> {
    build(pair).map(|(e, _)| e)
}

fn build(pair: Pair<'_, Rule>) -> Result<(Expr, usize), Diagnostic> {
    let span = span_of(&pair);
    let (expr, depth) = build_inner(pair)?;
    if depth > limits::MAX_TREE_DEPTH {
        return Err(too_deep(span));
    }
    Ok((expr, depth))
}

fn too_deep(span: Span) -> Diagnostic {
    Diagnostic::new(
        format!(
            "expression too long: more than {} operators deep",
            limits::MAX_TREE_DEPTH
        ),
        Span::new(span.start, span.start),
    )
    .help("split it into `let` lines or separate checks")
}

fn build_inner(pair: Pair<'_, Rule>) -> Result<(Expr, usize), Diagnostic> {
    let span = span_of(&pair);
    Ok(match pair.as_rule() {
        Rule::expr
        | Rule::and_expr
        | Rule::cmp_expr
        | Rule::coal_expr
        | Rule::add_expr
        | Rule::mul_expr => {
            let mut it = pair.into_inner();
            let (mut lhs, mut depth) = build(it.next().expect("operand"))?;
            while let Some(op) = it.next() {
                let (rhs, rdepth) = build(it.next().expect("right operand"))?;
                let op = bin_op(op.as_str());
                let span = lhs.span.to(rhs.span);
                depth = depth.max(rdepth) + 1;
                if depth > limits::MAX_TREE_DEPTH {
                    return Err(too_deep(span));
                }
                lhs = Expr {
                    kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                    span,
                };
            }
            (lhs, depth)
        }
        Rule::unary => {
            let inner: Vec<Pair<'_, Rule>> = pair.into_inner().collect();
            let (prefixes, primary) = inner.split_at(inner.len() - 1);
            let (mut e, mut depth) = build(primary[0].clone())?;
            for p in prefixes.iter().rev() {
                depth += 1;
                let op = if p.as_str() == "!" {
                    UnaryOp::Not
                } else {
                    UnaryOp::Neg
                };
                let span = span_of(p).to(e.span);
                e = Expr {
                    kind: ExprKind::Unary(op, Box::new(e)),
                    span,
                };
            }
            (e, depth)
        }
        Rule::paren => {
            let inner = pair.into_inner().nth(1).expect("parenthesised expr");
            let (mut e, depth) = build(inner)?;
            // The parentheses belong to the term as the user wrote it.
            e.span = span;
            (e, depth)
        }
        Rule::call => {
            let mut it = pair.into_inner();
            let name = it.next().expect("function name");
            let mut args = Vec::new();
            let mut depth = 0;
            for p in it.filter(|p| p.as_rule() == Rule::expr) {
                let (a, d) = build(p)?;
                depth = depth.max(d);
                args.push(a);
            }
            let e = Expr {
                kind: ExprKind::Call {
                    name: name.as_str().to_string(),
                    name_span: span_of(&name),
                    args,
                },
                span,
            };
            (e, depth + 1)
        }
        Rule::ident => leaf(ExprKind::Ident(pair.as_str().to_string()), span),
        Rule::boolean => leaf(ExprKind::Bool(pair.as_str() == "true"), span),
        Rule::number => leaf(ExprKind::Num(parse_num(pair.as_str())), span),
        Rule::size => leaf(ExprKind::Num(parse_size(pair.as_str())), span),
        Rule::duration => leaf(ExprKind::Duration(duration_literal(pair.as_str())), span),
        r => unreachable!("unexpected expression rule {r:?}"),
    })
}

fn leaf(kind: ExprKind, span: Span) -> (Expr, usize) {
    (Expr { kind, span }, 1)
}

fn bin_op(s: &str) -> BinOp {
    match s {
        "||" => BinOp::Or,
        "&&" => BinOp::And,
        "??" => BinOp::Coalesce,
        "==" => BinOp::Eq,
        "!=" => BinOp::Ne,
        "<" => BinOp::Lt,
        "<=" => BinOp::Le,
        ">" => BinOp::Gt,
        ">=" => BinOp::Ge,
        "+" => BinOp::Add,
        "-" => BinOp::Sub,
        "*" => BinOp::Mul,
        "/" => BinOp::Div,
        other => unreachable!("operator {other}"),
    }
}

fn parse_num(s: &str) -> f64 {
    // The grammar only admits digits, `_`, `.`, and an exponent.
    s.replace('_', "").parse().unwrap_or(f64::NAN)
}

/// Seconds in a duration literal such as `250ms`, `1.5s`, `2m`, `1m30s`
/// (the one grammar, [`crate::duration::parse_secs`]); NaN if it is not
/// one, which the checker reports.
fn duration_literal(s: &str) -> f64 {
    crate::duration::parse_secs(s).unwrap_or(f64::NAN)
}

fn parse_size(s: &str) -> f64 {
    const UNITS: [(&str, f64); 6] = [
        ("KiB", 1024.0),
        ("MiB", 1024.0 * 1024.0),
        ("GiB", 1024.0 * 1024.0 * 1024.0),
        ("KB", 1e3),
        ("MB", 1e6),
        ("GB", 1e9),
    ];
    for (u, m) in UNITS {
        if let Some(n) = s.strip_suffix(u) {
            return parse_num(n) * m;
        }
    }
    f64::NAN
}

/// What a grammar rule is called in an error message.
fn describe(rule: Rule) -> &'static str {
    match rule {
        Rule::or_op
        | Rule::and_op
        | Rule::cmp_op
        | Rule::coalesce_op
        | Rule::add_op
        | Rule::mul_op => "an operator",
        Rule::close_paren => "`)`",
        Rule::open_paren => "`(`",
        Rule::comma => "`,`",
        Rule::colon => "`:`",
        Rule::assign => "`=`",
        Rule::kw_for => "`for DURATION`",
        Rule::kw_recover => "`recover DURATION`",
        Rule::kw_let | Rule::kw_check | Rule::kw_warn => "a new `check`, `warn` or `let`",
        Rule::check_name => "a check name",
        Rule::ident => "a name",
        Rule::duration => "a duration such as `30s`",
        Rule::EOI => "the end of the policy",
        Rule::expr
        | Rule::and_expr
        | Rule::cmp_expr
        | Rule::coal_expr
        | Rule::add_expr
        | Rule::mul_expr
        | Rule::unary
        | Rule::prefix_op
        | Rule::paren
        | Rule::call
        | Rule::number
        | Rule::size
        | Rule::boolean
        | Rule::bare_expr => "an expression",
        _ => "something else",
    }
}

fn translate(src: &str, e: pest::error::Error<Rule>) -> Diagnostic {
    let mut pos = match e.location {
        InputLocation::Pos(p) => p,
        InputLocation::Span((s, _)) => s,
    };
    // "found the end of the policy" is best shown right after the last token,
    // not on a blank line below it.
    if src[pos.min(src.len())..].trim().is_empty() {
        pos = pos.min(src.trim_end().len());
    }
    let found = describe_found(src, pos);
    let span = found_span(src, pos);
    let mut wanted: Vec<&str> = match &e.variant {
        ErrorVariant::ParsingError { positives, .. } => {
            positives.iter().map(|r| describe(*r)).collect()
        }
        ErrorVariant::CustomError { .. } => Vec::new(),
    };
    // Present in a stable, helpful order: the most specific first.
    let order = [
        "`)`",
        "`:`",
        "`=`",
        "`,`",
        "a check name",
        "a name",
        "a duration such as `30s`",
        "an expression",
        "an operator",
        "`(`",
        "`for DURATION`",
        "`recover DURATION`",
        "a new `check`, `warn` or `let`",
        "the end of the policy",
        "something else",
    ];
    wanted.sort_by_key(|w| order.iter().position(|o| o == w).unwrap_or(order.len()));
    wanted.dedup();
    let mut wanted = wanted
        .into_iter()
        .filter(|w| *w != "something else")
        .collect::<Vec<_>>();
    // After a name, pest also offers `(` (a function call); that is noise
    // unless it is the only way on.
    if wanted.len() > 1 {
        wanted.retain(|w| *w != "`(`");
    }
    // After a complete expression, a new bare expression or the end of the file
    // are technically possible but never what the author meant.
    if wanted.contains(&"an operator") {
        wanted.retain(|w| *w != "an expression" && *w != "the end of the policy");
    }
    let message = if wanted.is_empty() {
        format!("unexpected {found}")
    } else {
        format!("expected {}, found {found}", join_or(&wanted))
    };
    let mut d = Diagnostic::new(message, span);
    if let Some(h) = hint_for(src, pos) {
        d = d.help(h);
    }
    d
}

fn join_or(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

fn describe_found(src: &str, pos: usize) -> String {
    let rest = &src[pos.min(src.len())..];
    if rest.trim().is_empty() {
        return "the end of the policy".to_string();
    }
    match rest.chars().next() {
        None => "the end of the policy".to_string(),
        Some('\n') | Some('\r') => "the end of the line".to_string(),
        Some(_) => {
            let tok = found_span(src, pos).text(src);
            format!("`{tok}`")
        }
    }
}

/// The token starting at `pos`: a word, a number, or one symbol.
fn found_span(src: &str, pos: usize) -> Span {
    let pos = pos.min(src.len());
    let rest = &src[pos..];
    let mut chars = rest.char_indices();
    let len = match chars.next() {
        None => 0,
        Some((_, c)) if c.is_alphanumeric() || c == '_' || c == '.' => rest
            .char_indices()
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '_' || *c == '.'))
            .map_or(rest.len(), |(i, _)| i),
        Some((_, c)) if "&|=!<>?".contains(c) => rest
            .char_indices()
            .find(|(_, c)| !"&|=!<>?".contains(*c))
            .map_or(rest.len(), |(i, _)| i),
        Some((_, c)) => c.len_utf8(),
    };
    Span::new(pos, pos + len)
}

fn hint_for(src: &str, pos: usize) -> Option<String> {
    let rest = &src[pos.min(src.len())..];
    for kw in ["for", "recover"] {
        let after = rest.strip_prefix(kw).and_then(|r| r.chars().next());
        if after.is_some_and(|c| !(c.is_ascii_alphanumeric() || c == '_')) {
            return Some(format!(
                "`{kw}` belongs to a named check: write `check NAME: EXPR {kw} 30s`"
            ));
        }
    }
    if rest.starts_with("and ") || rest.starts_with("or ") {
        return Some("write `&&` and `||` for and / or".to_string());
    }
    if rest.starts_with('=') && !rest.starts_with("==") {
        return Some("compare with `==`".to_string());
    }
    if rest.starts_with('&') && !rest.starts_with("&&") {
        return Some("write `&&` for and".to_string());
    }
    if rest.starts_with('|') && !rest.starts_with("||") {
        return Some("write `||` for or".to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(src: &str) -> String {
        parse(src).unwrap_err()[0].message.clone()
    }

    #[test]
    fn parses_the_card_policy() {
        let stmts = parse("leader && qget_ms < 1000 && owner_ok && rev_lag < 5000").unwrap();
        assert_eq!(stmts.len(), 1);
    }

    #[test]
    fn parses_named_checks_lets_comments_and_hold_down() {
        let src = "# comment\nlet fast = qget_ms < 100 # trailing\n\ncheck read: fast for 30s\nwarn space: !alarm_nospace\n";
        let stmts = parse(src).unwrap();
        assert_eq!(stmts.len(), 3);
        match &stmts[1] {
            Stmt::Check { clauses, .. } => {
                assert_eq!(clauses.len(), 1);
                assert_eq!((clauses[0].kind, clauses[0].secs), (ClauseKind::For, 30.0));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_for_and_recover_in_either_order() {
        for (src, want) in [
            (
                "check a: leader for 10s recover 30s",
                [(ClauseKind::For, 10.0), (ClauseKind::Recover, 30.0)],
            ),
            (
                "check a: leader recover 30s for 10s",
                [(ClauseKind::Recover, 30.0), (ClauseKind::For, 10.0)],
            ),
        ] {
            let stmts = parse(src).unwrap();
            let Stmt::Check { clauses, .. } = &stmts[0] else {
                panic!("{stmts:?}")
            };
            let got: Vec<_> = clauses.iter().map(|c| (c.kind, c.secs)).collect();
            assert_eq!(got, want, "{src}");
        }
    }

    #[test]
    fn a_clause_after_a_bare_expression_says_to_name_the_check() {
        for kw in ["for", "recover"] {
            let d = parse(&format!("leader && qget_ms < 1000 {kw} 30s")).unwrap_err();
            assert_eq!(
                d[0].help.as_deref(),
                Some(
                    format!("`{kw}` belongs to a named check: write `check NAME: EXPR {kw} 30s`")
                        .as_str()
                ),
            );
        }
    }

    #[test]
    fn recover_is_reserved() {
        assert!(parse("let recover = leader\ncheck a: recover").is_err());
        assert_eq!(
            err("check a: leader recover"),
            "expected a duration such as `30s`, found the end of the policy"
        );
    }

    #[test]
    fn literals() {
        assert_eq!(duration_literal("250ms"), 0.25);
        assert_eq!(duration_literal("2m"), 120.0);
        assert_eq!(duration_literal("1h"), 3600.0);
        assert_eq!(parse_size("2GiB"), 2.0 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!(parse_num("5_000"), 5000.0);
    }

    #[test]
    fn precedence_coalesce_binds_tighter_than_comparison() {
        let stmts = parse("qget_ms ?? 0 < 1000").unwrap();
        let Stmt::Check { expr, .. } = &stmts[0] else {
            panic!()
        };
        assert!(matches!(expr.kind, ExprKind::Binary(BinOp::Lt, _, _)));
    }

    #[test]
    fn errors_speak_words_not_rule_names() {
        assert_eq!(
            err("(leader && etcd_up"),
            "expected `)` or an operator, found the end of the policy"
        );
        assert_eq!(
            err("leader &&"),
            "expected an expression, found the end of the policy"
        );
        assert_eq!(err("check a leader"), "expected `:`, found `leader`");
        let m = err("leader < ");
        assert!(!m.contains("_op") && !m.contains("_expr"), "{m}");
    }
}
