//! Snapshot tests of what users read when a policy is wrong: the exact text of
//! diagnostics (`file:line:col`, source line, caret, help), and of the `check`
//! command's output and exit code.

use std::process::Command;

use etcd_readiness_policy::policy::{Policy, limits};
use etcd_readiness_policy::signals::{Catalogue, Source};

/// Every `tests/diagnostics/*.policy` is a policy that must be refused; its
/// diagnostics are snapshotted in `tests/snapshots/` as
/// `diagnostics__fixtures@NAME.snap` (named as when this file was its own
/// test binary, so the module path of the grouped binary does not rename
/// them). A new case is a new file: no Rust to write.
#[test]
fn fixtures() {
    let in_snapshots = || {
        insta::glob!("../diagnostics", "*.policy", |path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let src = std::fs::read_to_string(path).unwrap();
            let out = match Policy::compile(&name, &src, &Catalogue::builtin()) {
                Ok(_) => panic!("{name}: expected diagnostics"),
                Err(d) => d.to_string(),
            };
            insta::assert_snapshot!("diagnostics__fixtures", out);
        })
    };
    insta::with_settings!(
        { snapshot_path => "../snapshots", prepend_module_to_snapshot => false },
        { in_snapshots() }
    );
}

fn diag(src: &str) -> String {
    match Policy::compile("policy.rules", src, &Catalogue::builtin()) {
        Ok(_) => panic!("expected diagnostics for {src:?}"),
        Err(d) => d.to_string(),
    }
}

