//! No input from a source crashes, wedges or bloats the exporter: the
//! `serve` pipeline against a real etcd member and hostile HTTP peers (the
//! backup sidecar and a `--config` scrape source played by small servers in
//! this test). Bodies of 500 MB, endless chunked bodies and gzip bombs are
//! streamed, never allocated; each must fail its round with a reason while
//! the exporter stays alive, answers `/readyz`, and reads (and holds) only a
//! bounded number of bytes. Absurd numbers (timestamps 1e19, 1e300, NaN, in
//! the future; NaN scrape values) are unknown signals with a reason, and the
//! backup source is back to normal by itself once the sidecar is sane.
//! Absurd flags exit 2 naming the flag.

use std::time::Duration;

use etcd_readiness_testkit::backup::Sidecar;
use etcd_readiness_testkit::clock::now_unix;
use etcd_readiness_testkit::etcd::Etcd;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::hostile::{Behaviour, HostileServer, gzip_bomb, rss_kib};
use etcd_readiness_testkit::ports::free_tcp_port;
use etcd_readiness_testkit::wait::{poll, poll_blocking};

const WAIT: Duration = Duration::from_secs(20);
/// The per-connection bound asserted on what a hostile server could push:
/// the 4 MiB body limit plus the loopback socket buffers, generously.
const MAX_BYTES_PER_CONNECTION: u64 = 32 * 1024 * 1024;
/// How much the test process may grow while hostile bodies of 0.5–1 GB are
/// served: far below any body, far above the 4 MiB limit.
const MAX_RSS_GROWTH_KIB: u64 = 96 * 1024;

/// Wait until signal `name` on /signals satisfies `cond`; returns it.
async fn wait_signal(
    e: &Exporter,
    name: &str,
    what: &str,
    cond: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let cond = &cond;
    poll(WAIT, Duration::from_millis(50), || async move {
        let s = e.signal(name).await;
        if cond(&s) { Ok(s) } else { Err(s) }
    })
    .await
    .unwrap_or_else(|s| panic!("timed out waiting for {what}: {s}"))
}

fn error_has(s: &serde_json::Value, text: &str) -> bool {
    s["last_error"].as_str().is_some_and(|e| e.contains(text))
        && s["known"] == serde_json::json!(false)
}

/// The exporter is alive and its loops are: /readyz answers (whatever the
/// verdict) and /livez is 200.
async fn alive(e: &Exporter) {
    let r = e.get("/readyz").await;
    assert!(r.status == 200 || r.status == 503, "{r:?}");
    let l = e.wait_for("/livez?verbose", 200, WAIT).await;
    assert_eq!(l.status, 200, "{}", l.body);
}

