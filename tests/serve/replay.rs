//! `replay` against a real Prometheus. The first tests build an hour of
//! history with `promtool tsdb create-blocks-from openmetrics` — signal
//! series with known spikes and a gap, and a recorded verdict written by a
//! reference policy — start Prometheus on it, and check the intervals,
//! flips and differences `replay` reports against what those series imply,
//! written down as literal tables. The last one replays a live exporter
//! (real etcd, frozen for a while) that Prometheus scraped for about a minute.
//!
//! Every Prometheus runs on a free loopback port in a temporary directory and
//! is killed on Drop; every wait has a deadline.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::ports::free_tcp_port;
use etcd_readiness_testkit::prometheus::{Prometheus, promtool_bin};
use etcd_readiness_testkit::wait::poll;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-readiness-exporter");

/// Start on `dir` (a TSDB in `dir/data`) with `scrape` as the config's
/// `scrape_configs` (YAML, may be empty); wait for /-/ready.
async fn start_prometheus(dir: &Path, scrape: &str) -> Prometheus {
    let mut p = Prometheus::spawn(
        dir,
        &format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{scrape}"),
    );
    p.wait_ready(Duration::from_secs(60)).await;
    p
}

fn replay(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("replay")
        .args(args)
        .output()
        .expect("run the exporter binary")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_of(o: &Output) -> Value {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

// ---------------------------------------------------------------------------
// The promtool-built history.
//
// One hour from B in steps of 15 s: step j is B + 15j, and sample j of every
// series is written 5 s before it (B + 15j - 5), so a query at step j sees
// sample j. Member `etcd-0` lives through the events below; member `etcd-1`
// is healthy throughout. The recorded verdict is what the reference policy
// (REFERENCE) said about each sample.
//
//   samples  40..=41   qget_ms 800   a short spike
//   samples  80..=99   qget_ms 400   under the reference's 500, over the candidate's 300
//   samples 120..=123  apply_lag 500 (a `warn` in the candidate)
//   samples 150..=159  leader 0
//   samples 180..=219  nothing at all from etcd-0 (the exporter was not scraped)

const STEPS: i64 = 240;

const REFERENCE: &str = "check leader: leader\ncheck fast: qget_ms < 500\n";
const CANDIDATE: &str =
    "check leader: leader\ncheck fast: qget_ms < 300 for 1m\nwarn lag: apply_lag < 100\n";

struct Sample {
    leader: f64,
    qget_ms: f64,
    apply_lag: f64,
}

fn sample(member: &str, j: i64) -> Option<Sample> {
    let mut s = Sample {
        leader: 1.0,
        qget_ms: 20.0,
        apply_lag: 3.0,
    };
    if member == "etcd-1" {
        return Some(s);
    }
    match j {
        40..=41 => s.qget_ms = 800.0,
        80..=99 => s.qget_ms = 400.0,
        120..=123 => s.apply_lag = 500.0,
        150..=159 => s.leader = 0.0,
        180..=219 => return None,
        _ => {}
    }
    Some(s)
}

/// The history as OpenMetrics, each series in time order.
fn openmetrics(b: i64) -> String {
    let members = ["etcd-0", "etcd-1"];
    let labels = |m: &str| format!("instance=\"{m}:9379\",job=\"etcd-readiness\",pod=\"{m}\"");
    let ts = |j: i64| b + 15 * j - 5;
    let mut out = String::new();
    out.push_str("# HELP etcd_readiness_ready 1 when the member is ready\n");
    out.push_str("# TYPE etcd_readiness_ready gauge\n");
    for m in members {
        for j in 0..=STEPS {
            if let Some(s) = sample(m, j) {
                let ready = s.leader == 1.0 && s.qget_ms < 500.0;
                out.push_str(&format!(
                    "etcd_readiness_ready{{{}}} {} {}\n",
                    labels(m),
                    u8::from(ready),
                    ts(j)
                ));
            }
        }
    }
    for family in ["value", "known"] {
        out.push_str(&format!(
            "# HELP etcd_readiness_signal_{family} signal {family}\n"
        ));
        out.push_str(&format!("# TYPE etcd_readiness_signal_{family} gauge\n"));
        for m in members {
            for signal in ["leader", "qget_ms", "apply_lag"] {
                for j in 0..=STEPS {
                    if let Some(s) = sample(m, j) {
                        let v = match (family, signal) {
                            ("known", _) => 1.0,
                            (_, "leader") => s.leader,
                            (_, "qget_ms") => s.qget_ms,
                            _ => s.apply_lag,
                        };
                        out.push_str(&format!(
                            "etcd_readiness_signal_{family}{{{},signal=\"{signal}\",source=\"etcd\"}} {v} {}\n",
                            labels(m),
                            ts(j)
                        ));
                    }
                }
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

/// B: a whole hour between two and three hours ago, so the history is
/// inside Prometheus' retention and wholly in the past.
fn history_start() -> i64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    (now - 2 * 3600) / 3600 * 3600 - 3600
}

/// Build the TSDB with promtool and start Prometheus on it.
async fn prometheus_with_history(dir: &Path, b: i64) -> Prometheus {
    let om = dir.join("history.om");
    std::fs::write(&om, openmetrics(b)).unwrap();
    let out = Command::new(promtool_bin())
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(dir.join("data"))
        .output()
        .expect("promtool (apt-get install prometheus)");
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    start_prometheus(dir, "").await
}

/// An interval as (from, to) offsets from B in seconds, ready, failing checks.
type Iv = (f64, f64, Option<bool>, Vec<String>);

fn iv(from: i64, to: i64, ready: Option<bool>, failing: &[&str]) -> Iv {
    (
        from as f64,
        to as f64,
        ready,
        failing.iter().map(|s| s.to_string()).collect(),
    )
}

fn intervals(b: i64, list: &Value) -> Vec<Iv> {
    list.as_array()
        .expect("a list of intervals")
        .iter()
        .map(|i| {
            (
                i["from"].as_f64().unwrap() - b as f64,
                i["to"].as_f64().unwrap() - b as f64,
                i["ready"].as_bool(),
                i["failing"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

fn member<'a>(doc: &'a Value, pod: &str) -> &'a Value {
    doc["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["labels"]["pod"] == pod)
        .unwrap_or_else(|| panic!("no member {pod} in {doc}"))
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

// Long because: one promtool history and one Prometheus; each assertion reads the same replayed day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_of_a_promtool_history_finds_the_crossings_hold_downs_gaps_and_warns() {
    let dir = tempfile::tempdir().unwrap();
    let b = history_start();
    let prom = prometheus_with_history(dir.path(), b).await;
    let url = prom.url();
    let candidate = write(dir.path(), "candidate.policy", CANDIDATE);
    let reference = write(dir.path(), "reference.policy", REFERENCE);
    let (start, end) = (b.to_string(), (b + 15 * STEPS).to_string());
    let base = [
        "--prometheus.url",
        &url,
        "--start",
        &start,
        "--end",
        &end,
        "--step",
        "15s",
        "--format",
        "json",
    ];

    // The reference policy reproduces the recorded verdict exactly.
    let out = replay(&[&base[..], &["--policy", &reference]].concat());
    let doc = json_of(&out);
    for pod in ["etcd-0", "etcd-1"] {
        assert_eq!(
            member(&doc, pod)["differs_from_recorded"],
            serde_json::json!([]),
            "{pod}"
        );
    }

    let out = replay(&[&base[..], &["--policy", &candidate]].concat());
    let doc = json_of(&out);
    assert_eq!(doc["start"], b);
    assert_eq!(doc["end"], b + 3600);
    assert_eq!(doc["step"], 15);
    assert_eq!(doc["members"].as_array().unwrap().len(), 2);
    assert_eq!(doc["missing_signals"], serde_json::json!([]));

    let m = member(&doc, "etcd-0");
    assert_eq!(
        m["labels"],
        serde_json::json!({"instance": "etcd-0:9379", "job": "etcd-readiness", "pod": "etcd-0"})
    );
    // The verdict, step by step:
    // - samples 40-41 (qget 800): `for 1m` holds `fast` passing: ready.
    // - samples 80-99 (qget 400 > 300): held at 80-83 (0, 15, 30, 45 s), fails
    //   from 84 (60 s) to 99: not ready 84..100.
    // - samples 120-123: only the warn `lag` fails: ready.
    // - samples 150-159: leader 0: not ready 150..160.
    // - samples 180-219 missing: Prometheus' 5-minute lookback carries sample
    //   179 to steps 180-198 (B+15j - (B+15·179-5) ≤ 300 s); steps 199-219 have
    //   no data at all; the member is back at 220.
    assert_eq!(
        intervals(b, &m["intervals"]),
        [
            iv(0, 1260, Some(true), &[]),
            iv(1260, 1500, Some(false), &["fast"]),
            iv(1500, 2250, Some(true), &[]),
            iv(2250, 2400, Some(false), &["leader"]),
            iv(2400, 2985, Some(true), &[]),
            iv(2985, 3300, None, &[]),
            iv(3300, 3600, Some(true), &[]),
        ]
    );
    // 26 steps not ready (84-99, 150-159), 21 without data (199-219).
    assert_eq!(m["not_ready_seconds"], 390);
    assert_eq!(m["unknown_seconds"], 315);
    assert_eq!(m["ready_seconds"], 3600 - 390 - 315);
    assert_eq!(m["flips"], 4);
    assert_eq!(m["recorded_flips"], 4);
    assert_eq!(
        m["intervals"][1]["explanations"]["fast"],
        "qget_ms < 300 is false (qget_ms = 400)"
    );
    assert_eq!(
        m["intervals"][3]["explanations"]["leader"],
        "leader is false"
    );
    // The reference (no hold-down, 500) said not ready during the short spike
    // and ready at qget 400.
    assert_eq!(
        intervals(b, &m["differs_from_recorded"]),
        [
            iv(600, 630, Some(true), &[]),
            iv(1260, 1500, Some(false), &["fast"]),
        ]
    );
    let spans: Vec<(String, String, String, bool, i64, i64)> = m["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["check"].as_str().unwrap().to_string(),
                s["kind"].as_str().unwrap().to_string(),
                s["state"].as_str().unwrap().to_string(),
                s["held"].as_bool().unwrap(),
                s["from"].as_i64().unwrap() - b,
                s["to"].as_i64().unwrap() - b,
            )
        })
        .collect();
    let span = |c: &str, k: &str, s: &str, held: bool, f: i64, t: i64| {
        (c.to_string(), k.to_string(), s.to_string(), held, f, t)
    };
    // `fast` is held passing through the whole short spike (samples 40-41)
    // and the first minute of the long one (80-83).
    assert_eq!(
        spans,
        [
            span("fast", "check", "pass", true, 600, 630),
            span("fast", "check", "pass", true, 1200, 1260),
            span("fast", "check", "fail", false, 1260, 1500),
            span("lag", "warn", "fail", false, 1800, 1860),
            span("leader", "check", "fail", false, 2250, 2400),
        ]
    );
    assert_eq!(
        m["checks"][0]["explanation"],
        "qget_ms < 300 is false (qget_ms = 800) (held passing by `for 1m`, 1m left)"
    );

    let healthy = member(&doc, "etcd-1");
    assert_eq!(healthy["ready_seconds"], 3600);
    assert_eq!(healthy["flips"], 0);
    assert_eq!(
        intervals(b, &healthy["intervals"]),
        [iv(0, 3600, Some(true), &[])]
    );

    // Text and SVG describe the same run.
    let out = replay(&[&base[..8], &["--policy", &candidate]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("fast: qget_ms < 300 is false (qget_ms = 400)"),
        "{text}"
    );
    assert!(text.contains("4 flips (recorded: 4)"), "{text}");
    let svg_path = dir.path().join("replay.svg");
    let out = replay(
        &[
            &base[..8],
            &[
                "--policy",
                &candidate,
                "--format",
                "svg",
                "--output",
                svg_path.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    for needle in [
        "pod=&quot;etcd-0&quot;",
        "warn lag",
        "fast fail",
        "recorded",
    ] {
        assert!(svg.contains(needle), "{needle} not in the SVG");
    }

    // --fail-on-difference: 3 with the candidate, 0 with the reference.
    let out = replay(&[&base[..], &["--policy", &candidate, "--fail-on-difference"]].concat());
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let out = replay(&[&base[..], &["--policy", &reference, "--fail-on-difference"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // --selector picks members.
    let out = replay(
        &[
            &base[..],
            &["--policy", &candidate, "--selector", "{pod=\"etcd-1\"}"],
        ]
        .concat(),
    );
    let doc = json_of(&out);
    assert_eq!(doc["members"].as_array().unwrap().len(), 1);
    assert_eq!(doc["members"][0]["labels"]["pod"], "etcd-1");

    // A chunked query gives the same answer: 1 s steps over the hour are
    // 3,601 points; over 3 h (one before, one after) 10,801; a 2 h range at
    // 500 ms is 14,401 points, two chunks.
    let (s2, e2) = ((b - 1800).to_string(), (b + 5400).to_string());
    let out = replay(&[
        "--prometheus.url",
        &url,
        "--start",
        &s2,
        "--end",
        &e2,
        "--step",
        "500ms",
        "--format",
        "json",
        "--policy",
        &candidate,
    ]);
    let doc = json_of(&out);
    let m = member(&doc, "etcd-0");
    // With 500 ms steps the edges move to the sample times (B + 15j - 5):
    // sample 84 at 1255 s is where `fast`'s hold-down (from sample 80 at
    // 1195 s) has run 60 s.
    let not_ready: Vec<Iv> = intervals(b, &m["intervals"])
        .into_iter()
        .filter(|i| i.2 == Some(false))
        .collect();
    assert_eq!(
        not_ready,
        [
            iv(1255, 1495, Some(false), &["fast"]),
            iv(2245, 2395, Some(false), &["leader"]),
        ]
    );
}

/// The same history replayed with recovery holds: a check that failed
/// passes again only after `recover` of unbroken truth, and so does every
/// check after the gap (the exporter restarted); the window's start is not
/// taken for a restart, so the healthy member is ready throughout.
// Long because: one promtool history and one Prometheus; each assertion reads the same replayed day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_of_a_promtool_history_honours_recovery_holds_after_failures_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let b = history_start();
    let prom = prometheus_with_history(dir.path(), b).await;
    let url = prom.url();
    let held = write(
        dir.path(),
        "held.policy",
        "check leader: leader recover 1m\ncheck fast: qget_ms < 500 recover 30s\n",
    );
    let (start, end) = (b.to_string(), (b + 15 * STEPS).to_string());
    let base = [
        "--prometheus.url",
        &url,
        "--start",
        &start,
        "--end",
        &end,
        "--step",
        "15s",
        "--policy",
        &held,
    ];
    let doc = json_of(&replay(&[&base[..], &["--format", "json"]].concat()));
    let m = member(&doc, "etcd-0");
    // - samples 40-41 (qget 800) fail `fast`; true again from sample 42 (630 s),
    //   it passes at sample 44 (660 s), 30 s later;
    // - samples 150-159 (leader 0) fail `leader`; true from 160 (2400 s), it
    //   passes at 164 (2460 s), a minute later;
    // - after the gap (no data 199-219) the member is back at 220 (3300 s)
    //   with a fresh evaluator, as a restarted exporter: both checks
    //   recovering, `fast` passes at 222, `leader` at 224 (3360 s).
    assert_eq!(
        intervals(b, &m["intervals"]),
        [
            iv(0, 600, Some(true), &[]),
            iv(600, 660, Some(false), &["fast"]),
            iv(660, 2250, Some(true), &[]),
            iv(2250, 2460, Some(false), &["leader"]),
            iv(2460, 2985, Some(true), &[]),
            iv(2985, 3300, None, &[]),
            iv(3300, 3360, Some(false), &["leader", "fast"]),
            iv(3360, 3600, Some(true), &[]),
        ]
    );
    // The recorded verdict (no holds) was ready again at the first good
    // sample: the holds are the differences.
    assert_eq!(
        intervals(b, &m["differs_from_recorded"]),
        [
            iv(630, 660, Some(false), &["fast"]),
            iv(2400, 2460, Some(false), &["leader"]),
            iv(3300, 3360, Some(false), &["leader", "fast"]),
        ]
    );
    let mut spans: Vec<(i64, String, String, bool, String)> = m["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["from"].as_i64().unwrap() - b,
                s["check"].as_str().unwrap().to_string(),
                s["state"].as_str().unwrap().to_string(),
                s["recovering"].as_bool().unwrap(),
                s["explanation"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    spans.sort();
    let span = |f: i64, c: &str, s: &str, r: bool, e: &str| {
        (f, c.to_string(), s.to_string(), r, e.to_string())
    };
    assert_eq!(
        spans,
        [
            span(
                600,
                "fast",
                "fail",
                false,
                "qget_ms < 500 is false (qget_ms = 800) (then held failing by `recover 30s`)"
            ),
            span(630, "fast", "fail", true, "recovering: true for 0ms of 30s"),
            span(
                2250,
                "leader",
                "fail",
                false,
                "leader is false (then held failing by `recover 1m`)"
            ),
            span(
                2400,
                "leader",
                "fail",
                true,
                "recovering: true for 0ms of 1m"
            ),
            span(
                3300,
                "fast",
                "fail",
                true,
                "recovering: true for 0ms of 30s"
            ),
            span(
                3300,
                "leader",
                "fail",
                true,
                "recovering: true for 0ms of 1m"
            ),
        ]
    );
    let healthy = member(&doc, "etcd-1");
    assert_eq!(
        intervals(b, &healthy["intervals"]),
        [iv(0, 3600, Some(true), &[])],
        "the window's start is not a restart"
    );
    assert_eq!(healthy["differs_from_recorded"], serde_json::json!([]));

    let out = replay(&base);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "fast held failing by its recovery hold",
        "leader held failing by its recovery hold",
    ] {
        assert!(text.contains(needle), "{needle} not in:\n{text}");
    }
}

// Long because: one Prometheus started once for a table of error cases, each a few lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_errors_are_exit_1_with_a_clear_message_and_missing_signals_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let b = history_start();
    let prom = prometheus_with_history(dir.path(), b).await;
    let url = prom.url();
    let (start, end) = (b.to_string(), (b + 3600).to_string());
    let base = ["--prometheus.url", &url, "--start", &start, "--end", &end];

    // A signal the candidate reads that Prometheus does not hold: named up
    // front, unknown throughout, and the run still succeeds.
    let owner = write(
        dir.path(),
        "owner.policy",
        "check leader: leader\nwarn owner: owner_ok\n",
    );
    let out = replay(&[&base[..], &["--policy", &owner, "--format", "json"]].concat());
    assert!(
        stderr(&out).contains(
            "holds no series of for the selected members (unknown throughout the replay): owner_ok"
        ),
        "{}",
        stderr(&out)
    );
    let doc = json_of(&out);
    assert_eq!(doc["missing_signals"], serde_json::json!(["owner_ok"]));

    let good = write(dir.path(), "good.policy", "check leader: leader\n");
    let bad = write(dir.path(), "bad.policy", "check leader: leadr\n");
    let closed = format!("http://127.0.0.1:{}", free_tcp_port());
    // A server that accepts connections (the kernel's backlog) and never answers.
    let silent_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = format!("http://{}", silent_listener.local_addr().unwrap());
    for (args, message) in [
        (vec!["--policy", &bad], "unknown signal `leadr`"),
        (
            vec!["--policy", &good, "--selector", "{pod=\"nope\"}"],
            "Prometheus holds no etcd_readiness_ready or etcd_readiness_signal_* series matching {pod=\"nope\"}",
        ),
        (
            vec!["--policy", &good, "--selector", "{pod=}"],
            "Prometheus refused `etcd_readiness_ready{pod=}` (status 400): bad_data",
        ),
    ] {
        let out = replay(&[&base[..], &args[..]].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
    for (args, message) in [
        (
            vec!["--prometheus.url", &closed, "--start", "-1h"],
            "did not answer",
        ),
        (
            vec![
                "--prometheus.url",
                &silent,
                "--start",
                "-1h",
                "--prometheus.timeout",
                "1s",
            ],
            // Whichever of the client's two deadlines fires first says it.
            "operation timed out|no answer within 1s",
        ),
        (
            vec![
                "--prometheus.url",
                &url,
                "--start",
                "-1h",
                "--prometheus.timeout",
                "0s",
            ],
            "--prometheus.timeout must be at least 100ms",
        ),
        (
            vec![
                "--prometheus.url",
                &url,
                "--start",
                "-1h",
                "--prometheus.max-bytes",
                "99999999999999",
            ],
            "--prometheus.max-bytes 99999999999999 is out of range",
        ),
        (
            vec!["--prometheus.url", &url, "--start", "-1y"],
            "--start `-1y` is out of range",
        ),
        (
            vec!["--prometheus.url", &url, "--start", "99999999999999"],
            "--start `99999999999999` is out of range",
        ),
        (
            vec!["--prometheus.url", &url, "--start", "-1h", "--end", "-2h"],
            "--start must be before --end",
        ),
        (
            vec!["--prometheus.url", &url, "--start", "-1h", "--step", "0s"],
            "--step `0s`: the step must be at least 1ms",
        ),
        (
            vec!["--prometheus.url", &url, "--start", "-24h", "--step", "1ms"],
            "more than the limit of 1100000",
        ),
        (
            vec!["--prometheus.url", &url, "--start", "-1h", "--end", "+1d"],
            "--end `+1d` is not a time",
        ),
        (
            vec!["--prometheus.url", "ftp://x", "--start", "-1h"],
            "the scheme must be http or https",
        ),
        (
            // Two members' labels alone are more than 1 KiB held: the
            // memory budget of the members found names the flag.
            [&base[..], &["--prometheus.max-bytes", "1024"]].concat(),
            "than --prometheus.max-bytes (1024 bytes)",
        ),
    ] {
        let out = replay(&[&args[..], &["--policy", &good]].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            message.split('|').any(|m| stderr(&out).contains(m)),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

// Long because: a live exporter, its etcd and a Prometheus scraping it: the replay is compared with what the exporter itself said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_of_a_live_exporter_scraped_by_prometheus() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write(
        dir.path(),
        "live.policy",
        "check leader: leader\ncheck linearizable_read: qget_ms < 1000\n",
    );
    let mut cluster = EtcdCluster::builder(1).start();
    let policy_path = PathBuf::from(&policy);
    let e = Exporter::start(&cluster.endpoint(0), |a| {
        a.policy = Some(policy_path);
    })
    .await;
    let prom = start_prometheus(
        dir.path(),
        &format!(
            "scrape_configs:\n  - job_name: etcd-readiness\n    scrape_interval: 1s\n    \
             static_configs:\n      - targets: ['{}']\n",
            e.addr()
        ),
    )
    .await;
    let start = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let wait_ready = |want: bool, what: &'static str| {
        let prom = &prom;
        async move {
            let seen = poll(
                Duration::from_secs(40),
                Duration::from_millis(250),
                || async {
                    let r = prom.query("etcd_readiness_ready").await;
                    if r.len() == 1 && (r[0]["value"][1] == "1") == want {
                        Ok(())
                    } else {
                        Err(r)
                    }
                },
            )
            .await;
            if let Err(r) = seen {
                panic!("timed out waiting for {what}: {r:?}");
            }
        }
    };
    // Ready as Prometheus sees it, for a while.
    wait_ready(true, "a ready member in Prometheus").await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    // Frozen: quorum reads time out and the leader is unknown.
    cluster.stop(0);
    wait_ready(false, "the frozen member not ready in Prometheus").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    cluster.cont(0);
    wait_ready(true, "the member ready again in Prometheus").await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let end = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 2;
    let (start, end) = (start.to_string(), end.to_string());
    let url = prom.url();
    let never = write(dir.path(), "never.policy", "check never: qget_ms < 0\n");
    let base = [
        "--prometheus.url",
        &url,
        "--start",
        &start,
        "--end",
        &end,
        "--step",
        "1s",
        "--format",
        "json",
    ];

    // The policy the exporter ran, replayed: one not-ready stretch (the
    // freeze), and the recorded verdict reproduced (at most a step apart at
    // an edge, where a scrape may fall between the verdict and the signals
    // being updated).
    let doc = json_of(&replay(&[&base[..], &["--policy", &policy]].concat()));
    let members = doc["members"].as_array().unwrap();
    assert_eq!(members.len(), 1, "{doc}");
    let m = &members[0];
    assert_eq!(m["labels"]["job"], "etcd-readiness");
    assert_eq!(m["labels"]["instance"], e.addr().to_string());
    let not_ready: Vec<&Value> = m["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["ready"] == false)
        .collect();
    assert!(
        not_ready.iter().any(|i| {
            let d = i["to"].as_f64().unwrap() - i["from"].as_f64().unwrap();
            let failing = i["failing"].as_array().unwrap();
            d >= 5.0 && failing.iter().any(|f| f == "linearizable_read")
        }),
        "no not-ready stretch for the freeze: {m}"
    );
    let differing: f64 = m["differs_from_recorded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["to"].as_f64().unwrap() - i["from"].as_f64().unwrap())
        .sum();
    assert!(differing <= 2.0, "{differing} s differ: {m}");
    assert!(m["ready_seconds"].as_f64().unwrap() >= 25.0, "{m}");

    // A candidate that can never pass differs wherever the recorded verdict
    // was ready: exactly the recorded ready time.
    let doc = json_of(&replay(&[&base[..], &["--policy", &never]].concat()));
    let m = &doc["members"][0];
    let recorded_ready: f64 = m["recorded"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["ready"] == true)
        .map(|i| i["to"].as_f64().unwrap() - i["from"].as_f64().unwrap())
        .sum();
    let differing: f64 = m["differs_from_recorded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            assert_eq!(i["ready"], false);
            i["to"].as_f64().unwrap() - i["from"].as_f64().unwrap()
        })
        .sum();
    assert!(recorded_ready >= 25.0, "{m}");
    assert_eq!(differing, recorded_ready, "{m}");
    assert_eq!(m["ready_seconds"], 0);
}