#[test]
fn functions_and_unconfigured_sources() {
    insta::assert_snapshot!(diag("check a: agee(leader) < 1s\ncheck b: age(1) < 1s\ncheck c: known()"), @r"
    error: unknown function `agee`
     --> policy.rules:1:10
      |
    1 | check a: agee(leader) < 1s
      |          ^^^^
      = help: did you mean `age`?

    error: `age` takes a signal name
     --> policy.rules:2:14
      |
    2 | check b: age(1) < 1s
      |              ^
      = help: e.g. `age(snapshot_revision) < 10m`

    error: `known` takes 1 argument, but 0 were given
     --> policy.rules:3:10
      |
    3 | check c: known()
      |          ^^^^^^^
    ");
    let mut c = Catalogue::builtin();
    c.set_source_enabled(&Source::Owner, false);
    let d = Policy::compile("card.policy", "leader && owner_ok", &c).unwrap_err();
    insta::assert_snapshot!(d.to_string(), @r"
    error: signal `owner_ok` comes from the owner source, which is not configured
     --> card.policy:1:11
      |
    1 | leader && owner_ok
      |           ^^^^^^^^
      = help: set --owner.name and --owner.id to enable it, or remove this term
    ");
}

#[test]
fn limits_give_errors() {
    let compile_err =
        |name: &str, src: &str| match Policy::compile(name, src, &Catalogue::builtin()) {
            Err(d) => d.one_line(),
            Ok(_) => panic!("accepted"),
        };
    // 100,000 deep is over the size limit; 7,000 deep fits and hits the depth limit.
    let deep = format!("{}leader{}", "(".repeat(100_000), ")".repeat(100_000));
    assert_eq!(
        compile_err("deep.policy", &deep),
        "deep.policy:1:1: policy is 200006 bytes, more than the limit of 8192 bytes"
    );
    let deep = format!("{}leader", "(".repeat(7_000));
    let msg = compile_err("deep.policy", &deep);
    assert_eq!(
        msg,
        "deep.policy:1:65: expression nested more than 64 levels deep"
    );
    let many: String = (0..20).map(|i| format!("check c{i}: leader\n")).collect();
    let msg = match Policy::compile("many.policy", &many, &Catalogue::builtin()) {
        Err(d) => d.one_line(),
        Ok(_) => panic!("accepted"),
    };
    assert!(msg.contains("more than 16 checks"), "{msg}");
}

fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_etcd-readiness-exporter"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run the binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_command_accepts_every_shipped_policy() {
    let mut files: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/policies"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "policy"))
            .map(|p| format!("policies/{}", p.file_name().unwrap().to_string_lossy()))
            .collect();
    files.sort();
    assert!(files.len() >= 3);
    let args: Vec<&str> = std::iter::once("check")
        .chain(files.iter().map(String::as_str))
        .collect();
    let (code, out, err) = cli(&args);
    assert_eq!(code, 0, "{out}{err}");
    insta::assert_snapshot!(out, @r"
    policies/card.policy: OK: 4 checks; signals: leader, qget_ms, owner_ok, rev_lag
      sources: etcd, owner, backup; serve needs owner (--owner.name and --owner.id), backup (--backup.url)
    policies/default.policy: OK: 6 checks, 3 warnings; signals: leader, leaderless, qget_ms, sget_ms, learner, alarm_corrupt, alarm_nospace, apply_lag, defrag_inflight, db_quota_ratio
      sources: etcd, etcd_metrics; optional (loads without, the `??` fallback decides): etcd_metrics (--etcd.metrics-url)
    policies/gardener.policy: OK: 8 checks, 4 warnings, 1 with hold-down, 2 with recovery hold; signals: leader, leaderless, qget_ms, learner, alarm_corrupt, alarm_nospace, owner_ok, rev_lag, apply_lag, backup_healthy, full_snapshot_age, defrag_inflight, db_quota_ratio
      sources: etcd, owner, backup, etcd_metrics; serve needs backup (--backup.url); optional (loads without, the `??` fallback decides): owner (--owner.name and --owner.id), etcd_metrics (--etcd.metrics-url)
    ");
}

/// Issue 20: `check` accepted policies/card.policy, which a `serve` without
/// the owner and backup sources refuses; `--sources` checks what it will run.
#[test]
fn check_with_sources_refuses_what_serve_without_them_would() {
    let (code, _, err) = cli(&["check", "--sources", "etcd", "policies/card.policy"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("signal `owner_ok` comes from the owner source, which is not configured"),
        "{err}"
    );
    assert!(err.contains("set --backup.url to enable it"), "{err}");
    let (code, out, err) = cli(&[
        "check",
        "--sources",
        "etcd,owner,backup",
        "policies/card.policy",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = cli(&["check", "--sources", "etcd,dns", "policies/card.policy"]);
    assert_eq!(code, 2, "an unknown source is a usage error: {err}");
}

/// Issue 23: the default policy's defrag term is optional, so `serve`
/// without `--etcd.metrics-url` loads it; a bare `defrag_inflight` is not.
#[test]
fn check_with_sources_loads_the_default_policy_without_the_etcd_metrics_source() {
    let (code, out, err) = cli(&["check", "--sources", "etcd", "policies/default.policy"]);
    assert_eq!(code, 0, "{out}{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bare.policy");
    std::fs::write(&path, "check d: !defrag_inflight\n").unwrap();
    let (code, _, err) = cli(&["check", "--sources", "etcd", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "signal `defrag_inflight` comes from the etcd_metrics source, which is not configured"
        ),
        "{err}"
    );
    assert!(err.contains("set --etcd.metrics-url to enable it"), "{err}");
    let (code, out, err) = cli(&[
        "check",
        "--sources",
        "etcd,etcd_metrics",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("serve needs etcd_metrics (--etcd.metrics-url)"),
        "{out}"
    );
}

#[test]
fn check_command_on_a_broken_policy_prints_location_and_caret_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.policy");
    std::fs::write(&path, "# broken\ncheck read: qget_ms < 1000 &&\n").unwrap();
    let (code, out, err) = cli(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(out, "");
    let err = err.replace(path.to_str().unwrap(), "broken.policy");
    insta::assert_snapshot!(err, @r"
    error: expected an expression, found the end of the policy
     --> broken.policy:2:30
      |
    2 | check read: qget_ms < 1000 &&
      |                              ^
    broken.policy: FAILED: 1 problem
    ");
}

#[test]
fn test_command_passes_on_every_shipped_test_file_and_fails_on_a_wrong_expectation() {
    let (code, out, err) = cli(&[
        "test",
        "policies/card.test.yaml",
        "policies/default.test.yaml",
        "policies/gardener.test.yaml",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.matches("SUCCESS").count(), 3, "{out}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.policy"), "leader && qget_ms < 1000").unwrap();
    let t = dir.path().join("p.test.yaml");
    std::fs::write(
        &t,
        "policy: p.policy\ntests:\n  - name: slow read\n    signals: {leader: \"true\", qget_ms: \"1500\"}\n    expect:\n      - {at: 0s, ready: true}\n",
    )
    .unwrap();
    let (code, _out, err) = cli(&["test", t.to_str().unwrap()]);
    assert_eq!(code, 1);
    let err = err.replace(t.to_str().unwrap(), "p.test.yaml");
    insta::assert_snapshot!(err, @r"
    p.test.yaml: test `slow read` at 0s:
      ready: expected true, got false
      not passing at that time:
        [-]qget_ms fail: qget_ms < 1000 is false (qget_ms = 1500)

    p.test.yaml: FAILED: 1 of 1 expectations did not hold
    ");
}

#[test]
fn the_test_file_example_in_the_language_docs_passes() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/policy-language.md"
    ))
    .unwrap();
    let start = doc
        .find("```yaml\npolicy: card.policy")
        .expect("the example is in the docs")
        + "```yaml\n".len();
    let end = start + doc[start..].find("```").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/policies/card.policy"),
        dir.path().join("card.policy"),
    )
    .unwrap();
    let t = dir.path().join("doc.test.yaml");
    std::fs::write(&t, &doc[start..end]).unwrap();
    let (code, out, err) = cli(&["test", t.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn every_policy_example_in_the_language_docs_compiles() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/policy-language.md"
    ))
    .unwrap();
    // Untagged fenced blocks are policies, except diagnostics and explanations.
    let mut blocks: Vec<String> = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in doc.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(tag)) => current = Some((tag.to_string(), String::new())),
            (Some(_), Some(_)) => {
                let (tag, text) = current.take().unwrap();
                if tag.is_empty()
                    && !text.starts_with("error:")
                    && !text.starts_with("qget_ms unknown")
                {
                    blocks.push(text);
                }
            }
            (Some((_, text)), None) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(blocks.len() >= 2, "found {} policy examples", blocks.len());
    for block in &blocks {
        if let Err(d) = Policy::compile("docs", block, &Catalogue::builtin()) {
            panic!("a policy example in the docs does not compile:\n{block}\n{d}");
        }
    }
}

/// Issue 10: a 28-deep chain (613 bytes) took `check` ~8 s and a 40-deep one
/// wedged the process, because each `let` was expanded at every use.
#[test]
fn regression_let_doubling_chain_compiles_to_a_size_linear_in_its_text() {
    for depth in [1, 10, 28, 40] {
        let src = limits::doubling_chain("leader", depth);
        let p = Policy::compile("chain.policy", &src, &Catalogue::builtin())
            .unwrap_or_else(|d| panic!("{d}"));
        // One node for `leader`, three per `let` (two uses and the `&&`), one
        // for the check's use of the last let.
        assert_eq!(p.node_count(), 1 + 3 * depth + 1, "depth {depth}");
        assert_eq!(
            p.summary(),
            format!("1 check, {} lets; signals: leader", depth + 1)
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chain.policy");
    std::fs::write(&path, limits::doubling_chain("leader", 40)).unwrap();
    let (code, out, err) = cli(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let out = out.replace(path.to_str().unwrap(), "chain.policy");
    insta::assert_snapshot!(out, @r"
    chain.policy: OK: 1 check, 41 lets; signals: leader
      sources: etcd (always on)
    ");
}

/// Issue 10: `check` exited 101 (a panic in `Duration::from_secs_f64`) and a
/// hot reload panicked inside the reload task.
#[test]
fn regression_huge_hold_down_is_a_diagnostic_and_exit_1_not_a_panic() {
    insta::assert_snapshot!(diag("check a: leader for 99999999999999999999h\ncheck b: leader for 169h\ncheck c: leader for 168h"), @r"
    error: hold-down `99999999999999999999h` is longer than the limit of 168h
     --> policy.rules:1:21
      |
    1 | check a: leader for 99999999999999999999h
      |                     ^^^^^^^^^^^^^^^^^^^^^
      = help: a hold-down bridges blips of seconds or minutes; use at most `for 168h`

    error: hold-down `169h` is longer than the limit of 168h
     --> policy.rules:2:21
      |
    2 | check b: leader for 169h
      |                     ^^^^
      = help: a hold-down bridges blips of seconds or minutes; use at most `for 168h`
    ");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hold.policy");
    std::fs::write(&path, "check a: leader for 99999999999999999999h\n").unwrap();
    let (code, out, err) = cli(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    let err = err.replace(path.to_str().unwrap(), "hold.policy");
    insta::assert_snapshot!(err, @r"
    error: hold-down `99999999999999999999h` is longer than the limit of 168h
     --> hold.policy:1:21
      |
    1 | check a: leader for 99999999999999999999h
      |                     ^^^^^^^^^^^^^^^^^^^^^
      = help: a hold-down bridges blips of seconds or minutes; use at most `for 168h`
    hold.policy: FAILED: 1 problem
    ");
}

#[test]
fn literals_too_large_for_a_float_are_diagnostics() {
    let digits = "9".repeat(310);
    insta::assert_snapshot!(diag("check a: qget_ms < 1e999 && rev_lag < 1e308"), @r"
    error: `1e999` is too large to be a number
     --> policy.rules:1:20
      |
    1 | check a: qget_ms < 1e999 && rev_lag < 1e308
      |                    ^^^^^ larger than 1.8e308
      = help: write a smaller value
    ");
    let src = format!("check b: snapshot_age < {digits}h\ncheck d: leader for {digits}ms");
    let d = Policy::compile("policy.rules", &src, &Catalogue::builtin()).unwrap_err();
    insta::assert_snapshot!(d.one_line(), @r"policy.rules:1:25: `999999999999…99999h` (311 characters) is too large to be a number; policy.rules:2:21: hold-down `999999999999…9999ms` (312 characters) is longer than the limit of 168h");
}
