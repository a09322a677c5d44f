//! YAML reading for the files operators write next to policies — the `test`
//! command's series files and the runtime's `--config` sources file — with
//! one parser and one error style: serde-saphyr (pure Rust, panic-free,
//! with budgets on nesting and alias expansion, so a "billion laughs" file
//! is an error, not an allocation storm), rendered as `file:line:col` with
//! the offending line under it, like the policy checker's diagnostics.

use serde::de::DeserializeOwned;

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
    let rendered = e.render_with_options(serde_saphyr::render_options! { source_name: Some(path) });
    YamlError {
        message: format!(
            "{path}: {}",
            rendered.trim_start_matches("error: ").trim_end()
        ),
    }
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
        assert!(e.to_string().contains("budget breached"), "{e}");
    }
}
