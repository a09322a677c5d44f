//! The command samples of the README and the docs are what the binary
//! prints: every `$ etcd-readiness-exporter check|signals|lint|--version …` line in a
//! fenced block of README.md, docs/*.md and deploy/kustomize/README.md is
//! run (from a directory holding the repository's `policies/` and `tests/`,
//! and the few files the samples invent, such as `broken.policy`), and its
//! output, standard output then standard error, must equal the lines under
//! it up to the next `$ ` or the end of the block; a last line `…` means
//! "starts with". `--version`'s branch, revision, date, compiler and
//! platform are the build's: only the layout and the version are compared.
//! `replay` samples need a Prometheus with history, and
//! `curl` ones a running exporter: not run here.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The subcommands whose samples are run.
const RUN: &[&str] = &["check", "signals", "lint", "--version"];

/// Files a sample names that are not in the repository.
const INVENTED: &[(&str, &str)] = &[("broken.policy", "leader && qget_mss < 1000\n")];

struct Sample {
    at: String,
    args: Vec<String>,
    expected: Vec<String>,
    prefix_only: bool,
}

fn samples(root: &Path, rel: &str) -> Vec<Sample> {
    let text = std::fs::read_to_string(root.join(rel)).unwrap();
    let mut out: Vec<Sample> = Vec::new();
    let (mut fenced, mut open) = (false, false);
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            open = false;
            continue;
        }
        if !fenced {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            let cmd = cmd.split(" #").next().unwrap().trim();
            let mut words = cmd.split_whitespace();
            open = words.next() == Some("etcd-readiness-exporter")
                && cmd
                    .split_whitespace()
                    .nth(1)
                    .is_some_and(|s| RUN.contains(&s));
            if open {
                out.push(Sample {
                    at: format!("{rel}:{}", i + 1),
                    args: words.map(str::to_string).collect(),
                    expected: Vec::new(),
                    prefix_only: false,
                });
            }
        } else if open {
            let s = out.last_mut().unwrap();
            if line == "…" {
                s.prefix_only = true;
                open = false;
            } else {
                s.expected.push(line.to_string());
            }
        }
    }
    out
}

/// A `--version` line with what differs between builds cut off: the text
/// up to the first value (`(branch: `, `build date:` and its spaces).
fn build_independent(line: &str) -> String {
    match line.find("(branch: ") {
        Some(i) => line[..i + "(branch: ".len()].to_string(),
        None => match line.find(": ") {
            Some(i) => format!("{}: {}", &line[..i], "_"),
            None => line.to_string(),
        },
    }
}

/// `dir/*.ext`-style arguments expanded as a shell would (sorted).
fn expand(cwd: &Path, arg: &str) -> Vec<String> {
    let Some((head, tail)) = arg.split_once('*') else {
        return vec![arg.to_string()];
    };
    let (dir, prefix) = head.rsplit_once('/').unwrap_or((".", head));
    let mut names: Vec<String> = std::fs::read_dir(cwd.join(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix) && n.ends_with(tail))
        .map(|n| format!("{dir}/{n}"))
        .collect();
    names.sort();
    names
}

#[test]
fn every_check_signals_and_lint_sample_in_the_docs_is_what_the_binary_prints() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cwd = tempfile::tempdir().unwrap();
    for d in ["policies", "tests"] {
        std::os::unix::fs::symlink(root.join(d), cwd.path().join(d)).unwrap();
    }
    for (name, text) in INVENTED {
        std::fs::write(cwd.path().join(name), text).unwrap();
    }
    let mut docs = vec![
        "README.md".to_string(),
        "deploy/kustomize/README.md".to_string(),
    ];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    docs.sort();
    let (mut checked, mut wrong) = (0, Vec::new());
    for doc in &docs {
        for s in samples(&root, doc) {
            let args: Vec<String> = s.args.iter().flat_map(|a| expand(cwd.path(), a)).collect();
            let out = Command::new(env!("CARGO_BIN_EXE_etcd-readiness-exporter"))
                .args(&args)
                .current_dir(cwd.path())
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            // A blank line at the end is the terminal's business, not the sample's.
            let mut got: Vec<&str> = text.lines().map(str::trim_end).collect();
            while got.last() == Some(&"") {
                got.pop();
            }
            let mut want: Vec<&str> = s.expected.iter().map(|l| l.trim_end()).collect();
            let (masked_got, masked_want): (Vec<String>, Vec<String>);
            if s.args == ["--version"] {
                masked_got = got.iter().map(|l| build_independent(l)).collect();
                masked_want = want.iter().map(|l| build_independent(l)).collect();
                got = masked_got.iter().map(String::as_str).collect();
                want = masked_want.iter().map(String::as_str).collect();
            }
            let same = if s.prefix_only {
                got.starts_with(&want)
            } else {
                got == want
            };
            checked += 1;
            if !same {
                wrong.push(format!(
                    "{}: `etcd-readiness-exporter {}`{}\n--- the sample\n{}\n--- what it prints\n{}",
                    s.at,
                    s.args.join(" "),
                    if s.prefix_only { " (starts with)" } else { "" },
                    want.join("\n"),
                    got.join("\n")
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    assert!(checked >= 4, "only {checked} samples found in {docs:?}");
}
