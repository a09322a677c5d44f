//! Diagnostics: problems found while loading a policy, rendered the way a
//! compiler would — `file:line:col`, the source line, a caret under the span,
//! and a hint where one helps.

use std::fmt;

use super::ast::Span;

/// One problem in a policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub message: String,
    pub span: Span,
    /// Short text printed after the carets.
    pub label: Option<String>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn new(message: impl Into<String>, span: Span) -> Self {
        Diagnostic {
            message: message.into(),
            span,
            label: None,
            help: None,
        }
    }

    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// All problems found in one policy file, with what is needed to render them.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostics {
    pub path: String,
    pub source: String,
    pub items: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn new(path: &str, source: &str, items: Vec<Diagnostic>) -> Self {
        Diagnostics {
            path: path.to_string(),
            source: source.to_string(),
            items,
        }
    }

    /// Each problem on one line (`file:line:col: message`), for structured logs
    /// and metrics-side reporting where carets do not fit.
    pub fn one_line(&self) -> String {
        self.items
            .iter()
            .map(|d| {
                let (line, col) = line_col(&self.source, d.span.start);
                format!("{}:{line}:{col}: {}", self.path, d.message)
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl std::error::Error for Diagnostics {}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let offset = crate::text::floor_char_boundary(src, offset);
    let before = &src[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = src[line_start..offset].chars().count() + 1;
    (line, col)
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, d) in self.items.iter().enumerate() {
            if n > 0 {
                writeln!(f)?;
            }
            render(f, &self.path, &self.source, d)?;
        }
        Ok(())
    }
}

fn render(f: &mut fmt::Formatter<'_>, path: &str, src: &str, d: &Diagnostic) -> fmt::Result {
    let start = crate::text::floor_char_boundary(src, d.span.start.min(src.len()));
    let (line, col) = line_col(src, start);
    writeln!(f, "error: {}", d.message)?;
    let gutter = line.to_string().len();
    let pad = " ".repeat(gutter);
    writeln!(f, "{pad}--> {path}:{line}:{col}")?;
    let line_start = src[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
    let text = src[line_start..line_end].trim_end_matches('\r');
    writeln!(f, "{pad} |")?;
    // Tabs are shown as single spaces so the caret lines up.
    writeln!(f, "{line} | {}", text.replace('\t', " "))?;
    let end = crate::text::floor_char_boundary(src, d.span.end.clamp(start, line_end));
    let width = src[start..end].chars().count().max(1);
    let lead = " ".repeat(col - 1);
    let carets = "^".repeat(width);
    match &d.label {
        Some(l) => writeln!(f, "{pad} | {lead}{carets} {l}")?,
        None => writeln!(f, "{pad} | {lead}{carets}")?,
    }
    if let Some(h) = &d.help {
        writeln!(f, "{pad} = help: {h}")?;
    }
    Ok(())
}

/// Longest name [`did_you_mean`] compares.
pub const MAX_SUGGEST_LEN: usize = 128;

/// The closest of `candidates` to `name`, if close enough to be a likely typo.
///
/// Names longer than [`MAX_SUGGEST_LEN`] get no suggestion: the edit distance
/// costs the product of the two lengths in time and memory, and a 30 KiB
/// identifier is no typo.
pub fn did_you_mean<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    if name.len() > MAX_SUGGEST_LEN {
        return None;
    }
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .filter(|c| *c != name && c.len() <= MAX_SUGGEST_LEN)
        .map(|c| (strsim::damerau_levenshtein(name, c), c))
        .filter(|(d, c)| *d <= limit || c.starts_with(name) && name.len() >= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters() {
        let src = "ab\nçd x";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 3), (2, 1));
        assert_eq!(line_col(src, src.find('x').unwrap()), (2, 4));
    }

    #[test]
    fn suggestions() {
        let names = ["qget_ms", "sget_ms", "leader", "is_leader"];
        assert_eq!(
            did_you_mean("qget_mss", names.iter().copied()),
            Some("qget_ms")
        );
        assert_eq!(did_you_mean("leadr", names.iter().copied()), Some("leader"));
        assert_eq!(did_you_mean("banana", names.iter().copied()), None);
    }

    /// Edit distance costs the product of the lengths in memory: a 30 KiB
    /// unknown name against a 30 KiB `let` name would need ~7 GiB (names
    /// of 3.5 KiB each fit in a policy now).
    #[test]
    fn regression_no_suggestion_for_huge_names() {
        let long_let = format!("a{}", "b".repeat(3_500));
        let long_use = format!("a{}c", "b".repeat(3_499));
        assert_eq!(
            did_you_mean(&long_use, [long_let.as_str()].into_iter()),
            None
        );
        let src = format!("let {long_let} = leader\ncheck x: {long_use}\n");
        let d = crate::policy::Policy::compile("p", &src, &crate::signals::Catalogue::builtin())
            .unwrap_err();
        assert_eq!(d.items.len(), 1);
        assert!(d.items[0].message.starts_with("unknown signal `abbb"));
    }
}
