//! The card policy (`policies/card.policy`:
//! `leader && qget_ms < 1000 && owner_ok && rev_lag < 5000`) end to end,
//! through the real `serve` pipeline, with every signal from a real source:
//! a real 3-member etcd cluster, a real dnsmasq answering the owner TXT record,
//! and the in-test stand-in for the backup sidecar. For each of the four
//! terms: ready, then not ready naming that term with its value, then ready.

use std::process::Stdio;
use std::time::Duration;

use etcd_readiness_testkit::backup::Sidecar;
use etcd_readiness_testkit::clock::now_unix;
use etcd_readiness_testkit::dns::Dnsmasq;
use etcd_readiness_testkit::etcd::member_command;
use etcd_readiness_testkit::etcd::{EtcdCluster, read_revision, write_until_revision};
use etcd_readiness_testkit::exporter::{Exporter, Resp};
use etcd_readiness_testkit::ports::free_ports;
use etcd_readiness_testkit::process::ChildGuard;
use etcd_readiness_testkit::wait::{poll, until_some};

const OWNER: &str = "etcd-main.example.test";
const CARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/policies/card.policy");
const WAIT: Duration = Duration::from_secs(20);
/// The step of this file's polls of `/readyz`.
const STEP: Duration = Duration::from_millis(100);

async fn card_exporter(endpoint: &str, sidecar: &Sidecar, dns: &Dnsmasq) -> Exporter {
    let backup = sidecar.url.clone();
    let ns = dns.addr.to_string();
    Exporter::start(endpoint, move |a| {
        a.policy = Some(CARD.into());
        a.backup_url = Some(backup.into());
        a.owner_name = Some(OWNER.to_string());
        a.owner_id = Some("cluster-a".to_string());
        a.owner_nameserver = Some(ns);
        a.owner_interval = Duration::from_millis(300);
        a.owner_timeout = Duration::from_millis(250);
    })
    .await
}

/// The `[-]` lines of a 503 /readyz body.
fn failing(r: &Resp) -> Vec<&str> {
    r.body.lines().filter(|l| l.starts_with("[-]")).collect()
}

async fn expect_ready(e: &Exporter, why: &str) {
    let r = e.wait_for("/readyz", 200, WAIT).await;
    assert_eq!(r.status, 200, "{why}: not ready:\n{}", r.body);
}

