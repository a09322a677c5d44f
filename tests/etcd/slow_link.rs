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

use std::net::SocketAddr;
use std::time::Duration;

use etcd_readiness_exporter::outside::failure::Reason;
use etcd_readiness_exporter::outside::http_client;
use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::{Exporter, post};
use etcd_readiness_testkit::slowlink::{SlowLink, slow_cluster};

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
            match http_client::get_at(e.addr(), "/readyz", None, PROBE_TIMEOUT).await {
                Ok(a) if a.status == 200 => {}
                Ok(a) => s
                    .not_ready
                    .push(format!("{}: {}", a.status.as_u16(), a.body)),
                Err(err) if err.reason == Reason::Timeout => s
                    .not_ready
                    .push(format!("not answered within {PROBE_TIMEOUT:?}")),
                Err(err) => s.not_ready.push(format!("no answer: {err}")),
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

/// A policy that accepts slower reads than the sampler's own floor gets
/// them answered, not timed out: over a 700 ms link a follower's
/// linearizable read (to the leader, a heartbeat round to confirm its
/// leadership, back) takes about 2.8 s — longer than the 1 s floor even
/// with the most contention credit (another 1 s) a busy test machine can
/// earn — and with `qget_ms < 6000` in force a follower is ready on such a
/// read (`sources::etcd::ReadFloor`), set by a reload. Wiring only: the floor's arithmetic
/// is unit-tested. The election timeout is long enough for votes to cross
/// the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_slower_than_the_floor_count_where_the_policy_accepts_them() {
    let delay = Duration::from_millis(700);
    let mut links = Vec::new();
    for _ in 0..3 {
        links.push(SlowLink::bind().await.expect("bind a slow link"));
    }
    let cluster = EtcdCluster::builder(3)
        .timings(100, 5000)
        .advertise_peers(links.iter().map(SlowLink::port).collect())
        .start();
    for (link, m) in links.iter_mut().zip(&cluster.members) {
        link.forward(SocketAddr::from(([127, 0, 0, 1], m.peer_port)), delay);
    }
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("stretched.policy");
    let write = |bound: u32| {
        let text = format!("check leader: leader\ncheck linearizable_read: qget_ms < {bound}\n");
        std::fs::write(&policy, text).unwrap();
    };
    // Started with the shipped bound, then reloaded with a longer one: the
    // reads follow the reload.
    write(1000);
    let mut exporters = Vec::new();
    for endpoint in cluster.endpoints() {
        let policy = policy.clone();
        exporters.push(Exporter::start(&endpoint, |a| a.policy = Some(policy)).await);
    }
    write(6000);
    for e in &exporters {
        let (status, body) = post(e.addr(), "/-/reload").await;
        assert_eq!(status, 200, "POST /-/reload: {body}");
    }
    // Some member (a follower) is ready on a read answered after over 2 s.
    let seen = etcd_readiness_testkit::wait::poll(READY, Duration::from_millis(200), || {
        let exporters = &exporters;
        async move {
            let mut last = Vec::new();
            for e in exporters {
                let ms = e.signal("qget_ms").await["value"].as_f64();
                let ready = e.get("/readyz").await;
                if ms.is_some_and(|ms| ms > 2000.0) && ready.status == 200 {
                    return Ok(());
                }
                last.push(format!(
                    "qget_ms {ms:?}, /readyz {} {}",
                    ready.status, ready.body
                ));
            }
            Err(last)
        }
    })
    .await;
    if let Err(last) = seen {
        for (i, e) in exporters.iter().enumerate() {
            e.explain(&format!("member {i}")).await;
            eprintln!("{}", cluster.log(i));
        }
        panic!("no member was ready on a read slower than 2 s: {last:?}");
    }
}
