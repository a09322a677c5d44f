//! YAML reading for the files operators write next to policies — the `test`
//! command's series files and the runtime's `--config` sources file — with
//! one parser and one error style: serde-saphyr (pure Rust, panic-free,
//! with budgets on nesting and alias expansion, so a "billion laughs" file
//! is an error, not an allocation storm), rendered as `file:line:col` with
//! the offending line under it, like the policy checker's diagnostics.

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::{Budget, DefaultMessageFormatter, MessageFormatter};

/// A YAML document that could not be read into the expected shape. The
/// message already names the file, the line and the column.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    message: String,
}

/// Deserialize `text`, naming `path` in any error.
pub fn from_str<T: DeserializeOwned>(path: &str, text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str(text).map_err(|e| error(path, &e))
}

fn error(path: &str, e: &serde_saphyr::Error) -> YamlError {
    let rendered = e.render_with_options(serde_saphyr::render_options! {
        source_name: Some(path),
        formatter: &Words,
    });
    YamlError {
        message: format!(
            "{path}: {}",
            rendered.trim_start_matches("error: ").trim_end()
        ),
    }
}

/// serde-saphyr's messages, but a breached budget in words, with the limit
/// (its own text is Rust debug output: `budget breached: Nodes { nodes: 250001 }`).
struct Words;

impl MessageFormatter for Words {
    fn format_message<'a>(&self, err: &'a serde_saphyr::Error) -> Cow<'a, str> {
        match err {
            serde_saphyr::Error::Budget { breach, .. } => Cow::Owned(budget_breach(breach)),
            _ => DefaultMessageFormatter.format_message(err),
        }
    }
}

/// What a breached budget means, naming the limit (serde-saphyr's defaults,
/// which every reader here keeps).
fn budget_breach(breach: &BudgetBreach) -> String {
    let b = Budget::default();
    let what = match breach {
        BudgetBreach::Documents { .. } => {
            format!("more than {} YAML documents", thousands(b.max_documents))
        }
        BudgetBreach::Nodes { .. } => format!(
            "more than {} YAML nodes (mappings, sequences and scalars; an alias counts as what it repeats)",
            thousands(b.max_nodes)
        ),
        BudgetBreach::Depth { .. } => format!("nested deeper than {} levels", b.max_depth),
        BudgetBreach::Events { .. } => {
            format!("more than {} YAML parser events", thousands(b.max_events))
        }
        BudgetBreach::Aliases { .. } | BudgetBreach::AliasAnchorRatio { .. } => {
            "too many aliases (`*name`) for its anchors: an alias bomb is refused".to_string()
        }
        BudgetBreach::Anchors { .. } => {
            format!("more than {} anchors (`&name`)", thousands(b.max_anchors))
        }
        BudgetBreach::ScalarBytes { .. } => format!(
            "more than {} MiB of scalar text",
            b.max_total_scalar_bytes >> 20
        ),
        BudgetBreach::MergeKeys { .. } => {
            format!(
                "more than {} merge keys (`<<`)",
                thousands(b.max_merge_keys)
            )
        }
        _ => "too large or too deeply nested".to_string(),
    };
    format!("the input has {what}: more than is read (split a large input into smaller ones)")
}

/// `250000` as `250,000`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Every document of a multi-document stream (`---` separated, as
/// `kubectl kustomize` prints), each deserialized alone; the budgets hold
/// for the whole stream.
pub fn documents<T: DeserializeOwned>(path: &str, text: &str) -> Result<Vec<T>, YamlError> {
    serde_saphyr::from_multiple(text).map_err(|e| error(path, &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Shape {
        name: String,
    }

    #[test]
    fn errors_name_the_file_line_and_column() {
        let e = from_str::<Shape>("x.yaml", "name: a\nnmae: b\n").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("x.yaml:2:1"), "{text}");
        assert!(text.contains("unknown field `nmae`"), "{text}");
    }

    #[test]
    fn documents_reads_each_document_of_a_stream() {
        let docs: Vec<serde_json::Value> =
            documents("m.yaml", "kind: A\n---\nkind: B\n...\n---\nkind: C\n").unwrap();
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["A", "B", "C"]);
        let e = documents::<serde_json::Value>("m.yaml", "kind: A\n---\nkind: [\n").unwrap_err();
        assert!(e.to_string().starts_with("m.yaml:"), "{e}");
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut doc = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (i, prev) in ["b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .zip(["a", "b", "c", "d", "e", "f", "g"])
        {
            let refs = vec![format!("*{prev}"); 10].join(", ");
            doc.push_str(&format!("{}: &{} [{refs}]\n", i, i));
        }
        doc.push_str("name: y\n");
        let e = from_str::<serde_json::Value>("bomb.yaml", &doc).unwrap_err();
        assert!(e.to_string().contains("more than is read"), "{e}");
    }

    #[test]
    fn a_breached_budget_is_said_in_words_with_its_limit() {
        let docs = "kind: A\n---\n".repeat(1_025);
        let e = documents::<serde_json::Value>("m.yaml", &docs).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("more than 1,024 YAML documents"), "{text}");
        assert!(!text.contains("Documents {"), "{text}");
        let nodes = format!("[{}]", "1,".repeat(250_001));
        let e = from_str::<serde_json::Value>("n.yaml", &nodes).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("more than 250,000 YAML nodes"), "{text}");
        assert!(!text.contains("Nodes {"), "{text}");
    }
}
