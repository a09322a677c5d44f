//! docs/http.md's examples are what the code answers: every fenced block
//! after a `<!-- snapshot: NAME -->` line must equal `tests/snapshots/NAME.snap`
//! (written by `http_api::doc_examples_*` from the router on a hand-made
//! verdict), times, ages and hashes compared as `_` on both sides; every
//! `# HELP` / `# TYPE` line in the page must be one the real binary's
//! registry emits. A response body pasted without a marker is refused, and
//! so is an example snapshot the page does not show.

use std::path::PathBuf;

use serde_json::Value;

/// JSON keys whose values vary from run to run: times, ages, hashes.
const VARYING: &[&str] = &[
    "age_seconds",
    "at",
    "at_least",
    "dropped_until",
    "evaluated_at",
    "in_state_for",
    "last_good_at",
    "loaded_at",
    "seconds",
    "sha256",
    "since",
    "started_at",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// An example as compared: a `$ curl` line, then either the status line,
/// content type and a blank line before the body, or the body; a JSON body pretty-printed
/// with every [`VARYING`] number or string as `"_"` and every `N.Nms ago` / `Ns ago`
/// in a string as `_ ago`.
pub(crate) fn normalise(example: &str) -> String {
    let (head, body) = match example.split_once("\n\n") {
        Some((h, b)) if h.contains("HTTP/1.1 ") => (Some(h), b),
        _ => match example.split_once('\n') {
            Some((h, b)) if h.starts_with("$ ") => (Some(h), b),
            _ => (None, example),
        },
    };
    let body = match serde_json::from_str::<Value>(body) {
        Ok(mut v) => {
            mask(&mut v);
            serde_json::to_string_pretty(&v).unwrap()
        }
        Err(_) => body.trim_end().to_string(),
    };
    match head {
        Some(h) if h.contains('\n') => format!("{}\n\n{body}", h.trim_end()),
        Some(h) => format!("{h}\n{body}"),
        None => body,
    }
}

fn mask(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if VARYING.contains(&k.as_str()) && (v.is_number() || v.is_string()) {
                    *v = Value::String("_".into());
                } else {
                    mask(v);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(mask),
        Value::String(s) => *s = mask_ago(s),
        _ => {}
    }
}

/// The durations measured up to now in a string as `_`: `failed 1.2s ago`
/// and `failed 772ms ago` as `failed _ ago`, `pending for 201ms` as
/// `pending for _`.
fn mask_ago(s: &str) -> String {
    let s = mask_before_ago(s);
    match s.split_once("pending for ") {
        Some((head, tail)) => {
            let n = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
                .unwrap_or(tail.len());
            format!("{head}pending for _{}", mask_ago(&tail[n..]))
        }
        None => s,
    }
}

fn mask_before_ago(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(" ago") {
        let (before, after) = rest.split_at(i);
        let unit = if before.ends_with("ms") { 2 } else { 1 };
        let digits = before[..before.len().saturating_sub(unit)]
            .trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        if before.len() > unit && digits.len() < before.len() - unit {
            out.push_str(digits);
            out.push('_');
        } else {
            out.push_str(before);
        }
        out.push_str(" ago");
        rest = &after[" ago".len()..];
    }
    out + rest
}

/// The insta snapshot `tests/snapshots/NAME.snap` of an example, normalised.
pub(crate) fn assert_example(name: &str, example: String) {
    insta::with_settings!(
        { snapshot_path => "../snapshots", prepend_module_to_snapshot => false, omit_expression => true },
        { insta::assert_snapshot!(name, normalise(&example)) }
    );
}

struct Marked {
    line: usize,
    name: String,
    text: String,
}

/// Every fenced block of the page: its first line number, the snapshot
/// named on the line before it (if any) and its text.
fn blocks(page: &str) -> Vec<(usize, Option<String>, String)> {
    let lines: Vec<&str> = page.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with("```") {
            i += 1;
            continue;
        }
        let name = (i > 0)
            .then(|| lines[i - 1].trim())
            .and_then(|l| l.strip_prefix("<!-- snapshot: "))
            .and_then(|l| l.strip_suffix(" -->"))
            .map(str::to_string);
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].starts_with("```"))
            .unwrap_or_else(|| panic!("docs/http.md:{}: fence never closed", i + 1));
        out.push((i + 1, name, lines[i + 1..end].join("\n")));
        i = end + 1;
    }
    out
}

fn marked(page: &str) -> Vec<Marked> {
    blocks(page)
        .into_iter()
        .filter_map(|(line, name, text)| {
            Some(Marked {
                line,
                name: name?,
                text,
            })
        })
        .collect()
}

