//! The syntax tree of a policy, as parsed, with byte spans into the source.

/// Byte range in the policy source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }

    pub fn text(self, src: &str) -> &str {
        src.get(self.start..self.end).unwrap_or("")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    Not,
    Neg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Or,
    And,
    Coalesce,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::Coalesce => "??",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Bool(bool),
    Num(f64),
    /// Seconds.
    Duration(f64),
    Ident(String),
    Call {
        name: String,
        name_span: Span,
        args: Vec<Expr>,
    },
    Unary(UnaryOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StmtKind {
    Check,
    Warn,
    /// A bare expression: the whole policy, split into checks at top-level `&&`.
    Bare,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Let {
        name: String,
        name_span: Span,
        expr: Expr,
    },
    Check {
        kind: StmtKind,
        name: Option<(String, Span)>,
        expr: Expr,
        /// Timing clauses (`for`, `recover`) in the order written; the
        /// checker refuses a repeated one.
        clauses: Vec<Clause>,
        span: Span,
    },
}

/// Which timing clause of a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClauseKind {
    /// `for DURATION`: the hold-down (fall delay).
    For,
    /// `recover DURATION`: the recovery hold (rise delay).
    Recover,
}

impl ClauseKind {
    pub fn keyword(self) -> &'static str {
        match self {
            ClauseKind::For => "for",
            ClauseKind::Recover => "recover",
        }
    }
}

/// A timing clause of a check: `for 10s` or `recover 30s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Clause {
    pub kind: ClauseKind,
    /// The duration in seconds (NaN if it is not one, which the checker reports).
    pub secs: f64,
    /// The duration literal.
    pub span: Span,
    /// The whole clause, keyword included.
    pub clause_span: Span,
}
