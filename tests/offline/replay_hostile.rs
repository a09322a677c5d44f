//! `replay` against a hostile stand-in Prometheus: an answer of a
//! million series must fail clearly, fast and within replay's stated memory
//! bound (`--prometheus.max-bytes`, docs/replay.md), and the text a
//! Prometheus sends — its `error` field, label names and values — must
//! never reach the terminal, the JSON or the SVG with raw control
//! characters. The stand-in is a small HTTP/1.1 server answering
//! `query_range` with bodies the test chose; the replay is the real binary.

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use etcd_readiness_testkit::wait::sample_blocking;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_etcd-readiness-exporter");
/// The replayed hour: its start (Unix seconds) and the step.
const T0: i64 = 1_700_000_000;
const STEP: i64 = 15;

/// What the stand-in answers: for a request path, a status and a body.
type Answer = Arc<dyn Fn(&str) -> (u16, Arc<Vec<u8>>) + Send + Sync>;

/// A stand-in Prometheus on a free loopback port; stops when dropped.
struct StandIn {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl StandIn {
    async fn start(answer: Answer) -> StandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head);
                    let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let (status, body) = answer(&path);
                    let h = format!(
                        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    if conn.write_all(h.as_bytes()).await.is_ok() {
                        let _ = conn.write_all(&body).await;
                    }
                });
            }
        });
        StandIn { addr, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `VmHWM` (peak RSS) of `pid` in KiB, while it runs.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Run `replay ARGS` and sample its peak RSS every 5 ms until it exits
/// (at most 120 s): the output and the last peak seen, in KiB.
async fn replay(args: Vec<String>) -> (Output, u64) {
    tokio::task::spawn_blocking(move || {
        let child = Command::new(BIN)
            .arg("replay")
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let watch = std::thread::spawn(move || {
            let mut peak = 0;
            sample_blocking(Duration::from_secs(120), Duration::from_millis(5), || {
                match peak_kib(pid) {
                    Some(p) => peak = peak.max(p),
                    None => return ControlFlow::Break(()),
                }
                ControlFlow::Continue(())
            });
            peak
        });
        let out = child.wait_with_output().unwrap();
        (out, watch.join().unwrap())
    })
    .await
    .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write_policy(dir: &std::path::Path) -> String {
    let p = dir.join("p.policy");
    std::fs::write(&p, "check leader: leader\n").unwrap();
    p.display().to_string()
}

fn base_args(url: &str, policy: &str) -> Vec<String> {
    [
        "--prometheus.url",
        url,
        "--policy",
        policy,
        "--start",
        &T0.to_string(),
        "--end",
        &(T0 + 3600).to_string(),
        "--step",
        &format!("{STEP}s"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// What the stand-in answers the index queries replay starts with: `members`
/// for the members (`/api/v1/series` of `etcd_readiness_ready`), no
/// clusters, `leader` as the only signal there is.
fn index(path: &str, members: &Arc<Vec<u8>>) -> Option<(u16, Arc<Vec<u8>>)> {
    let list =
        |items: &str| Arc::new(format!(r#"{{"status":"success","data":[{items}]}}"#).into_bytes());
    if path.starts_with("/api/v1/label/") {
        Some((200, list(r#""leader""#)))
    } else if path.starts_with("/api/v1/series") && path.contains("etcd_readiness_ready") {
        Some((200, members.clone()))
    } else if path.starts_with("/api/v1/series") {
        Some((200, list("")))
    } else {
        None
    }
}

/// An `/api/v1/series` answer of `n` members.
fn many_members(n: usize) -> Vec<u8> {
    use std::fmt::Write;
    let mut s = String::with_capacity(n * 90 + 100);
    s.push_str(r#"{"status":"success","data":["#);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            r#"{{"__name__":"etcd_readiness_ready","job":"ere","namespace":"prod","pod":"etcd-{i:07}"}}"#
        );
    }
    s.push_str("]}");
    s.into_bytes()
}

/// A `query_range` answer of `n` series of `etcd_readiness_ready`, two
/// samples each (the shape of a known attack: ~141 bytes a series).
fn many_series(n: usize) -> Vec<u8> {
    use std::fmt::Write;
    let mut s = String::with_capacity(n * 150 + 100);
    s.push_str(r#"{"status":"success","data":{"resultType":"matrix","result":["#);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            r#"{{"metric":{{"__name__":"etcd_readiness_ready","job":"ere","namespace":"prod","pod":"etcd-{i:07}"}},"values":[[{T0},"1"],[{},"1"]]}}"#,
            T0 + STEP
        );
    }
    s.push_str("]}}");
    s.into_bytes()
}

/// Issue 21: 1M series (141 MB, under the 256 MiB default) took replay to
/// 12.1 GB and 112 s. Now the series are charged as they are parsed against
/// the budget of --prometheus.max-bytes, and the first one over it fails
/// the replay with a message saying what to do; the peak RSS stays within
/// the bound docs/replay.md states (2 × --prometheus.max-bytes + 64 MiB).
/// Replay meets them first in the index query that finds the members, and
/// fails there the same way. A thousand members fit and replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_of_a_million_series_fails_clearly_within_its_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(dir.path());
    let million = Arc::new(many_series(1_000_000));
    assert!(million.len() > 140_000_000, "{}", million.len());
    let empty =
        Arc::new(br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#.to_vec());
    let body = million.clone();
    // The store that answers a million series lists them as members too:
    // the index query is where replay first meets them.
    let members = Arc::new(many_members(1_000_000));
    let stand_in = StandIn::start(Arc::new(move |path: &str| {
        if let Some(a) = index(path, &members) {
            a
        } else if path.contains("etcd_readiness_ready") {
            (200, body.clone())
        } else {
            (200, empty.clone())
        }
    }))
    .await;
    let max_bytes: u64 = 256 * 1024 * 1024;
    let (out, peak) = replay(base_args(&stand_in.url(), &policy)).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("needs more memory than --prometheus.max-bytes (268435456 bytes)")
            && err.contains("narrow --selector"),
        "{err}"
    );
    let bound_kib = (2 * max_bytes + (64 << 20)) / 1024;
    assert!(
        peak > 0 && peak <= bound_kib,
        "peak RSS {peak} KiB, bound {bound_kib} KiB: {err}"
    );
    eprintln!("1M series: peak RSS {} MiB; {}", peak / 1024, err.trim());

    // A smaller limit fails sooner, and still names it.
    let mut args = base_args(&stand_in.url(), &policy);
    args.extend(["--prometheus.max-bytes".into(), "300000000".into()]);
    let (out, _) = replay(args).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("(300000000 bytes)"),
        "{}",
        stderr(&out)
    );

    // A thousand members replay (and are all in the report).
    let thousand = Arc::new(many_series(1000));
    let members = Arc::new(many_members(1000));
    let stand_in = StandIn::start(Arc::new(move |path: &str| {
        index(path, &members).unwrap_or_else(|| (200, thousand.clone()))
    }))
    .await;
    let mut args = base_args(&stand_in.url(), &policy);
    args.extend(["--format".into(), "json".into()]);
    let (out, _) = replay(args).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["members"].as_array().map(Vec::len), Some(1000));
}

/// No byte below 0x20 other than a newline (or a tab), and no DEL: what a
/// terminal, a JSON reader and an SVG renderer can take as it is.
fn raw_controls(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .copied()
        .filter(|&b| (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f)
        .collect()
}

/// Issue 21: Prometheus's `error` text reached the terminal raw — ESC (a
/// colour), CR and LF (a forged second line) — while the same characters in
/// a label were escaped. Now every string from Prometheus is made
/// printable first: in the error message, and in the text, JSON and SVG
/// renderings of labels (names too: a stand-in can send any).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_escapes_control_characters_from_prometheus() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(dir.path());
    let hostile_error = Arc::new(
        serde_json::to_vec(&serde_json::json!({
            "status": "error",
            "errorType": "bad_data\u{1b}[2J",
            "error": "parse error\u{1b}[31m red\r\nerror: forged second line\u{7}\u{202e}txt.exe",
        }))
        .unwrap(),
    );
    let stand_in = StandIn::start(Arc::new(move |_: &str| (400, hostile_error.clone()))).await;
    let (out, _) = replay(base_args(&stand_in.url(), &policy)).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(raw_controls(err.as_bytes()), Vec::<u8>::new(), "{err:?}");
    assert_eq!(
        err.lines().count(),
        1,
        "one line, no forged second: {err:?}"
    );
    assert!(
        err.contains(
            r"parse error\u{1b}[31m red\u{d}\u{a}error: forged second line\u{7}\u{202e}txt.exe"
        ),
        "{err}"
    );
    assert!(err.contains(r"bad_data\u{1b}[2J"), "{err}");

    // Labels with control characters, in a name and in a value.
    let labels = |name: &str| {
        serde_json::json!({
            "__name__": name,
            "pod": "etcd-0\u{1b}[31m\r\nforged: line",
            "we\u{1b}ird\nname": "v\u{0}\u{7f}",
            "signal": "leader",
        })
    };
    let answer = |name: &str| {
        Arc::new(
            serde_json::to_vec(&serde_json::json!({
                "status": "success",
                "data": {"resultType": "matrix", "result": [
                    {"metric": labels(name), "values": [[T0, "1"], [T0 + STEP, "1"]]}
                ]}
            }))
            .unwrap(),
        )
    };
    let (ready, value, known) = (
        answer("etcd_readiness_ready"),
        answer("etcd_readiness_signal_value"),
        answer("etcd_readiness_signal_known"),
    );
    let member = Arc::new(
        serde_json::to_vec(&serde_json::json!({
            "status": "success",
            "data": [labels("etcd_readiness_ready")],
        }))
        .unwrap(),
    );
    let stand_in = StandIn::start(Arc::new(move |path: &str| {
        if let Some(a) = index(path, &member) {
            return a;
        }
        let body = if path.contains("signal_value") {
            value.clone()
        } else if path.contains("signal_known") {
            known.clone()
        } else {
            ready.clone()
        };
        (200, body)
    }))
    .await;
    for format in ["text", "json", "svg"] {
        let mut args = base_args(&stand_in.url(), &policy);
        args.extend(["--format".into(), format.into()]);
        let (out, _) = replay(args).await;
        assert_eq!(out.status.code(), Some(0), "{format}: {}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            raw_controls(&out.stdout),
            Vec::<u8>::new(),
            "{format}: {text}"
        );
        assert!(!text.contains('\u{1b}'), "{format}");
        match format {
            "text" => assert!(
                text.contains(r#"pod="etcd-0\u{1b}[31m\u{d}\u{a}forged: line""#)
                    && text.contains(r#"we\u{1b}ird\u{a}name="v\u{0}\u{7f}""#),
                "{text}"
            ),
            // JSON keeps the exact labels, escaped the JSON way.
            "json" => {
                let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(
                    doc["members"][0]["labels"]["pod"],
                    "etcd-0\u{1b}[31m\r\nforged: line"
                );
                assert!(text.contains(r"\u001b[31m\r\nforged"), "{text}");
            }
            _ => assert!(
                text.contains(r"etcd-0\u{1b}[31m\u{d}\u{a}forged: line"),
                "{text}"
            ),
        }
    }
}

/// A stand-in whose one member `etcd-0` has the `etcd_readiness_ready`
/// series `ready` and the `leader` series `value` (each a `result` list).
async fn one_member(ready: serde_json::Value, value: serde_json::Value) -> StandIn {
    let answer = |result: serde_json::Value| {
        Arc::new(
            serde_json::to_vec(&serde_json::json!({
                "status": "success",
                "data": {"resultType": "matrix", "result": result},
            }))
            .unwrap(),
        )
    };
    let (ready, value, none) = (answer(ready), answer(value), answer(serde_json::json!([])));
    let member = Arc::new(
        br#"{"status":"success","data":[{"__name__":"etcd_readiness_ready","pod":"etcd-0"}]}"#
            .to_vec(),
    );
    StandIn::start(Arc::new(move |path: &str| {
        if let Some(a) = index(path, &member) {
            return a;
        }
        let body = if path.contains("signal_value") {
            value.clone()
        } else if path.contains("signal_known") {
            none.clone()
        } else {
            ready.clone()
        };
        (200, body)
    }))
    .await
}

/// Issue 45: a store that sent the same series twice had it merged, the
/// last one's points winning, and a value string that is not a number was
/// taken as unknown: a verdict from samples the store never had, with no
/// word. Both are now refused with an error naming the series; and what is
/// wrong with a malformed series is said, not "not a query_range result".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_refuses_a_series_sent_twice_or_a_value_that_is_not_a_number_naming_the_series() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(dir.path());
    let ready = |v: &str| {
        serde_json::json!({
            "metric": {"__name__": "etcd_readiness_ready", "pod": "etcd-0"},
            "values": [[T0, v], [T0 + STEP, v]],
        })
    };
    let leader = |v: serde_json::Value| {
        serde_json::json!([{
            "metric": {"__name__": "etcd_readiness_signal_value", "pod": "etcd-0",
                       "signal": "leader", "source": "etcd"},
            "values": [[T0, "1"], [T0 + STEP, v]],
        }])
    };
    let cases = [
        (
            serde_json::json!([ready("1"), ready("0")]),
            leader("1".into()),
            r#"has the series {__name__="etcd_readiness_ready",pod="etcd-0"} twice: replay cannot tell which one to believe"#,
        ),
        (
            serde_json::json!([ready("1")]),
            leader("yes".into()),
            r#"in the series {__name__="etcd_readiness_signal_value",pod="etcd-0",signal="leader",source="etcd"}, a value that is not a number at byte "#,
        ),
        (
            serde_json::json!([ready("1")]),
            leader(serde_json::json!(["1"])),
            r#"in the series {__name__="etcd_readiness_signal_value",pod="etcd-0",signal="leader",source="etcd"}, the value is neither a string nor a number at byte "#,
        ),
    ];
    for (ready, value, want) in cases {
        let stand_in = one_member(ready, value).await;
        let (out, _) = replay(base_args(&stand_in.url(), &policy)).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(want), "{want}\n{err}");
        assert!(!err.contains("query_range result"), "{err}");
    }

    // An index answer that is not one was called "not a query_range
    // result" too: the message names the endpoint and what is wrong.
    let bad_index = Arc::new(br#"{"status":"success","data":[7]}"#.to_vec());
    let stand_in = StandIn::start(Arc::new(move |_: &str| (200, bad_index.clone()))).await;
    let (out, _) = replay(base_args(&stand_in.url(), &policy)).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("(/api/v1/series) cannot be read: invalid type: integer `7`"),
        "{err}"
    );
}