/// The body of a `.snap` file: what follows its header.
fn snapshot_text(name: &str) -> Option<String> {
    let text = std::fs::read_to_string(root().join(format!("tests/snapshots/{name}.snap"))).ok()?;
    let body = text.strip_prefix("---\n")?.split_once("\n---\n")?.1;
    Some(body.trim_end().to_string())
}

#[test]
fn every_marked_example_in_http_md_is_its_snapshot() {
    let page = std::fs::read_to_string(root().join("docs/http.md")).unwrap();
    let mut wrong = Vec::new();
    let examples = marked(&page);
    for m in &examples {
        match snapshot_text(&m.name) {
            None => wrong.push(format!(
                "docs/http.md:{}: no snapshot tests/snapshots/{}.snap",
                m.line, m.name
            )),
            Some(snap) => {
                let doc = normalise(&m.text);
                if doc != snap {
                    wrong.push(format!(
                        "docs/http.md:{}: differs from {}.snap (normalised)\n--- the doc\n{doc}\n--- the snapshot\n{snap}",
                        m.line, m.name
                    ));
                }
            }
        }
    }
    // A pasted answer without a marker is how the page drifted: refuse it.
    for (line, name, text) in blocks(&page) {
        let body = match text.split_once('\n') {
            Some((first, rest)) if first.starts_with("$ ") => rest,
            _ => &text,
        };
        let looks_like_an_answer = serde_json::from_str::<Value>(body).is_ok()
            || text.contains("HTTP/1.1 ")
            || text.contains("readyz check");
        if name.is_none() && looks_like_an_answer {
            wrong.push(format!(
                "docs/http.md:{line}: a response without `<!-- snapshot: NAME -->`:\n{text}"
            ));
        }
    }
    // And every example snapshot is on the page: none left behind.
    for e in std::fs::read_dir(root().join("tests/snapshots")).unwrap() {
        let file = e.unwrap().file_name().to_string_lossy().into_owned();
        let name = file.strip_suffix(".snap").unwrap_or_default();
        if name.starts_with("http_doc__") && !examples.iter().any(|m| m.name == name) {
            wrong.push(format!(
                "tests/snapshots/{file} is on no `<!-- snapshot: {name} -->`"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    assert!(
        examples.len() >= 10,
        "only {} marked examples",
        examples.len()
    );
}

/// Every `# HELP` and `# TYPE` line of docs/http.md is one `/metrics` of
/// the real binary emits: `serve` against an etcd that is not there, whose
/// first failed round makes the engine fill the check and signal families
/// (a family without samples is not written), scraped until every line
/// shows or 30 s pass.
#[tokio::test]
async fn every_help_and_type_line_in_http_md_is_one_the_exporter_emits() {
    let page = std::fs::read_to_string(root().join("docs/http.md")).unwrap();
    let documented: Vec<String> = page
        .lines()
        .filter(|l| l.starts_with("# HELP ") || l.starts_with("# TYPE "))
        .map(str::to_string)
        .collect();
    assert!(documented.len() >= 10, "{documented:?}");
    // Its log stays read (`_log`), so it never writes to a closed pipe.
    let (_child, addr, _, _log) = crate::cli_conventions::serve(&[]);
    let found = etcd_readiness_testkit::wait::poll(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(200),
        || {
            let (addr, documented) = (addr.clone(), documented.clone());
            async move {
                let scrape = tokio::task::spawn_blocking(move || {
                    crate::cli_conventions::get(&addr, "/metrics")
                })
                .await
                .unwrap();
                let missing: Vec<String> = documented
                    .into_iter()
                    .filter(|l| !scrape.lines().any(|s| s == l))
                    .collect();
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err((missing, scrape))
                }
            }
        },
    )
    .await;
    if let Err((missing, scrape)) = found {
        panic!(
            "docs/http.md has lines /metrics does not emit:\n{missing:#?}\n--- /metrics\n{scrape}"
        );
    }
}

#[test]
fn normalising_masks_times_hashes_and_ages_alike() {
    assert_eq!(
        mask_ago("last sample failed 1.2s ago: x; read pending for 455ms, 772ms ago"),
        "last sample failed _ ago: x; read pending for _, _ ago"
    );
    assert_eq!(mask_ago("ago"), "ago");
    assert_eq!(mask_ago("long ago"), "long ago");
    let a =
        normalise("$ curl x\nHTTP/1.1 200 OK\n\n{\"since\": 1.5, \"name\": \"a\", \"at\": null}");
    let b = normalise("$ curl x\nHTTP/1.1 200 OK\n\n{\"since\": 2, \"name\": \"a\", \"at\": null}");
    assert_eq!(a, b);
    assert!(a.contains("\"since\": \"_\""), "{a}");
    assert!(a.contains("\"at\": null"), "{a}");
}
