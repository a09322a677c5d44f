//! A real scrape of a real exporter (against a real etcd) passes the real
//! `promtool check metrics`, in both content types.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::prometheus::promtool_bin;

fn promtool(scrape: &str) -> (i32, String) {
    let mut child = Command::new(promtool_bin())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrape_passes_promtool_in_both_formats() {
    let cluster = EtcdCluster::builder(1).start();
    let e = Exporter::start(&cluster.endpoint(0), |_| {}).await;
    assert_eq!(
        e.wait_for("/readyz", 200, Duration::from_secs(30))
            .await
            .status,
        200
    );
    // Make sure every family has samples (HTTP requests, sample rounds).
    e.get("/livez").await;

    let text = e.get("/metrics").await;
    assert!(
        text.content_type == "text/plain; version=0.0.4; charset=utf-8",
        "{}",
        text.content_type
    );
    for family in [
        "etcd_readiness_ready 1",
        "# TYPE etcd_readiness_transitions_total counter",
        "etcd_readiness_check_passing{check=\"leader\",kind=\"check\"} 1",
        "etcd_readiness_signal_known{signal=\"leader\",source=\"etcd\"} 1",
        "# TYPE etcd_readiness_sample_duration_seconds histogram",
        "# TYPE process_cpu_seconds_total counter",
        "# TYPE etcd_readiness_build_info gauge",
    ] {
        assert!(
            text.body.contains(family),
            "missing {family:?}:\n{}",
            text.body
        );
    }
    let (code, out) = promtool(&text.body);
    assert_eq!((code, out.as_str()), (0, ""), "text 0.0.4:\n{}", text.body);

    let om = e
        .get_accept(
            "/metrics",
            Some("application/openmetrics-text; version=1.0.0"),
        )
        .await;
    assert!(
        om.content_type == "application/openmetrics-text; version=1.0.0; charset=utf-8",
        "{}",
        om.content_type
    );
    assert!(om.body.ends_with("# EOF\n"));
    let (code, out) = promtool(&om.body);
    // promtool 2.42 lints with the text 0.0.4 parser. In OpenMetrics a counter
    // family `x` (HELP/TYPE) has the sample `x_total`, which that parser reads
    // as a second family without help. That is the only finding we accept,
    // and only for counters whose OpenMetrics family does carry a HELP line.
    for line in out.lines() {
        let name = line
            .strip_suffix(" no help text")
            .unwrap_or_else(|| panic!("promtool on OpenMetrics: {line}\n{out}"));
        let family = name.strip_suffix("_total").expect(name);
        assert!(
            om.body.contains(&format!("# TYPE {family} counter\n"))
                && om.body.contains(&format!("# HELP {family} ")),
            "{line}"
        );
    }
    // promtool exits 3 for lint findings and 0 without: whichever the output
    // says, the exit code must agree with it (a crash or usage error is not
    // accepted).
    let expected = if out.is_empty() { 0 } else { 3 };
    assert_eq!(code, expected, "{out}");
}
