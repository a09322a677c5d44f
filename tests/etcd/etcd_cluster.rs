//! End-to-end: the exporter against real etcd clusters (healthy, leader
//! killed, quorum lost, frozen member, NOSPACE, mTLS, no raft writes).

use std::time::Duration;

use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::{Exporter, metric_value};
use etcd_readiness_testkit::pki;
use etcd_readiness_testkit::wait::poll;

const READY: Duration = Duration::from_secs(30);

/// Signal `name` from a `/signals` body.
fn signal_in(body: &str, name: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(body).expect("/signals is JSON");
    v.as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name).cloned())
        .unwrap_or(serde_json::Value::Null)
}

/// One exporter per member of `cluster`, each ready.
async fn ready_exporters(cluster: &EtcdCluster) -> Vec<Exporter> {
    ready_exporters_with(cluster, false).await
}

/// One exporter per member of `cluster`, each ready; with `metrics`, each
/// also reads its member's own metrics (the default: `--etcd.metrics-url`
/// is the client port's `/metrics`), without, the flag is empty.
async fn ready_exporters_with(cluster: &EtcdCluster, metrics: bool) -> Vec<Exporter> {
    let mut exporters = Vec::new();
    for endpoint in cluster.endpoints() {
        exporters.push(
            Exporter::start(&endpoint, |a| {
                if !metrics {
                    a.etcd_metrics_url = Some(String::new().into());
                }
            })
            .await,
        );
    }
    for (i, e) in exporters.iter().enumerate() {
        let r = e.wait_for("/readyz", 200, READY).await;
        assert_eq!(r.status, 200, "member {i}: {}", r.body);
    }
    exporters
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_cluster_every_member_is_ready_in_verbose_and_json() {
    let cluster = EtcdCluster::builder(3).start();
    let mut exporters = Vec::new();
    for i in 0..3 {
        exporters.push(Exporter::start(&cluster.endpoint(i), |_| {}).await);
    }
    for (i, e) in exporters.iter().enumerate() {
        let r = e.wait_for("/readyz", 200, READY).await;
        assert_eq!(r.status, 200, "member {i}: {}\n{}", r.body, cluster.log(i));
        assert_eq!(r.body, "ok");
        let v = e.get("/readyz?verbose").await;
        assert_eq!(v.status, 200);
        assert!(v.body.contains("[+]linearizable_read ok\n"), "{}", v.body);
        assert!(v.body.ends_with("readyz check passed\n"), "{}", v.body);
        let j = e.get_accept("/readyz", Some("application/json")).await;
        assert!(
            j.content_type.starts_with("application/json"),
            "{}",
            j.content_type
        );
        let j: serde_json::Value = serde_json::from_str(&j.body).unwrap();
        assert_eq!(j["ready"], true);
        let checks = j["checks"].as_array().unwrap();
        assert!(checks.iter().all(|c| c["state"] == "pass"), "{j}");
    }
    // Exactly one of them is leader.
    let mut leaders = 0;
    for e in &exporters {
        if e.signal("is_leader").await["value"] == true {
            leaders += 1;
        }
    }
    assert_eq!(leaders, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_survivors_are_ready_again_once_a_new_leader_exists() {
    let mut cluster = EtcdCluster::builder(3).start();
    let exporters = ready_exporters(&cluster).await;
    let leader = cluster.leader().await.expect("a leader");
    cluster.kill(leader);
    for (i, e) in exporters.iter().enumerate() {
        if i == leader {
            let r = e.wait_for("/readyz", 503, READY).await;
            assert_eq!(r.status, 503, "killed member's exporter: {}", r.body);
            continue;
        }
        // A survivor may never have left service (the election credit and
        // the `leader` hold cover a short election), so wait for what the
        // name says: a new leader seen, then ready.
        let elected = poll(READY, Duration::from_millis(50), || async move {
            let changes = e.signal("leader_changes").await["value"].as_f64();
            let leader = e.signal("leader").await["value"] == true;
            match changes {
                Some(c) if c >= 1.0 && leader => Ok(()),
                _ => Err(e.get("/signals").await.body),
            }
        })
        .await;
        if let Err(signals) = elected {
            panic!(
                "survivor {i} saw no new leader: {signals}\n{}",
                cluster.log(i)
            );
        }
        let r = e.wait_for("/readyz", 200, READY).await;
        assert_eq!(
            r.status,
            200,
            "survivor {i}: {}\n{}",
            r.body,
            cluster.log(i)
        );
    }
}

/// Regression: a leader election took every survivor out of
/// service. Their linearizable reads waited for the new leader longer than
/// the 100 ms trust, while a read sent then was answered once the election
/// ended, as etcd's own probes showed. A follower that was serving and
/// keeps answering Status now earns the election credit (its pending read
/// is trusted up to 1 s), and the default policy holds `leader` for 1 s
/// (a candidate has no leader): with a 250 ms election timeout the new
/// leader is there well within both, and no survivor's readiness changes;
/// the quorum read never stops passing. Each member has two exporters, one
/// without and one with its metrics (where the credit also needs a peer
/// count read after the read started, asked for while it waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survivors_of_a_leader_kill_stay_ready_through_the_election() {
    let mut cluster = EtcdCluster::builder(3).timings(25, 250).start();
    let plain = ready_exporters(&cluster).await;
    let with_metrics = ready_exporters_with(&cluster, true).await;
    // A member whose metrics URL is refused (etcd answers 404 for a path it
    // does not serve): no check fails, and the credit is decided without
    // the peer count it never read.
    let mut refused = Vec::new();
    for endpoint in cluster.endpoints() {
        let url = format!("{endpoint}/refused/metrics");
        let e = Exporter::start(&endpoint, |a| a.etcd_metrics_url = Some(url.into())).await;
        let r = e.wait_for("/readyz", 200, READY).await;
        assert_eq!(
            r.status, 200,
            "{endpoint} with /metrics refused: {}",
            r.body
        );
        let peers = e.signal("active_peers").await;
        assert!(peers["value"].is_null(), "a refused /metrics gave {peers}");
        refused.push(e);
    }
    let leader = cluster.leader().await.expect("a leader");
    let killed_at = etcd_readiness_testkit::clock::now_unix();
    cluster.kill(leader);
    let survivors = || {
        let tag = |kind: &'static str| move |(i, e)| (format!("{i} ({kind})"), i, e);
        (plain.iter().enumerate().map(tag("without metrics")))
            .chain(with_metrics.iter().enumerate().map(tag("with metrics")))
            .chain(refused.iter().enumerate().map(tag("metrics refused")))
            .filter(|(_, i, _)| *i != leader)
    };
    // A new leader, seen by every survivor's exporters.
    let survivors = &survivors;
    let elected = poll(READY, Duration::from_millis(50), || async move {
        for (name, _, e) in survivors() {
            let changes = e.signal("leader_changes").await["value"].as_f64();
            if !changes.is_some_and(|c| c >= 1.0) {
                return Err((name, e.get("/signals").await.body));
            }
        }
        Ok(())
    })
    .await;
    if let Err((name, signals)) = elected {
        panic!("survivor {name} saw no new leader: {signals}");
    }
    // Settled: one more second for any late transition to be recorded.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (name, i, e) in survivors() {
        let body = e.get("/history").await.body;
        let h: serde_json::Value = serde_json::from_str(&body).unwrap();
        let changed: Vec<&serde_json::Value> = h["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["at"].as_f64().unwrap() >= killed_at)
            .filter(|t| t["kind"] == "readiness" || t["name"] == "linearizable_read")
            .collect();
        assert!(
            changed.is_empty(),
            "survivor {name} changed readiness during the election: {changed:?}\n/readyz?verbose: {}\n/signals: {}\n{}",
            e.get("/readyz?verbose").await.body,
            e.get("/signals").await.body,
            cluster.log(i)
        );
    }
}

/// The cluster's leader once it has one (within [`READY`]), or a panic
/// with the members' log tails.
async fn elected(cluster: &EtcdCluster) -> usize {
    poll(READY, Duration::from_millis(100), || async move {
        cluster.leader().await.ok_or(())
    })
    .await
    .unwrap_or_else(|()| panic!("no leader: {}", cluster.log_tails()))
}

/// The exporter answers not ready, naming the linearizable read, within
/// [`READY`].
async fn out_naming_the_read(e: &Exporter) {
    let r = e
        .wait_until("/readyz?verbose", READY, |r| {
            r.status == 503 && r.body.contains("[-]linearizable_read")
        })
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
}

/// What an exporter's `/signals` showed of its pending linearizable read.
#[derive(Clone, Copy, Default)]
struct PendingSeen {
    /// How many samples showed one pending.
    seen: usize,
    /// The longest trust one had.
    trust: f64,
    /// The longest a credited one (trusted 1 s or more) had waited.
    credited_wait: f64,
}

/// Every 20 ms for 3 s, each exporter's pending linearizable read.
async fn pending_reads<const N: usize>(exporters: [&Exporter; N]) -> [PendingSeen; N] {
    let mut out = [PendingSeen::default(); N];
    for _ in 0..150 {
        for (e, o) in exporters.iter().zip(out.iter_mut()) {
            let q = e.signal("qget_ms").await;
            if let Some(t) = q["pending"]["trusted_seconds"].as_f64() {
                o.seen += 1;
                o.trust = o.trust.max(t);
                if t >= 1.0 {
                    let waited = q["pending"]["seconds"].as_f64().unwrap_or(0.0);
                    o.credited_wait = o.credited_wait.max(waited);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    out
}

/// The survivor of a lost quorum keeps no election credit when its metrics
/// are read: its peers' connections closed, and the peer count
/// asked for while its read waits shows none, so its pending read keeps
/// the normal 100 ms trust, or loses a credit given on a count read just
/// before the kill at the next one (asked for every 100 ms while credited;
/// a scrape's deadline here is 250 ms). `/signals` shows what a pending
/// read is trusted for. Beside it, an exporter of the same member without
/// its metrics keeps the credit to its end (1 s) — which this test could
/// not tell apart if the observation were broken — as the metrics read on
/// their own 1 s cadence, without asking, did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_quorums_survivor_gets_no_election_credit_where_its_peers_are_read() {
    let mut cluster = EtcdCluster::builder(3).start();
    let leader = elected(&cluster).await;
    let survivor = (leader + 1) % 3;
    let endpoint = cluster.endpoint(survivor);
    let plain = Exporter::start(&endpoint, |a| {
        a.etcd_metrics_url = Some(String::new().into())
    })
    .await;
    // The default: the member's own /metrics on its client port.
    let read = Exporter::start(&endpoint, |_| {}).await;
    for e in [&plain, &read] {
        assert_eq!(e.wait_for("/readyz", 200, READY).await.status, 200);
    }
    let peers = read
        .wait_until("/signals", READY, |r| {
            r.body.contains("\"active_peers\"")
                && signal_in(&r.body, "active_peers")["value"] == 2.0
        })
        .await;
    assert_eq!(
        signal_in(&peers.body, "active_peers")["value"],
        2.0,
        "{}",
        peers.body
    );
    for i in 0..3 {
        if i != survivor {
            cluster.kill(i);
        }
    }
    let [plain_seen, read_seen] = pending_reads([&plain, &read]).await;
    let (plain_trust, credited_wait, read_pending) =
        (plain_seen.trust, read_seen.credited_wait, read_seen.seen);
    let explain = format!(
        "/signals with metrics: {}\n/signals without: {}\n{}",
        read.get("/signals").await.body,
        plain.get("/signals").await.body,
        cluster.log(survivor)
    );
    assert!(read_pending > 0, "no pending read seen: {explain}");
    assert!(
        credited_wait < 0.8,
        "a read was still credited after waiting {credited_wait} s with no peer left: {explain}"
    );
    assert_eq!(
        plain_trust, 1.0,
        "without its metrics the survivor gets the credit: {explain}"
    );
    out_naming_the_read(&read).await;
}

/// In a five-member cluster a quorum needs two peers besides the member:
/// the leader and two followers killed, each of the two survivors still
/// sees the other (one active peer), and no election can end. The credit
/// asks for a quorum's peers, counted from the member list etcd answers,
/// so a survivor's pending read is not credited: it keeps the normal
/// trust and the member is not ready, the quorum read named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_member_clusters_minority_survivor_gets_no_election_credit() {
    let mut cluster = EtcdCluster::builder(5).start();
    let leader = elected(&cluster).await;
    let survivors = [(leader + 1) % 5, (leader + 2) % 5];
    let e = Exporter::start(&cluster.endpoint(survivors[0]), |_| {}).await;
    assert_eq!(e.wait_for("/readyz", 200, READY).await.status, 200);
    // The member list has answered (the identity's name comes from it), so
    // the credit knows the cluster's five voting members.
    let named = |body: &str| {
        body.lines()
            .any(|l| l.starts_with("etcd_readiness_member_info{") && !l.contains("name=\"\""))
    };
    let listed = e.wait_until("/metrics", READY, |r| named(&r.body)).await;
    assert!(named(&listed.body), "no member name: {}", listed.body);
    let peers = e
        .wait_until("/signals", READY, |r| {
            signal_in(&r.body, "active_peers")["value"] == 4.0
        })
        .await;
    assert_eq!(
        signal_in(&peers.body, "active_peers")["value"],
        4.0,
        "{}",
        peers.body
    );
    for i in (0..5).filter(|i| !survivors.contains(i)) {
        cluster.kill(i);
    }
    let [seen] = pending_reads([&e]).await;
    let (credited_wait, pending) = (seen.credited_wait, seen.seen);
    let explain = format!(
        "/signals: {}\n{}",
        e.get("/signals").await.body,
        cluster.log(survivors[0])
    );
    assert!(pending > 0, "no pending read seen: {explain}");
    assert!(
        credited_wait < 0.8,
        "a read was credited for {credited_wait} s with one peer of four left: {explain}"
    );
    out_naming_the_read(&e).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_lost_survivor_fails_naming_the_read_then_recovers() {
    let mut cluster = EtcdCluster::builder(3).start();
    let e = Exporter::start(&cluster.endpoint(0), |_| {}).await;
    assert_eq!(e.wait_for("/readyz", 200, READY).await.status, 200);
    cluster.kill(1);
    cluster.kill(2);
    // 2 intervals + timeout is 750ms; etcd needs an election timeout (500ms)
    // to notice. Allow generously more: speed belongs in benchmarks. The
    // leader check may fail a round before the read does: wait for both.
    let r = e
        .wait_until("/readyz", Duration::from_secs(10), |r| {
            r.status == 503 && r.body.contains("[-]linearizable_read failed: qget_ms")
        })
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.body.contains("[-]linearizable_read failed: qget_ms"),
        "{}",
        r.body
    );
    assert!(r.body.ends_with("readyz check failed\n"), "{}", r.body);
    // Regression: the serializable read is answered by the
    // member alone; its answer used to be recorded only once the
    // linearizable read beside it timed out, so without quorum it was
    // "outdated" in every round and serializable_read flapped. Over 30
    // probes without quorum it passes every time.
    for i in 0..30 {
        let r = e.get("/readyz/serializable_read").await;
        assert_eq!(
            r.status,
            200,
            "probe {i} of /readyz/serializable_read without quorum: {}\n/readyz?verbose: {}",
            r.body,
            e.get("/readyz?verbose").await.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.restart(1);
    cluster.restart(2);
    let r = e.wait_for("/readyz", 200, READY).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_member_readyz_answers_not_ready_and_livez_stays_ok() {
    let mut cluster = EtcdCluster::builder(3).start();
    let e = Exporter::start(&cluster.endpoint(0), |_| {}).await;
    assert_eq!(e.wait_for("/readyz", 200, READY).await.status, 200);
    cluster.stop(0);
    // Each GET has a 5s deadline in the helper: /readyz never waits on etcd.
    // First the pending calls outdate the last answers, then they time out.
    let r = e
        .wait_until("/readyz?verbose", Duration::from_secs(10), |r| {
            r.status == 503 && r.body.contains("timed out")
        })
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("timed out"), "{}", r.body);
    let l = e.get("/livez?verbose").await;
    assert_eq!(l.status, 200, "{}", l.body);
    cluster.cont(0);
    assert_eq!(e.wait_for("/readyz", 200, READY).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nospace_alarm_is_a_warning_not_unreadiness() {
    let cluster = EtcdCluster::builder(1).quota(2_000_000).start();
    let e = Exporter::start(&cluster.endpoint(0), |_| {}).await;
    assert_eq!(e.wait_for("/readyz", 200, READY).await.status, 200);
    let mut c = cluster.client(0).await;
    let value = vec![b'x'; 100_000];
    let mut refused = false;
    for i in 0..200 {
        match c.put(format!("fill/{i}"), value.clone(), None).await {
            Ok(_) => {}
            Err(err) => {
                assert!(err.to_string().contains("space"), "{err}");
                refused = true;
                break;
            }
        }
    }
    assert!(refused, "etcd never raised NOSPACE");
    let exporter = &e;
    let raised = poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async move {
            let s = exporter.signal("alarm_nospace").await;
            if s["value"] == true { Ok(()) } else { Err(s) }
        },
    )
    .await;
    if let Err(s) = raised {
        panic!("alarm_nospace never true: {s}");
    }
    let r = e.get("/readyz?verbose").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body
            .contains("[+]nospace ok (warning: !alarm_nospace is false"),
        "{}",
        r.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_reads_through_tls_and_a_wrong_ca_is_a_clear_tls_error() {
    let pki = pki::make_pki();
    let cluster = EtcdCluster::builder(1).tls(pki.etcd_server_tls()).start();
    let good = Exporter::start(&cluster.endpoint(0), |a| {
        a.etcd_cacert = Some(pki.path("ca.pem"));
        a.etcd_cert = Some(pki.path("client.pem"));
        a.etcd_key = Some(pki.path("client-key.pem"));
    })
    .await;
    let r = good.wait_for("/readyz", 200, READY).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));
    let bad = Exporter::start(&cluster.endpoint(0), |a| {
        a.etcd_cacert = Some(pki.path("other-ca.pem"));
        a.etcd_cert = Some(pki.path("client.pem"));
        a.etcd_key = Some(pki.path("client-key.pem"));
    })
    .await;
    // Wait for the first round to fail (the verdict says `starting` until then).
    let bad_ref = &bad;
    let failed = poll(READY, Duration::from_millis(100), || async move {
        let s = bad_ref.signal("leader").await;
        if s["last_error"].is_null() {
            Err(s)
        } else {
            Ok(s)
        }
    })
    .await;
    // Timed out: the assertion below says what the signal holds.
    let s = failed.unwrap_or_else(|s| s);
    let err = s["last_error"].as_str().unwrap_or_default().to_string();
    assert!(err.contains("TLS error"), "{s}");
    let r = bad.wait_for("/readyz/leader", 503, READY).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("TLS error"), "{}", r.body);
    println!("wrong CA: {}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_alone_does_not_grow_the_raft_index() {
    let cluster = EtcdCluster::builder(1).start();
    let e = Exporter::start(&cluster.endpoint(0), |_| {}).await;
    assert_eq!(e.wait_for("/readyz", 200, READY).await.status, 200);
    // etcd publishes its member attributes and cluster version through raft
    // shortly after start; wait until the index settles.
    let last = std::cell::Cell::new(e.signal("raft_index").await["value"].as_f64().unwrap());
    let (exporter, last) = (&e, &last);
    // A probe is one second apart from the one before: the index settled
    // when it did not move in that second.
    let settled = poll(Duration::from_secs(10), Duration::ZERO, || async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = exporter.signal("raft_index").await["value"]
            .as_f64()
            .unwrap();
        if now == last.replace(now) {
            Ok(())
        } else {
            Err(now)
        }
    })
    .await;
    if let Err(now) = settled {
        panic!("raft index never settled: {now}");
    }
    let rounds_before = sample_rounds(&e).await;
    let start = e.signal("raft_index").await["value"].as_f64().unwrap();
    let sampled = poll(
        Duration::from_secs(15),
        Duration::from_millis(200),
        || async move {
            let rounds = sample_rounds(exporter).await;
            if rounds >= rounds_before + 8.0 {
                Ok(())
            } else {
                Err(rounds)
            }
        },
    )
    .await;
    if let Err(rounds) = sampled {
        panic!("sampler stalled: {rounds} rounds, {rounds_before} before");
    }
    let after = e.signal("raft_index").await["value"].as_f64().unwrap();
    assert_eq!(start, after, "8 sample rounds grew the raft index");
}

async fn sample_rounds(e: &Exporter) -> f64 {
    let series = "etcd_readiness_sample_duration_seconds_count{source=\"etcd\"}";
    metric_value(&e.get("/metrics").await.body, series).unwrap_or(0.0)
}

/// The recovery hold end to end: a member restarted under a live cluster is
/// not ready at its first good quorum read but only once the read has
/// answered well for the whole hold, and says so meanwhile. (The exporter's
/// own start is held the same way.) Nothing here measures time in the test:
/// the hold is read from the exporter's own history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_member_is_ready_only_after_its_recovery_hold_and_says_so_meanwhile() {
    const HOLD_SECS: f64 = 4.0;
    let mut cluster = EtcdCluster::builder(3).start();
    // Whether or not it is the leader: if it is, the others elect a new one
    // while it is down.
    let member = 0;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("held.policy");
    std::fs::write(
        &policy,
        "check leader: leader\ncheck linearizable_read: qget_ms < 1000 recover 4s\n",
    )
    .unwrap();
    let e = Exporter::start(&cluster.endpoint(member), |a| a.policy = Some(policy)).await;
    let r = e.wait_for("/readyz", 200, READY).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(member));

    cluster.kill(member);
    let r = e.wait_for("/readyz", 503, READY).await;
    assert_eq!(r.status, 503, "the killed member's exporter: {}", r.body);
    cluster.restart(member);

    // Back: the quorum read answers, but the hold keeps the member out and
    // the explanation says where it stands, in text and in JSON. The read
    // and Status are separate calls: the read may be answered (and the hold
    // start) while the first Status since the restart is still pending, so
    // wait for both rather than read the leader check at the hold's start.
    let r = e
        .wait_until("/readyz?verbose", READY, |r| {
            r.body
                .contains("[-]linearizable_read failed: recovering: true for ")
                && r.body.contains("[+]leader ok\n")
        })
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("[+]leader ok\n"), "{}", r.body);
    assert!(r.body.contains(" of 4s\n"), "{}", r.body);
    let j = e.get("/readyz?format=json").await;
    let j: serde_json::Value = serde_json::from_str(&j.body).unwrap();
    let read = &j["checks"][1];
    if read["recovering"] == true {
        // (It may have passed in between the two requests.)
        assert_eq!(read["state"], "fail", "{j}");
        let (true_for, left) = (
            read["true_for"].as_f64().unwrap(),
            read["recover_left"].as_f64().unwrap(),
        );
        assert!((true_for + left - HOLD_SECS).abs() < 0.01, "{j}");
    }
    let page = e.get("/").await;
    assert!(
        page.body.contains("(recover)</small>") || page.body.contains("(recover 4s)</small>"),
        "the status page's hold-down cell shows the recovery hold:\n{}",
        page.body
    );

    let r = e.wait_for("/readyz", 200, READY).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(member));

    // The exporter's own history: after the restart, the check went from
    // unknown to recovering and passed no sooner than the hold after that.
    let h: serde_json::Value = serde_json::from_str(&e.get("/history").await.body).unwrap();
    let lane: Vec<(f64, String)> = h["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"] == "check" && t["name"] == "linearizable_read")
        .map(|t| {
            (
                t["at"].as_f64().unwrap(),
                t["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let states: Vec<&str> = lane.iter().map(|(_, s)| s.as_str()).collect();
    let n = states.len();
    assert!(n >= 2, "{lane:?}");
    assert_eq!(states[n - 2..], ["recovering", "pass"], "{lane:?}");
    assert!(
        states.iter().filter(|s| **s == "recovering").count() >= 2,
        "held at the start and again after the restart: {lane:?}"
    );
    let held_for = lane[n - 1].0 - lane[n - 2].0;
    assert!(
        held_for >= HOLD_SECS - 0.01,
        "recovering for {held_for}s, less than the hold: {lane:?}"
    );
}
