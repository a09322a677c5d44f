//! `replay` of a fleet against real stores: the same synthetic fleet
//! (`etcd_readiness_testkit::fleet`: 1,000 members in clusters of three,
//! 6 h at 60 s) written into Prometheus 3.5 and 2.42 (the same blocks) through `promtool tsdb
//! create-blocks-from openmetrics` (bookworm's promtool where the fetched
//! 3.5 has none) and into VictoriaMetrics 1.145 through
//! its `/api/v1/import/prometheus`, replayed from each: the per-member
//! results are the same, line for line, and the summary names the members
//! the candidate changes, their clusters and the check that causes it.
//! Prometheus runs with `--query.max-samples=5000`, which the first
//! batches exceed: replay meets it by splitting them, and where one member
//! alone exceeds it the error names the limit and its flag.
//!
//! Both stores run on free loopback ports in a temporary directory under
//! one heavy-test slot and are killed on drop; the binaries come from
//! `.ci/fetch-binaries prometheus-3 victoria-metrics`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use etcd_readiness_testkit::binaries::fetched;
use etcd_readiness_testkit::fleet::{self, CANDIDATE, Fleet, Format};
use etcd_readiness_testkit::prometheus::{Prometheus, prometheus_bin};
use etcd_readiness_testkit::victoriametrics::{VictoriaMetrics, victoria_metrics_bin};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-readiness-exporter");
const MEMBERS: usize = 1000;