/// Wait for a 503 whose only failing check is `term`, and return its line.
async fn expect_only_failing(e: &Exporter, term: &str) -> String {
    poll(WAIT, STEP, || async move {
        let r = e.get("/readyz").await;
        let lines = failing(&r);
        if r.status == 503
            && lines.len() == 1
            && lines[0].starts_with(&format!("[-]{term} failed: "))
        {
            return Ok(lines[0].to_string());
        }
        Err(r)
    })
    .await
    .unwrap_or_else(|r| {
        panic!(
            "expected only `{term}` to fail, got {}:\n{}",
            r.status, r.body
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn card_policy_each_term_ready_and_not_ready_with_real_sources() {
    let mut cluster = EtcdCluster::builder(3).start();
    let mut dns = Dnsmasq::start(&[(OWNER, "cluster-a")]).await;
    let sidecar = Sidecar::start().await;
    let mut client = cluster.client(0).await;
    // Wait for the cluster to elect a leader and accept a read.
    let c = &cluster;
    until_some("a leader", WAIT, || async move { c.leader().await }).await;
    let (rev, _) = read_revision(&mut client).await;
    sidecar.set(|s| {
        s.full_revision = rev;
        s.full_timestamp = now_unix();
        s.incr_revision = rev;
        s.incr_timestamp = now_unix();
    });
    let e = card_exporter(&cluster.endpoint(0), &sidecar, &dns).await;
    expect_ready(&e, "healthy cluster, owner matches, backup current").await;

    // rev_lag: etcd runs more than 5000 revisions ahead of the last snapshot.
    write_until_revision(&client, rev + 5001).await;
    let line = expect_only_failing(&e, "rev_lag").await;
    assert!(
        line.starts_with("[-]rev_lag failed: rev_lag < 5000 is false (rev_lag = "),
        "{line}"
    );
    let (rev, _) = read_revision(&mut client).await;
    sidecar.set(|s| {
        s.incr_revision = rev;
        s.incr_timestamp = now_unix();
    });
    expect_ready(&e, "a new incremental snapshot caught up").await;

    // owner_ok: the TXT record now names another cluster.
    let port = dns.addr.port();
    dns.guard.kill();
    dns = Dnsmasq::start_on(port, &[(OWNER, "cluster-b")]).await;
    let line = expect_only_failing(&e, "owner_ok").await;
    assert_eq!(line, "[-]owner_ok failed: owner_ok is false");
    dns.guard.kill();
    dns = Dnsmasq::start_on(port, &[(OWNER, "cluster-a")]).await;
    expect_ready(&e, "the owner record names us again").await;

    // qget_ms: a learner knows the leader but rejects linearizable reads.
    let learner = add_learner(&cluster).await;
    let le = card_exporter(&learner.endpoint, &sidecar, &dns).await;
    let line = expect_only_failing(&le, "qget_ms").await;
    assert!(
        line.starts_with("[-]qget_ms failed: qget_ms unknown: last sample failed "),
        "{line}"
    );
    let leader_signal = le.signal("leader").await;
    assert_eq!(leader_signal["value"], true, "{leader_signal}");
    drop(le);
    drop(learner);

    // leader: quorum lost; the survivor knows no leader (and so cannot read).
    let r = e.get("/readyz").await;
    assert_eq!(r.status, 200, "{}", r.body);
    cluster.kill(1);
    cluster.kill(2);
    e.wait_for("/readyz", 503, WAIT).await;
    let lost = "[-]leader failed: leader is false";
    let r = e
        .wait_until("/readyz", WAIT, |r| r.body.contains(lost))
        .await;
    assert!(
        r.body.contains(lost),
        "leader never reported lost:\n{}",
        r.body
    );
    assert!(!r.body.contains("[-]owner_ok"), "{}", r.body);
    cluster.restart(1);
    cluster.restart(2);
    expect_ready(&e, "quorum restored").await;
    drop(dns);
}

struct Learner {
    endpoint: String,
    _guard: ChildGuard,
    _dir: tempfile::TempDir,
}

/// `member add --learner`, then start that member joining the cluster.
async fn add_learner(cluster: &EtcdCluster) -> Learner {
    let ports = free_ports(2).unwrap();
    let (client_port, peer_port) = (ports[0], ports[1]);
    let peer = format!("http://127.0.0.1:{peer_port}");
    let endpoint = format!("http://127.0.0.1:{client_port}");
    let c = cluster.client(0).await;
    // etcd refuses membership changes until every member has been connected
    // for a few seconds ("unhealthy cluster"): retry until a deadline.
    let added = poll(WAIT, Duration::from_millis(250), || {
        let (mut c, peer) = (c.clone(), peer.clone());
        async move {
            let opts = etcd_client::MemberAddOptions::new().with_is_learner();
            match c.member_add([peer], Some(opts)).await {
                Ok(_) => Ok(()),
                Err(e) if e.to_string().contains("unhealthy cluster") => Err(e),
                Err(e) => panic!("member add --learner: {e}"),
            }
        }
    })
    .await;
    if let Err(e) = added {
        panic!("member add --learner: {e}");
    }
    let mut initial: Vec<String> = cluster
        .members
        .iter()
        .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
        .collect();
    initial.push(format!("learner={peer}"));
    let dir = tempfile::tempdir().unwrap();
    let child = member_command(
        &etcd_readiness_testkit::etcd::default_etcd(),
        "learner",
        &dir.path().join("learner.etcd"),
        &endpoint,
        &peer,
        &initial.join(","),
    )
    .args(["--initial-cluster-state", "existing"])
    .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("start the learner");
    Learner {
        endpoint,
        _guard: ChildGuard::new(child, "etcd learner"),
        _dir: dir,
    }
}
