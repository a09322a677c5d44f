//! A cluster stretched over a slow link: every member's peer traffic crosses
//! a loopback relay that holds each chunk for a delay one way
//! (`testkit::slowlink`), so linearizable reads take hundreds of
//! milliseconds while every member serves. Each member's exporter (default
//! flags: `--sample.interval 1s --sample.timeout 500ms`, the member's
//! metrics read) must stay ready as the kubelet sees it through the shipped
//! stanza's period: a probe every second, each on a new connection, one not
//! answered within its 1 s timeout a failure — and, stricter, with no
//! readiness transition at all in its `/history` (a held probe would see
//! every blink).
//!
//! The window is 30 s here (`ERE_SLOW_LINK_SECONDS` sets it: the 5-minute
//! run of docs/BENCHMARKS.md), the delay 100 ms one way
//! (`ERE_SLOW_LINK_DELAY_MS`), which makes reads take up to about half the
//! default policy's `qget_ms < 1000`.

use std::time::Duration;

use etcd_readiness_exporter::cmd::localcluster::http_get;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::slowlink::slow_cluster;

const READY: Duration = Duration::from_secs(60);
const PERIOD: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one member's prober saw over the window.
#[derive(Debug, Default)]
struct Seen {
    probes: u32,
    not_ready: Vec<String>,
    slowest_read_ms: f64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_of_a_cluster_over_a_slow_link_stays_ready_through_the_probe() {
    let delay = Duration::from_millis(env_u64("ERE_SLOW_LINK_DELAY_MS", 100));
    let window = env_u64("ERE_SLOW_LINK_SECONDS", 30);
    let (cluster, _links) = slow_cluster(3, delay).await;
    let mut exporters = Vec::new();
    for endpoint in cluster.endpoints() {
        // The defaults adopters run, not the testkit's faster test timing.
        exporters.push(
            Exporter::start(&endpoint, |a| {
                a.sample_interval = Duration::from_secs(1);
                a.sample_timeout = Duration::from_millis(500);
            })
            .await,
        );
    }
    for (i, e) in exporters.iter().enumerate() {
        let r = e.wait_for("/readyz", 200, READY).await;
        assert_eq!(
            r.status, 200,
            "member {i} over a {delay:?} link: {}",
            r.body
        );
    }
    let from = etcd_readiness_testkit::clock::now_unix();
    let mut seen: Vec<Seen> = (0..exporters.len()).map(|_| Seen::default()).collect();
    for _ in 0..window {
        let t = tokio::time::Instant::now();
        for (e, s) in exporters.iter().zip(seen.iter_mut()) {
            s.probes += 1;
            match tokio::time::timeout(PROBE_TIMEOUT, http_get(e.addr(), "/readyz", None)).await {
                Ok(Ok((200, _, _))) => {}
                Ok(Ok((status, _, body))) => s.not_ready.push(format!("{status}: {body}")),
                Ok(Err(err)) => s.not_ready.push(format!("no answer: {err}")),
                Err(_) => s
                    .not_ready
                    .push(format!("not answered within {PROBE_TIMEOUT:?}")),
            }
            if let Some(ms) = e.signal("qget_ms").await["value"].as_f64() {
                s.slowest_read_ms = s.slowest_read_ms.max(ms);
            }
        }
        tokio::time::sleep_until(t + PERIOD).await;
    }
    for (i, (e, s)) in exporters.iter().zip(&seen).enumerate() {
        eprintln!(
            "member {i} over a {delay:?} link: {} probes, {} not ready, slowest read seen {:.0} ms",
            s.probes,
            s.not_ready.len(),
            s.slowest_read_ms
        );
        let h: serde_json::Value =
            serde_json::from_str(&e.get("/history").await.body).expect("/history is JSON");
        let blinks: Vec<&serde_json::Value> = h["transitions"]
            .as_array()
            .expect("transitions")
            .iter()
            .filter(|t| t["at"].as_f64().is_some_and(|at| at >= from))
            .filter(|t| t["kind"] == "readiness")
            .collect();
        assert!(
            s.not_ready.is_empty() && blinks.is_empty(),
            "member {i} over a {delay:?} link was not ready to {} of {} probes: {:?}\n\
             readiness transitions: {blinks:?}\n/signals: {}\n{}",
            s.not_ready.len(),
            s.probes,
            s.not_ready,
            e.get("/signals").await.body,
            cluster.log(i)
        );
    }
}