fn metrics_with_full(rev: u64, ts: &str) -> Vec<u8> {
    format!(
        "etcdbr_snapshot_latest_revision{{kind=\"Full\"}} {rev}\n\
         etcdbr_snapshot_latest_timestamp{{kind=\"Full\"}} {ts}\n\
         etcdbr_snapshot_latest_revision{{kind=\"Incr\"}} 0\n\
         etcdbr_snapshot_latest_timestamp{{kind=\"Incr\"}} 0\n"
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_endless_and_compressed_bodies_are_cut_off_and_memory_stays_bounded() {
    let etcd = Etcd::start().await;
    let hostile = HostileServer::start().await;
    hostile.set("/healthz", Behaviour::Fixed(b"{\"health\":true}".to_vec()));
    hostile.set(
        "/metrics",
        Behaviour::Fixed(metrics_with_full(1, &format!("{}", now_unix() - 5.0))),
    );
    hostile.set("/scrape", Behaviour::EndlessChunked);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sources.yaml");
    std::fs::write(
        &config,
        format!(
            "sources:\n- name: endless\n  url: {}/scrape\n  interval: 1s\n  timeout: 1s\n  signals:\n    endless_value: {{metric: m}}\n",
            hostile.url()
        ),
    )
    .unwrap();
    let backup = hostile.url();
    // Timeouts long enough that even a loaded machine reads 4 MiB in time:
    // the limit, not the deadline, must be what ends each hostile round.
    let e = Exporter::start(&etcd.client_url, move |a| {
        a.backup_url = Some(backup.into());
        a.config = Some(config);
        a.sample_interval = Duration::from_secs(1);
        a.sample_timeout = Duration::from_secs(1);
    })
    .await;
    wait_signal(&e, "full_snapshot_revision", "a sane first round", |s| {
        s["value"] == serde_json::json!(1.0)
    })
    .await;
    let baseline = rss_kib();

    // The scrape source's endless chunked body: cut off at the limit.
    let s = wait_signal(&e, "endless_value", "the endless body to be cut off", |s| {
        error_has(s, "more than the limit of 4194304 bytes")
    })
    .await;
    assert!(
        s["last_error"]
            .as_str()
            .unwrap()
            .contains("the body goes on past"),
        "{s}"
    );

    // 500 MB declared: refused without reading it.
    hostile.set("/metrics", Behaviour::Declared(500 * 1000 * 1000));
    let s = wait_signal(
        &e,
        "snapshot_revision",
        "the 500 MB body to be refused",
        |s| error_has(s, "the body is 500000000 bytes long, more than the limit"),
    )
    .await;
    println!("500 MB: {s}");
    // The sidecar answered, so it is up; its snapshot facts are unknown.
    assert_eq!(
        e.signal("backup_up").await["value"],
        serde_json::json!(true)
    );
    alive(&e).await;

    // A gzip bomb (1 GiB of zeros): never decompressed.
    hostile.set("/metrics", Behaviour::Gzip(gzip_bomb(1024)));
    wait_signal(
        &e,
        "snapshot_revision",
        "the gzip bomb to be refused",
        |s| error_has(s, "Content-Encoding: gzip"),
    )
    .await;
    alive(&e).await;

    // A 500 MB body with no length, streamed to the end of the connection,
    // is the endless case for the backup source: cut off while streaming.
    hostile.set("/metrics", Behaviour::EndlessChunked);
    wait_signal(
        &e,
        "snapshot_revision",
        "the endless body to be cut off",
        |s| error_has(s, "the body goes on past"),
    )
    .await;
    alive(&e).await;

    // Bounded: what any single connection could push, and what we hold.
    let grown = rss_kib().saturating_sub(baseline);
    println!(
        "RSS baseline {baseline} KiB, grown {grown} KiB; most bytes on one connection {}",
        hostile.max_conn_bytes()
    );
    assert!(
        hostile.max_conn_bytes() < MAX_BYTES_PER_CONNECTION,
        "a connection carried {} bytes",
        hostile.max_conn_bytes()
    );
    assert!(grown < MAX_RSS_GROWTH_KIB, "RSS grew by {grown} KiB");

    // Sane again: the backup source recovers by itself.
    hostile.set(
        "/metrics",
        Behaviour::Fixed(metrics_with_full(2, &format!("{}", now_unix() - 5.0))),
    );
    wait_signal(&e, "full_snapshot_revision", "recovery", |s| {
        s["value"] == serde_json::json!(2.0)
    })
    .await;
    alive(&e).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_snapshot_timestamps_are_unknown_and_the_backup_source_recovers() {
    let etcd = Etcd::start().await;
    let sidecar = Sidecar::start().await;
    let sane = |rev: u64| {
        String::from_utf8(metrics_with_full(rev, &format!("{}", now_unix() - 30.0))).unwrap()
    };
    sidecar.set(|s| s.metrics_body = Some(sane(3)));
    let url = sidecar.url.clone();
    let e = Exporter::start(&etcd.client_url, move |a| a.backup_url = Some(url.into())).await;
    wait_signal(&e, "snapshot_age", "a sane snapshot age", |s| {
        s["value"]
            .as_f64()
            .is_some_and(|v| (25.0..120.0).contains(&v))
    })
    .await;

    // Regression: 1e19 panicked the backup sampler, which never came back.
    for (ts, why) in [
        ("1e19", "1e19 is out of range (at most 253402300799)"),
        ("1e300", "1e300 is out of range"),
        ("NaN", "NaN is not a number"),
        ("-Inf", "-inf is negative"),
    ] {
        sidecar
            .set(|s| s.metrics_body = Some(String::from_utf8(metrics_with_full(3, ts)).unwrap()));
        let s = wait_signal(&e, "snapshot_age", ts, |s| {
            error_has(s, &format!("is not a Unix time: {why}"))
        })
        .await;
        println!("timestamp {ts}: {}", s["last_error"]);
        alive(&e).await;
    }

    // An hour in the future: an error, not age 0 (an age check must not pass).
    let future = format!("{}", now_unix() + 3600.0);
    sidecar
        .set(|s| s.metrics_body = Some(String::from_utf8(metrics_with_full(3, &future)).unwrap()));
    let s = wait_signal(&e, "snapshot_age", "a future timestamp", |s| {
        error_has(s, "in the future (more than the allowed clock skew of 60s)")
    })
    .await;
    println!("future: {}", s["last_error"]);
    assert!(error_has(
        &e.signal("full_snapshot_age").await,
        "in the future"
    ));
    // The revision of that snapshot is still a fact.
    assert_eq!(
        e.signal("full_snapshot_revision").await["value"],
        serde_json::json!(3.0)
    );

    // Sane again: back by itself, /livez healthy, nothing had to restart.
    sidecar.set(|s| s.metrics_body = Some(sane(4)));
    wait_signal(&e, "snapshot_age", "recovery", |s| {
        s["known"] == serde_json::json!(true)
    })
    .await;
    let l = e.wait_for("/livez?verbose", 200, WAIT).await;
    assert_eq!(l.status, 200, "{}", l.body);
    assert!(l.body.contains("[+]sampler:backup ok"), "{}", l.body);
    assert!(!l.body.contains("restarted"), "{}", l.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nan_scrape_value_is_unknown_with_a_reason() {
    let etcd = Etcd::start().await;
    let hostile = HostileServer::start().await;
    hostile.set("/m", Behaviour::Fixed(b"a NaN\nb +Inf\nc 7\n".to_vec()));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sources.yaml");
    std::fs::write(
        &config,
        format!(
            "sources:\n- name: odd\n  url: {}/m\n  interval: 250ms\n  timeout: 250ms\n  signals:\n    a_val: {{metric: a}}\n    b_val: {{metric: b}}\n    c_val: {{metric: c}}\n",
            hostile.url()
        ),
    )
    .unwrap();
    let e = Exporter::start(&etcd.client_url, move |a| a.config = Some(config)).await;
    wait_signal(&e, "c_val", "a normal value", |s| {
        s["value"] == serde_json::json!(7.0)
    })
    .await;
    let a = e.signal("a_val").await;
    assert!(
        error_has(&a, "the source reported NaN, not a usable number"),
        "{a}"
    );
    assert_eq!(a["value"], serde_json::Value::Null);
    let b = e.signal("b_val").await;
    assert!(error_has(&b, "the source reported +Inf"), "{b}");
    alive(&e).await;
}

/// The etcd metrics source (`--etcd.metrics-url`) against a hostile
/// endpoint: an endless body is cut off at the limit, absurd gauges are
/// unknown with their values, and a sane answer is read again. Trouble
/// there never cuts traffic alone: the default policy's defrag term is
/// `!(defrag_inflight ?? false)`, so the member stays ready throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_metrics_source_cuts_off_endless_bodies_refuses_absurd_gauges_and_recovers() {
    let etcd = Etcd::start().await;
    let hostile = HostileServer::start().await;
    hostile.set("/metrics", Behaviour::EndlessChunked);
    let url = hostile.url();
    let e = Exporter::start(&etcd.client_url, move |a| {
        a.etcd_metrics_url = Some(url.into());
        a.etcd_metrics_interval = Duration::from_millis(250);
    })
    .await;
    for name in ["defrag_inflight", "db_quota_ratio", "active_peers"] {
        wait_signal(&e, name, "the endless body cut off", |s| {
            error_has(s, "more than the limit of 4194304 bytes")
        })
        .await;
    }
    let r = e.wait_for("/readyz", 200, WAIT).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(hostile.max_conn_bytes() < MAX_BYTES_PER_CONNECTION);

    let absurd = "etcd_server_has_leader 1\n\
                  etcd_disk_defrag_inflight 7\n\
                  etcd_mvcc_db_total_size_in_bytes NaN\n\
                  etcd_server_quota_backend_bytes 0\n\
                  etcd_network_active_peers{Local=\"a\",Remote=\"b\"} -Inf\n";
    hostile.set("/metrics", Behaviour::Fixed(absurd.as_bytes().to_vec()));
    let d = wait_signal(&e, "defrag_inflight", "an absurd gauge refused", |s| {
        error_has(s, "etcd_disk_defrag_inflight is 7, not 0 or 1")
    })
    .await;
    assert_eq!(d["value"], serde_json::Value::Null, "{d}");
    let q = e.signal("db_quota_ratio").await;
    assert!(
        error_has(&q, "etcd_mvcc_db_total_size_in_bytes is NaN, not a size"),
        "{q}"
    );
    let p = e.signal("active_peers").await;
    assert!(
        error_has(&p, "etcd_network_active_peers is -inf, not a size"),
        "{p}"
    );
    let r = e.get("/readyz?verbose").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("[+]not_defragmenting ok"), "{}", r.body);

    let sane = "etcd_server_has_leader 1\n\
                etcd_disk_defrag_inflight 1\n\
                etcd_mvcc_db_total_size_in_bytes 1e9\n\
                etcd_server_quota_backend_bytes 2e9\n";
    hostile.set("/metrics", Behaviour::Fixed(sane.as_bytes().to_vec()));
    wait_signal(&e, "db_quota_ratio", "a sane answer read again", |s| {
        s["value"] == serde_json::json!(0.5)
    })
    .await;
    assert_eq!(
        e.signal("active_peers").await["value"],
        serde_json::json!(0.0)
    );
    let r = e.wait_for("/readyz", 503, WAIT).await;
    assert!(
        r.body.contains("[-]not_defragmenting failed")
            || e.get("/readyz?verbose")
                .await
                .body
                .contains("[-]not_defragmenting failed"),
        "{}",
        r.body
    );
    let l = e.wait_for("/livez?verbose", 200, WAIT).await;
    assert!(!l.body.contains("restarted"), "{}", l.body);
}

/// `serve ARGS` on a free port as a process: (exit code, stderr). For flags
/// refused at start (the process exits before it serves).
fn serve_exit(args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_etcd-readiness-exporter"))
        .arg("serve")
        .args(["--web.listen-address", "127.0.0.1:0"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn absurd_flags_exit_2_naming_the_flag_and_range() {
    let run = serve_exit;
    // Regressions: this exited 101 (a panic in the duration parser) ...
    let (code, err) = run(&["--sample.interval", "9999999999999999h"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--sample.interval") && err.contains("is longer than the limit of 8784h"),
        "{err}"
    );
    // ... and this panicked the owner task at run time.
    let (code, err) = run(&[
        "--owner.name",
        "o.example",
        "--owner.id",
        "me",
        "--owner.interval",
        "2000000000000000h",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--owner.interval"), "{err}");
    let (code, err) = run(&[
        "--owner.name",
        "o.example",
        "--owner.id",
        "me",
        "--owner.interval",
        "48h",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--owner.interval 48h is out of range: allowed 100ms to 24h"),
        "{err}"
    );
    let (code, err) = run(&["--source.max-body-bytes", "99999999999999"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--source.max-body-bytes"), "{err}");
    // etcd's own settings, checked by etcd's own rules (issue 47).
    for (flags, says) in [
        (
            &["--etcd.election-timeout", "18446744073709551615"][..],
            "over etcd's maximum of 50000",
        ),
        (&["--etcd.heartbeat-interval", "0"][..], "at least 1"),
        (
            &[
                "--etcd.heartbeat-interval",
                "500",
                "--etcd.election-timeout",
                "1000",
            ][..],
            "at least 5 times --etcd.heartbeat-interval",
        ),
        (
            &["--etcd.election-timeout=-1"][..],
            "--etcd.election-timeout",
        ),
    ] {
        let (code, err) = run(flags);
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
    }
}

/// Issue 21: `--web.telemetry-path` was used as an axum route pattern:
/// `/history` panicked at start (exit 101), as did `/{`, `/a}`, `/:x` and
/// `/*x`; `/{x}` and `/{*x}` served the metrics for every unknown path;
/// `/x/{a}/{a}` left them unreachable; `/a b` and `/metrics?x=1` were
/// accepted though no request can reach them. Each now exits 2 naming the
/// flag, the value and why.
#[test]
fn telemetry_path_patterns_clashes_spaces_and_queries_exit_2_naming_the_flag() {
    for (path, why) in [
        ("/history", "already serves"),
        ("/readyz", "already serves"),
        ("/-/reload", "already serves"),
        ("/{", "route pattern"),
        ("/a}", "route pattern"),
        ("/:x", "route pattern"),
        ("/*x", "route pattern"),
        ("/{x}", "route pattern"),
        ("/{*x}", "route pattern"),
        ("/x/{a}/{a}", "route pattern"),
        ("/a b", "space"),
        ("/metrics?x=1", "query"),
        ("metrics", "must start with /"),
    ] {
        let (code, err) = serve_exit(&["--web.telemetry-path", path]);
        assert_eq!(code, Some(2), "{path:?}: {err}");
        assert!(
            err.contains(&format!("--web.telemetry-path {path:?}")) && err.contains(why),
            "{path:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{path:?}: {err}");
    }
}

/// Issue 21, item 8: `--sample.interval 1h1ms` said "1h is out of range";
/// `--etcd.endpoint http://a:1,http://b:2` was accepted at start and failed
/// later; `user:pass@` in `--etcd.endpoint` was written to the start-up log
/// line.
#[test]
fn range_messages_state_the_value_lists_are_refused_and_credentials_never_logged() {
    let run = serve_exit;
    let (code, err) = run(&["--sample.interval", "1h1ms"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--sample.interval 1h1ms is out of range: allowed 10ms to 1h"),
        "{err}"
    );
    let (code, err) = run(&["--etcd.endpoint", "http://a:1,http://b:2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--etcd.endpoint \"http://a:1,http://b:2\" is a list"),
        "{err}"
    );
    let (code, err) = run(&["--etcd.endpoint", "http://u:s3cret@a:1, http://b:2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        !err.contains("s3cret") && err.contains("<redacted>@a:1"),
        "{err}"
    );

    // Credentials in a working endpoint: never in a log line, from the
    // start-up line to the connection errors that follow.
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("log");
    let log = std::fs::File::create(&log_path).unwrap();
    let closed = free_tcp_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_etcd-readiness-exporter"))
        .arg("serve")
        .args(["--web.listen-address", "127.0.0.1:0"])
        .args([
            "--etcd.endpoint",
            &format!("http://user:s3cret@127.0.0.1:{closed}"),
        ])
        .args(["--sample.interval", "100ms", "--sample.timeout", "100ms"])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let started = poll_blocking(Duration::from_secs(30), Duration::from_millis(100), || {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if text.contains("serving") {
            Ok(())
        } else {
            Err(text)
        }
    });
    if let Err(text) = started {
        let _ = child.kill();
        panic!("no start-up line and error within 30 s:\n{text}");
    }
    // The start-up line, then a second of rounds against the endpoint.
    std::thread::sleep(Duration::from_secs(1));
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    assert!(!text.contains("s3cret"), "{text}");
    assert!(
        text.contains(&format!("<redacted>@127.0.0.1:{closed}")),
        "{text}"
    );
}