/// `replay` of `range` at 60 s steps (unless `extra` says otherwise).
fn replay(url: &str, policy: &Path, range: (i64, i64), extra: &[&str]) -> Output {
    let step = if extra.contains(&"--step") {
        &[][..]
    } else {
        &["--step", "60s"][..]
    };
    Command::new(BIN)
        .arg("replay")
        .args(["--prometheus.url", url, "--policy"])
        .arg(policy)
        .args([
            "--start",
            &range.0.to_string(),
            "--end",
            &range.1.to_string(),
        ])
        .args(step)
        .args(["--cluster-label", "namespace"])
        .args(extra)
        .output()
        .expect("run the exporter binary")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The label set of member `i` as the text format prints it.
fn label_set(i: usize) -> String {
    let parts: Vec<String> = fleet::member_labels(i)
        .iter()
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    format!("{{{}}}", parts.join(","))
}

// Long because: one fleet loaded into two stores (the slow part), then compared store against store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_replays_the_same_from_prometheus_3_and_victoriametrics_and_names_what_changes() {
    let need = |r: Result<std::path::PathBuf, etcd_readiness_testkit::binaries::FetchError>| {
        r.unwrap_or_else(|e| panic!("{e} (bash .ci/fetch-binaries prometheus-3 victoria-metrics)"))
    };
    let prometheus = need(fetched("prometheus-3", "prometheus"));
    let vm_bin = need(victoria_metrics_bin());
    let dir = tempfile::tempdir().unwrap();
    let (pdir, vdir) = (dir.path().join("prometheus"), dir.path().join("vm"));
    std::fs::create_dir_all(&pdir).unwrap();
    std::fs::create_dir_all(&vdir).unwrap();
    // Six whole hours ending at least an hour ago: wholly in the past.
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let end = now / 3600 * 3600 - 3600;
    let start = end - 6 * 3600;
    let f = Fleet {
        members: MEMBERS,
        start,
        step: 60,
        steps: 360,
    };

    // Prometheus 3.5: promtool's blocks in its data directory (Debian's
    // 3.5 package has no promtool: bookworm's writes the same block format).
    let om = pdir.join("fleet.om");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&om).unwrap());
    f.write(Format::OpenMetrics, &mut w).unwrap();
    drop(w);
    let promtool = Some(prometheus.with_file_name("promtool"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| "/usr/bin/promtool".into());
    let out = Command::new(&promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(pdir.join("data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        stdout(&out),
        stderr(&out)
    );
    std::fs::remove_file(&om).unwrap();
    // The same blocks for Prometheus 2.42 (bookworm's), in a directory of
    // its own.
    let p2dir = dir.path().join("prometheus-2");
    std::fs::create_dir_all(&p2dir).unwrap();
    let out = Command::new("cp")
        .arg("-a")
        .arg(pdir.join("data"))
        .arg(&p2dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "cp: {}", stderr(&out));
    let mut prom2 = Prometheus::spawn_bin(
        &prometheus_bin(),
        &p2dir,
        "global:\n  scrape_interval: 1m\n",
        &["--query.max-samples=5000"],
    );
    prom2.wait_ready(Duration::from_secs(120)).await;
    let mut prom = Prometheus::spawn_bin(
        &prometheus,
        &pdir,
        "global:\n  scrape_interval: 1m\n",
        &["--query.max-samples=5000"],
    );
    prom.wait_ready(Duration::from_secs(120)).await;

    // VictoriaMetrics 1.145: its own import API.
    let mut vm = VictoriaMetrics::spawn(&vm_bin, &vdir, &[]);
    vm.wait_ready(Duration::from_secs(60)).await;
    let mut text = Vec::new();
    f.write(Format::PromText, &mut text).unwrap();
    let vm = tokio::task::spawn_blocking(move || {
        vm.import(&text);
        vm
    })
    .await
    .unwrap();

    let policy = dir.path().join("candidate.policy");
    std::fs::write(&policy, CANDIDATE).unwrap();
    let range = (start, end);
    let (purl, p2url, vurl) = (prom.url(), prom2.url(), vm.url());
    let (from_prom, from_prom2, from_vm) = tokio::task::spawn_blocking({
        let policy = policy.clone();
        move || {
            let p = replay(&purl, &policy, range, &["--format", "jsonl"]);
            let p2 = replay(&p2url, &policy, range, &["--format", "jsonl"]);
            let v = replay(&vurl, &policy, range, &["--format", "jsonl"]);
            (p, p2, v)
        }
    })
    .await
    .unwrap();
    assert_eq!(
        from_prom2.status.code(),
        Some(0),
        "Prometheus 2: {}\n{}",
        stderr(&from_prom2),
        prom2.log()
    );
    assert_eq!(
        stdout(&from_prom2),
        stdout(&from_prom),
        "Prometheus 2.42 and 3.5 differ"
    );
    drop(prom2);
    assert_eq!(
        from_prom.status.code(),
        Some(0),
        "Prometheus: {}\n{}",
        stderr(&from_prom),
        prom.log()
    );
    assert_eq!(
        from_vm.status.code(),
        Some(0),
        "VictoriaMetrics: {}\n{}",
        stderr(&from_vm),
        vm.log()
    );
    let (p, v) = (stdout(&from_prom), stdout(&from_vm));
    let (pl, vl): (Vec<&str>, Vec<&str>) = (p.lines().collect(), v.lines().collect());
    assert_eq!(
        pl.len(),
        MEMBERS + 1,
        "one line a member and the summary: {}",
        stderr(&from_prom)
    );
    if let Some(i) = (0..pl.len().max(vl.len())).find(|&i| pl.get(i) != vl.get(i)) {
        panic!(
            "line {i} differs:\nPrometheus 3.5:   {}\nVictoriaMetrics: {}",
            pl.get(i).unwrap_or(&"(none)"),
            vl.get(i).unwrap_or(&"(none)")
        );
    }

    // The summary names exactly the members the candidate changes, their
    // clusters, and `fast` as the cause.
    let summary: Value = serde_json::from_str(pl[MEMBERS]).unwrap();
    let s = &summary["fleet"];
    let changed: Vec<usize> = (0..MEMBERS).filter(|&i| fleet::changed(i)).collect();
    assert_eq!(s["members"], MEMBERS, "{s}");
    assert_eq!(s["changed"], changed.len(), "{s}");
    let named: BTreeSet<String> = s["most_hurt_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["labels"]["namespace"].as_str().unwrap(),
                m["labels"]["pod"].as_str().unwrap()
            )
        })
        .collect();
    let want: BTreeSet<String> = changed
        .iter()
        .map(|&i| {
            let l = fleet::member_labels(i);
            format!("{}/{}", l[1].1, l[2].1)
        })
        .collect();
    assert_eq!(named, want, "{s}");
    let clusters: BTreeSet<&str> = s["most_hurt_clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["value"].as_str().unwrap())
        .collect();
    let want_clusters: Vec<String> = changed.iter().map(|&i| fleet::cluster_id(i)).collect();
    assert_eq!(
        clusters,
        want_clusters.iter().map(String::as_str).collect(),
        "{s}"
    );
    assert_eq!(
        s["most_hurt_by_cluster_label"].as_array().map(Vec::len),
        Some(changed.len()),
        "{s}"
    );
    assert_eq!(s["checks"][0]["check"], "fast", "{s}");
    assert_eq!(s["checks"].as_array().map(Vec::len), Some(1), "{s}");

    // The text people read, --fail-on-difference, and a limit one member
    // alone exceeds (5 s steps: 2 × 4,321 points in one request).
    let vurl = vm.url();
    let purl = prom.url();
    let first_changed = changed[0];
    let (text, gate, same, refused) = tokio::task::spawn_blocking(move || {
        let one = |i: usize| {
            let l = fleet::member_labels(i);
            format!("{{namespace=\"{}\",pod=\"{}\"}}", l[1].1, l[2].1)
        };
        let text = replay(&vurl, &policy, range, &[]);
        let gate = replay(
            &vurl,
            &policy,
            range,
            &["--fail-on-difference", "--selector", &one(first_changed)],
        );
        let same = replay(
            &vurl,
            &policy,
            range,
            &["--fail-on-difference", "--selector", &one(1)],
        );
        let refused = replay(
            &purl,
            &policy,
            range,
            &["--step", "5s", "--selector", &one(1)],
        );
        (text, gate, same, refused)
    })
    .await
    .unwrap();
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let t = stdout(&text);
    let tail = &t[t.find("\nfleet: ").unwrap_or(0)..];
    for needle in [
        format!("fleet: {MEMBERS} members replayed"),
        format!("the candidate changes {} of them", changed.len()),
        "members it hurts most".to_string(),
        "clusters it hurts most, by namespace:".to_string(),
    ]
    .into_iter()
    .chain(changed.iter().map(|&i| label_set(i)))
    {
        assert!(tail.contains(&needle), "{needle} not in:\n{tail}");
    }
    assert_eq!(gate.status.code(), Some(3), "{}", stderr(&gate));
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(
        err.contains("--query.max-samples") && err.contains("down to one member"),
        "{err}"
    );
}
