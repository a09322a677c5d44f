//! The etcd source's event paths against real etcd members: a lost
//! connection makes every etcd signal unknown at once (and a returning one
//! is sampled at once), and a pending linearizable read fails
//! `qget_ms < 1000` when it has waited 1000 ms, before its own timeout.
//!
//! Each test sets the sampling so slow that no scheduled Status or read can
//! explain what it waits for: only the event path can. Waits are bounded by
//! deadlines; nothing asserts how long anything took.

use std::time::Duration;

use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::Exporter;

const READY: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_makes_the_etcd_signals_unknown_at_once_and_a_returning_one_is_sampled_at_once()
 {
    let mut cluster = EtcdCluster::builder(1).start();
    // Status and the reads every 6 minutes (a tenth of the interval): after
    // the first ones, nothing scheduled runs during this test.
    let e = Exporter::start(&cluster.endpoint(0), |a| {
        a.sample_interval = Duration::from_secs(3600);
        a.sample_timeout = Duration::from_secs(2);
    })
    .await;
    let r = e.wait_for("/readyz", 200, READY).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(e.signal("leader").await["value"], true);

    cluster.kill(0);
    let r = e
        .wait_until("/readyz?verbose", READY, |r| {
            r.status == 503 && r.body.contains("connection to etcd lost")
        })
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.body
            .contains("[-]leader failed: leader unknown: last sample failed")
            && r.body.contains("connection to etcd lost: "),
        "{}",
        r.body
    );
    // Every etcd signal says so on /signals, and etcd_up is known false.
    for name in ["leader", "qget_ms", "sget_ms", "raft_index"] {
        let s = e.signal(name).await;
        assert!(s["value"].is_null(), "{name}: {s}");
        let err = s.to_string();
        assert!(err.contains("connection to etcd lost"), "{name}: {s}");
    }
    assert_eq!(e.signal("etcd_up").await["value"], false);
    let scrape = e.get("/metrics").await.body;
    assert!(
        scrape.contains("etcd_readiness_sample_errors_total{source=\"etcd\",reason=\"connect\"}"),
        "{scrape}"
    );

    // Back: the watch re-opens and Status and the reads run at once, not
    // six minutes later.
    cluster.restart(0);
    let r = e.wait_for("/readyz?verbose", 200, READY).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(e.signal("etcd_up").await["value"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_read_fails_the_threshold_with_its_own_explanation_before_its_timeout() {
    let mut cluster = EtcdCluster::builder(1).start();
    // Reads and Status every 6 s with a 30 s timeout: a frozen member's read
    // times out only 30 s after it was sent, and Status signals stay known
    // that long. What fails first is the bound: 1000 ms pending.
    let e = Exporter::start(&cluster.endpoint(0), |a| {
        a.sample_interval = Duration::from_secs(60);
        a.sample_timeout = Duration::from_secs(30);
    })
    .await;
    let r = e.wait_for("/readyz", 200, READY).await;
    assert_eq!(r.status, 200, "{}", r.body);

    cluster.stop(0);
    // Status and the reads run on loops of their own, each every 6 s: which
    // is sent first after the freeze is chance. Wait for the read's bound.
    let r = e
        .wait_until("/readyz?verbose", Duration::from_secs(25), |r| {
            r.status == 503 && r.body.contains("[-]linearizable_read failed: ")
        })
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    let line = r
        .body
        .lines()
        .find(|l| l.starts_with("[-]linearizable_read failed: "))
        .unwrap_or_else(|| panic!("{}", r.body));
    assert!(
        line.contains("qget_ms < 1000 is false (qget_ms ≥ ")
            && line.contains(": read pending for "),
        "{line}"
    );
    assert!(!r.body.contains("timed out"), "{}", r.body);
    // The leader check passes on Status's last answer while it is trusted,
    // and at worst has it outdated: never a timeout, 30 s away.
    assert!(
        r.body.contains("[+]leader ok") || r.body.contains("the last answer is outdated"),
        "{}",
        r.body
    );
    // /signals shows the read in flight next to the last answer.
    let q = e.signal("qget_ms").await;
    assert!(q["value"].is_number(), "{q}");
    assert_eq!(q["pending"]["what"], "read", "{q}");
    assert!(q["pending"]["at_least"].as_f64() >= Some(1000.0), "{q}");

    cluster.cont(0);
    let r = e.wait_for("/readyz", 200, READY).await;
    assert_eq!(r.status, 200, "{}", r.body);
}
